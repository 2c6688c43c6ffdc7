//! The data plane's side of `shmnet capture` ([`crate::capture`]): the captures running,
//! and the taps that copy frames into their rings.
//!
//! Off, a tap is one test of an empty list per batch. On, each frame at a chosen point is
//! filtered and copied into every capture's ring that wants it, never waiting for room
//! (what does not fit is counted in the ring as lost). A frame the stack refuses is found
//! by its drop counters: with a capture of drops running, the frame's first bytes are kept
//! before the stack sees it, and the counter that moved names the reason (the stack counts
//! every refused frame under exactly one drop counter: `shmnet_stack::Stats`' invariant,
//! and TCP's own from `malformed` on).

use crate::capture::filter::{Class, ClassSet};
use crate::capture::{self, CaptureSpec, Point, RecordHeader, RingWriter, Wrote};
use crate::pool::ChanPool;
use shmnet_stack::{BufIdx, BufferPool, Interface};

/// The stack's first drop counter (`shmnet_stack::Stats`).
const FIRST_STACK_DROP: &str = "runt";
/// TCP's first refusal counter (`shmnet_stack::tcp::TcpCounters`).
const FIRST_TCP_DROP: &str = "malformed";

/// The names of the reasons a dropped frame's record can give, index 1 on (0: none):
/// the stack's drop counters, then TCP's refusals prefixed `tcp_`. Sent to each capture
/// client with its ring.
pub fn drop_reasons() -> Vec<String> {
    let stack = shmnet_stack::Stats::default().fields();
    let tcp = shmnet_stack::tcp::TcpCounters::default().fields();
    let from = |f: &[(&'static str, u64)], first: &str| {
        f.iter().position(|(n, _)| *n == first).unwrap_or(f.len())
    };
    std::iter::once(String::new())
        .chain(
            stack[from(&stack, FIRST_STACK_DROP)..]
                .iter()
                .map(|(n, _)| (*n).to_owned()),
        )
        .chain(
            tcp[from(&tcp, FIRST_TCP_DROP)..]
                .iter()
                .map(|(n, _)| format!("tcp_{n}")),
        )
        .collect()
}

/// A capture the data plane is filling.
struct Active {
    /// The control connection it belongs to.
    id: u64,
    spec: CaptureSpec,
    /// The classes of frames its filter may match (every class without one).
    classes: ClassSet,
    ring: RingWriter,
}

impl Active {
    fn snaplen(&self) -> u32 {
        match self.spec.snaplen {
            0 => capture::MAX_SNAPLEN,
            n => n.min(capture::MAX_SNAPLEN),
        }
    }

    fn at(&self, point: Point) -> bool {
        match point {
            Point::Rx => self.spec.rx,
            Point::Tx => self.spec.tx,
            Point::Drop => self.spec.drops,
            Point::Skip => false,
        }
    }

    fn wants(&self, point: Point, class: Class, frame: &[u8], orig_len: usize) -> bool {
        self.at(point)
            && self.classes.contains(class)
            && self
                .spec
                .filter
                .as_ref()
                .is_none_or(|f| f.matches(frame, orig_len))
    }
}

/// For each point, the classes of frames some capture there may want: a frame of any other
/// class is passed by after one test.
#[derive(Clone, Copy, Default)]
struct Wanted {
    rx: ClassSet,
    tx: ClassSet,
    drops: ClassSet,
}

/// Every capture running. See the [module docs](self).
#[derive(Default)]
pub(crate) struct Captures {
    list: Vec<Active>,
    /// The union of the list's class sets, point by point; kept with the list.
    wanted: Wanted,
    /// A received frame's first bytes, kept while the stack decides on it (a capture of
    /// drops); allocated when such a capture starts.
    kept: Vec<u8>,
    /// [`drop_reasons`], to turn a counter's name into its index.
    reasons: Vec<String>,
    /// What every capture did.
    counters: CaptureCounters,
    /// The timestamp of the batch being tapped, read at its first record
    /// ([`Captures::begin_batch`]): a batch nobody keeps a frame of reads no clock.
    batch_ts: Option<u64>,
}

/// What `shmnet capture`s did on this server (`shmnet stats`, `--metrics`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CaptureCounters {
    /// Captures running now.
    pub running: u64,
    /// Captures started.
    pub started: u64,
    /// Frames written into a capture's ring.
    pub kept: u64,
    /// Frames a capture matched and could not keep (its ring was full).
    pub lost: u64,
    /// Captures ended because their reader broke their ring.
    pub broken: u64,
}

