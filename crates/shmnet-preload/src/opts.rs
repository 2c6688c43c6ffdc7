//! Options and modes: `setsockopt`, `getsockopt`, `fcntl`, `ioctl`.
//!
//! On an undecided socket an option goes to the kernel socket (so an option the kernel
//! refuses is refused) and the ones the server carries are noted for when it takes the
//! socket. On the server's sockets: `TCP_NODELAY`, `SO_KEEPALIVE`, `SO_SNDBUF`,
//! `SO_RCVBUF` and `SO_BROADCAST` are carried, and `SO_LINGER` (a linger of zero makes `close` reset the
//! connection, a time makes it wait for the acknowledgement: `sockets::linger`); options that only tune the kernel's own behaviour (`SO_REUSEADDR`,
//! `SO_REUSEPORT`, `TCP_KEEPIDLE`…) are accepted and noted in the debug log; `getsockopt`
//! answers from what was set (`SO_TYPE` `SOCK_STREAM`); `SO_ERROR` is a connection's failure
//! or a UDP socket's pending ICMP error, and clears the latter. A UDP socket's IPv4 multicast
//! options (joins, TTL, loop-back) are carried by [`crate::multicast`].

use libc::{c_int, c_ulong, c_void, socklen_t};
use std::time::Duration;

use crate::config::debug;
use crate::table::{self, Mark, Opts, Sock};
use crate::{fail, guarded, real};

/// An `int` option's value, if `val` holds one.
///
/// # Safety
/// `val` valid for `len` bytes, or null.
unsafe fn int_of(val: *const c_void, len: socklen_t) -> Option<c_int> {
    if val.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
        return None;
    }
    // SAFETY: the caller's contract: at least an int's bytes.
    Some(unsafe { std::ptr::read_unaligned(val.cast::<c_int>()) })
}

/// A `SO_RCVTIMEO`/`SO_SNDTIMEO` value: `Some(None)` for zero (wait for ever), `None` if
/// `val` holds no `timeval`.
///
/// # Safety
/// `val` valid for `len` bytes, or null.
unsafe fn timeout_of(val: *const c_void, len: socklen_t) -> Option<Option<Duration>> {
    if val.is_null() || (len as usize) < std::mem::size_of::<libc::timeval>() {
        return None;
    }
    // SAFETY: the caller's contract: at least a timeval's bytes.
    let tv = unsafe { std::ptr::read_unaligned(val.cast::<libc::timeval>()) };
    if tv.tv_sec < 0 || !(0..1_000_000).contains(&tv.tv_usec) {
        return None;
    }
    let d = Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1_000);
    Some((!d.is_zero()).then_some(d))
}

/// A `SO_LINGER` value: `Some(None)` off, `Some(Some(seconds))` on; `None` if `val`
/// holds no `struct linger` (or a negative time, which Linux refuses too).
///
/// # Safety
/// `val` valid for `len` bytes, or null.
unsafe fn linger_of(val: *const c_void, len: socklen_t) -> Option<Option<u32>> {
    if val.is_null() || (len as usize) < std::mem::size_of::<libc::linger>() {
        return None;
    }
    // SAFETY: the caller's contract: at least a linger's bytes.
    let l = unsafe { std::ptr::read_unaligned(val.cast::<libc::linger>()) };
    match (l.l_onoff, u32::try_from(l.l_linger)) {
        (0, _) => Some(None),
        (_, Ok(secs)) => Some(Some(secs)),
        (_, Err(_)) => None,
    }
}

/// Notes a structure-valued option (`SO_RCVTIMEO`, `SO_SNDTIMEO`, `SO_LINGER`) in `o`;
/// whether `(level, name)` is one.
///
/// # Safety
/// `val` valid for `len` bytes, or null.
unsafe fn note_struct(
    o: &mut Opts,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> bool {
    if (level, name) == (libc::SOL_SOCKET, libc::SO_LINGER) {
        // SAFETY: the caller's contract.
        if let Some(l) = unsafe { linger_of(val, len) } {
            o.linger = l;
        }
        return true;
    }
    let slot = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => &mut o.rcvtimeo,
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => &mut o.sndtimeo,
        _ => return false,
    };
    // SAFETY: the caller's contract.
    if let Some(t) = unsafe { timeout_of(val, len) } {
        *slot = t;
    }
    true
}

