//! `cargo xtask <command>`: the project's automation, in Rust so it runs wherever cargo
//! does.
//!
//! - `ci`: everything CI runs, in order: formatting, clippy with warnings denied, the
//!   README's test command, the page cache's tests of failed appends (with the core's
//!   chaos hooks), a build of every bench and example, the README's first
//!   command (the KV store example), the KV store across processes (small), the pod
//!   tour, every figure of the harness (`--quick`), the stress (plain and with chaos),
//!   the crash stress (short), the loom models (short), and the protocol mutants.
//! - `loom`: the loom models of the atomic protocols (`--cfg megalon_loom`).
//! - `mutants`: for each protocol step, with that one step switched off, the tests named
//!   for it (`CATCHERS`) must fail; `--full` runs the whole suite per step instead.
//! - `figures`: the paper's experiments rerun at a scale that fits the machine (the
//!   `megalon-figures` binary, built in release): a CSV, SVG charts and summary rows
//!   per figure; `--quick` runs all of them in a few minutes.
//! - `model-check`: the CXL cost model checked against itself (the `model-check` binary
//!   of `megalon-figures`): the object paths on a hardware pod and on a pod under the
//!   model, in alternating blocks; ends `cxl model: predicted P ns/op, measured M ns/op,
//!   within K%` and fails past 10%. CI runs it after the figures.
//! - `stress`: several hosts and threads over one pod, a recorded history, checked for
//!   linearizability, then every record and object checked with the hosts quiet; ends
//!   with one line saying so (exit 0) or naming the first violation and the seed that
//!   reproduces it (exit 1). `--chaos` preempts threads at the protocol's points and makes
//!   log appends fail, at seeded rates.
//! - `death-sweep`: a host's death at every chaos point of each operation
//!   (`tests/death_sweep.rs`, every sweep: about 6 minutes here); each death recovered and the
//!   pod checked after it. The test runs CI makes take its `sample` only.
//! - `crash`: several host processes on one pod file, one killed with SIGKILL about every
//!   second and replaced by one that joins again; every process's history (on disk, so a
//!   killed one's too) merged and checked for linearizability. Ends with one line saying
//!   how many hosts were killed and how many operations were checked (exit 0), or the
//!   violation and the seed (exit 1).

use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// The README's test command.
const TEST_COMMAND: &[&str] = &["test", "--workspace"];
/// Every death of `tests/death_sweep.rs` (CI's test runs take its `sample` only).
const DEATH_SWEEP_COMMAND: &[&str] = &[
    "test",
    "--release",
    "-p",
    "megalon-core",
    "--features",
    "chaos",
    "--test",
    "death_sweep",
    "--",
    "--include-ignored",
];
/// The README's first command.
const FIRST_COMMAND: &[&str] = &["run", "--release", "--example", "kv"];
/// The KV store across processes, small.
const CLUSTER_COMMAND: &[&str] = &[
    "run",
    "--release",
    "--example",
    "kv_cluster",
    "--",
    "--keys",
    "20000",
    "--seconds",
    "1",
];
/// The pod tour.
const QUICKSTART_COMMAND: &[&str] = &["run", "--example", "quickstart"];
/// Every figure, small (into target/figures-quick).
const FIGURES_QUICK_COMMAND: &[&str] =
    &["run", "--release", "-p", "megalon-figures", "--", "--quick"];
/// The CXL cost model's check (about a second once built).
const MODEL_CHECK_COMMAND: &[&str] = &[
    "run",
    "--release",
    "-p",
    "megalon-figures",
    "--bin",
    "model-check",
];
/// Where loom builds go, so they do not invalidate the normal build.
const LOOM_TARGET_DIR: &str = "target/loom";
/// Where `cargo xtask aarch64` builds (its own, so the host's builds are not redone).
const AARCH64_TARGET_DIR: &str = "target/aarch64";
/// Where mutant builds go (the `mutants` feature changes the core crate).
const MUTANTS_TARGET_DIR: &str = "target/mutants";

fn usage() -> ExitCode {
    eprintln!(
        "usage: cargo xtask <command>\n\n\
         commands:\n  \
         ci        formatting, clippy -D warnings, tests, bench and example builds, the first\n            \
                   example, figures (quick), stresses and crash (short), loom (short), mutants\n  \
         loom      the loom models [--max-preemptions N] (default 3)\n  \
                  mutants   per protocol step switched off, the tests named for it must fail\n            \
                   [--full: the whole suite per step]\n  \
         figures   the paper's experiments, scaled: CSV, SVG and a summary per figure
            \
                   [--quick] [--scale F] [--only 4,7] [--numa] (--help for all)
  \
         model-check  the CXL cost model's added time per operation against its prediction\n            \
                   [--memory cxl:name=value,...] [--predict cxl:...] (--help for all)\n  \
         stress    [--seconds S] [--hosts H] [--threads T] [--seed N] [--record-bits 2|4|8|16|32]\n            \
                   [--memory simulated|hardware] [--coherence split|all-log]\n            \
                   [--partition-after N] [--copy-after N] [--keys N] [--key-bytes N]\n            \
                   [--eviction-one-in N] [--reads-and-writes] [--chaos] [--no-combining]\n            \
                   [--switch-width-every-ms MS] [--undo]: a checked concurrent history (--chaos:\n            \
                   preemptions and injected faults; --no-combining: each thread appends for\n            \
                   itself; --switch-width-every-ms: the record width switched that often;\n            \
                   --undo: writes keep undo images and announce their locks)\n  \
         aarch64   the library crates checked for aarch64 Linux: clippy -D warnings (all\n            \
                   targets) and a build of the core (its `asm!` assembled); adds the target\n            \
                   with rustup if missing. Not a run: nothing here executes aarch64 code\n  \
         crash     [--seconds S] [--seed N] [--hosts H] [--keys N] [--memory simulated|hardware]\n            \
                   [--record-bits 2|4|8|16|32] [--partition-after N] [--copy-after N]\n            \
                   [--doomed-joins PERCENT] [--switch-width-every-ms MS]:\n            \
                   host processes killed (SIGKILL) and rejoining, a checked history\n            \
                   (--switch-width-every-ms: each worker switches the record width that often)\n  \
         death-sweep  a host frozen to death at every chaos point of each operation (first\n            \
                   three hits), recovered, and the pod checked after each (about 6 minutes)"
    );
    ExitCode::from(2)
}

