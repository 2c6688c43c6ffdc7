//! Moving bytes: `read`, `write`, `readv`, `writev`, `recv`, `recvfrom`, `recvmsg`, `send`,
//! `sendto`, `sendmsg` on the server's connections and UDP sockets ([`crate::udp`]); every
//! other descriptor: the kernel's.

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};

use crate::net::{self, Call};
use crate::table::{self, Mark, Sock};
use crate::udp;
use crate::{fail, guarded, guarded_result, real, wait};
use shmnet_io::client::{ClientError, TcpStream};
use std::time::{Duration, Instant};

/// Bytes a connection sets aside for `MSG_PEEK` and `FIONREAD` at most.
const PEEK_MAX: usize = 4 << 20;

/// Bytes for a read into `dst` from connection `s`: first those a peek or `FIONREAD` set
/// aside (`peeked`), then the stream's. With `peek` they stay, set aside, for the next read.
/// `Ok(Some(0))`: the end of the stream; `Ok(None)`: nothing yet.
fn take_bytes(
    s: &mut TcpStream,
    peeked: &mut Vec<u8>,
    dst: &mut [u8],
    peek: bool,
) -> Result<Option<usize>, ClientError> {
    if peek {
        if peeked.len() < dst.len() {
            let mut more = vec![0; (dst.len() - peeked.len()).min(PEEK_MAX)];
            match s.try_read(&mut more) {
                Ok(Some(0)) | Ok(None) | Err(_) if !peeked.is_empty() => {}
                Ok(Some(n)) => peeked.extend_from_slice(&more[..n]),
                other => return other,
            }
        }
        let n = peeked.len().min(dst.len());
        dst[..n].copy_from_slice(&peeked[..n]);
        return Ok(Some(n));
    }
    if !peeked.is_empty() {
        let n = peeked.len().min(dst.len());
        dst[..n].copy_from_slice(&peeked[..n]);
        peeked.drain(..n);
        return Ok(Some(n));
    }
    s.try_read(dst)
}

