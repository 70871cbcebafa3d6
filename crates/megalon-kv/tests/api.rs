//! The store's calls one by one, and every bad input answering its typed error without
//! changing anything.

use std::sync::Arc;

use megalon_core::{Backing, HostOptions, MemoryKind, Pod, PodConfig};
use megalon_kv::{Error, Megalon, Store, LENGTH_PREFIX_BYTES};

fn store() -> Store<Megalon> {
    let config = PodConfig::new()
        .scr_bytes(16 << 10)
        .lnr_bytes(2 << 20)
        .slot_size_bytes(256)
        .max_key_bytes(24)
        .max_hosts(2);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let options = HostOptions::new().memory(MemoryKind::simulated(3));
    Store::new(Megalon::join(pod, 2, &options).unwrap())
}

/// Asserts `result` is the error `expected`, field for field (compared by their `Debug`
/// text: errors are not `PartialEq`).
#[track_caller]
fn assert_refused(result: Result<(), Error>, expected: Error) {
    assert_eq!(
        format!("{result:?}"),
        format!("{:?}", Err::<(), _>(expected))
    );
}

#[test]
fn put_get_insert_delete_across_hosts() {
    let store = store();
    let (mut a, mut b) = (store.handle(0).unwrap(), store.handle(1).unwrap());
    assert_eq!(a.get(b"k").unwrap(), None);
    a.put(b"k", b"one").unwrap(); // creates
    assert_eq!(b.get(b"k").unwrap().as_deref(), Some(&b"one"[..]));
    b.put(b"k", b"a longer second value").unwrap(); // updates
    assert_eq!(
        a.get(b"k").unwrap().as_deref(),
        Some(&b"a longer second value"[..])
    );
    a.put(b"k", b"3").unwrap(); // a shorter value is not padded by the longer one
    assert_eq!(b.get(b"k").unwrap().as_deref(), Some(&b"3"[..]));
    a.put(b"k", b"").unwrap();
    assert_eq!(b.get(b"k").unwrap().as_deref(), Some(&b""[..]));

    assert!(matches!(b.insert(b"k", b"x"), Err(Error::KeyExists)));
    assert_eq!(a.get(b"k").unwrap().as_deref(), Some(&b""[..]));
    b.insert(b"fresh", b"new").unwrap();
    assert_eq!(a.get(b"fresh").unwrap().as_deref(), Some(&b"new"[..]));

    a.delete(b"k").unwrap();
    assert_eq!(b.get(b"k").unwrap(), None);
    assert!(matches!(b.delete(b"k"), Err(Error::UnknownKey)));
}

#[test]
fn get_many_answers_every_key_as_get_does() {
    let store = store();
    let (mut a, mut b) = (store.handle(0).unwrap(), store.handle(1).unwrap());
    // Values of every length from empty to the longest, some keys never put, one key
    // too long: more keys than one group of reads.
    let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("many:{i}").into_bytes()).collect();
    let value = |i: usize| -> Vec<u8> { (0..i * 6 % 253).map(|j| (i + j) as u8).collect() };
    for (i, key) in keys.iter().enumerate() {
        if i % 5 != 4 {
            a.put(key, &value(i)).unwrap();
        }
    }
    let too_long = [b'k'; 25];
    let mut asked: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    asked.insert(7, &too_long);
    let answers = b.get_many(&asked);
    assert_eq!(answers.len(), asked.len());
    for (key, answer) in asked.iter().zip(answers) {
        match b.get(key) {
            Ok(expected) => assert_eq!(answer.unwrap(), expected, "{key:?}"),
            Err(expected) => assert_eq!(
                format!("{answer:?}"),
                format!("{:?}", Err::<(), _>(expected))
            ),
        }
    }
    assert_eq!(
        b.get_many(&[keys[3].as_slice()]).remove(0).unwrap(),
        Some(value(3))
    );
    assert_eq!(b.get_many(&[keys[4].as_slice()]).remove(0).unwrap(), None);
    assert!(b.get_many(&[]).is_empty());
}

#[test]
fn the_largest_value_and_key_fit_and_one_byte_more_is_refused() {
    let store = store();
    assert_eq!(store.max_value_bytes(), 256 - LENGTH_PREFIX_BYTES);
    assert_eq!(store.max_key_bytes(), 24);
    let mut kv = store.handle(0).unwrap();
    let key = [b'k'; 24];
    let value: Vec<u8> = (0..store.max_value_bytes()).map(|i| i as u8).collect();
    kv.put(&key, &value).unwrap();
    assert_eq!(kv.get(&key).unwrap(), Some(value.clone()));

    let too_long_value = vec![0u8; store.max_value_bytes() + 1];
    for result in [
        kv.put(&key, &too_long_value),
        kv.insert(b"other", &too_long_value),
    ] {
        let expected = Error::ValueTooLarge {
            value_bytes: 253,
            max_value_bytes: 252,
        };
        assert_refused(result, expected);
    }
    let too_long_key = [b'k'; 25];
    for result in [
        kv.put(&too_long_key, b"v"),
        kv.insert(&too_long_key, b"v"),
        kv.delete(&too_long_key),
        kv.get(&too_long_key).map(|_| ()),
    ] {
        let expected = Error::KeyTooLarge {
            key_bytes: 25,
            max_key_bytes: 24,
        };
        assert_refused(result, expected);
    }
    // Nothing changed.
    assert_eq!(kv.get(&key).unwrap(), Some(value));
    assert_eq!(kv.get(b"other").unwrap(), None);
}

#[test]
fn an_unknown_host_is_a_typed_error() {
    let store = store();
    let Err(Error::UnknownHost { host, hosts }) = store.handle(2) else {
        panic!("host 2 of 2 must be refused");
    };
    assert_eq!((host, hosts), (2, 2));
}

#[test]
fn the_report_counts_what_the_store_did() {
    let store = store();
    let before = store.report();
    let mut kv = store.handle(0).unwrap();
    kv.put(b"a", b"1").unwrap(); // create
    kv.put(b"a", b"2").unwrap(); // write
    kv.get(b"a").unwrap();
    let run = store.report().since(&before);
    assert_eq!(run.counter("creates"), Some(1));
    assert_eq!(run.counter("writes"), Some(1));
    assert_eq!(run.counter("reads"), Some(1));
    let scr: u64 = run.scr.iter().map(|(_, bytes)| bytes).sum();
    assert_eq!(scr, 16 << 10, "SCR uses add up to its size");
}

/// The empty key, keys of the longest length of all-zero and all-one bytes, and a key of
/// one zero byte: each a distinct object, on both hosts.
#[test]
fn empty_and_longest_keys_round_trip() {
    let store = store();
    let (mut a, mut b) = (store.handle(0).expect("a"), store.handle(1).expect("b"));
    for key in [&b""[..], &[0u8; 24][..], &[0xffu8; 24][..], &[0u8][..]] {
        assert_eq!(a.get(key).expect("get"), None, "{key:?}");
        a.insert(key, b"v1").expect("insert");
        assert_eq!(
            b.get(key).expect("get").as_deref(),
            Some(&b"v1"[..]),
            "{key:?}"
        );
        b.put(key, b"v2").expect("put");
        assert_eq!(
            a.get(key).expect("get").as_deref(),
            Some(&b"v2"[..]),
            "{key:?}"
        );
        b.delete(key).expect("delete");
        assert_eq!(a.get(key).expect("get"), None, "{key:?}");
        a.put(key, b"v3").expect("put");
    }
    assert_eq!(
        store.scheme().hosts()[0].object_count().expect("a count"),
        4
    );
}
