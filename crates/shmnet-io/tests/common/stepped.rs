//! A protocol server in the test's own process over a softnic, stepped on a thread until
//! the guard drops; and a raw application that speaks the control protocol by hand.

use rustix::fd::OwnedFd;
use shmnet_chan::handoff::recv_window;
use shmnet_chan::{PageSize, Window};
use shmnet_io::control::{self, PROTOCOL_VERSION, Request, Response};
use shmnet_io::driver::softnic::{Softnic, SoftnicConfig};
use shmnet_io::inline::ServeConfig;
use shmnet_io::server::{Placement, Server, ServerOptions, ServerStats};
use shmnet_io::spec::{Isolation, OnMiss};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The server's address in [`loopback`] servers: applications reach each other at it.
pub const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// A running server; stops when dropped.
pub struct Stepped {
    /// Its control socket.
    pub path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Stepped {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Stepped {
    /// Starts a server on softnic `nic` with the options `options` makes for its socket
    /// path (`tag` names it), sleeping at most `idle` when it finds nothing to do.
    pub fn start(
        tag: &str,
        nic: SoftnicConfig,
        idle: Duration,
        options: impl FnOnce(PathBuf) -> ServerOptions,
    ) -> Self {
        let path =
            std::env::temp_dir().join(format!("shmnet-test-{}-{tag}.sock", std::process::id()));
        let nic = Softnic::new(nic).unwrap();
        let mut server = Server::start(nic, &options(path.clone())).expect("start the server");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                if server.step() == 0 {
                    server.idle(idle);
                }
            }
        });
        Self {
            path,
            stop,
            thread: Some(thread),
        }
    }

    /// Its counters now.
    pub fn stats(&self) -> ServerStats {
        stats(&self.path)
    }
}

/// The counters of the server at `path`.
pub fn stats(path: &Path) -> ServerStats {
    shmnet_io::server::query_stats(path).expect("stats answered")
}

/// Waits (at most 10 s) until `done` holds for the server's stats.
pub fn stats_until(path: &Path, done: impl Fn(&ServerStats) -> bool) -> ServerStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = stats(path);
        if done(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A server over a loopback softnic at [`US`] (every frame it sends comes back), isolating
/// its applications as `isolation` says, with `on_miss`.
pub fn loopback(tag: &str, isolation: Isolation, on_miss: OnMiss, idle: Duration) -> Stepped {
    loopback_serving(
        tag,
        isolation,
        on_miss,
        idle,
        ServeConfig {
            rx_queue_limit: 1024,
            ..ServeConfig::default()
        },
    )
}

/// [`loopback`] with the stack's settings `serve` (its address and `loopback` are set here).
pub fn loopback_serving(
    tag: &str,
    isolation: Isolation,
    on_miss: OnMiss,
    idle: Duration,
    serve: ServeConfig,
) -> Stepped {
    Stepped::start(
        tag,
        SoftnicConfig {
            loopback: true,
            ..SoftnicConfig::default()
        },
        idle,
        move |socket| ServerOptions {
            serve: ServeConfig {
                ip: US,
                loopback: true,
                ..serve
            },
            socket,
            page: PageSize::Small,
            ipc: false,
            isolation,
            on_miss,
            sync: Default::default(),
            placement: Placement::Polled,
            limits: Default::default(),
        },
    )
}

/// A raw application of an isolated server: Hello, its window, one bound socket (its
/// number and port). The caller writes its rings by hand.
pub fn raw_attach(path: &Path) -> (OwnedFd, Window, u16, u16) {
    let (ctl, _) = control::connect_checked(path).expect("connect");
    let call = |req: &Request| {
        control::send(&ctl, req).unwrap();
        control::recv_blocking::<Response>(rustix::fd::AsFd::as_fd(&ctl)).unwrap()
    };
    match call(&Request::Hello {
        version: PROTOCOL_VERSION,
    }) {
        Response::Welcome { isolated: true, .. } => {}
        other => panic!("expected an isolated Welcome, got {other:?}"),
    }
    let win = recv_window(&ctl).expect("its window");
    let (socket, port) = match call(&Request::Bind { port: 0 }) {
        Response::Bound { socket, port } => (socket as u16, port),
        other => panic!("{other:?}"),
    };
    (ctl, win, socket, port)
}

/// The structures the TCP tests run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `server`, `--isolation regions`.
    Regions,
    /// `server`, `--isolation shared`.
    Shared,
    /// `ipc` (its driver on a thread).
    Ipc,
}

/// A loopback server at [`US`] of structure `kind`, sleeping at most `idle` when idle.
pub fn tcp_loopback(tag: &str, kind: Kind, idle: Duration) -> Stepped {
    let (isolation, ipc) = match kind {
        Kind::Regions => (Isolation::Regions, false),
        Kind::Shared => (Isolation::Shared, false),
        Kind::Ipc => (Isolation::Shared, true),
    };
    Stepped::start(
        &format!("{tag}-{kind:?}"),
        SoftnicConfig {
            loopback: true,
            ..SoftnicConfig::default()
        },
        idle,
        |socket| ServerOptions {
            serve: ServeConfig {
                ip: US,
                loopback: true,
                ..ServeConfig::default()
            },
            socket,
            page: PageSize::Small,
            ipc,
            isolation,
            on_miss: OnMiss::Buffer,
            sync: Default::default(),
            placement: if ipc {
                Placement::Thread
            } else {
                Placement::Polled
            },
            limits: Default::default(),
        },
    )
}

/// Byte `i` of the test stream named `seed`.
pub fn stream_byte(seed: u64, i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 7 ^ seed) as u8
}

/// Reads the 4-byte little-endian number a connector sends first on `s` (within 10 s a
/// read; the end of the stream before it is a failure).
pub fn read_number(s: &mut shmnet_io::client::TcpStream) -> u32 {
    let mut b = [0u8; 4];
    let mut at = 0;
    while at < 4 {
        let n = s
            .read_timeout(&mut b[at..], Duration::from_secs(10))
            .unwrap()
            .expect("the connector's number");
        assert!(n > 0, "the number before the end");
        at += n;
    }
    u32::from_le_bytes(b)
}

/// A thread that attaches to the server at `path`, binds a UDP socket and runs `read` with
/// the two; returns the socket's port (once bound) and the thread.
pub fn udp_reader<T: Send + 'static>(
    path: &Path,
    read: impl FnOnce(&shmnet_io::client::Client, &shmnet_io::client::UdpSocket) -> T + Send + 'static,
) -> (u16, std::thread::JoinHandle<T>) {
    let path = path.to_path_buf();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let client = shmnet_io::client::Client::connect(&path).expect("attach the reader");
        let sock = client.udp_bind(0).expect("bind the reader");
        port_tx.send(sock.port()).unwrap();
        read(&client, &sock)
    });
    (port_rx.recv().expect("the reader's port"), thread)
}