/// How many bytes connection `fd` has to read now, as `FIONREAD`: what is there is set
/// aside (up to [`PEEK_MAX`]) and counted.
pub(crate) fn stream_available(fd: c_int) -> Result<usize, c_int> {
    let mut st = table::lock();
    let Some(Sock::Stream { s, peeked, .. }) = st.sock_mut(fd) else {
        return Err(libc::ENOTCONN);
    };
    let mut chunk = vec![0; 64 * 1024];
    while peeked.len() < PEEK_MAX {
        match s.try_read(&mut chunk) {
            Ok(Some(n)) if n > 0 => peeked.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let n = peeked.len();
    st.note_moves();
    Ok(n)
}

/// Reads into `buf` from the server's connection `fd`, as `recv(2)` with `flags`
/// (`MSG_DONTWAIT`, `MSG_WAITALL`, `MSG_PEEK`).
fn stream_read(fd: c_int, buf: &mut [u8], flags: c_int) -> ssize_t {
    if table::orphaned(fd) {
        return fail(libc::EBADF);
    }
    let peek = flags & libc::MSG_PEEK != 0;
    if peek && flags & libc::MSG_WAITALL != 0 {
        return peek_all(fd, buf, flags);
    }
    let mut got = 0usize;
    let mut blocking = wait::Blocking::new(fd, wait::Way::In);
    guarded(|| {
        loop {
            let mut st = table::lock();
            let (s, peeked, deferred, nonblock, shut_rd) = match st.sock_mut(fd) {
                Some(Sock::Stream {
                    s,
                    opts,
                    shut_rd,
                    peeked,
                    deferred,
                    ..
                }) => (s, peeked, deferred, opts.nonblock, *shut_rd),
                _ => return fail(libc::ENOTCONN),
            };
            if !peek
                && got == 0
                && let Some(e) = deferred.take()
            {
                return fail(e);
            }
            if shut_rd || buf.is_empty() {
                return got as ssize_t;
            }
            let want = buf.len() - got;
            let mut read = take_bytes(s, peeked, &mut buf[got..], peek);
            if !peek
                && let Ok(Some(n)) = read
                && n > 0
            {
                // What is there already goes into the rest of the buffer too, as the
                // kernel's read copies all it has: one call, not one per delivery. The end
                // of the stream or a failure after these bytes is the next read's.
                let mut total = n;
                while total < want {
                    match take_bytes(s, peeked, &mut buf[got + total..], false) {
                        Ok(Some(m)) if m > 0 => total += m,
                        Err(e) => {
                            *deferred = Some(net::errno_of(&e, Call::Read));
                            break;
                        }
                        _ => break,
                    }
                }
                read = Ok(Some(total));
            }
            if matches!(read, Ok(Some(n)) if n > 0 && n < want) {
                // Likely all there was: an edge-triggered watch reports the next bytes.
                st.drained(fd, libc::EPOLLIN as u32);
            }
            st.note_moves();
            drop(st);
            match read {
                Ok(Some(0)) => return got as ssize_t,
                Ok(Some(n)) => {
                    got += n;
                    if flags & libc::MSG_WAITALL == 0 || got == buf.len() {
                        return got as ssize_t;
                    }
                }
                Ok(None) if got > 0 && flags & libc::MSG_WAITALL == 0 => return got as ssize_t,
                Ok(None) if nonblock || flags & libc::MSG_DONTWAIT != 0 => {
                    return if got > 0 {
                        got as ssize_t
                    } else {
                        table::lock().drained(fd, libc::EPOLLIN as u32);
                        fail(libc::EAGAIN)
                    };
                }
                Ok(None) => {}
                Err(_) if got > 0 => return got as ssize_t,
                Err(e) => return fail(net::errno_of(&e, Call::Read)),
            }
            if let Err(e) = blocking.wait() {
                return if got > 0 { got as ssize_t } else { fail(e) };
            }
        }
    })
}

/// How long a `MSG_PEEK|MSG_WAITALL` sleeps between looks while some of what it waits for
/// is set aside already (the socket is readable then, so a wait for readiness would not
/// sleep).
const PEEK_ALL_NAP: Duration = Duration::from_millis(1);

/// `recv(2)` with `MSG_PEEK|MSG_WAITALL` on the server's connection `fd`, as Linux's: waits
/// until `buf` can be filled (or the stream ends or fails, or `SO_RCVTIMEO` passes, or the
/// socket does not block), then copies what there is and leaves it to be read. At most
/// [`PEEK_MAX`] bytes are set aside: a larger `buf` gets that many.
fn peek_all(fd: c_int, buf: &mut [u8], flags: c_int) -> ssize_t {
    let mut blocking = wait::Blocking::new(fd, wait::Way::In);
    let mut deadline: Option<Option<Instant>> = None;
    let want = buf.len().min(PEEK_MAX);
    let mut more = Vec::new();
    guarded(|| {
        loop {
            let mut st = table::lock();
            let Some(Sock::Stream {
                s,
                opts,
                shut_rd,
                peeked,
                deferred,
                ..
            }) = st.sock_mut(fd)
            else {
                return fail(libc::ENOTCONN);
            };
            // As the plain read path: a side shut for reading reads nothing.
            if *shut_rd || buf.is_empty() {
                return 0;
            }
            let nonblock = opts.nonblock || flags & libc::MSG_DONTWAIT != 0;
            let rcvtimeo = opts.rcvtimeo;
            // A failure found behind bytes read before: said now, as the plain read does.
            if peeked.is_empty()
                && let Some(e) = deferred.take()
            {
                return fail(e);
            }
            let mut ended = deferred.is_some();
            // Everything there is, up to `want`, set aside.
            while !ended && peeked.len() < want {
                more.resize(want - peeked.len(), 0);
                match s.try_read(&mut more) {
                    Ok(Some(0)) => ended = true,
                    Ok(Some(n)) => peeked.extend_from_slice(&more[..n]),
                    Ok(None) => break,
                    Err(e) if peeked.is_empty() => {
                        st.note_moves();
                        return fail(net::errno_of(&e, Call::Read));
                    }
                    // The failure after these bytes is the next read's (`stream_read`
                    // says it once they are read).
                    Err(e) => {
                        *deferred = Some(net::errno_of(&e, Call::Read));
                        ended = true;
                    }
                }
            }
            let have = peeked.len().min(want);
            let timed_out = deadline
                .get_or_insert_with(|| rcvtimeo.map(|t| Instant::now() + t))
                .is_some_and(|d| Instant::now() >= d);
            if have == want || ended || (have > 0 && (nonblock || timed_out)) {
                buf[..have].copy_from_slice(&peeked[..have]);
                st.note_moves();
                return have as ssize_t;
            }
            st.note_moves();
            if nonblock {
                st.drained(fd, libc::EPOLLIN as u32);
                return fail(libc::EAGAIN);
            }
            drop(st);
            if have > 0 {
                std::thread::sleep(PEEK_ALL_NAP);
            } else if let Err(e) = blocking.wait() {
                return fail(e);
            }
        }
    })
}

/// A write that failed because this side can send no more: `EPIPE`, and `SIGPIPE` unless
/// the program asked for none.
fn broken_pipe(flags: c_int) -> ssize_t {
    if flags & libc::MSG_NOSIGNAL == 0 {
        // SAFETY: raises a signal on this thread, as the kernel's write would.
        unsafe { libc::raise(libc::SIGPIPE) };
    }
    fail(libc::EPIPE)
}

/// Writes `data` to the server's connection `fd`, as `send(2)` with `flags`
/// (`MSG_DONTWAIT`, `MSG_NOSIGNAL`): some bytes, or an error, or `EAGAIN` when the send
/// buffer is full and the socket does not block.
fn stream_write(fd: c_int, data: &[u8], flags: c_int) -> ssize_t {
    if table::orphaned(fd) {
        return fail(libc::EBADF);
    }
    let mut done = 0usize;
    let mut waiting = wait::Blocking::new(fd, wait::Way::Out);
    guarded(|| {
        loop {
            let mut st = table::lock();
            let (s, nonblock, shut_wr) = match st.sock_mut(fd) {
                Some(Sock::Stream {
                    s, opts, shut_wr, ..
                }) => (s, opts.nonblock, *shut_wr),
                _ => return fail(libc::ENOTCONN),
            };
            if shut_wr {
                drop(st);
                return if done > 0 {
                    done as ssize_t
                } else {
                    broken_pipe(flags)
                };
            }
            if done == data.len() {
                return done as ssize_t;
            }
            // A connection whose handshake is still going takes nothing yet.
            let wrote = match s.connected() {
                Ok(true) => s.try_write(&data[done..]),
                Ok(false) => Ok(0),
                Err(e) => Err(e),
            };
            st.note_moves();
            drop(st);
            let blocking = !nonblock && flags & libc::MSG_DONTWAIT == 0;
            match wrote {
                Ok(0) if !blocking => {
                    if done > 0 {
                        return done as ssize_t;
                    }
                    table::lock().drained(fd, libc::EPOLLOUT as u32);
                    return fail(libc::EAGAIN);
                }
                Ok(0) => {}
                // A blocking socket takes everything before it returns, as Linux's does.
                Ok(n) if blocking => {
                    done += n;
                    continue;
                }
                Ok(n) => return n as ssize_t,
                Err(_) if done > 0 => return done as ssize_t,
                Err(e) => {
                    // As Linux's TCP: the failure once (ECONNRESET…), then EPIPE.
                    let errno = net::errno_of(&e, Call::Write);
                    let mut st = table::lock();
                    let first = match st.sock_mut(fd) {
                        Some(Sock::Stream { failed, .. }) => !std::mem::replace(failed, true),
                        _ => false,
                    };
                    drop(st);
                    return if errno == libc::EPIPE || !first {
                        broken_pipe(flags)
                    } else {
                        fail(errno)
                    };
                }
            }
            if let Err(e) = waiting.wait() {
                return if done > 0 { done as ssize_t } else { fail(e) };
            }
        }
    })
}

/// The buffers of an iovec array.
///
/// # Safety
/// `iov` must be valid for `n` entries, each valid for its length (null or empty allowed).
unsafe fn iovecs<'a>(iov: *const iovec, n: c_int) -> impl Iterator<Item = (*mut u8, usize)> + 'a {
    let n = if iov.is_null() { 0 } else { n.max(0) as usize };
    (0..n).map(move |i| {
        // SAFETY: the caller's contract: `iov` holds `n` entries.
        let v = unsafe { *iov.add(i) };
        (v.iov_base.cast::<u8>(), v.iov_len)
    })
}

/// `readv` over the server's connection: fills the buffers in order, waiting (unless
/// non-blocking) only for the first byte.
///
/// # Safety
/// As [`iovecs`].
unsafe fn stream_readv(fd: c_int, iov: *const iovec, n: c_int, flags: c_int) -> ssize_t {
    let mut total: ssize_t = 0;
    // SAFETY: the caller's contract.
    for (base, len) in unsafe { iovecs(iov, n) } {
        if len == 0 || base.is_null() {
            continue;
        }
        // SAFETY: the caller's contract: `base` is valid for `len` bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(base, len) };
        let more = if total > 0 {
            flags | libc::MSG_DONTWAIT
        } else {
            flags
        };
        let r = stream_read(fd, buf, more & !libc::MSG_WAITALL);
        if r < 0 {
            return if total > 0 { total } else { r };
        }
        total += r;
        if (r as usize) < len {
            break;
        }
    }
    total
}

thread_local! {
    /// This thread's buffer for gathering an iovec array into one write ([`with_gather`],
    /// [`stream_writev`]): taken out while in use, so a signal handler's call finds it empty.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Bytes of consecutive buffers [`stream_writev`] gathers into one write. Written one buffer
/// at a time, a small second buffer waited behind Nagle's algorithm for the peer's delayed
/// ACK of the first: memcached's `sendmsg` of a reply's header and value took 44 ms where
/// Linux, which sends an iovec array as one write, takes 40 µs.
const GATHER_LIMIT: usize = 64 * 1024;

/// `writev` over the server's connection, as one `write(2)` of the buffers end to end
/// ([`write_gathered`]); after the first write that took something, the rest do not wait.
///
/// # Safety
/// As [`iovecs`].
unsafe fn stream_writev(fd: c_int, iov: *const iovec, n: c_int, flags: c_int) -> ssize_t {
    // SAFETY: the caller's contract: each nonempty `base` is valid for its `len` bytes.
    let parts = unsafe { iovecs(iov, n) }
        .filter(|&(base, len)| len > 0 && !base.is_null())
        .map(|(base, len)| unsafe { std::slice::from_raw_parts(base.cast_const(), len) });
    SCRATCH.with(|cell| {
        let mut scratch = cell.take();
        let r = write_gathered(parts, &mut scratch, |data, after_some| {
            let more = if after_some {
                flags | libc::MSG_DONTWAIT
            } else {
                flags
            };
            stream_write(fd, data, more)
        });
        cell.replace(scratch);
        r
    })
}

/// Writes `parts` end to end through `write` (a `write(2)`: the bytes taken, or a negative
/// result; its flag says whether earlier bytes were taken already): consecutive parts are
/// gathered into `scratch` up to [`GATHER_LIMIT`] bytes and written together, a part larger
/// than that where it lies. Returns the bytes taken, stopping at the first write taken only
/// in part, or the first write's negative result if nothing was taken.
fn write_gathered<'a>(
    parts: impl Iterator<Item = &'a [u8]>,
    scratch: &mut Vec<u8>,
    mut write: impl FnMut(&[u8], bool) -> ssize_t,
) -> ssize_t {
    /// Writes `data` after `total` bytes; `Err` ends the call with what it holds.
    fn put(
        write: &mut impl FnMut(&[u8], bool) -> ssize_t,
        data: &[u8],
        total: &mut ssize_t,
    ) -> Result<(), ssize_t> {
        if data.is_empty() {
            return Ok(());
        }
        let r = write(data, *total > 0);
        if r < 0 {
            return Err(if *total > 0 { *total } else { r });
        }
        *total += r;
        if (r as usize) < data.len() {
            return Err(*total);
        }
        Ok(())
    }
    let mut total: ssize_t = 0;
    scratch.clear();
    let mut parts = parts.peekable();
    while let Some(data) = parts.next() {
        if scratch.len() + data.len() > GATHER_LIMIT {
            // No room for it: what is gathered goes first.
            if let Err(r) = put(&mut write, scratch, &mut total) {
                return r;
            }
            scratch.clear();
        }
        // With nothing gathered, a lone last part or one too large to gather is written
        // where it lies (a one-buffer `writev` is copied no more than a `write`).
        if scratch.is_empty() && (parts.peek().is_none() || data.len() > GATHER_LIMIT) {
            if let Err(r) = put(&mut write, data, &mut total) {
                return r;
            }
        } else {
            scratch.extend_from_slice(data);
        }
    }
    match put(&mut write, scratch, &mut total) {
        Ok(()) => total,
        Err(r) => r,
    }
}

/// # Safety
/// `buf` valid for `n` bytes, or null with `n` 0.
unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if buf.is_null() || n == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) }
}

