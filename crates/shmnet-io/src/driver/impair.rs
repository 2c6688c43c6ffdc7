//! Network impairment: [`Impaired`] wraps any [`Driver`] and loses, duplicates, corrupts,
//! delays, reorders and paces the frames that cross it, in both directions — what Linux's
//! `netem` qdisc does, which the kernel here does not have (`shmnet serve --impair SPEC`).
//!
//! # The pipeline
//!
//! Every frame, received from the device (rx) or handed to it by the stack (tx), goes
//! through the same stages, each direction with its own queues, counters and random streams:
//!
//! 1. **loss** (`loss=P%`): the frame is dropped, its buffer released.
//! 2. **dup** (`dup=P%`): a copy is made in a second pool buffer; it follows the original
//!    through the later stages (with its own delay). No free buffer: the copy is skipped and
//!    counted in `no_buffer`.
//! 3. **corrupt** (`corrupt=P%`): one random bit past the Ethernet header is flipped (so the
//!    IPv4, ICMP, UDP or TCP checksum catches it). A buffer someone else also holds is copied
//!    first, so only this frame changes.
//! 4. **delay** (`delay=T`, `jitter=J`): the frame waits `T` (± `J`, uniform, never below
//!    0) in a queue sorted by due time — with jitter, frames can overtake each other, as with
//!    netem. At most `limit` frames wait; more are dropped (`queue_dropped`).
//!    **reorder** (`reorder=P%`), netem's meaning: with a delay, a frame skips the delay
//!    queue and goes on at once, overtaking the frames still waiting. Without a delay, a
//!    frame is held back until the next frame of its direction has passed (at most
//!    [`REORDER_HOLD`], so a last frame is not held forever).
//! 5. **rate** (`rate=R`): a token bucket on frame bytes, filled at `R` and holding
//!    [`burst_bytes`] (one millisecond at `R`, at least one full frame): frames that find it
//!    empty wait in a FIFO of at most `limit` frames; more are dropped (`rate_dropped`), as by
//!    a `tbf`.
//!
//! # Time and wake-ups
//!
//! The decorator never blocks and never sleeps. Held frames leave at later calls: each
//! `rx_burst` first transmits the tx frames that came due and releases the rx ones; each
//! `tx_burst` does the same for tx. So that a caller asleep in its idle path comes back when
//! a held frame is due (and not only when unrelated traffic arrives), the decorator answers
//! the [`Driver`] wake-up contract itself: over a device with a receive fd, [`Driver::rx_fd`]
//! is an epoll set holding the device's fd and a timer armed for the next due frame (the same
//! descriptor for the decorator's life); over a device without one, [`Driver::idle_hint`]
//! says how long until the next due frame.
//!
//! # Reproducibility
//!
//! All randomness comes from `seed`: each direction and each impairment has its own
//! generator (a `fastrand::Rng` seeded from `seed`, the direction and the impairment), and
//! every frame that enters a direction takes one draw from each impairment that is on. The
//! i-th frame of a direction is thus lost, or not, whatever the other direction carries and
//! whatever the other impairments do: the same traffic with the same spec meets the same
//! fate.
//!
//! # Buffers
//!
//! Unlike a plain driver, the decorator holds pool buffers between calls (the frames it
//! delays or paces): at most `limit` per queue and direction, so a large `limit` at a high
//! rate can leave receive short of buffers (counted as `rx_no_buffer`). Every frame it drops
//! has its buffer released at once; [`Impaired::discard_held`] releases what it still holds
//! (the window takes them back anyway when the server stops).

use super::af_packet::link::now as monotonic_now;
use super::af_packet::wake::Wake;
use super::{Driver, DriverStats, ETH_HDR, RxFrame};
use serde::{Deserialize, Serialize};
use shmnet_chan::DriverPools;
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// The default of [`ImpairSpec::limit`]: netem's.
pub const DEFAULT_LIMIT: usize = 1000;

/// The longest `delay=` or `jitter=` the spec takes.
pub const MAX_TIME: Duration = Duration::from_secs(60);

/// Without a delay, the longest a reordered frame waits for the next frame to pass.
pub const REORDER_HOLD: Duration = Duration::from_millis(10);

/// How an interface is impaired: what `--impair` says, typed.
///
/// Parsed from `KEY=VALUE` pairs separated by commas ([`std::str::FromStr`]), shown the same
/// way ([`fmt::Display`]); as JSON, the fields below (all optional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImpairSpec {
    /// Percent of frames dropped (`loss=1%`).
    pub loss_pct: f64,
    /// Percent of frames reordered (`reorder=25%`): with a delay, sent at once past the
    /// delayed ones; without, held until the next frame has passed.
    pub reorder_pct: f64,
    /// Percent of frames sent twice (`dup=1%`).
    pub dup_pct: f64,
    /// Percent of frames with one bit flipped past the Ethernet header (`corrupt=0.1%`).
    pub corrupt_pct: f64,
    /// Microseconds every frame waits (`delay=10ms`).
    pub delay_us: u64,
    /// Microseconds the delay varies by, uniformly either way (`jitter=2ms`).
    pub jitter_us: u64,
    /// Bits per second frames are paced to (`rate=100mbit`; `None`: not paced).
    pub rate_bit_s: Option<u64>,
    /// Frames each queue (delay, rate) holds per direction before it drops (`limit=1000`).
    pub limit: usize,
    /// The seed of every random choice (`seed=1`).
    pub seed: u64,
}

impl Default for ImpairSpec {
    fn default() -> Self {
        Self {
            loss_pct: 0.0,
            reorder_pct: 0.0,
            dup_pct: 0.0,
            corrupt_pct: 0.0,
            delay_us: 0,
            jitter_us: 0,
            rate_bit_s: None,
            limit: DEFAULT_LIMIT,
            seed: 0,
        }
    }
}

/// Why an `--impair` spec was refused: each says what is wrong and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImpairSpecError {
    /// Nothing was given.
    #[error(
        "the impairment is empty: give KEY=VALUE pairs separated by commas, like loss=1%,delay=10ms"
    )]
    Empty,
    /// An item has no `=`.
    #[error("{0:?} is not KEY=VALUE: give pairs separated by commas, like loss=1%,delay=10ms")]
    NotAPair(String),
    /// A key shmnet does not know.
    #[error(
        "unknown impairment {0:?}: use loss, reorder, dup, corrupt, delay, jitter, rate, limit or seed"
    )]
    UnknownKey(String),
    /// A key given twice.
    #[error("{0}= is given twice: give each impairment once")]
    Repeated(&'static str),
    /// A percentage that is not one, or out of range.
    #[error(
        "{key}={value:?} is not a percentage: use 0% to 100%, with the % sign, like 1% or 0.5%"
    )]
    BadPercent {
        /// The key.
        key: &'static str,
        /// What was given.
        value: String,
    },
    /// A time that is not one, or too long.
    #[error(
        "{key}={value:?} is not a time: use a number and a unit (s, ms or us), like 10ms or 500us, at most 60s"
    )]
    BadTime {
        /// The key.
        key: &'static str,
        /// What was given.
        value: String,
    },
    /// A rate that is not one.
    #[error(
        "rate={0:?} is not a rate: use bits per second with a unit (bit, kbit, mbit or gbit), like 500kbit, 100mbit or 1gbit"
    )]
    BadRate(String),
    /// A queue limit that is not a positive whole number.
    #[error("limit={0:?}: use a whole number of frames, at least 1 (the default is 1000)")]
    BadLimit(String),
    /// A seed that is not a whole number.
    #[error("seed={0:?}: use a whole number from 0 to 18446744073709551615")]
    BadSeed(String),
    /// `jitter=` without `delay=`.
    #[error("jitter= varies the delay: give delay= too, like delay=10ms,jitter=2ms")]
    JitterWithoutDelay,
}

/// The canonical name of a key (`duplicate` is `dup`, as netem spells it both ways).
fn canonical(key: &str) -> Option<&'static str> {
    Some(match key {
        "loss" => "loss",
        "reorder" => "reorder",
        "dup" | "duplicate" => "dup",
        "corrupt" => "corrupt",
        "delay" => "delay",
        "jitter" => "jitter",
        "rate" => "rate",
        "limit" => "limit",
        "seed" => "seed",
        _ => return None,
    })
}

/// Splits `10ms` into `(10.0, "ms")`: a plain decimal number, then the unit.
fn number_unit(value: &str) -> Option<(f64, &str)> {
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (n, unit) = value.split_at(split);
    if n.is_empty() {
        return None;
    }
    let n: f64 = n.parse().ok()?;
    n.is_finite().then_some((n, unit))
}

fn percent(key: &'static str, value: &str) -> Result<f64, ImpairSpecError> {
    let bad = || ImpairSpecError::BadPercent {
        key,
        value: value.to_string(),
    };
    match number_unit(value) {
        Some((n, "%")) if (0.0..=100.0).contains(&n) => Ok(n),
        _ => Err(bad()),
    }
}

