//! A sender faster than the device waits instead of losing datagrams at it: the data plane
//! takes an application's sends only as fast as the driver has room for frames
//! (`Driver::tx_room`), so the rest wait in the application's queue and its send memory runs
//! out — the flow control a kernel socket's send buffer gives. Over a loopback softnic (256
//! frames of backlog) under both isolations: one application blasts 20,000 datagrams with
//! blocking sends while another reads them; every datagram is either read or counted where
//! it was dropped (the receiving socket's full queue), and none at the device.

mod common;

use common::stepped::{self, US};
use shmnet_io::client::{Client, ClientError};
use shmnet_io::spec::{Isolation, OnMiss};
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const DATAGRAMS: u64 = 20_000;

fn blast(isolation: Isolation) {
    let server = stepped::loopback(
        &format!("backpressure-{isolation:?}"),
        isolation,
        OnMiss::Buffer,
        Duration::from_millis(1),
    );
    let sent_all = Arc::new(AtomicBool::new(false));
    let done = sent_all.clone();
    let path = server.path.clone();
    let (port, reader) = stepped::udp_reader(&server.path, move |b, sock| {
        let mut buf = [0u8; 64];
        let mut got = 0u64;
        // Until every datagram came, or — once the sender has sent them all — every one is
        // read or counted as dropped (none can come after that), however long the machine
        // holds up the sender or the server. A datagram lost without a count shows as the
        // sum falling short, after 60 s.
        let mut give_up = None;
        while got < DATAGRAMS {
            match sock.recv_timeout(&mut buf, Duration::from_millis(100)) {
                Ok(_) => {
                    got += 1;
                    continue;
                }
                Err(ClientError::TimedOut) => {}
                Err(_) => break,
            }
            if !done.load(Ordering::Acquire) {
                continue;
            }
            let dropped = stepped::stats(&path).stack.queue_full + b.udp_overflows();
            let at = *give_up.get_or_insert_with(|| Instant::now() + Duration::from_secs(60));
            if got + dropped >= DATAGRAMS || Instant::now() > at {
                break;
            }
        }
        (got, b.udp_overflows(), b.region_errors())
    });
    let a = Client::connect(&server.path).expect("attach the sender");
    let sock = a.udp_bind(0).expect("bind the sender");
    let to = SocketAddrV4::new(US, port);
    let payload = [7u8; 64];
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..DATAGRAMS {
        // A send waits for send memory while the device is full; it never fails for it.
        sock.send_to(&payload, to).expect("a blocking send");
        assert!(
            Instant::now() < deadline,
            "{isolation:?}: the blast took over 120 s"
        );
    }
    sent_all.store(true, Ordering::Release);
    let (read, overflows, errors) = reader.join().expect("the reader");
    let s = server.stats();
    assert_eq!(
        s.driver.driver.tx_errors, 0,
        "{isolation:?}: frames dropped at the device ({read} of {DATAGRAMS} read)"
    );
    assert_eq!(
        read + s.stack.queue_full + overflows,
        DATAGRAMS,
        "{isolation:?}: every datagram read or counted as dropped: by the full socket queue \
         ({}), or by the reader's client, holding too many unread ({overflows}); the \
         reader's refused sends and deliveries: {errors:?}; no buffers {}, ARP queue full {}; \
         apps {:?}",
        s.stack.queue_full,
        s.stack.no_buffers,
        s.stack.arp_queue_full,
        s.apps
            .iter()
            .map(|a| (&a.counters, &a.rings))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_sender_faster_than_the_device_waits_and_loses_nothing_there_shared() {
    blast(Isolation::Shared);
}

#[test]
fn a_sender_faster_than_the_device_waits_and_loses_nothing_there_regions() {
    blast(Isolation::Regions);
}
