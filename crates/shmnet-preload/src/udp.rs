//! UDP sockets on the server: datagrams in and out of a program's `AF_INET` (and
//! dual-stack `AF_INET6`) UDP sockets, carried by the client API's [`UdpSocket`].
//!
//! A UDP socket is decided by its first `bind` (to any address or the server's: the
//! server's; else the kernel's), `connect` (off loopback: the server's, on a port it picks)
//! or `sendto` with a destination (the same rule as `connect`). A socket the server takes
//! gets its number held by an eventfd, as a TCP socket does ([`crate::sockets`]).
//!
//! **Ports shared within the program.** The server binds one socket per port. Programs
//! bind several to one port with `SO_REUSEADDR`/`SO_REUSEPORT` — iperf3's server connects
//! its listening UDP socket to the client it heard from and binds a new one beside it —
//! and expect each datagram to reach the most specific socket: the one connected to its
//! sender, else one not connected. So the library keeps one server socket per port
//! ([`UdpPort`]) and its members; while a port has one member, datagrams go from the
//! server's buffers straight into the program's (one copy, no allocation); while it has
//! several, each datagram is copied once into the queue of the member it is for
//! ([`route`]). A connected socket drops datagrams from anyone but its peer, as Linux's.
//!
//! `MSG_PEEK` and `FIONREAD` look at the next datagram through the socket's own queue
//! (the datagram is moved there and stays until read).
//!
//! **ICMP errors.** The server tells the client of the hard ICMP errors its datagrams draw
//! (`UdpSocket::take_error`); they are handed to the members connected to the datagram's
//! destination ([`collect_errors`]) and dropped for the others, as Linux without
//! `IP_RECVERR` tells an unconnected socket nothing. A member's pending error (the latest,
//! as Linux's `sk_err`) is what its next `recv` or `send` fails with, `POLLERR` in a wait,
//! and `SO_ERROR`, each of which clears it.

use libc::{c_int, sockaddr, socklen_t, ssize_t};
use shmnet_io::client::{ClientError, Lent, UdpSocket};
use shmnet_io::windows::TcpFailure;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::config::debug;
use crate::net::{self, Call};
use crate::table::{self, NoServer, Opts, Sock, State};
use crate::{fail, guarded, wait};

/// Bytes a socket's own queue holds at most (datagrams past it are dropped, as a full
/// receive buffer drops them); Linux's default `SO_RCVBUF` is about this.
const QUEUE_BYTES: usize = 4 << 20;

/// A datagram moved off the server's socket into a member's queue.
#[derive(Debug)]
pub(crate) struct Datagram {
    data: Vec<u8>,
    from: SocketAddrV4,
}

/// One of the program's UDP sockets that the server carries.
#[derive(Debug)]
pub(crate) struct UdpSock {
    /// The server's port it is bound to (a key of `State::udp_ports`).
    pub(crate) port: u16,
    /// The address it was bound to: any (`0.0.0.0`) or the server's.
    pub(crate) ip: Ipv4Addr,
    /// Where `connect` pointed it: the default destination, and the only sender heard.
    pub(crate) peer: Option<SocketAddrV4>,
    pub(crate) opts: Opts,
    /// Datagrams moved here for it: by [`route`] while its port is shared, or by a peek.
    queue: VecDeque<Datagram>,
    queued_bytes: usize,
    /// The errno of an ICMP error about a datagram to `peer`, not reported yet.
    pub(crate) error: Option<c_int>,
}

impl UdpSock {
    /// Whether a datagram waits in its own queue.
    pub(crate) fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// The server's socket for one port, and the program's sockets bound to it.
pub(crate) struct UdpPort {
    pub(crate) u: UdpSocket,
    /// The descriptors (the keys of `State::socks`) of the sockets on this port.
    pub(crate) members: Vec<c_int>,
    /// The groups the server socket joined, each with how many members joined it
    /// ([`crate::multicast`]; never zero).
    pub(crate) groups: Vec<(Ipv4Addr, u32)>,
}

/// What one receive found: bytes copied, the datagram's whole length, its sender.
#[derive(Clone, Copy, Debug)]
struct Received {
    copied: usize,
    len: usize,
    from: SocketAddrV4,
}

/// The buffers a receive scatters into (`recvmsg`'s iovecs, or one buffer).
pub(crate) type Scatter<'a> = [&'a mut [u8]];

