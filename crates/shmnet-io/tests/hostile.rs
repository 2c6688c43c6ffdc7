//! The hostile-application battery of issue 15 (docs/isolation.md), under the server's
//! default `--isolation regions`.
//!
//! Two honest applications exchange canary-marked datagrams through the server while a
//! hostile one — a process of its own, speaking the control protocol and writing its rings
//! by hand — registers 10,000 regions, posts descriptors naming regions it does not have,
//! offsets past its regions' ends, lengths that overflow, the same buffer twice, sends that
//! name pool buffers, then scribbles random bytes over every byte of its window, scanning its
//! whole address space for the canary all along, until it is killed with SIGKILL mid-stream.
//!
//! Checked: the honest applications lose nothing and every byte arrives intact; the hostile
//! one never finds a canary in its memory; every refusal is counted in the server's stats;
//! and when it dies, its regions and pins are released and every pool buffer is free again.
//!
//! The hostile process is this test binary run again with [`HOSTILE_ENV`] set
//! ([`hostile_child`], an ignored test, is its entry). It never
//! holds the canary: it is given the canary masked with a key and compares masked bytes,
//! so finding the pattern in its own memory can only mean the server let it in.

mod common;

use common::stepped::{self, US, raw_attach, stats};
use shmnet_chan::handles::Region;
use shmnet_io::client::Client;
use shmnet_io::control::{self, Request, Response};
use shmnet_io::windows;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// Set (to the server's socket) in the hostile child's environment.
const HOSTILE_ENV: &str = "SHMNET_TEST_HOSTILE_SOCKET";
/// The canary XOR the key, and the key, in hex (the child never sees the canary itself).
const MASKED_ENV: &str = "SHMNET_TEST_HOSTILE_MASKED";
const KEY_ENV: &str = "SHMNET_TEST_HOSTILE_KEY";
/// Bytes of each honest datagram: an 8-byte sequence number, then the canary, repeated.
const DATAGRAM: usize = 8 + 16 * 15;

