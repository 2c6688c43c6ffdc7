//! A running `shmnet` party with its output collected, for the tests that start shmnet
//! commands and watch what they say. Included with `#[path]`.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a party may take to start or to stop (only a hang reaches it).
const LIMIT: Duration = Duration::from_secs(60);

/// A running `shmnet` with its output collected.
pub struct Party {
    pub child: Child,
    pub stdout: Arc<Mutex<String>>,
    pub stderr: Arc<Mutex<String>>,
}

fn collect(r: impl Read + Send + 'static, into: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
}

impl Party {
    pub fn spawn(cmd: &mut Command) -> Party {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start shmnet");
        let (stdout, stderr) = (Arc::default(), Arc::default());
        collect(child.stdout.take().unwrap(), Arc::clone(&stdout));
        collect(child.stderr.take().unwrap(), Arc::clone(&stderr));
        Party {
            child,
            stdout,
            stderr,
        }
    }

    pub fn shmnet(args: &[&str], runtime: &std::path::Path) -> Party {
        Party::spawn(
            Command::new(env!("CARGO_BIN_EXE_shmnet"))
                .args(args)
                .env("SHMNET_RUNTIME_DIR", runtime),
        )
    }

    pub fn out(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    pub fn err(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until stderr has a line containing `what` (the party says it is up).
    pub fn wait_for(&mut self, what: &str) {
        let deadline = Instant::now() + LIMIT;
        while !self.err().contains(what) {
            if let Ok(Some(s)) = self.child.try_wait() {
                panic!(
                    "exited ({s}) before saying {what:?}:\n{}{}",
                    self.out(),
                    self.err()
                );
            }
            assert!(
                Instant::now() < deadline,
                "never said {what:?}:\n{}",
                self.err()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit (and the last of the output).
    pub fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(50));
                return s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("did not exit in {LIMIT:?}:\n{}{}", self.out(), self.err());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: a signal to a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// User plus system CPU time so far, from /proc/PID/stat (all threads).
    pub fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let f: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        // After `(comm)`: state is field 3, utime 14 and stime 15 (1-based).
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Duration::from_secs_f64(ticks as f64 / hz as f64)
    }
}

impl Drop for Party {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
