//! Making, naming, connecting and closing sockets: `socket`, `bind`, `listen`, `accept`,
//! `accept4`, `connect`, `shutdown`, `close`, `getsockname`, `getpeername`.

use libc::{c_int, sockaddr, socklen_t};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use crate::config::debug;
use crate::net::{self, Call};
use crate::table::{self, Mark, NoServer, Opts, Sock};
use crate::{fail, guarded, real, wait};

/// How long a `connect` waits for the handshake (the kernel gives up after about two
/// minutes of SYN retries; a program that wants less sets an alarm or uses its own
/// timeout).
const CONNECT_PATIENCE: Duration = Duration::from_secs(75);

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::socket(domain, ty, proto) };
    let inet = domain == libc::AF_INET || domain == libc::AF_INET6;
    let tcp = inet && ty & 0xf == libc::SOCK_STREAM && (proto == 0 || proto == libc::IPPROTO_TCP);
    let udp = inet
        && ty & 0xf == libc::SOCK_DGRAM
        && (proto == 0 || proto == libc::IPPROTO_UDP)
        && !crate::config::get().kernel_udp;
    if fd < 0 || !(tcp || udp) || fd as usize >= table::MAX_FD {
        return fd;
    }
    guarded(|| {
        let mut st = table::lock();
        let taken = if udp {
            crate::udp::adopt(
                &mut st,
                fd,
                domain == libc::AF_INET6,
                ty & libc::SOCK_NONBLOCK != 0,
            )
        } else {
            st.client().map(drop)
        };
        match taken {
            Ok(()) if udp => fd,
            Ok(()) => {
                st.adopt(
                    fd,
                    Opts {
                        v6: domain == libc::AF_INET6,
                        nonblock: ty & libc::SOCK_NONBLOCK != 0,
                        ..Opts::default()
                    },
                );
                debug!(
                    "socket() = {fd}: TCP, the server's if bound or connected to its IPv4 addresses"
                );
                fd
            }
            Err(NoServer::Fallback) => fd,
            Err(NoServer::Fail) => {
                // SAFETY: closes the socket made above, which the program never saw.
                unsafe { real::close(fd) };
                fail(libc::ENETDOWN)
            }
        }
    })
}

/// The mark of `fd` for a call that may decide an undecided socket. (A forked child decides
/// its inherited undecided sockets on its own client, as any other.)
fn decidable_mark(fd: c_int) -> Mark {
    table::marked(fd)
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    match decidable_mark(fd) {
        // SAFETY: the caller's arguments, passed on.
        Mark::NotOurs | Mark::Epoll => return unsafe { real::bind(fd, addr, len) },
        Mark::Shmnet => return fail(libc::EINVAL),
        Mark::Undecided => {}
    }
    // SAFETY: the caller's contract covers `addr` for `len` bytes.
    let at = unsafe { net::read_v4(addr, len) };
    guarded(|| {
        let mut st = table::lock();
        let v6only = st.sock(fd).is_some_and(|s| s.opts().v6_only());
        let udp = st.sock(fd).is_some_and(|s| s.opts().udp);
        // A UDP socket bound to a group hears that group on the server's interface.
        let ours = at.filter(|a| {
            !v6only
                && (a.ip().is_unspecified()
                    || st.server_address().is_some_and(|s| s == *a.ip())
                    || (udp && a.ip().is_multicast()))
        });
        let Some(a) = ours else {
            st.hand_to_kernel(fd);
            drop(st);
            debug!("bind({fd}, {at:?}): the kernel's");
            // SAFETY: the caller's arguments, passed on.
            return unsafe { real::bind(fd, addr, len) };
        };
        if st.sock(fd).is_some_and(|s| s.opts().udp) {
            // A UDP socket receives from its bind on: the server's now.
            return crate::udp::bind(&mut st, fd, a);
        }
        if let Some(Sock::Undecided { bound, .. }) = st.sock_mut(fd) {
            *bound = Some(a);
        }
        debug!("bind({fd}, {a}): noted for the server");
        0
    })
}