/// Copies `src` into `bufs` in order; returns how many bytes fit.
fn scatter_slice(mut src: &[u8], bufs: &mut Scatter<'_>, at: &mut (usize, usize)) -> usize {
    let mut copied = 0;
    while !src.is_empty() && at.0 < bufs.len() {
        let buf = &mut bufs[at.0];
        let n = src.len().min(buf.len() - at.1);
        buf[at.1..at.1 + n].copy_from_slice(&src[..n]);
        copied += n;
        src = &src[n..];
        at.1 += n;
        if at.1 == buf.len() {
            *at = (at.0 + 1, 0);
        }
    }
    copied
}

fn scatter_lent(d: &Lent<'_>, bufs: &mut Scatter<'_>) -> Received {
    let mut at = (0, 0);
    let copied = d.segments().map(|s| scatter_slice(s, bufs, &mut at)).sum();
    Received {
        copied,
        len: d.len(),
        from: d.source(),
    }
}

/// Makes the server's socket for `fd` (an undecided UDP socket) on `at`'s port (0: one the
/// server picks), or joins the program's socket already there (which both must allow with
/// `SO_REUSEADDR`/`SO_REUSEPORT`), and installs it. `Err(errno)` leaves `fd` undecided.
fn take(st: &mut State, fd: c_int, at: SocketAddrV4) -> Result<(), c_int> {
    let opts = match st.sock(fd) {
        Some(Sock::Undecided { opts, .. }) => *opts,
        _ => return Err(libc::EINVAL),
    };
    let port = at.port();
    let joined = port != 0 && st.udp_ports.contains_key(&port);
    if joined {
        let all_reuse = opts.reuse
            && st.udp_ports[&port]
                .members
                .iter()
                .all(|m| matches!(st.socks.get(m), Some(Sock::Udp(u)) if u.opts.reuse));
        if !all_reuse {
            return Err(libc::EADDRINUSE);
        }
    } else {
        let bound = match st.client() {
            Ok(c) => c.udp_bind(port),
            Err(_) => return Err(libc::ENETDOWN),
        };
        let u = bound.map_err(|e| net::errno_of(&e, Call::Listen))?;
        let port = u.port();
        if let Err(e) = crate::sockets::take_number(fd, opts.nonblock) {
            drop(u.close());
            return Err(e);
        }
        st.udp_ports.insert(
            port,
            UdpPort {
                u,
                members: vec![fd],
                groups: Vec::new(),
            },
        );
        install(st, fd, port, *at.ip(), opts);
        crate::multicast::adopt(st, fd, port, opts.multicast);
        return Ok(());
    }
    crate::sockets::take_number(fd, opts.nonblock)?;
    if let Some(p) = st.udp_ports.get_mut(&port) {
        p.members.push(fd);
    }
    install(st, fd, port, *at.ip(), opts);
    crate::multicast::adopt(st, fd, port, opts.multicast);
    Ok(())
}

fn install(st: &mut State, fd: c_int, port: u16, ip: Ipv4Addr, opts: Opts) {
    debug!("UDP socket {fd} on the server's port {port}");
    st.install(
        fd,
        Sock::Udp(UdpSock {
            port,
            ip,
            peer: None,
            opts,
            queue: VecDeque::new(),
            queued_bytes: 0,
            error: None,
        }),
    );
}

/// `fd`'s socket (key `key`, `u`) is closed: it leaves its port (and its groups), whose
/// server socket closes with its last member.
pub(crate) fn leave(st: &mut State, key: c_int, u: &UdpSock) {
    let port = u.port;
    crate::multicast::depart(st, port, &u.opts.multicast);
    let last = st.udp_ports.get_mut(&port).is_some_and(|p| {
        p.members.retain(|&m| m != key);
        p.members.is_empty()
    });
    if last && let Some(p) = st.udp_ports.remove(&port) {
        drop(p.u.close());
    }
}