fn micros(key: &'static str, value: &str) -> Result<u64, ImpairSpecError> {
    let scale = |unit: &str| match unit {
        "s" => Some(1e6),
        "ms" => Some(1e3),
        "us" | "µs" => Some(1.0),
        _ => None,
    };
    number_unit(value)
        .and_then(|(n, unit)| Some((n * scale(unit)?).round()))
        .filter(|&us| us <= MAX_TIME.as_micros() as f64)
        .map(|us| us as u64)
        .ok_or_else(|| ImpairSpecError::BadTime {
            key,
            value: value.to_string(),
        })
}

fn bits_per_s(value: &str) -> Result<u64, ImpairSpecError> {
    let scale = |unit: &str| match unit.to_ascii_lowercase().as_str() {
        "bit" => Some(1.0),
        "kbit" => Some(1e3),
        "mbit" => Some(1e6),
        "gbit" => Some(1e9),
        _ => None,
    };
    number_unit(value)
        .and_then(|(n, unit)| Some((n * scale(unit)?).round()))
        .filter(|&r| (1.0..=1e13).contains(&r))
        .map(|r| r as u64)
        .ok_or_else(|| ImpairSpecError::BadRate(value.to_string()))
}

impl std::str::FromStr for ImpairSpec {
    type Err = ImpairSpecError;

    /// `KEY=VALUE[,KEY=VALUE…]`, keys `loss`, `reorder`, `dup`, `corrupt` (percentages such
    /// as `1%` or `0.5%`), `delay`, `jitter` (times: `10ms`, `500us`, `1s`), `rate` (`500kbit`,
    /// `100mbit`, `1gbit`), `limit` (frames) and `seed`.
    fn from_str(s: &str) -> Result<Self, ImpairSpecError> {
        if s.trim().is_empty() {
            return Err(ImpairSpecError::Empty);
        }
        let mut spec = ImpairSpec::default();
        let mut seen: Vec<&'static str> = Vec::new();
        for item in s.split(',') {
            let item = item.trim();
            let Some((key, value)) = item.split_once('=') else {
                return Err(ImpairSpecError::NotAPair(item.to_string()));
            };
            let (key, value) = (key.trim(), value.trim());
            let Some(key) = canonical(&key.to_ascii_lowercase()) else {
                return Err(ImpairSpecError::UnknownKey(key.to_string()));
            };
            if seen.contains(&key) {
                return Err(ImpairSpecError::Repeated(key));
            }
            seen.push(key);
            match key {
                "loss" => spec.loss_pct = percent(key, value)?,
                "reorder" => spec.reorder_pct = percent(key, value)?,
                "dup" => spec.dup_pct = percent(key, value)?,
                "corrupt" => spec.corrupt_pct = percent(key, value)?,
                "delay" => spec.delay_us = micros(key, value)?,
                "jitter" => spec.jitter_us = micros(key, value)?,
                "rate" => spec.rate_bit_s = Some(bits_per_s(value)?),
                "limit" => {
                    spec.limit = value
                        .parse()
                        .ok()
                        .filter(|&n: &usize| n > 0)
                        .ok_or_else(|| ImpairSpecError::BadLimit(value.to_string()))?;
                }
                // "seed": the last name `canonical` gives.
                _ => {
                    spec.seed = value
                        .parse()
                        .map_err(|_| ImpairSpecError::BadSeed(value.to_string()))?;
                }
            }
        }
        if spec.jitter_us > 0 && spec.delay_us == 0 {
            return Err(ImpairSpecError::JitterWithoutDelay);
        }
        Ok(spec)
    }
}

/// A time as the spec writes it: `10ms`, `500us`, `2s`.
fn fmt_us(us: u64) -> String {
    if us % 1_000_000 == 0 {
        format!("{}s", us / 1_000_000)
    } else if us % 1_000 == 0 {
        format!("{}ms", us / 1_000)
    } else {
        format!("{us}us")
    }
}

/// A rate as the spec writes it: `100mbit`, `1gbit`, `1500kbit`.
fn fmt_rate(bits: u64) -> String {
    for (unit, scale) in [
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ] {
        if bits % scale == 0 {
            return format!("{}{unit}", bits / scale);
        }
    }
    format!("{bits}bit")
}

impl fmt::Display for ImpairSpec {
    /// The spec as `--impair` takes it, giving only what is not the default (and always the
    /// seed, so that a run can be repeated): `loss=1%,delay=10ms,seed=0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        for (key, pct) in [
            ("loss", self.loss_pct),
            ("reorder", self.reorder_pct),
            ("dup", self.dup_pct),
            ("corrupt", self.corrupt_pct),
        ] {
            if pct > 0.0 {
                parts.push(format!("{key}={pct}%"));
            }
        }
        if self.delay_us > 0 {
            parts.push(format!("delay={}", fmt_us(self.delay_us)));
        }
        if self.jitter_us > 0 {
            parts.push(format!("jitter={}", fmt_us(self.jitter_us)));
        }
        if let Some(r) = self.rate_bit_s {
            parts.push(format!("rate={}", fmt_rate(r)));
        }
        if self.limit != DEFAULT_LIMIT {
            parts.push(format!("limit={}", self.limit));
        }
        parts.push(format!("seed={}", self.seed));
        f.write_str(&parts.join(","))
    }
}

/// What one direction of an [`Impaired`] driver did to its frames.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImpairDirStats {
    /// Frames that entered (from the device for rx, from the stack for tx).
    pub seen: u64,
    /// Frames that left (to the stack for rx, to the device for tx), copies included.
    pub passed: u64,
    /// Frames dropped by `loss=`.
    pub dropped_loss: u64,
    /// Copies made by `dup=`.
    pub duplicated: u64,
    /// Frames with a bit flipped by `corrupt=`.
    pub corrupted: u64,
    /// Frames (copies included) that entered the delay queue.
    pub delayed: u64,
    /// Frames reordered by `reorder=`: sent past the delay queue, or held back for the next
    /// frame.
    pub reordered: u64,
    /// Frames dropped because the rate queue was full.
    pub rate_dropped: u64,
    /// Frames dropped because the delay queue was full.
    pub queue_dropped: u64,
    /// Copies (for `dup=`, or to corrupt a shared buffer) not made: no pool buffer was free.
    pub no_buffer: u64,
    /// Frames held now (delayed, paced, reordered, or waiting for the caller to take them).
    pub held: u64,
}

/// The counters of an [`Impaired`] driver, per direction; in [`DriverStats::impair`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImpairStats {
    /// Frames from the device to the stack.
    pub rx: ImpairDirStats,
    /// Frames from the stack to the device.
    pub tx: ImpairDirStats,
}

/// The spec as the pipeline uses it: probabilities, durations.
#[derive(Clone, Debug)]
struct Params {
    loss: f64,
    dup: f64,
    corrupt: f64,
    reorder: f64,
    delay: Duration,
    jitter: Duration,
    rate: Option<u64>,
    limit: usize,
}

impl Params {
    fn of(s: &ImpairSpec) -> Self {
        let p = |pct: f64| (pct / 100.0).clamp(0.0, 1.0);
        Self {
            loss: p(s.loss_pct),
            dup: p(s.dup_pct),
            corrupt: p(s.corrupt_pct),
            reorder: p(s.reorder_pct),
            delay: Duration::from_micros(s.delay_us).min(MAX_TIME),
            jitter: Duration::from_micros(s.jitter_us).min(MAX_TIME),
            rate: s.rate_bit_s.filter(|&r| r > 0),
            limit: s.limit.max(1),
        }
    }

    /// Whether frames go through the delay queue.
    fn delays(&self) -> bool {
        !self.delay.is_zero() || !self.jitter.is_zero()
    }

    /// Whether anything holds frames for a time (so the clock must be read).
    fn timed(&self) -> bool {
        self.delays() || self.rate.is_some() || self.reorder > 0.0
    }
}

/// How many bytes the rate's token bucket holds at `bit_s`: one millisecond of the rate, and
/// at least one full Ethernet frame (a larger frame passes when the bucket is full, taking it
/// below zero).
pub fn burst_bytes(bit_s: u64) -> u64 {
    (bit_s / 8 / 1000).max(1514)
}

/// Credit units per bit: the bucket counts bits × 10⁹, so that a nanosecond adds exactly
/// the rate in bits per second.
const PER_BIT: i128 = 1_000_000_000;

/// The token bucket of `rate=`, in integers so that the time it says a frame may pass is
/// exact (no frame is found one rounding short at its due time).
#[derive(Clone, Debug)]
struct Bucket {
    rate: i128,
    cap: i128,
    credit: i128,
    last: Option<Duration>,
}

