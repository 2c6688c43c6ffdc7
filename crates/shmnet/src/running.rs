//! A child process that is stopped when its handle drops: asked first (SIGTERM, so that a
//! shmnet party removes its socket and a server its files), killed after 2 s.

use std::process::Child;
use std::time::{Duration, Instant};

/// A child stopped (SIGTERM, then SIGKILL after 2 s) when dropped.
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is our own child's, not yet
        // reaped (reaped just below), so it cannot name another process.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
