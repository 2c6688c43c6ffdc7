//! glibc's checked entry points: a program built with `_FORTIFY_SOURCE` (as Debian builds
//! most of its packages) calls `__read_chk`, `__recv_chk`, `__recvfrom_chk`, `__poll_chk`
//! and `__ppoll_chk` where its source says `read`, `recv`, `recvfrom`, `poll`, `ppoll`, and
//! the C library's versions reach the kernel without passing through this library's
//! `read`. Each checks its buffer as glibc's does — a call that would overflow goes to the
//! C library's own version, which stops the program as it would have — and then is the
//! plain call.

use libc::{
    c_int, c_void, nfds_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec,
};

use crate::real;
use crate::table::{self, Mark};

/// Whether a `poll` set of `n` entries fits the `fdslen` bytes the compiler saw.
fn fits(n: nfds_t, fdslen: size_t) -> bool {
    (n as usize).saturating_mul(std::mem::size_of::<pollfd>()) <= fdslen
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen || table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::__read_chk(fd, buf, n, buflen) };
    }
    // SAFETY: the caller's contract, `n` checked against the buffer.
    unsafe { crate::io::read(fd, buf, n) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if n > buflen || table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::__recv_chk(fd, buf, n, buflen, flags) };
    }
    // SAFETY: the caller's contract, `n` checked against the buffer.
    unsafe { crate::io::recv(fd, buf, n, flags) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if n > buflen || table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::__recvfrom_chk(fd, buf, n, buflen, flags, addr, len) };
    }
    // SAFETY: the caller's contract, `n` checked against the buffer.
    unsafe { crate::io::recvfrom(fd, buf, n, flags, addr, len) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    if !fits(n, fdslen) {
        // SAFETY: the caller's arguments, passed on (the C library stops the program).
        return unsafe { real::__poll_chk(fds, n, timeout, fdslen) };
    }
    // SAFETY: the caller's contract, the set checked against its array.
    unsafe { crate::polling::poll(fds, n, timeout) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    t: *const timespec,
    mask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    if !fits(n, fdslen) {
        // SAFETY: the caller's arguments, passed on (the C library stops the program).
        return unsafe { real::__ppoll_chk(fds, n, t, mask, fdslen) };
    }
    // SAFETY: the caller's contract, the set checked against its array.
    unsafe { crate::polling::ppoll(fds, n, t, mask) }
}