/// Puts an eventfd in place of the kernel socket at `fd` (same number, same close-on-exec
/// and non-blocking flags); the kernel socket is closed by it.
pub(crate) fn take_number(fd: c_int, nonblock: bool) -> Result<(), c_int> {
    // SAFETY: fcntl(F_GETFD) on a descriptor the program owns.
    let fdflags = unsafe { real::fcntl(fd, libc::F_GETFD, 0) };
    let cloexec = fdflags >= 0 && fdflags & libc::FD_CLOEXEC != 0;
    let mut flags = libc::EFD_CLOEXEC;
    if nonblock {
        flags |= libc::EFD_NONBLOCK;
    }
    // SAFETY: eventfd takes no pointers.
    let ev = unsafe { libc::eventfd(0, flags) };
    if ev < 0 {
        return Err(libc::EMFILE);
    }
    // SAFETY: dup3 onto the program's own descriptor number, closing its kernel socket.
    let r = unsafe { real::dup3(ev, fd, if cloexec { libc::O_CLOEXEC } else { 0 }) };
    // SAFETY: closes the eventfd made above (its copy at `fd` stays).
    unsafe { real::close(ev) };
    if r < 0 {
        return Err(libc::EBADF);
    }
    Ok(())
}

/// The options noted on an undecided socket, applied to a stream of the server's.
fn apply(s: &mut shmnet_io::client::TcpStream, o: &Opts) {
    if o.nodelay {
        let _ = s.set_nodelay(true);
    }
    if o.keepalive {
        let _ = s.set_keepalive(true);
    }
    if let Some(b) = o.sndbuf {
        let _ = s.set_send_buffer(b);
    }
    if let Some(b) = o.rcvbuf {
        let _ = s.set_recv_buffer(b);
    }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    match decidable_mark(fd) {
        // SAFETY: the caller's arguments, passed on.
        Mark::NotOurs | Mark::Epoll => return unsafe { real::listen(fd, backlog) },
        // Listening already, as a second listen(2) — unless `shutdown` stopped it.
        Mark::Shmnet if !stopped_listening(fd) => return 0,
        Mark::Shmnet | Mark::Undecided => {}
    }
    guarded(|| {
        let mut st = table::lock();
        let (opts, bound) = match st.sock(fd) {
            Some(Sock::Undecided { opts, bound }) => (*opts, *bound),
            _ => return fail(libc::EBADF),
        };
        let port = bound.map_or(0, |b| b.port());
        let backlog = backlog.clamp(1, 4096) as u32;
        let listened = match st.client() {
            Ok(client) => client.tcp_listen(port, backlog),
            Err(_) => return fail(libc::ENETDOWN),
        };
        let l = match listened {
            Ok(l) => l,
            Err(e) => return fail(net::errno_of(&e, Call::Listen)),
        };
        if let Some(b) = opts.rcvbuf {
            let _ = l.set_recv_buffer(b);
        }
        if let Some(b) = opts.sndbuf {
            let _ = l.set_send_buffer(b);
        }
        if let Err(e) = take_number(fd, opts.nonblock) {
            return fail(e);
        }
        let addr = SocketAddrV4::new(bound.map_or(Ipv4Addr::UNSPECIFIED, |b| *b.ip()), l.port());
        debug!("listen({fd}) on the server's {addr}");
        st.install(fd, Sock::Listener { l, addr, opts });
        0
    })
}