impl Bucket {
    fn new(bit_s: u64) -> Self {
        let cap = i128::from(burst_bytes(bit_s)) * 8 * PER_BIT;
        Self {
            rate: i128::from(bit_s),
            cap,
            credit: cap,
            last: None,
        }
    }

    fn cost(len: u32) -> i128 {
        i128::from(len) * 8 * PER_BIT
    }

    fn refill(&mut self, now: Duration) {
        match self.last {
            Some(l) if now > l => {
                let add = (now - l).as_nanos().min(u64::MAX as u128) as i128 * self.rate;
                self.credit = (self.credit + add).min(self.cap);
                self.last = Some(now);
            }
            Some(_) => {}
            None => self.last = Some(now),
        }
    }

    /// Takes a frame of `len` bytes if the bucket allows it now.
    fn take(&mut self, now: Duration, len: u32) -> bool {
        self.refill(now);
        let cost = Self::cost(len);
        if self.credit >= cost.min(self.cap) {
            self.credit -= cost;
            true
        } else {
            false
        }
    }

    /// When a frame of `len` bytes may pass.
    fn ready_at(&self, len: u32) -> Duration {
        let last = self.last.unwrap_or_default();
        let short = Self::cost(len).min(self.cap) - self.credit;
        if short <= 0 {
            return last;
        }
        let ns = (short + self.rate - 1) / self.rate;
        last + Duration::from_nanos(ns.min(u64::MAX as i128) as u64)
    }
}

/// A frame as a lane holds it.
trait Frame: Copy {
    fn buf(&self) -> u32;
    fn len(&self) -> u32;
    fn moved_to(self, buf: u32) -> Self;
}

impl Frame for RxFrame {
    fn buf(&self) -> u32 {
        self.buf
    }
    fn len(&self) -> u32 {
        self.len
    }
    fn moved_to(self, buf: u32) -> Self {
        Self { buf, ..self }
    }
}

/// A frame the stack handed over for transmission.
#[derive(Clone, Copy, Debug)]
struct TxFrame {
    buf: u32,
    len: u32,
}

impl Frame for TxFrame {
    fn buf(&self) -> u32 {
        self.buf
    }
    fn len(&self) -> u32 {
        self.len
    }
    fn moved_to(self, buf: u32) -> Self {
        Self { buf, ..self }
    }
}

/// One generator per impairment, so that each decides its frames whatever the others do.
#[derive(Clone, Debug)]
struct Streams {
    loss: fastrand::Rng,
    dup: fastrand::Rng,
    corrupt: fastrand::Rng,
    reorder: fastrand::Rng,
    jitter: fastrand::Rng,
}

/// SplitMix64's finaliser: spreads a seed over 64 bits, so that nearby seeds (0, 1, …) and
/// the per-stream tweaks give unrelated generators.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Streams {
    fn new(seed: u64, direction: u64) -> Self {
        let rng = |kind: u64| fastrand::Rng::with_seed(mix(seed ^ mix(direction << 8 | kind)));
        Self {
            loss: rng(1),
            dup: rng(2),
            corrupt: rng(3),
            reorder: rng(4),
            jitter: rng(5),
        }
    }
}

/// One draw with probability `p` (none when `p` is 0, so an impairment that is off takes
/// nothing from its stream).
fn chance(rng: &mut fastrand::Rng, p: f64) -> bool {
    p > 0.0 && rng.f64() < p
}

/// Copies frame `f` into a fresh buffer (same offset and length); `None` when no buffer is
/// free.
fn copy_frame<F: Frame>(pools: &mut DriverPools, bytes: &mut Vec<u8>, f: F) -> Option<F> {
    let (off, len) = pools.buffers().off_len(f.buf())?;
    let nb = pools.alloc()?;
    let b = pools.buffers();
    bytes.resize(usize::from(len), 0);
    let ok = b.read(f.buf(), off.into(), bytes).is_ok()
        && b.write(nb, off.into(), bytes).is_ok()
        && b.set_off_len(nb, off, len).is_ok();
    if ok {
        Some(f.moved_to(nb))
    } else {
        pools.release(nb);
        None
    }
}

/// One direction: its generators, queues and counters.
struct Lane<F> {
    rng: Streams,
    /// Frames waiting out their delay, sorted by due time.
    delayed: VecDeque<(Duration, F)>,
    /// Without a delay: the frame held back until the next one has passed, and until when
    /// at most.
    swapped: Option<(Duration, F)>,
    /// Frames waiting for the token bucket, in order.
    paced: VecDeque<F>,
    bucket: Option<Bucket>,
    /// Frames through every stage: to the device (tx, at the end of the call), or to the
    /// caller (rx, as many as it takes).
    out: VecDeque<F>,
    stats: ImpairDirStats,
}

impl<F: Frame> Lane<F> {
    fn new(p: &Params, seed: u64, direction: u64) -> Self {
        Self {
            rng: Streams::new(seed, direction),
            delayed: VecDeque::new(),
            swapped: None,
            paced: VecDeque::new(),
            bucket: p.rate.map(Bucket::new),
            out: VecDeque::new(),
            stats: ImpairDirStats::default(),
        }
    }

    /// A frame enters the direction.
    fn admit(
        &mut self,
        p: &Params,
        pools: &mut DriverPools,
        bytes: &mut Vec<u8>,
        now: Duration,
        f: F,
    ) {
        self.stats.seen += 1;
        // One draw from each impairment that is on, whatever happens to the frame.
        let lost = chance(&mut self.rng.loss, p.loss);
        let dup = chance(&mut self.rng.dup, p.dup);
        let corrupt = chance(&mut self.rng.corrupt, p.corrupt);
        if lost {
            pools.release(f.buf());
            self.stats.dropped_loss += 1;
            return;
        }
        let copy = if dup {
            let c = copy_frame(pools, bytes, f);
            match c {
                Some(_) => self.stats.duplicated += 1,
                None => self.stats.no_buffer += 1,
            }
            c
        } else {
            None
        };
        let f = if corrupt {
            self.corrupt(pools, bytes, f)
        } else {
            f
        };
        self.delay_stage(p, pools, now, f);
        if let Some(c) = copy {
            self.delay_stage(p, pools, now, c);
        }
    }

    /// Flips one random bit past the Ethernet header (in a private copy if the buffer is
    /// shared).
    fn corrupt(&mut self, pools: &mut DriverPools, bytes: &mut Vec<u8>, f: F) -> F {
        let Some((_, len)) = pools.buffers().off_len(f.buf()) else {
            return f;
        };
        if usize::from(len) <= ETH_HDR {
            return f;
        }
        let f = if pools.buffers().refcnt(f.buf()).is_some_and(|r| r > 1) {
            let Some(c) = copy_frame(pools, bytes, f) else {
                self.stats.no_buffer += 1;
                return f;
            };
            pools.release(f.buf());
            c
        } else {
            f
        };
        let Some((off, len)) = pools.buffers().off_len(f.buf()) else {
            return f;
        };
        let at = usize::from(off) + ETH_HDR + self.rng.corrupt.usize(..usize::from(len) - ETH_HDR);
        let bit = self.rng.corrupt.u8(..8);
        let b = pools.buffers();
        let mut byte = [0u8];
        if b.read(f.buf(), at, &mut byte).is_ok() {
            byte[0] ^= 1 << bit;
            if b.write(f.buf(), at, &byte).is_ok() {
                self.stats.corrupted += 1;
            }
        }
        f
    }

    /// Delay, or reorder.
    fn delay_stage(&mut self, p: &Params, pools: &mut DriverPools, now: Duration, f: F) {
        let reorder = chance(&mut self.rng.reorder, p.reorder);
        if p.delays() {
            if reorder {
                // netem's reorder: skip the queue, overtaking the frames in it.
                self.stats.reordered += 1;
                self.rate_stage(pools, now, f, p.limit);
                return;
            }
            if self.delayed.len() >= p.limit {
                pools.release(f.buf());
                self.stats.queue_dropped += 1;
                return;
            }
            let due = now + self.delay(p);
            let at = self.delayed.partition_point(|(d, _)| *d <= due);
            self.delayed.insert(at, (due, f));
            self.stats.delayed += 1;
        } else if let Some((_, held)) = self.swapped.take() {
            // The frame held back goes right after this one.
            self.rate_stage(pools, now, f, p.limit);
            self.rate_stage(pools, now, held, p.limit);
        } else if reorder {
            self.swapped = Some((now + REORDER_HOLD, f));
            self.stats.reordered += 1;
        } else {
            self.rate_stage(pools, now, f, p.limit);
        }
    }

    /// The delay of one frame: `delay`, ± `jitter` drawn uniformly, never below 0.
    fn delay(&mut self, p: &Params) -> Duration {
        if p.jitter.is_zero() {
            return p.delay;
        }
        let j = p.jitter.as_nanos() as i64;
        let ns = p.delay.as_nanos() as i64 + self.rng.jitter.i64(-j..=j);
        Duration::from_nanos(ns.max(0) as u64)
    }