fn cargo_command() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Runs `cargo <args>` with extra environment, printing the command and how long it took.
fn cargo_with(args: &[&str], env: &[(&str, &str)]) -> bool {
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    println!("\n==> {}cargo {}", shown.concat(), args.join(" "));
    let started = Instant::now();
    let status = cargo_command()
        .args(args)
        .envs(env.iter().copied())
        .status();
    let seconds = started.elapsed().as_secs_f64();
    match status {
        Ok(status) if status.success() => {
            println!("<== ok in {seconds:.1} s");
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
            eprintln!("<== could not run cargo: {error}");
            false
        }
    }
}

fn cargo(args: &[&str]) -> bool {
    cargo_with(args, &[])
}

/// The aarch64 target's triple.
const AARCH64: &str = "aarch64-unknown-linux-gnu";

/// The library crates (and their tests, benches and examples of their own) checked for
/// aarch64 Linux, where the core's `arch` module has its own flushes, fences and stores:
/// clippy with warnings denied, then a build of the core's library, which assembles its
/// `asm!` (a check does not). Nothing is linked or run (that needs a cross linker and an
/// aarch64 machine or an emulator; under `qemu-user` on x86 the memory is x86's, and its
/// `/proc` and `madvise` are its own, so a run there says little of either).
fn aarch64() -> bool {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l == AARCH64)
        });
    if !installed {
        println!("\n==> rustup target add {AARCH64}");
        let added = Command::new("rustup")
            .args(["target", "add", AARCH64])
            .status()
            .is_ok_and(|status| status.success());
        if !added {
            eprintln!("aarch64: could not add the target {AARCH64} with rustup");
            return false;
        }
    }
    let env = [("CARGO_TARGET_DIR", AARCH64_TARGET_DIR)];
    let crates = [
        "-p",
        "megalon-core",
        "-p",
        "megalon-kv",
        "-p",
        "megalon-pagecache",
        "-p",
        "megalon-server",
    ];
    let mut clippy = vec!["clippy", "--target", AARCH64];
    clippy.extend(crates);
    clippy.extend(["--all-targets", "--", "-D", "warnings"]);
    cargo_with(&clippy, &env)
        && cargo_with(
            &["build", "--target", AARCH64, "-p", "megalon-core", "--lib"],
            &env,
        )
}

fn loom(max_preemptions: &str) -> bool {
    cargo_with(
        &["test", "-p", "megalon-core", "--lib", "--release", "loom_"],
        &[
            ("RUSTFLAGS", "--cfg megalon_loom"),
            ("CARGO_TARGET_DIR", LOOM_TARGET_DIR),
            ("LOOM_MAX_PREEMPTIONS", max_preemptions),
            // A lookup without the lock loads more atomics (the probe, the arena's chunk
            // pointer, the seqlock's version) than loom's default path of 1000 allows.
            ("LOOM_MAX_BRANCHES", "20000"),
        ],
    )
}

/// The tests a mutant run executes: the core crate's, with the switches compiled in, and
/// with chaos (the tests that stretch a window with a hook, and the chaos stresses).
const MUTANT_TEST: &[&str] = &[
    "test",
    "-p",
    "megalon-core",
    "--features",
    "mutants,chaos",
    "--no-fail-fast",
];