/// Whether the server's socket `fd` is a listener that `shutdown` stopped (left bound,
/// [`shutdown_listener`]).
fn stopped_listening(fd: c_int) -> bool {
    crate::caught(
        || matches!(table::lock().sock(fd), Some(Sock::Undecided { .. })),
        || false,
    )
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { accept4(fd, addr, len, 0) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::accept4(fd, addr, len, flags) };
    }
    if table::orphaned(fd) {
        return fail(libc::EBADF);
    }
    let mut blocking = wait::Blocking::new(fd, wait::Way::In);
    guarded(|| {
        loop {
            let mut st = table::lock();
            let (got, lopts, laddr) = match st.sock(fd) {
                Some(Sock::Listener { l, opts, addr }) => (l.try_accept(), *opts, *addr),
                _ => return fail(libc::EINVAL),
            };
            st.note_moves();
            match got {
                Ok(Some(s)) => {
                    let mut ev_flags = 0;
                    if flags & libc::SOCK_CLOEXEC != 0 {
                        ev_flags |= libc::EFD_CLOEXEC;
                    }
                    if flags & libc::SOCK_NONBLOCK != 0 {
                        ev_flags |= libc::EFD_NONBLOCK;
                    }
                    // SAFETY: eventfd takes no pointers.
                    let nfd = unsafe { libc::eventfd(0, ev_flags) };
                    if nfd < 0 || nfd as usize >= table::MAX_FD {
                        if nfd >= 0 {
                            // SAFETY: our own new descriptor.
                            unsafe { real::close(nfd) };
                        }
                        drop(s.abort());
                        return fail(libc::EMFILE);
                    }
                    let peer = s.peer_addr();
                    let local = SocketAddrV4::new(
                        st.server_address().unwrap_or(*laddr.ip()),
                        s.local_port(),
                    );
                    // SAFETY: the caller's contract covers `addr` and `len`.
                    unsafe { net::write_v4(peer, lopts.v6, addr, len) };
                    debug!("accept({fd}) = {nfd}: {peer}");
                    // As Linux's accepted sockets (cloned from the listener), it inherits
                    // the listener's options but `O_NONBLOCK` (memcached sets `TCP_NODELAY`
                    // on its listener only). The buffer sizes its connection took from the
                    // server's listener already; the rest are applied as on any stream.
                    let opts = Opts {
                        nonblock: flags & libc::SOCK_NONBLOCK != 0,
                        ..lopts
                    };
                    let mut s = s;
                    apply(
                        &mut s,
                        &Opts {
                            sndbuf: None,
                            rcvbuf: None,
                            ..opts
                        },
                    );
                    st.install(nfd, Sock::stream(s, local, opts, false));
                    return nfd;
                }
                Ok(None) if lopts.nonblock => {
                    st.drained(fd, libc::EPOLLIN as u32);
                    return fail(libc::EAGAIN);
                }
                Ok(None) => {}
                Err(e) => return fail(net::errno_of(&e, Call::Other)),
            }
            drop(st);
            if let Err(e) = blocking.wait() {
                return fail(e);
            }
        }
    })
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    match decidable_mark(fd) {
        // SAFETY: the caller's arguments, passed on.
        Mark::NotOurs | Mark::Epoll => return unsafe { real::connect(fd, addr, len) },
        Mark::Shmnet if table::datagram(fd) => {
            // SAFETY: the caller's contract covers `addr` for `len` bytes.
            return unsafe { crate::udp::reconnect(fd, addr, len) };
        }
        // Again on a connection of the server's: as Linux, where its handshake stands.
        Mark::Shmnet => {
            return match crate::guarded_result(|| handshake(fd)) {
                Ok(true) if reported_connected(fd) => 0,
                Ok(true) => fail(libc::EISCONN),
                Ok(false) => fail(libc::EALREADY),
                Err(e) => fail(e),
            };
        }
        Mark::Undecided => {}
    }
    // SAFETY: the caller's contract covers `addr` for `len` bytes.
    let to = unsafe { net::read_v4(addr, len) };
    guarded(|| {
        let mut st = table::lock();
        let v6only = st.sock(fd).is_some_and(|s| s.opts().v6_only());
        let Some(to) = to.filter(|a| !v6only && !net::kernels(*a.ip(), st.server_address())) else {
            st.hand_to_kernel(fd);
            drop(st);
            debug!("connect({fd}, {to:?}): the kernel's");
            // SAFETY: the caller's arguments, passed on.
            return unsafe { real::connect(fd, addr, len) };
        };
        let opts = match st.sock(fd) {
            Some(Sock::Undecided { opts, .. }) => *opts,
            _ => return fail(libc::EBADF),
        };
        if opts.udp {
            return crate::udp::connect_undecided(&mut st, fd, to);
        }
        // The handshake goes on in the server: a non-blocking socket says EINPROGRESS, a
        // blocking one waits below with the lock let go.
        let started = match st.client() {
            Ok(client) => client.tcp_connect_start(to),
            Err(_) => return fail(libc::ENETDOWN),
        };
        let mut s = match started {
            Ok(s) => s,
            Err(e) => {
                debug!("connect({fd}, {to}) failed: {e}");
                return fail(net::errno_of(&e, Call::Connect));
            }
        };
        apply(&mut s, &opts);
        if let Err(e) = take_number(fd, opts.nonblock) {
            return fail(e);
        }
        let local = SocketAddrV4::new(
            st.server_address().unwrap_or(Ipv4Addr::UNSPECIFIED),
            s.local_port(),
        );
        debug!("connect({fd}, {to}) through the server from {local}");
        st.install(fd, Sock::stream(s, local, opts, opts.nonblock));
        st.note_moves();
        if opts.nonblock {
            return fail(libc::EINPROGRESS);
        }
        drop(st);
        await_handshake(fd, to)
    })
}

