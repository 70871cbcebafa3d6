//! What the examples share: how an example ends on an error (one line, `error: ...`, and
//! a failing exit code), how a `--memory` flag is read, the flags of the KV store
//! examples ([`kv_args`]) and the report they print ([`report`]).
//!
//! Every example includes this module with `mod common;` and uses part of it, so each
//! build of it leaves some items unused.
#![allow(dead_code)]

pub mod kv_args;
pub mod report;

use std::error::Error;
use std::process::ExitCode;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use megalon::core::memory::MEMORY_KIND_NAMES;
use megalon::core::MemoryKind;

/// What an example's body returns.
pub type Result<T = (), E = Box<dyn Error>> = std::result::Result<T, E>;

/// The exit code of an example whose body returned `result`: success, or its error
/// printed on stderr as one line ([`error_line`]) and a failure.
pub fn exit_code(result: Result) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}", error_line(&*error));
            ExitCode::FAILURE
        }
    }
}

/// The `main` of an example that takes no flags of its own: parses `A` (so that `--help`
/// prints the example's doc and any flag is refused), then runs `body`.
pub fn main_without_flags<A: clap::Parser>(body: impl FnOnce() -> Result) -> ExitCode {
    A::parse();
    exit_code(body())
}

/// `A` parsed from `flags`, as `main` parses an example's command line (for tests).
#[cfg(test)]
pub fn parse_flags<A: clap::Parser>(flags: &[&str]) -> std::result::Result<A, clap::Error> {
    let name = A::command().get_name().to_owned();
    A::try_parse_from(std::iter::once(name.as_str()).chain(flags.iter().copied()))
}

/// An example's body `run` on `flags`, as `main` runs it on its command line (for tests).
#[cfg(test)]
pub fn run_with<A: clap::Parser>(flags: &[&str], run: impl FnOnce(&A) -> Result) -> Result {
    run(&parse_flags(flags)?)
}

/// The line an example prints when its body `run` fails on `flags` ([`error_line`]); a
/// panic if it succeeds (for tests).
#[cfg(test)]
pub fn failure<A: clap::Parser>(flags: &[&str], run: impl FnOnce(&A) -> Result) -> String {
    match run_with(flags, run) {
        Ok(()) => panic!("{flags:?} succeeded"),
        Err(error) => error_line(&*error),
    }
}

/// `error: ` and the error's own text, its lines joined: what an example prints when it
/// fails.
pub fn error_line(error: &dyn Error) -> String {
    let text = error.to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    format!("error: {}", lines.join(" / "))
}

/// The value parser of a `--memory` flag: one of the names megalon's core reads
/// ([`MEMORY_KIND_NAMES`], listed by `--help` and by the error for any other name),
/// parsed by [`MemoryKind`]'s `FromStr`.
pub fn memory_kind() -> impl TypedValueParser<Value = MemoryKind> {
    PossibleValuesParser::new(MEMORY_KIND_NAMES).try_map(|name| name.parse::<MemoryKind>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_one_line_after_error() {
        let error: Box<dyn Error> = "the host table holds at most 64".into();
        assert_eq!(
            error_line(&*error),
            "error: the host table holds at most 64"
        );
        let error: Box<dyn Error> = "host 1 exited; its stderr:\nerror: no pod\n".into();
        assert_eq!(
            error_line(&*error),
            "error: host 1 exited; its stderr: / error: no pod"
        );
        assert_eq!(exit_code(Err(error)), ExitCode::FAILURE);
        assert_eq!(exit_code(Ok(())), ExitCode::SUCCESS);
    }

    #[test]
    fn memory_is_read_by_the_core_s_names() {
        #[derive(clap::Parser)]
        struct Flags {
            #[arg(long, default_value = "hardware", value_parser = memory_kind())]
            memory: MemoryKind,
        }
        let parse = |args: &[&str]| {
            <Flags as clap::Parser>::try_parse_from(
                std::iter::once("test").chain(args.iter().copied()),
            )
        };
        assert_eq!(parse(&[]).unwrap().memory, MemoryKind::Hardware);
        assert_eq!(
            parse(&["--memory", "simulated"]).unwrap().memory.name(),
            "simulated"
        );
        let refused = parse(&["--memory", "coherent"]).err().unwrap().to_string();
        assert!(
            refused.contains("[possible values: hardware, simulated, cxl]"),
            "{refused}"
        );
    }
}
