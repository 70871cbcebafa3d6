//! `cargo xtask <command>`: the project's automation, in Rust so it runs wherever cargo
//! does.
//!
//! - `ci`: everything CI runs, in order: formatting, clippy with warnings denied, the
//!   README's test command, a build of every bench and example, and the README's first
//!   command.

use std::process::{Command, ExitCode};
use std::time::Instant;

/// The README's test command.
const TEST_COMMAND: &[&str] = &["test", "--workspace"];
/// The README's first command.
const FIRST_COMMAND: &[&str] = &["run", "--example", "quickstart"];

fn usage() -> ExitCode {
    eprintln!(
        "usage: cargo xtask <command>\n\n\
         commands:\n  \
         ci    formatting, clippy -D warnings, the tests, bench and example builds, the first example"
    );
    ExitCode::from(2)
}

/// Runs `cargo <args>`, printing the command and how long it took. Returns whether it
/// succeeded.
fn cargo(args: &[&str]) -> bool {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    println!("\n==> cargo {}", args.join(" "));
    let started = Instant::now();
    let status = Command::new(&cargo).args(args).status();
    let seconds = started.elapsed().as_secs_f64();
    match status {
        Ok(status) if status.success() => {
            println!("<== cargo {} ok in {seconds:.1} s", args.join(" "));
            true
        }
        Ok(status) => {
            eprintln!(
                "<== cargo {} FAILED ({status}) after {seconds:.1} s",
                args.join(" ")
            );
            false
        }
        Err(error) => {
            eprintln!("<== could not run {cargo}: {error}");
            false
        }
    }
}

fn ci() -> ExitCode {
    let started = Instant::now();
    let steps: &[&[&str]] = &[
        &["fmt", "--all", "--", "--check"],
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        TEST_COMMAND,
        &["build", "--workspace", "--benches", "--examples"],
        FIRST_COMMAND,
    ];
    for step in steps {
        if !cargo(step) {
            eprintln!("\nci: failed at `cargo {}`", step.join(" "));
            return ExitCode::FAILURE;
        }
    }
    println!(
        "\nci: all steps passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        _ => usage(),
    }
}
