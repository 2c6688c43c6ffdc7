//! What the tests that put `shmnet serve` on a veth pair share: the server, running
//! commands within a time limit, test files. Included with `#[path]` beside
//! `common/netns.rs`.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::netns::Netns;

/// Whether this test runs as root.
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A running `shmnet serve`, its stdout collected.
pub struct Server {
    child: Child,
    stdout: Arc<Mutex<String>>,
}

impl Server {
    /// Starts it and waits for its banner (it then answers on the interface).
    pub fn start(ns: &Netns, extra: &[&str]) -> Server {
        let mut child = ns
            .cmd(env!("CARGO_BIN_EXE_shmnet"))
            .args([
                "serve",
                "--driver",
                "af_packet:v0",
                "--ip",
                "10.93.0.1/24",
                "--json",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start shmnet serve");
        let stdout = Arc::new(Mutex::new(String::new()));
        let out = Arc::clone(&stdout);
        let mut so = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            out.lock().unwrap().push_str(&s);
        });
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        // The inline structure's banner, or the server structure's.
        let started = |l: &str| l.contains("Ctrl-C to stop") || l.contains("control socket");
        while err.read_line(&mut line).unwrap_or(0) > 0 {
            if started(&line) {
                break;
            }
            line.clear();
        }
        assert!(started(&line), "shmnet serve did not start: {line}");
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        Server { child, stdout }
    }

    /// SIGTERM, and the final report it prints.
    pub fn stop(mut self) -> serde_json::Value {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let st = self.child.wait().expect("wait for shmnet serve");
        assert!(st.success(), "shmnet serve exited with {st}");
        std::thread::sleep(Duration::from_millis(100));
        let out = self.stdout.lock().unwrap().clone();
        let last = out.lines().last().unwrap_or_default().to_string();
        serde_json::from_str(&last).unwrap_or_else(|e| panic!("final report {last:?}: {e}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to completion within `limit`; panics with its output if it fails. Returns
/// its stdout.
pub fn run_ok(mut cmd: Command, what: &str, limit: Duration) -> String {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    wait_ok(child, what, limit)
}

/// What an ended `child` wrote to its piped stdout and stderr (empty where not piped).
fn output_of(child: &mut Child) -> (String, String) {
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    (out, err)
}

/// Waits for `child` within `limit`; panics with its output if it fails. Returns stdout.
pub fn wait_ok(mut child: Child, what: &str, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            let (out, err) = output_of(&mut child);
            assert!(st.success(), "{what} failed ({st}): {out} {err}");
            return out;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            // What it had said by then: where it stopped.
            let (out, err) = output_of(&mut child);
            let tail = |s: &str| s.lines().rev().take(8).collect::<Vec<_>>().join(" | ");
            panic!(
                "{what} did not finish within {limit:?}; its last lines (newest first): {} / stderr: {}",
                tail(&out),
                tail(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A file of `bytes` pseudo-random bytes in the temporary directory, named by `tag`.
pub fn random_file(bytes: usize, tag: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("shmnet-tcp-{}-{tag}", std::process::id()));
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..bytes)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng as u8
        })
        .collect();
    std::fs::write(&path, data).expect("write the test file");
    path
}

/// Runs `shmnet app send-file TO FILE` against the server at `sock` until it succeeds —
/// until `nc -l` listens, its connection is refused — for 10 s at most; returns its JSON
/// report.
pub fn send_file(to: &str, file: &std::path::Path, sock: &str, what: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
            .args(["app", "send-file", to])
            .arg(file)
            .args(["--socket", sock, "--json", "--connect-timeout", "2"])
            .output()
            .expect("run send-file");
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).expect("its report");
        }
        assert!(
            Instant::now() < deadline,
            "{what}: send-file failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends `file` to `dst:port` with Linux's `nc -N` in `ns`, again until it connects (a
/// listener that is not up yet refuses) for up to 20 s.
pub fn nc_send(ns: &Netns, file: &std::path::Path, dst: &str, port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut nc = ns.cmd("nc");
        nc.args(["-N", dst, &port.to_string()])
            .stdin(std::fs::File::open(file).unwrap())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if nc.status().expect("run nc").success() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: nc never connected");
        std::thread::sleep(Duration::from_millis(100));
    }
}