/// A loopback server with the defaults a user gets (`--isolation regions`, buffer-on-miss).
fn start() -> stepped::Stepped {
    stepped::loopback(
        "hostile",
        Default::default(),
        Default::default(),
        Duration::from_millis(5),
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// 16 bytes no binary holds: from the kernel's random source.
fn random16() -> [u8; 16] {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("read /dev/urandom");
    b
}

/// Honest datagram `seq`: its number, then the canary 15 times.
fn honest_datagram(seq: u64, canary: &[u8; 16]) -> [u8; DATAGRAM] {
    let mut d = [0u8; DATAGRAM];
    d[..8].copy_from_slice(&seq.to_le_bytes());
    for c in d[8..].chunks_mut(16) {
        c.copy_from_slice(canary);
    }
    d
}

#[test]
fn a_hostile_application_sees_nothing_breaks_nothing_and_leaves_nothing() {
    let r = start();
    let canary = random16();
    let key = random16();
    let masked: Vec<u8> = canary.iter().zip(&key).map(|(c, k)| c ^ k).collect();

    // The honest pair: B receives and checks every datagram A sends, in its own thread.
    let sent = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let stop_sending = Arc::new(AtomicBool::new(false));
    let (port_tx, port_rx) = mpsc::channel();
    let b = {
        let (path, received, sent, stop) = (
            r.path.clone(),
            received.clone(),
            sent.clone(),
            stop_sending.clone(),
        );
        std::thread::spawn(move || {
            let client = Client::connect(&path).expect("attach b");
            let sock = client.udp_bind(0).unwrap();
            port_tx.send(sock.port()).unwrap();
            let mut buf = [0u8; 2048];
            let mut next = 0u64;
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if stop.load(Ordering::Acquire) && next == sent.load(Ordering::Acquire) {
                    break;
                }
                assert!(Instant::now() < deadline, "b: {next} received");
                let Ok((n, _)) = sock.recv_timeout(&mut buf, Duration::from_millis(50)) else {
                    continue;
                };
                assert_eq!(n, DATAGRAM, "datagram {next}");
                assert!(
                    buf[..n] == honest_datagram(next, &canary),
                    "datagram {next} arrived whole and in order"
                );
                next += 1;
                received.store(next, Ordering::Release);
            }
            client.region_errors()
        })
    };
    let port_b = port_rx.recv().unwrap();
    let a = {
        let (path, received, sent, stop) = (
            r.path.clone(),
            received.clone(),
            sent.clone(),
            stop_sending.clone(),
        );
        std::thread::spawn(move || {
            let client = Client::connect(&path).expect("attach a");
            let sock = client.udp_bind(0).unwrap();
            let to = SocketAddrV4::new(US, port_b);
            let mut seq = 0u64;
            while !stop.load(Ordering::Acquire) {
                // A window of 64, so B's queue never overflows: nothing may be lost.
                if seq - received.load(Ordering::Acquire) >= 64 {
                    std::thread::yield_now();
                    continue;
                }
                sock.send_to(&honest_datagram(seq, &canary), to).unwrap();
                seq += 1;
                sent.store(seq, Ordering::Release);
            }
            client.region_errors()
        })
    };
    while received.load(Ordering::Acquire) < 1_000 {
        std::thread::sleep(Duration::from_millis(1));
    }

    // The hostile process, mid-stream.
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "hostile_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOSTILE_ENV, &r.path)
        .env(MASKED_ENV, hex(&masked))
        .env(KEY_ENV, hex(&key))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the hostile child");
    let (line_tx, line_rx) = mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let wait_line = |prefix: &str, lines: &mut Vec<String>| -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let l = line_rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("the hostile child never said {prefix:?}: {lines:?}"));
            lines.push(l.clone());
            // (libtest may print its own prefix on the child's first line.)
            if let Some(at) = l.find(prefix) {
                return l[at + prefix.len()..].to_string();
            }
        }
    };
    let port_h: u16 = wait_line("hostile port ", &mut lines).parse().unwrap();
    wait_line("hostile junk posted", &mut lines);
    let hostile_pid = child.id() as i32;
    // Give its junk posts datagrams to refuse (plain bytes: no canary in them) — a post is
    // looked at only when a datagram needs it — and let it scribble over them only once
    // the server has refused them (it waits for our word on its stdin).
    {
        let c = Client::connect(&r.path).expect("attach c");
        let s = c.udp_bind(0).unwrap();
        for k in 0..64u8 {
            s.send_to(&[k; 100], SocketAddrV4::new(US, port_h)).unwrap();
        }
        stepped::stats_until(&r.path, |st| {
            st.apps
                .iter()
                .any(|a| a.pid == hostile_pid && a.counters.bad_posts >= 3)
        });
    }
    {
        use std::io::Write;
        let mut go = child.stdin.take().expect("the hostile child's stdin");
        writeln!(go, "scribble").expect("tell the hostile child to go on");
    }
    wait_line("hostile scribbling", &mut lines);
    // Two whole scans of its memory while the canaries flow.
    let at_scans = received.load(Ordering::Acquire);
    wait_line("hostile scan 2:", &mut lines);
    assert!(
        received.load(Ordering::Acquire) > at_scans,
        "the honest pair kept going while the hostile one scribbled"
    );
    let during = stats(&r.path);
    let h = during
        .apps
        .iter()
        .find(|a| a.pid == hostile_pid)
        .expect("the hostile application is attached")
        .clone();
    eprintln!("hostile counters: {:?}", h.counters);
    eprintln!("regions {:?} lookup {:?}", during.regions, during.lookup);

    // Killed mid-stream.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    // Its last words (every scan line it printed).
    while let Ok(l) = line_rx.recv_timeout(Duration::from_millis(200)) {
        lines.push(l);
    }
    let scans: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("hostile scan"))
        .collect();
    assert!(scans.len() >= 2, "{lines:?}");
    for s in &scans {
        assert!(
            s.ends_with(" 0 canaries"),
            "the hostile child found a canary: {s}"
        );
    }

    // Every refusal counted.
    let cap = shmnet_chan::handles::TableLimits::default().max_regions_per_app as u64;
    assert!(
        during.regions.refused >= 10_000 - cap,
        "registrations past the cap refused: {:?}",
        during.regions
    );
    assert!(
        h.counters.bad_sends >= 6,
        "junk sends refused: {:?}",
        h.counters
    );
    // An unknown region, an offset at the end, a capacity too small. (A post whose
    // capacity runs past the region's end is used: the server writes only the datagram's
    // bytes, which lie inside.)
    assert!(
        h.counters.bad_posts >= 3,
        "junk posts refused: {:?}",
        h.counters
    );
    assert!(
        during.lookup.refused.iter().sum::<u64>() >= 6,
        "{:?}",
        during.lookup
    );
    assert_eq!(h.holding, 0, "an isolated application holds no pool buffer");

    // The honest pair finishes: nothing lost, every byte right.
    stop_sending.store(true, Ordering::Release);
    let a_errors = a.join().expect("a");
    let b_errors = b.join().expect("b");
    assert_eq!((a_errors, b_errors), ((0, 0), (0, 0)));
    let n = sent.load(Ordering::Acquire);
    assert_eq!(
        received.load(Ordering::Acquire),
        n,
        "every datagram sent arrived"
    );
    eprintln!("honest datagrams: {n}, hostile lines: {}", lines.len());

    // Nothing of the hostile one is left: its regions and pins, and no pool buffer is held.
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let s = stats(&r.path);
        if s.apps.iter().all(|a| a.pid != hostile_pid) || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        after.apps.iter().all(|a| a.pid != hostile_pid),
        "it was detached"
    );
    let honest_bytes: u64 = after.apps.iter().map(|a| a.registered_bytes).sum();
    let honest_regions: u64 = after.apps.iter().map(|a| a.regions).sum();
    assert_eq!(
        (after.regions.regions, after.regions.bytes),
        (honest_regions, honest_bytes),
        "only the honest applications' regions remain: {:?}",
        after.regions
    );
    assert!(
        after.regions.pinned_pages * 4096 <= honest_bytes,
        "only honest pages stay pinned: {:?}",
        after.regions
    );
    let pools = &after.data_window.as_ref().expect("a data window").pools;
    for p in &pools.pools {
        assert_eq!(
            p.free,
            Some(p.buffers),
            "every pool buffer is free: {pools:?}"
        );
    }
}

