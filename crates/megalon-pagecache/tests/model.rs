//! Random sequences of reads, writes, fsyncs, forced evictions and reclaims from two hosts
//! on simulated non-coherent memory, against a plain `Vec<u8>` model of the file: every
//! read equals the model, the file on disk equals it after every fsync and at the end.
//!
//! The file spans ten pages and ends inside the last one; the cache holds four, so pages
//! come and go all the time (forced, and to make room). Each case's simulated caches are
//! seeded from the case (`seed`), which proptest prints with a failing case.

mod common;

use common::{data_file, heap_pod, join, on_disk, options, original_byte, simulated, PAGE};
use megalon_core::Error as CoreError;
use megalon_pagecache::{Error, PageCache, PageCacheConfig};
use proptest::prelude::*;

const FILE_LEN: usize = 10 * PAGE - 100;
const PAGES: u64 = FILE_LEN.div_ceil(PAGE) as u64;
const CACHE_PAGES: u64 = 4;

#[derive(Clone, Debug)]
enum Op {
    Read {
        host: usize,
        offset: usize,
        len: usize,
    },
    Write {
        host: usize,
        offset: usize,
        len: usize,
        fill: u8,
    },
    Fsync {
        host: usize,
    },
    EvictPage {
        host: usize,
        page: u64,
    },
    RunHand {
        host: usize,
    },
    MakeReadShared {
        host: usize,
        page: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let host = 0..2usize;
    // Offsets up to a little past the end, lengths up to three pages: reads and writes
    // that span pages, end exactly at the end, or run past it.
    let offset = 0..FILE_LEN + 64;
    let len = 0..3 * PAGE;
    prop_oneof![
        4 => (host.clone(), offset.clone(), len.clone())
            .prop_map(|(host, offset, len)| Op::Read { host, offset, len }),
        4 => (host.clone(), offset, len, any::<u8>())
            .prop_map(|(host, offset, len, fill)| Op::Write { host, offset, len, fill }),
        1 => host.clone().prop_map(|host| Op::Fsync { host }),
        1 => (host.clone(), 0..PAGES).prop_map(|(host, page)| Op::EvictPage { host, page }),
        1 => host.clone().prop_map(|host| Op::RunHand { host }),
        1 => (host, 0..PAGES).prop_map(|(host, page)| Op::MakeReadShared { host, page }),
    ]
}

/// The bytes a write puts at `offset + i`: never the same run twice in a row.
fn written(fill: u8, offset: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| fill.wrapping_add(((offset + i) % 7) as u8))
        .collect()
}

fn run(seed: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let data = data_file(FILE_LEN);
    let mut model: Vec<u8> = (0..FILE_LEN).map(original_byte).collect();
    let config = PageCacheConfig::new(CACHE_PAGES)
        .max_hosts(2)
        .log_capacity_entries(512);
    let pod = heap_pod(&config);
    let hosts: Vec<PageCache> = (0..2)
        .map(|i| join(&pod, options(simulated(seed.wrapping_add(i)))))
        .collect();
    let files: Vec<_> = hosts
        .iter()
        .map(|h| h.open(data.path()).expect("open"))
        .collect();

    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Read { host, offset, len } => {
                let mut buf = vec![0u8; len];
                let n = hosts[host]
                    .read(files[host], offset as u64, &mut buf)
                    .map_err(|e| TestCaseError::fail(format!("step {step} {op:?}: {e}")))?;
                let expected = &model[offset.min(FILE_LEN)..(offset + len).min(FILE_LEN)];
                prop_assert_eq!(n, expected.len(), "step {} {:?}: bytes read", step, op);
                prop_assert!(
                    buf[..n] == *expected,
                    "step {step} {op:?}: read differs from the model"
                );
            }
            Op::Write {
                host,
                offset,
                len,
                fill,
            } => {
                let bytes = written(fill, offset, len);
                let result = hosts[host].write(files[host], offset as u64, &bytes);
                if offset + len > FILE_LEN {
                    prop_assert!(
                        matches!(result, Err(Error::WritePastEnd { .. })),
                        "step {step} {op:?}: {result:?}"
                    );
                } else {
                    result.map_err(|e| TestCaseError::fail(format!("step {step} {op:?}: {e}")))?;
                    model[offset..offset + len].copy_from_slice(&bytes);
                }
            }
            Op::Fsync { host } => {
                hosts[host]
                    .fsync(files[host])
                    .map_err(|e| TestCaseError::fail(format!("step {step} {op:?}: {e}")))?;
                // Both hosts have the file open: every dirty page was written back.
                prop_assert!(
                    on_disk(data.path()) == model,
                    "step {step} {op:?}: the file differs from the model after fsync"
                );
            }
            Op::EvictPage { host, page } => {
                hosts[host]
                    .evict_page(files[host], page)
                    .map_err(|e| TestCaseError::fail(format!("step {step} {op:?}: {e}")))?;
            }
            Op::RunHand { host } => {
                hosts[host]
                    .evict_one()
                    .map_err(|e| TestCaseError::fail(format!("step {step} {op:?}: {e}")))?;
            }
            Op::MakeReadShared { host, page } => {
                match hosts[host]
                    .host()
                    .make_read_shared(&files[host].page_key(page))
                {
                    Ok(_) | Err(CoreError::UnknownKey) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("step {step} {op:?}: {e}"))),
                }
            }
        }
        prop_assert!(hosts[0].cached_pages() <= CACHE_PAGES);
    }

    hosts[1].fsync(files[1]).expect("final fsync");
    prop_assert!(
        on_disk(data.path()) == model,
        "the file differs from the model at the end"
    );
    for host in &hosts {
        prop_assert!(host.take_error().is_none(), "background work failed");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn two_hosts_agree_with_a_model_of_the_file(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run(seed, &ops)?;
    }
}
