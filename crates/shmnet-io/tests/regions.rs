//! Registered regions over the control socket (issue 15's first part, docs/isolation.md):
//! an application registers memory of its own, the server maps it, `stats` shows it, and
//! every way to get a registration wrong is refused, counted and survived.

mod common;

use common::stepped::{Stepped, stats, stats_until};
use shmnet_chan::PageSize;
use shmnet_chan::handles::{Perms, Region, RegionId, TableLimits};
use shmnet_io::client::{Client, ClientError};
use shmnet_io::control::{self, Request, Response};
use shmnet_io::driver::softnic::SoftnicConfig;
use shmnet_io::inline::ServeConfig;
use shmnet_io::server::{ControlLimits, Placement, ServerOptions};
use std::path::Path;
use std::time::{Duration, Instant};

/// A server (idle softnic) with `regions` limits and shared windows (the registrations
/// tested here are the application's own, numbered from 0).
fn start(tag: &str, regions: TableLimits) -> Stepped {
    Stepped::start(
        &format!("regions-{tag}"),
        SoftnicConfig {
            count: Some(0),
            ..SoftnicConfig::default()
        },
        Duration::from_millis(5),
        |socket| ServerOptions {
            serve: ServeConfig::default(),
            socket,
            page: PageSize::Small,
            ipc: false,
            isolation: shmnet_io::spec::Isolation::Shared,
            on_miss: Default::default(),
            sync: Default::default(),
            placement: Placement::Polled,
            limits: ControlLimits {
                regions,
                ..ControlLimits::default()
            },
        },
    )
}