/// The hostile child's entry (see the module docs).
#[test]
#[ignore = "child-process entry; run by a_hostile_application_sees_nothing_breaks_nothing_and_leaves_nothing"]
fn hostile_child() {
    let path = std::env::var_os(HOSTILE_ENV).expect("run by the parent test, which sets it");
    let masked = unhex(&std::env::var(MASKED_ENV).unwrap());
    let key = unhex(&std::env::var(KEY_ENV).unwrap());
    let say = |s: String| {
        use std::io::Write;
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{s}");
        let _ = o.flush();
    };
    let (ctl, win, socket, port) = raw_attach(Path::new(&path));
    say(format!("hostile port {port}"));
    // 10,000 registrations of one 64 KiB region: the cap's worth are accepted.
    let region = Region::create("hostile", 64 << 10).unwrap();
    let mut refused = 0;
    for _ in 0..10_000 {
        control::send_with_fd(
            &ctl,
            &Request::Register {
                read: true,
                write: true,
            },
            region.fd(),
        )
        .unwrap();
        if let Response::Error(_) =
            control::recv_blocking::<Response>(rustix::fd::AsFd::as_fd(&ctl)).unwrap()
        {
            refused += 1;
        }
    }
    say(format!("hostile registered, {refused} refused"));

    // Junk sends: a region it does not have, past its region's end, an overflowing length,
    // a length past the largest handle, a chain index (pool buffer 0) instead of a handle,
    // and one right (its own bytes, to itself).
    let mut req = win.producer(windows::REQ).unwrap();
    let d = |region: u16, off: u64, len: u32| {
        windows::handle_desc(region, off, len, socket).expect("fits 44 bits")
    };
    let junk_sends = [
        d(5_000, 8, 100),
        d(0, 64 << 10, 100),
        d(0, (64 << 10) - 50, 100),
        d(0, 8, u32::MAX),
        d(0, 8, 1 << 20),
        shmnet_chan::Desc {
            buf: 0,
            len: 100,
            flags: 0,
            aux: u32::from(socket),
        },
    ];
    for j in junk_sends {
        let _ = req.enqueue(j);
    }
    // Junk posts: an unknown region, past the end, too small, the same buffer twice.
    let mut post = win.producer(windows::POST_SMALL).unwrap();
    let p = |region: u16, off: u64, cap: u32| windows::post_desc(region, off, cap).unwrap();
    for j in [
        p(5_000, 0, 2048),
        p(0, 64 << 10, 2048),
        p(0, (64 << 10) - 1024, 2048),
        p(0, 0, 16),
        p(1, 0, 2048),
        p(1, 0, 2048),
    ] {
        let _ = post.enqueue(j);
    }
    say("hostile junk posted".into());
    // Until the parent has seen the server refuse the junk posts (or has gone: end of file).
    let mut word = String::new();
    let _ = std::io::stdin().read_line(&mut word);

    // Scribble every byte of the window, again and again, and scan all memory it can read.
    say("hostile scribbling".into());
    let range = win.mapped_at();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for scan in 1.. {
        for _ in 0..20 {
            let mut at = range.start;
            while at + 8 <= range.end {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // SAFETY: inside this process's own mapping of its window (guard pages lie
                // outside `mapped_at`); a deliberate write of garbage — the whole point.
                unsafe { std::ptr::write_volatile(at as *mut u64, x) };
                at += 8;
            }
            // Ring an eventfd or two by the same means: the server must shrug.
            std::thread::sleep(Duration::from_millis(5));
        }
        let found = scan_for_canary(&masked, &key);
        say(format!("hostile scan {scan}: {found} canaries"));
    }
}