/// The socket once at `old` lives on at `heir` (its first descriptor closed while a
/// duplicate lives): its port's member list follows.
pub(crate) fn renamed(st: &mut State, old: c_int, heir: c_int) {
    if let Some(Sock::Udp(u)) = st.socks.get(&heir)
        && let Some(p) = st.udp_ports.get_mut(&u.port)
    {
        for m in p.members.iter_mut().filter(|m| **m == old) {
            *m = heir;
        }
    }
}

/// `bind` of an undecided UDP socket to `at`, an address the server serves.
pub(crate) fn bind(st: &mut State, fd: c_int, at: SocketAddrV4) -> c_int {
    match take(st, fd, at) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// `connect` of an undecided UDP socket to `to`, off loopback: the server's, on a port it
/// picks, pointed at `to`.
pub(crate) fn connect_undecided(st: &mut State, fd: c_int, to: SocketAddrV4) -> c_int {
    let broadcast_ok = st.sock(fd).is_some_and(|s| s.opts().broadcast);
    if broadcast_refused(st, broadcast_ok, *to.ip()) {
        return fail(libc::EACCES);
    }
    if let Err(e) = take(st, fd, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)) {
        return fail(e);
    }
    if let Some(Sock::Udp(u)) = st.sock_mut(fd) {
        u.peer = Some(to);
    }
    debug!("connect({fd}, {to}): UDP through the server");
    0
}

/// `connect` of the server's UDP socket `fd`: a new peer, or none (`AF_UNSPEC`).
///
/// # Safety
/// `addr` null or valid for `len` bytes.
pub(crate) unsafe fn reconnect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let unspec = !addr.is_null()
        && len as usize >= std::mem::size_of::<libc::sa_family_t>()
        // SAFETY: the caller's contract: at least a family's bytes.
        && unsafe { std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>()) } as c_int
            == libc::AF_UNSPEC;
    // SAFETY: the caller's contract.
    let to = unsafe { net::read_v4(addr, len) };
    guarded(|| {
        let mut st = table::lock();
        let server = st.server_address();
        let broadcast_ok = matches!(st.sock(fd), Some(Sock::Udp(u)) if u.opts.broadcast);
        if to.is_some_and(|to| !unspec && broadcast_refused(&st, broadcast_ok, *to.ip())) {
            return fail(libc::EACCES);
        }
        let Some(Sock::Udp(u)) = st.sock_mut(fd) else {
            return fail(libc::EISCONN);
        };
        u.peer = match to {
            _ if unspec => None,
            Some(to) if !net::kernels(*to.ip(), server) && !to.ip().is_unspecified() => Some(to),
            _ => return fail(libc::ENETUNREACH),
        };
        debug!("connect({fd}, {:?}): UDP peer", u.peer);
        0
    })
}

/// Whether `ip` is a broadcast address of the server's subnet and the socket may not
/// reach it (`SO_BROADCAST` not set: Linux's `EACCES`).
fn broadcast_refused(st: &State, allowed: bool, ip: Ipv4Addr) -> bool {
    !allowed && matches!(&st.client, Some(Ok(c)) if c.is_broadcast(ip))
}

/// The errno a connected socket's call reports for an ICMP error.
fn errno_of_failure(f: TcpFailure) -> c_int {
    match f {
        TcpFailure::HostUnreachable => libc::EHOSTUNREACH,
        TcpFailure::NetUnreachable => libc::ENETUNREACH,
        _ => libc::ECONNREFUSED,
    }
}

/// Hands the ICMP errors the client holds for server port `p` to its members connected to
/// each error's destination (the newest error wins, as Linux's `sk_err`); the rest are
/// dropped. Costs one look while the port has none.
pub(crate) fn collect_errors(p: &UdpPort, socks: &mut table::Socks) {
    while let Some(e) = p.u.take_error() {
        let mut heard = false;
        for m in &p.members {
            if let Some(Sock::Udp(u)) = socks.get_mut(m)
                && u.peer == Some(e.peer)
            {
                u.error = Some(errno_of_failure(e.failure));
                heard = true;
            }
        }
        if !heard {
            debug!(
                "UDP port {}: {} from {} for no connected socket: dropped",
                p.u.port(),
                e.failure,
                e.peer
            );
        }
    }
}