/// # Safety
/// `buf` valid for `n` bytes, or null with `n` 0.
unsafe fn slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if buf.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(buf.cast(), n) }
}

/// How many buffers a scatter keeps on the stack (more: on the heap).
const STACK_IOVECS: usize = 8;

/// Runs `f` over the buffers of an iovec array as mutable slices (no allocation for up to
/// [`STACK_IOVECS`] of them).
///
/// # Safety
/// As [`iovecs`].
unsafe fn with_scatter<R>(
    iov: *const iovec,
    n: c_int,
    f: impl FnOnce(&mut udp::Scatter<'_>) -> R,
) -> R {
    // SAFETY: the caller's contract.
    let parts = unsafe { iovecs(iov, n) }.map(|(base, len)| {
        if base.is_null() || len == 0 {
            &mut [][..]
        } else {
            // SAFETY: the caller's contract: `base` is valid for `len` bytes, and the
            // program gave distinct buffers.
            unsafe { std::slice::from_raw_parts_mut(base, len) }
        }
    });
    let count = if iov.is_null() { 0 } else { n.max(0) as usize };
    if count <= STACK_IOVECS {
        let mut arr: [&mut [u8]; STACK_IOVECS] = Default::default();
        for (slot, p) in arr.iter_mut().zip(parts) {
            *slot = p;
        }
        f(&mut arr[..count])
    } else {
        let mut v: Vec<&mut [u8]> = parts.collect();
        f(&mut v)
    }
}

/// Runs `f` over the bytes of an iovec array as one slice: the buffer itself when there is
/// one, else a copy gathered into this thread's scratch (a datagram is one send).
///
/// # Safety
/// As [`iovecs`].
unsafe fn with_gather<R>(iov: *const iovec, n: c_int, f: impl FnOnce(&[u8]) -> R) -> R {
    // SAFETY: the caller's contract (each time).
    let parts = || unsafe { iovecs(iov, n) }.filter(|&(b, l)| !b.is_null() && l > 0);
    let mut nonempty = parts();
    if let (Some((base, len)), None) = (nonempty.next(), nonempty.next()) {
        // SAFETY: the caller's contract: `base` is valid for `len` bytes.
        return f(unsafe { std::slice::from_raw_parts(base.cast_const(), len) });
    }
    SCRATCH.with(|cell| {
        let mut s = cell.take();
        s.clear();
        for (base, len) in parts() {
            // SAFETY: the caller's contract: `base` is valid for `len` bytes.
            s.extend_from_slice(unsafe { std::slice::from_raw_parts(base.cast_const(), len) });
        }
        let r = f(&s);
        cell.replace(s);
        r
    })
}

/// A UDP receive into one buffer, the sender written to `addr` (null: not asked).
///
/// # Safety
/// `buf` valid for `n` bytes (or null with `n` 0); `addr`, `len` null or valid.
unsafe fn udp_recv_one(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    // SAFETY: the caller's contract.
    let mut one = [unsafe { slice_mut(buf, n) }];
    match guarded_result(|| udp::recv(fd, &mut one, flags)) {
        Ok(got) => {
            // SAFETY: the caller's contract.
            unsafe { got.write_from(addr, len) };
            got.n as ssize_t
        }
        Err(e) => fail(e),
    }
}

/// A UDP send of `data` to `to` (or the socket's peer).
fn udp_send(fd: c_int, data: &[u8], to: Option<std::net::SocketAddrV4>, flags: c_int) -> ssize_t {
    udp::ret(guarded_result(|| udp::send(fd, data, to, flags)))
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::read(fd, buf, n) };
    }
    if table::datagram(fd) {
        // SAFETY: the caller's contract.
        return unsafe { udp_recv_one(fd, buf, n, 0, std::ptr::null_mut(), std::ptr::null_mut()) };
    }
    // SAFETY: the caller's contract.
    stream_read(fd, unsafe { slice_mut(buf, n) }, 0)
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::write(fd, buf, n) };
    }
    if table::datagram(fd) {
        // SAFETY: the caller's contract.
        return udp_send(fd, unsafe { slice(buf, n) }, None, 0);
    }
    // SAFETY: the caller's contract.
    stream_write(fd, unsafe { slice(buf, n) }, 0)
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::readv(fd, iov, n) };
    }
    if table::datagram(fd) {
        // SAFETY: the caller's contract covers the iovecs.
        let got = unsafe { with_scatter(iov, n, |b| guarded_result(|| udp::recv(fd, b, 0))) };
        return udp::ret(got.map(|g| g.n));
    }
    // SAFETY: the caller's contract.
    unsafe { stream_readv(fd, iov, n, 0) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::writev(fd, iov, n) };
    }
    if table::datagram(fd) {
        // SAFETY: the caller's contract covers the iovecs.
        return unsafe { with_gather(iov, n, |d| udp_send(fd, d, None, 0)) };
    }
    // SAFETY: the caller's contract.
    unsafe { stream_writev(fd, iov, n, 0) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::recv(fd, buf, n, flags) };
    }
    if table::datagram(fd) {
        // SAFETY: the caller's contract.
        return unsafe {
            udp_recv_one(
                fd,
                buf,
                n,
                flags,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }
    // SAFETY: the caller's contract.
    stream_read(fd, unsafe { slice_mut(buf, n) }, flags)
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::recvfrom(fd, buf, n, flags, addr, len) };
    }
    if table::datagram(fd) {
        // SAFETY: the caller's contract.
        return unsafe { udp_recv_one(fd, buf, n, flags, addr, len) };
    }
    // A connected stream names no sender (as Linux's TCP leaves `addr` alone).
    // SAFETY: the caller's contract.
    stream_read(fd, unsafe { slice_mut(buf, n) }, flags)
}

