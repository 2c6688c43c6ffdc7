//! What the tests that run programs on a loopback server share: `shmnet serve --driver
//! loopback` (no root, no interface), the sockets library, programs under `shmnet run`.
//! Included with `#[path]`.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `shmnet` binary under test.
pub const SHMNET: &str = env!("CARGO_BIN_EXE_shmnet");

/// The library `shmnet run` loads: beside `shmnet`.
pub fn library() -> PathBuf {
    let lib = Path::new(SHMNET)
        .parent()
        .expect("shmnet's directory")
        .join("libshmnet_preload.so");
    assert!(
        lib.exists(),
        "{} is missing: build it with `cargo build -p shmnet-preload` (and --release for release tests); scripts/test does",
        lib.display()
    );
    lib
}

/// `shmnet run --server SOCK -- prog`, outside the namespace (the program reaches the
/// server through its control socket; its kernel sockets are this host's).
pub fn under_shmnet(sock: &str, prog: &str) -> Command {
    let mut c = Command::new(SHMNET);
    c.args(["run", "--server", sock, "--", prog]);
    c
}

/// Starts `cmd` with its standard output piped and waits for its first line (a program
/// says it is ready); returns it and the line.
pub fn started(mut cmd: Command, what: &str) -> (std::process::Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap_or_else(|e| panic!("{what}'s banner: {e}"));
    (child, line)
}

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback server ([`loopback_server`]): stopped, and its socket file removed, when
/// dropped.
pub struct LoopbackServer {
    _child: Killed,
    sock: String,
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.sock);
    }
}

/// `shmnet serve --driver loopback` on 10.99.0.1 (and `extra` options), its control
/// socket once it exists.
pub fn loopback_server(tag: &str, extra: &[&str]) -> (LoopbackServer, String) {
    let sock = std::env::temp_dir()
        .join(format!("shmnet-pre-{}-{tag}.sock", std::process::id()))
        .to_str()
        .unwrap()
        .to_string();
    let child = Command::new(SHMNET)
        .args(["serve", "--structure", "server", "--driver", "loopback"])
        .args(["--ip", "10.99.0.1/24", "--socket", &sock])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start shmnet serve --driver loopback");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !Path::new(&sock).exists() {
        assert!(
            Instant::now() < deadline,
            "the loopback server never made {sock}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let server = LoopbackServer {
        _child: Killed(child),
        sock: sock.clone(),
    };
    (server, sock)
}
