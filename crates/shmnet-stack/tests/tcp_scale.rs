//! Connection state is small and grows linearly: 100,000 established, idle connections
//! between two of our stacks, with the heap they take measured by a counting allocator.
//! An idle connection holds no pool buffer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicIsize, Ordering};

use shmnet_stack::tcp::State;
use shmnet_stack::{BufIdx, BufferPool, Config, EthernetAddress, HeapPool, Instant, Interface};

/// Bytes the process has allocated and not freed.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

struct Pair {
    a: Interface,
    b: Interface,
    pa: HeapPool,
    pb: HeapPool,
    now: Instant,
}

impl Pair {
    /// Carry frames both ways until neither side has anything to send.
    fn settle(&mut self, mut from_a: Vec<BufIdx>, mut from_b: Vec<BufIdx>) {
        while !from_a.is_empty() || !from_b.is_empty() {
            let mut next_b = Vec::new();
            let mut next_a = Vec::new();
            for f in from_a.drain(..) {
                let bytes = shmnet_stack::buf::valid(&self.pa, f).to_vec();
                self.pa.free(f);
                let b = self.pb.alloc_with(0, &bytes).expect("B's pool has room");
                self.b.receive(&mut self.pb, b, self.now, &mut next_b);
            }
            for f in from_b.drain(..) {
                let bytes = shmnet_stack::buf::valid(&self.pb, f).to_vec();
                self.pb.free(f);
                let b = self.pa.alloc_with(0, &bytes).expect("A's pool has room");
                self.a.receive(&mut self.pa, b, self.now, &mut next_a);
            }
            // TCP answers a burst when flushed.
            self.b.flush(&mut self.pb, self.now, &mut next_b);
            self.a.flush(&mut self.pa, self.now, &mut next_a);
            from_a = next_a;
            from_b = next_b;
        }
    }
}

fn side(mac: u8, ip: Ipv4Addr) -> Interface {
    let mut cfg = Config::new(EthernetAddress([2, 0, 0, 0, 0, mac]), ip, 24);
    cfg.tcp.max_connections = 200_000;
    Interface::new(cfg)
}

#[test]
fn a_hundred_thousand_idle_connections_take_linear_memory_and_no_buffers() {
    let mut p = Pair {
        a: side(1, A_IP),
        b: side(2, B_IP),
        pa: HeapPool::with_count(256),
        pb: HeapPool::with_count(256),
        now: Instant::from_secs(1),
    };
    p.a.add_neighbor(B_IP, EthernetAddress([2, 0, 0, 0, 0, 2]), p.now);
    p.b.add_neighbor(A_IP, EthernetAddress([2, 0, 0, 0, 0, 1]), p.now);
    // 16,384 ephemeral ports per destination: eight listening ports hold 131,072.
    let listeners: Vec<_> = (1..=8u16)
        .map(|port| p.b.tcp_listen(port, 1 << 20).unwrap())
        .collect();
    let mut handles = Vec::new();
    let mut samples = Vec::new();
    let base = LIVE.load(Ordering::Relaxed);
    for step in [25_000usize, 50_000, 100_000] {
        while handles.len() < step {
            let port = 1 + (handles.len() % 8) as u16;
            let mut out = Vec::new();
            let h =
                p.a.tcp_connect(&mut p.pa, SocketAddrV4::new(B_IP, port), p.now, &mut out)
                    .unwrap();
            p.settle(out, Vec::new());
            handles.push(h);
        }
        let mut accepted = 0;
        for &l in &listeners {
            while let Ok(Some(_)) = p.b.tcp_accept(l) {
                accepted += 1;
            }
        }
        let _ = accepted;
        samples.push((step, LIVE.load(Ordering::Relaxed) - base));
    }
    assert_eq!(p.a.tcp_connections(), 100_000);
    assert_eq!(p.b.tcp_connections(), 100_000);
    for h in handles.iter().step_by(997) {
        assert_eq!(p.a.tcp_state(*h).unwrap(), State::Established);
    }
    // Idle connections hold no buffer: the pools are whole.
    assert_eq!(p.pa.free_count(), p.pa.total());
    assert_eq!(p.pb.free_count(), p.pb.total());
    // Both sides' tables together, per connection (one side each is half of it).
    let per_conn: Vec<f64> = samples
        .iter()
        .map(|&(n, bytes)| bytes as f64 / n as f64 / 2.0)
        .collect();
    eprintln!("heap per connection per side, at 25k/50k/100k: {per_conn:?} bytes");
    // Linear: the cost of a connection does not grow with their number (a table that
    // doubles its capacity may be up to twice as large at one count as at another).
    assert!(per_conn[2] <= per_conn[0] * 2.0 + 64.0, "{per_conn:?}");
    // And small: the connection itself is at most 512 bytes (see the unit test); with the
    // demultiplexing map, the timer queue and a slab's spare capacity, under 2 KiB.
    assert!(per_conn[2] < 2048.0, "{per_conn:?}");
}
