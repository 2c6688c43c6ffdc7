//! The driver's one wake-up descriptor.
//!
//! An epoll set holding the current packet socket (while the device is open) and a timer
//! (armed while the device is down, for the next reopen attempt). Callers see only the epoll
//! descriptor: it is readable when the socket is (frames, or an error on the device) or the
//! timer expired, and it stays the same descriptor across reopens, so a caller may register
//! it once in its own epoll set or poll it every time.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use rustix::event::epoll;

/// See the [module docs](self).
pub(crate) struct Wake {
    ep: OwnedFd,
    timer: OwnedFd,
}

impl Wake {
    /// A fresh epoll set with the (disarmed) timer in it.
    pub(crate) fn new() -> io::Result<Wake> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        // SAFETY: plain system call with constant arguments.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor owned from here on.
        let timer = unsafe { OwnedFd::from_raw_fd(raw) };
        epoll::add(
            &ep,
            &timer,
            epoll::EventData::new_u64(0),
            epoll::EventFlags::IN,
        )?;
        Ok(Wake { ep, timer })
    }

    /// The descriptor callers sleep on.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.ep.as_fd()
    }

    /// Adds the packet socket: readable frames and errors on it wake the caller.
    pub(crate) fn watch(&self, sock: BorrowedFd<'_>) -> io::Result<()> {
        epoll::add(
            &self.ep,
            sock,
            epoll::EventData::new_u64(1),
            epoll::EventFlags::IN,
        )?;
        Ok(())
    }

    /// Removes the packet socket (before it is closed).
    pub(crate) fn unwatch(&self, sock: BorrowedFd<'_>) {
        // Closing the socket would remove it too; failing here changes nothing.
        let _ = epoll::delete(&self.ep, sock);
    }

    /// Makes the descriptor readable at `at` on `CLOCK_MONOTONIC` (see [`super::link::now`]),
    /// or disarms the timer (`None`). Clears an expiry not yet consumed.
    pub(crate) fn arm(&self, at: Option<Duration>) {
        self.clear();
        let at = at.map_or(
            libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            |d| libc::timespec {
                // A zero value would disarm: an expiry already due is made 1 ns.
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(d.subsec_nanos().max(u32::from(d.as_secs() == 0))),
            },
        );
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: at,
        };
        // SAFETY: `spec` is a live `itimerspec`; the kernel only reads it (no old value).
        unsafe {
            libc::timerfd_settime(
                self.timer.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
    }

    /// Consumes an expiry, so the descriptor is no longer readable because of it.
    fn clear(&self) {
        let mut n = [0u8; 8];
        // SAFETY: reads at most 8 bytes into the live 8-byte buffer; the timer is non-blocking.
        unsafe { libc::read(self.timer.as_raw_fd(), n.as_mut_ptr().cast(), n.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(w: &Wake) -> bool {
        let mut p = libc::pollfd {
            fd: w.fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live `pollfd`; poll only writes its `revents`.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }

    #[test]
    fn the_timer_makes_the_descriptor_readable_until_rearmed() {
        let w = Wake::new().expect("epoll and timerfd");
        assert!(!readable(&w), "a disarmed timer");
        w.arm(Some(super::super::link::now()));
        let mut p = libc::pollfd {
            fd: w.fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live `pollfd`; poll only writes its `revents`.
        let r = unsafe { libc::poll(&mut p, 1, 5_000) };
        assert_eq!(r, 1, "an expiry that is due wakes the sleeper");
        assert!(readable(&w), "and stays readable until consumed");
        w.arm(None);
        assert!(!readable(&w), "disarming consumes it");
    }
}