    /// The token bucket, or straight out.
    fn rate_stage(&mut self, pools: &mut DriverPools, now: Duration, f: F, limit: usize) {
        let Some(bucket) = &mut self.bucket else {
            self.out.push_back(f);
            return;
        };
        if self.paced.is_empty() && bucket.take(now, f.len()) {
            self.out.push_back(f);
        } else if self.paced.len() >= limit {
            pools.release(f.buf());
            self.stats.rate_dropped += 1;
        } else {
            self.paced.push_back(f);
        }
    }

    /// Moves on every frame whose time has come.
    fn release(&mut self, p: &Params, pools: &mut DriverPools, now: Duration) {
        if let Some(bucket) = &mut self.bucket {
            while let Some(&f) = self.paced.front() {
                if !bucket.take(now, f.len()) {
                    break;
                }
                self.paced.pop_front();
                self.out.push_back(f);
            }
        }
        while let Some(&(due, f)) = self.delayed.front() {
            if due > now {
                break;
            }
            self.delayed.pop_front();
            self.rate_stage(pools, now, f, p.limit);
        }
        if let Some((until, f)) = self.swapped {
            if until <= now {
                self.swapped = None;
                self.rate_stage(pools, now, f, p.limit);
            }
        }
    }

    /// When the next held frame is due (`now` if some are through and waiting to be taken).
    fn next_due(&self, now: Duration) -> Option<Duration> {
        let ready = (!self.out.is_empty()).then_some(now);
        let delayed = self.delayed.front().map(|(d, _)| *d);
        let swapped = self.swapped.map(|(d, _)| d);
        let paced = self
            .paced
            .front()
            .zip(self.bucket.as_ref())
            .map(|(f, b)| b.ready_at(f.len()));
        [ready, delayed, swapped, paced].into_iter().flatten().min()
    }

    fn held(&self) -> usize {
        self.delayed.len() + usize::from(self.swapped.is_some()) + self.paced.len() + self.out.len()
    }

    fn stats(&self) -> ImpairDirStats {
        ImpairDirStats {
            held: self.held() as u64,
            ..self.stats.clone()
        }
    }

    fn discard(&mut self, pools: &mut DriverPools) {
        let delayed = self.delayed.drain(..).map(|(_, f)| f);
        let swapped = self.swapped.take().map(|(_, f)| f);
        for f in delayed
            .chain(swapped)
            .chain(self.paced.drain(..))
            .chain(self.out.drain(..))
        {
            pools.release(f.buf());
        }
    }
}

/// A driver whose frames are impaired as an [`ImpairSpec`] says, in both directions. See
/// the [module docs](self).
pub struct Impaired<D> {
    inner: D,
    spec: ImpairSpec,
    p: Params,
    rx: Lane<RxFrame>,
    tx: Lane<TxFrame>,
    /// Over a device with a receive fd: its fd and our timer, as one descriptor.
    wake: Option<Wake>,
    /// When the timer is armed for.
    armed: Option<Duration>,
    rx_scratch: Vec<RxFrame>,
    tx_batch: Vec<u32>,
    bytes: Vec<u8>,
}

impl<D: Driver> Impaired<D> {
    /// Wraps `inner`. Fails only when the wake-up descriptor (an epoll set and a timer) cannot
    /// be made, for a device that has a receive fd.
    pub fn new(inner: D, spec: ImpairSpec) -> std::io::Result<Self> {
        let p = Params::of(&spec);
        let wake = match inner.rx_fd() {
            Some(fd) => {
                let w = Wake::new()?;
                w.watch(fd)?;
                Some(w)
            }
            None => None,
        };
        Ok(Self {
            rx: Lane::new(&p, spec.seed, 0),
            tx: Lane::new(&p, spec.seed, 1),
            inner,
            spec,
            p,
            wake,
            armed: None,
            rx_scratch: Vec::with_capacity(32),
            tx_batch: Vec::with_capacity(32),
            bytes: Vec::new(),
        })
    }

    /// The wrapped driver.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped driver, mutably.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// The spec it applies.
    pub fn spec(&self) -> &ImpairSpec {
        &self.spec
    }

    /// What it did to the frames of each direction.
    pub fn impair_stats(&self) -> ImpairStats {
        ImpairStats {
            rx: self.rx.stats(),
            tx: self.tx.stats(),
        }
    }

    /// Frames it holds now, both directions.
    pub fn held(&self) -> usize {
        self.rx.held() + self.tx.held()
    }

    /// Releases every frame it holds (not counted as dropped): for a caller that stops and
    /// wants its buffers back.
    pub fn discard_held(&mut self, pools: &mut DriverPools) {
        self.rx.discard(pools);
        self.tx.discard(pools);
        self.rearm(Duration::ZERO);
    }

    /// The clock held frames are timed by (`CLOCK_MONOTONIC`), read only when something is
    /// timed.
    fn now(&self) -> Duration {
        if self.p.timed() {
            monotonic_now()
        } else {
            Duration::ZERO
        }
    }

