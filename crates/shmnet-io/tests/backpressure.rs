//! A sender faster than the device waits instead of losing datagrams at it: the data plane
//! takes an application's sends only as fast as the driver has room for frames
//! (`Driver::tx_room`), so the rest wait in the application's queue and its send memory runs
//! out — the flow control a kernel socket's send buffer gives. Over a loopback softnic (256
//! frames of backlog) under both isolations: one application blasts 20,000 datagrams with
//! blocking sends while another reads them; every datagram is either read or counted where
//! it was dropped (the receiving socket's full queue), and none at the device.

mod common;

use common::stepped::{self, US};
use shmnet_io::client::Client;
use shmnet_io::spec::{Isolation, OnMiss};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

const DATAGRAMS: u64 = 20_000;

fn blast(isolation: Isolation) {
    let server = stepped::loopback(
        &format!("backpressure-{isolation:?}"),
        isolation,
        OnMiss::Buffer,
        Duration::from_millis(1),
    );
    let (port, reader) = stepped::udp_reader(&server.path, |b, sock| {
        let mut buf = [0u8; 64];
        let mut got = 0u64;
        // Until every datagram came, or a second passes without one (the rest dropped).
        while got < DATAGRAMS {
            match sock.recv_timeout(&mut buf, Duration::from_secs(1)) {
                Ok(_) => got += 1,
                Err(_) => break,
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