impl Captures {
    /// Starts filling `ring` for the capture of control connection `id`; `false` (the
    /// ring dropped) if [`capture::MAX_CAPTURES`] run already.
    pub(crate) fn start(&mut self, id: u64, spec: CaptureSpec, ring: RingWriter) -> bool {
        if self.list.len() >= capture::MAX_CAPTURES {
            return false;
        }
        if spec.drops && self.kept.is_empty() {
            self.kept = vec![0u8; capture::MAX_SNAPLEN as usize];
            self.reasons = drop_reasons();
        }
        let classes = spec.filter.as_ref().map_or(ClassSet::ALL, |f| f.classes());
        self.list.push(Active {
            id,
            spec,
            classes,
            ring,
        });
        self.counters.started += 1;
        self.rewant();
        true
    }

    /// Recomputes [`Captures::wanted`] from the list.
    fn rewant(&mut self) {
        let union = |point| {
            self.list
                .iter()
                .filter(|a| a.at(point))
                .fold(ClassSet::default(), |u, a| u.union(a.classes))
        };
        self.wanted = Wanted {
            rx: union(Point::Rx),
            tx: union(Point::Tx),
            drops: union(Point::Drop),
        };
    }

    /// What every capture did so far.
    pub(crate) fn counters(&self) -> CaptureCounters {
        CaptureCounters {
            running: self.list.len() as u64,
            ..self.counters.clone()
        }
    }

    /// Stops connection `id`'s capture, if it runs.
    pub(crate) fn stop(&mut self, id: u64) {
        self.list.retain(|a| {
            if a.id == id {
                a.ring.stop();
            }
            a.id != id
        });
        self.rewant();
    }

    /// A batch of frames begins: its records share one timestamp, read when the first of
    /// them is written.
    fn begin_batch(&mut self) {
        self.batch_ts = None;
    }

