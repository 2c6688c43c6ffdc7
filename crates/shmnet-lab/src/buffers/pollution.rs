//! The side effect Table I of seed 003 names for CH and CS and not for NC: cache pollution.
//! An application's working set W, sized to half the L1d, half the L2 and half the last
//! level, is read into the cache; then `PACKETS` packets go through the method (each through
//! its own buffer K, as a pool hands out different buffers); then W is read again and timed.
//! The same read after no packets at all is the baseline; the table gives what the packets
//! added, in ticks per line of W.

use super::coherence::{self, Ctx, Mode};
use super::model::Direction;
use crate::mem::{LINE, Paging, Region};
use crate::tsc;

/// Packets between filling W and reading it again.
pub const PACKETS: usize = 32;
/// Bytes per packet: an Ethernet frame.
pub const PACKET_BYTES: usize = 1500;
/// Bytes between two packets' buffers (a pool's 2 KiB buffers).
pub const K_STRIDE: usize = 2048;

/// One row: a method, a direction, a working set.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PollutionRow {
    /// Send or receive.
    pub direction: Direction,
    /// The method.
    pub mode: Mode,
    /// Which cache W is sized to ("L1d", "L2", "LLC").
    pub cache: &'static str,
    /// W's bytes (half that cache).
    pub working_set_bytes: usize,
    /// Ticks per line of W, read after the packets (the mean of the middle half).
    pub ticks_per_line: f64,
    /// The same with no packets in between.
    pub baseline_ticks_per_line: f64,
    /// What the packets added per line of W.
    pub added_ticks_per_line: f64,
}

/// Reads every line of `w` (one word each); returns a value that depends on them.
fn read_all(w: &Region, len: usize) -> u64 {
    let p = w.ptr();
    let mut acc = 0u64;
    for off in (0..len).step_by(LINE) {
        // SAFETY: `off < len <= w.len()`.
        acc = acc.wrapping_add(unsafe { p.add(off).cast::<u64>().read_volatile() });
    }
    acc
}

/// Times W's read after `PACKETS` packets by `mode` (`None`: no packets), `samples` times.
///
/// # Safety
/// `k .. k + PACKETS * K_STRIDE` must be mapped, writable and apart from `u` and `frame`;
/// `ctx`'s regions mapped.
#[allow(clippy::too_many_arguments)]
unsafe fn timed_read(
    w: &Region,
    len: usize,
    packets: Option<(Direction, Mode)>,
    ctx: &Ctx,
    k: *mut u8,
    u: &mut [u8],
    frame: &[u8],
    samples: usize,
    empty: f64,
) -> f64 {
    let lines = (len / LINE).max(1) as f64;
    let mut v = Vec::with_capacity(samples);
    for _ in 0..samples {
        std::hint::black_box(read_all(w, len));
        std::hint::black_box(read_all(w, len));
        if let Some((dir, mode)) = packets {
            for i in 0..PACKETS {
                // SAFETY: the caller's promise: buffer i is inside K's range.
                let ki = unsafe { k.add(i * K_STRIDE) };
                // SAFETY: as above; U and the frame are apart from K.
                let r = unsafe {
                    match dir {
                        Direction::Send => coherence::send(mode, ctx, &u[..PACKET_BYTES], ki),
                        Direction::Receive => {
                            let a = coherence::before_receive(mode, ctx, ki, PACKET_BYTES);
                            coherence::device_writes(ctx.ops, ki, &frame[..PACKET_BYTES]);
                            a ^ coherence::receive(mode, ctx, ki, &mut u[..PACKET_BYTES])
                        }
                    }
                };
                std::hint::black_box(r);
            }
        }
        let t0 = tsc::start();
        let r = read_all(w, len);
        let t1 = tsc::stop();
        std::hint::black_box(r);
        v.push(((t1 - t0) as f64 - empty).max(0.0) / lines);
    }
    super::quartiles(&mut v).1
}

/// The pollution table: every method, both directions, W sized to each cache (`caches`:
/// name, bytes, samples — more for the small ones, whose reads are short and noisy).
///
/// # Safety
/// `k .. k + PACKETS * K_STRIDE` must be mapped, writable and apart from `u` and `frame`;
/// `ctx`'s regions mapped.
#[allow(clippy::too_many_arguments)]
pub unsafe fn table(
    caches: [(&'static str, usize, usize); 3],
    ctx: &Ctx,
    k: *mut u8,
    u: &mut [u8],
    frame: &[u8],
    empty: f64,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<PollutionRow>, crate::mem::MapError> {
    let mut rows = Vec::new();
    for (name, cache_bytes, samples) in caches {
        let len = (cache_bytes / 2).max(LINE);
        let w = Region::new(len, Paging::Huge)?;
        progress(&format!("pollution: W = half the {name}"));
        // SAFETY: the caller's promises, passed on.
        let base = unsafe { timed_read(&w, len, None, ctx, k, u, frame, samples, empty) };
        for dir in Direction::BOTH {
            for mode in Mode::ALL {
                // SAFETY: as above.
                let t = unsafe {
                    timed_read(&w, len, Some((dir, mode)), ctx, k, u, frame, samples, empty)
                };
                rows.push(PollutionRow {
                    direction: dir,
                    mode,
                    cache: name,
                    working_set_bytes: len,
                    ticks_per_line: t,
                    baseline_ticks_per_line: base,
                    added_ticks_per_line: t - base,
                });
            }
        }
    }
    Ok(rows)
}
