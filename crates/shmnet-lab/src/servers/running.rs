//! A program the lab started (`nc`, `shmnet app`, `x11perf`), its output read line by line on
//! threads — so neither pipe can fill and stall it, and a line can be awaited with a time
//! limit — and killed and reaped if dropped before it was finished: no error path leaves a
//! process behind (one holding a namespace would keep it, and its veth pair, alive).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// Why a program failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum RunError {
    /// It could not be started or waited for.
    #[error("{what}: {source}")]
    Spawn {
        /// Which.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// It exited unsuccessfully.
    #[error("{what} exited with {status}: {said}")]
    Exited {
        /// Which.
        what: String,
        /// Its exit.
        status: std::process::ExitStatus,
        /// Its last lines on standard error, joined by ` | `.
        said: String,
    },
    /// It did not finish in time, and was killed.
    #[error("{what} did not finish within {} s", .limit.as_secs())]
    TimedOut {
        /// Which.
        what: String,
        /// The limit.
        limit: Duration,
    },
}

/// A started program.
pub(super) struct Running {
    what: String,
    child: Option<Child>,
    out: Receiver<String>,
    err: Receiver<String>,
}

/// Reads `r` line by line on a thread, each line sent on the returned channel, which
/// closes at the end of the stream.
fn lines(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Everything on `rx` until it closes, or until `patience` passes without a line.
fn drain(rx: &Receiver<String>, patience: Duration) -> Vec<String> {
    let mut v = Vec::new();
    loop {
        match rx.recv_timeout(patience) {
            Ok(l) => v.push(l),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return v,
        }
    }
}

impl Running {
    /// Starts `cmd` (its standard input as the caller set it), standard error captured, and
    /// standard output captured if `capture` (else discarded: `nc -l` writes what it
    /// receives there).
    pub fn start(cmd: &mut Command, what: &str, capture: bool) -> Result<Running, RunError> {
        let mut child = cmd
            .stdout(if capture {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| RunError::Spawn {
                what: what.into(),
                source,
            })?;
        let out = match child.stdout.take() {
            Some(o) => lines(o),
            None => channel().1,
        };
        let err = match child.stderr.take() {
            Some(e) => lines(e),
            None => channel().1,
        };
        Ok(Running {
            what: what.into(),
            child: Some(child),
            out,
            err,
        })
    }

    /// Its next line on standard output, if one comes within `patience`.
    pub fn next_line(&self, patience: Duration) -> Option<String> {
        self.out.recv_timeout(patience).ok()
    }

    /// Waits for it to exit within `limit` (killing it after); the rest of its standard
    /// output if it succeeded.
    pub fn finish(mut self, limit: Duration) -> Result<String, RunError> {
        let mut child = self.child.take().expect("finished once");
        let deadline = Instant::now() + limit;
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(RunError::TimedOut {
                        what: self.what.clone(),
                        limit,
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(source) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(RunError::Spawn {
                        what: self.what.clone(),
                        source,
                    });
                }
            }
        };
        // The pipes close with the process; a second is plenty for the readers to catch up.
        let out = drain(&self.out, Duration::from_secs(1)).join("\n");
        if status.success() {
            return Ok(out);
        }
        let err = drain(&self.err, Duration::from_secs(1));
        let tail: Vec<&str> = err.iter().rev().take(3).rev().map(String::as_str).collect();
        Err(RunError::Exited {
            what: self.what.clone(),
            status,
            said: tail.join(" | "),
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
