//! What `shmnet capture`'s taps cost the data plane, measured in one thread with no other
//! party (`shmnet bench capture`'s data-plane table).
//!
//! A ttcp run between processes on a shared 2-vCPU machine moves by more than the 5 % the
//! issue allows a capture whose filter matches nothing, so the taps are also timed where
//! nothing else moves: the data plane's own receive ([`Captures::receive_batch`], the one
//! the server runs) and transmit tap ([`Captures::tap_tx`]) around the stack's UDP paths,
//! on the same frames, in four variants interleaved batch by batch (the order rotating):
//!
//! | variant | what runs |
//! |---|---|
//! | `none`, `none_again` | the stack alone (`Interface::receive` per frame; `udp_send_to` per message): no capture code at all. Timed twice, so that `none_again ÷ none` shows what this machine cannot resolve |
//! | `off` | the data plane's path with no capture running: one test of an empty list per batch |
//! | `miss` | the same with a capture of rx and tx whose filter (`tcp port 22`) matches none of the UDP frames |
//!
//! The stack alone is the smallest denominator the data plane has (the server also moves
//! descriptors through rings and pools for every frame), so `miss ÷ none` bounds from above
//! what the filter costs the server per frame. Medians of per-message nanoseconds over the
//! batches; every message must go through (received whole, or sent as its frames) or the
//! row's figures are NaN.

use super::capturing::Captures;
use crate::capture::{CaptureSpec, Filter, RingWriter};
use crate::pool::ChanPool;
use shmnet_chan::heap::heap_pools;
use shmnet_chan::{AllocPolicy, PoolGeometry};
use shmnet_stack::bench as sb;
use shmnet_stack::socket::NoHook;
use shmnet_stack::{BufIdx, BufferPool, Instant, Interface};
use std::hint::black_box;
use std::time::Instant as WallClock;

/// The four variants, in [the table](self)'s order.
const VARIANTS: usize = 4;
const NONE: usize = 0;
const NONE_AGAIN: usize = 1;
const OFF: usize = 2;
const MISS: usize = 3;

/// One path's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TapCost {
    /// UDP payload bytes per message.
    pub size: usize,
    /// `rx` (frames into the stack) or `tx` (frames out of it).
    pub dir: &'static str,
    /// Ethernet frames per message.
    pub frames_per_msg: usize,
    /// Median ns per message: the stack alone.
    pub none_ns: f64,
    /// The same, timed again in the same batches.
    pub none_again_ns: f64,
    /// The data plane's path, no capture running.
    pub off_ns: f64,
    /// The data plane's path, a capture whose filter matches nothing.
    pub miss_ns: f64,
    /// `none_again ÷ none`: the noise floor.
    pub none_again_over_none: f64,
    /// `off ÷ none`.
    pub off_over_none: f64,
    /// `miss ÷ none`.
    pub miss_over_none: f64,
    /// Timed batches per variant.
    pub batches: usize,
    /// Frames the `miss` capture kept: 0, or its filter matched what it should not.
    pub miss_kept: u64,
}

/// The capture of the `miss` variant: rx and tx, `tcp port 22`, a small ring.
fn miss_capture() -> Option<Captures> {
    let filter = Filter::parse(&["tcp".into(), "port".into(), "22".into()]).ok()?;
    let spec = CaptureSpec {
        rx: true,
        tx: true,
        drops: false,
        snaplen: 0,
        filter: Some(filter),
        ring_bytes: crate::capture::MIN_RING,
    };
    let ring = RingWriter::create(spec.ring_bytes).ok()?;
    let mut c = Captures::default();
    c.start(0, spec, ring).then_some(c)
}

fn pool(buffers: usize) -> ChanPool {
    let per_pool = (buffers as u32).next_power_of_two().max(64);
    let (server, _driver) = heap_pools(
        PoolGeometry {
            pools: 1,
            per_pool,
            data_size: 2048,
            free_cap: per_pool,
            policy: AllocPolicy::Lifo,
        },
        None,
    );
    ChanPool::new(server)
}

/// Builds a row from each variant's per-batch figures; NaN unless every message went
/// through.
fn row(
    size: usize,
    dir: &'static str,
    frames_per_msg: usize,
    ns: [Vec<f64>; VARIANTS],
    whole: bool,
    miss: &Captures,
) -> TapCost {
    let batches = ns[NONE].len();
    let m = ns.map(|v| if whole { sb::median(v) } else { f64::NAN });
    TapCost {
        size,
        dir,
        frames_per_msg,
        none_ns: m[NONE],
        none_again_ns: m[NONE_AGAIN],
        off_ns: m[OFF],
        miss_ns: m[MISS],
        none_again_over_none: m[NONE_AGAIN] / m[NONE],
        off_over_none: m[OFF] / m[NONE],
        miss_over_none: m[MISS] / m[NONE],
        batches,
        miss_kept: miss.counters().kept,
    }
}

/// Runs `batch(variant, now)` for every variant in every batch, the order turning each
/// batch, and collects the nanoseconds per message each returns (after one untimed batch).
fn interleaved(
    batches: usize,
    mut batch: impl FnMut(usize, Instant) -> f64,
) -> [Vec<f64>; VARIANTS] {
    let mut ns: [Vec<f64>; VARIANTS] = Default::default();
    for b in 0..=batches {
        let now = Instant::from_nanos(b as u64);
        for k in 0..VARIANTS {
            let v = (b + k) % VARIANTS;
            let per_msg = batch(v, now);
            if b > 0 {
                ns[v].push(per_msg);
            }
        }
    }
    ns
}