/// A blocking `connect`: waits (the lock let go, so the program's other threads go on)
/// until the handshake of the server's connection `fd` ends, for [`CONNECT_PATIENCE`] at
/// most. 0, or -1 with the failure's `errno`.
fn await_handshake(fd: c_int, to: SocketAddrV4) -> c_int {
    let deadline = std::time::Instant::now() + CONNECT_PATIENCE;
    loop {
        match handshake(fd) {
            Ok(true) => {
                debug!("connect({fd}, {to}): connected");
                return 0;
            }
            Ok(false) => {}
            Err(e) => {
                debug!("connect({fd}, {to}) failed (errno {e})");
                return fail(e);
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return fail(libc::ETIMEDOUT);
        }
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        }];
        // A signal ends the wait with EINTR, as the kernel's connect; the handshake goes on.
        if wait::poll_mixed(&mut p, Some(left)) < 0 {
            return -1;
        }
    }
}

/// Where the handshake of the server's connection `fd` stands: done (`true`), going on
/// (`false`), or failed (`Err(errno)`).
pub(crate) fn handshake(fd: c_int) -> Result<bool, c_int> {
    let mut st = table::lock();
    let r = match st.sock_mut(fd) {
        Some(Sock::Stream { s, .. }) => s.connected().map_err(|e| net::errno_of(&e, Call::Connect)),
        Some(_) => Ok(true),
        None => Err(libc::EBADF),
    };
    st.note_moves();
    r
}

/// Whether `fd` is a connection whose non-blocking `connect` has not yet been answered 0
/// by a later `connect`; it has now.
fn reported_connected(fd: c_int) -> bool {
    crate::caught(
        || match table::lock().sock_mut(fd) {
            Some(Sock::Stream { in_progress, .. }) => std::mem::replace(in_progress, false),
            _ => false,
        },
        || false,
    )
}

