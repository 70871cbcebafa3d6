//! Every peer on a tiny spec, a missing Redis, and children that fail or hang.
//!
//! The multi-process peers start this binary again as their children, so it has its own
//! `main` (`harness = false`) that serves as a child when asked to, before any test.
//! Each check runs in turn; the last line says how many passed and failed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use megalon_peers::{run, ChildError, ChildFault, Peer, PeerError, PeerResult, PeerSpec, Rates};

/// A spec that runs in a moment: 2 workers, 1,000 keys of 1 KiB, a get-only and a
/// put-only phase of 0.2 s each, files in `dir`.
fn tiny(dir: &Path) -> PeerSpec {
    PeerSpec {
        keys: 1000,
        phase_seconds: 0.2,
        wait_seconds: 20.0,
        dir: dir.to_path_buf(),
        ..PeerSpec::default()
    }
}

/// A new empty directory for one check's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("megalon-peers-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Fails unless it is empty (every pod file and environment removed).
    fn assert_left_nothing(&self) {
        let left: Vec<_> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            left.is_empty(),
            "left behind in {}: {left:?}",
            self.0.display()
        );
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The children this process has not reaped (Linux; none known elsewhere).
fn unreaped_children() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn redis_installed() -> bool {
    std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok()
}

/// The peer ran, both phases have nonzero rates, and every worker read the check keys
/// back as written.
fn assert_measured(result: &PeerResult) {
    let rates = match &result.outcome {
        Ok(rates) => rates,
        Err(error) => panic!("{} failed: {error}", result.peer.name()),
    };
    assert!(rates.get_ops_per_second.unwrap() > 0.0, "{rates:?}");
    assert!(rates.put_ops_per_second.unwrap() > 0.0, "{rates:?}");
    assert!(rates.load_ops_per_second > 0.0, "{rates:?}");
    assert_eq!(rates.phases.len(), 2);
    assert_eq!(rates.phases[0].puts, 0, "a get-only phase did puts");
    assert_eq!(rates.phases[1].gets, 0, "a put-only phase did gets");
    assert_eq!(rates.keys_checked, 8, "{rates:?}");
    assert_eq!(result.workers, 2);
}

fn each_available_peer_measures_and_reads_back_what_it_wrote() {
    for peer in Peer::ALL {
        if peer == Peer::Redis && !redis_installed() {
            println!("    (redis-server is not installed: Redis is checked by the next test only)");
            continue;
        }
        let dir = Scratch::new("measure");
        let result = run(peer, &tiny(&dir.0));
        println!(
            "    {}: {:?}",
            peer.name(),
            result
                .outcome
                .as_ref()
                .map(|r| (r.get_ops_per_second, r.put_ops_per_second))
        );
        assert_measured(&result);
        assert!(!result.notes.is_empty());
        dir.assert_left_nothing();
        assert_eq!(unreaped_children(), Vec::<String>::new());
    }
}

fn a_missing_redis_is_unavailable_with_how_to_install() {
    let dir = Scratch::new("no-redis");
    let spec = PeerSpec {
        redis_server: PathBuf::from("megalon-peers-no-such-redis-server"),
        ..tiny(&dir.0)
    };
    match run(Peer::Redis, &spec).outcome {
        Err(PeerError::Unavailable {
            reason,
            how_to_install,
        }) => {
            assert!(
                reason.contains("megalon-peers-no-such-redis-server"),
                "{reason}"
            );
            assert!(
                how_to_install.contains("apt-get install redis-server"),
                "{how_to_install}"
            );
            assert!(
                how_to_install.contains("brew install redis"),
                "{how_to_install}"
            );
        }
        other => panic!("expected Unavailable: {other:?}"),
    }
    dir.assert_left_nothing();
}

/// Runs `peer` on `spec` (made from the tiny spec) with files in a new scratch directory
/// `name`: the run must end within 15 s and leave no file and no child behind. Returns its
/// outcome.
fn run_bounded(
    peer: Peer,
    name: &str,
    spec: impl FnOnce(PeerSpec) -> PeerSpec,
) -> Result<Rates, PeerError> {
    let dir = Scratch::new(name);
    let began = Instant::now();
    let outcome = run(peer, &spec(tiny(&dir.0))).outcome;
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "{:?}",
        began.elapsed()
    );
    dir.assert_left_nothing();
    assert_eq!(unreaped_children(), Vec::<String>::new());
    outcome
}

fn a_child_that_exits_fails_its_peer_with_its_stderr() {
    for peer in [Peer::MegalonProcesses, Peer::Lmdb] {
        let exits = |spec| PeerSpec {
            child_fault: Some(ChildFault::Exit),
            ..spec
        };
        match run_bounded(peer, "exit", exits) {
            Err(PeerError::Child(ChildError::Exited {
                name,
                status,
                stderr,
            })) => {
                assert!(name.ends_with("child 1"), "{name}");
                assert_eq!(status.code(), Some(3));
                assert!(stderr.contains("on purpose"), "{stderr}");
            }
            other => panic!(
                "{}: expected the child to have exited: {other:?}",
                peer.name()
            ),
        }
    }
}

fn a_child_that_hangs_fails_its_peer_in_bounded_time() {
    for peer in [Peer::MegalonProcesses, Peer::Lmdb] {
        let hangs = |spec| PeerSpec {
            child_fault: Some(ChildFault::Hang),
            wait_seconds: 1.0,
            ..spec
        };
        match run_bounded(peer, "hang", hangs) {
            Err(PeerError::Child(ChildError::TimedOut { names, stderr, .. })) => {
                assert_eq!(names.len(), 1, "{names:?}");
                assert!(names[0].ends_with("child 1"), "{names:?}");
                assert!(stderr.contains("on purpose"), "{stderr}");
            }
            other => panic!("{}: expected a time-out: {other:?}", peer.name()),
        }
    }
}

fn main() {
    megalon_peers::run_child_if_requested();
    let checks: [(&str, fn()); 4] = [
        (
            "each_available_peer_measures_and_reads_back_what_it_wrote",
            each_available_peer_measures_and_reads_back_what_it_wrote,
        ),
        (
            "a_missing_redis_is_unavailable_with_how_to_install",
            a_missing_redis_is_unavailable_with_how_to_install,
        ),
        (
            "a_child_that_exits_fails_its_peer_with_its_stderr",
            a_child_that_exits_fails_its_peer_with_its_stderr,
        ),
        (
            "a_child_that_hangs_fails_its_peer_in_bounded_time",
            a_child_that_hangs_fails_its_peer_in_bounded_time,
        ),
    ];
    let mut failed = 0;
    for (name, check) in checks {
        println!("test {name} ...");
        let began = Instant::now();
        match std::panic::catch_unwind(check) {
            Ok(()) => println!(
                "test {name} ... ok ({:.1} s)",
                began.elapsed().as_secs_f64()
            ),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{} passed, {failed} failed", checks.len() - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
