//! A plain-test fuzz smoke: 10^5 random and mutated frames and fragment sequences from a
//! fixed seed, interleaved with time advances, receives and sends. No panic; at the end,
//! after a poll past every timeout and draining the sockets, every buffer is back.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::*;
use etherparse::IpNumber;
use shmnet_stack::{BufIdx, BufferPool, EthernetAddress, HeapPool, Instant, Interface, NoHook};

const INPUTS: usize = 100_000;

fn templates() -> Vec<Vec<u8>> {
    let mut t = Vec::new();
    for (i, n) in [0usize, 1, 7, 100, 1472].into_iter().enumerate() {
        let dg = udp_datagram(
            1000 + i as u16,
            7 + (i % 2) as u16,
            &pattern(n, i as u8),
            i % 2 == 0,
        );
        t.push(ip_frame(
            PEER_IP,
            OUR_IP,
            IpNumber::UDP,
            i as u16,
            0,
            false,
            &dg,
        ));
    }
    // Fragment sequences with a few colliding identifications.
    for id in 0..3u16 {
        let dg = udp_datagram(2000, 7, &pattern(3000 + id as usize * 500, 3), true);
        t.extend(udp_fragments(id, &dg, 1480));
        t.extend(udp_fragments(id, &dg, 1024));
    }
    // ICMP echo, ARP request and reply.
    let mut icmp = vec![8, 0, 0, 0, 0, 1, 0, 1];
    icmp.extend_from_slice(&pattern(56, 1));
    let c = !ones_sum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    t.push(ip_frame(
        PEER_IP,
        OUR_IP,
        IpNumber::ICMP,
        77,
        0,
        false,
        &icmp,
    ));
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&PEER_MAC);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&PEER_MAC);
    arp.extend_from_slice(&PEER_IP);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&OUR_IP);
    t.push(arp.clone());
    arp[21] = 2; // reply
    t.push(arp);
    // TCP to the listener on port 7: a SYN with options, then segments of the same flow
    // (their sequence and acknowledgement numbers are whatever mutation makes them).
    for (flags, data, opts) in [
        (0x02u8, &b""[..], &[2u8, 4, 5, 0xb4, 1, 3, 3, 7][..]),
        (0x10, b"", b""),
        (0x18, b"some data for the stream", b""),
        (0x11, b"", b""),
        (0x04, b"", b""),
        (0x12, b"", b""),
    ] {
        let hl = 20 + opts.len();
        let mut seg = vec![0x9c, 0x40, 0, 7, 0, 0, 0x13, 0x88, 0, 0, 0, 1];
        seg.extend_from_slice(&[(hl as u8 / 4) << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
        seg.extend_from_slice(opts);
        seg.extend_from_slice(data);
        let mut pseudo = PEER_IP.to_vec();
        pseudo.extend_from_slice(&OUR_IP);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(seg.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(&seg);
        let c = !ones_sum(&pseudo);
        seg[16..18].copy_from_slice(&c.to_be_bytes());
        t.push(ip_frame(PEER_IP, OUR_IP, IpNumber::TCP, 90, 0, false, &seg));
    }
    t
}

#[test]
fn fuzz_smoke_fixed_seed() {
    let mut rng = fastrand::Rng::with_seed(0x5eed_0003);
    let mut cfg = config();
    cfg.rx_queue_limit = 8;
    cfg.arp_pending_limit = 16;
    let mut ifc = Interface::new(cfg);
    let mut pool = HeapPool::with_count(512);
    let socks = [bind(&mut ifc, 7), bind(&mut ifc, 8)];
    let listener = ifc.tcp_listen(7, 8).unwrap();
    let mut conns = Vec::new();
    let tpl = templates();
    let mut now = 0u64;
    let mut tx: Vec<BufIdx> = Vec::new();
    let mut user = vec![0u8; 70_000];
    let mut frame = Vec::with_capacity(2048);

    let dgrams: Vec<Vec<u8>> = [100usize, 2000, 5000, 14_792]
        .iter()
        .map(|&n| udp_datagram(3000, 7 + (n % 2) as u16, &pattern(n, 9), n != 2000))
        .collect();
    let mut queue: Vec<Vec<u8>> = Vec::new();

    for _ in 0..INPUTS {
        if queue.is_empty() && rng.u8(..100) < 40 {
            // A fragment sequence: random identification (collisions likely), chunk and
            // order, with losses, duplicates and corruption.
            let dg = &dgrams[rng.usize(..dgrams.len())];
            let chunk = [1480, 1024, 512, 64][rng.usize(..4)];
            let id = rng.u16(..100);
            let mut frames = udp_fragments(id, dg, chunk);
            if rng.bool() {
                rng.shuffle(&mut frames);
            }
            for f in frames {
                match rng.u8(..40) {
                    0 => {}
                    1 => {
                        queue.push(f.clone());
                        queue.push(f);
                    }
                    2 => {
                        let mut f = f;
                        let i = rng.usize(14..f.len());
                        f[i] ^= 0x10;
                        queue.push(f);
                    }
                    _ => queue.push(f),
                }
            }
            queue.reverse();
        }
        if let Some(f) = queue.pop() {
            frame.clear();
            frame.extend_from_slice(&f);
        } else {
            match rng.u8(..100) {
                // Random bytes.
                0..=14 => {
                    frame.clear();
                    let n = rng.usize(..1600);
                    frame.extend((0..n).map(|_| rng.u8(..)));
                    if rng.bool() && frame.len() >= 14 {
                        frame[..6].copy_from_slice(&OUR_MAC);
                        frame[12] = 0x08;
                        frame[13] = if rng.u8(..4) == 0 { 0x06 } else { 0x00 };
                    }
                }
                // A template, mutated or not, maybe truncated or extended.
                _ => {
                    frame.clear();
                    frame.extend_from_slice(&tpl[rng.usize(..tpl.len())]);
                    for _ in 0..rng.u8(..4) {
                        if !frame.is_empty() {
                            let i = rng.usize(..frame.len());
                            frame[i] ^= 1 << rng.u8(..8);
                        }
                    }
                    match rng.u8(..20) {
                        0 => frame.truncate(rng.usize(..=frame.len())),
                        1 => frame.extend((0..rng.usize(..64)).map(|_| rng.u8(..))),
                        _ => {}
                    }
                }
            }
        }
        frame.truncate(2048 - HEADROOM);
        if let Some(b) = pool.alloc_with(HEADROOM, &frame) {
            ifc.receive(&mut pool, b, Instant::from_nanos(now), &mut tx);
        }
        // The "driver" transmits (frees) what the stack emitted.
        for b in tx.drain(..) {
            pool.free_chain(b);
        }
        match rng.u8(..100) {
            0..=9 => now += rng.u64(..2_000_000_000),
            10..=14 => {
                let s = socks[rng.usize(..2)];
                let _ = ifc.udp_recv(&mut pool, s, &mut user, &mut NoHook);
            }
            15 => {
                let s = socks[rng.usize(..2)];
                let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, rng.u8(2..5)), 9);
                let n = rng.usize(..5000);
                let _ = ifc.udp_send_to(
                    &mut pool,
                    s,
                    &user[..n],
                    dst,
                    Instant::from_nanos(now),
                    &mut tx,
                );
            }
            16 => ifc.poll(&mut pool, Instant::from_nanos(now), &mut tx),
            18..=20 => {
                let t = Instant::from_nanos(now);
                while let Ok(Some(h)) = ifc.tcp_accept(listener) {
                    conns.push(h);
                }
                for &h in &conns {
                    if let Ok(n) = ifc.tcp_recv(&mut pool, h, &mut user[..4096], t, &mut tx) {
                        let _ = ifc.tcp_send(&mut pool, h, &user[..n], t, &mut tx);
                    }
                }
            }
            17 => ifc.add_neighbor(
                Ipv4Addr::new(10, 0, 0, 3),
                EthernetAddress(PEER_MAC),
                Instant::from_nanos(now),
            ),
            _ => {}
        }
        for b in tx.drain(..) {
            pool.free_chain(b);
        }
    }

    let st = ifc.stats().clone();
    eprintln!("{st:?}");
    assert!(st.rx_frames as usize > INPUTS * 9 / 10, "the pool kept up");
    assert!(
        st.udp_delivered > 0 && st.reasm_ok > 0 && st.arp_replies_sent > 0,
        "{st:?}"
    );
    assert!(st.icmp_echo_replies > 0 && st.total_drops() > 0, "{st:?}");

    ifc.poll(
        &mut pool,
        Instant::from_nanos(now + 3_600_000_000_000),
        &mut tx,
    );
    for b in tx.drain(..) {
        pool.free_chain(b);
    }
    for s in socks {
        while ifc
            .udp_recv(&mut pool, s, &mut user, &mut NoHook)
            .unwrap()
            .is_some()
        {}
    }
    let tcp = ifc.tcp_counters().clone();
    eprintln!("{tcp:?}");
    assert!(
        tcp.segs_in > 0 && tcp.segs_out > 0 && tcp.malformed + tcp.bad_checksum > 0,
        "{tcp:?}"
    );
    assert_eq!(ifc.reasm_len(), 0);
    if ifc.tcp_connections() == 0 {
        assert_eq!(ifc.arp_pending_len(), 0);
    }
    // Open connections hold their queues until the interface is cleared.
    ifc.clear(&mut pool);
    assert_eq!(pool.free_count(), pool.total(), "{:?}", ifc.stats());
}

