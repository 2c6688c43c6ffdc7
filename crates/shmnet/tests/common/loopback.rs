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

/// A README section is a test: its first `sh` block, read from the README, run line by
/// line as a user would paste them, with the control socket's path `sock` (and each
/// `(from, to)` of `also`) made this run's own: background jobs (`… &`) started and given
/// a moment (a server until its socket exists), `kill %N` stopping job N (exit status 0),
/// every other command exiting 0 within 10 minutes.
pub fn readme_section(heading: &str, sock: &str, also: &[(&str, String)]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let start = readme.find(heading).expect("the README's section");
    let body = &readme[start + heading.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let block = body
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("an sh block");
    let ours = std::env::temp_dir()
        .join(format!(
            "shmnet-readme-{}-{}.sock",
            std::process::id(),
            heading.len()
        ))
        .to_str()
        .unwrap()
        .to_string();
    let mut jobs: Vec<std::process::Child> = Vec::new();
    for line in block.lines() {
        let mut cmd = line.split(" #").next().unwrap().trim().replace(sock, &ours);
        for (from, to) in also {
            cmd = cmd.replace(from, to);
        }
        if cmd.is_empty() {
            continue;
        }
        if let Some(n) = cmd.strip_prefix("kill %") {
            let job = &mut jobs[n.parse::<usize>().expect("a job number") - 1];
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe { libc::kill(job.id() as i32, libc::SIGTERM) };
            let st = job.wait().expect("wait for the job");
            assert!(st.success(), "{cmd}: the job exited with {st}");
            continue;
        }
        if let Some(bg) = cmd.strip_suffix('&') {
            let child = Command::new("bash")
                .args(["-c", &format!("exec {bg}")])
                .current_dir(&root)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{cmd}: {e}"));
            jobs.push(child);
            let deadline = Instant::now() + Duration::from_secs(10);
            if bg.contains(" serve ") {
                while !Path::new(&ours).exists() {
                    assert!(Instant::now() < deadline, "{cmd}: no control socket");
                    std::thread::sleep(Duration::from_millis(20));
                }
            } else {
                std::thread::sleep(Duration::from_secs(1));
            }
            continue;
        }
        let child = Command::new("bash")
            .args(["-c", &cmd])
            .current_dir(&root)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        let pid = child.id();
        // Its output is read as it comes (a full pipe would stop it), on a thread of its own.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(child.wait_with_output());
        });
        let out = match finished.recv_timeout(Duration::from_secs(600)) {
            Ok(out) => out.expect("its output"),
            Err(_) => {
                // SAFETY: kill has no memory preconditions; the pid is our child's.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                panic!("{cmd}: still running after 10 minutes");
            }
        };
        assert!(
            out.status.success(),
            "{cmd}: exited with {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for mut j in jobs {
        let _ = j.kill();
        let _ = j.wait();
    }
    let _ = std::fs::remove_file(&ours);
}

/// Whether every program of `progs` is installed; if not, `test` is skipped (loudly, and
/// failed under `CI=true`) naming the missing ones.
pub fn all_installed(test: &str, progs: &[&str]) -> bool {
    let missing: Vec<_> = progs.iter().filter(|p| !installed(p)).collect();
    if !missing.is_empty() {
        shmnet_testkit::skip(
            test,
            &format!("{missing:?} not installed: scripts/setup installs them as root"),
        );
    }
    missing.is_empty()
}

/// Whether `prog` is installed (found on the PATH, or in /usr/sbin for root's daemons).
pub fn installed(prog: &str) -> bool {
    Command::new("sh")
        .args([
            "-c",
            &format!("command -v {prog} || test -x /usr/sbin/{prog}"),
        ])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
