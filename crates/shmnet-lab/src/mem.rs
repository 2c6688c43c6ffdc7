//! Private memory for the instruments: anonymous mappings whose page size is chosen (4 KiB
//! pages, or transparent 2 MiB pages where the kernel allows them), and the primitive
//! accesses the calibrator and the probe time — a pointer chase, a sweep that fills the
//! caches with clean or dirty lines, a line flush, and the word-by-word load of a buffer.

use std::ptr::NonNull;

/// Bytes in a cache line on every x86-64 (and most other) CPUs.
pub const LINE: usize = 64;
/// A 2 MiB page.
pub const HUGE: usize = 2 << 20;

/// How a [`Region`] is paged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paging {
    /// Ordinary 4 KiB pages (`MADV_NOHUGEPAGE`).
    Small,
    /// Transparent 2 MiB pages asked for with `MADV_HUGEPAGE`; whether the kernel gave them
    /// is [`Region::huge_backed`].
    Huge,
}

/// An anonymous, private, read-write mapping of `len` bytes, 2 MiB-aligned, every page
/// touched (so no page fault lands inside a timing window). Unmapped on drop.
///
/// Invariant: `ptr .. ptr + len` is mapped, readable and writable for the region's life and
/// shared with no other process.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    /// The mapping as made (before alignment), for `munmap`.
    base: usize,
    map_len: usize,
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base .. base + map_len` is the mapping `new` made, and nothing borrows it
        // past the region's life.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}

/// The mapping could not be made.
#[derive(Debug, thiserror::Error)]
#[error("mapping {len} bytes of private memory: {cause}")]
pub struct MapError {
    len: usize,
    cause: std::io::Error,
}

impl Region {
    /// Maps and touches `len` bytes (rounded up to a whole 2 MiB).
    pub fn new(len: usize, paging: Paging) -> Result<Self, MapError> {
        let len = len.max(1).next_multiple_of(HUGE);
        // Over-allocate by one huge page so the start can be aligned to 2 MiB.
        let map_len = len + HUGE;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
        // no existing memory.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(MapError {
                len,
                cause: std::io::Error::last_os_error(),
            });
        }
        let base = raw as usize;
        let aligned = base.next_multiple_of(HUGE);
        let advice = match paging {
            Paging::Small => libc::MADV_NOHUGEPAGE,
            Paging::Huge => libc::MADV_HUGEPAGE,
        };
        // SAFETY: `aligned .. aligned + len` lies inside the mapping just made (we mapped one
        // huge page more than `len`). A refused advice only changes the paging, which
        // `huge_backed` reports.
        unsafe {
            libc::madvise(aligned as *mut libc::c_void, len, advice);
            // Touch every page now: page faults (and THP zeroing) must not be timed.
            let p = aligned as *mut u8;
            for off in (0..len).step_by(4096) {
                p.add(off).write_volatile(0);
            }
        }
        Ok(Self {
            ptr: NonNull::new(aligned as *mut u8).expect("mmap never returns address 0 here"),
            len,
            base,
            map_len,
        })
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Usable bytes (a multiple of 2 MiB).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: at least 2 MiB).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the kernel backs (at least half of) the region with huge pages, from
    /// `/proc/self/smaps`; `None` if that cannot be read.
    pub fn huge_backed(&self) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let start = self.ptr() as usize;
        let end = start + self.len;
        let mut huge_kb = 0usize;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        inside = a < end && b > start;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("AnonHugePages:") {
                    huge_kb += v
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<usize>()
                        .unwrap_or(0);
                }
            }
        }
        Some(huge_kb * 1024 >= self.len / 2)
    }
}

/// Loads every byte of `len` bytes at `src` as 8-byte words (the tail byte by byte) and
/// returns their XOR, so the loads cannot be optimised away. This is the access the
/// residency probe times for each buffer and the calibrator times for its reference costs:
/// both must use the same routine for their figures to be comparable.
///
/// # Safety
/// `src .. src + len` must be readable for the whole call. Bytes another process may be
/// writing are fine: they are only XORed together, never trusted.
#[inline(never)]
pub unsafe fn load(src: *const u8, len: usize) -> u64 {
    let mut acc = 0u64;
    let words = len / 8;
    for i in 0..words {
        // SAFETY: `i * 8 + 8 <= len`, within the readable range (the caller's promise).
        acc ^= unsafe { src.add(i * 8).cast::<u64>().read_unaligned() };
    }
    for i in words * 8..len {
        // SAFETY: `i < len`.
        acc ^= u64::from(unsafe { src.add(i).read() });
    }
    std::hint::black_box(acc)
}

/// Writes a cyclic pointer chase through the lines at `offsets` (each a multiple of 8, and
/// with room for a pointer) of `region`, in an order shuffled by `seed`, and returns its
/// start. Following it ([`chase`]) visits every line once per lap, each load depending on
/// the one before, so neither out-of-order execution nor the prefetchers can hide a miss.
pub fn build_chase(region: &Region, offsets: &[usize], seed: u64) -> *const usize {
    assert!(!offsets.is_empty(), "a chase needs at least one line");
    let mut order = offsets.to_vec();
    fastrand::Rng::with_seed(seed).shuffle(&mut order);
    let base = region.ptr();
    for (i, &from) in order.iter().enumerate() {
        let to = order[(i + 1) % order.len()];
        assert!(from + 8 <= region.len() && to + 8 <= region.len());
        // SAFETY: both offsets are inside the region (asserted), which we own.
        unsafe {
            base.add(from)
                .cast::<usize>()
                .write_unaligned(base.add(to) as usize)
        };
    }
    // SAFETY: `order[0]` is inside the region.
    unsafe { base.add(order[0]) as *const usize }
}

/// Follows a chase made by [`build_chase`] for `steps` loads; returns where it stopped (to
/// continue from there).
///
/// # Safety
/// `p` must come from [`build_chase`] (or an earlier `chase`) on a region still alive.
#[inline(never)]
pub unsafe fn chase(mut p: *const usize, steps: usize) -> *const usize {
    for _ in 0..steps {
        // SAFETY: every link of the chase points at another link inside the same region.
        p = unsafe { p.read_unaligned() } as *const usize;
    }
    std::hint::black_box(p)
}

/// Touches one word in every line of `region`'s first `len` bytes: loads (`dirty = false`:
/// the caches fill with clean lines) or increments (`dirty = true`: with dirty ones).
pub fn sweep(region: &Region, len: usize, dirty: bool) {
    let p = region.ptr();
    let len = len.min(region.len());
    let mut acc = 0u64;
    for off in (0..len).step_by(LINE) {
        // SAFETY: `off < len <= region.len()`; the region is ours alone.
        unsafe {
            let w = p.add(off).cast::<u64>();
            if dirty {
                w.write_volatile(w.read_volatile().wrapping_add(1));
            } else {
                acc ^= w.read_volatile();
            }
        }
    }
    std::hint::black_box(acc);
}

/// Evicts the lines of `src .. src + len` from every cache (`clflush`), and waits for that.
///
/// # Safety
/// The range must be mapped.
pub unsafe fn flush(src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let start = src as usize & !(LINE - 1);
        let end = src as usize + len;
        let mut a = start;
        while a < end {
            // SAFETY: `a` is within a line of the mapped range (the caller's promise).
            unsafe { core::arch::x86_64::_mm_clflush(a as *const u8) };
            a += LINE;
        }
        // SAFETY: a fence has no memory operands.
        unsafe { core::arch::x86_64::_mm_mfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (src, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chase_visits_every_line_once_per_lap() {
        let r = Region::new(1 << 16, Paging::Small).unwrap();
        let offsets: Vec<usize> = (0..100).map(|i| i * LINE).collect();
        let start = build_chase(&r, &offsets, 7);
        let mut seen = std::collections::HashSet::new();
        let mut p = start;
        for _ in 0..offsets.len() {
            assert!(seen.insert(p as usize));
            // SAFETY: the chase was just built on `r`.
            p = unsafe { chase(p, 1) };
        }
        assert_eq!(p, start, "back at the start after one lap");
    }

    #[test]
    fn load_reads_every_byte() {
        let mut v = vec![0u8; 1481];
        // SAFETY: the vector holds 1481 bytes.
        let zero = unsafe { load(v.as_ptr(), v.len()) };
        v[1480] = 0x5a;
        // SAFETY: as above.
        assert_ne!(unsafe { load(v.as_ptr(), v.len()) }, zero);
    }
}
