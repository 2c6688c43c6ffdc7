//! A shared driver (`shmnet driver --listen`) among hostile and honest servers: clients that
//! say nothing, say nonsense or claim no family cost it nothing; a family goes to one server
//! at a time, and is free again when that server goes. (Its traffic, with Linux pinging an
//! IPv4 and an IPv6 server on one veth end, is crates/shmnet/tests/serve_cli.rs's.)

use shmnet_chan::PageSize;
use shmnet_io::control::{self, Request};
use shmnet_io::driver::Families;
use shmnet_io::driver::softnic::{Softnic, SoftnicConfig};
use shmnet_io::inline::ServeConfig;
use shmnet_io::server::{Placement, Server, ServerError, ServerOptions};
use shmnet_io::shared_driver::{Refusal, SharedDriver, SharedDriverEvent, SharedDriverStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("shmnet-shared-{}-{tag}.sock", std::process::id()))
}

fn options(tag: &str, families: Families) -> ServerOptions {
    ServerOptions {
        serve: ServeConfig {
            families,
            ipv6: families.ipv6.then_some(("fd00::1".parse().unwrap(), 64)),
            ..ServeConfig::default()
        },
        socket: path(tag),
        page: PageSize::Small,
        ipc: false,
        isolation: shmnet_io::spec::Isolation::Shared,
        on_miss: Default::default(),
        sync: Default::default(),
        placement: Placement::Process,
        limits: Default::default(),
    }
}

/// Attaches a server taking `families` to the driver at `listen`, and tells the driver to
/// start feeding it.
fn attach(tag: &str, families: Families, listen: &std::path::Path) -> Result<Server, ServerError> {
    let mut s = Server::attach_to_driver(&options(tag, families), listen, Duration::from_secs(10))?;
    s.start_driver();
    Ok(s)
}

/// Waits up to 10 s for `events` to hold one matching `want`.
fn wait_event(events: &Mutex<Vec<SharedDriverEvent>>, want: impl Fn(&SharedDriverEvent) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !events.lock().unwrap().iter().any(&want) {
        assert!(
            Instant::now() < deadline,
            "no such event in {:?}",
            events.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn hostile_clients_cost_nothing_and_each_family_goes_to_one_server_at_a_time() {
    let listen = path("drv");
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let shared = SharedDriver::listen(&listen, [2, 0, 0, 0, 0, 1])
        .expect("listen")
        .on_event(move |e| ev.lock().unwrap().push(e.clone()));
    let nic = Softnic::new(SoftnicConfig {
        count: Some(0),
        ..SoftnicConfig::default()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let report = Arc::new(Mutex::new(SharedDriverStats::default()));
    let driver = {
        let (stop, report) = (stop.clone(), report.clone());
        std::thread::spawn(move || shared.run(nic, &stop, &report))
    };

    // A client that connects and says nothing holds nothing up.
    let silent = control::connect(&listen).unwrap();
    // One that answers the driver's hello with nonsense is refused.
    let garbage = control::connect(&listen).unwrap();
    let hello: Request = control::recv_blocking(&garbage).unwrap();
    assert!(matches!(hello, Request::DriverHello { mac: Some(_), .. }));
    control::send_raw(&garbage, &[b"{\"not\":\"a welcome\"}"]).unwrap();
    wait_event(&events, |e| {
        matches!(
            e,
            SharedDriverEvent::Refused {
                why: Refusal::Handshake(_),
                ..
            }
        )
    });

    // An honest IPv4 server attaches beside them.
    let four = attach("four", Families::IPV4, &listen).expect("an IPv4 server attaches");
    wait_event(
        &events,
        |e| matches!(e, SharedDriverEvent::Attached { families, .. } if *families == Families::IPV4),
    );

    // A server that takes no family, and a second IPv4 server, are refused with what to do.
    let none = attach("none", Families::NONE, &listen);
    assert!(
        matches!(&none, Err(ServerError::DriverProcess(m)) if m.contains("takes no family")),
        "{:?}",
        none.err()
    );
    let again = attach("again", Families::BOTH, &listen);
    let msg = again.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("--family ipv6"), "{msg}");
    // IPv6 is free: a server takes it.
    let six = attach("six", Families::IPV6, &listen).expect("an IPv6 server attaches");

    // The silent client, hanging up at last, counts as a broken handshake.
    drop(silent);
    let handshakes = |e: &Vec<SharedDriverEvent>| {
        e.iter()
            .filter(|e| {
                matches!(
                    e,
                    SharedDriverEvent::Refused {
                        why: Refusal::Handshake(_),
                        ..
                    }
                )
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while handshakes(&events.lock().unwrap()) < 2 {
        assert!(Instant::now() < deadline, "{:?}", events.lock().unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }

    // The IPv4 server goes: IPv4 is free again, and a new server takes it.
    drop(four);
    wait_event(&events, |e| matches!(e, SharedDriverEvent::Detached { .. }));
    let four = attach("four2", Families::IPV4, &listen).expect("IPv4 is free again");

    stop.store(true, Ordering::Relaxed);
    let last = driver.join().unwrap().expect("the driver stops cleanly");
    drop((four, six, garbage));
    assert_eq!(last.attached, 3, "{last:?}");
    assert_eq!(
        last.refused, 4,
        "garbage, silence, no family, family taken: {last:?}"
    );
    assert_eq!(last.detached as usize + last.serving.len(), 3, "{last:?}");
    assert!(!listen.exists() || std::fs::remove_file(&listen).is_ok());
}
