//! Watching the device's health: when to look, what is looked at, and why a device is down.
//!
//! While the device is up the driver looks at it at most every [`PROBE_EVERY`], and reads a
//! clock to know when only on calls that found nothing to receive and on every
//! [`BUSY_CALLS`]th other call: a busy driver pays one counter increment per call, an idle
//! one a coarse clock read (no system call) per call and three system calls per
//! [`PROBE_EVERY`]. Errors from the device itself (a failed send) are looked at at once.

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use super::{ifreq, ioctl};

/// The longest time between two looks at a device that is up.
pub(super) const PROBE_EVERY: Duration = Duration::from_millis(100);

/// How many busy calls pass between two reads of the clock.
pub(super) const BUSY_CALLS: u32 = 64;

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live `timespec` the call fills; the clock ids used here exist on
    // every Linux this driver runs on (2.6.32+), so it cannot fail.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// `CLOCK_MONOTONIC`, the timer's clock: for the down state's schedule (and the impairment
/// decorator's, which sleeps on a [`super::wake::Wake`] too).
pub(crate) fn now() -> Duration {
    clock(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_MONOTONIC_COARSE`: the same clock at tick resolution, read without a system call
/// and cheaper than [`now`]; for pacing the looks while up.
fn coarse_now() -> Duration {
    crate::coarse_clock::now()
}

/// When to look at a device that is up. See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Pace {
    calls: u32,
    next: Duration,
}

impl Pace {
    /// Whether a look is due now; `idle` says the call found nothing to do.
    pub(crate) fn due(&mut self, idle: bool) -> bool {
        self.calls = self.calls.wrapping_add(1);
        if !idle && self.calls % BUSY_CALLS != 0 {
            return false;
        }
        let t = coarse_now();
        if t < self.next {
            return false;
        }
        self.next = t + PROBE_EVERY;
        true
    }
}

/// Why the driver took its device for down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownReason {
    /// No interface of that name exists any more.
    Gone,
    /// An interface of that name exists, but it is another one (deleted and recreated).
    Replaced {
        /// The index the driver was bound to.
        old: i32,
        /// The index the name has now.
        new: i32,
    },
    /// The interface is administratively down.
    SetDown,
    /// The socket reported this error (`errno`) and the interface looks fine again: it went
    /// down and up between two looks, or failed otherwise.
    Error(i32),
}

/// The name of the errno values a device reports, for the log.
fn errno_name(e: i32) -> String {
    match e {
        libc::ENETDOWN => "ENETDOWN".into(),
        libc::ENXIO => "ENXIO".into(),
        libc::ENODEV => "ENODEV".into(),
        libc::ENETUNREACH => "ENETUNREACH".into(),
        _ => format!("errno {e}"),
    }
}

impl fmt::Display for DownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownReason::Gone => write!(f, "the interface went away (ENODEV)"),
            DownReason::Replaced { old, new } => write!(
                f,
                "the interface was deleted and recreated (index {old}, now {new})"
            ),
            DownReason::SetDown => write!(f, "the interface was set down"),
            DownReason::Error(e) => write!(f, "the device reported {}", errno_name(*e)),
        }
    }
}

/// Whether an error from a send means the device is down or gone.
pub(super) fn is_link_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV)
    )
}

/// Reads and clears the socket's pending error (`SO_ERROR`): 0 when none.
fn take_socket_error(fd: BorrowedFd<'_>) -> i32 {
    let mut e: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `e` and `len` are live and describe a buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut e as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 { e } else { 0 }
}

/// Looks at the device the socket `fd` is bound to (`ifindex`, named `name` in the socket's
/// network namespace): three system calls. `Err` says why it is down.
pub(super) fn probe(fd: BorrowedFd<'_>, name: &str, ifindex: i32) -> Result<(), DownReason> {
    // The kernel sets ENETDOWN on a packet socket whose device goes down or away; reading it
    // also stops the socket polling as readable for it.
    let pending = take_socket_error(fd);
    explain(fd, name, ifindex)?;
    match pending {
        libc::ENETDOWN | libc::ENXIO | libc::ENODEV => Err(DownReason::Error(pending)),
        _ => Ok(()),
    }
}

/// Looks the interface up by name: gone, replaced, set down, or fine.
pub(crate) fn explain(fd: BorrowedFd<'_>, name: &str, ifindex: i32) -> Result<(), DownReason> {
    let mut ifr = ifreq(name);
    match ioctl(fd, libc::SIOCGIFINDEX, &mut ifr) {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Err(DownReason::Gone),
        // Anything else tells nothing about the device; the next look may.
        Err(_) => return Ok(()),
        Ok(()) => {
            // SAFETY: SIOCGIFINDEX filled the `ifru_ifindex` member.
            let new = unsafe { ifr.ifr_ifru.ifru_ifindex };
            if new != ifindex {
                return Err(DownReason::Replaced { old: ifindex, new });
            }
        }
    }
    let mut ifr = ifreq(name);
    if ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr).is_ok() {
        // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags };
        if i32::from(flags) & libc::IFF_UP == 0 {
            return Err(DownReason::SetDown);
        }
    }
    Ok(())
}

/// A duration for a log line: "250 ms", "1.3 s", "60 s".
pub(crate) fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 || d >= Duration::from_secs(10) {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// A MAC address as `02:00:00:00:00:01`.
pub(crate) fn mac_str(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_sentences() {
        assert_eq!(
            DownReason::Gone.to_string(),
            "the interface went away (ENODEV)"
        );
        assert_eq!(
            DownReason::Replaced { old: 3, new: 9 }.to_string(),
            "the interface was deleted and recreated (index 3, now 9)"
        );
        assert_eq!(
            DownReason::Error(libc::ENETDOWN).to_string(),
            "the device reported ENETDOWN"
        );
        assert_eq!(human(Duration::from_millis(250)), "250 ms");
        assert_eq!(human(Duration::from_millis(1300)), "1.3 s");
        assert_eq!(human(Duration::from_secs(60)), "60 s");
        assert_eq!(mac_str([2, 0, 0, 0xab, 0, 1]), "02:00:00:ab:00:01");
    }

    #[test]
    fn busy_calls_read_the_clock_rarely_and_looks_are_paced() {
        let mut p = Pace::default();
        assert!(p.due(true), "the first idle call looks");
        // Right after a look, none is due, however many calls come.
        for _ in 0..10 * BUSY_CALLS {
            assert!(!p.due(true));
            assert!(!p.due(false));
        }
        // A busy call that is not a multiple of BUSY_CALLS does not even read the clock: with
        // the deadline passed it still says no.
        p.next = Duration::ZERO;
        p.calls = 0;
        assert!(!p.due(false));
        assert!(p.due(true), "an idle call past the deadline looks");
        p.next = Duration::ZERO;
        p.calls = BUSY_CALLS - 1;
        assert!(p.due(false), "every BUSY_CALLSth busy call reads the clock");
    }

    #[test]
    fn link_errors_are_the_device_ones() {
        for e in [libc::ENETDOWN, libc::ENXIO, libc::ENODEV] {
            assert!(is_link_error(&std::io::Error::from_raw_os_error(e)));
        }
        assert!(!is_link_error(&std::io::Error::from_raw_os_error(
            libc::EMSGSIZE
        )));
    }
}
