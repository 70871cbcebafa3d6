//! `Host::create_noting_position`: the log position past a create's entry, stored in an
//! application SCR word before the entry is published, so that another host can tell
//! whether its replica has applied a create whose appender died right after the publish.
#![cfg(feature = "chaos")]

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{config, heap_pod, pauses_when, small_cache, value};
use megalon_core::chaos::Point;
use megalon_core::{Error, Host, HostOptions, Join, Pod};

fn pod() -> Arc<Pod> {
    heap_pod(&config().app_scr_bytes(128))
}

/// No pump (replicas move only when a test says so), no combiner (a paused appender
/// holds no other thread's append).
fn options(seed: u64) -> HostOptions {
    small_cache(seed).pump_interval(None).flat_combining(false)
}

fn leak(pod: &Arc<Pod>, id: u32, seed: u64) -> &'static Host {
    Box::leak(Box::new(
        Host::join(pod, Join::As(id), options(seed)).expect("join"),
    ))
}

/// Paused right before its entry is written, the create's word already holds the
/// position past it; paused right after, another host that applies the log reaches that
/// position and finds the object.
#[test]
fn a_create_notes_its_position_before_its_entry_is_published() {
    let pod = pod();
    let note_at = pod.layout().app_scr_offset + 8;
    let (a, b) = (leak(&pod, 0, 1), leak(&pod, 1, 2));
    let note = pod.scr_u64(note_at);
    // a's first create takes slots for a's pool (a grant of its own, an append before
    // the create's): the creates below append only their own.
    a.create(b"first", &value(0)).unwrap();
    for (point, published) in [
        (Point::AppendBeforeWrite, false),
        (Point::AppendAfterPublish, true),
    ] {
        let key: &'static [u8] = if published { b"after" } else { b"before" };
        note.store(0, Ordering::SeqCst);
        let creating = pauses_when(
            point,
            || true,
            move || a.create_noting_position(key, &value(1), note_at),
        );
        let noted = note.load(Ordering::SeqCst);
        assert_ne!(noted, 0, "paused at {point:?}: the position is noted");
        let applied = b.replay().unwrap();
        let found = b.inspect().replica_snapshot().iter().any(|(k, _)| k == key);
        assert_eq!(
            (applied >= noted, found),
            (published, published),
            "paused at {point:?}: b applied up to {applied}, the create noted {noted}"
        );
        creating.finish().unwrap().unwrap();
        assert_eq!(b.replay().unwrap(), noted, "the create is the last entry");
    }
}

/// A create refused in the log (the key exists) is noted too: its entry was published,
/// and a replica past it has its outcome (no new object). A create refused before its
/// append notes nothing.
#[test]
fn a_losing_create_is_noted_and_one_refused_before_its_append_is_not() {
    let pod = pod();
    let note_at = pod.layout().app_scr_offset;
    let a = leak(&pod, 0, 3);
    let note = pod.scr_u64(note_at);
    a.create(b"k", &value(1)).unwrap();
    assert!(matches!(
        a.create_noting_position(b"k", &value(2), note_at),
        Err(Error::ObjectExists)
    ));
    let noted = note.load(Ordering::SeqCst);
    assert_eq!(
        noted,
        a.inspect().applied_position(),
        "the losing create's entry"
    );
    note.store(0, Ordering::SeqCst);
    let long_key = [7u8; 49];
    assert!(matches!(
        a.create_noting_position(&long_key, &value(2), note_at),
        Err(Error::KeyTooLarge { .. })
    ));
    assert_eq!(note.load(Ordering::SeqCst), 0, "nothing reached the log");
}

/// The word must be one of the application's: the core's own SCR (the log's cursors, the
/// host table, the records) and unaligned offsets are refused before anything is written.
#[test]
fn a_note_outside_the_application_scr_is_refused() {
    let pod = pod();
    let a = leak(&pod, 0, 4);
    let app = pod.layout().app_scr_offset;
    for offset in [0, app - 8, app + 3, app + 128, pod.layout().lnr_offset] {
        let error = a
            .create_noting_position(b"k", &value(1), offset)
            .expect_err("not an application word");
        assert!(
            matches!(error, Error::OutsideApplicationScr { offset: o } if o == offset),
            "{offset}: {error:?}"
        );
    }
    assert_eq!(a.object_count().unwrap(), 0, "no create was made");
    a.create_noting_position(b"k", &value(1), app + 120)
        .expect("the application SCR's last word");
}
