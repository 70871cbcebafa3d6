//! Pages as the pod names them: a file's handle ([`FileId`], its inode number) and the
//! page key `(inode, page)` every host computes the same way.
//!
//! A file is known to the pod by its inode number (so hosts that open it by different
//! paths share its pages), which assumes every data file lives on one file system.

use std::fmt;

/// Bytes of one file page: the size of one object (and one slot) in the pod.
pub const FILE_PAGE_BYTES: u64 = 4096;
/// Bytes of a page's key: the inode and the page index, little-endian.
pub const PAGE_KEY_BYTES: usize = 16;

/// An open file, as the page cache names it: its inode number. The same file opened on
/// several hosts has the same `FileId` on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub(crate) u64);

impl FileId {
    /// The file's inode number.
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
