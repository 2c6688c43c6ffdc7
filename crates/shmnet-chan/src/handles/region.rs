//! An application's own memory region: a sealed memfd it creates, maps, and registers with
//! the server ([`RegionTable::register`](super::table::RegionTable::register) on the other
//! side).
//!
//! The memfd is sealed against shrinking and growing (the server maps its size once, and a
//! shrink under it would be a `SIGBUS` on its side) and against further sealing. The
//! application maps it read-write between guard pages, like every window.
//!
//! The server reads a region the application sends from and writes one it receives into,
//! at any time, so the bytes are reached by copies through raw pointers
//! ([`Region::write`], [`Region::read`]), never by references that would promise Rust
//! nobody else touches them — as for pool buffers.

use super::handle::PAGE_SIZE;
use crate::mapping::Mapping;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::ProtFlags;

/// Why a region could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// Sizes are whole pages, at least one.
    #[error("a region is a whole number of 4 KiB pages, at least one (asked for {0} bytes)")]
    BadSize(u64),
    /// A copy would run past the region's end.
    #[error("{len} bytes at offset {off} run past the end of a {size}-byte region")]
    OutOfBounds {
        /// Where the copy starts.
        off: u64,
        /// How many bytes.
        len: usize,
        /// The region's size.
        size: u64,
    },
    /// The kernel refused.
    #[error("{what}: {err}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The kernel's answer.
        err: std::io::Error,
    },
}

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> RegionError {
    move |e| RegionError::Sys {
        what,
        err: e.into(),
    }
}

/// A region of the application's own: see the [module docs](self).
pub struct Region {
    fd: OwnedFd,
    map: Mapping,
}

// SAFETY: the mapping is plain shared memory reached only through bounded copies; the
// struct holds no thread-bound state.
unsafe impl Send for Region {}

impl Region {
    /// A new zeroed region of `bytes` (a whole number of pages), sealed and mapped.
    pub fn create(name: &str, bytes: u64) -> Result<Self, RegionError> {
        if bytes == 0 || bytes % PAGE_SIZE != 0 || bytes > super::handle::MAX_REGION_BYTES {
            return Err(RegionError::BadSize(bytes));
        }
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(sys("memfd_create"))?;
        rustix::fs::ftruncate(&fd, bytes).map_err(sys("sizing the region"))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(sys("sealing the region"))?;
        let map = Mapping::new(
            fd.as_fd(),
            bytes as usize,
            PAGE_SIZE as usize,
            ProtFlags::READ | ProtFlags::WRITE,
        )
        .map_err(sys("mapping the region"))?;
        Ok(Self { fd, map })
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.map.len() as u64
    }

    /// The memfd to register.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn range(&self, off: u64, len: usize) -> Result<*mut u8, RegionError> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.size() => {
                // SAFETY: `off + len <= size`, so the range lies inside the mapping.
                Ok(unsafe { self.map.base().as_ptr().add(off as usize) })
            }
            _ => Err(RegionError::OutOfBounds {
                off,
                len,
                size: self.size(),
            }),
        }
    }

    /// Copies `src` into the region at `off`.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<(), RegionError> {
        let dst = self.range(off, src.len())?;
        // SAFETY: `dst..dst + len` lies inside the mapping (checked by `range`); `src` is a
        // Rust slice, which cannot overlap a mapping no reference points into.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// The `len` bytes at `off`, borrowed (for an instrument that must see them in place).
    ///
    /// # Safety
    ///
    /// Nobody — the server included — may write these bytes while the slice lives: the
    /// caller holds them (a received buffer not yet posted again).
    pub unsafe fn bytes(&self, off: u64, len: usize) -> Result<&[u8], RegionError> {
        let at = self.range(off, len)?;
        // SAFETY: in bounds (checked by `range`); unchanging while borrowed (the caller's
        // promise).
        Ok(unsafe { std::slice::from_raw_parts(at, len) })
    }

    /// Copies `dst.len()` bytes of the region at `off` into `dst`.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), RegionError> {
        let src = self.range(off, dst.len())?;
        // SAFETY: as in `write`, the other way round.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_sealed_sized_and_bounded() {
        assert!(matches!(
            Region::create("t", 5000),
            Err(RegionError::BadSize(5000))
        ));
        assert!(matches!(
            Region::create("t", 0),
            Err(RegionError::BadSize(0))
        ));
        let r = Region::create("t", 8192).unwrap();
        assert_eq!(r.size(), 8192);
        let seals = rustix::fs::fcntl_get_seals(r.fd()).unwrap();
        assert!(seals.contains(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL));
        r.write(8190, b"ab").unwrap();
        let mut got = [0u8; 2];
        r.read(8190, &mut got).unwrap();
        assert_eq!(&got, b"ab");
        assert!(matches!(
            r.write(8191, b"ab"),
            Err(RegionError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.read(u64::MAX, &mut got),
            Err(RegionError::OutOfBounds { .. })
        ));
    }
}
