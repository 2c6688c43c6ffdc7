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

use shmnet_stack::bench::{receiver, rx_frames};
use shmnet_stack::{BufIdx, BufferPool, HeapPool, Instant, Interface, NoHook, SocketHandle};

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
    let fr = rx_frames(size, checksum);
    let (ifc, sock) = receiver(checksum, batch);
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
