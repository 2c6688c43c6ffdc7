//! Counting wake-up events: how a party that went to sleep is woken.
//!
//! The seed's "device events" count: an event raised before the consumer blocks makes the
//! block return at once. An `eventfd` in counter mode has exactly that property, and it can
//! be passed to another process with `SCM_RIGHTS`.

use std::fmt;
use std::time::Duration;

/// Why a [`Signal::wait`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// At least one event was raised (possibly before the wait began).
    Woken,
    /// The timeout passed with no event.
    TimedOut,
}

/// A counting event shared by two parties.
pub trait Signal: Send + Sync + fmt::Debug {
    /// Raises one event. Never blocks. Errors are ignored by design: the only way a write to
    /// an eventfd fails is a counter that nobody drains, and then nobody is asleep on it.
    fn raise(&self);
    /// Blocks until an event has been raised since the last wait returned, or `timeout`
    /// passes (`None`: no limit). Consumes all pending events.
    fn wait(&self, timeout: Option<Duration>) -> WaitOutcome;

    /// A file descriptor that is readable while an event is pending, for callers that wait
    /// on several things at once with `poll` (`None` if the signal has none).
    #[cfg(not(loom))]
    fn fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        None
    }

    /// Consumes pending events without blocking (after a `poll` said one is there).
    fn clear(&self) {}
}

#[cfg(not(loom))]
pub use eventfd::EventFd;

#[cfg(not(loom))]
mod eventfd {
    use super::{Signal, WaitOutcome};
    use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};
    use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::time::{Duration, Instant};

    /// An `eventfd(2)` in counting mode, non-blocking.
    #[derive(Debug)]
    pub struct EventFd(OwnedFd);

    impl EventFd {
        /// Creates a new eventfd with a zero count.
        pub fn new() -> std::io::Result<Self> {
            let fd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
            Ok(Self(fd))
        }

        /// Adopts an fd received from a peer after checking it really is an eventfd (a pipe
        /// or socket in its place could block or flood us) and making it non-blocking.
        pub fn from_peer(fd: OwnedFd) -> Result<Self, String> {
            let link = std::fs::read_link(format!(
                "/proc/self/fd/{}",
                rustix::fd::AsRawFd::as_raw_fd(&fd)
            ))
            .map_err(|e| format!("cannot inspect the passed fd: {e}"))?;
            if link.as_os_str() != "anon_inode:[eventfd]" {
                return Err(format!(
                    "the peer passed {} where an eventfd was expected",
                    link.display()
                ));
            }
            let flags = rustix::fs::fcntl_getfl(&fd).map_err(|e| e.to_string())?;
            rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK)
                .map_err(|e| e.to_string())?;
            Ok(Self(fd))
        }

        /// The fd, to pass to a peer.
        pub fn fd(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }

        fn drain(&self) -> bool {
            let mut word = [0u8; 8];
            matches!(rustix::io::read(&self.0, &mut word), Ok(8))
        }
    }

    impl Signal for EventFd {
        fn fd(&self) -> Option<BorrowedFd<'_>> {
            Some(self.0.as_fd())
        }

        fn clear(&self) {
            self.drain();
        }

        fn raise(&self) {
            let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
        }

        fn wait(&self, timeout: Option<Duration>) -> WaitOutcome {
            let deadline = timeout.map(|t| Instant::now() + t);
            loop {
                if self.drain() {
                    return WaitOutcome::Woken;
                }
                let left = match deadline {
                    None => None,
                    Some(d) => match d.checked_duration_since(Instant::now()) {
                        Some(left) if !left.is_zero() => Some(left),
                        _ => return WaitOutcome::TimedOut,
                    },
                };
                let ts = left.map(|l| Timespec {
                    tv_sec: l.as_secs() as _,
                    tv_nsec: l.subsec_nanos() as _,
                });
                let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
                // EINTR and spurious readiness both just go round the loop again.
                let _ = rustix::event::poll(&mut fds, ts.as_ref());
            }
        }
    }
}
