//! Two-process tests: a child maps the window from a passed fd.
//!
//! The child is this same test binary, re-executed with `--exact --ignored <entry>` and the
//! socket's fd number in `SHMNET_CHILD_FD`; the entries below return at once when run without
//! it (e.g. by `cargo test -- --ignored`).

#![cfg(not(loom))]

use rustix::fd::{AsRawFd, BorrowedFd, FromRawFd};
use shmnet_chan::handoff::{recv_window, send_window};
use shmnet_chan::{
    AllocPolicy, ChannelSpec, Consumer, Desc, PageSize, PoolSpec, Producer, RingSpec, ServerPools,
    WaitOutcome, Window,
};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const CHILD_FD: &str = "SHMNET_CHILD_FD";
const STALL: Duration = Duration::from_secs(30);

fn spec() -> ChannelSpec {
    ChannelSpec {
        // Ring 0: parent -> child; ring 1: child -> parent. Both hold every buffer at once,
        // so an enqueue can never find them full.
        rings: vec![
            RingSpec {
                capacity: 1024,
                wakeups: true,
            };
            2
        ],
        pools: PoolSpec {
            pools: 2,
            buffers_per_pool: 256,
            data_size: 2048,
            policy: AllocPolicy::Lifo,
            ..PoolSpec::default()
        },
        page: PageSize::Small,
    }
}

/// Starts this test binary as a child running `entry`, with `sock` inherited.
fn spawn_child(entry: &str, sock: &UnixStream, env: &[(&str, String)]) -> Child {
    let fd = sock.as_raw_fd();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        entry,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_FD, fd.to_string())
    // The child is a test harness too: keep its "test result" lines out of ours.
    .stdout(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl, which
    // is async-signal-safe; it clears close-on-exec on the one fd the child must inherit.
    unsafe {
        cmd.pre_exec(move || {
            let fd = BorrowedFd::borrow_raw(fd);
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            Ok(())
        });
    }
    cmd.spawn().expect("spawn child test process")
}

/// The socket a parent passed, if this process is a child.
fn child_socket() -> Option<UnixStream> {
    let fd: i32 = std::env::var(CHILD_FD).ok()?.parse().ok()?;
    // SAFETY: the parent passed this fd number for exactly this purpose; we take ownership of
    // it once.
    Some(unsafe { UnixStream::from_raw_fd(fd) })
}

/// Fills `out` with the bytes message `seq` carries in direction `salt`.
fn pattern(seq: u64, salt: u64, out: &mut [u8]) {
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let w = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64) ^ salt;
        chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
    }
}

fn msg_len(seq: u64) -> usize {
    64 * (1 + (seq % 32) as usize)
}

const TO_CHILD: u64 = 0xA5A5_0000_0000_0001;
const TO_PARENT: u64 = 0x5A5A_0000_0000_0002;

/// The parent's side of an exchange of `n` messages with an echo child: one thread allocates
/// (sleeping on the pools' waiters flag when all buffers are out), fills and sends; another
/// receives (sleeping on ring wake-ups), checks and frees.
fn exchange(server: &mut ServerPools, tx: &mut Producer, rx: &mut Consumer, n: u64) {
    let releaser = server.releaser();
    std::thread::scope(|s| {
        s.spawn(|| {
            let bufs = server.buffers().clone();
            let mut data = vec![0u8; 2048];
            for seq in 0..n {
                let b = server
                    .alloc_wait(Some(STALL))
                    .expect("no buffer came back within the stall limit");
                let len = msg_len(seq);
                pattern(seq, TO_CHILD, &mut data[..len]);
                bufs.write(b, 0, &data[..len]).unwrap();
                let d = Desc {
                    buf: b,
                    len: len as u32,
                    flags: 0,
                    aux: seq as u32,
                };
                assert!(tx.enqueue(d).is_ok(), "ring 0 cannot be full");
            }
        });
        s.spawn(|| {
            let bufs = releaser.buffers();
            let mut expect = vec![0u8; 2048];
            let mut got = vec![0u8; 2048];
            let mut batch = [Desc::default(); 32];
            let mut seq = 0u64;
            while seq < n {
                let k = rx.dequeue_burst(&mut batch);
                if k == 0 {
                    assert_eq!(
                        rx.wait(Some(STALL)),
                        WaitOutcome::Woken,
                        "the child stopped answering"
                    );
                    continue;
                }
                for d in &batch[..k] {
                    assert_eq!(d.aux, seq as u32, "message out of order");
                    let len = msg_len(seq);
                    assert_eq!(d.len as usize, len);
                    pattern(seq, TO_PARENT, &mut expect[..len]);
                    bufs.read(d.buf, 0, &mut got[..len]).unwrap();
                    assert!(got[..len] == expect[..len], "message {seq} corrupt");
                    releaser.release(d.buf);
                    seq += 1;
                }
            }
        });
    });
}

