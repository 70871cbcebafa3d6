//! `cargo xtask figures` (this binary, built in release): the paper's experiments rerun on this machine, scaled to fit.
//!
//! The paper's setup is 18M objects of 1 KiB, a 200 MB SCR, 3 hosts. Here the object
//! count is scaled down (1M by default, `--scale` multiplies it, `--quick` divides it)
//! and every size the paper ties to it is scaled by the same factor: the SCR, the
//! dataset sweeps, the SCR sweep. Ratios that decide the outcome stay the paper's:
//! dataset to SCR, object size, skew, write mix, key size, record width.
//!
//! Each figure writes a CSV and SVG charts into the output directory, and rows into
//! `summary.md` there: our ratio next to the paper's, with the counters per operation
//! that explain a difference. This file is the command line; the harness that builds,
//! loads and runs the schemes is `megalon_bench::runner`; each figure is a module of
//! [`figures`].

mod figures;
mod numa;
mod plot;

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use megalon_bench::runner::{self, Harness, Settings};
use megalon_core::limits::MAX_SLOTS;
use megalon_core::{CxlModel, MemoryKind};

use figures::{Figure, FIGURES};
use numa::Placement;

/// Figures `--cxl` does not put under the model: they compare megalon with programs that
/// have no CXL memory, in processes of their own.
const NOT_MODELED: [&str; 2] = ["peers", "resp"];

/// Objects at the default scale.
const DEFAULT_OBJECTS: f64 = 1e6;
/// Objects with `--quick`.
const QUICK_OBJECTS: f64 = 40e3;
/// The longest run, in seconds: a year.
const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// The command line.
struct Args {
    quick: bool,
    scale: f64,
    numa: bool,
    only: Option<Vec<String>>,
    out: Option<PathBuf>,
    seconds: Option<f64>,
    threads_per_host: usize,
    cxl: Option<CxlModel>,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, String> {
        let mut parsed = Args {
            quick: false,
            scale: 1.0,
            numa: false,
            only: None,
            out: None,
            seconds: None,
            threads_per_host: 2,
            cxl: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                "--quick" => parsed.quick = true,
                "--numa" => parsed.numa = true,
                "--cxl" => parsed.cxl = Some(CxlModel::default()),
                "--memory" => {
                    let v = value("--memory")?;
                    parsed.cxl = match v.parse::<MemoryKind>() {
                        Ok(MemoryKind::Hardware) => None,
                        Ok(MemoryKind::Cxl(model)) => Some(model),
                        Ok(other) => {
                            return Err(format!(
                                "--memory {v}: the figures do not run on {other} memory"
                            ))
                        }
                        Err(e) => return Err(format!("--memory: {e}")),
                    };
                }
                "--scale" => parsed.scale = positive("--scale", &value("--scale")?)?,
                "--only" => {
                    let v = value("--only")?;
                    parsed.only = Some(v.split(',').map(|s| s.trim().to_string()).collect());
                }
                "--out" => parsed.out = Some(PathBuf::from(value("--out")?)),
                "--seconds" => {
                    let v = value("--seconds")?;
                    let seconds = positive("--seconds", &v)?;
                    // Past what a `Duration` holds (1e300), the first run panicked.
                    if seconds > MAX_SECONDS {
                        return Err(format!("--seconds {v}: at most {MAX_SECONDS} (a year)"));
                    }
                    parsed.seconds = Some(seconds);
                }
                "--threads" => {
                    let v = value("--threads")?;
                    parsed.threads_per_host = v
                        .parse()
                        .ok()
                        .filter(|t| *t > 0)
                        .ok_or_else(|| format!("--threads {v}: not a positive count"))?;
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        // More objects than a pod has slots can run no scheme; far more (--scale 1e12)
        // overflowed the sizes made from them (a panic in a debug build).
        if parsed.objects() > MAX_SLOTS as f64 {
            return Err(format!(
                "--scale {:e}: {:e} objects, more than a pod's {MAX_SLOTS} slots",
                parsed.scale,
                parsed.objects()
            ));
        }
        Ok(parsed)
    }

    /// Objects at `--quick`'s size or the default, times `--scale`.
    fn objects(&self) -> f64 {
        let objects = if self.quick {
            QUICK_OBJECTS
        } else {
            DEFAULT_OBJECTS
        };
        objects * self.scale
    }

    /// The harness's settings: sizes, seconds per run and where the files go, from
    /// `--quick`, `--scale`, `--seconds`, `--threads` and `--out`.
    fn settings(&self, pod_node: Option<u32>) -> Settings {
        let out = self.out.clone().unwrap_or_else(|| {
            PathBuf::from(match (self.quick, self.cxl.is_some()) {
                (true, false) => "target/figures-quick",
                (true, true) => "target/figures-quick-cxl",
                (false, false) => "docs/figures",
                (false, true) => "docs/figures-cxl",
            })
        });
        Settings {
            objects: self.objects(),
            seconds: self.seconds.unwrap_or(if self.quick { 0.3 } else { 3.0 }),
            threads_per_host: self.threads_per_host,
            pod_node,
            cxl: self.cxl,
            out,
        }
    }

    /// The figures `--only` names (all without it), in the paper's order.
    fn selected(&self) -> Vec<&'static (&'static str, &'static str, Figure)> {
        FIGURES
            .iter()
            .filter(|(id, _, _)| self.only.as_ref().is_none_or(|o| o.iter().any(|s| s == id)))
            .collect()
    }
}

/// `v` as a positive, finite number, or an error naming `flag`.
fn positive(flag: &str, v: &str) -> Result<f64, String> {
    v.parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s > 0.0)
        .ok_or_else(|| format!("{flag} {v}: not a positive number"))
}

