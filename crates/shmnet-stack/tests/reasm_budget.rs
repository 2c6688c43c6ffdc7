//! The fragment flood of issue 16: 64 datagrams × 64 tiny fragments (4,096 frames, one
//! 4,096-buffer pool) held every buffer and stopped all traffic until the 30 s timeout.
//! With the reassembly budget the flood holds at most a quarter of the pool, honest
//! datagrams — single frames and fragmented ones — interleaved with it are delivered, and
//! every buffer comes back. Without the budget (the control) the same flood runs the pool
//! dry.

mod common;

use std::collections::VecDeque;

use common::*;
use etherparse::IpNumber;
use shmnet_stack::{BufferPool, HeapPool, Instant, Interface, NoHook, SocketHandle, Stats};

const PORT: u16 = 7777;
const POOL: usize = 4096;
/// The default global budget for that pool: a quarter of it.
const BUDGET: usize = POOL / 4;
/// Attack frames between two honest frames.
const ATTACK_PER_HONEST: usize = 4;
/// Honest datagrams sent after the flood (when the pool used to be full).
const AFTER: usize = 64;

/// What the attack comes from.
#[derive(Clone, Copy, Debug)]
enum Attackers {
    /// One source address, 64 datagrams.
    One,
    /// 64 source addresses, one datagram each.
    Many,
}

/// The flood, in sending order: fragment `k` of every datagram, for `k` in 0..64 (round
/// robin, so that no datagram is ever complete: offset 0 never comes).
fn flood(who: Attackers) -> Vec<Vec<u8>> {
    let mut frames = Vec::with_capacity(64 * 64);
    for k in 0..64 {
        for d in 0..64u8 {
            let (src, ident) = match who {
                Attackers::One => ([10, 0, 0, 66], 1000 + d as u16),
                Attackers::Many => ([10, 0, 0, 100 + d], 1000),
            };
            frames.push(ip_frame(
                src,
                OUR_IP,
                IpNumber::UDP,
                ident,
                8 + 8 * k,
                true,
                &[0xee; 8],
            ));
        }
    }
    frames
}

/// Honest datagram `i` from PEER: even ones fit a frame, odd ones take three fragments.
/// Returns its payload and its frames.
fn honest(i: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
    let ident = i as u16;
    if i % 2 == 0 {
        let payload = pattern(200 + i % 7, i as u8);
        let dg = udp_datagram(1, PORT, &payload, true);
        let frame = ip_frame(PEER_IP, OUR_IP, IpNumber::UDP, ident, 0, false, &dg);
        (payload, vec![frame])
    } else {
        let payload = pattern(3000 + i % 11, i as u8);
        let dg = udp_datagram(1, PORT, &payload, true);
        (payload, udp_fragments(ident, &dg, 1480))
    }
}

/// What one run saw.
struct Run {
    sent: usize,
    delivered: usize,
    /// Frames the "driver" could not receive: no free buffer.
    no_buffer: usize,
    /// Fewest free buffers seen after a frame.
    min_free: usize,
    /// Most buffers reassembly held after a frame.
    max_held: usize,
    stats: Stats,
}

/// An interface over a [`POOL`]-buffer pool with an application reading port [`PORT`].
struct Host {
    ifc: Interface,
    pool: HeapPool,
    s: SocketHandle,
    now: Instant,
    run: Run,
    /// Honest payloads sent and not yet delivered, oldest first.
    expected: VecDeque<Vec<u8>>,
    /// Frames of the honest datagram being sent.
    pending: VecDeque<Vec<u8>>,
    next_honest: usize,
}

impl Host {
    fn new(max_buffers: Option<usize>) -> Host {
        let mut cfg = config();
        cfg.reasm_max_buffers = max_buffers;
        let mut ifc = Interface::new(cfg);
        let s = bind(&mut ifc, PORT);
        Host {
            ifc,
            pool: HeapPool::with_count(POOL),
            s,
            now: Instant::ZERO,
            run: Run {
                sent: 0,
                delivered: 0,
                no_buffer: 0,
                min_free: POOL,
                max_held: 0,
                stats: Stats::default(),
            },
            expected: VecDeque::new(),
            pending: VecDeque::new(),
            next_honest: 0,
        }
    }

    /// One frame, a millisecond after the previous one, received as a driver would: into a
    /// pool buffer if there is one.
    fn frame(&mut self, frame: &[u8]) {
        self.now = Instant::from_nanos(self.now.nanos() + 1_000_000);
        match self.pool.alloc_with(HEADROOM, frame) {
            Some(b) => {
                let mut tx = Vec::new();
                self.ifc.receive(&mut self.pool, b, self.now, &mut tx);
                drain_tx(&mut self.pool, tx);
            }
            None => self.run.no_buffer += 1,
        }
        let r = &mut self.run;
        r.min_free = r.min_free.min(self.pool.free_count());
        r.max_held = r.max_held.max(self.ifc.reasm_held().0);
    }

