//! The three ways seed 003 keeps a network buffer K coherent with a device that does not
//! snoop the caches, done with what an x86-64 CPU offers a user-space program.
//!
//! x86's DMA is coherent, so none of this is *needed* here: the point is to pay each method's
//! cost on a real CPU, as the seed's driver did on Unity, and compare it with the seed's
//! model. What differs from the seed's platform is said at each method.
//!
//! - [`Mode::Ch`]: clean (send) or clean and invalidate (receive) K's own lines with
//!   `clflushopt` (`clflush` where the CPU lacks it), then a fence — x86's per-line
//!   maintenance, which the seed's platform did not have.
//! - [`Mode::ChAll`]: the seed's CH: clean every line of a region the size of the data cache
//!   (the L1d), dirty or not, as a whole-cache clean does, and K's lines with it.
//! - [`Mode::Cs`]: the seed's software clean: read junk that maps to the same L2 sets as K's
//!   lines, as many lines per set as the L2 has ways, so K's lines are pushed out of the
//!   private caches. (The last level, sliced by a hash and a victim cache on AMD, is out of
//!   reach of set aliasing: CS here pays the seed's cost without reaching memory.)
//! - [`Mode::Nc`]: bypass: on send, non-temporal stores into K (which leave K's lines out of
//!   the caches); on receive, streaming loads where the CPU has them and K's lines evicted
//!   after the copy, so K never stays cached. True uncacheable memory (the seed's) needs the
//!   kernel to map K uncacheable; here the first load of each line misses and the stack's
//!   later reads of the header hit, where on Unity every one went to memory.

pub use shmnet_chan::coherence::{CpuOps, Junk, Mode, clean, copy_nt, copy_streaming, soft_clean};

/// What one method needs besides the buffers.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// The CPU's operations.
    pub ops: CpuOps,
    /// An L1d-sized region the whole-cache clean walks (`ChAll`).
    pub cache: *const u8,
    /// Its bytes.
    pub cache_len: usize,
    /// The software clean's junk (`Cs`).
    pub junk: Junk,
    /// Bytes the receive-side software clean covers whatever the packet's length: the
    /// largest frame (K is set up before the length is known, the seed's `L_max`).
    pub max_frame: usize,
}

/// Sends `u` through K (`k .. k + u.len()`): the copy from the application's buffer and
/// whatever `mode` needs before the device may read K. Returns a value that depends on what
/// was read.
///
/// # Safety
/// `k .. k + u.len()` must be mapped and writable, apart from `u`; `ctx`'s regions mapped.
pub unsafe fn send(mode: Mode, ctx: &Ctx, u: &[u8], k: *mut u8) -> u64 {
    // SAFETY: the caller's promises cover every range used below.
    unsafe {
        match mode {
            Mode::Ch => {
                std::ptr::copy_nonoverlapping(u.as_ptr(), k, u.len());
                clean(ctx.ops, k, u.len());
                0
            }
            Mode::ChAll => {
                std::ptr::copy_nonoverlapping(u.as_ptr(), k, u.len());
                clean(ctx.ops, ctx.cache, ctx.cache_len);
                clean(ctx.ops, k, u.len());
                0
            }
            Mode::Cs => {
                std::ptr::copy_nonoverlapping(u.as_ptr(), k, u.len());
                soft_clean(ctx.junk, k, u.len())
            }
            Mode::Nc => {
                copy_nt(ctx.ops, k, u);
                0
            }
        }
    }
}

/// What `mode` does to K before the device writes into it (receive): the clean and
/// invalidate of CH, the software clean of CS (over the largest frame), nothing for NC.
/// Returns a value that depends on what was read.
///
/// # Safety
/// `k .. k + ctx.max_frame` must be mapped; `ctx`'s regions mapped.
pub unsafe fn before_receive(mode: Mode, ctx: &Ctx, k: *const u8, len: usize) -> u64 {
    // SAFETY: the caller's promises.
    unsafe {
        match mode {
            Mode::Ch => {
                clean(ctx.ops, k, len);
                0
            }
            Mode::ChAll => {
                clean(ctx.ops, ctx.cache, ctx.cache_len);
                clean(ctx.ops, k, len);
                0
            }
            Mode::Cs => soft_clean(ctx.junk, k, ctx.max_frame),
            Mode::Nc => 0,
        }
    }
}

