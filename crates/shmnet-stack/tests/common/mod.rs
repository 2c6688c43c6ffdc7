//! Helpers shared by the integration tests: frames built with etherparse (the independent
//! oracle), and feeding them to an interface over a HeapPool.
#![allow(dead_code)]

use std::net::Ipv4Addr;

use etherparse::{EtherType, Ethernet2Header, IpFragOffset, IpNumber, Ipv4Header, UdpHeader};
use shmnet_stack::buf::chain_to_vec;
use shmnet_stack::{BufIdx, BufferPool, Config, EthernetAddress, HeapPool, Instant, Interface};

pub const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const OUR_IP: [u8; 4] = [10, 0, 0, 1];
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const PEER_IP: [u8; 4] = [10, 0, 0, 2];
/// Headroom the test "driver" leaves in front of each received frame.
pub const HEADROOM: usize = 32;

pub fn config() -> Config {
    Config::new(EthernetAddress(OUR_MAC), Ipv4Addr::from(OUR_IP), 24)
}

pub fn iface() -> Interface {
    Interface::new(config())
}

/// An interface that already knows the peer's MAC (so sends go out without ARP), generating
/// UDP checksums or not.
pub fn sender(checksum: bool) -> Interface {
    let mut cfg = config();
    cfg.udp_tx_checksum = checksum;
    let mut ifc = Interface::new(cfg);
    ifc.add_neighbor(
        Ipv4Addr::from(PEER_IP),
        EthernetAddress(PEER_MAC),
        Instant::ZERO,
    );
    ifc
}

pub fn pool() -> HeapPool {
    HeapPool::with_count(256)
}

/// Copy a frame into a pool buffer as a driver would, hand it to the interface, and return
/// what it transmitted (copied out, buffers freed).
pub fn feed(
    iface: &mut Interface,
    pool: &mut HeapPool,
    frame: &[u8],
    now: Instant,
) -> Vec<Vec<u8>> {
    let Some(b) = pool.alloc_with(HEADROOM, frame) else {
        panic!("pool exhausted or frame too big");
    };
    let mut tx: Vec<BufIdx> = Vec::new();
    iface.receive(pool, b, now, &mut tx);
    drain_tx(pool, tx)
}

/// Copy out and free transmitted frames.
pub fn drain_tx(pool: &mut HeapPool, tx: Vec<BufIdx>) -> Vec<Vec<u8>> {
    tx.into_iter()
        .map(|b| {
            let v = chain_to_vec(pool, b);
            pool.free_chain(b);
            v
        })
        .collect()
}

/// A UDP datagram (header + payload) from PEER to us, with or without checksum.
pub fn udp_datagram(src_port: u16, dst_port: u16, payload: &[u8], checksum: bool) -> Vec<u8> {
    udp_datagram_between(PEER_IP, OUR_IP, src_port, dst_port, payload, checksum)
}

pub fn udp_datagram_between(
    src: [u8; 4],
    dst: [u8; 4],
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
    checksum: bool,
) -> Vec<u8> {
    let ip = Ipv4Header::new(0, 64, IpNumber::UDP, src, dst).unwrap();
    let mut h = UdpHeader::with_ipv4_checksum(src_port, dst_port, &ip, payload).unwrap();
    if !checksum {
        h.checksum = 0;
    }
    let mut v = h.to_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

/// One Ethernet frame carrying an IPv4 packet (possibly a fragment) with `payload`.
#[allow(clippy::too_many_arguments)]
pub fn ip_frame(
    src: [u8; 4],
    dst: [u8; 4],
    proto: IpNumber,
    ident: u16,
    frag_offset_bytes: usize,
    more: bool,
    payload: &[u8],
) -> Vec<u8> {
    let mut ip = Ipv4Header::new(payload.len() as u16, 64, proto, src, dst).unwrap();
    ip.identification = ident;
    ip.more_fragments = more;
    ip.fragment_offset = IpFragOffset::try_new((frag_offset_bytes / 8) as u16).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let eth = Ethernet2Header {
        source: PEER_MAC,
        destination: OUR_MAC,
        ether_type: EtherType::IPV4,
    };
    let mut v = eth.to_bytes().to_vec();
    v.extend_from_slice(&ip.to_bytes());
    v.extend_from_slice(payload);
    v
}

/// Cut an IP payload into fragments of `chunk` bytes (a multiple of 8): (offset, more, bytes).
pub fn cut(payload: &[u8], chunk: usize) -> Vec<(usize, bool, Vec<u8>)> {
    assert!(chunk % 8 == 0 && chunk > 0);
    let mut out = Vec::new();
    let mut off = 0;
    while off < payload.len() {
        let end = (off + chunk).min(payload.len());
        out.push((off, end < payload.len(), payload[off..end].to_vec()));
        off = end;
    }
    out
}

/// The frames of a UDP datagram from PEER to us, fragmented at `chunk` payload bytes.
pub fn udp_fragments(ident: u16, dgram: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    cut(dgram, chunk)
        .into_iter()
        .map(|(off, more, bytes)| {
            ip_frame(PEER_IP, OUR_IP, IpNumber::UDP, ident, off, more, &bytes)
        })
        .collect()
}

/// A deterministic payload of `n` bytes.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Read every queued message of a socket and free everything the interface holds; then
/// check the pool is whole.
pub fn assert_conserved(iface: &mut Interface, pool: &mut HeapPool) {
    iface.clear(pool);
    assert_eq!(pool.free_count(), pool.total(), "buffers leaked");
}

/// The plain RFC 1071 one's-complement sum of `bytes`, folded (0xffff over a message that
/// includes a correct checksum).
pub fn ones_sum(bytes: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in bytes.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += w as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Bind a socket on port `port` of every address.
pub fn bind(iface: &mut Interface, port: u16) -> shmnet_stack::SocketHandle {
    iface.udp_bind_port(port).unwrap()
}