/// Notes option `(level, name) = v` in `o`; whether the server carries it.
fn note(o: &mut Opts, level: c_int, name: c_int, v: c_int) -> bool {
    match (level, name) {
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => o.nodelay = v != 0,
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => o.keepalive = v != 0,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => o.sndbuf = Some(v.max(0) as u32),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => o.rcvbuf = Some(v.max(0) as u32),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => o.v6only = v != 0,
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_REUSEPORT) => o.reuse = v != 0,
        (libc::IPPROTO_IP, libc::IP_PKTINFO) => o.pktinfo = v != 0,
        (libc::SOL_SOCKET, libc::SO_BROADCAST) => o.broadcast = v != 0,
        _ => return false,
    }
    true
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let mark = table::marked(fd);
    if matches!(mark, Mark::Undecided | Mark::Shmnet)
        && crate::multicast::is_multicast_option(level, name)
        && !table::orphaned(fd)
    {
        // A UDP socket's multicast options: the server's (or noted while undecided).
        let handled = crate::caught(
            || {
                let mut st = table::lock();
                if !st.sock(fd).is_some_and(|s| s.opts().udp) {
                    return None;
                }
                // SAFETY: the caller's contract covers `val` for `len` bytes.
                let r = unsafe { crate::multicast::set(&mut st, fd, level, name, val, len) };
                st.note_moves();
                Some(r)
            },
            || Some(Err(libc::EIO)),
        );
        match handled {
            Some(Ok(())) => return 0,
            Some(Err(e)) => return fail(e),
            None => {}
        }
    }
    if mark != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        let r = unsafe { real::setsockopt(fd, level, name, val, len) };
        if r == 0 && mark == Mark::Undecided {
            // SAFETY: the kernel read `val` for `len` bytes just now.
            let v = unsafe { int_of(val, len) };
            guarded(|| {
                let mut st = table::lock();
                if let Some(sock) = st.sock_mut(fd) {
                    // SAFETY: as above.
                    if !unsafe { note_struct(sock.opts_mut(), level, name, val, len) }
                        && let Some(v) = v
                    {
                        note(sock.opts_mut(), level, name, v);
                    }
                }
                0
            });
        }
        return r;
    }
    if table::orphaned(fd) {
        return fail(libc::EBADF);
    }
    // SAFETY: the caller's contract covers `val` for `len` bytes.
    let v = unsafe { int_of(val, len) };
    guarded(|| {
        let mut st = table::lock();
        let Some(sock) = st.sock_mut(fd) else {
            return fail(libc::EBADF);
        };
        // SAFETY: the caller's contract covers `val` for `len` bytes.
        if unsafe { note_struct(sock.opts_mut(), level, name, val, len) } {
            // Applied by the library's own waits (wait::Blocking), and by `close`.
            return 0;
        }
        let Some(v) = v else {
            debug!("setsockopt({fd}, {level}, {name}): accepted, not carried");
            return 0;
        };
        if !note(sock.opts_mut(), level, name, v) {
            debug!("setsockopt({fd}, {level}, {name}, {v}): accepted, not carried");
            return 0;
        }
        let on = v != 0;
        let bytes = v.max(0) as u32;
        let r = match sock {
            Sock::Stream { s, .. } => match (level, name) {
                (libc::IPPROTO_TCP, libc::TCP_NODELAY) => s.set_nodelay(on),
                (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => s.set_keepalive(on),
                (libc::SOL_SOCKET, libc::SO_SNDBUF) => s.set_send_buffer(bytes).map(drop),
                (libc::SOL_SOCKET, libc::SO_RCVBUF) => s.set_recv_buffer(bytes).map(drop),
                _ => Ok(()),
            },
            Sock::Listener { l, .. } => match (level, name) {
                (libc::SOL_SOCKET, libc::SO_SNDBUF) => l.set_send_buffer(bytes).map(drop),
                (libc::SOL_SOCKET, libc::SO_RCVBUF) => l.set_recv_buffer(bytes).map(drop),
                _ => Ok(()),
            },
            Sock::Undecided { .. } | Sock::Udp(_) => Ok(()),
        };
        st.note_moves();
        match r {
            Ok(()) => 0,
            Err(e) => fail(crate::net::errno_of(&e, crate::net::Call::Other)),
        }
    })
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let mark = table::marked(fd);
    if mark == Mark::Undecided && !val.is_null() && !len.is_null() {
        // Multicast options noted on an undecided UDP socket are answered from the notes.
        let noted = crate::caught(
            || {
                let st = table::lock();
                st.sock(fd)
                    .filter(|s| s.opts().udp)
                    .and_then(|s| crate::multicast::get(&s.opts().multicast, level, name))
            },
            || None,
        );
        if let Some(v) = noted {
            // SAFETY: `val` and `len` checked non-null; `val` holds `*len` bytes.
            unsafe { put(val, len, v) };
            return 0;
        }
    }
    if mark != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::getsockopt(fd, level, name, val, len) };
    }
    if val.is_null() || len.is_null() {
        return fail(libc::EFAULT);
    }
    if (level, name) == (libc::SOL_SOCKET, libc::SO_ERROR) {
        // A UDP socket's pending ICMP error (taken, as Linux clears it).
        let udp = crate::caught(|| crate::udp::take_error(&mut table::lock(), fd), || None);
        if let Some(err) = udp {
            // SAFETY: `val` and `len` checked non-null; `val` holds `*len` bytes.
            unsafe { put(val, len, err) };
            return 0;
        }
        // A connection's pending error: how its handshake (a non-blocking connect) ended.
        let err = match crate::guarded_result(|| crate::sockets::handshake(fd)) {
            Ok(_) => 0,
            Err(e) => e,
        };
        // SAFETY: `val` and `len` checked non-null; `val` holds `*len` bytes.
        unsafe { put(val, len, err) };
        return 0;
    }
    if (level, name) == (libc::SOL_SOCKET, libc::SO_LINGER) {
        let l = crate::caught(
            || table::lock().sock(fd).and_then(|s| s.opts().linger),
            || None,
        );
        let v = libc::linger {
            l_onoff: c_int::from(l.is_some()),
            l_linger: l.map_or(0, |s| s.min(c_int::MAX as u32) as c_int),
        };
        // SAFETY: `len` is valid (checked non-null); `val` holds `*len` bytes.
        unsafe { put(val, len, v) };
        return 0;
    }
    if level == libc::SOL_SOCKET && (name == libc::SO_RCVTIMEO || name == libc::SO_SNDTIMEO) {
        let t = crate::caught(
            || {
                let st = table::lock();
                st.sock(fd).and_then(|s| {
                    let o = s.opts();
                    if name == libc::SO_RCVTIMEO {
                        o.rcvtimeo
                    } else {
                        o.sndtimeo
                    }
                })
            },
            || None,
        )
        .unwrap_or_default();
        let tv = libc::timeval {
            tv_sec: t.as_secs() as libc::time_t,
            tv_usec: t.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: `len` is valid (checked non-null); `val` holds `*len` bytes.
        unsafe { put(val, len, tv) };
        return 0;
    }
    // Ok(Some(v)): an int option; Ok(None): one not carried, answered with zeros.
    let answer: Result<Option<c_int>, c_int> = crate::caught(
        || {
            let st = table::lock();
            let Some(sock) = st.sock(fd) else {
                return Err(libc::EBADF);
            };
            let (o, listening) = match sock {
                Sock::Listener { opts, .. } => (*opts, 1),
                other => (*other.opts(), 0),
            };
            if o.udp
                && let Some(v) = crate::multicast::get(&o.multicast, level, name)
            {
                return Ok(Some(v));
            }
            Ok(Some(match (level, name) {
                (libc::SOL_SOCKET, libc::SO_TYPE) if o.udp => libc::SOCK_DGRAM,
                (libc::SOL_SOCKET, libc::SO_TYPE) => libc::SOCK_STREAM,
                (libc::SOL_SOCKET, libc::SO_PROTOCOL) if o.udp => libc::IPPROTO_UDP,
                (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_REUSEPORT) => c_int::from(o.reuse),
                (libc::SOL_SOCKET, libc::SO_DOMAIN) if o.v6 => libc::AF_INET6,
                (libc::SOL_SOCKET, libc::SO_DOMAIN) => libc::AF_INET,
                (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => c_int::from(o.v6only),
                (libc::SOL_SOCKET, libc::SO_PROTOCOL) => libc::IPPROTO_TCP,
                (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => listening,
                // The server does not tell the library its path MTU: a connection answers
                // an Ethernet path's MSS with timestamps (1,500 - 40 - 12), anything else
                // Linux's default (536). Programs size their writes by it (iperf3's UDP).
                (libc::IPPROTO_TCP, libc::TCP_MAXSEG) if matches!(sock, Sock::Stream { .. }) => {
                    1448
                }
                (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => 536,
                (libc::IPPROTO_TCP, libc::TCP_NODELAY) => c_int::from(o.nodelay),
                (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => c_int::from(o.keepalive),
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => c_int::from(o.pktinfo),
                (libc::SOL_SOCKET, libc::SO_BROADCAST) => c_int::from(o.broadcast),
                (libc::SOL_SOCKET, libc::SO_SNDBUF) => o.sndbuf.map_or(256 * 1024, |b| b as c_int),
                (libc::SOL_SOCKET, libc::SO_RCVBUF) => o.rcvbuf.map_or(256 * 1024, |b| b as c_int),
                _ => {
                    debug!("getsockopt({fd}, {level}, {name}): not carried, answered with zeros");
                    return Ok(None);
                }
            }))
        },
        || Err(libc::EIO),
    );
    match answer {
        Err(e) => fail(e),
        Ok(Some(v)) => {
            // SAFETY: `len` is valid (checked non-null); `val` holds `*len` bytes.
            unsafe { put(val, len, v) };
            0
        }
        Ok(None) if empty_by_default(level, name) => {
            // Options of variable length that a kernel socket has none of: nothing, as
            // Linux answers. (Zeros of the whole size once told sshd the client had sent
            // 40 bytes of IP options, and it dropped every connection.)
            // SAFETY: `len` is valid (checked non-null).
            unsafe { *len = 0 };
            0
        }
        Ok(None) => {
            // A structure the server does not fill (TCP_INFO…): zeros, its whole size.
            // SAFETY: `len` is valid (checked non-null); `val` holds `*len` bytes.
            unsafe { std::ptr::write_bytes(val.cast::<u8>(), 0, *len as usize) };
            0
        }
    }
}

/// Options whose value is a list or a name that a kernel socket has empty until set:
/// `IP_OPTIONS`, `SO_BINDTODEVICE`.
fn empty_by_default(level: c_int, name: c_int) -> bool {
    matches!(
        (level, name),
        (libc::IPPROTO_IP, libc::IP_OPTIONS) | (libc::SOL_SOCKET, libc::SO_BINDTODEVICE)
    )
}

/// Writes option value `v` (an int or a C structure) to `val` as `getsockopt(2)` does: at
/// most `*len` bytes, and `*len` set to what was written.
///
/// # Safety
/// `len` valid; `val` valid for `*len` bytes.
unsafe fn put<T: Copy>(val: *mut c_void, len: *mut socklen_t, v: T) {
    // SAFETY: the caller's contract.
    unsafe {
        let room = (*len as usize).min(std::mem::size_of::<T>());
        std::ptr::copy_nonoverlapping((&raw const v).cast::<u8>(), val.cast::<u8>(), room);
        *len = room as socklen_t;
    }
}

/// Notes a socket's non-blocking mode.
fn set_nonblock(fd: c_int, on: bool) {
    guarded(|| {
        let mut st = table::lock();
        if let Some(sock) = st.sock_mut(fd) {
            sock.opts_mut().nonblock = on;
        }
        0
    });
}

/// # Safety
/// The C call's contract (`arg` is the optional third argument, as a register).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // The eventfd holding a shmnet socket's number keeps the flags too, so F_GETFL answers
    // for itself; F_SETFL is also noted.
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::fcntl(fd, cmd, arg) };
    if r >= 0 && table::marked(fd) != Mark::NotOurs {
        match cmd {
            libc::F_SETFL => set_nonblock(fd, arg as c_int & libc::O_NONBLOCK != 0),
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => return crate::dup::note(fd, r),
            _ => {}
        }
    }
    r
}

/// `fcntl64` is the same call in glibc's large-file interface.
///
/// # Safety
/// As [`fcntl`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fcntl(fd, cmd, arg) }
}

/// # Safety
/// The C call's contract (`arg` is the optional third argument, as a register).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int {
    if table::marked(fd) == Mark::NotOurs {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::ioctl(fd, req, arg) };
    }
    match req {
        libc::FIONBIO => {
            if arg == 0 {
                return fail(libc::EFAULT);
            }
            // SAFETY: FIONBIO's argument is a pointer to an int.
            let on = unsafe { *(arg as *const c_int) } != 0;
            // SAFETY: the same request on the descriptor itself keeps its flags in step.
            let r = unsafe { real::ioctl(fd, req, arg) };
            if r == 0 {
                set_nonblock(fd, on);
            }
            r
        }
        libc::FIONREAD if table::datagram(fd) => {
            if arg == 0 {
                return fail(libc::EFAULT);
            }
            // The next datagram's length, as Linux's UDP answers.
            match crate::guarded_result(|| crate::udp::next_len(fd)) {
                Ok(n) => {
                    // SAFETY: FIONREAD's argument is a pointer to an int.
                    unsafe { *(arg as *mut c_int) = n.min(c_int::MAX as usize) as c_int };
                    0
                }
                Err(e) => fail(e),
            }
        }
        libc::FIONREAD if table::marked(fd) == Mark::Shmnet => {
            if arg == 0 {
                return fail(libc::EFAULT);
            }
            // The bytes there to read now, as Linux's TCP answers (a listener: 0).
            let n = crate::guarded_result(|| crate::io::stream_available(fd));
            // SAFETY: FIONREAD's argument is a pointer to an int.
            unsafe { *(arg as *mut c_int) = n.unwrap_or(0).min(c_int::MAX as usize) as c_int };
            0
        }
        // SAFETY: the caller's arguments, passed on.
        _ => unsafe { real::ioctl(fd, req, arg) },
    }
}