const USAGE: &str =
    "usage: cargo xtask figures [--quick] [--scale F] [--only 4,7,...] [--seconds S]
                            [--threads PER_HOST] [--out DIR] [--numa] [--cxl | --memory M]

  --quick     every figure at 1/25 of the default size, 0.3 s per run (83 s on 2 cores)
  --scale F   F times the default size (1M objects, 1/18 of the paper's 18M)
  --only      some figures: 4 5 6 7 8 9 10 11 12 13 14 15 peers resp
  --seconds   seconds per run (default 3; 0.3 with --quick)
  --threads   threads per host (default 2; 3 hosts)
  --out       where CSV, SVG and summary.md go (default docs/figures; target/figures-quick
              with --quick)
  --numa      bind the pod to the first NUMA node and each host's threads to another
              node's CPUs (a single-node machine says so and runs unpinned)
  --cxl       every host of every scheme under the CXL cost model (docs/memory.md), with
              its default parameters; into docs/figures-cxl (target/figures-quick-cxl
              with --quick) unless --out says otherwise
  --memory M  hardware (the default), cxl, or cxl:name=value,... (the model's
              parameters: lnr_miss_ns, write_back_ns, scr_ns, lines_in_flight,
              cache_bytes)";

fn main() -> ExitCode {
    // The peers' child processes are this binary too.
    megalon_peers::run_child_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    runner::command_main(USAGE, &args, Args::parse, run)
}

/// Runs the figures; returns whether all of them ran.
fn run(args: &Args) -> bool {
    let placement = if args.numa { placement() } else { None };
    let selected = args.selected();
    if selected.is_empty() {
        let names: Vec<&str> = FIGURES.iter().map(|(id, _, _)| *id).collect();
        eprintln!("--only names no figure (figures: {})", names.join(" "));
        return false;
    }
    let settings = args.settings(placement.as_ref().map(|p| p.pod_node));
    if let Err(e) = fs::create_dir_all(&settings.out) {
        eprintln!("{}: {e}", settings.out.display());
        return false;
    }
    let out = settings.out.clone();
    let mut h = Harness::new(settings, move |host| {
        if let Some(p) = &placement {
            p.pin(host);
        }
    });
    for (_, _, figure) in &selected {
        figure(&mut h).expect("counting runs builds nothing");
    }
    h.start();
    println!("figures: {}", h.describe());
    if args.cxl.is_some() {
        for (id, _, _) in selected
            .iter()
            .filter(|(id, _, _)| NOT_MODELED.contains(id))
        {
            println!(
                "figure {id}: on hardware memory, not under the model (its peers, LMDB and \
                 Redis, have no CXL memory to model)"
            );
        }
    }
    let started = Instant::now();
    let mut ok = run_figures(&mut h, &selected);
    h.bar().finish_and_clear();
    let summary = h.summary();
    print!("\n{summary}");
    if let Err(e) = h.write("summary.md", &summary) {
        eprintln!("{e}");
        ok = false;
    }
    println!(
        "\nfigures: {} in {:.1} s; CSV, SVG and summary.md in {}",
        if ok { "all ran" } else { "SOME FAILED" },
        started.elapsed().as_secs_f64(),
        out.display()
    );
    ok
}

/// `--numa`'s placement, or none (and why) on a machine that cannot have one.
fn placement() -> Option<Placement> {
    match Placement::detect() {
        Ok(p) => {
            println!("--numa: {}", p.describe());
            Some(p)
        }
        Err(why) => {
            println!("--numa: {why}");
            None
        }
    }
}

/// Runs each figure of `selected`, saying how long it took or why it failed; returns
/// whether all of them ran.
fn run_figures(h: &mut Harness, selected: &[&(&str, &str, Figure)]) -> bool {
    let mut ok = true;
    for (id, name, figure) in selected {
        let began = Instant::now();
        match figure(h) {
            Ok(()) => h.bar().suspend(|| {
                println!(
                    "figure {id} ({name}): done in {:.1} s",
                    began.elapsed().as_secs_f64()
                )
            }),
            Err(e) => {
                h.bar()
                    .suspend(|| println!("figure {id} ({name}): FAILED: {e}"));
                ok = false;
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Args::parse(&args).err().expect("refused")
    }

    #[test]
    fn sizes_and_seconds_past_what_a_run_holds_are_refused_by_name() {
        assert_eq!(
            refusal(&["--seconds", "1e300"]),
            "--seconds 1e300: at most 31536000 (a year)"
        );
        assert!(refusal(&["--quick", "--scale", "1e12"]).starts_with("--scale 1e12: 4e16 objects"));
        assert!(refusal(&["--scale", "1e300"]).starts_with("--scale 1e300: "));
        assert!(Args::parse(&["--scale".into(), "4000".into()]).is_ok());
    }
}
