//! The processes of one benchmark cell: started from a typed [`PartySpec`] (written as JSON
//! to the standard input of the hidden `shmnet party` command, never composed into a command
//! line) with their output captured, watched for an early death, and reaped with `wait4` so
//! that each one's CPU time and context switches (its reaped children's included: `shmnet
//! serve` reaps its driver process) are known exactly.

use super::worker::WorkerSpec;
use shmnet_io::spec::ServeSpec;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one party of a cell runs: what the hidden `shmnet party` command reads, as one JSON
/// object, from its standard input (the first object only: a party may read more after it).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartySpec {
    /// `shmnet serve` (the server and ipc structures' server, with softnic as its wire).
    Serve(Box<ServeSpec>),
    /// Any other party: a kernel sender or receiver, a shmnet application, the inline thread.
    Worker(WorkerSpec),
    /// The residency lab's switch partner ([`crate::residency::switch`]): after its spec it
    /// reads the application's one-byte hand-offs from the same standard input.
    Switch(crate::residency::switch::SwitchSpec),
}

/// The hidden command that runs one [`PartySpec`] read from standard input.
pub const PARTY_COMMAND: &str = "party";

/// Why a party could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PartyError {
    /// The program could not be run.
    #[error("starting {name} ({}): {source}", exe.display())]
    Spawn {
        /// The party.
        name: &'static str,
        /// The program.
        exe: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The spec could not be written as JSON.
    #[error("writing {name}'s spec: {source}")]
    Spec {
        /// The party.
        name: &'static str,
        /// Why.
        source: serde_json::Error,
    },
}

/// A process of the cell.
pub(crate) struct Party {
    pub name: &'static str,
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

/// What a party left behind.
#[derive(Debug, Default)]
pub(crate) struct Finished {
    pub name: &'static str,
    /// User + system CPU seconds, its reaped descendants included.
    pub cpu_s: f64,
    /// Voluntary context switches (it blocked: slept on a queue, a socket, a timer).
    pub voluntary_switches: u64,
    /// Involuntary context switches (the scheduler took the CPU away).
    pub involuntary_switches: u64,
    pub stdout: String,
    pub stderr: String,
    /// Exit code, or `None` if killed by a signal (including by us, after its patience ran
    /// out).
    pub code: Option<i32>,
}

fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

impl Party {
    /// Starts `exe party` running `spec` (written to its standard input, which is then
    /// closed), with standard output and error captured.
    pub fn spawn(
        name: &'static str,
        exe: &std::path::Path,
        spec: &PartySpec,
    ) -> Result<Self, PartyError> {
        let text = serde_json::to_vec(spec).map_err(|source| PartyError::Spec { name, source })?;
        let mut child = Command::new(exe)
            .arg(PARTY_COMMAND)
            .stdin(Stdio::piped())
            // Errors, not backtraces: the report quotes the last lines of what a party said.
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| PartyError::Spawn {
                name,
                exe: exe.to_path_buf(),
                source,
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            // A spec is a few hundred bytes: the pipe holds it whole, so this never waits for
            // the child. If the child died already the write fails; its exit (and what it
            // said) is what the harness reports, as for any early death.
            let _ = stdin.write_all(&text);
        }
        let stdout = child.stdout.take().map(reader);
        let stderr = child.stderr.take().map(reader);
        Ok(Self {
            name,
            child,
            stdout,
            stderr,
        })
    }

    /// Asks it to stop in order (SIGTERM: `shmnet serve` then closes its windows and prints
    /// its final report); [`Party::finish`] reaps it.
    pub fn terminate(&self) {
        // SAFETY: signalling our own child, which has not been reaped yet (`finish` consumes
        // the party), so the pid is still its.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
    }

    /// Whether it has exited (without reaping it).
    pub fn has_exited(&self) -> bool {
        // SAFETY: `waitid` with WNOWAIT only inspects our own child, writing one siginfo.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r == 0 && info.si_pid() != 0
        }
    }

    /// Waits for it to exit (killing it after `patience`) and collects what it left.
    pub fn finish(self, patience: Duration) -> Finished {
        let pid = self.child.id() as libc::pid_t;
        let deadline = Instant::now() + patience;
        let mut killed = false;
        let (status, ru) = loop {
            let mut status = 0;
            // SAFETY: `wait4` on our own child, writing one status and one rusage.
            let (r, ru) = unsafe {
                let mut ru: libc::rusage = std::mem::zeroed();
                let r = libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru);
                (r, ru)
            };
            if r == pid {
                break (status, ru);
            }
            if r < 0 {
                break (0, ru);
            }
            if !killed && Instant::now() > deadline {
                // SAFETY: signalling our own child, which has not been reaped yet.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let join =
            |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        Finished {
            name: self.name,
            cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
            voluntary_switches: ru.ru_nvcsw as u64,
            involuntary_switches: ru.ru_nivcsw as u64,
            stdout: join(self.stdout),
            stderr: join(self.stderr),
            code: (libc::WIFEXITED(status) && !killed).then(|| libc::WEXITSTATUS(status)),
        }
    }
}

impl Finished {
    /// The JSON object it printed last, if any.
    pub fn json(&self) -> Option<serde_json::Value> {
        self.stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l.trim()).ok())
    }

    /// A one-line account of a failure: its exit and the last lines it wrote.
    pub fn failure(&self) -> super::CellError {
        let tail: Vec<&str> = self.stderr.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        super::CellError::PartyFailed {
            name: self.name,
            status: self
                .code
                .map_or("a signal".to_string(), |c| format!("code {c}")),
            said: tail.join(" | "),
        }
    }
}