    /// When the next held frame is due, on the clock of [`Impaired::rx_burst_at`].
    pub fn next_due(&self, now: Duration) -> Option<Duration> {
        match (self.rx.next_due(now), self.tx.next_due(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Points the timer at the next due frame (only when that changed, or it fired).
    fn rearm(&mut self, now: Duration) {
        let Some(w) = &self.wake else {
            return;
        };
        let next = self.next_due(now);
        if next != self.armed || self.armed.is_some_and(|a| a <= now) {
            w.arm(next);
            self.armed = next;
        }
    }

    /// Hands the tx frames through every stage to the device.
    fn send_tx(&mut self, pools: &mut DriverPools) -> std::io::Result<()> {
        if self.tx.out.is_empty() {
            return Ok(());
        }
        self.tx_batch.clear();
        self.tx_batch.extend(self.tx.out.drain(..).map(|f| f.buf));
        self.tx.stats.passed += self.tx_batch.len() as u64;
        self.inner.tx_burst(pools, &self.tx_batch)
    }

    /// [`Driver::rx_burst`] at time `now` (on any clock, as long as every call uses the same
    /// one: tests and simulations drive it with their own).
    ///
    /// The frames it holds back live in one set of pools ([`super::RxPools::single`]): with
    /// several servers on one driver there is none, and it gives up (`Err`).
    pub fn rx_burst_at(
        &mut self,
        now: Duration,
        pools: &mut dyn super::RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        self.rx_burst_stamped(now, |_| now, pools, out, max)
    }

    /// [`Impaired::rx_burst_at`], stamping the frames received with `seen()`, read after
    /// the device handed them over. (A clock read before the device call can be old by the
    /// time the frames arrive — the thread may lose the CPU in between — and a frame stamped
    /// before it arrived would be released before its delay is up.)
    fn rx_burst_stamped(
        &mut self,
        now: Duration,
        seen: impl Fn(&Self) -> Duration,
        pools: &mut dyn super::RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        let Some(one) = pools.single() else {
            return Err(std::io::Error::other(
                "--impair holds frames in one server's pools: it cannot feed several servers",
            ));
        };
        // The caller's loop calls rx_burst even when it has nothing to send: transmit what
        // came due meanwhile.
        self.tx.release(&self.p, one, now);
        let sent = self.send_tx(one);
        self.rx.release(&self.p, one, now);
        // Called even with no room: the device does its health checks there.
        let room = max.saturating_sub(self.rx.out.len());
        self.rx_scratch.clear();
        let got = self.inner.rx_burst(pools, &mut self.rx_scratch, room);
        let at = if self.rx_scratch.is_empty() {
            now
        } else {
            seen(self)
        };
        if let Some(one) = pools.single() {
            for &f in &self.rx_scratch {
                self.rx.admit(&self.p, one, &mut self.bytes, at, f);
            }
        }
        got?;
        sent?;
        let n = max.min(self.rx.out.len());
        out.extend(self.rx.out.drain(..n));
        self.rx.stats.passed += n as u64;
        self.rearm(now);
        Ok(n)
    }

    /// [`Driver::tx_burst`] at time `now` (see [`Impaired::rx_burst_at`]).
    pub fn tx_burst_at(
        &mut self,
        now: Duration,
        pools: &mut DriverPools,
        frames: &[u32],
    ) -> std::io::Result<()> {
        self.tx.release(&self.p, pools, now);
        for &buf in frames {
            match pools.buffers().off_len(buf) {
                Some((_, len)) => {
                    let f = TxFrame {
                        buf,
                        len: len.into(),
                    };
                    self.tx.admit(&self.p, pools, &mut self.bytes, now, f);
                }
                // Not a buffer: the device refuses it and counts it.
                None => self.tx.out.push_back(TxFrame { buf, len: 0 }),
            }
        }
        let sent = self.send_tx(pools);
        self.rearm(now);
        sent
    }
}

impl<D: Driver> Driver for Impaired<D> {
    fn rx_burst(
        &mut self,
        pools: &mut dyn super::RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        let now = self.now();
        self.rx_burst_stamped(now, Self::now, pools, out, max)
    }

    /// Impairs the frames, then transmits those that pass at once; the others (delayed,
    /// paced, held back to reorder) keep their buffers until a later call sends or drops
    /// them.
    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()> {
        let now = self.now();
        self.tx_burst_at(now, pools, frames)
    }

    /// Over a device with a receive fd: an epoll set of that fd and a timer for the next
    /// held frame (readable when either is). Over one without: none (see `idle_hint`).
    fn rx_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.wake.as_ref().map(Wake::fd)
    }

    /// The device's hint, or how long until the next held frame is due, whichever is sooner.
    fn idle_hint(&self) -> Option<Duration> {
        let now = self.now();
        let ours = self.next_due(now).map(|t| t.saturating_sub(now));
        match (self.inner.idle_hint(), ours) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The device's counters (what crossed the device itself), with the impairment's.
    fn stats(&self) -> DriverStats {
        DriverStats {
            impair: Some(Box::new(self.impair_stats())),
            ..self.inner.stats()
        }
    }

    fn link(&self) -> super::LinkState {
        self.inner.link()
    }

    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }

    fn release_held(&mut self, pools: &mut DriverPools) -> u32 {
        self.inner.release_held(pools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{Family, LinkState, classify};
    use rustix::fd::{AsFd, OwnedFd};
    use shmnet_chan::heap::heap_pools;
    use shmnet_chan::{AllocPolicy, PoolGeometry, ServerPools};

    const MS: Duration = Duration::from_millis(1);

    fn spec(s: &str) -> ImpairSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    // --- the spec ---

    #[test]
    fn the_spec_parses_every_key_with_its_units() {
        let s = spec("loss=1%,reorder=25%,delay=10ms,dup=1%,corrupt=0.1%,rate=100mbit,seed=7");
        assert_eq!(
            s,
            ImpairSpec {
                loss_pct: 1.0,
                reorder_pct: 25.0,
                dup_pct: 1.0,
                corrupt_pct: 0.1,
                delay_us: 10_000,
                jitter_us: 0,
                rate_bit_s: Some(100_000_000),
                limit: DEFAULT_LIMIT,
                seed: 7,
            }
        );
        assert_eq!(spec("delay=500us").delay_us, 500);
        assert_eq!(spec("delay=1.5ms").delay_us, 1500);
        assert_eq!(spec("delay=2s").delay_us, 2_000_000);
        assert_eq!(spec("delay=60s").delay_us, 60_000_000);
        assert_eq!(spec("delay=0ms").delay_us, 0);
        assert_eq!(spec("rate=1gbit").rate_bit_s, Some(1_000_000_000));
        assert_eq!(spec("rate=500kbit").rate_bit_s, Some(500_000));
        assert_eq!(spec("rate=2.5Mbit").rate_bit_s, Some(2_500_000));
        assert_eq!(spec("rate=9600bit").rate_bit_s, Some(9600));
        assert_eq!(spec("loss=0.5%").loss_pct, 0.5);
        assert_eq!(spec("loss=100%").loss_pct, 100.0);
        assert_eq!(spec("duplicate=3%").dup_pct, 3.0);
        assert_eq!(spec(" LOSS = 2% , seed = 3 ").loss_pct, 2.0);
        let j = spec("delay=10ms,jitter=2ms,limit=50");
        assert_eq!((j.delay_us, j.jitter_us, j.limit), (10_000, 2_000, 50));
        assert_eq!(spec("seed=18446744073709551615").seed, u64::MAX);
        // Only what was given; the rest are the defaults.
        assert_eq!(
            spec("seed=4"),
            ImpairSpec {
                seed: 4,
                ..ImpairSpec::default()
            }
        );
    }

    #[test]
    fn the_spec_shows_as_it_parses() {
        for text in [
            "loss=1%,reorder=25%,dup=1%,corrupt=0.1%,delay=10ms,rate=100mbit,seed=7",
            "delay=500us,jitter=1ms,seed=0",
            "rate=1gbit,limit=10,seed=1",
            "rate=1500kbit,seed=1",
            "rate=9600bit,seed=1",
            "delay=2s,seed=9",
            "loss=20%,seed=1",
        ] {
            let s = spec(text);
            assert_eq!(s.to_string(), text);
            assert_eq!(spec(&s.to_string()), s);
        }
        assert_eq!(spec("loss=1%").to_string(), "loss=1%,seed=0");
    }

    #[test]
    fn a_bad_spec_says_what_is_wrong_and_what_is_accepted() {
        use ImpairSpecError as E;
        let err = |s: &str| s.parse::<ImpairSpec>().unwrap_err();
        let percent = |key: &'static str, value: &str| E::BadPercent {
            key,
            value: value.into(),
        };
        let time = |key: &'static str, value: &str| E::BadTime {
            key,
            value: value.into(),
        };
        let cases = [
            ("", E::Empty),
            ("  ", E::Empty),
            ("loss", E::NotAPair("loss".into())),
            ("loss=1%,", E::NotAPair("".into())),
            ("drop=1%", E::UnknownKey("drop".into())),
            ("loss=1%,loss=2%", E::Repeated("loss")),
            ("dup=1%,duplicate=2%", E::Repeated("dup")),
            ("loss=1", percent("loss", "1")),
            ("loss=101%", percent("loss", "101%")),
            ("loss=-1%", percent("loss", "-1%")),
            ("loss=%", percent("loss", "%")),
            ("loss=nan%", percent("loss", "nan%")),
            ("loss=1e1%", percent("loss", "1e1%")),
            ("corrupt=0.1 %", percent("corrupt", "0.1 %")),
            ("delay=10", time("delay", "10")),
            ("delay=10m", time("delay", "10m")),
            ("delay=ms", time("delay", "ms")),
            ("delay=61s", time("delay", "61s")),
            ("delay=-1ms", time("delay", "-1ms")),
            ("jitter=1h", time("jitter", "1h")),
            ("rate=100", E::BadRate("100".into())),
            ("rate=100mbps", E::BadRate("100mbps".into())),
            ("rate=0mbit", E::BadRate("0mbit".into())),
            ("rate=mbit", E::BadRate("mbit".into())),
            ("limit=0", E::BadLimit("0".into())),
            ("limit=ten", E::BadLimit("ten".into())),
            ("seed=-1", E::BadSeed("-1".into())),
            ("seed=0x10", E::BadSeed("0x10".into())),
            ("jitter=1ms", E::JitterWithoutDelay),
        ];
        for (input, want) in cases {
            let got = err(input);
            assert_eq!(got, want, "{input:?}");
            let msg = got.to_string();
            assert_eq!(msg.lines().count(), 1, "{input:?}: {msg}");
        }
        // Each message names what is accepted.
        assert!(err("loss=1").to_string().contains("like 1% or 0.5%"));
        assert!(err("delay=10").to_string().contains("10ms or 500us"));
        assert!(err("rate=1").to_string().contains("100mbit or 1gbit"));
        assert!(err("x=1").to_string().contains("use loss, reorder, dup"));
    }

    #[test]
    fn the_spec_survives_json_and_defaults_what_is_missing() {
        let s = spec("loss=1%,delay=10ms,jitter=1ms,rate=1mbit,limit=7,seed=3");
        let back: ImpairSpec = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let d: ImpairSpec = serde_json::from_str(r#"{"dup_pct":2}"#).unwrap();
        assert_eq!(
            (d.dup_pct, d.limit, d.rate_bit_s),
            (2.0, DEFAULT_LIMIT, None)
        );
    }

    // --- the decorator, over a device in memory ---

    /// A device in memory: frames queued to be received, frames transmitted recorded.
    #[derive(Default)]
    struct Fake {
        incoming: VecDeque<Vec<u8>>,
        sent: Vec<Vec<u8>>,
        fd: Option<OwnedFd>,
        stats: DriverStats,
    }

    impl Driver for Fake {
        fn rx_burst(
            &mut self,
            pools: &mut dyn crate::driver::RxPools,
            out: &mut Vec<RxFrame>,
            max: usize,
        ) -> std::io::Result<usize> {
            let pools = pools.single().unwrap();
            let mut n = 0;
            while n < max {
                let Some(f) = self.incoming.pop_front() else {
                    break;
                };
                let Some(buf) = pools.alloc() else {
                    self.stats.rx_no_buffer += 1;
                    continue;
                };
                pools.buffers().write(buf, 0, &f).unwrap();
                pools.buffers().set_off_len(buf, 0, f.len() as u16).unwrap();
                out.push(RxFrame {
                    buf,
                    len: f.len() as u32,
                    family: classify(&f).unwrap(),
                });
                self.stats.rx_frames += 1;
                n += 1;
            }
            Ok(n)
        }

        fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()> {
            for &b in frames {
                let (off, len) = pools.buffers().off_len(b).unwrap();
                let mut bytes = vec![0u8; len.into()];
                pools.buffers().read(b, off.into(), &mut bytes).unwrap();
                self.sent.push(bytes);
                self.stats.tx_frames += 1;
                pools.release(b);
            }
            Ok(())
        }

        fn rx_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
            self.fd.as_ref().map(|f| f.as_fd())
        }

        fn stats(&self) -> DriverStats {
            self.stats.clone()
        }

        fn mac(&self) -> [u8; 6] {
            [2, 0, 0, 0, 0, 2]
        }
    }

    /// An IPv4 frame of `len` bytes carrying `seq` right after the Ethernet header.
    fn frame(seq: u32, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14..18].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in f[18..].iter_mut().enumerate() {
            *b = (seq as usize + i) as u8;
        }
        f
    }

    fn seq(f: &[u8]) -> u32 {
        u32::from_be_bytes(f[14..18].try_into().unwrap())
    }

    struct Rig {
        _server: ServerPools,
        pools: DriverPools,
        total: u32,
        imp: Impaired<Fake>,
    }

    impl Rig {
        fn new(s: &str) -> Self {
            Self::with(s, 1024, Fake::default())
        }

        fn with(s: &str, per_pool: u32, fake: Fake) -> Self {
            let geo = PoolGeometry {
                pools: 2,
                per_pool,
                data_size: 2048,
                free_cap: per_pool.next_power_of_two(),
                policy: AllocPolicy::Lifo,
            };
            let (server, pools) = heap_pools(geo, None);
            Self {
                _server: server,
                pools,
                total: geo.total(),
                imp: Impaired::new(fake, spec(s)).unwrap(),
            }
        }

        /// Frames the device will receive.
        fn arrive(&mut self, seqs: impl IntoIterator<Item = u32>) {
            for s in seqs {
                self.imp.inner_mut().incoming.push_back(frame(s, 100));
            }
        }

        /// Every frame the decorator hands up at `now` (bursts of 32), read and released.
        fn take(&mut self, now: Duration) -> Vec<Vec<u8>> {
            let mut got = Vec::new();
            let mut out = Vec::new();
            loop {
                out.clear();
                let n = self
                    .imp
                    .rx_burst_at(now, &mut self.pools, &mut out, 32)
                    .unwrap();
                for f in &out {
                    assert_eq!(f.family, Family::Ipv4);
                    let (off, len) = self.pools.buffers().off_len(f.buf).unwrap();
                    assert_eq!(u32::from(len), f.len);
                    let mut bytes = vec![0u8; len.into()];
                    self.pools
                        .buffers()
                        .read(f.buf, off.into(), &mut bytes)
                        .unwrap();
                    got.push(bytes);
                    self.pools.release(f.buf);
                }
                if n == 0 && self.imp.inner().incoming.is_empty() {
                    return got;
                }
            }
        }

        /// The stack sends `seqs` at `now`.
        fn send(&mut self, now: Duration, seqs: impl IntoIterator<Item = u32>) {
            let bufs: Vec<u32> = seqs
                .into_iter()
                .map(|s| self.buffer(&frame(s, 100)))
                .collect();
            self.imp.tx_burst_at(now, &mut self.pools, &bufs).unwrap();
        }

        fn buffer(&mut self, f: &[u8]) -> u32 {
            let b = self.pools.alloc().expect("a free buffer");
            self.pools.buffers().write(b, 0, f).unwrap();
            self.pools
                .buffers()
                .set_off_len(b, 0, f.len() as u16)
                .unwrap();
            b
        }

        /// Sequence numbers the device has transmitted so far (and forgets them).
        fn sent(&mut self) -> Vec<u32> {
            self.imp
                .inner_mut()
                .sent
                .drain(..)
                .map(|f| seq(&f))
                .collect()
        }

        fn stats(&self) -> ImpairStats {
            self.imp.impair_stats()
        }

        /// Every buffer is back: what the decorator still holds is released first.
        fn no_leak(mut self) {
            self.imp.discard_held(&mut self.pools);
            assert_eq!(self.imp.held(), 0);
            assert_eq!(
                self.pools.buffers().free_count(),
                self.total,
                "buffers leaked"
            );
        }
    }

    fn seqs(frames: &[Vec<u8>]) -> Vec<u32> {
        frames.iter().map(|f| seq(f)).collect()
    }

    /// `|observed - n p| <= 6 sigma` of a binomial(n, p).
    fn within_six_sigma(observed: u64, n: u64, p: f64) {
        let mean = n as f64 * p;
        let sigma = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (observed as f64 - mean).abs() <= 6.0 * sigma,
            "{observed} of {n} at p = {p}: expected {mean:.0} ± {:.0} (6 sigma)",
            6.0 * sigma
        );
    }