/// Collects `fd`'s port's errors ([`collect_errors`]) and takes `fd`'s pending one.
pub(crate) fn take_error(st: &mut State, fd: c_int) -> Option<c_int> {
    let key = st.key(fd);
    let port = match st.socks.get(&key) {
        Some(Sock::Udp(u)) => u.port,
        _ => return None,
    };
    if let Some(p) = st.udp_ports.get(&port) {
        collect_errors(p, &mut st.socks);
    }
    match st.socks.get_mut(&key) {
        Some(Sock::Udp(u)) => u.error.take(),
        _ => None,
    }
}

/// The socket's next datagram, moved off the server's socket into queues: every waiting
/// one while the port is shared (each to the member it is for), else at most one (for a
/// peek). Datagrams nobody takes are dropped.
fn route(st: &mut State, port: u16, all: bool) -> Result<(), ClientError> {
    let State {
        socks, udp_ports, ..
    } = st;
    let Some(p) = udp_ports.get(&port) else {
        return Ok(());
    };
    loop {
        let got = p.u.try_recv_in_place(|d| {
            let mut data = vec![0; d.len()];
            let n = d.copy_to(&mut data);
            data.truncate(n);
            Datagram {
                data,
                from: d.source(),
            }
        })?;
        let Some(dg) = got else { return Ok(()) };
        let member = |want_peer: bool| {
            p.members.iter().copied().find(|m| match socks.get(m) {
                Some(Sock::Udp(u)) if want_peer => u.peer == Some(dg.from),
                Some(Sock::Udp(u)) => u.peer.is_none(),
                _ => false,
            })
        };
        let to = member(true).or_else(|| member(false));
        let took = match to.and_then(|m| socks.get_mut(&m)) {
            Some(Sock::Udp(u)) if u.queued_bytes + dg.data.len() <= QUEUE_BYTES => {
                u.queued_bytes += dg.data.len();
                u.queue.push_back(dg);
                true
            }
            _ => false,
        };
        if !took {
            debug!("UDP port {port}: a datagram for no socket, or a full queue: dropped");
        }
        if !all && took {
            return Ok(());
        }
    }
}

/// Takes (or with `peek`, copies) the next datagram of the server's UDP socket `fd`, if
/// one is there now.
fn try_take(
    st: &mut State,
    fd: c_int,
    bufs: &mut Scatter<'_>,
    peek: bool,
) -> Result<Option<Received>, c_int> {
    let (port, peer, queued) = match st.sock(fd) {
        Some(Sock::Udp(u)) => (u.port, u.peer, u.has_queued()),
        _ => return Err(libc::EBADF),
    };
    let shared = st.udp_ports.get(&port).is_some_and(|p| p.members.len() > 1);
    if !queued && !shared && !peek {
        // The fast path: from the server's buffers straight into the program's.
        let Some(p) = st.udp_ports.get(&port) else {
            return Err(libc::EBADF);
        };
        loop {
            let got = p.u.try_recv_in_place(|d| {
                // A connected socket hears only its peer.
                (peer.is_none() || peer == Some(d.source())).then(|| scatter_lent(d, bufs))
            });
            match got {
                Ok(Some(Some(r))) => return Ok(Some(r)),
                Ok(Some(None)) => continue,
                Ok(None) => return Ok(None),
                Err(e) => return Err(net::errno_of(&e, Call::Read)),
            }
        }
    }
    if !queued {
        route(st, port, shared).map_err(|e| net::errno_of(&e, Call::Read))?;
    }
    let Some(Sock::Udp(u)) = st.sock_mut(fd) else {
        return Err(libc::EBADF);
    };
    let Some(dg) = u.queue.front() else {
        return Ok(None);
    };
    let r = Received {
        copied: scatter_slice(&dg.data, bufs, &mut (0, 0)),
        len: dg.data.len(),
        from: dg.from,
    };
    if !peek {
        u.queued_bytes -= dg.data.len();
        u.queue.pop_front();
    }
    Ok(Some(r))
}

