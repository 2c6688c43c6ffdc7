//! Host-local flow control for UDP (`shmnet_stack::Interface::udp_local_wait`): over a
//! loopback, a datagram to a full socket of the same server waits in its sender's queue
//! instead of overflowing that socket, so two applications of one host that keep reading
//! lose nothing however fast the sender is; a receiver that stops reading holds its
//! senders up only for the hold, after which what they send overflows (and is counted) as
//! without flow control. Both isolations.

mod common;

use common::stepped::{self, US};
use shmnet_io::client::Client;
use shmnet_io::inline::ServeConfig;
use shmnet_io::spec::{Isolation, OnMiss};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

/// A socket queue this short fills within a few sends whenever the reader pauses.
const QUEUE: usize = 16;

fn server(tag: &str, isolation: Isolation, hold: Duration) -> stepped::Stepped {
    stepped::loopback_serving(
        &format!("local-flow-{tag}-{isolation:?}"),
        isolation,
        OnMiss::Buffer,
        Duration::from_millis(1),
        ServeConfig {
            rx_queue_limit: QUEUE,
            udp_local_hold: Some(hold),
            ..ServeConfig::default()
        },
    )
}

/// A reader that starts reading only once its queue has filled and the sender is held, and
/// then pauses every 64 datagrams (far longer than a sender needs to fill [`QUEUE`]), reads
/// every one of 20,000 blocking sends: none overflows its queue.
fn slow_reader_loses_nothing(isolation: Isolation) {
    const DATAGRAMS: u64 = 20_000;
    // A hold no pause of the reader's comes near, however loaded the machine.
    let server = server("slow", isolation, Duration::from_secs(30));
    let path = server.path.clone();
    let (port, reader) = stepped::udp_reader(&server.path, move |b, sock| {
        // The sender is held at least once whatever the machine's speed (a fast reader of a
        // slow sender might never fill the queue): wait for it before reading.
        let held = stepped::stats_until(&path, |s| s.stack.udp_local_held > 0);
        assert!(
            held.stack.udp_local_held > 0,
            "{isolation:?}: a reader that does not read never held its sender: {:?}",
            held.stack
        );
        let mut buf = [0u8; 64];
        let mut got = 0u64;
        let mut in_order = true;
        while got < DATAGRAMS {
            match sock.recv_timeout(&mut buf, Duration::from_secs(30)) {
                Ok((n, _)) => {
                    in_order &= n == 8 && u64::from_le_bytes(buf[..8].try_into().unwrap()) == got;
                    got += 1;
                }
                Err(_) => break,
            }
            if got % 64 == 0 {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        (got, in_order, b.udp_overflows())
    });
    let a = Client::connect(&server.path).expect("attach the sender");
    let sock = a.udp_bind(0).expect("bind the sender");
    let to = SocketAddrV4::new(US, port);
    for i in 0..DATAGRAMS {
        sock.send_to(&i.to_le_bytes(), to).expect("a blocking send");
    }
    let (read, in_order, overflows) = reader.join().expect("the reader");
    let s = server.stats();
    assert_eq!(
        (read, s.stack.queue_full, overflows),
        (DATAGRAMS, 0, 0),
        "{isolation:?}: every datagram read, none dropped at the socket's queue or by the \
         reader's client; holds {}, holds run out {}",
        s.stack.udp_local_held,
        s.stack.udp_local_hold_expired
    );
    assert!(in_order, "{isolation:?}: datagrams came in the order sent");
    assert!(
        s.stack.udp_local_held > 0,
        "{isolation:?}: the sender was never held, so the test did not test it"
    );
    assert_eq!(s.stack.udp_local_hold_expired, 0, "{isolation:?}");
}

#[test]
fn a_receiver_that_keeps_reading_loses_nothing_to_a_faster_local_sender_shared() {
    slow_reader_loses_nothing(Isolation::Shared);
}

#[test]
fn a_receiver_that_keeps_reading_loses_nothing_to_a_faster_local_sender_regions() {
    slow_reader_loses_nothing(Isolation::Regions);
}

/// A receiver that never reads: its sender is held for the hold and then goes on, what it
/// sends overflowing the socket's queue (counted); it is not stopped for good.
fn a_receiver_that_stops_holds_its_sender_only_for_the_hold(isolation: Isolation) {
    const DATAGRAMS: u64 = 2_000;
    let hold = Duration::from_millis(50);
    let server = server("stopped", isolation, hold);
    let b = Client::connect(&server.path).expect("attach the receiver");
    let silent = b.udp_bind(0).expect("bind the receiver");
    let a = Client::connect(&server.path).expect("attach the sender");
    let sock = a.udp_bind(0).expect("bind the sender");
    let to = SocketAddrV4::new(US, silent.port());
    let start = Instant::now();
    for i in 0..DATAGRAMS {
        sock.send_to(&i.to_le_bytes(), to).expect("a blocking send");
    }
    let took = start.elapsed();
    // The sends all went out (and the last of them reached the stack) before we look.
    let deadline = Instant::now() + Duration::from_secs(30);
    let s = loop {
        let s = server.stats();
        if s.stack.udp_delivered + s.stack.queue_full >= DATAGRAMS || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        took >= hold,
        "{isolation:?}: the sender was not held ({took:?} for {DATAGRAMS} sends)"
    );
    assert_eq!(
        s.stack.udp_local_hold_expired, 1,
        "{isolation:?}: one episode, and its hold ran out"
    );
    assert!(
        s.stack.queue_full > 0,
        "{isolation:?}: after the hold, what the sender sent overflowed the queue"
    );
    assert_eq!(
        s.stack.udp_delivered + s.stack.queue_full,
        DATAGRAMS,
        "{isolation:?}: every datagram queued or counted as an overflow"
    );
    drop(silent);
}

#[test]
fn a_receiver_that_stops_reading_holds_its_sender_only_for_the_hold_shared() {
    a_receiver_that_stops_holds_its_sender_only_for_the_hold(Isolation::Shared);
}

#[test]
fn a_receiver_that_stops_reading_holds_its_sender_only_for_the_hold_regions() {
    a_receiver_that_stops_holds_its_sender_only_for_the_hold(Isolation::Regions);
}