    #[test]
    fn loss_drops_its_share_of_each_direction_and_releases_every_buffer() {
        let n = 20_000u32;
        let mut rig = Rig::new("loss=20%,seed=1");
        rig.arrive(0..n);
        let got = rig.take(Duration::ZERO);
        for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
            rig.send(Duration::ZERO, chunk.iter().copied());
        }
        let sent = rig.sent();
        let st = rig.stats();
        for (dir, d, passed) in [("rx", &st.rx, got.len()), ("tx", &st.tx, sent.len())] {
            assert_eq!(d.seen, u64::from(n), "{dir}");
            assert_eq!(d.passed, passed as u64, "{dir}");
            assert_eq!(d.dropped_loss + d.passed, u64::from(n), "{dir}");
            within_six_sigma(d.dropped_loss, n.into(), 0.2);
        }
        // In order, nothing else touched.
        assert!(seqs(&got).windows(2).all(|w| w[0] < w[1]));
        assert!(got.iter().all(|f| *f == frame(seq(f), 100)));
        assert!(sent.windows(2).all(|w| w[0] < w[1]));
        rig.no_leak();
    }

    /// What a run of mixed impairments (`spec` and `seed=SEED`) made of 2,000 frames
    /// received over 100 ms: their bytes, in order, and the receive counters.
    fn mixed_run(spec: &str, seed: u64, tx_too: bool) -> (Vec<Vec<u8>>, ImpairDirStats) {
        let mut rig = Rig::new(&format!("{spec},seed={seed}"));
        let mut got = Vec::new();
        for k in 0..100u32 {
            let now = Duration::from_millis(k.into());
            rig.arrive(k * 20..(k + 1) * 20);
            got.extend(rig.take(now));
            if tx_too {
                rig.send(now, k * 7..(k + 1) * 7);
            }
        }
        let rx = rig.stats().rx;
        // Every frame is accounted for, held ones included.
        assert_eq!(
            rx.seen + rx.duplicated,
            rx.passed + rx.dropped_loss + rx.queue_dropped + rx.rate_dropped + rx.held,
            "{rx:?}"
        );
        let mut now = Duration::from_millis(100);
        while rig.imp.held() > 0 {
            assert!(now < Duration::from_secs(10), "{:?}", rig.stats());
            got.extend(rig.take(now));
            now += MS;
        }
        let rx = rig.stats().rx;
        rig.no_leak();
        (got, rx)
    }

    #[test]
    fn a_seed_reproduces_the_run_and_one_direction_does_not_perturb_the_other() {
        for spec in [
            "loss=30%,dup=10%,corrupt=10%,reorder=20%",
            "loss=30%,dup=10%,corrupt=10%,reorder=20%,delay=5ms,jitter=3ms,rate=10mbit,limit=100",
        ] {
            let (a, sa) = mixed_run(spec, 42, false);
            let (b, sb) = mixed_run(spec, 42, false);
            assert_eq!(a, b, "{spec}: the same seed, the same fate");
            assert_eq!(sa, sb);
            assert!(
                sa.dropped_loss > 0 && sa.duplicated > 0 && sa.corrupted > 0 && sa.reordered > 0,
                "{spec}: {sa:?}"
            );
            // Sending meanwhile changes nothing on the receive side.
            let (c, sc) = mixed_run(spec, 42, true);
            assert_eq!(a, c, "{spec}: tx traffic perturbed rx");
            assert_eq!(sa, sc);
            let (d, _) = mixed_run(spec, 43, false);
            assert_ne!(a, d, "{spec}: another seed, another run");
        }
    }

    #[test]
    fn one_impairment_does_not_move_another_s_choices() {
        // The frames lost with loss alone are the frames lost with dup and corrupt on too.
        let lost = |s: &str| {
            let mut rig = Rig::new(s);
            rig.arrive(0..1000);
            let got = rig.take(Duration::ZERO);
            let mut kept: Vec<u32> = seqs(&got);
            kept.dedup();
            rig.no_leak();
            kept
        };
        assert_eq!(
            lost("loss=10%,seed=5"),
            lost("loss=10%,dup=50%,corrupt=0%,seed=5")
        );
    }

    #[test]
    fn dup_sends_a_copy_in_a_second_buffer_or_counts_it_when_none_is_free() {
        let mut rig = Rig::new("dup=100%,seed=1");
        rig.arrive(0..10);
        let got = rig.take(Duration::ZERO);
        assert_eq!(seqs(&got), (0..10).flat_map(|s| [s, s]).collect::<Vec<_>>());
        assert!(got.iter().all(|f| *f == frame(seq(f), 100)));
        rig.send(Duration::ZERO, 0..5);
        assert_eq!(rig.sent(), vec![0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
        let st = rig.stats();
        assert_eq!((st.rx.duplicated, st.rx.passed), (10, 20));
        assert_eq!((st.tx.duplicated, st.tx.passed), (5, 10));
        rig.no_leak();

        // Every buffer is a frame the stack sends: no copy can be made.
        let mut rig = Rig::with("dup=100%,seed=1", 8, Fake::default());
        let bufs: Vec<u32> = (0..16).map(|s| rig.buffer(&frame(s, 100))).collect();
        assert_eq!(rig.pools.buffers().free_count(), 0);
        rig.imp
            .tx_burst_at(Duration::ZERO, &mut rig.pools, &bufs)
            .unwrap();
        assert_eq!(rig.sent(), (0..16).collect::<Vec<_>>());
        let st = rig.stats();
        assert_eq!((st.tx.duplicated, st.tx.no_buffer), (0, 16));
        rig.no_leak();
    }

    /// The positions of the bits in which `a` and `b` differ.
    fn bit_diff(a: &[u8], b: &[u8]) -> Vec<usize> {
        assert_eq!(a.len(), b.len());
        (0..a.len() * 8)
            .filter(|i| (a[i / 8] ^ b[i / 8]) & (1 << (i % 8)) != 0)
            .collect()
    }

    #[test]
    fn corrupt_flips_one_bit_past_the_ethernet_header_and_spares_a_shared_buffer() {
        let mut rig = Rig::new("corrupt=100%,seed=1");
        rig.arrive(0..500);
        let got = rig.take(Duration::ZERO);
        assert_eq!(got.len(), 500);
        for (i, f) in got.iter().enumerate() {
            // The sequence number may be the bit hit: compare with the frame at that place.
            let d = bit_diff(f, &frame(i as u32, 100));
            assert_eq!(d.len(), 1, "frame {i}: {d:?}");
            assert!(
                d[0] >= ETH_HDR * 8,
                "frame {i}: bit {} is in the header",
                d[0]
            );
        }
        assert_eq!(rig.stats().rx.corrupted, 500);

        // A buffer the stack still holds (a retransmission's, say) is not written: the
        // device gets a corrupted copy.
        let original = frame(7, 100);
        let b = rig.buffer(&original);
        rig.pools.buffers().retain(b).unwrap();
        rig.imp
            .tx_burst_at(Duration::ZERO, &mut rig.pools, &[b])
            .unwrap();
        let sent = std::mem::take(&mut rig.imp.inner_mut().sent);
        assert_eq!(sent.len(), 1);
        assert_eq!(bit_diff(&sent[0], &original).len(), 1);
        let mut kept = vec![0u8; 100];
        rig.pools.buffers().read(b, 0, &mut kept).unwrap();
        assert_eq!(kept, original, "the shared buffer was written");
        assert_eq!(rig.pools.buffers().refcnt(b), Some(1));
        rig.pools.release(b);
        rig.no_leak();
    }

    #[test]
    fn delay_holds_frames_until_due_and_a_full_queue_drops() {
        let mut rig = Rig::new("delay=10ms,seed=1");
        rig.arrive(0..5);
        assert!(rig.take(Duration::ZERO).is_empty());
        rig.arrive(5..8);
        assert!(rig.take(3 * MS).is_empty());
        rig.send(Duration::ZERO, 100..102);
        assert!(rig.sent().is_empty());
        assert_eq!(rig.imp.held(), 10);
        assert_eq!(rig.imp.next_due(4 * MS), Some(10 * MS));
        assert!(rig.take(10 * MS - Duration::from_nanos(1)).is_empty());
        // Due: rx frames go up, and the tx ones go out from the same call.
        assert_eq!(seqs(&rig.take(10 * MS)), vec![0, 1, 2, 3, 4]);
        assert_eq!(rig.sent(), vec![100, 101]);
        assert_eq!(rig.imp.next_due(10 * MS), Some(13 * MS));
        assert_eq!(seqs(&rig.take(13 * MS)), vec![5, 6, 7]);
        assert_eq!(rig.imp.next_due(13 * MS), None);
        let st = rig.stats();
        assert_eq!((st.rx.delayed, st.tx.delayed), (8, 2));
        rig.no_leak();

        let mut rig = Rig::new("delay=10ms,limit=10,seed=1");
        rig.arrive(0..50);
        assert!(rig.take(Duration::ZERO).is_empty());
        assert_eq!(seqs(&rig.take(10 * MS)), (0..10).collect::<Vec<_>>());
        let st = rig.stats().rx;
        assert_eq!((st.delayed, st.queue_dropped), (10, 40));
        rig.no_leak();
    }

    #[test]
    fn a_frame_is_delayed_from_when_the_device_handed_it_over_not_from_the_call() {
        // The call began at 0 but the device handed the frames over at 3 ms (the thread lost
        // the CPU in between): they are due at 13 ms, never at 10.
        let mut rig = Rig::new("delay=10ms,seed=1");
        rig.arrive(0..2);
        let mut out = Vec::new();
        let n = rig
            .imp
            .rx_burst_stamped(Duration::ZERO, |_| 3 * MS, &mut rig.pools, &mut out, 32)
            .unwrap();
        assert_eq!(n, 0);
        assert_eq!(rig.imp.next_due(3 * MS), Some(13 * MS));
        assert!(rig.take(10 * MS).is_empty());
        assert_eq!(seqs(&rig.take(13 * MS)), vec![0, 1]);
        rig.no_leak();
    }

    #[test]
    fn jitter_spreads_the_delay_and_lets_frames_overtake() {
        let mut rig = Rig::new("delay=10ms,jitter=5ms,seed=1");
        rig.arrive(0..1000);
        assert!(rig.take(Duration::ZERO).is_empty());
        let mut when = Vec::new();
        let mut order = Vec::new();
        let mut t = Duration::ZERO;
        while t <= 16 * MS {
            for f in rig.take(t) {
                when.push(t);
                order.push(seq(&f));
            }
            t += Duration::from_micros(100);
        }
        assert_eq!(when.len(), 1000);
        let (min, max) = (when[0], when[when.len() - 1]);
        assert!(min >= 5 * MS && min < 6 * MS, "{min:?}");
        assert!(
            max <= 15 * MS + Duration::from_micros(100) && max > 14 * MS,
            "{max:?}"
        );
        assert!(order.windows(2).any(|w| w[0] > w[1]), "no frame overtook");
        rig.no_leak();
    }

    #[test]
    fn reorder_with_a_delay_sends_its_share_at_once_past_the_delayed_ones() {
        let n = 2000;
        let mut rig = Rig::new("reorder=25%,delay=10ms,limit=2000,seed=3");
        rig.arrive(0..n);
        let early = seqs(&rig.take(Duration::ZERO));
        let late = seqs(&rig.take(10 * MS));
        let st = rig.stats().rx;
        assert_eq!(st.reordered, early.len() as u64);
        assert_eq!(st.delayed, late.len() as u64);
        assert_eq!(early.len() + late.len(), n as usize);
        within_six_sigma(st.reordered, n.into(), 0.25);
        // Each group is in order; together, every frame once.
        assert!(early.windows(2).all(|w| w[0] < w[1]));
        assert!(late.windows(2).all(|w| w[0] < w[1]));
        let mut all: Vec<u32> = early.iter().chain(&late).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
        rig.no_leak();
    }

    #[test]
    fn reorder_without_a_delay_holds_a_frame_until_the_next_has_passed() {
        let mut rig = Rig::new("reorder=100%,seed=1");
        rig.arrive(0..9);
        assert_eq!(
            seqs(&rig.take(Duration::ZERO)),
            vec![1, 0, 3, 2, 5, 4, 7, 6]
        );
        // The last one waits for a next frame, but not forever.
        assert_eq!(rig.imp.held(), 1);
        assert_eq!(rig.imp.next_due(Duration::ZERO), Some(REORDER_HOLD));
        assert!(rig.take(REORDER_HOLD - Duration::from_nanos(1)).is_empty());
        assert_eq!(seqs(&rig.take(REORDER_HOLD)), vec![8]);
        rig.send(REORDER_HOLD, 0..4);
        assert_eq!(rig.sent(), vec![1, 0, 3, 2]);
        assert_eq!(rig.stats().rx.reordered, 5);
        assert_eq!(rig.stats().tx.reordered, 2);
        rig.no_leak();
    }

    #[test]
    fn rate_paces_frames_by_their_bytes_and_drops_past_its_queue() {
        // 8 Mbit/s is a byte per microsecond; the bucket holds 1514 bytes (one full frame).
        let mut rig = Rig::new("rate=8mbit,limit=50,seed=1");
        let mut frames = |n: u32| {
            for s in 0..n {
                rig.imp.inner_mut().incoming.push_back(frame(s, 1000));
            }
        };
        frames(60);
        // The first passes on the full bucket, 50 wait, 9 are dropped.
        assert_eq!(rig.take(Duration::ZERO).len(), 1);
        let st = rig.stats().rx;
        assert_eq!((st.rate_dropped, st.held), (9, 50));
        // 514 bytes are left: the next needs 486 µs more, then one every 1000 µs.
        assert_eq!(
            rig.imp.next_due(Duration::ZERO),
            Some(Duration::from_micros(486))
        );
        assert!(rig.take(Duration::from_micros(485)).is_empty());
        assert_eq!(rig.take(Duration::from_micros(486)).len(), 1);
        assert_eq!(
            rig.imp.next_due(Duration::from_micros(486)),
            Some(Duration::from_micros(1486))
        );
        // Over 10 ms: 10 frames, not more (the bucket does not fill beyond 1514 bytes).
        let mut t = Duration::from_micros(486);
        let mut passed = 0;
        while t < Duration::from_micros(10_486) {
            t += Duration::from_micros(10);
            passed += rig.take(t).len();
        }
        assert_eq!(passed, 10);
        rig.no_leak();
    }

    /// Drives `imp` in real time until `n` frames came up, sleeping as its idle hint says:
    /// when each came.
    fn receive_in_real_time(rig: &mut Rig, n: usize) -> Vec<std::time::Instant> {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut at = Vec::new();
        let mut out = Vec::new();
        while at.len() < n {
            assert!(std::time::Instant::now() < deadline, "{} of {n}", at.len());
            out.clear();
            rig.imp.rx_burst(&mut rig.pools, &mut out, 32).unwrap();
            let now = std::time::Instant::now();
            for f in &out {
                at.push(now);
                rig.pools.release(f.buf);
            }
            if out.is_empty() {
                let hint = rig.imp.idle_hint().expect("frames are held");
                std::thread::sleep(hint.min(MS));
            }
        }
        at
    }

    #[test]
    fn rate_paces_in_real_time() {
        // 1 MB/s, 1000-byte frames: a frame a millisecond once the bucket is spent.
        let mut rig = Rig::new("rate=8mbit,seed=1");
        for s in 0..200 {
            rig.imp.inner_mut().incoming.push_back(frame(s, 1000));
        }
        let at = receive_in_real_time(&mut rig, 200);
        let took = at[199] - at[0];
        // At most the bucket (1514 bytes) plus the rate times the span passes in any span:
        // the 199 frames after the first need (199,000 - 1,514) us = 197.5 ms at least,
        // however fast the machine (the bucket may be full again when the first frame's
        // time is taken, if this thread was held up just then). A slow one only takes longer
        // (the bound above is a hang's).
        println!("200 frames of 1000 B at 8 Mbit/s: {took:?}");
        assert!(took >= Duration::from_micros(199_000 - 1_514), "{took:?}");
        assert!(took < Duration::from_secs(30), "{took:?}");
        assert_eq!(rig.stats().rx.passed, 200);
        rig.no_leak();
    }

    #[test]
    fn a_delayed_frame_wakes_a_caller_asleep_on_the_rx_fd() {
        let efd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .unwrap();
        let fake = Fake {
            fd: Some(efd),
            ..Fake::default()
        };
        // Long beside the microseconds the checks below take on a quiet machine; a check that
        // a frame is not due yet is made only while it cannot be (a busy machine may hold
        // this thread up past the delay: the frame is then due, and readable).
        const DELAY: Duration = Duration::from_millis(100);
        let mut rig = Rig::with(&format!("delay={}ms,seed=1", DELAY.as_millis()), 64, fake);
        let readable = |imp: &Impaired<Fake>, ms: i32| {
            let fd = imp.rx_fd().expect("an fd, since the device has one");
            let mut p = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let ts = rustix::event::Timespec {
                tv_sec: (ms / 1000).into(),
                tv_nsec: ((ms % 1000) * 1_000_000).into(),
            };
            rustix::event::poll(&mut p, Some(&ts)).unwrap() == 1
        };
        assert!(!readable(&rig.imp, 0), "nothing to do");
        // The device's own readiness shows through.
        rustix::io::write(rig.imp.inner().fd.as_ref().unwrap(), &1u64.to_ne_bytes()).unwrap();
        assert!(readable(&rig.imp, 0), "the device has frames");
        let mut n = [0u8; 8];
        rustix::io::read(rig.imp.inner().fd.as_ref().unwrap(), &mut n).unwrap();
        assert!(!readable(&rig.imp, 0));

        for direction in ["rx", "tx"] {
            let t0 = std::time::Instant::now();
            let mut out = Vec::new();
            if direction == "rx" {
                rig.arrive([1]);
                assert_eq!(rig.imp.rx_burst(&mut rig.pools, &mut out, 32).unwrap(), 0);
            } else {
                let b = rig.buffer(&frame(2, 100));
                rig.imp.tx_burst(&mut rig.pools, &[b]).unwrap();
                assert!(rig.imp.inner().sent.is_empty());
            }
            let early = readable(&rig.imp, 0);
            let looked = t0.elapsed();
            assert!(
                !early || looked >= DELAY,
                "{direction}: readable after {looked:?}, before the frame was due"
            );
            // Asleep with nothing else happening: the timer wakes us when the frame is due.
            assert!(readable(&rig.imp, 10_000), "{direction}: never woken");
            let woke = t0.elapsed();
            assert!(woke >= DELAY, "{direction}: woken early, after {woke:?}");
            let n = rig.imp.rx_burst(&mut rig.pools, &mut out, 32).unwrap();
            if direction == "rx" {
                assert_eq!(n, 1);
                rig.pools.release(out[0].buf);
            } else {
                assert_eq!(rig.sent(), vec![2], "sent from the rx_burst call");
            }
            assert!(!readable(&rig.imp, 0), "{direction}: still readable after");
            println!("{direction}: woken after {woke:?}");
        }
        rig.no_leak();
    }

    #[test]
    fn over_a_device_without_an_fd_the_idle_hint_says_when_a_frame_is_due() {
        const DELAY: Duration = Duration::from_millis(100);
        let mut rig = Rig::new(&format!("delay={}ms,seed=1", DELAY.as_millis()));
        assert!(rig.imp.rx_fd().is_none());
        assert_eq!(rig.imp.idle_hint(), None, "nothing held, nothing to say");
        rig.arrive([1]);
        let t0 = std::time::Instant::now();
        let mut out = Vec::new();
        rig.imp.rx_burst(&mut rig.pools, &mut out, 32).unwrap();
        let hint = rig.imp.idle_hint().expect("a frame is held");
        let looked = t0.elapsed();
        assert!(hint <= DELAY, "{hint:?}");
        // Zero only once it is due (a busy machine may hold this thread up that long).
        assert!(
            hint > Duration::ZERO || looked >= DELAY,
            "{hint:?} after {looked:?}"
        );
        assert_eq!(receive_in_real_time(&mut rig, 1).len(), 1);
        rig.no_leak();
    }

    #[test]
    fn the_counters_show_in_the_driver_stats_json() {
        let mut rig = Rig::new("loss=50%,seed=1");
        rig.arrive(0..10);
        rig.take(Duration::ZERO);
        let st = rig.imp.stats();
        assert_eq!(st.rx_frames, 10, "the device's own counters");
        assert_eq!(st.link, LinkState::Up);
        let v = serde_json::to_value(&st).unwrap();
        let rx = &v["impair"]["rx"];
        for k in [
            "seen",
            "passed",
            "dropped_loss",
            "duplicated",
            "corrupted",
            "delayed",
            "reordered",
            "rate_dropped",
            "queue_dropped",
            "no_buffer",
            "held",
        ] {
            assert!(rx[k].is_u64() && v["impair"]["tx"][k].is_u64(), "{k}: {v}");
        }
        assert_eq!(rx["seen"], 10);
        let back: DriverStats = serde_json::from_value(v).unwrap();
        assert_eq!(back, st);
        // A driver without impairment says nothing of it.
        let plain = serde_json::to_value(rig.imp.inner().stats()).unwrap();
        assert!(plain.get("impair").is_none(), "{plain}");
        rig.no_leak();
    }
}
