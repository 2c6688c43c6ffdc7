//! Several messages in one call: `recvmmsg`, `sendmmsg` (and `sendfile`, a file's bytes
//! sent on a socket) over the server's sockets, as loops of the one-message calls — the
//! server's rings batch on their own, so one call per message costs no system call here.

use libc::{c_int, c_uint, mmsghdr, off_t, size_t, ssize_t, timespec};
use std::time::{Duration, Instant};

use crate::io::{ours_to_send, recvmsg_ours, sendmsg_ours};
use crate::table::{self, Mark};
use crate::{fail, real};

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    v: *mut mmsghdr,
    n: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::recvmmsg(fd, v, n, flags, timeout) };
    }
    if v.is_null() {
        return fail(libc::EFAULT);
    }
    // As Linux: the timeout is looked at after each message, not a bound on the wait.
    // SAFETY: the caller's contract: `timeout` null or valid.
    let deadline = unsafe { timeout.as_ref() }.map(|t| {
        Instant::now()
            + Duration::new(
                t.tv_sec.max(0) as u64,
                t.tv_nsec.clamp(0, 999_999_999) as u32,
            )
    });
    let mut each = flags & !libc::MSG_WAITFORONE;
    let mut got = 0;
    for i in 0..n as usize {
        // SAFETY: the caller's contract: `v` holds `n` entries.
        let m = unsafe { &mut *v.add(i) };
        // SAFETY: the caller's contract: each entry's msghdr is valid.
        let r = unsafe { recvmsg_ours(fd, &raw mut m.msg_hdr, each) };
        if r < 0 {
            // What came is returned; the error, if it lasts, is the next call's.
            return if got > 0 { got } else { -1 };
        }
        m.msg_len = r as c_uint;
        got += 1;
        if flags & libc::MSG_WAITFORONE != 0 {
            each |= libc::MSG_DONTWAIT;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    got
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmmsg(fd: c_int, v: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int {
    // The first message's destination decides an undecided UDP socket, as a `sendmsg`'s.
    let first = if n > 0 {
        // SAFETY: the caller's contract: `v` null or holding `n` entries.
        unsafe { v.as_ref() }
    } else {
        None
    };
    let (name, namelen) = first.map_or((std::ptr::null(), 0), |m| {
        (
            m.msg_hdr.msg_name.cast_const().cast(),
            m.msg_hdr.msg_namelen,
        )
    });
    // SAFETY: the caller's contract covers the first message's name.
    if !unsafe { ours_to_send(fd, name, namelen) } {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::sendmmsg(fd, v, n, flags) };
    }
    if v.is_null() {
        return fail(libc::EFAULT);
    }
    let mut sent = 0;
    for i in 0..n as usize {
        // SAFETY: the caller's contract: `v` holds `n` entries.
        let m = unsafe { &mut *v.add(i) };
        // SAFETY: the caller's contract: each entry's msghdr is valid.
        let r = unsafe { sendmsg_ours(fd, &raw const m.msg_hdr, flags) };
        if r < 0 {
            return if sent > 0 { sent } else { -1 };
        }
        m.msg_len = r as c_uint;
        sent += 1;
    }
    sent
}

/// How much of a file `sendfile` reads at a time.
const CHUNK: usize = 64 * 1024;

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(out: c_int, input: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if table::marked(out) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::sendfile(out, input, off, n) };
    }
    // SAFETY: the caller's contract.
    unsafe { send_file(out, input, off, n) }
}

/// `sendfile64` is the same call in glibc's large-file interface.
///
/// # Safety
/// As [`sendfile`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    input: c_int,
    off: *mut off_t,
    n: size_t,
) -> ssize_t {
    // SAFETY: the caller's contract.
    unsafe { sendfile(out, input, off, n) }
}

/// Sends up to `n` bytes of `input` on the server's socket `out`: read at `*off` (which
/// advances) or at the file's position (which advances by what was sent, so a short
/// non-blocking send leaves the rest to be read again, as Linux's `sendfile`).
///
/// # Safety
/// `off` null or valid.
unsafe fn send_file(out: c_int, input: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    // SAFETY: the caller's contract.
    let mut pos = match unsafe { off.as_ref() } {
        Some(&o) => o,
        // SAFETY: lseek takes no pointers.
        None => unsafe { libc::lseek(input, 0, libc::SEEK_CUR) },
    };
    let seekable = pos >= 0;
    let mut buf = vec![0u8; CHUNK.min(n.max(1))];
    let mut done = 0usize;
    while done < n {
        let want = (n - done).min(buf.len());
        // SAFETY: reads into our own buffer of at least `want` bytes.
        let r = unsafe {
            if seekable {
                libc::pread(input, buf.as_mut_ptr().cast(), want, pos)
            } else {
                real::read(input, buf.as_mut_ptr().cast(), want)
            }
        };
        if r <= 0 {
            if r < 0 && done == 0 {
                return -1;
            }
            break;
        }
        let mut at = 0usize;
        while at < r as usize {
            // A non-seekable input's bytes are read already: they must all go, so the
            // write below is blocking in effect (`write` takes everything unless the
            // socket is non-blocking, then this loops on its readiness).
            // SAFETY: writes from our own buffer.
            let w = unsafe { crate::io::write(out, buf[at..].as_ptr().cast(), r as usize - at) };
            if w < 0 {
                // SAFETY: reads this thread's errno.
                let e = unsafe { *libc::__errno_location() };
                if e == libc::EAGAIN && !seekable {
                    let _ = crate::wait::Blocking::new(out, crate::wait::Way::Out).wait();
                    continue;
                }
                return finish(off, input, seekable, pos, done, at, w);
            }
            at += w as usize;
            if seekable && at < r as usize {
                // A short send: the rest is read again next time.
                return finish(off, input, seekable, pos, done, at, 0);
            }
        }
        done += at;
        pos += at as off_t;
    }
    finish(off, input, seekable, pos, done, 0, 0)
}

/// Where a `sendfile` ends: the offset (or the file's position) moved past what was sent;
/// the count sent, or `failed` if nothing was.
fn finish(
    off: *mut off_t,
    input: c_int,
    seekable: bool,
    pos: off_t,
    done: usize,
    partial: usize,
    failed: ssize_t,
) -> ssize_t {
    let sent = done + partial;
    let end = pos + partial as off_t;
    // SAFETY: `off` null or valid (the caller's contract).
    if let Some(o) = unsafe { off.as_mut() } {
        *o = end;
    } else if seekable {
        // SAFETY: lseek takes no pointers.
        unsafe { libc::lseek(input, end, libc::SEEK_SET) };
    }
    if sent == 0 && failed < 0 {
        return failed;
    }
    sent as ssize_t
}
