//! The four rings of an AF_XDP socket, mapped from the kernel: fill and TX, which we produce
//! and the kernel consumes, and completion and RX, which the kernel produces and we consume.
//!
//! Each is a power-of-two array of entries with a free-running producer and consumer index
//! (and a flags word, where `XDP_RING_NEED_WAKEUP` lives), at the offsets
//! `XDP_MMAP_OFFSETS` reports. The protocol is the kernel's (`net/xdp/xsk_queue.h`): the
//! producer writes entries, then stores its index with release ordering; the consumer loads
//! that index with acquire ordering, reads the entries, then stores its own index with
//! release ordering. Indexes are cached on our side and refreshed only when the cached
//! value says the ring is empty (or full), so a burst costs one shared load and one shared
//! store per ring.
//!
//! Invariant: `cached_prod - cached_cons <= size` on every ring at all times (checked on
//! every refresh: a kernel index outside it is taken as "nothing new", never followed).

use rustix::mm::{MapFlags, ProtFlags, mmap, munmap};
use rustix::net::xdp::XdpRingOffset;
use std::marker::PhantomData;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// One mapped ring of entries of type `T` (`u64` for fill and completion, `XdpDesc` for RX
/// and TX).
pub(super) struct Ring<T> {
    map: NonNull<u8>,
    map_len: usize,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: Option<NonNull<AtomicU32>>,
    entries: NonNull<T>,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
    _t: PhantomData<T>,
}

// SAFETY: the ring's memory is a mapping owned by this value; only the owner touches our
// side of it, and the kernel's side is reached through atomics.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at page offset `pgoff` of socket `fd`, laid out as
    /// `off` says.
    pub(super) fn map(
        fd: BorrowedFd<'_>,
        pgoff: u64,
        off: &XdpRingOffset,
        size: u32,
    ) -> std::io::Result<Self> {
        assert!(size.is_power_of_two());
        let map_len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: a fresh shared mapping of the socket's ring at the kernel's offset; nothing
        // else refers to the address range it returns.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                map_len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd,
                pgoff,
            )?
        };
        let base = NonNull::new(p.cast::<u8>()).ok_or(std::io::ErrorKind::Other)?;
        let at = |o: u64| {
            // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this mapping and lie within
            // `map_len`; the kernel aligns the index words and the entries.
            unsafe { base.add(o as usize) }
        };
        let ring = Ring {
            map: base,
            map_len,
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: off.flags.map(|f| at(f).cast()),
            entries: at(off.desc).cast(),
            size,
            cached_prod: 0,
            cached_cons: 0,
            _t: PhantomData,
        };
        Ok(ring)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: a valid, aligned index word inside our live mapping.
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.consumer.as_ref() }
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`) to go on with this ring.
    pub(super) fn needs_wakeup(&self) -> bool {
        self.flags.is_some_and(|f| {
            // SAFETY: a valid, aligned flags word inside our live mapping.
            let f = unsafe { f.as_ref() };
            f.load(Ordering::Relaxed) & rustix::net::xdp::XdpRingFlags::XDP_RING_NEED_WAKEUP.bits()
                != 0
        })
    }

    // ---- our side produces (fill, TX) ----

    /// How many entries we may produce now: the free room as last seen, refreshed from the
    /// kernel's consumer index when that is less than `want` (as libxdp's
    /// `xsk_prod_nb_free`), so a burst that finds room costs no shared load.
    pub(super) fn free(&mut self, want: u32) -> u32 {
        let room = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if room >= want {
            return room;
        }
        let cons = self.consumer().load(Ordering::Acquire);
        // The kernel consumed up to `cons`: never past what we produced.
        if self.cached_prod.wrapping_sub(cons) <= self.size {
            self.cached_cons = cons;
        }
        self.size - self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Free room now, read without changing the cached view (for a caller with `&self`).
    pub(super) fn room(&self) -> u32 {
        let cons = self.consumer().load(Ordering::Acquire);
        let used = self.cached_prod.wrapping_sub(cons);
        if used <= self.size {
            self.size - used
        } else {
            self.size - self.cached_prod.wrapping_sub(self.cached_cons)
        }
    }

    /// Entries produced but not yet consumed by the kernel (refreshing its index).
    pub(super) fn outstanding(&mut self) -> u32 {
        let cons = self.consumer().load(Ordering::Acquire);
        if self.cached_prod.wrapping_sub(cons) <= self.size {
            self.cached_cons = cons;
        }
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Writes one entry; the caller checked [`free`](Self::free). Seen by the kernel after
    /// [`submit`](Self::submit).
    pub(super) fn push(&mut self, v: T) {
        debug_assert!(self.cached_prod.wrapping_sub(self.cached_cons) < self.size);
        let i = (self.cached_prod & (self.size - 1)) as usize;
        // SAFETY: `i < size`, inside the mapped entries; the slot is ours (produced past the
        // kernel's consumer index, not yet published).
        unsafe { self.entries.add(i).write_volatile(v) };
        self.cached_prod = self.cached_prod.wrapping_add(1);
    }

    /// Publishes what was pushed.
    pub(super) fn submit(&mut self) {
        self.producer().store(self.cached_prod, Ordering::Release);
    }

    // ---- the kernel produces (RX, completion) ----

    /// How many entries the kernel has produced that we have not consumed.
    pub(super) fn available(&mut self) -> u32 {
        let prod = self.producer().load(Ordering::Acquire);
        if prod.wrapping_sub(self.cached_cons) <= self.size {
            self.cached_prod = prod;
        }
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Reads the next entry; the caller checked [`available`](Self::available). Given back
    /// to the kernel after [`release`](Self::release).
    pub(super) fn pop(&mut self) -> T {
        debug_assert!(self.cached_prod != self.cached_cons);
        let i = (self.cached_cons & (self.size - 1)) as usize;
        // SAFETY: `i < size`, inside the mapped entries; the kernel published it (acquire
        // load of its producer index in `available`) and will not rewrite it before we
        // release it.
        let v = unsafe { self.entries.add(i).read_volatile() };
        self.cached_cons = self.cached_cons.wrapping_add(1);
        v
    }

    /// Gives the consumed entries back.
    pub(super) fn release(&mut self) {
        self.consumer().store(self.cached_cons, Ordering::Release);
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: our own mapping, of this length; nothing refers into it after this.
        let _ = unsafe { munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}
