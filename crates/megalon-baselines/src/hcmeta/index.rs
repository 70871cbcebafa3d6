//! One owner's CXL index, in SCR: a chained hash table with inline keys, mapping a
//! shared object's key to its entry, whose first word is the object's record.
//!
//! ```text
//! bucket b:  version (32 bits) | head (entry + 1, 0: empty)
//! entry e:   record word | link: key length (32 bits) | next (entry + 1) | key words...
//! ```
//!
//! There are as many buckets as entries. The owner is the only writer; every host reads
//! it concurrently. Each bucket word is a seqlock over its chain: the owner makes the
//! version odd, changes links or keys, then stores the next even version with the new
//! head; a reader loads the bucket word, walks the chain, and trusts what it found only
//! if the bucket word is unchanged afterwards.
//!
//! Race cases:
//! - A reader walks into an entry that the owner unlinks and reuses for another key
//!   (possibly in another bucket): the unlink changed the reader's bucket word, so the
//!   reader's check fails and it looks again.
//! - A reader finds the key at entry `e`, and before it locks `e`'s record the owner
//!   unshares the object and shares another one in `e`: the unshare unlinked `e` from
//!   the key's bucket (changing its word) before it freed the record. So a reader
//!   re-checks the bucket word *after* taking the record's lock (`IndexGeometry::unchanged`):
//!   unchanged, the entry still holds its key, and the lock keeps it there.
//! - A reader misses a key that is there (the bucket stayed odd while it looked): it asks
//!   the owner, who answers that the object is shared; a miss costs a message, never
//!   a wrong answer.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use megalon_core::Pod;

use megalon_core::memory::cxl::ScrAccess;

#[cfg(test)]
use super::counters::Counter;
use super::counters::Counters;
use super::hash::KeyHash;

/// Times a reader looks at a bucket whose version stays odd or changes under it before
/// it gives up and asks the owner.
const FIND_ATTEMPTS: u32 = 64;
const VERSION_ONE: u64 = 1 << 32;

/// Where one owner's index is.
#[derive(Clone, Debug)]
pub(crate) struct IndexGeometry {
    /// The first bucket word (absolute offset in the pod).
    pub(crate) buckets_offset: u64,
    /// The first entry (absolute offset).
    pub(crate) entries_offset: u64,
    /// Entries, and buckets.
    pub(crate) entries: u64,
    /// Bytes of an entry.
    pub(crate) entry_bytes: u64,
    /// Words of an inline key.
    pub(crate) key_words: u64,
}

/// A key found in the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    bucket: u64,
    bucket_word: u64,
    /// The key's entry (and record).
    pub(crate) entry: u32,
}

/// Word `i` of `key`, zero-padded.
#[inline]
fn key_word(key: &[u8], i: usize) -> u64 {
    let start = i * 8;
    let end = (start + 8).min(key.len());
    let mut bytes = [0u8; 8];
    bytes[..end - start].copy_from_slice(&key[start..end]);
    u64::from_le_bytes(bytes)
}

