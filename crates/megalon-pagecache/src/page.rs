//! Pages as the pod names them: a file's handle ([`FileId`], its inode number mixed with
//! its birth time) and the page key `(inode, page)` every host computes the same way.
//!
//! A file is known to the pod by its inode number and birth time (so hosts that open it
//! by different paths share its pages, and a new file given a removed file's number does
//! not), which assumes every data file lives on one file system. Where the file system
//! keeps no birth time, the number alone names the file.

use std::fmt;

/// Bytes of one file page.
pub const FILE_PAGE_BYTES: u64 = 4096;
/// Bytes of a page's object (and slot) in the pod: the page, then a line of its own
/// ([`PageTrailer`]).
pub const PAGE_OBJECT_BYTES: u64 = FILE_PAGE_BYTES + megalon_core::limits::LINE_BYTES;

/// What a page's object keeps after the page's bytes: how many of them are the file's
/// (from the start of the page), so that writing the page back never puts the cache's
/// filler past that over the file. The admitting host reads the page up to the file's
/// end as it is then, and every write raises the count to its own end; both under the
/// object protocol, with the page (the admission's create, a write's lock), so every
/// host that writes the page back reads the count of the bytes it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageTrailer {
    /// Bytes of the page that hold the file's bytes or a write's.
    pub(crate) valid_bytes: u32,
}

impl PageTrailer {
    /// Where in the object it starts.
    pub(crate) const AT: usize = FILE_PAGE_BYTES as usize;

    /// The trailer in `object` (a whole page object).
    pub(crate) fn of(object: &[u8]) -> PageTrailer {
        Self::from_bytes(object[Self::AT..Self::AT + 4].try_into().expect("4 bytes"))
    }

    /// The trailer of the bytes at [`PageTrailer::AT`].
    pub(crate) fn from_bytes(bytes: [u8; 4]) -> PageTrailer {
        PageTrailer {
            valid_bytes: u32::from_le_bytes(bytes).min(FILE_PAGE_BYTES as u32),
        }
    }

    /// Its bytes, as they sit at [`PageTrailer::AT`].
    pub(crate) fn bytes(self) -> [u8; 4] {
        self.valid_bytes.to_le_bytes()
    }
}
/// Bytes of a page's key: the inode and the page index, little-endian.
pub const PAGE_KEY_BYTES: usize = 16;

/// An open file, as the page cache names it: its inode number, with its birth time (see
/// [`FileId::inode`]). The same file opened on several hosts has the same `FileId` on
/// each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub(crate) u64);

impl FileId {
    /// The file's name in the pod: its inode number, mixed with its birth time where
    /// the file system keeps one (an inode number given again to a new file, once the
    /// file is removed, names another file).
    pub fn inode(self) -> u64 {
        self.0
    }

    /// The key of page `page` of this file in the pod.
    pub fn page_key(self, page: u64) -> [u8; PAGE_KEY_BYTES] {
        page_key(self.0, page)
    }
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "file (inode {})", self.0)
    }
}

/// The key of page `page` of inode `inode`: both little-endian, inode first.
pub(crate) fn page_key(inode: u64, page: u64) -> [u8; PAGE_KEY_BYTES] {
    let mut key = [0u8; PAGE_KEY_BYTES];
    key[..8].copy_from_slice(&inode.to_le_bytes());
    key[8..].copy_from_slice(&page.to_le_bytes());
    key
}

/// `(inode, page)` of a page key; `None` for any other object's key.
pub(crate) fn decode_key(key: &[u8]) -> Option<(u64, u64)> {
    let key: &[u8; PAGE_KEY_BYTES] = key.try_into().ok()?;
    let inode = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let page = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
    Some((inode, page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_reject_other_lengths() {
        let key = page_key(0x0102_0304_0506_0708, 42);
        assert_eq!(&key[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(decode_key(&key), Some((0x0102_0304_0506_0708, 42)));
        assert_eq!(decode_key(&key[..15]), None);
        assert_eq!(decode_key(b"not a page key of 16"), None);
    }
}