fn refused(r: Result<RegionId, ClientError>) -> String {
    match r {
        Err(ClientError::Refused(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_registered_region_is_mapped_shown_and_unregistered() {
    let limits = TableLimits {
        max_regions_per_app: 3,
        max_bytes_per_app: 288 << 10,
    };
    let r = start("basic", limits);
    let client = Client::connect(&r.path).expect("attach");
    let send = Region::create("send", 64 << 10).unwrap();
    let recv = Region::create("recv", 128 << 10).unwrap();
    let ro = Perms {
        read: true,
        write: false,
    };
    assert_eq!(client.register(&send, ro).unwrap(), RegionId(0));
    assert_eq!(
        client.register(&recv, Perms::READ_WRITE).unwrap(),
        RegionId(1)
    );
    let s = stats(&r.path);
    assert_eq!(
        (s.regions.regions, s.regions.bytes),
        (2, 192 << 10),
        "{:?}",
        s.regions
    );
    let app = &s.apps[0];
    assert_eq!(app.pch, Some(0));
    assert_eq!((app.regions, app.registered_bytes), (2, 192 << 10));

    // Past the byte limit, and past the count limit: refused, said why, counted.
    let big = Region::create("big", 128 << 10).unwrap();
    let e = refused(client.register(&big, ro));
    assert!(e.contains("too much registered memory"), "{e}");
    let small = Region::create("small", 4096).unwrap();
    assert_eq!(client.register(&small, ro).unwrap(), RegionId(2));
    let e = refused(client.register(&small, ro));
    assert!(e.contains("too many regions"), "{e}");
    let e = refused(client.register(&small, Perms::default()));
    assert!(e.contains("read it, write it, or both"), "{e}");

    // Unregistering frees the number and the bytes; a second time is refused.
    client.unregister(RegionId(0)).unwrap();
    let e = match client.unregister(RegionId(0)) {
        Err(ClientError::Refused(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(e.contains("no such region"), "{e}");
    assert_eq!(
        client.register(&big, ro).unwrap(),
        RegionId(0),
        "the lowest free number"
    );
    let s = stats(&r.path);
    assert_eq!(s.regions.regions, 3);
    assert_eq!(s.regions.refused, 3, "{:?}", s.regions);
}

#[test]
fn an_applications_regions_go_with_it() {
    let r = start("gone", TableLimits::default());
    let a = Client::connect(&r.path).expect("attach a");
    let b = Client::connect(&r.path).expect("attach b");
    let region = Region::create("mine", 16 << 10).unwrap();
    for _ in 0..3 {
        a.register(&region, Perms::READ_WRITE).unwrap();
    }
    b.register(&region, Perms::READ_WRITE).unwrap();
    assert_eq!(stats(&r.path).regions.regions, 4);
    drop(a);
    let s = stats_until(&r.path, |s| s.regions.regions == 1);
    assert_eq!(
        (s.regions.regions, s.regions.bytes),
        (1, 16 << 10),
        "{:?}",
        s.regions
    );
    // Its number is free again for the next application.
    let c = Client::connect(&r.path).expect("attach c");
    c.register(&region, Perms::READ_WRITE).unwrap();
    let s = stats(&r.path);
    let mut pchs: Vec<_> = s.apps.iter().filter_map(|a| a.pch).collect();
    pchs.sort();
    assert_eq!(pchs, [0, 1], "{:?}", s.apps);
}

/// A raw connection that said Hello, with everything the server sent after it drained.
fn raw_attached(path: &Path) -> rustix::fd::OwnedFd {
    let fd = control::connect(path).unwrap();
    control::send(
        &fd,
        &Request::Hello {
            version: control::PROTOCOL_VERSION,
        },
    )
    .unwrap();
    // The Welcome and the two windows' hand-offs (descriptors dropped as they come).
    let mut buf = vec![0u8; control::MAX_MSG + 1];
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while got < 3 && Instant::now() < deadline {
        match control::recv_raw_with_fd(&fd, &mut buf) {
            Ok(Some(_)) => got += 1,
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("attaching: {e}"),
        }
    }
    assert_eq!(got, 3, "Welcome and two window hand-offs");
    fd
}

fn answer(fd: &rustix::fd::OwnedFd) -> Response {
    control::recv_blocking::<Response>(fd).expect("an answer")
}

#[test]
fn wrong_registrations_are_refused_and_stray_descriptors_closed() {
    let r = start("hostile", TableLimits::default());
    let fd = raw_attached(&r.path);
    // No memfd with the request.
    control::send(
        &fd,
        &Request::Register {
            read: true,
            write: true,
        },
    )
    .unwrap();
    match answer(&fd) {
        Response::Error(e) => assert!(e.contains("SCM_RIGHTS"), "{e}"),
        other => panic!("{other:?}"),
    }
    // A memfd that may still shrink.
    let loose = rustix::fs::memfd_create("loose", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&loose, 8192).unwrap();
    control::send_with_fd(
        &fd,
        &Request::Register {
            read: true,
            write: true,
        },
        rustix::fd::AsFd::as_fd(&loose),
    )
    .unwrap();
    match answer(&fd) {
        Response::Error(e) => assert!(e.contains("F_SEAL_SHRINK"), "{e}"),
        other => panic!("{other:?}"),
    }
    // Sealed but not a whole number of pages.
    let odd = rustix::fs::memfd_create("odd", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&odd, 5000).unwrap();
    rustix::fs::fcntl_add_seals(&odd, rustix::fs::SealFlags::SHRINK).unwrap();
    control::send_with_fd(
        &fd,
        &Request::Register {
            read: true,
            write: false,
        },
        rustix::fd::AsFd::as_fd(&odd),
    )
    .unwrap();
    match answer(&fd) {
        Response::Error(e) => assert!(e.contains("whole number of 4 KiB pages"), "{e}"),
        other => panic!("{other:?}"),
    }
    // Not a memfd at all (a pipe has no seals).
    let (p, _w) = rustix::pipe::pipe().unwrap();
    control::send_with_fd(
        &fd,
        &Request::Register {
            read: true,
            write: false,
        },
        rustix::fd::AsFd::as_fd(&p),
    )
    .unwrap();
    assert!(matches!(answer(&fd), Response::Error(_)));
    // A descriptor riding on a request that takes none is closed and counted.
    control::send_with_fd(&fd, &Request::Bind { port: 0 }, rustix::fd::AsFd::as_fd(&p)).unwrap();
    assert!(matches!(answer(&fd), Response::Bound { .. }));
    let s = stats(&r.path);
    assert_eq!(s.control.stray_fds, 1, "{:?}", s.control);
    assert_eq!(s.regions.refused, 3, "{:?}", s.regions);
    assert_eq!(s.regions.regions, 0);
}

#[test]
fn ten_thousand_registrations_are_capped_and_the_server_keeps_answering() {
    let r = start("flood", TableLimits::default());
    let client = Client::connect(&r.path).expect("attach");
    let region = Region::create("flood", 4096).unwrap();
    let cap = TableLimits::default().max_regions_per_app as usize;
    let mut ok = 0;
    let mut refusals = 0;
    for _ in 0..10_000 {
        match client.register(&region, Perms::READ_WRITE) {
            Ok(_) => ok += 1,
            Err(ClientError::Refused(e)) => {
                assert!(e.contains("too many regions"), "{e}");
                refusals += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((ok, refusals), (cap, 10_000 - cap));
    let asked = Instant::now();
    let s = stats(&r.path);
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "stats took {:?}",
        asked.elapsed()
    );
    assert_eq!(s.regions.regions as usize, cap);
    assert_eq!(s.regions.refused as usize, 10_000 - cap);
    drop(client);
    let s = stats_until(&r.path, |s| s.regions.regions == 0);
    assert_eq!(
        (s.regions.regions, s.regions.bytes),
        (0, 0),
        "{:?}",
        s.regions
    );
}

#[test]
fn an_application_sends_from_its_own_registered_memory() {
    use std::net::{Ipv4Addr, SocketAddrV4};
    let r = start("send-from", TableLimits::default());
    let client = Client::connect(&r.path).expect("attach");
    let sock = client.udp_bind(0).expect("bind");
    let region = Region::create("send", 64 << 10).unwrap();
    let readable = Perms {
        read: true,
        write: false,
    };
    let id = client.register(&region, readable).unwrap();
    let to = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 9);
    // 100 datagrams of 1,000 bytes spread over the region: some lines miss first.
    for k in 0..100u64 {
        let off = 8 + (k % 40) * 1_600;
        region.write(off, &[k as u8; 1_000]).unwrap();
        sock.send_from(&region, id, off, 1_000, to)
            .unwrap_or_else(|e| panic!("send {k}: {e}"));
    }
    let s = stats_until(&r.path, |s| s.driver.driver.tx_frames >= 100);
    let app = &s.apps[0];
    assert_eq!(app.counters.sent, 100, "{:?}", app.counters);
    assert!(s.driver.driver.tx_frames >= 100, "{:?}", s.driver);
    assert!(
        app.counters.send_misses >= 1,
        "the first line missed: {:?}",
        app.counters
    );
    assert!(s.lookup.hits[0] >= 99, "{:?}", s.lookup);
    assert!(s.misses.installed >= 1, "{:?}", s.misses);
    assert!(s.regions.pinned_pages >= 1, "{:?}", s.regions);

    // Bytes past the region's end, a region never registered, a region not readable, an
    // offset with no room for the destination: each refused in one line, nothing sent.
    let err = |e: ClientError| match e {
        ClientError::Refused(m) => m,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let e = err(sock
        .send_from(&region, id, (64 << 10) - 100, 1_000, to)
        .unwrap_err());
    assert!(e.contains("not inside a region registered readable"), "{e}");
    let e = err(sock
        .send_from(&region, RegionId(7), 8, 100, to)
        .unwrap_err());
    assert!(e.contains("not inside a region registered readable"), "{e}");
    let write_only = Region::create("recv", 16 << 10).unwrap();
    let wo = client
        .register(
            &write_only,
            Perms {
                read: false,
                write: true,
            },
        )
        .unwrap();
    let e = err(sock.send_from(&write_only, wo, 8, 100, to).unwrap_err());
    assert!(e.contains("not inside a region registered readable"), "{e}");
    let e = err(sock.send_from(&region, id, 4, 100, to).unwrap_err());
    assert!(e.contains("too small"), "{e}");
    let s = stats(&r.path);
    assert_eq!(s.apps[0].counters.sent, 100, "nothing more was sent");
    assert!(s.lookup.refused.iter().sum::<u64>() >= 3, "{:?}", s.lookup);

    // Unregistering drops the region's lines: a send from it now is refused, not sent
    // through a stale translation.
    client.unregister(id).unwrap();
    let e = err(sock.send_from(&region, id, 8, 100, to).unwrap_err());
    assert!(e.contains("not inside a region registered readable"), "{e}");
    assert!(stats(&r.path).misses.stale <= stats(&r.path).misses.queued);
}