/// The stack alone on a batch of frames. Out of line, as its twin and [`data_plane`]:
/// each variant's loop is a function of its own, so that where the compiler puts the code
/// moves `none_again ÷ none` as it moves `off ÷ none`, and the floor is a fair one.
#[inline(never)]
fn stack_alone(
    iface: &mut Interface,
    pool: &mut ChanPool,
    tx: &mut Vec<BufIdx>,
    frames: &[BufIdx],
    now: Instant,
) {
    for &b in frames {
        iface.receive(pool, b, now, tx);
    }
}

/// [`stack_alone`], a second copy (`black_box` keeps the two from being merged).
#[inline(never)]
fn stack_alone_again(
    iface: &mut Interface,
    pool: &mut ChanPool,
    tx: &mut Vec<BufIdx>,
    frames: &[BufIdx],
    now: Instant,
) {
    for &b in black_box(frames) {
        iface.receive(pool, b, now, tx);
    }
}

/// The data plane's receive ([`Captures::receive_batch`]).
#[inline(never)]
fn data_plane(
    captures: &mut Captures,
    iface: &mut Interface,
    pool: &mut ChanPool,
    tx: &mut Vec<BufIdx>,
    frames: &[BufIdx],
    now: Instant,
) {
    captures.receive_batch(iface, pool, tx, frames.iter().copied(), now);
}

/// The receive path at `size` bytes per message, `batches` timed batches per variant.
pub fn rx(size: usize, batches: usize) -> Option<TapCost> {
    let frames = sb::rx_frames(size, false);
    if frames.is_empty() {
        return None;
    }
    let n = sb::batch_len(size);
    let mut pool = pool(n * frames.len() + 64);
    let (mut iface, sock) = sb::receiver(false, n);
    let mut empty = Captures::default();
    let mut miss = miss_capture()?;
    let mut user = vec![0u8; 65_536];
    let mut loaded: Vec<BufIdx> = Vec::with_capacity(n * frames.len());
    let mut tx = Vec::new();
    let mut whole = true;
    let ns = interleaved(batches, |v, now| {
        loaded.clear();
        for _ in 0..n {
            for f in &frames {
                loaded.extend(sb::load(&mut pool, f));
            }
        }
        whole &= loaded.len() == n * frames.len();
        let t0 = WallClock::now();
        match v {
            NONE => stack_alone(&mut iface, &mut pool, &mut tx, &loaded, now),
            NONE_AGAIN => stack_alone_again(&mut iface, &mut pool, &mut tx, &loaded, now),
            OFF => data_plane(&mut empty, &mut iface, &mut pool, &mut tx, &loaded, now),
            _ => data_plane(&mut miss, &mut iface, &mut pool, &mut tx, &loaded, now),
        }
        let dt = t0.elapsed().as_nanos() as f64;
        for _ in 0..n {
            let got = iface.udp_recv(&mut pool, sock, &mut user, &mut NoHook);
            whole &= matches!(got, Ok(Some(info)) if black_box(info.len) == size);
        }
        for b in tx.drain(..) {
            pool.free_chain(b);
        }
        dt / n as f64
    });
    Some(row(size, "rx", frames.len(), ns, whole, &miss))
}

/// The transmit path at `size` bytes per message, `batches` timed batches per variant.
pub fn tx(size: usize, batches: usize) -> Option<TapCost> {
    let frames_per_msg = sb::frames_per_message(size);
    let n = sb::batch_len(size);
    let mut pool = pool(n * frames_per_msg + 64);
    let (mut iface, sock, dst) = sb::sender(false)?;
    let mut empty = Captures::default();
    let mut miss = miss_capture()?;
    let data: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut tx: Vec<BufIdx> = Vec::with_capacity(n * frames_per_msg);
    let mut whole = true;
    let ns = interleaved(batches, |v, now| {
        let t0 = WallClock::now();
        for _ in 0..n {
            whole &= iface
                .udp_send_to(&mut pool, sock, black_box(&data), dst, now, &mut tx)
                .is_ok();
        }
        match v {
            NONE | NONE_AGAIN => {}
            OFF => empty.tap_tx(&pool, &tx),
            _ => miss.tap_tx(&pool, &tx),
        }
        let dt = t0.elapsed().as_nanos() as f64;
        whole &= tx.len() == n * frames_per_msg;
        for b in tx.drain(..) {
            pool.free_chain(b);
        }
        dt / n as f64
    });
    Some(row(size, "tx", frames_per_msg, ns, whole, &miss))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message goes through each variant (the figures are numbers, not NaN), and the
    /// capture of `miss` really ran: the measurement times the paths it names.
    #[test]
    fn every_variant_moves_every_message() {
        for size in [10, 14_792] {
            for r in [rx(size, 3), tx(size, 3)] {
                let r = r.expect("the benchmark's interfaces and ring");
                assert!(
                    [r.none_ns, r.none_again_ns, r.off_ns, r.miss_ns]
                        .iter()
                        .all(|x| x.is_finite() && *x > 0.0),
                    "{r:?}"
                );
                assert_eq!(r.batches, 3);
                assert_eq!(r.miss_kept, 0, "tcp port 22 matched a UDP frame");
            }
        }
    }
}