    /// The batch's timestamp: nanoseconds since the Unix epoch (the precise clock: the
    /// stack's coarse one is milliseconds apart).
    fn ts(&mut self) -> u64 {
        *self.batch_ts.get_or_insert_with(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
    }

    /// Copies `frame`, of class `class`, into every capture that wants it at `point`.
    fn tap(&mut self, point: Point, class: Class, reason: u16, frame: &[u8], orig_len: usize) {
        let mut broken = false;
        for i in 0..self.list.len() {
            if !self.list[i].wants(point, class, frame, orig_len) {
                continue;
            }
            let ts_ns = self.ts();
            let a = &mut self.list[i];
            let h = RecordHeader {
                point,
                reason,
                orig_len: orig_len as u32,
                caplen: a.snaplen(),
                ts_ns,
            };
            match a.ring.write(h, frame) {
                Wrote::Kept => self.counters.kept += 1,
                Wrote::Lost => self.counters.lost += 1,
                Wrote::Broken => broken = true,
            }
        }
        if broken {
            // Its reader wrote an impossible position: that capture is over.
            let before = self.list.len();
            self.list.retain(|a| a.ring.write_ok());
            self.counters.broken += (before - self.list.len()) as u64;
            self.rewant();
        }
    }

    /// The frames a transmit batch hands to the driver. With no capture running: one test
    /// of an empty list.
    #[inline]
    pub(crate) fn tap_tx(&mut self, pool: &ChanPool, frames: &[BufIdx]) {
        if self.wanted.tx.is_empty() {
            return;
        }
        self.begin_batch();
        for &b in frames {
            let bytes = valid(pool, b);
            let class = Class::of(bytes);
            if self.wanted.tx.contains(class) {
                self.tap(Point::Tx, class, 0, bytes, bytes.len());
            }
        }
        self.end_batch();
    }

    /// Hands a batch of received frames to the stack: straight in with no capture running
    /// (one test of an empty list per batch), else each through [`Captures::receive`]
    /// under one timestamp. The data plane's one way of receiving frames, and what
    /// [`super::tap_cost`] measures.
    #[inline]
    pub(crate) fn receive_batch(
        &mut self,
        iface: &mut Interface,
        pool: &mut ChanPool,
        tx: &mut Vec<BufIdx>,
        frames: impl Iterator<Item = BufIdx>,
        now: shmnet_stack::Instant,
    ) {
        if self.list.is_empty() {
            for b in frames {
                iface.receive(pool, b, now, tx);
            }
            return;
        }
        self.begin_batch();
        for b in frames {
            self.receive(iface, pool, tx, b, now);
        }
        self.end_batch();
    }

    /// A batch of frames ended: each reader parked on a ring that got a frame is woken.
    #[inline]
    fn end_batch(&mut self) {
        for a in &mut self.list {
            a.ring.wake_if_parked();
        }
    }

    /// Hands frame `b` to the stack, capturing it on the way in and, if the stack refuses
    /// it, as a drop with its reason (frames of one batch after [`Captures::begin_batch`]).
    #[inline]
    fn receive(
        &mut self,
        iface: &mut Interface,
        pool: &mut ChanPool,
        tx: &mut Vec<BufIdx>,
        b: BufIdx,
        now: shmnet_stack::Instant,
    ) {
        let class = Class::of(valid(pool, b));
        if self.wanted.rx.contains(class) {
            self.tap_rx(pool, b, class);
        }
        if self.wanted.drops.contains(class) {
            self.receive_watching_drops(iface, pool, tx, b, class, now);
        } else {
            iface.receive(pool, b, now, tx);
        }
    }

    /// [`Captures::tap`] of a received frame; out of line, to keep the frames no capture
    /// wants on a short path.
    #[inline(never)]
    fn tap_rx(&mut self, pool: &ChanPool, b: BufIdx, class: Class) {
        let bytes = valid(pool, b);
        self.tap(Point::Rx, class, 0, bytes, bytes.len());
    }

    /// Hands frame `b` to the stack and, if the stack refuses it, taps it at
    /// [`Point::Drop`] with the counter that moved as its reason.
    #[inline(never)]
    fn receive_watching_drops(
        &mut self,
        iface: &mut Interface,
        pool: &mut ChanPool,
        tx: &mut Vec<BufIdx>,
        b: BufIdx,
        class: Class,
        now: shmnet_stack::Instant,
    ) {
        let orig_len = valid(pool, b).len();
        let keep = orig_len.min(self.kept.len());
        self.kept[..keep].copy_from_slice(&valid(pool, b)[..keep]);
        let (stack, tcp) = (iface.stats().clone(), iface.tcp_counters().clone());
        iface.receive(pool, b, now, tx);
        let code = if let Some(n) = iface.stats().drop_since(&stack, FIRST_STACK_DROP) {
            self.code(n, false)
        } else if let Some(n) = iface.tcp_counters().drop_since(&tcp, FIRST_TCP_DROP) {
            self.code(n, true)
        } else {
            return; // accepted
        };
        let kept = std::mem::take(&mut self.kept);
        self.tap(Point::Drop, class, code, &kept[..keep], orig_len);
        self.kept = kept;
    }
}

impl Captures {
    /// The index of drop counter `name` (TCP's if `tcp`) in [`drop_reasons`]; 0 if it is
    /// not there (a counter added to the stack without a place in the table).
    fn code(&self, name: &str, tcp: bool) -> u16 {
        self.reasons
            .iter()
            .position(|r| match r.strip_prefix("tcp_") {
                Some(t) if tcp => t == name,
                _ => !tcp && r == name,
            })
            .and_then(|i| u16::try_from(i).ok())
            .unwrap_or(0)
    }
}

/// A frame buffer's valid bytes.
#[inline]
fn valid(pool: &ChanPool, b: BufIdx) -> &[u8] {
    let (off, len) = pool.off_len(b);
    let d = pool.data(b);
    let (off, end) = (usize::from(off), usize::from(off) + usize::from(len));
    d.get(off..end).unwrap_or(&[])
}
