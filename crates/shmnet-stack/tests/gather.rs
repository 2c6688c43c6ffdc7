//! Gather send: a datagram given as many slices goes out byte for byte as the same bytes
//! given as one, whatever the cuts, fragment boundaries and checksum setting.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{PEER_IP, PEER_MAC, drain_tx, sender};
use proptest::prelude::*;
use shmnet_stack::{
    BufferPool, Config, EthernetAddress, HeapPool, Instant, Interface, NoHook, SendError,
};

fn dst() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 5001)
}

/// Sends `parts` (gathered) from a fresh interface with MTU `mtu`; returns the frames.
fn send(parts: &[&[u8]], checksum: bool, mtu: usize) -> Vec<Vec<u8>> {
    let mut cfg = common::config();
    cfg.mtu = mtu;
    cfg.udp_tx_checksum = checksum;
    let mut ifc = Interface::new(cfg);
    ifc.add_neighbor(
        Ipv4Addr::from(PEER_IP),
        EthernetAddress(PEER_MAC),
        Instant::ZERO,
    );
    let mut pool = HeapPool::with_count(128);
    let s = ifc.udp_bind_port(5000).unwrap();
    let mut tx = Vec::new();
    ifc.udp_send_gather(&mut pool, s, parts, dst(), Instant::ZERO, &mut tx)
        .unwrap();
    let frames = drain_tx(&mut pool, tx);
    assert_eq!(pool.free_count(), pool.total(), "every buffer went out");
    frames
}

/// Cuts `data` at `cuts` (positions taken modulo its length + 1, in any order, repeats
/// giving empty slices).
fn cut<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    at.sort_unstable();
    let mut parts = Vec::new();
    let mut prev = 0;
    for c in at {
        parts.push(&data[prev..c]);
        prev = c;
    }
    parts.push(&data[prev..]);
    parts
}

/// What a peer stack receives from `frames` (checking their UDP checksum if `checksum`).
fn peer_receives(frames: &[Vec<u8>], checksum: bool) -> Vec<u8> {
    let mut cfg = Config::new(EthernetAddress(PEER_MAC), Ipv4Addr::from(PEER_IP), 24);
    cfg.udp_rx_checksum = checksum;
    let mut peer = Interface::new(cfg);
    let ps = peer.udp_bind_port(5001).unwrap();
    let mut pool = HeapPool::with_count(128);
    for f in frames {
        let b = pool.alloc_with(0, f).unwrap();
        peer.receive(&mut pool, b, Instant::ZERO, &mut Vec::new());
    }
    let mut buf = vec![0; 70_000];
    let info = peer
        .udp_recv(&mut pool, ps, &mut buf, &mut NoHook)
        .unwrap()
        .expect("the peer got the datagram (a bad checksum would drop it)");
    buf.truncate(info.len);
    buf
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn gather_equals_contiguous_byte_for_byte(
        data in prop::collection::vec(any::<u8>(), 0..6000),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
        checksum in any::<bool>(),
        mtu in prop_oneof![Just(1500usize), 576usize..1500],
    ) {
        let parts = cut(&data, &cuts);
        let whole = send(&[&data], checksum, mtu);
        let gathered = send(&parts, checksum, mtu);
        prop_assert_eq!(&gathered, &whole);
        prop_assert_eq!(peer_receives(&gathered, checksum), data);
    }
}

#[test]
fn fragment_boundaries_inside_slices() {
    // 1,480 bytes of UDP per fragment at MTU 1500 (the first carries the 8-byte header):
    // slices of 1,000 and 333 bytes make every boundary fall inside a slice, and single
    // bytes make some fall between slices.
    let data: Vec<u8> = (0..9000u32).map(|i| (i * 31 + 7) as u8).collect();
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut at = 0;
    for len in [1000, 333, 1, 1, 1471, 1000, 0, 2000, 1] {
        parts.push(&data[at..at + len]);
        at += len;
    }
    parts.push(&data[at..]);
    for checksum in [false, true] {
        let frames = send(&parts, checksum, 1500);
        assert_eq!(frames.len(), (8 + data.len()).div_ceil(1480));
        assert_eq!(frames, send(&[&data], checksum, 1500));
        assert_eq!(peer_receives(&frames, checksum), data);
    }
}

#[test]
fn a_gather_too_big_for_a_datagram_is_refused_and_keeps_nothing() {
    let chunk = vec![0u8; 10_000];
    let parts: Vec<&[u8]> = (0..7).map(|_| &chunk[..]).collect();
    let mut ifc = sender(true);
    let mut pool = HeapPool::with_count(128);
    let s = ifc.udp_bind_port(5000).unwrap();
    let mut tx = Vec::new();
    assert_eq!(
        ifc.udp_send_gather(&mut pool, s, &parts, dst(), Instant::ZERO, &mut tx),
        Err(SendError::TooBig)
    );
    assert!(tx.is_empty());
    assert_eq!(pool.free_count(), pool.total());
    // The largest datagram goes through.
    let max = 65_535 - 20 - 8;
    let big = vec![7u8; max];
    let parts: Vec<&[u8]> = big.chunks(4096).collect();
    ifc.udp_send_gather(&mut pool, s, &parts, dst(), Instant::ZERO, &mut tx)
        .unwrap();
    let frames = drain_tx(&mut pool, tx);
    assert_eq!(peer_receives(&frames, true), big);
}