/// Writes an `IP_PKTINFO` control message naming destination `to` into `m`'s control
/// buffer, as Linux's `recvmsg` does for a socket with `IP_PKTINFO` set: `ipi_addr` and
/// `ipi_spec_dst` the server's address, `ipi_ifindex` 0 (the server's interface is not one
/// of this host's; docs/preload.md). Too small a buffer gets `MSG_CTRUNC`.
///
/// # Safety
/// `m.msg_control` null or valid for `room` bytes.
unsafe fn put_pktinfo(m: &mut msghdr, room: usize, to: std::net::Ipv4Addr) {
    let info = libc::in_pktinfo {
        ipi_ifindex: 0,
        ipi_spec_dst: libc::in_addr {
            s_addr: u32::from(to).to_be(),
        },
        ipi_addr: libc::in_addr {
            s_addr: u32::from(to).to_be(),
        },
    };
    let data = std::mem::size_of::<libc::in_pktinfo>() as u32;
    // SAFETY: CMSG_SPACE and CMSG_LEN only compute sizes.
    let (space, len) = unsafe { (libc::CMSG_SPACE(data), libc::CMSG_LEN(data)) };
    if m.msg_control.is_null() || room < space as usize {
        m.msg_flags |= libc::MSG_CTRUNC;
        return;
    }
    m.msg_controllen = space as _;
    // SAFETY: the buffer holds `space` bytes (checked above), and `msg_controllen` says so
    // now; CMSG_FIRSTHDR of a msghdr whose control length covers one header returns the
    // buffer's start, aligned as the C library's own users rely on.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(m);
        (*c).cmsg_len = len as _;
        (*c).cmsg_level = libc::IPPROTO_IP;
        (*c).cmsg_type = libc::IP_PKTINFO;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>(), info);
    }
}