/// Forgets descriptor `fd` before the kernel closes it: an epoll instance's watches; a
/// duplicate of the server's socket; or the socket itself, whose connection is closed
/// (`close(2)` on the last descriptor of a TCP socket).
pub(crate) fn forget(fd: c_int) {
    if table::orphaned(fd) {
        // A socket this forked child could not take from its parent: forgotten.
        table::forget_orphan(fd);
        return;
    }
    match table::marked(fd) {
        Mark::NotOurs => {}
        Mark::Epoll => {
            guarded(|| {
                table::lock().forget_epoll(fd);
                0
            });
        }
        Mark::Undecided | Mark::Shmnet => {
            let mut lingering = None;
            guarded(|| {
                let mut st = table::lock();
                if st.close_duplicate(fd) {
                    debug!("close({fd}): a duplicate");
                    return 0;
                }
                let sock = st.release(fd);
                {
                    match sock {
                        // SO_LINGER of zero: Linux's abortive close, a reset.
                        Some(Sock::Stream { s, opts, .. }) if opts.linger == Some(0) => {
                            drop(s.abort())
                        }
                        // SO_LINGER with a time: waited for below, with the lock let go.
                        Some(Sock::Stream {
                            s,
                            opts:
                                table::Opts {
                                    linger: Some(secs), ..
                                },
                            ..
                        }) => {
                            lingering = s
                                .start_close_linger()
                                .ok()
                                .map(|l| (l, Duration::from_secs(secs.into())));
                        }
                        Some(Sock::Stream { s, .. }) => drop(s.close()),
                        Some(Sock::Listener { l, .. }) => drop(l.close()),
                        Some(Sock::Udp(u)) => crate::udp::leave(&mut st, fd, &u),
                        _ => {}
                    }
                    st.note_moves();
                }
                debug!("close({fd})");
                0
            });
            if let Some((l, time)) = lingering {
                guarded(|| {
                    linger(fd, l, time);
                    0
                });
            }
        }
    }
}

/// How long a lingering close sleeps between looks (the server's release of the socket
/// wakes nobody in particular: the client's wake-up belongs to whichever thread waits).
const LINGER_NAP: Duration = Duration::from_millis(1);

/// Waits, at most `time`, for the peer to acknowledge everything written to `fd` and its
/// end (`SO_LINGER` with a time: Linux's `close` blocks the same way), looking with the
/// state's lock held and sleeping without it, so the program's other threads go on. A
/// time that runs out leaves the connection closing in the server; either way `close`
/// returns 0, as Linux's does.
fn linger(fd: c_int, l: shmnet_io::client::LingeringClose, time: Duration) {
    let deadline = Instant::now() + time;
    // Declared before every guard of the lock, so dropped after it on a panic too.
    let mut l = DropLocked(Some(l));
    let outcome = loop {
        let mut st = table::lock();
        let Some(lc) = l.0.as_mut() else {
            break None;
        };
        let looked = lc.poll();
        st.note_moves();
        match looked {
            Ok(Some(outcome)) => {
                drop(l.0.take());
                drop(st);
                break Some(outcome);
            }
            Ok(None) if Instant::now() < deadline => drop(st),
            Ok(None) | Err(_) => {
                drop(l.0.take());
                drop(st);
                break None;
            }
        }
        std::thread::sleep(LINGER_NAP);
    };
    debug!("close({fd}): lingered, {outcome:?}");
}

/// A lingering close that is dropped with the state's lock held, however its owner ends:
/// it shares the client, which only the lock's holder may touch. (Its owner takes it out
/// and drops it under the lock it already holds; this drop, which takes the lock, is for
/// an unwinding panic, after the owner's guard is gone.)
struct DropLocked(Option<shmnet_io::client::LingeringClose>);

