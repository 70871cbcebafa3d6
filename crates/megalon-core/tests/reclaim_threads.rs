//! A host with more writer threads than announce words (16), in a pod whose records
//! run short: a write that needs a record reclaims one on its own thread, waiting for an
//! announce word as its write would. (Its reclaim took only a free word, as the pump's
//! does, and lost it to the other writers: writes answered `ScrRecordsExhausted` while
//! every record could be reclaimed.)
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{config, heap_pod, value};
use megalon_core::{CrashSafety, Error, Host, HostOptions, Join};

#[test]
fn writers_past_sixteen_threads_reclaim_records_without_exhausting() {
    let pod = heap_pod(
        &config()
            .scr_bytes(4096)
            .record_width_bits(32)
            .crash_safety(CrashSafety::Undo)
            .log_capacity_entries(1024),
    );
    let records = pod.layout().record_count;
    assert!(records < 1280, "fewer records than keys: {records}");
    let host = Arc::new(
        Host::join(
            &pod,
            Join::As(0),
            HostOptions::new()
                .memory(common::simulated(3, 4096, 0))
                .record_watermark(1.0)
                .wait_limit(Duration::from_secs(5)),
        )
        .unwrap(),
    );
    let threads = 32;
    let per_thread = 40;
    for t in 0..threads {
        for i in 0..per_thread {
            host.create(format!("t{t}k{i}").as_bytes(), &value(0))
                .unwrap();
        }
    }
    let exhausted = Arc::new(AtomicU64::new(0));
    let other = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (host, exhausted, other) = (
                Arc::clone(&host),
                Arc::clone(&exhausted),
                Arc::clone(&other),
            );
            std::thread::spawn(move || {
                for round in 0..200u64 {
                    let key = format!("t{t}k{}", round % per_thread);
                    match host.write(key.as_bytes(), &value(round as u8)) {
                        Ok(_) => {}
                        Err(Error::ScrRecordsExhausted { .. }) => {
                            exhausted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            eprintln!("{e:?}");
                            other.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (e, o) = (
        exhausted.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
    );
    eprintln!("exhausted {e} other {o}");
    assert_eq!((e, o), (0, 0));
}
