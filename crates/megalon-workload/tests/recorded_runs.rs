//! Recording real concurrent runs and checking them: correct stores pass, buggy ones are
//! caught, and logs survive the trip through files a child process would write.

use std::fs::File;
use std::io::BufReader;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;

use megalon_workload::fixtures::{synthetic_history, LockedStore, Run, StaleCacheStore, Store};
use megalon_workload::{
    check, Call, Clock, History, Outcome, ProcessId, ThreadLog, ThreadRecorder, Value,
    ViolationKind,
};
use parking_lot::Mutex;

fn run(seed: u64) -> Run {
    Run {
        threads: 9,
        operations_per_thread: 2_000,
        keys: 100,
        zipf_theta: 0.99,
        get_percent: 50,
        put_percent: 30,
        create_percent: 10,
        value_len_bytes: 40,
        seed,
    }
}

#[test]
fn a_correct_store_is_linearizable() {
    let history = run(1).record(&LockedStore::new());
    let summary = check(&history).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(summary.operations, 18_000);
}

#[test]
fn a_store_that_serves_stale_cached_reads_is_caught() {
    let history = run(2).record(&StaleCacheStore::new());
    let error = check(&history).expect_err("stale reads must be caught");
    let violation = error.violation().expect("a violation, not a limit");
    assert_eq!(
        violation.kind,
        ViolationKind::NotLinearizable,
        "{violation}"
    );
    // The report stays small however long the key's history is.
    assert!(violation.operations.len() < 20, "{violation}");
}

#[test]
fn a_synthetic_run_with_every_process_always_in_flight_is_linearizable() {
    let history = synthetic_history(9, 20_000, 50, 0.99, 50, 7);
    let summary = check(&history).unwrap_or_else(|error| panic!("{error}"));
    assert!(summary.max_in_flight_operations >= 5, "{summary}");
}

/// A store whose put writes the value in two halves, letting a test read in between.
struct HalfWrites {
    bytes: Mutex<Option<Vec<u8>>>,
}

#[test]
fn a_read_between_the_halves_of_a_write_is_caught_as_torn() {
    let store = HalfWrites {
        bytes: Mutex::new(None),
    };
    let clock = Clock::counter();
    let len = 64;
    let (half_written, wait_half_written) = mpsc::channel();
    let (read_done, wait_read_done) = mpsc::channel();
    let store = &store;
    let logs = thread::scope(|scope| {
        let writer_clock = clock.clone();
        let writer = scope.spawn(move || {
            let mut recorder = ThreadRecorder::new(ProcessId::new(0, 0), writer_clock);
            for sequence in 1..=2 {
                let value = Value::new(0, sequence);
                let bytes = value.encode(len).unwrap();
                let put = recorder.invoke(b"k", Call::Put(value)).unwrap();
                let mut stored = store.bytes.lock();
                let target = stored.get_or_insert_with(|| vec![0; len]);
                target[..len / 2].copy_from_slice(&bytes[..len / 2]);
                drop(stored);
                if sequence == 2 {
                    half_written.send(()).unwrap();
                    wait_read_done.recv().unwrap();
                }
                let mut stored = store.bytes.lock();
                stored.as_mut().unwrap()[len / 2..].copy_from_slice(&bytes[len / 2..]);
                drop(stored);
                recorder.complete(put, Outcome::Ok).unwrap();
            }
            recorder.finish()
        });
        let reader = scope.spawn(move || {
            let mut recorder = ThreadRecorder::new(ProcessId::new(0, 1), clock);
            wait_half_written.recv().unwrap();
            let get = recorder.invoke(b"k", Call::Get).unwrap();
            let read = store.bytes.lock().clone();
            recorder.complete_read(get, read.as_deref()).unwrap();
            read_done.send(()).unwrap();
            recorder.finish()
        });
        [writer.join().unwrap(), reader.join().unwrap()]
    });
    let history = History::merge(logs).unwrap();
    let error = check(&history).expect_err("the torn read must be caught");
    let violation = error.violation().unwrap();
    assert_eq!(violation.kind, ViolationKind::TornRead, "{violation}");
    assert_eq!(violation.failing_operation().process, ProcessId::new(0, 1));
}

/// What a multi-process test does: every "child" journals its operations to a file of
/// its own, timestamps from a clock they share; one dies in the middle of a put; the
/// parent reads the files back, merges and checks them.
#[test]
fn journals_written_by_several_processes_merge_and_check() {
    let dir =
        std::env::temp_dir().join(format!("megalon-workload-journals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Stands in for a counter in memory the processes share.
    let shared_counter = Arc::new(AtomicU64::new(0));
    let clock = {
        let counter = Arc::clone(&shared_counter);
        Clock::external(move || counter.fetch_add(1, Ordering::AcqRel))
    };
    let store = LockedStore::new();
    let paths: Vec<_> = (0..3u32)
        .map(|host| dir.join(format!("host{host}.log")))
        .collect();

    thread::scope(|scope| {
        for (host, path) in paths.iter().enumerate() {
            let (store, clock) = (&store, clock.clone());
            scope.spawn(move || {
                let host = host as u32;
                let journal = File::create(path).unwrap();
                let mut recorder =
                    ThreadRecorder::journaled(ProcessId::new(host, 0), clock, journal).unwrap();
                for sequence in 0..200 {
                    let key = [b'k', (sequence % 4) as u8];
                    let value = Value::new(host, sequence);
                    let put = recorder.invoke(&key, Call::Put(value)).unwrap();
                    store.put(host, &key, &value.encode(32).unwrap());
                    if host == 2 && sequence == 100 {
                        // Dies after the put took effect, before recording the response.
                        drop(put);
                        return;
                    }
                    recorder.complete(put, Outcome::Ok).unwrap();
                    let get = recorder.invoke(&key, Call::Get).unwrap();
                    let read = store.get(host, &key);
                    recorder.complete_read(get, read.as_deref()).unwrap();
                }
            });
        }
    });
    // After the children: the parent reads the final value of each key too.
    let mut parent = ThreadRecorder::new(ProcessId::new(99, 0), clock);
    for k in 0..4u8 {
        let get = parent.invoke(&[b'k', k], Call::Get).unwrap();
        let read = store.get(99, &[b'k', k]);
        parent.complete_read(get, read.as_deref()).unwrap();
    }

    let mut logs: Vec<ThreadLog> = paths
        .iter()
        .map(|path| ThreadLog::read_from(BufReader::new(File::open(path).unwrap())).unwrap())
        .collect();
    logs.push(parent.finish());
    std::fs::remove_dir_all(&dir).unwrap();
    let died = &logs[2].operations()[200];
    assert_eq!(
        (died.call, &died.outcome),
        (Call::Put(Value::new(2, 100)), &Outcome::Unknown)
    );
    let history = History::merge(logs).unwrap();
    assert_eq!(history.len(), 200 * 2 * 2 + 201 + 4);
    let summary = check(&history).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(summary.unknown_outcome_operations, 1);
}