/// Child entry: echoes `SHMNET_N` messages from ring 0 to ring 1, checking and rewriting each.
#[test]
#[ignore = "child-process entry; run by the parent tests"]
fn child_echo() {
    let Some(sock) = child_socket() else {
        eprintln!("child_echo: not started by a parent test; nothing to do");
        return;
    };
    let n: u64 = std::env::var("SHMNET_N").unwrap().parse().unwrap();
    let win = recv_window(&sock).expect("open the passed window");
    let mut rx = win.consumer(0).unwrap();
    let mut tx = win.producer(1).unwrap();
    let bufs = win.buffers();
    let mut batch = [Desc::default(); 32];
    let mut data = vec![0u8; 2048];
    let mut expect = vec![0u8; 2048];
    let mut seq = 0u64;
    while seq < n {
        let k = rx.dequeue_burst(&mut batch);
        if k == 0 {
            assert_eq!(rx.wait(Some(STALL)), WaitOutcome::Woken, "parent stalled");
            continue;
        }
        for d in &batch[..k] {
            let len = msg_len(seq);
            assert_eq!((d.aux, d.len as usize), (seq as u32, len));
            pattern(seq, TO_CHILD, &mut expect[..len]);
            bufs.read(d.buf, 0, &mut data[..len]).unwrap();
            assert!(data[..len] == expect[..len], "message {seq} corrupt");
            pattern(seq, TO_PARENT, &mut data[..len]);
            bufs.write(d.buf, 0, &data[..len]).unwrap();
            seq += 1;
        }
        assert_eq!(tx.enqueue_burst(&batch[..k]), k, "ring 1 cannot be full");
    }
}

fn wait_child(mut child: Child) {
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
}

#[test]
fn million_buffers_each_way_between_processes() {
    const N: u64 = 1_000_000;
    let win = Window::create(&spec()).unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let child = spawn_child("child_echo", &theirs, &[("SHMNET_N", N.to_string())]);
    drop(theirs);
    send_window(&ours, &win).unwrap();
    let mut server = win.server_pools().unwrap();
    let mut tx = win.producer(0).unwrap();
    let mut rx = win.consumer(1).unwrap();
    let start = Instant::now();
    exchange(&mut server, &mut tx, &mut rx, N);
    wait_child(child);
    let stats = win.stats();
    eprintln!("{N} each way in {:?}: {stats:#?}", start.elapsed());
    let total = win.layout().pool_geometry().total();
    assert_eq!(win.buffers().free_count(), total, "every buffer back");
    for r in &stats.rings {
        assert_eq!((r.enqueued, r.dequeued), (N, N));
        assert_eq!((r.refused, r.index_errors), (0, 0));
        // Wake-up protocol in use: every publish either woke the consumer or was suppressed.
        assert!(r.wakeups_sent + r.wakeups_suppressed > 0);
        assert!(r.wakeups_sent <= r.sleeps);
    }
}

