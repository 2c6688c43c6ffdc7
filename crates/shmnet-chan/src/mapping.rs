//! The one mmap wrapper: a memfd mapped shared between two guard regions.

use rustix::fd::BorrowedFd;
use rustix::mm::{MapFlags, ProtFlags};
use std::ptr::NonNull;

/// A shared mapping of a memfd between two guard regions; unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    reservation: NonNull<u8>,
    reservation_len: usize,
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory shared through atomics and bounded copies; the struct
// only records where it is, and unmapping happens once, on drop of the last `Arc`.
unsafe impl Send for Mapping {}
// SAFETY: as above; no method mutates the struct.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` with protection `prot` at an address aligned to `page`, with
    /// one inaccessible `page`-sized guard region on each side (a stray access just past
    /// either end faults instead of reaching another mapping).
    pub(crate) fn new(
        fd: BorrowedFd<'_>,
        len: usize,
        page: usize,
        prot: ProtFlags,
    ) -> Result<Self, rustix::io::Errno> {
        // Reserve room for the window, both guards, and slack to align the window to `page`.
        let reservation_len = len + 3 * page;
        // SAFETY: a fresh anonymous PROT_NONE mapping at an address the kernel picks cannot
        // alias any existing Rust object.
        let reservation = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                reservation_len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )?
        };
        let start = reservation as usize;
        let base = (start + page).next_multiple_of(page);
        // SAFETY: `base..base+len` lies inside our own reservation (base >= start + page and
        // base + len + page <= start + reservation_len), so MAP_FIXED replaces only pages we
        // own and nothing else in the process.
        let mapped = unsafe {
            rustix::mm::mmap(
                base as *mut _,
                len,
                prot,
                MapFlags::SHARED | MapFlags::FIXED,
                fd,
                0,
            )
        };
        match mapped {
            Ok(p) => Ok(Self {
                reservation: NonNull::new(reservation.cast()).expect("mmap returned null"),
                reservation_len,
                base: NonNull::new(p.cast()).expect("mmap returned null"),
                len,
            }),
            Err(e) => {
                // SAFETY: unmapping the reservation we just made and nobody else uses.
                let _ = unsafe { rustix::mm::munmap(reservation, reservation_len) };
                Err(e)
            }
        }
    }

    /// Asks for transparent huge pages for the whole mapping.
    pub(crate) fn advise_huge(&self) -> Result<(), rustix::io::Errno> {
        // SAFETY: advising our own mapping; MADV_HUGEPAGE does not change its contents.
        unsafe {
            rustix::mm::madvise(
                self.base.as_ptr().cast(),
                self.len,
                rustix::mm::Advice::LinuxHugepage,
            )
        }
    }

    /// Where `region` of a window's validated private layout lies in the mapping.
    pub(crate) fn at<T>(&self, region: crate::layout::Region) -> NonNull<T> {
        debug_assert!(region.offset + region.size <= self.len);
        // SAFETY: every region comes from the validated private layout, whose regions all
        // lie within `len` bytes of the base.
        unsafe { self.base.add(region.offset).cast() }
    }

    /// The first mapped byte.
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Mapped bytes (guards not counted).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the reservation (which contains the window mapping) was made by `new` and
        // is unmapped exactly once, when the last handle using it has gone.
        let _ =
            unsafe { rustix::mm::munmap(self.reservation.as_ptr().cast(), self.reservation_len) };
    }
}