/// Counts places in this process's writable or shared memory holding the canary (given as
/// `masked` = canary XOR `key`, compared masked, so the canary itself is never in memory).
/// Read-only file mappings are skipped: nothing can arrive in them.
fn scan_for_canary(masked: &[u8], key: &[u8]) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut mem = std::fs::File::open("/proc/self/mem").unwrap();
    let mut found = 0;
    let mut chunk = vec![0u8; 1 << 20];
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let name = line.split_whitespace().nth(5).unwrap_or("");
        let p = perms.as_bytes();
        if p[0] != b'r' || name.starts_with("[v") || (p[1] != b'w' && p[3] != b's') {
            continue;
        }
        let (lo, hi) = range.split_once('-').unwrap();
        let (lo, hi) = (
            u64::from_str_radix(lo, 16).unwrap(),
            u64::from_str_radix(hi, 16).unwrap(),
        );
        let mut at = lo;
        while at < hi {
            let n = ((hi - at) as usize).min(chunk.len());
            if mem.seek(SeekFrom::Start(at)).is_err() || mem.read_exact(&mut chunk[..n]).is_err() {
                break;
            }
            found += count_masked(&chunk[..n], masked, key);
            // Chunks overlap by 15 bytes, so a canary across a boundary is seen.
            at += if n == chunk.len() {
                n as u64 - 15
            } else {
                n as u64
            };
        }
    }
    found
}

fn count_masked(hay: &[u8], masked: &[u8], key: &[u8]) -> usize {
    let first = masked[0] ^ key[0];
    let mut n = 0;
    let mut i = 0;
    while let Some(k) = hay[i..].iter().position(|&b| b == first) {
        let at = i + k;
        if at + 16 > hay.len() {
            break;
        }
        if hay[at..at + 16]
            .iter()
            .zip(masked.iter().zip(key))
            .all(|(&h, (&m, &k))| h ^ k == m)
        {
            n += 1;
        }
        i = at + 1;
    }
    n
}
