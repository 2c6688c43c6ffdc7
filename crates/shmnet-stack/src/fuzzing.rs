//! The fuzz harness of target `stack_rx` (in `fuzz/`), here so that the tests can replay
//! the seed corpus without cargo-fuzz. It feeds arbitrary input to one [`Interface`] over
//! a [`HeapPool`], read as a sequence of records:
//!
//! * `op < 0xf0`: a frame — two bytes of length (little-endian), then that many bytes
//!   (fewer if the input ends);
//! * `0xf0..=0xf7`: advance time by the next byte × 100 ms, then `poll`;
//! * `0xf8..=0xfb`: `udp_recv` on socket `op & 1`; then TCP: accept what port 7's listener
//!   established, read from every connection, and (for `op & 2`) echo what was read;
//! * `0xfc..=0xff`: `udp_send_to` of the next byte × 64 bytes to 10.0.0.(2 + op & 3)
//!   (`op & 3 == 3`: to socket 7's group [`GROUP`], which loops back to it).
//!
//! Asserts no panic and buffer conservation at the end, after a poll past every timeout,
//! draining the sockets, and clearing the interface (TCP connections that are still open
//! hold their queues until then).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use crate::{
    BufIdx, BufferPool, Config, EthernetAddress, HeapPool, Instant, Interface, NoHook, Stats,
};

const HEADROOM: usize = 32;

/// The interface's IPv6 address, so that the fuzzer reaches neighbour discovery and ICMPv6
/// echo (its MAC is 02:00:00:00:00:01, its IPv4 address 10.0.0.1/24).
pub const IPV6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);

/// The IPv4 group socket 7 joins (its frames go to 01:00:5e:01:02:03).
pub const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);

/// Run one fuzz input (format above) and return the interface's counters. Panics only if a
/// bug breaks buffer conservation (or the stack itself panics).
pub fn stack_rx(data: &[u8]) -> Stats {
    // The pool and user buffer are reused from run to run (a fresh 256 KB pool per input
    // would dominate the fuzzer's time); the pool is whole at the start of every run,
    // which the previous run asserted.
    thread_local! {
        static SCRATCH: std::cell::RefCell<(HeapPool, Vec<u8>)> =
            std::cell::RefCell::new((HeapPool::with_count(128), vec![0u8; 65_536]));
    }
    SCRATCH.with_borrow_mut(|(pool, user)| run(data, pool, user))
}

fn run(data: &[u8], pool: &mut HeapPool, user: &mut [u8]) -> Stats {
    assert_eq!(pool.free_count(), pool.total());
    user.fill(0); // what is sent must not depend on earlier runs
    let mut cfg = Config::new(
        EthernetAddress([0x02, 0, 0, 0, 0, 1]),
        Ipv4Addr::new(10, 0, 0, 1),
        24,
    );
    cfg.rx_queue_limit = 4;
    cfg.arp_pending_limit = 16;
    cfg.reasm_capacity = 8;
    cfg.ipv6 = Some((IPV6, 64));
    let mut ifc = Interface::new(cfg);
    let socks = [
        ifc.udp_bind_port(7).expect("bind 7"),
        ifc.udp_bind_port(8).expect("bind 8"),
    ];
    // Socket 7 is in group 239.1.2.3, so the fuzzer reaches multicast delivery and IGMP.
    ifc.udp_multicast(socks[0], crate::MulticastOp::Join(GROUP), Instant::ZERO)
        .expect("join");
    ifc.add_neighbor(
        Ipv4Addr::new(10, 0, 0, 3),
        EthernetAddress([0x02, 0, 0, 0, 0, 3]),
        Instant::ZERO,
    );
    let listener = ifc.tcp_listen(7, 4).expect("listen 7");
    let mut conns = Vec::new();
    let mut now = 0u64;
    let mut tx: Vec<BufIdx> = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let op = data[i];
        i += 1;
        match op {
            0x00..=0xef => {
                let len = data
                    .get(i..i + 2)
                    .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]) as usize);
                i = (i + 2).min(data.len());
                let end = (i + len).min(data.len()).min(i + 2048 - HEADROOM);
                if let Some(b) = pool.alloc_with(HEADROOM, &data[i..end]) {
                    ifc.receive(pool, b, Instant::from_nanos(now), &mut tx);
                }
                i = end;
            }
            0xf0..=0xf7 => {
                let step = data.get(i).copied().unwrap_or(1) as u64;
                i += 1;
                now += step * 100_000_000;
                ifc.poll(pool, Instant::from_nanos(now), &mut tx);
            }
            0xf8..=0xfb => {
                let _ = ifc.udp_recv(pool, socks[(op & 1) as usize], user, &mut NoHook);
                let t = Instant::from_nanos(now);
                while let Ok(Some(h)) = ifc.tcp_accept(listener) {
                    conns.push(h);
                }
                for &h in &conns {
                    if let Ok(n) = ifc.tcp_recv(pool, h, &mut user[..4096], t, &mut tx) {
                        if op & 2 != 0 && n > 0 {
                            let _ = ifc.tcp_send(pool, h, &user[..n], t, &mut tx);
                        }
                    }
                }
            }
            0xfc..=0xff => {
                let n = data.get(i).copied().unwrap_or(0) as usize * 64;
                i += 1;
                let dst = match op & 3 {
                    3 => SocketAddrV4::new(GROUP, 7),
                    k => SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2 + k), 9),
                };
                let _ = ifc.udp_send_to(
                    pool,
                    socks[0],
                    &user[..n],
                    dst,
                    Instant::from_nanos(now),
                    &mut tx,
                );
            }
        }
        // The driver transmits and frees whatever was emitted.
        for b in tx.drain(..) {
            pool.free_chain(b);
        }
    }
    // Connections open before the late poll may end in it, their last segment (a give-up
    // RST, a retransmission) queued for ARP: judge the ARP queue by what was open before.
    let had_tcp = ifc.tcp_connections() > 0;
    ifc.poll(pool, Instant::from_nanos(now + 3_600_000_000_000), &mut tx);
    for b in tx.drain(..) {
        pool.free_chain(b);
    }
    for s in socks {
        while let Ok(Some(_)) = ifc.udp_recv(pool, s, user, &mut NoHook) {}
    }
    assert_eq!(ifc.reasm_len(), 0);
    // Open TCP connections still retransmit (and queue frames for ARP) at this late poll:
    // only UDP's and ICMP's frames must have left the ARP queue.
    if !had_tcp {
        assert_eq!(ifc.arp_pending_len(), 0);
    }
    ifc.clear(pool);
    assert_eq!(pool.free_count(), pool.total(), "buffers leaked");
    ifc.stats().clone()
}