/// Moves waiting datagrams of shared ports among `fds` into their members' queues, so
/// that readiness can be told per socket ([`crate::wait`]).
pub(crate) fn route_shared(st: &mut State, fds: &[libc::pollfd]) {
    if !st.udp_ports.values().any(|p| p.members.len() > 1) {
        return;
    }
    for p in fds {
        let port = match st.sock(p.fd) {
            Some(Sock::Udp(u)) => u.port,
            _ => continue,
        };
        if st.udp_ports.get(&port).is_some_and(|p| p.members.len() > 1) {
            // A failure (the server gone) is reported by the look that follows.
            let _ = route(st, port, true);
        }
    }
}

/// A datagram received by [`recv`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Got {
    /// What the call returns: the bytes copied (with `MSG_TRUNC`, the whole length).
    pub(crate) n: usize,
    /// Whether the datagram was longer than the buffers (`msg_flags`' `MSG_TRUNC`).
    pub(crate) truncated: bool,
    pub(crate) from: SocketAddrV4,
    /// The socket is `AF_INET6`: the sender goes back as `::ffff:a.b.c.d`.
    pub(crate) v6: bool,
    /// `IP_PKTINFO` was set on the socket: the datagram's destination, the server's address
    /// (it carries only datagrams addressed to it), for a control message.
    pub(crate) pktinfo: Option<std::net::Ipv4Addr>,
}

impl Got {
    /// Writes the sender to `addr` (null: nothing), as `recvfrom(2)`.
    ///
    /// # Safety
    /// `addr` and `len` null or valid (`addr` for `*len` bytes).
    pub(crate) unsafe fn write_from(&self, addr: *mut sockaddr, len: *mut socklen_t) {
        // SAFETY: the caller's contract.
        unsafe { net::write_v4(self.from, self.v6, addr, len) };
    }
}