/// For each protocol step, tests (test target, test name) that fail with it switched off,
/// from a `--full` run (docs/mutants.md lists every test each step fails): `cargo xtask
/// mutants` runs these for each step, `cargo xtask mutants --full` the whole suite. A
/// step is caught when one of them fails; the unmutated run checks that all pass.
const CATCHERS: &[(&str, &[(&str, &str)])] = &[
    (
        "log-write-back-before-publish",
        &[
            (
                "log_two_process",
                "processes_append_concurrently_and_converge_with_simulated_memory",
            ),
            ("stress", "stress_short_with_keys_over_32_bytes"),
        ],
    ),
    (
        "log-invalidate-before-read",
        &[
            (
                "hardening",
                "a_created_object_is_read_whole_on_another_host",
            ),
            (
                "all_log",
                "a_reader_overlapping_a_write_in_progress_retries",
            ),
        ],
    ),
    (
        "replay-drops-lines",
        &[
            (
                "replica_convergence",
                "replay_drops_the_lines_of_a_slot_another_host_reused",
            ),
            (
                "hardening",
                "a_deallocating_host_drops_its_own_old_lines_of_the_object",
            ),
        ],
    ),
    (
        "read-tail-check",
        &[
            (
                "objects",
                "a_reader_in_the_middle_of_a_deleted_object_retries_and_finds_it_gone",
            ),
            (
                "objects",
                "a_write_on_one_host_is_read_on_another_without_stale_lines",
            ),
        ],
    ),
    (
        "pre-read-check",
        &[
            (
                "objects",
                "a_partial_write_over_stale_lines_keeps_the_other_hosts_bytes",
            ),
            (
                "objects",
                "a_write_on_one_host_is_read_on_another_without_stale_lines",
            ),
        ],
    ),
    (
        "post-read-record-check",
        &[
            (
                "objects",
                "a_copy_torn_by_a_write_in_progress_is_refused_by_the_record",
            ),
            ("stress", "stress_short"),
        ],
    ),
    (
        "post-read-event-check",
        &[
            (
                "all_log",
                "a_reader_overlapping_a_write_in_progress_retries",
            ),
            (
                "objects",
                "a_reader_in_the_middle_of_a_deleted_object_retries_and_finds_it_gone",
            ),
        ],
    ),
    (
        "write-event-check-after-lock",
        &[
            (
                "windows",
                "a_writer_that_locks_a_record_reassigned_since_its_lookup_backs_out",
            ),
            (
                "windows",
                "a_losing_allocator_frees_its_record_by_cas_under_a_stale_writers_lock",
            ),
            (
                "windows",
                "a_writer_whose_own_host_applies_a_delete_and_create_of_its_key_before_its_lock_backs_out",
            ),
            (
                "windows",
                "an_update_whose_lookup_a_full_counter_cycle_follows_starts_from_its_end",
            ),
        ],
    ),
    (
        "writer-invalidates-stale-lines",
        &[(
            "objects",
            "an_update_and_a_tickets_read_over_stale_lines_see_the_current_version",
        )],
    ),
    (
        "write-back-before-unlock",
        &[
            ("all_log", "a_write_reaches_memory_before_its_unlock"),
            (
                "crash",
                "no_path_of_the_protocol_leaves_a_dirty_line_in_a_hosts_cache",
            ),
            (
                "hardening",
                "a_write_ticket_dropped_by_a_panic_ends_the_write",
            ),
        ],
    ),
    (
        "wrap-event",
        &[
            (
                "objects",
                "eight_bit_records_wrap_through_the_log_and_stay_correct",
            ),
            (
                "stress",
                "stress_short_with_few_keys_little_eviction_reads_and_writes",
            ),
        ],
    ),
    (
        "lock-before-dealloc",
        &[
            (
                "windows",
                "a_dealloc_or_delete_whose_append_fails_never_leaves_the_record_locked",
            ),
            ("stress", "stress_short_with_a_reclaimer_racing_writers"),
        ],
    ),
    (
        "lock-before-delete",
        &[
            (
                "all_log",
                "a_write_in_progress_holds_off_writers_readers_and_deleters_by_name",
            ),
            ("stress", "stress_short"),
        ],
    ),
    (
        "alloc-loser-uses-winners-record",
        &[
            (
                "windows",
                "a_losing_allocator_frees_its_record_by_cas_under_a_stale_writers_lock",
            ),
            ("stress", "stress_short"),
        ],
    ),
    (
        "write-invalidates-copies",
        &[
            (
                "local",
                "a_copy_is_read_locally_and_a_write_invalidates_it_without_waiting",
            ),
            ("stress", "stress_short_with_local_copies"),
        ],
    ),
    (
        "move-back-writes-back",
        &[
            (
                "local",
                "an_object_moves_after_n_accesses_and_another_host_brings_it_back",
            ),
            (
                "local",
                "a_read_shared_object_written_in_dram_is_read_fresh_by_the_host_that_cached_it",
            ),
            (
                "crash",
                "no_path_of_the_protocol_leaves_a_dirty_line_in_a_hosts_cache",
            ),
        ],
    ),
    (
        "move-drops-lines",
        &[
            (
                "local",
                "a_read_shared_object_written_in_dram_is_read_fresh_by_the_host_that_cached_it",
            ),
            ("stress", "stress_short_with_local_partitions"),
        ],
    ),
    (
        "read-end-counter-before-log",
        &[
            (
                "windows",
                "a_full_counter_cycle_between_the_checks_of_read_end_is_caught",
            ),
            (
                "narrow_reads",
                "a_torn_copy_is_refused_whatever_brings_the_word_back_between_the_checks",
            ),
        ],
    ),
    (
        "locked-record-restored-on-error",
        &[
            (
                "hardening",
                "a_wrap_the_full_log_refuses_leaves_the_record_unlocked",
            ),
            (
                "windows",
                "a_dealloc_or_delete_whose_append_fails_never_leaves_the_record_locked",
            ),
        ],
    ),
    (
        "record-free-by-cas",
        &[(
            "windows",
            "a_losing_allocator_frees_its_record_by_cas_under_a_stale_writers_lock",
        )],
    ),
    (
        "width-gate",
        &[
            ("width_windows", "a_switch_waits_for_a_writer_inside_its_gate"),
            ("stress", "stress_short_with_width_switches"),
        ],
    ),
    (
        "width-copy-at-ack",
        &[(
            "width_windows",
            "a_writer_of_a_host_that_acknowledged_a_freeze_stays_out_of_it",
        )],
    ),
    (
        "width-copy-forward",
        &[(
            "width_windows",
            "a_stale_acknowledgement_does_not_reopen_the_copy_under_a_later_freeze",
        )],
    ),
    (
        "width-drain-waits-for-announces",
        &[("width_undo_process", "a_dead_claimer_hardware")],
    ),
    (
        "width-takeover-serial",
        &[(
            "width_windows",
            "a_new_life_of_the_drainer_and_a_gate_do_not_both_take_a_switch_over",
        )],
    ),
    (
        "stale-alloc-loses",
        &[(
            "width_windows",
            "an_alloc_claimed_before_a_switch_and_logged_after_it_loses",
        )],
    ),
    (
        "create-writes-back",
        &[
            (
                "hardening",
                "a_created_object_is_read_whole_on_another_host",
            ),
            (
                "local",
                "an_object_moves_after_n_accesses_and_another_host_brings_it_back",
            ),
            (
                "crash",
                "no_path_of_the_protocol_leaves_a_dirty_line_in_a_hosts_cache",
            ),
        ],
    ),
    (
        "dealloc-drops-authors-lines",
        &[
            (
                "hardening",
                "a_deallocating_host_drops_its_own_old_lines_of_the_object",
            ),
            ("stress", "stress_short"),
        ],
    ),
    (
        "slots-reused-after-ctail",
        &[(
            "windows",
            "a_deleted_objects_slot_is_not_written_before_ctail_covers_the_delete",
        )],
    ),
    (
        "replica-version-kept",
        &[
            (
                "lib",
                "replica::tests::a_lookup_without_the_lock_that_a_replay_overlaps_is_not_trusted",
            ),
            (
                "windows",
                "a_writer_whose_own_host_applies_a_delete_and_create_of_its_key_before_its_lock_backs_out",
            ),
        ],
    ),
    (
        "record-byte-cas-keeps-neighbours",
        &[
            (
                "lib",
                "record::tests::four_bit_records_of_one_byte_take_racing_cases_from_two_threads",
            ),
            (
                "stress",
                "stress_short_with_4_bit_records_on_few_keys_reads_and_writes",
            ),
        ],
    ),
    (
        "locker-defers-to-recovery",
        &[(
            "recovery_races",
            "a_host_that_locks_after_the_recoverer_looked_defers_to_it",
        )],
    ),
    (
        "move-announces-its-lock",
        &[(
            "recovery_races",
            "recovery_never_takes_a_live_moves_lock_for_a_dead_hosts",
        )],
    ),
    (
        "write-end-lets-go-of-the-image",
        &[(
            "recovery_races",
            "an_announce_left_after_an_unlock_never_undoes_the_write",
        )],
    ),
    (
        "recovery-finds-the-writer-among-the-dead",
        &[
            (
                "recovery_races",
                "a_writer_that_died_mid_write_is_found_among_the_dead",
            ),
            (
                "recovery_races",
                "a_dead_hosts_own_image_is_found_behind_its_other_announce_of_the_lock",
            ),
        ],
    ),
    (
        "move-back-keeps-the-slot-image",
        &[(
            "recovery_races",
            "a_host_that_dies_copying_an_object_back_leaves_it_whole",
        )],
    ),
    (
        "recovery-logs-before-unlock",
        &[
            (
                "recovery_races",
                "a_read_during_a_recovery_that_wraps_the_counter_is_not_stale",
            ),
            (
                "recovery_races",
                "a_refused_recovered_event_is_appended_by_a_later_round",
            ),
        ],
    ),
    (
        "recovery-condemns-first",
        &[
            (
                "recovery_races",
                "a_host_resumed_during_its_recovery_writes_nothing_over_the_skip",
            ),
            (
                "recovery_races",
                "a_dead_writer_found_among_the_dead_is_condemned_before_its_lock_is_settled",
            ),
        ],
    ),
    (
        "dead-host-leaves-records-to-recovery",
        &[
            (
                "recovery_races",
                "a_deleter_declared_dead_leaves_a_live_lock_alone",
            ),
            (
                "recovery_races",
                "a_writer_declared_dead_after_its_lock_leaves_a_live_lock_alone",
            ),
            (
                "local_slow",
                "an_update_in_cxl_whose_host_was_recovered_meanwhile_stores_nothing",
            ),
        ],
    ),
    (
        "host-dead-drops-lines",
        &[(
            "recovery_races",
            "a_line_cached_while_the_object_was_away_is_dropped_when_its_holder_dies",
        )],
    ),
    (
        "head-moves-from-the-word-before-the-look",
        &[(
            "lib",
            "log::tests::a_host_that_looked_at_a_row_before_its_claim_does_not_move_the_head_past_the_joiner",
        )],
    ),
    (
        "own-ltail-moved-by-cas",
        &[(
            "lib",
            "log::tests::an_ltail_changes_only_for_the_life_that_holds_it",
        )],
    ),
    (
        "moved-object-arrives-before-held",
        &[(
            "windows",
            "a_local_write_is_not_lost_to_a_move_whose_append_failed",
        )],
    ),
    (
        "dealloc-checks-its-record-after-lock",
        &[(
            "windows",
            "a_deallocation_on_a_stale_lookup_tells_the_hook_only_of_the_objects_own_record",
        )],
    ),
    (
        "write-back-fenced-before-unlock",
        &[
            (
                "objects",
                "a_write_on_one_host_is_read_on_another_without_stale_lines",
            ),
            (
                "hardening",
                "a_deallocating_host_drops_its_own_old_lines_of_the_object",
            ),
        ],
    ),
    (
        "invalidation-fenced",
        &[
            (
                "objects",
                "a_write_on_one_host_is_read_on_another_without_stale_lines",
            ),
            (
                "objects",
                "a_partial_write_over_stale_lines_keeps_the_other_hosts_bytes",
            ),
        ],
    ),
    (
        "fill-only-under-the-recovery-word",
        &[(
            "recovery_races",
            "a_nested_fill_paused_past_the_outer_recovery_never_writes_over_the_next_lap",
        )],
    ),
    (
        "restored-claim-settled-later",
        &[(
            "recovery_races",
            "a_claim_paused_before_its_cas_does_not_leak_a_dead_deleters_record",
        )],
    ),
    (
        "recoverer-checks-before-it-clears",
        &[
            (
                "recovery_races",
                "a_paused_recoverer_that_resumes_clears_no_announce_of_the_ids_next_life",
            ),
            (
                "recovery_races",
                "a_recoverer_paused_after_a_restore_clears_no_announce_of_the_ids_next_life",
            ),
            (
                "recovery_races",
                "a_recoverer_paused_in_its_catch_up_clears_no_announce_of_the_ids_next_life",
            ),
        ],
    ),
    (
        "recoverer-checks-before-it-settles",
        &[
            (
                "recovery_races",
                "a_recoverer_paused_in_its_recovered_append_leaves_a_live_lock_alone_restore",
            ),
            (
                "recovery_races",
                "a_recoverer_paused_in_its_recovered_append_leaves_a_live_lock_alone_settle",
            ),
        ],
    ),
    (
        "recoverer-checks-before-it-puts-back-a-slot",
        &[(
            "recovery_races",
            "a_recoverer_paused_before_a_slot_image_writes_nothing_over_a_handed_back_object",
        )],
    ),
    (
        "filler-checks-after-its-pause",
        &[(
            "recovery_races",
            "a_recoverer_paused_before_its_fill_writes_nothing_over_the_next_lap",
        )],
    ),
    (
        "mover-checks-after-its-pause",
        &[(
            "recovery_races",
            "a_mover_paused_before_its_copy_writes_nothing_over_a_handed_back_object",
        )],
    ),
    (
        "recoverer-checks-before-it-sets-the-intent",
        &[
            (
                "recovery_races",
                "a_taken_over_recoverer_never_clears_or_sets_the_intent_2_bits",
            ),
            (
                "recovery_races",
                "a_taken_over_recoverer_never_clears_or_sets_the_intent_32_bits",
            ),
            (
                "recovery_races",
                "a_recoverer_taken_over_in_its_loop_never_sets_the_intent_2_bits",
            ),
            (
                "recovery_races",
                "a_recoverer_taken_over_in_its_loop_never_sets_the_intent_32_bits",
            ),
        ],
    ),
    (
        "writer-checks-before-its-image",
        &[(
            "recovery_races",
            "a_writer_paused_before_its_undo_image_leaves_the_ids_next_life_alone",
        )],
    ),
    (
        "recoverer-checks-before-the-servers-ring",
        &[(
            "recovery_races",
            "a_recovery_paused_in_the_rings_and_taken_over_leaves_the_next_life_alone",
        )],
    ),
    (
        "ring-sender-checks-it-lives",
        &[(
            "recovery_races",
            "a_ring_sender_recovered_before_it_reserved_leaves_no_entry_behind",
        )],
    ),
    (
        "ring-sender-looks-again-once-reserved",
        &[(
            "ring_races",
            "a_recovered_sender_does_not_take_a_siblings_word_for_its_own",
        )],
    ),
    (
        "claim-by-cas",
        &[(
            "windows",
            "a_claim_whose_free_record_was_claimed_after_its_load_takes_another",
        )],
    ),
    (
        "write-lock-by-cas",
        &[(
            "windows",
            "a_writer_whose_record_was_locked_after_its_load_does_not_take_it_too",
        )],
    ),
    (
        "log-entry-fenced-before-alive",
        &[(
            "flush_sites",
            "an_entrys_alive_word_never_reaches_memory_before_its_other_lines",
        )],
    ),
    (
        "counterless-lock-is-a-write",
        &[(
            "narrow_reads",
            "a_read_waits_for_a_write_that_began_before_its_tail_check",
        )],
    ),
    (
        "creator-checks-before-it-writes-the-slot",
        &[(
            "recovery_races",
            "a_creator_paused_past_its_lease_writes_nothing_into_a_slot_its_death_gave_back",
        )],
    ),
];

