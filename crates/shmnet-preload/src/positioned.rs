//! Positioned calls — `lseek`, `pread`, `pwrite` — on one of the server's sockets fail as
//! on a kernel socket (`ESPIPE`). Its placeholder is an eventfd, which the kernel lets
//! `lseek` move: bash's `read` builtin, finding the descriptor seekable, read ahead and
//! "sought back" over bytes that were then gone (found by a hostile test with `/dev/tcp`).
//! Every other descriptor goes to the kernel untouched.

use libc::{c_int, c_void, size_t, ssize_t};

use crate::table::{self, Mark};
use crate::{fail, real};

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lseek(fd: c_int, off: libc::off_t, whence: c_int) -> libc::off_t {
    if table::marked(fd) == Mark::Shmnet {
        return fail(libc::ESPIPE);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { real::lseek(fd, off, whence) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lseek64(fd: c_int, off: libc::off64_t, whence: c_int) -> libc::off64_t {
    if table::marked(fd) == Mark::Shmnet {
        return fail(libc::ESPIPE);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { real::lseek64(fd, off, whence) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: libc::off_t,
) -> ssize_t {
    if table::marked(fd) == Mark::Shmnet {
        return fail(libc::ESPIPE);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { real::pread(fd, buf, n, off) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: libc::off64_t,
) -> ssize_t {
    if table::marked(fd) == Mark::Shmnet {
        return fail(libc::ESPIPE);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { real::pread64(fd, buf, n, off) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: libc::off_t,
) -> ssize_t {
    if table::marked(fd) == Mark::Shmnet {
        return fail(libc::ESPIPE);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { real::pwrite(fd, buf, n, off) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: libc::off64_t,
) -> ssize_t {
    if table::marked(fd) == Mark::Shmnet {
        return fail(libc::ESPIPE);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { real::pwrite64(fd, buf, n, off) }
}