/// Child entry: a hostile peer. Writes random values into ring indices, wake words,
/// descriptors, buffer headers and pool control blocks for `SHMNET_MS` milliseconds.
#[test]
#[ignore = "child-process entry; run by the parent tests"]
fn child_hostile() {
    let Some(sock) = child_socket() else {
        eprintln!("child_hostile: not started by a parent test; nothing to do");
        return;
    };
    let ms: u64 = std::env::var("SHMNET_MS").unwrap().parse().unwrap();
    let win = recv_window(&sock).expect("open the passed window");
    let h = win.hostile();
    let bufs = win.buffers();
    let total = win.layout().pool_geometry().total();
    let mut rng = fastrand::Rng::with_seed(0xbad_c0de);
    let deadline = Instant::now() + Duration::from_millis(ms);
    // Sometimes plausible, sometimes absurd: the plausible values get past the cheap checks.
    let word = |rng: &mut fastrand::Rng| match rng.u8(..4) {
        0 => rng.u32(..),
        1 => rng.u32(..total + 8),
        2 => 0,
        _ => u32::MAX - rng.u32(..4),
    };
    while Instant::now() < deadline {
        for _ in 0..64 {
            match rng.u8(..7) {
                0 => {
                    let r = h.ring(Some(rng.usize(..2)));
                    r.scribble(word(&mut rng), word(&mut rng), word(&mut rng));
                }
                1 => h.ring(None).scribble(word(&mut rng), word(&mut rng), 1),
                2 | 3 => {
                    let lo = u64::from(word(&mut rng)) | (u64::from(word(&mut rng)) << 32);
                    h.slot(rng.usize(..2), rng.u32(..))
                        .scribble(lo, rng.u64(..));
                }
                4 | 5 => {
                    let w = [word(&mut rng), word(&mut rng), rng.u32(..), rng.u32(..)];
                    bufs.hdr(rng.u32(..total)).unwrap().scribble(w);
                }
                _ => h
                    .pool(rng.u32(..))
                    .scribble(rng.u32(..3), word(&mut rng), word(&mut rng)),
            }
        }
        std::thread::yield_now();
    }
}

#[test]
fn hostile_peer_is_refused_and_counted_and_the_honest_side_keeps_serving() {
    let win = Window::create(&spec()).unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut hostile = spawn_child("child_hostile", &theirs, &[("SHMNET_MS", "1500".into())]);
    drop(theirs);
    send_window(&ours, &win).unwrap();
    let mut server = win.server_pools().unwrap();
    let mut tx = win.producer(0).unwrap();
    let mut rx = win.consumer(1).unwrap();
    let bufs = win.buffers();
    let payload = [0x42u8; 64];
    let mut batch = [Desc::default(); 32];
    let mut served = 0u64;
    // Serve as usual while the peer scribbles: consume what it "sends", free it, send back.
    let status = loop {
        if let Some(status) = hostile.try_wait().unwrap() {
            break status;
        }
        let k = rx.dequeue_burst(&mut batch);
        for d in &batch[..k] {
            server.release(d.buf);
        }
        if let Some(b) = server.alloc() {
            bufs.write(b, 0, &payload).unwrap();
            if tx.enqueue(Desc::new(b, 64)).is_err() {
                server.release(b);
            }
        }
        server.drain_deferred(64);
        served += 1;
        if k == 0 {
            rx.wait(Some(Duration::from_millis(1)));
        }
    };
    assert!(status.success(), "hostile child crashed: {status}");
    let stats = win.stats();
    let refused: u64 = stats
        .rings
        .iter()
        .map(|r| r.refused + r.index_errors)
        .sum::<u64>()
        + stats.deferred.refused
        + stats.deferred.index_errors
        + stats.pools.bad_chains
        + stats.pools.bad_releases
        + stats.pools.pools.iter().map(|p| p.refused).sum::<u64>();
    eprintln!("served {served} rounds under attack; refusals {refused}: {stats:#?}");
    assert!(refused > 0, "the hostile peer's garbage was never noticed");

    // The peer is gone: take everything back, and serve an honest peer.
    tx.resync();
    rx.resync();
    let total = win.layout().pool_geometry().total();
    assert_eq!(server.reclaim_all(|_| false), total);
    let (ours, theirs) = UnixStream::pair().unwrap();
    let n = 20_000u64;
    let child = spawn_child("child_echo", &theirs, &[("SHMNET_N", n.to_string())]);
    drop(theirs);
    send_window(&ours, &win).unwrap();
    exchange(&mut server, &mut tx, &mut rx, n);
    wait_child(child);
    assert_eq!(win.buffers().free_count(), total);
}