impl IndexGeometry {
    fn bucket<'p>(&self, pod: &'p Pod, bucket: u64) -> &'p AtomicU64 {
        debug_assert!(bucket < self.entries);
        pod.scr_u64(self.buckets_offset + bucket * 8)
    }

    fn entry_offset(&self, entry: u32) -> u64 {
        debug_assert!(u64::from(entry) < self.entries);
        self.entries_offset + u64::from(entry) * self.entry_bytes
    }

    /// Entry `entry`'s record word.
    pub(crate) fn record<'p>(&self, pod: &'p Pod, entry: u32) -> &'p AtomicU64 {
        pod.scr_u64(self.entry_offset(entry))
    }

    fn link<'p>(&self, pod: &'p Pod, entry: u32) -> &'p AtomicU64 {
        pod.scr_u64(self.entry_offset(entry) + 8)
    }

    fn key<'p>(&self, pod: &'p Pod, entry: u32, word: u64) -> &'p AtomicU64 {
        debug_assert!(word < self.key_words);
        pod.scr_u64(self.entry_offset(entry) + 16 + word * 8)
    }

    /// Whether `entry` holds `key` (of the length its link gives), and how many of its
    /// words it loaded: up to the first that differs.
    fn key_equals(&self, pod: &Pod, entry: u32, key: &[u8]) -> (bool, u64) {
        let words = key.len().div_ceil(8);
        let mut loaded = 0;
        let equal = (0..words).all(|i| {
            loaded += 1;
            self.key(pod, entry, i as u64).load(Ordering::Relaxed) == key_word(key, i)
        });
        (equal, loaded)
    }

    /// Counts `words` words of `entry` from its link on (the link, then key words), one
    /// after the other: charged as the lines they span.
    fn add_entry_words(&self, pod: &Pod, entry: u32, words: u64, access: ScrAccess, c: &Counters) {
        c.add_scr_words(self.link(pod, entry), words, access);
    }

    /// Looks `key` up (any host). `None`: not shared, or the owner kept changing the
    /// bucket while we looked.
    pub(crate) fn find(&self, pod: &Pod, hash: KeyHash, key: &[u8], c: &Counters) -> Option<Found> {
        let b = hash.bucket(self.entries);
        let bucket = self.bucket(pod, b);
        for _ in 0..FIND_ATTEMPTS {
            // Acquire: pairs with the owner's Release store of this word; the chain it
            // published is visible.
            let bucket_word = bucket.load(Ordering::Acquire);
            c.add_scr(bucket, ScrAccess::Load);
            if (bucket_word >> 32) & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut next = bucket_word as u32;
            let mut found = None;
            let mut steps = 0u64;
            while next != 0 && steps < self.entries {
                let entry = next - 1;
                if u64::from(entry) >= self.entries {
                    break; // a torn chain; the check below fails
                }
                let link = self.link(pod, entry).load(Ordering::Relaxed);
                let (equal, loaded) = if (link >> 32) as usize == key.len() {
                    self.key_equals(pod, entry, key)
                } else {
                    (false, 0)
                };
                self.add_entry_words(pod, entry, 1 + loaded, ScrAccess::Load, c);
                if equal {
                    found = Some(entry);
                    break;
                }
                next = link as u32;
                steps += 1;
            }
            // The seqlock reader's fence: the chain's loads above happen before the
            // check below (an Acquire load would not keep them from moving after it).
            fence(Ordering::Acquire);
            c.add_scr(bucket, ScrAccess::Load);
            if bucket.load(Ordering::Relaxed) == bucket_word {
                return found.map(|entry| Found {
                    bucket: b,
                    bucket_word,
                    entry,
                });
            }
        }
        None
    }

    /// Whether what `found` saw is still so: no entry was linked into or out of its
    /// bucket since. A reader asks this after locking the entry's record.
    pub(crate) fn unchanged(&self, pod: &Pod, found: &Found, c: &Counters) -> bool {
        let bucket = self.bucket(pod, found.bucket);
        c.add_scr(bucket, ScrAccess::Load);
        bucket.load(Ordering::Acquire) == found.bucket_word
    }

    /// Starts changing bucket `b` (owner only): its version turns odd. Returns the
    /// word before.
    fn begin(&self, pod: &Pod, b: u64, c: &Counters) -> u64 {
        let bucket = self.bucket(pod, b);
        let word = bucket.load(Ordering::Relaxed);
        debug_assert_eq!((word >> 32) & 1, 0, "only the owner changes its index");
        bucket.store(word.wrapping_add(VERSION_ONE), Ordering::Relaxed);
        // The seqlock writer's fence: the odd version is ordered before the changes that
        // follow; a reader that sees any of them sees the version changed.
        fence(Ordering::Release);
        c.add_scr(bucket, ScrAccess::Load);
        c.add_scr(bucket, ScrAccess::Update);
        word
    }

    /// Ends changing bucket `b` (owner only): the next even version with `head`.
    fn end(&self, pod: &Pod, b: u64, before: u64, head: u32, c: &Counters) {
        let version = (before >> 32).wrapping_add(2) << 32;
        let bucket = self.bucket(pod, b);
        c.add_scr(bucket, ScrAccess::Update);
        // Release: pairs with a reader's Acquire load of the bucket word.
        bucket.store(version | u64::from(head), Ordering::Release);
    }

    /// Links `entry`, holding `key`, at the head of its bucket (owner only). The entry's
    /// record must be set before: a reader may lock it as soon as it is linked.
    pub(crate) fn insert(&self, pod: &Pod, hash: KeyHash, key: &[u8], entry: u32, c: &Counters) {
        debug_assert!(key.len() as u64 <= self.key_words * 8);
        let b = hash.bucket(self.entries);
        let before = self.begin(pod, b, c);
        let words = key.len().div_ceil(8);
        for i in 0..words {
            self.key(pod, entry, i as u64)
                .store(key_word(key, i), Ordering::Relaxed);
        }
        self.link(pod, entry).store(
            (key.len() as u64) << 32 | u64::from(before as u32),
            Ordering::Relaxed,
        );
        self.add_entry_words(pod, entry, words as u64 + 1, ScrAccess::Update, c);
        self.end(pod, b, before, entry + 1, c);
    }

    /// Unlinks `entry` from the bucket of `hash` (owner only).
    pub(crate) fn remove(&self, pod: &Pod, hash: KeyHash, entry: u32, c: &Counters) {
        let b = hash.bucket(self.entries);
        let before = self.begin(pod, b, c);
        let after = self.link(pod, entry).load(Ordering::Relaxed) as u32;
        let mut head = before as u32;
        if head == entry + 1 {
            head = after;
        } else {
            let mut at = head;
            loop {
                assert!(at != 0, "entry {entry} is not in its bucket's chain");
                let link = self.link(pod, at - 1);
                let word = link.load(Ordering::Relaxed);
                c.add_scr(link, ScrAccess::Load);
                if word as u32 == entry + 1 {
                    link.store((word & !0xffff_ffff) | u64::from(after), Ordering::Relaxed);
                    c.add_scr(link, ScrAccess::Update);
                    break;
                }
                at = word as u32;
            }
        }
        // The load of `entry`'s own link, above.
        c.add_scr(self.link(pod, entry), ScrAccess::Load);
        self.end(pod, b, before, head, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megalon_core::{Backing, PodConfig};

    /// Found by a review (2026-12-01): comparing a key with an entry's counted every
    /// word of the key, though the comparison stops at the first word that differs; a
    /// lookup that walked past entries of other keys of the same length was charged key
    /// words it never loaded. A lookup counts the words it loads.
    #[test]
    fn a_lookup_counts_the_key_words_it_loads() {
        let pod = Pod::create(&PodConfig::new().app_scr_bytes(64 << 10), Backing::heap()).unwrap();
        let geometry = IndexGeometry {
            buckets_offset: pod.layout().app_scr_offset,
            entries_offset: pod.layout().app_scr_offset + 8 * 2,
            entries: 2,
            entry_bytes: 16 + 24,
            key_words: 3,
        };
        let c = Counters::default();
        let first: &[u8] = b"first-key-of-24-bytes..1";
        // A key of the same length in the same bucket, whose first word differs.
        let other = (0..)
            .map(|i| format!("other-key-of-24-bytes{i:03}").into_bytes())
            .find(|k| KeyHash::of(k).bucket(2) == KeyHash::of(first).bucket(2))
            .unwrap();
        geometry.insert(&pod, KeyHash::of(first), first, 0, &c);
        // Linked last, the other key is the chain's head.
        geometry.insert(&pod, KeyHash::of(&other), &other, 1, &c);
        let before = c.get(Counter::ScrAtomics);
        let found = geometry.find(&pod, KeyHash::of(first), first, &c).unwrap();
        assert_eq!(found.entry, 0);
        // The bucket; the other key's link and first word (where it differs); the first
        // key's link and its three words; the bucket again.
        assert_eq!(c.get(Counter::ScrAtomics) - before, 1 + 2 + 4 + 1);
    }

    /// Under the CXL cost model a lookup is charged an entry's link and inline key words
    /// as the lines they span, not word by word (real hardware fetches each line once);
    /// its count stays word by word. Charged word by word, this lookup paid 7. With the
    /// model's SCR lines kept (the default), the bucket's second load finds its line
    /// still held and pays nothing, and so does a second lookup; a new insert by the
    /// owner (another host) takes the lines from the reader again.
    #[test]
    fn a_lookup_is_charged_the_lines_of_an_entry_not_its_words() {
        use megalon_core::memory::cxl::CxlCharges;
        use megalon_core::memory::{CxlMemory, CxlModel};

        let pod = std::sync::Arc::new(
            Pod::create(&PodConfig::new().app_scr_bytes(64 << 10), Backing::heap()).unwrap(),
        );
        // One line-aligned entry of a 32-byte key: its link and four key words, 40 bytes.
        let entries_offset = (pod.layout().app_scr_offset + 8).next_multiple_of(64);
        let geometry = IndexGeometry {
            buckets_offset: pod.layout().app_scr_offset,
            entries_offset,
            entries: 1,
            entry_bytes: 16 + 32,
            key_words: 4,
        };
        let key: &[u8] = b"a-key-of-thirty-two-bytes-long..";
        // What one lookup (after the owner's insert, on another thread) is counted and
        // charged, under `model`, and a second lookup's charge.
        let lookups = |model: CxlModel| {
            let owner = CxlMemory::new(std::sync::Arc::clone(&pod), model);
            let reader = CxlMemory::new(std::sync::Arc::clone(&pod), model);
            let c = Counters::default();
            std::thread::scope(|s| {
                s.spawn(|| {
                    let _ = owner.load_u64(pod.layout().lnr_offset);
                    geometry.insert(&pod, KeyHash::of(key), key, 0, &Counters::default());
                });
            });
            // This thread pays the model's SCR cost from its first call on the CXL memory.
            let _ = reader.load_u64(pod.layout().lnr_offset);
            let lookup = || {
                let (counted, charged) = (
                    c.get(Counter::ScrAtomics),
                    CxlCharges::this_thread().scr_accesses,
                );
                assert!(geometry.find(&pod, KeyHash::of(key), key, &c).is_some());
                (
                    c.get(Counter::ScrAtomics) - counted,
                    CxlCharges::this_thread().scr_accesses - charged,
                )
            };
            let (first, second) = (lookup(), lookup());
            assert_eq!(first.0, second.0);
            // Removed and inserted again by the owner: its lines are taken again.
            std::thread::scope(|s| {
                s.spawn(|| {
                    let _ = owner.load_u64(pod.layout().lnr_offset);
                    let c = Counters::default();
                    geometry.remove(&pod, KeyHash::of(key), 0, &c);
                    geometry.insert(&pod, KeyHash::of(key), key, 0, &c);
                });
            });
            (first.0, first.1, second.1, lookup().1)
        };
        // The bucket, the entry's link and key words, the bucket again.
        let words = 1 + 5 + 1;
        let every_access_misses = CxlModel {
            scr_cache: 0,
            ..CxlModel::default()
        };
        assert_eq!(lookups(every_access_misses), (words, 1 + 1 + 1, 3, 3));
        assert_eq!(lookups(CxlModel::default()), (words, 1 + 1, 0, 1 + 1));
    }

    #[test]
    fn inserted_keys_are_found_until_removed() {
        let pod = Pod::create(&PodConfig::new().app_scr_bytes(64 << 10), Backing::heap()).unwrap();
        let geometry = IndexGeometry {
            buckets_offset: pod.layout().app_scr_offset,
            entries_offset: pod.layout().app_scr_offset + 8 * 4,
            entries: 4,
            entry_bytes: 16 + 16,
            key_words: 2,
        };
        let c = Counters::default();
        let keys: [&[u8]; 4] = [b"a", b"bb", b"ccccccccc", b"dddddddd"];
        for (entry, key) in keys.iter().enumerate() {
            geometry.insert(&pod, KeyHash::of(key), key, entry as u32, &c);
        }
        for (entry, key) in keys.iter().enumerate() {
            let found = geometry.find(&pod, KeyHash::of(key), key, &c).unwrap();
            assert_eq!(found.entry, entry as u32);
            assert!(geometry.unchanged(&pod, &found, &c));
        }
        assert!(geometry.find(&pod, KeyHash::of(b"x"), b"x", &c).is_none());
        assert!(geometry
            .find(&pod, KeyHash::of(b"ccccccccd"), b"ccccccccd", &c)
            .is_none());
        let found = geometry.find(&pod, KeyHash::of(b"bb"), b"bb", &c).unwrap();
        for (entry, key) in keys.iter().enumerate().rev() {
            geometry.remove(&pod, KeyHash::of(key), entry as u32, &c);
            assert!(geometry.find(&pod, KeyHash::of(key), key, &c).is_none());
        }
        assert!(!geometry.unchanged(&pod, &found, &c));
    }
}