/// Which of the core's tests a mutant run takes.
enum Selection<'a> {
    /// Every test of the core.
    All,
    /// Every test of these targets ("lib": the crate's own unit tests).
    Targets(Vec<String>),
    /// Only these tests (test target, test name).
    Catchers(&'a [(&'a str, &'a str)]),
}

/// The core's test targets the unmutated run takes (`cargo xtask mutants` without
/// `--full`): its unit tests, every test file that needs the `chaos` or `mutants`
/// feature (CI's test step, built without them, runs none of their chaos tests), and
/// every target a step's catchers are in. The other files are the same code with the
/// switches compiled out, and CI's test step ran them already.
fn unmutated_targets() -> Result<Vec<String>, String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/megalon-core/tests");
    let entries = std::fs::read_dir(dir).map_err(|e| format!("could not list {dir}: {e}"))?;
    let mut targets = vec!["lib".to_owned()];
    for entry in entries {
        let path = entry
            .map_err(|e| format!("could not list {dir}: {e}"))?
            .path();
        let (Some(stem), Some("rs")) = (
            path.file_stem().and_then(|s| s.to_str()),
            path.extension().and_then(|e| e.to_str()),
        ) else {
            continue;
        };
        let source = std::fs::read_to_string(&path)
            .map_err(|e| format!("could not read {}: {e}", path.display()))?;
        if source.contains("feature = \"chaos\"") || source.contains("feature = \"mutants\"") {
            targets.push(stem.to_owned());
        }
    }
    for (_, catchers) in CATCHERS {
        targets.extend(catchers.iter().map(|(target, _)| (*target).to_owned()));
    }
    targets.sort_unstable();
    targets.dedup();
    Ok(targets)
}