    /// The next frame of honest traffic, then the application reads its socket.
    fn honest_frame(&mut self) {
        if self.pending.is_empty() {
            let (payload, frames) = honest(self.next_honest);
            self.next_honest += 1;
            self.run.sent += 1;
            self.expected.push_back(payload);
            self.pending.extend(frames);
        }
        let f = self.pending.pop_front().unwrap();
        self.frame(&f);
        self.read();
    }

    /// Reads every message waiting on the socket; each must be the oldest honest payload not
    /// yet delivered or a later one (the ones in between were lost).
    fn read(&mut self) {
        let mut buf = vec![0u8; 70_000];
        while let Some(info) = self
            .ifc
            .udp_recv(&mut self.pool, self.s, &mut buf, &mut NoHook)
            .unwrap()
        {
            let got = &buf[..info.len];
            let at = self
                .expected
                .iter()
                .position(|e| e == got)
                .expect("only honest payloads are delivered, intact");
            self.expected.drain(..=at);
            self.run.delivered += 1;
        }
    }
}

/// The flood from `who`, with honest traffic interleaved (one honest frame per
/// [`ATTACK_PER_HONEST`] attack frames) if `interleave`, then [`AFTER`] more honest
/// datagrams; one millisecond per frame. Ends with every buffer back in the pool.
fn run(who: Attackers, max_buffers: Option<usize>, interleave: bool) -> Run {
    let mut h = Host::new(max_buffers);
    for (i, f) in flood(who).iter().enumerate() {
        h.frame(f);
        if interleave && i % ATTACK_PER_HONEST == ATTACK_PER_HONEST - 1 {
            h.honest_frame();
        }
    }
    let sent_in_flood = h.run.sent;
    while h.run.sent < sent_in_flood + AFTER || !h.pending.is_empty() {
        h.honest_frame();
    }
    h.run.stats = h.ifc.stats().clone();
    assert_conserved(&mut h.ifc, &mut h.pool);
    h.run
}

fn check_protected(who: Attackers, interleave: bool) {
    let r = run(who, None, interleave);
    println!(
        "{who:?}, interleaved {interleave}: {}/{} honest datagrams delivered, min free {}, max held {}, evicted \
         budget {} source {}, table full {}, pressure {}, timeout {}",
        r.delivered,
        r.sent,
        r.min_free,
        r.max_held,
        r.stats.reasm_evicted_budget,
        r.stats.reasm_evicted_source,
        r.stats.reasm_table_full,
        r.stats.reasm_expired_pressure,
        r.stats.reasm_timeout,
    );
    assert!(
        r.delivered * 100 >= r.sent * 99,
        "{who:?}: only {} of {} honest datagrams delivered",
        r.delivered,
        r.sent
    );
    assert_eq!(r.no_buffer, 0, "the pool ran dry");
    assert!(r.max_held <= BUDGET, "reassembly held {}", r.max_held);
    // The application's queue holds at most one message between reads.
    assert!(r.min_free >= POOL - BUDGET - 3, "min free {}", r.min_free);
    assert_eq!(r.stats.reasm_ok as usize, r.sent / 2);
    match who {
        Attackers::One => assert!(r.stats.reasm_evicted_source > 0),
        Attackers::Many => assert!(r.stats.reasm_evicted_budget > 0),
    }
}

#[test]
fn a_flood_from_one_source_leaves_honest_traffic_through() {
    check_protected(Attackers::One, true);
    check_protected(Attackers::One, false);
}

#[test]
fn a_flood_from_many_sources_leaves_honest_traffic_through() {
    check_protected(Attackers::Many, true);
    check_protected(Attackers::Many, false);
}

/// The control: with the budget lifted, the flood alone holds every buffer and the honest
/// datagrams after it find none — the test reproduces the attack. (Interleaved fragmented
/// honest traffic happens to rescue itself there: each new datagram of it evicts a flood
/// datagram from the full table.)
#[test]
fn without_the_budget_the_flood_runs_the_pool_dry() {
    for who in [Attackers::One, Attackers::Many] {
        let r = run(who, Some(usize::MAX), false);
        println!(
            "{who:?}, no budget: {}/{} honest datagrams delivered, {} frames found no buffer",
            r.delivered, r.sent, r.no_buffer
        );
        assert_eq!(r.min_free, 0, "{who:?}");
        assert_eq!(r.delivered, 0, "{who:?}");
    }
}