/// Bytes at the start of a frame the stack reads before the payload (Ethernet, IPv4, TCP
/// with timestamps), and how many times it reads them (parse, checksum of the header,
/// demultiplex, the TCP options): the seed's point against NC on receive.
pub const HEADER_BYTES: usize = 66;
/// Reads of the header per packet.
pub const HEADER_READS: usize = 4;

/// The receive after the device wrote K: the stack reads the header, the payload is copied
/// into the application's buffer `u`, and NC evicts K's lines. Returns a value that depends
/// on the header.
///
/// # Safety
/// `k .. k + u.len()` must be mapped and readable, apart from `u`.
pub unsafe fn receive(mode: Mode, ctx: &Ctx, k: *const u8, u: &mut [u8]) -> u64 {
    let mut acc = 0u64;
    let h = HEADER_BYTES.min(u.len());
    for _ in 0..HEADER_READS {
        for off in (0..h).step_by(8) {
            let take = (h - off).min(8);
            let mut w = [0u8; 8];
            // SAFETY: `off + take <= h <= u.len()`, inside K.
            unsafe { std::ptr::copy_nonoverlapping(k.add(off), w.as_mut_ptr(), take) };
            acc = acc.rotate_left(5) ^ u64::from_le_bytes(w);
        }
    }
    // SAFETY: the caller's promise.
    unsafe {
        match mode {
            Mode::Nc => {
                copy_streaming(ctx.ops, u, k);
                clean(ctx.ops, k, u.len());
            }
            _ => std::ptr::copy_nonoverlapping(k, u.as_mut_ptr(), u.len()),
        }
    }
    acc
}

/// The device's write into K: the bytes reach memory and none of K's lines stays cached
/// (a coherent DMA write invalidates them; here non-temporal stores do).
///
/// # Safety
/// `k .. k + frame.len()` must be mapped and writable, apart from `frame`.
pub unsafe fn device_writes(ops: CpuOps, k: *mut u8, frame: &[u8]) {
    // SAFETY: the caller's promise.
    unsafe { copy_nt(ops, k, frame) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::{Paging, Region};
    use proptest::prelude::*;

    fn ctx(r: &Region) -> Ctx {
        Ctx {
            ops: CpuOps::this(),
            cache: r.ptr(),
            cache_len: 32 << 10,
            junk: Junk {
                base: r.ptr(),
                stride: 64 << 10,
                ways: 8,
            },
            max_frame: 1536,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Whatever the method, the device reads in K the bytes the application wrote, and
        /// the application reads in U the bytes the device wrote: lengths from 0 to 64 KiB,
        /// K and U at any offset.
        #[test]
        fn every_mode_carries_the_bytes_unchanged(
            len in 0usize..=65_536,
            k_off in 0usize..128,
            u_off in 0usize..128,
            seed in any::<u64>(),
        ) {
            let junk = Region::new(1 << 20, Paging::Small).unwrap();
            let k_region = Region::new(65_536 + 256, Paging::Small).unwrap();
            let c = ctx(&junk);
            let mut rng = fastrand::Rng::with_seed(seed);
            let data: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            let mut u_buf = vec![0u8; len + 128];
            for mode in Mode::ALL {
                // SAFETY: K's region holds k_off + 64 KiB.
                let k = unsafe { k_region.ptr().add(k_off) };
                u_buf[u_off..u_off + len].copy_from_slice(&data);
                // SAFETY: K is mapped for `len` bytes and apart from U; the context's regions
                // are mapped.
                unsafe { send(mode, &c, &u_buf[u_off..u_off + len], k) };
                // SAFETY: as above.
                let in_k = unsafe { std::slice::from_raw_parts(k, len) };
                prop_assert_eq!(in_k, &data[..], "send, {}", mode.name());

                let frame: Vec<u8> = data.iter().map(|b| b.wrapping_add(1)).collect();
                // SAFETY: as above; K holds the largest frame of the context.
                unsafe {
                    before_receive(mode, &c, k, len);
                    device_writes(c.ops, k, &frame);
                }
                let u = &mut u_buf[u_off..u_off + len];
                // SAFETY: as above.
                unsafe { receive(mode, &c, k, u) };
                prop_assert_eq!(&u[..], &frame[..], "receive, {}", mode.name());
            }
        }
    }
}