impl Drop for DropLocked {
    fn drop(&mut self) {
        if let Some(l) = self.0.take() {
            let _st = table::lock();
            drop(l);
        }
    }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if !table::borrowed_for(fd) {
        forget(fd);
    }
    // SAFETY: the caller's descriptor, passed on (the eventfd holding a shmnet socket's
    // number, or the kernel's own).
    unsafe { real::close(fd) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if table::marked(fd) != Mark::Shmnet {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::shutdown(fd, how) };
    }
    if table::orphaned(fd) {
        return fail(libc::EBADF);
    }
    guarded(|| {
        let mut st = table::lock();
        if matches!(st.sock(fd), Some(Sock::Listener { .. })) {
            return shutdown_listener(&mut st, fd, how);
        }
        let Some(Sock::Stream {
            s,
            shut_rd,
            shut_wr,
            ..
        }) = st.sock_mut(fd)
        else {
            return fail(libc::ENOTCONN);
        };
        if how == libc::SHUT_RD || how == libc::SHUT_RDWR {
            *shut_rd = true;
        }
        if (how == libc::SHUT_WR || how == libc::SHUT_RDWR) && !*shut_wr {
            *shut_wr = true;
            if let Err(e) = s.shutdown() {
                return fail(net::errno_of(&e, Call::Other));
            }
        }
        st.note_moves();
        0
    })
}

/// `shutdown` of listener `fd`, as Linux's: with `SHUT_RD` (or `SHUT_RDWR`) it stops
/// listening — the server's listener closes, resetting connections not yet accepted, and
/// every thread blocked in its `accept` wakes to `EINVAL` — and the socket is left bound,
/// so `listen` may take it again; `SHUT_WR` alone changes nothing.
fn shutdown_listener(st: &mut table::State, fd: c_int, how: c_int) -> c_int {
    if how != libc::SHUT_RD && how != libc::SHUT_RDWR {
        return if how == libc::SHUT_WR {
            0
        } else {
            fail(libc::EINVAL)
        };
    }
    let Some(Sock::Listener { l, addr, opts }) = st.release(fd) else {
        return fail(libc::ENOTCONN);
    };
    drop(l.close());
    st.install(
        fd,
        Sock::Undecided {
            opts,
            bound: Some(addr),
        },
    );
    // The accepts asleep on it look again, and find no listener.
    st.wake_sleepers();
    st.note_moves();
    debug!("shutdown({fd}): stopped listening on {addr}");
    0
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let named = match table::marked(fd) {
        Mark::NotOurs => None,
        _ => crate::caught(
            || {
                let st = table::lock();
                let sock = st.sock(fd)?;
                let at = match sock {
                    Sock::Listener { addr, .. } => Some(*addr),
                    Sock::Stream { local, .. } => Some(*local),
                    Sock::Undecided { bound, .. } => *bound,
                    // Connected: the address it sends from; else the one it was bound to.
                    Sock::Udp(u) => Some(SocketAddrV4::new(
                        match u.peer {
                            Some(_) => st.server_address().unwrap_or(u.ip),
                            None => u.ip,
                        },
                        u.port,
                    )),
                };
                at.map(|a| (a, sock.opts().v6))
            },
            || None,
        ),
    };
    match named {
        Some((a, v6)) => {
            // SAFETY: the caller's contract covers `addr` and `len`.
            unsafe { net::write_v4(a, v6, addr, len) };
            0
        }
        // SAFETY: the caller's arguments, passed on.
        None => unsafe { real::getsockname(fd, addr, len) },
    }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match table::marked(fd) {
        // SAFETY: the caller's arguments, passed on.
        Mark::NotOurs | Mark::Undecided | Mark::Epoll => unsafe {
            real::getpeername(fd, addr, len)
        },
        Mark::Shmnet => guarded(|| {
            let st = table::lock();
            match st.sock(fd) {
                Some(Sock::Stream { s, opts, .. }) => {
                    // SAFETY: the caller's contract covers `addr` and `len`.
                    unsafe { net::write_v4(s.peer_addr(), opts.v6, addr, len) };
                    0
                }
                Some(Sock::Udp(u)) if u.peer.is_some() => {
                    let peer = u
                        .peer
                        .unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
                    // SAFETY: the caller's contract covers `addr` and `len`.
                    unsafe { net::write_v4(peer, u.opts.v6, addr, len) };
                    0
                }
                _ => fail(libc::ENOTCONN),
            }
        }),
    }
}