/// `recvmsg` on one of the server's sockets.
///
/// # Safety
/// `msg` null or a valid msghdr whose buffers are valid.
pub(crate) unsafe fn recvmsg_ours(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if msg.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller's contract: `msg` is a valid msghdr.
    let m = unsafe { &mut *msg };
    let control_room = m.msg_controllen;
    m.msg_controllen = 0;
    m.msg_flags = 0;
    if table::datagram(fd) {
        // SAFETY: the caller's contract covers the iovecs.
        let got = unsafe {
            with_scatter(m.msg_iov, m.msg_iovlen as c_int, |b| {
                guarded_result(|| udp::recv(fd, b, flags))
            })
        };
        return match got {
            Ok(g) => {
                if !m.msg_name.is_null() {
                    // SAFETY: the caller's contract: `msg_name` holds `msg_namelen` bytes.
                    unsafe { g.write_from(m.msg_name.cast(), &raw mut m.msg_namelen) };
                }
                if g.truncated {
                    m.msg_flags |= libc::MSG_TRUNC;
                }
                if let Some(to) = g.pktinfo {
                    // SAFETY: the caller's contract: `msg_control` holds `control_room`
                    // bytes.
                    unsafe { put_pktinfo(m, control_room, to) };
                }
                g.n as ssize_t
            }
            Err(e) => fail(e),
        };
    }
    m.msg_namelen = 0;
    // SAFETY: the caller's contract covers the iovecs.
    unsafe { stream_readv(fd, m.msg_iov, m.msg_iovlen as c_int, flags) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    // SAFETY: the caller's contract.
    unsafe { recvmsg_ours(fd, msg, flags) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::send(fd, buf, n, flags) };
    }
    if table::datagram(fd) {
        // SAFETY: the caller's contract.
        return udp_send(fd, unsafe { slice(buf, n) }, None, flags);
    }
    // SAFETY: the caller's contract.
    stream_write(fd, unsafe { slice(buf, n) }, flags)
}

