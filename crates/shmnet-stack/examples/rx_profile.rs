//! A fixed, repeatable workload for instruction counting of the receive path (the rx rows of
//! `shmnet bench stack`), meant to be run under callgrind:
//!
//! ```text
//! cargo build --release -p shmnet-stack --example rx_profile
//! valgrind --tool=callgrind --toggle-collect='rx_profile::timed*' \
//!     target/release/examples/rx_profile [size] [csum] [messages]
//! ```
//!
//! `timed` covers what the benchmark's rx timed region covers: `receive` of every frame of a
//! batch of messages, then `udp_recv` of each message into one user buffer. Loading the frames
//! into pool buffers (the driver's copy) is outside it. Divide the instruction count by the
//! number of messages.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};

use shmnet_stack::buf::chain_to_vec;
use shmnet_stack::{
    BufIdx, BufferPool, Config, EthernetAddress, HeapPool, Instant, Interface, NoHook, SocketHandle,
};

const OUR_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 5001;

fn config(mac: EthernetAddress, ip: Ipv4Addr, checksum: bool) -> Config {
    let mut c = Config::new(mac, ip, 24);
    c.udp_rx_checksum = checksum;
    c.udp_tx_checksum = checksum;
    c
}

fn frames(size: usize, checksum: bool) -> Vec<Vec<u8>> {
    let mut peer = Interface::new(config(PEER_MAC, PEER_IP, checksum));
    let mut pool = HeapPool::with_count(64);
    peer.add_neighbor(OUR_IP, OUR_MAC, Instant::ZERO);
    let s = peer.udp_bind_port(5000).expect("bind");
    let data: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut tx = Vec::new();
    peer.udp_send_to(
        &mut pool,
        s,
        &data,
        SocketAddrV4::new(OUR_IP, PORT),
        Instant::ZERO,
        &mut tx,
    )
    .expect("send");
    tx.into_iter()
        .map(|b: BufIdx| {
            let v = chain_to_vec(&pool, b);
            pool.free_chain(b);
            v
        })
        .collect()
}

/// The receiving side: an interface with one bound socket, its pool, and the user buffer.
struct Rx {
    ifc: Interface,
    pool: HeapPool,
    sock: SocketHandle,
    user: Vec<u8>,
    tx: Vec<BufIdx>,
}

/// The region measured: what the benchmark's rx timed region covers.
#[inline(never)]
fn timed(rx: &mut Rx, loaded: &[BufIdx], msgs: usize, now: Instant) -> usize {
    for &b in loaded {
        rx.ifc.receive(&mut rx.pool, b, now, &mut rx.tx);
    }
    let mut got = 0;
    for _ in 0..msgs {
        if let Ok(Some(info)) = rx
            .ifc
            .udp_recv(&mut rx.pool, rx.sock, &mut rx.user, &mut NoHook)
        {
            got += black_box(info.len);
        }
    }
    got
}

fn main() {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(14_792);
    let checksum = args.next().is_some_and(|a| a == "1" || a == "true");
    let total: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(400);
    // As in the benchmark for 14,792-byte messages: batches of four, frames at headroom 30.
    let batch = 4;
    let fr = frames(size, checksum);
    let mut cfg = config(OUR_MAC, OUR_IP, checksum);
    cfg.rx_queue_limit = batch;
    let mut ifc = Interface::new(cfg);
    let sock = ifc.udp_bind_port(PORT).expect("bind");
    let mut rx = Rx {
        ifc,
        pool: HeapPool::with_count(batch * fr.len() + 64),
        sock,
        user: vec![0u8; 65_536],
        tx: Vec::new(),
    };
    let mut loaded = Vec::with_capacity(batch * fr.len());
    let mut got = 0;
    for round in 0..total / batch {
        loaded.clear();
        for _ in 0..batch {
            for f in &fr {
                loaded.push(rx.pool.alloc_with(30, f).expect("pool"));
            }
        }
        got += timed(&mut rx, &loaded, batch, Instant::from_nanos(round as u64));
        for b in rx.tx.drain(..) {
            rx.pool.free_chain(b);
        }
    }
    let msgs = total / batch * batch;
    assert_eq!(got, size * msgs, "every message delivered");
    println!("{msgs} messages of {size} B, checksum {checksum}");
}
