//! Waiting on many descriptors: `poll`, `ppoll`, `select`, `pselect`. A set with none of
//! the server's sockets goes to the kernel as it is; a mixed one waits through
//! [`crate::wait::poll_mixed`].

use libc::{c_int, fd_set, nfds_t, pollfd, sigset_t, timespec, timeval};
use std::time::Duration;

use crate::table::{self, Mark};
use crate::{fail, guarded, real, wait};

/// Whether any of `fds` is the server's.
fn any_shmnet(fds: &[pollfd]) -> bool {
    fds.iter().any(|p| table::marked(p.fd) == Mark::Shmnet)
}

/// # Safety
/// `fds` valid for `n` entries, or null with `n` 0.
unsafe fn entries<'a>(fds: *mut pollfd, n: nfds_t) -> &'a mut [pollfd] {
    if fds.is_null() || n == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
}

fn millis(timeout: c_int) -> Option<Duration> {
    (timeout >= 0).then(|| Duration::from_millis(timeout as u64))
}

/// # Safety
/// `t` null or valid.
unsafe fn of_timespec(t: *const timespec) -> Option<Duration> {
    // SAFETY: the caller's contract.
    let t = unsafe { t.as_ref() }?;
    Some(Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    ))
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's contract.
    let set = unsafe { entries(fds, n) };
    if !any_shmnet(set) {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::poll(fds, n, timeout) };
    }
    guarded(|| wait::poll_mixed(set, millis(timeout)))
}

/// A mixed set's signal mask is not applied during the wait (docs/preload.md).
///
/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    t: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's contract.
    let set = unsafe { entries(fds, n) };
    if !any_shmnet(set) {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::ppoll(fds, n, t, mask) };
    }
    // SAFETY: the caller's contract.
    let timeout = unsafe { of_timespec(t) };
    guarded(|| wait::poll_mixed(set, timeout))
}

/// The pollfds of an fd_set triple, and whether any is the server's.
///
/// # Safety
/// Each set null or valid.
unsafe fn to_pollfds(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set) -> (Pollfds, bool) {
    let mut v = Pollfds::new();
    let mut shmnet = false;
    for fd in 0..n.clamp(0, libc::FD_SETSIZE as c_int) {
        // SAFETY: each set is null or valid (the caller's contract); fd < FD_SETSIZE.
        let (rd, wr, ex) = unsafe {
            (
                !r.is_null() && libc::FD_ISSET(fd, r),
                !w.is_null() && libc::FD_ISSET(fd, w),
                !e.is_null() && libc::FD_ISSET(fd, e),
            )
        };
        if !(rd || wr || ex) {
            continue;
        }
        shmnet |= table::marked(fd) == Mark::Shmnet;
        let mut events = 0;
        if rd {
            events |= libc::POLLIN;
        }
        if wr {
            events |= libc::POLLOUT;
        }
        if ex {
            events |= libc::POLLPRI;
        }
        v.push(pollfd {
            fd,
            events,
            revents: 0,
        });
    }
    (v, shmnet)
}

/// A select's descriptors as pollfds: on the stack for the usual few.
type Pollfds = smallvec::SmallVec<[pollfd; 16]>;

/// Whether any of the server's sockets is in the sets at or past `FD_SETSIZE` (a program
/// that passes `n` past it sizes its sets for `n` bits, as the kernel reads them).
///
/// # Safety
/// Each set null or valid for `n` bits.
unsafe fn shmnet_past_setsize(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set) -> bool {
    let bits = 8 * std::mem::size_of::<libc::c_ulong>();
    (libc::FD_SETSIZE as c_int..n).any(|fd| {
        let (word, bit) = (fd as usize / bits, fd as usize % bits);
        [r, w, e].iter().any(|&set| {
            // SAFETY: the caller's contract: a set holds `n` bits, so word `word` is in it.
            !set.is_null() && unsafe { *set.cast::<libc::c_ulong>().add(word) } >> bit & 1 == 1
        }) && table::marked(fd) == Mark::Shmnet
    })
}

/// Writes poll's answers back into the sets (cleared first); returns the bits set.
///
/// # Safety
/// Each set null or valid.
unsafe fn from_pollfds(fds: &[pollfd], r: *mut fd_set, w: *mut fd_set, e: *mut fd_set) -> c_int {
    // SAFETY: each set is null or valid.
    unsafe {
        for s in [r, w, e] {
            if !s.is_null() {
                libc::FD_ZERO(s);
            }
        }
    }
    let mut bits = 0;
    for p in fds {
        let err = p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        let pairs = [
            (r, libc::POLLIN, p.revents & libc::POLLIN != 0 || err),
            (w, libc::POLLOUT, p.revents & libc::POLLOUT != 0 || err),
            (e, libc::POLLPRI, p.revents & libc::POLLPRI != 0),
        ];
        for (s, asked, got) in pairs {
            if !s.is_null() && p.events & asked != 0 && got {
                // SAFETY: `s` is valid and `p.fd < FD_SETSIZE` (it came from a set).
                unsafe { libc::FD_SET(p.fd, s) };
                bits += 1;
            }
        }
    }
    bits
}

/// `select` or `pselect` over a set with shmnet sockets in it.
///
/// # Safety
/// Each set null or valid.
unsafe fn select_mixed(
    mut fds: Pollfds,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: Option<Duration>,
) -> c_int {
    guarded(|| {
        let n = wait::poll_mixed(&mut fds, timeout);
        if n < 0 {
            return n;
        }
        // SAFETY: the caller's contract.
        unsafe { from_pollfds(&fds, r, w, e) }
    })
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    t: *mut timeval,
) -> c_int {
    // SAFETY: the caller's contract.
    let (fds, shmnet) = unsafe { to_pollfds(n, r, w, e) };
    // SAFETY: the caller's contract: the sets hold `n` bits.
    if n > libc::FD_SETSIZE as c_int && (shmnet || unsafe { shmnet_past_setsize(n, r, w, e) }) {
        // Past FD_SETSIZE the sets are the program's own size: refused when a server
        // socket is in them, passed on untouched when none is.
        return fail(libc::EINVAL);
    }
    if !shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::select(n, r, w, e, t) };
    }
    // SAFETY: `t` is null or valid.
    let timeout = unsafe { t.as_ref() }.map(|t| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    });
    // SAFETY: the caller's contract.
    unsafe { select_mixed(fds, r, w, e, timeout) }
}

/// A mixed set's signal mask is not applied during the wait (docs/preload.md).
///
/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    t: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's contract.
    let (fds, shmnet) = unsafe { to_pollfds(n, r, w, e) };
    // SAFETY: the caller's contract: the sets hold `n` bits.
    if n > libc::FD_SETSIZE as c_int && (shmnet || unsafe { shmnet_past_setsize(n, r, w, e) }) {
        // Past FD_SETSIZE the sets are the program's own size: refused when a server
        // socket is in them, passed on untouched when none is.
        return fail(libc::EINVAL);
    }
    if !shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::pselect(n, r, w, e, t, mask) };
    }
    // SAFETY: the caller's contract.
    let timeout = unsafe { of_timespec(t) };
    // SAFETY: the caller's contract.
    unsafe { select_mixed(fds, r, w, e, timeout) }
}