/// Whether a send with destination `addr` on `fd` is the server's: one of its sockets, or
/// an undecided UDP socket that this send decides for it.
///
/// # Safety
/// `addr` null or valid for `len` bytes.
pub(crate) unsafe fn ours_to_send(fd: c_int, addr: *const sockaddr, len: socklen_t) -> bool {
    match table::marked(fd) {
        Mark::Shmnet => true,
        // `decide_by_send` leaves anything but an undecided UDP socket alone.
        Mark::Undecided if !addr.is_null() => {
            // SAFETY: the caller's contract.
            udp::decide_by_send(fd, unsafe { net::read_v4(addr, len) })
        }
        _ => false,
    }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    // SAFETY: the caller's contract.
    if !unsafe { ours_to_send(fd, addr, len) } {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::sendto(fd, buf, n, flags, addr, len) };
    }
    if table::datagram(fd) {
        // SAFETY: the caller's contract.
        return match unsafe { udp::destination(addr, len) } {
            // SAFETY: the caller's contract.
            Ok(to) => udp_send(fd, unsafe { slice(buf, n) }, to, flags),
            Err(e) => fail(e),
        };
    }
    // A connected stream ignores a destination, as Linux's TCP does.
    // SAFETY: the caller's contract.
    stream_write(fd, unsafe { slice(buf, n) }, flags)
}