/// Runs the mutant tests of `selection` with `step` switched off (or none), returning
/// the failing tests.
fn mutant_run(step: Option<&str>, selection: &Selection) -> Result<Vec<String>, String> {
    let mut command = cargo_command();
    command.args(MUTANT_TEST);
    let mut targets: Vec<&str> = match selection {
        Selection::All => Vec::new(),
        Selection::Targets(targets) => targets.iter().map(String::as_str).collect(),
        Selection::Catchers(catchers) => catchers.iter().map(|(target, _)| *target).collect(),
    };
    targets.sort_unstable();
    targets.dedup();
    for target in targets {
        match target {
            "lib" => command.arg("--lib"),
            _ => command.args(["--test", target]),
        };
    }
    if let Selection::Catchers(catchers) = selection {
        command.args(["--", "--exact"]);
        command.args(catchers.iter().map(|(_, test)| *test));
    }
    command
        .env("CARGO_TARGET_DIR", MUTANTS_TARGET_DIR)
        .env_remove("MEGALON_MUTANT")
        // No backtraces: a test that panics on purpose (a pump told to) printed two, and
        // they took the forty lines of its output shown before the failed assertion's
        // message. Only the failing tests' names are read.
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match step {
        Some(step) => {
            command.env("MEGALON_MUTANT", step);
        }
        // The run with no step off checks that the steps named here are the core's.
        None => {
            let names: Vec<&str> = CATCHERS.iter().map(|(name, _)| *name).collect();
            command.env("MEGALON_MUTANT_STEPS", names.join(","));
        }
    }
    let output = command
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failed: Vec<String> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(str::to_owned)
        .collect();
    if step.is_none() && !failed.is_empty() {
        // What the unmutated failures said: a CI log shows nothing else of them.
        eprintln!("{}", failure_sections(&stdout, 40));
    }
    if !output.status.success() && failed.is_empty() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        return Err(format!(
            "the tests failed without a failing test (build error?):\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(failed)
}

/// The "---- test stdout ----" sections of a test run's output, each cut to `lines`.
fn failure_sections(stdout: &str, lines: usize) -> String {
    let mut out = Vec::new();
    let mut kept = None;
    for line in stdout.lines() {
        if line.starts_with("---- ") && line.ends_with(" ----") {
            kept = Some(0);
        } else if line == "failures:" || line.starts_with("test result:") {
            kept = None;
        }
        if let Some(n) = kept.as_mut() {
            if *n < lines {
                out.push(line);
            }
            *n += 1;
        }
    }
    out.join("\n")
}

fn mutants(full: bool) -> bool {
    let unmutated = if full {
        println!("\n==> mutants: building with the switches and running every test unmutated");
        Selection::All
    } else {
        match unmutated_targets() {
            Ok(targets) => {
                println!(
                    "\n==> mutants: building with the switches and running the tests unmutated \
                     (the targets that need chaos or mutants, and the catchers'): {}",
                    targets.join(" ")
                );
                Selection::Targets(targets)
            }
            Err(error) => {
                eprintln!("mutants: {error}");
                return false;
            }
        }
    };
    match mutant_run(None, &unmutated) {
        Ok(failed) if failed.is_empty() => {}
        Ok(failed) => {
            eprintln!("mutants: the unmutated tests fail: {failed:?}");
            return false;
        }
        Err(error) => {
            eprintln!("mutants: {error}");
            return false;
        }
    }
    let (mut caught, mut missed) = (0, 0);
    for &(step, catchers) in CATCHERS {
        let started = Instant::now();
        let named = if full {
            Selection::All
        } else {
            Selection::Catchers(catchers)
        };
        match mutant_run(Some(step), &named) {
            Ok(failed) if !failed.is_empty() => {
                caught += 1;
                let more = if failed.len() > 1 {
                    format!(" (+{} more)", failed.len() - 1)
                } else {
                    String::new()
                };
                println!(
                    "{:<40}  caught by {}{more}  [{:.0} s]",
                    step,
                    failed[0],
                    started.elapsed().as_secs_f64()
                );
            }
            Ok(_) => {
                missed += 1;
                println!("{:<40}  MISSED", step);
            }
            Err(error) => {
                eprintln!("mutants: {}: {error}", step);
                return false;
            }
        }
    }
    println!("mutants: {caught} caught, {missed} missed");
    missed == 0
}

/// The stress's flags that take a value.
const STRESS_FLAGS: &[&str] = &[
    "--seconds",
    "--hosts",
    "--threads",
    "--seed",
    "--record-bits",
    "--memory",
    "--coherence",
    "--partition-after",
    "--copy-after",
    "--keys",
    "--key-bytes",
    "--eviction-one-in",
    "--switch-width-every-ms",
];
/// The stress's flags that take none.
const STRESS_SWITCHES: &[&str] = &["--chaos", "--reads-and-writes", "--no-combining", "--undo"];

/// Passes each of `flags` (`--name value`) to `command` as the environment variable
/// `{prefix}NAME` (a flag without a value as `1`): how the ignored tests take theirs.
fn flags_to_env(command: &mut Command, prefix: &str, flags: &[(&str, String)]) {
    for (name, value) in flags {
        let name = name
            .trim_start_matches("--")
            .replace('-', "_")
            .to_uppercase();
        command.env(
            format!("{prefix}{name}"),
            if value.is_empty() { "1" } else { value },
        );
    }
}

/// An ignored test of megalon-core that takes its settings from environment variables.
struct EnvTest {
    /// Its name in the header line and in errors.
    what: &'static str,
    /// Its test file.
    file: &'static str,
    /// The test.
    test: &'static str,
    /// The prefix of the variables its flags are passed in.
    prefix: &'static str,
}

const STRESS_TEST: EnvTest = EnvTest {
    what: "stress",
    file: "stress",
    test: "stress_from_env",
    prefix: "MEGALON_STRESS_",
};

const CRASH_TEST: EnvTest = EnvTest {
    what: "crash",
    file: "crash_stress",
    test: "crash_from_env",
    prefix: "MEGALON_CRASH_",
};

/// Runs `env_test` in release, with the `chaos` feature if asked, after a line
/// `==> what flags`. Returns whether it passed and what it printed (its standard output
/// and its standard error, where a panic's message goes); `None` if cargo did not run.
fn run_env_test(
    env_test: &EnvTest,
    chaos: bool,
    flags: &[(&str, String)],
) -> Option<(bool, String, String)> {
    let EnvTest {
        what,
        file,
        test,
        prefix,
    } = env_test;
    let mut command = cargo_command();
    command.args(["test", "--release", "-p", "megalon-core"]);
    if chaos {
        command.args(["--features", "chaos"]);
    }
    command
        .args([
            "--test",
            file,
            "--",
            "--ignored",
            "--exact",
            test,
            "--nocapture",
        ])
        .stdout(Stdio::piped());
    flags_to_env(&mut command, prefix, flags);
    let shown: Vec<String> = (flags.iter())
        .map(|(n, v)| format!(" {n} {v}").trim_end().to_owned())
        .collect();
    println!("\n==> {what}{}", shown.concat());
    match command.output() {
        Ok(output) => Some((
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )),
        Err(error) => {
            eprintln!("{what}: could not run cargo: {error}");
            None
        }
    }
}

/// Runs the stress test with `flags` (pairs of `--name value`; a switch has an empty
/// value), prints its verdict as the last line, and returns whether the history was
/// linearizable and nothing was left behind. `--chaos` builds the core with chaos.
fn stress(flags: &[(&str, String)]) -> bool {
    let chaos = flags.iter().any(|(name, _)| *name == "--chaos");
    let Some((succeeded, stdout, stderr)) = run_env_test(&STRESS_TEST, chaos, flags) else {
        return false;
    };
    let verdict = stdout
        .lines()
        .find(|line| {
            line.starts_with("checked ")
                || line.contains("NOT linearizable")
                || line.contains("NOT decided")
                || line.contains("NOT clean")
        })
        .map(str::to_owned);
    match verdict {
        Some(line) => {
            println!("{line}");
            succeeded && line.starts_with("checked ")
        }
        None => {
            eprintln!("{stdout}{stderr}");
            println!("stress: no verdict (the run failed before checking; output above)");
            false
        }
    }
}

/// The crash stress's flags (each takes a value).
const CRASH_FLAGS: &[&str] = &[
    "--seconds",
    "--seed",
    "--hosts",
    "--keys",
    "--memory",
    "--record-bits",
    "--partition-after",
    "--copy-after",
    "--doomed-joins",
    "--switch-width-every-ms",
];
/// The crash stress in CI: its length, and the fewest hosts it must have killed (it kills
/// one about every second).
const CI_CRASH_SECONDS: &str = "5";
const CI_CRASH_MIN_KILLS: u64 = 2;

/// Runs the crash stress with `flags` (pairs of `--name value`), prints its report (the
/// verdict last), and returns how many hosts it killed if the history was linearizable
/// and nothing was left behind.
fn crash(flags: &[(&str, String)]) -> Option<u64> {
    let (succeeded, stdout, stderr) = run_env_test(&CRASH_TEST, false, flags)?;
    // The report: from the test's first line to the test harness's own lines after it.
    let report: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.starts_with("crash: "))
        .take_while(|line| {
            !line.starts_with("test crash_from_env") && !line.starts_with("failures:")
        })
        .collect();
    if report.is_empty() {
        eprintln!("{stdout}{stderr}");
        println!("crash: no verdict (the run failed before checking; output above)");
        return None;
    }
    println!("{}", report.join("\n").trim_end());
    let verdict = report
        .iter()
        .rev()
        .find(|line| line.starts_with("crash: "))?;
    let kills = verdict
        .strip_suffix(" operations checked: linearizable")
        .and_then(|rest| rest.strip_prefix("crash: "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|kills| kills.parse().ok());
    match kills {
        Some(kills) if succeeded => Some(kills),
        _ => None,
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
        // The page cache's tests of appends that fail and hosts that die (core chaos
        // hooks).
        &[
            "test",
            "-p",
            "megalon-pagecache",
            "--features",
            "chaos",
            "--test",
            "unconfirmed",
            "--test",
            "deaths",
            "--test",
            "capacity_hole",
            "--test",
            "late_writer",
            "--test",
            "published",
            "--test",
            "slot_grants",
            "--test",
            "error_causes",
            "--test",
            "capacity",
            "--test",
            "partial_write",
            "--test",
            "evict_during_read",
        ],
        // The KV store's tests of appends that fail (core chaos hooks).
        &[
            "test",
            "-p",
            "megalon-kv",
            "--features",
            "chaos",
            "--test",
            "all_log_errors",
            "--test",
            "chaos_faults",
            "--test",
            "slot_leaks",
        ],
        &["build", "--workspace", "--benches", "--examples"],
        FIRST_COMMAND,
        CLUSTER_COMMAND,
        QUICKSTART_COMMAND,
        FIGURES_QUICK_COMMAND,
        MODEL_CHECK_COMMAND,
    ];
    let mut times = StepTimes::default();
    for step in steps {
        if !times.run(format!("cargo {}", step.join(" ")), || cargo(step)) {
            eprintln!("\nci: failed at `cargo {}`", step.join(" "));
            return times.failed();
        }
    }
    if !times.run("stress".into(), || stress(&[("--seconds", "3".into())])) {
        eprintln!("\nci: failed at the stress");
        return times.failed();
    }
    let chaos = [("--seconds", "3".into()), ("--chaos", String::new())];
    if !times.run("stress --chaos".into(), || stress(&chaos)) {
        eprintln!("\nci: failed at the chaos stress");
        return times.failed();
    }
    // The crash stress at the default width; at 2 bits, where recovery restores a record
    // by a CAS of a byte that three other records share; with local partitions and
    // copies, where a killed host takes objects in its DRAM with it and others wait on
    // its ring; and with the record width switched under the kills, where a switch waits
    // for a killed host's announces until its recovery.
    let runs: [&[(&str, &str)]; 4] = [
        &[("--record-bits", "32")],
        &[("--record-bits", "2")],
        &[("--partition-after", "2"), ("--copy-after", "2")],
        &[("--switch-width-every-ms", "50")],
    ];
    for run in runs {
        let mut flags = vec![("--seconds", CI_CRASH_SECONDS.to_owned())];
        flags.extend(run.iter().map(|&(name, value)| (name, value.to_owned())));
        let shown: Vec<String> = run.iter().map(|(n, v)| format!("{n} {v}")).collect();
        let shown = shown.join(" ");
        let mut killed = None;
        times.run(format!("crash {shown}"), || {
            killed = crash(&flags);
            killed.is_some()
        });
        match killed {
            Some(kills) if kills >= CI_CRASH_MIN_KILLS => {}
            Some(kills) => {
                eprintln!(
                    "\nci: the crash stress killed {kills} hosts, fewer than {CI_CRASH_MIN_KILLS}"
                );
                return times.failed();
            }
            None => {
                eprintln!("\nci: failed at the crash stress ({shown})");
                return times.failed();
            }
        }
    }
    if !times.run("loom".into(), || loom("3")) {
        eprintln!("\nci: failed at the loom models");
        return times.failed();
    }
    if !times.run("mutants".into(), || mutants(false)) {
        eprintln!("\nci: failed at the mutants");
        return times.failed();
    }
    times.print();
    println!(
        "\nci: all steps passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// How long each step of `ci` took, printed at its end (or at the step that failed): the
/// whole run has a budget (25 minutes on the project's machine), and this says where it
/// goes.
#[derive(Default)]
struct StepTimes(Vec<(String, f64)>);

impl StepTimes {
    fn run(&mut self, name: String, step: impl FnOnce() -> bool) -> bool {
        let started = Instant::now();
        let passed = step();
        self.0.push((name, started.elapsed().as_secs_f64()));
        passed
    }

    fn print(&self) {
        let total: f64 = self.0.iter().map(|(_, seconds)| seconds).sum();
        println!("\nci: time per step");
        for (name, seconds) in &self.0 {
            let share = 100.0 * seconds / total.max(f64::EPSILON);
            println!("  {seconds:7.1} s  {share:4.1}%  {name}");
        }
    }

    fn failed(&self) -> ExitCode {
        self.print();
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let ok = match args.first().map(String::as_str) {
        Some("ci") => return ci(),
        Some("loom") => loom(arg("--max-preemptions").unwrap_or("3")),
        Some("aarch64") => aarch64(),
        Some("mutants") => mutants(args.iter().any(|a| a == "--full")),
        Some("figures") => {
            let mut run = vec!["run", "--release", "-p", "megalon-figures", "--"];
            run.extend(args[1..].iter().map(String::as_str));
            cargo_with(&run, &[])
        }
        Some("model-check") => {
            let mut run = MODEL_CHECK_COMMAND.to_vec();
            run.push("--");
            run.extend(args[1..].iter().map(String::as_str));
            cargo_with(&run, &[])
        }
        Some("stress") => {
            let mut flags: Vec<(&str, String)> = Vec::new();
            let mut rest = args[1..].iter();
            while let Some(flag) = rest.next() {
                if let Some(&name) = STRESS_SWITCHES.iter().find(|s| **s == flag) {
                    flags.push((name, String::new()));
                } else if let Some(&name) = STRESS_FLAGS.iter().find(|s| **s == flag) {
                    let Some(value) = rest.next() else {
                        eprintln!("stress: {flag} needs a value");
                        return usage();
                    };
                    flags.push((name, value.clone()));
                } else {
                    eprintln!("stress: unknown flag {flag}");
                    return usage();
                }
            }
            stress(&flags)
        }
        Some("death-sweep") => cargo(DEATH_SWEEP_COMMAND),
        Some("crash") => {
            let mut flags: Vec<(&str, String)> = Vec::new();
            let mut rest = args[1..].iter();
            while let Some(flag) = rest.next() {
                let Some(&name) = CRASH_FLAGS.iter().find(|f| **f == flag) else {
                    eprintln!("crash: unknown flag {flag}");
                    return usage();
                };
                let Some(value) = rest.next() else {
                    eprintln!("crash: {flag} needs a value");
                    return usage();
                };
                flags.push((name, value.clone()));
            }
            crash(&flags).is_some()
        }
        _ => return usage(),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::{failure_sections, unmutated_targets};

    #[test]
    fn the_unmutated_run_takes_the_chaos_files_and_the_catchers_only() {
        let targets = unmutated_targets().unwrap();
        let has = |target: &str| targets.iter().any(|t| t == target);
        // The unit tests; a file gated on `chaos`; a catcher's file that is not.
        for kept in ["lib", "read_schedules", "all_log"] {
            assert!(has(kept), "{kept} missing from {targets:?}");
        }
        // A file without chaos or a catcher: CI's test step runs it.
        assert!(!has("pod_open"), "{targets:?}");
    }

    #[test]
    fn failure_sections_keep_each_failed_tests_output_only() {
        let stdout = "running 2 tests\ntest a ... ok\ntest b ... FAILED\n\nfailures:\n\n\
                      ---- b stdout ----\nthread 'b' panicked at x.rs:1:1:\nkey3: 5\n\n\
                      failures:\n    b\n\ntest result: FAILED. 1 passed; 1 failed\n";
        assert_eq!(
            failure_sections(stdout, 40),
            "---- b stdout ----\nthread 'b' panicked at x.rs:1:1:\nkey3: 5\n"
        );
        assert_eq!(
            failure_sections(stdout, 2),
            "---- b stdout ----\nthread 'b' panicked at x.rs:1:1:"
        );
    }
}