/// Replay the cargo-fuzz seed corpus (fuzz/corpus/stack_rx) through the same harness.
#[test]
fn fuzz_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/stack_rx");
    // The seed corpus is part of the repository: missing, it is a broken checkout, not a
    // machine that cannot run the test, so this fails rather than skips.
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the seed corpus {}: {e}", dir.display()));
    let mut n = 0;
    let mut delivered = 0;
    for e in entries.flatten() {
        let data = std::fs::read(e.path()).unwrap();
        let st = shmnet_stack::fuzzing::stack_rx(&data);
        delivered += st.udp_delivered;
        n += 1;
    }
    assert!(n >= 5, "corpus has {n} files");
    assert!(delivered >= 3, "the seeds reach the sockets");
}

/// The multicast seeds reach what they are for: a datagram to the joined group and the
/// loop-back of one sent to it; IGMP queries of both versions, answered.
#[test]
fn the_multicast_seeds_reach_the_group_and_igmp() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/stack_rx");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let st = shmnet_stack::fuzzing::stack_rx(&read("multicast_udp_and_loop"));
    assert_eq!(
        (st.udp_delivered, st.multicast_looped, st.not_for_us),
        (2, 1, 0)
    );
    let st = shmnet_stack::fuzzing::stack_rx(&read("igmp_queries"));
    assert_eq!((st.igmp_queries, st.igmp_bad), (2, 0));
    assert!(
        st.igmp_reports_sent >= 3,
        "the join twice, then an answer: {st:?}"
    );
}