/// `sendmsg` on one of the server's sockets.
///
/// # Safety
/// `msg` null or a valid msghdr whose buffers are valid.
pub(crate) unsafe fn sendmsg_ours(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if msg.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller's contract: `msg` is a valid msghdr.
    let m = unsafe { &*msg };
    if table::datagram(fd) {
        // SAFETY: the caller's contract: `msg_name` holds `msg_namelen` bytes.
        let to = match unsafe { udp::destination(m.msg_name.cast_const().cast(), m.msg_namelen) } {
            Ok(to) => to,
            Err(e) => return fail(e),
        };
        // SAFETY: the caller's contract covers the iovecs.
        return unsafe {
            with_gather(m.msg_iov, m.msg_iovlen as c_int, |d| {
                udp_send(fd, d, to, flags)
            })
        };
    }
    // SAFETY: the caller's contract covers the iovecs.
    unsafe { stream_writev(fd, m.msg_iov, m.msg_iovlen as c_int, flags) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's contract: `msg`, if not null, is a valid msghdr.
    let (name, namelen) = unsafe { msg.as_ref() }.map_or((std::ptr::null(), 0), |m| {
        (m.msg_name.cast_const().cast(), m.msg_namelen)
    });
    // SAFETY: the caller's contract.
    if !unsafe { ours_to_send(fd, name, namelen) } {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    // SAFETY: the caller's contract.
    unsafe { sendmsg_ours(fd, msg, flags) }
}

#[cfg(test)]
mod tests {
    use super::{GATHER_LIMIT, write_gathered};

    /// Runs `write_gathered` over `parts` with a writer that takes at most `take[i]` bytes
    /// on its i-th call (all, past the list); returns the result and each call's length.
    fn gathered(parts: &[&[u8]], take: &[isize]) -> (isize, Vec<usize>) {
        let mut calls = Vec::new();
        let mut scratch = Vec::new();
        let r = write_gathered(parts.iter().copied(), &mut scratch, |d, _| {
            let t = take.get(calls.len()).copied().unwrap_or(isize::MAX);
            calls.push(d.len());
            if t < 0 { t } else { t.min(d.len() as isize) }
        });
        (r, calls)
    }

    #[test]
    fn small_buffers_go_as_one_write() {
        assert_eq!(
            gathered(&[b"VALUE k 0 10\r\n", b"vvvvvvvvvv\r\nEND\r\n"], &[]),
            (31, vec![31])
        );
        assert_eq!(gathered(&[b"", b"abc", b""], &[]), (3, vec![3]));
        assert_eq!(gathered(&[], &[]), (0, vec![]));
    }

    #[test]
    fn large_buffers_are_written_where_they_lie_between_gathered_runs() {
        let big = vec![7u8; GATHER_LIMIT + 1];
        let half = vec![1u8; GATHER_LIMIT / 2 + 1];
        let (r, calls) = gathered(&[b"head", &big, b"tail", &half, &half], &[]);
        assert_eq!(r as usize, 8 + big.len() + 2 * half.len());
        assert_eq!(calls, vec![4, big.len(), 4 + half.len(), half.len()]);
    }

    #[test]
    fn a_short_or_failed_write_ends_the_call() {
        let big = vec![7u8; GATHER_LIMIT + 1];
        // Taken in part: what was taken, and no further call.
        assert_eq!(
            gathered(&[b"ab", &big, b"cd"], &[2, 10]),
            (12, vec![2, big.len()])
        );
        // A failure after some bytes: those bytes; before any: the failure.
        assert_eq!(gathered(&[b"ab", &big], &[2, -1]), (2, vec![2, big.len()]));
        assert_eq!(gathered(&[b"ab", &big], &[-1]), (-1, vec![2]));
    }
}