/// Receives one datagram on the server's UDP socket `fd` into `bufs`, as `recvmsg(2)` with
/// `flags` (`MSG_DONTWAIT`, `MSG_PEEK`, `MSG_TRUNC`).
pub(crate) fn recv(fd: c_int, bufs: &mut Scatter<'_>, flags: c_int) -> Result<Got, c_int> {
    if table::orphaned(fd) {
        return Err(libc::EBADF);
    }
    let mut blocking = wait::Blocking::new(fd, wait::Way::In);
    loop {
        let mut st = table::lock();
        let (nonblock, v6, pktinfo) = st.sock(fd).map_or((false, false, false), |s| {
            (s.opts().nonblock, s.opts().v6, s.opts().pktinfo)
        });
        let to = pktinfo.then(|| st.server_address()).flatten();
        // A pending error comes before any datagram, as on Linux.
        if let Some(e) = take_error(&mut st, fd) {
            return Err(e);
        }
        let got = try_take(&mut st, fd, bufs, flags & libc::MSG_PEEK != 0);
        st.note_moves();
        // The look may have brought one (reading the ring).
        if matches!(got, Ok(None))
            && let Some(e) = take_error(&mut st, fd)
        {
            return Err(e);
        }
        match got {
            Ok(Some(r)) => {
                let n = if flags & libc::MSG_TRUNC != 0 {
                    r.len
                } else {
                    r.copied
                };
                return Ok(Got {
                    n,
                    truncated: r.len > r.copied,
                    from: r.from,
                    v6,
                    pktinfo: to,
                });
            }
            Ok(None) if nonblock || flags & libc::MSG_DONTWAIT != 0 => {
                st.drained(fd, libc::EPOLLIN as u32);
                return Err(libc::EAGAIN);
            }
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        drop(st);
        blocking.wait()?;
    }
}

/// The length of the next datagram of `fd` (0 if none), as `FIONREAD` on a UDP socket.
pub(crate) fn next_len(fd: c_int) -> Result<usize, c_int> {
    let mut st = table::lock();
    let r = try_take(&mut st, fd, &mut [], true)?;
    st.note_moves();
    Ok(r.map_or(0, |r| r.len))
}

/// Sends `data` as one datagram from the server's UDP socket `fd` to `to` (or its peer),
/// as `sendto(2)` with `flags` (`MSG_DONTWAIT`): waits for send memory unless the socket
/// or the call does not block.
pub(crate) fn send(
    fd: c_int,
    data: &[u8],
    to: Option<SocketAddrV4>,
    flags: c_int,
) -> Result<usize, c_int> {
    if table::orphaned(fd) {
        return Err(libc::EBADF);
    }
    let mut blocking = wait::Blocking::new(fd, wait::Way::Out);
    loop {
        let mut st = table::lock();
        if let Some(e) = take_error(&mut st, fd) {
            return Err(e);
        }
        let Some(Sock::Udp(u)) = st.sock(fd) else {
            return Err(libc::EBADF);
        };
        let nonblock = u.opts.nonblock || flags & libc::MSG_DONTWAIT != 0;
        let Some(dest) = to.or(u.peer) else {
            return Err(libc::EDESTADDRREQ);
        };
        if net::kernels(*dest.ip(), st.server_address()) || dest.ip().is_unspecified() {
            return Err(libc::ENETUNREACH);
        }
        if broadcast_refused(&st, u.opts.broadcast, *dest.ip()) {
            return Err(libc::EACCES);
        }
        let Some(p) = st.udp_ports.get(&u.port) else {
            return Err(libc::EBADF);
        };
        let sent = p.u.try_send_to(data, dest);
        st.note_moves();
        match sent {
            Ok(()) => return Ok(data.len()),
            Err(ClientError::TimedOut) if nonblock => {
                st.drained(fd, libc::EPOLLOUT as u32);
                return Err(libc::EAGAIN);
            }
            Err(ClientError::TimedOut) => {}
            Err(e) => return Err(net::errno_of(&e, Call::Other)),
        }
        drop(st);
        blocking.wait()?;
    }
}

/// A `sendto`/`sendmsg` with destination `to` on undecided socket `fd`: a UDP socket going
/// off loopback becomes the server's (bound to a port it picks); anything else is the
/// kernel's from now on. Whether the server took it.
pub(crate) fn decide_by_send(fd: c_int, to: Option<SocketAddrV4>) -> bool {
    guarded(|| {
        let mut st = table::lock();
        let udp_v4 = match st.sock(fd) {
            Some(Sock::Undecided { opts, .. }) => opts.udp && !opts.v6_only(),
            _ => return 0,
        };
        if !udp_v4 {
            return 0;
        }
        let Some(to) =
            to.filter(|a| !net::kernels(*a.ip(), st.server_address()) && !a.ip().is_unspecified())
        else {
            st.hand_to_kernel(fd);
            debug!("sendto({fd}, {to:?}): UDP, the kernel's");
            return 0;
        };
        match take(&mut st, fd, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)) {
            Ok(()) => {
                debug!("sendto({fd}, {to}): UDP through the server");
                1
            }
            Err(e) => {
                debug!("sendto({fd}, {to}): the server refused a port ({e}); the kernel's");
                st.hand_to_kernel(fd);
                0
            }
        }
    }) == 1
}

/// `socket(2)` for a UDP socket: adopted as undecided (or, with no server, failed or left
/// to the kernel as [`NoServer`] says).
pub(crate) fn adopt(st: &mut State, fd: c_int, v6: bool, nonblock: bool) -> Result<(), NoServer> {
    st.client()?;
    st.adopt(
        fd,
        Opts {
            v6,
            udp: true,
            nonblock,
            ..Opts::default()
        },
    );
    debug!("socket() = {fd}: UDP, the server's if bound or sent off loopback");
    Ok(())
}

/// A `sendto`/`sendmsg`'s destination as the library reads it: `Ok(None)` for none given.
///
/// # Safety
/// `addr` null or valid for `len` bytes.
pub(crate) unsafe fn destination(
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<Option<SocketAddrV4>, c_int> {
    if addr.is_null() || len == 0 {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    unsafe { net::read_v4(addr, len) }
        .map(Some)
        .ok_or(libc::ENETUNREACH)
}

/// Returns `r` as a call's result: a count, or -1 with `errno`.
pub(crate) fn ret(r: Result<usize, c_int>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => fail(e),
    }
}
