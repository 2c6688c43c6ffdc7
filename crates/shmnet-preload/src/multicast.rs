//! IPv4 multicast on the program's UDP sockets: the `IPPROTO_IP` options that join and
//! leave groups (`IP_ADD_MEMBERSHIP`, `IP_DROP_MEMBERSHIP`, `MCAST_JOIN_GROUP`,
//! `MCAST_LEAVE_GROUP`) and shape what is sent to them (`IP_MULTICAST_TTL`,
//! `IP_MULTICAST_LOOP`, `IP_MULTICAST_IF`, `IP_MULTICAST_ALL`).
//!
//! - **On the server's socket** a join becomes the server socket's join
//!   ([`shmnet_io::client::UdpSocket::multicast`]), which the server reports by IGMP. The
//!   program's sockets sharing one server port ([`crate::udp`]) share its memberships: the
//!   port counts its members' joins of each group and leaves a group when its last member
//!   in it leaves or closes.
//! - **On an undecided socket** the options are checked as Linux checks them and noted —
//!   not given to the kernel socket, which may not even have an interface with the
//!   server's address to join on — then applied to the server's socket when a `bind` (to
//!   any address, the server's, or a group) or a first send makes it the server's, or to
//!   the kernel socket when it becomes the kernel's ([`apply_to_kernel`]).
//! - The interface named in a join or `IP_MULTICAST_IF` is accepted and noted, whatever it
//!   is: the server has one.
//! - Source-specific multicast (`IP_ADD_SOURCE_MEMBERSHIP`, `MCAST_JOIN_SOURCE_GROUP`,
//!   `IP_BLOCK_SOURCE`, …, and `IP_MSFILTER`) is not carried: `ENOPROTOOPT`.

use libc::{c_int, c_void, socklen_t};
use shmnet_io::client::MulticastOp;
use std::net::Ipv4Addr;

use crate::config::debug;
use crate::table::{Sock, State};

/// Groups one socket may join (Linux's `igmp_max_memberships` default).
pub(crate) const MAX_GROUPS: usize = 20;

/// A socket's multicast options, as the program set them (`Copy`, as [`crate::table::Opts`]
/// is).
///
/// Invariant: `groups[..n]` are distinct multicast groups, `via[i]` the interface the join
/// of `groups[i]` named; `n <= MAX_GROUPS`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Multicast {
    groups: [Ipv4Addr; MAX_GROUPS],
    via: [Via; MAX_GROUPS],
    n: u8,
    /// `IP_MULTICAST_TTL`, if set (Linux's default: 1).
    pub(crate) ttl: Option<u8>,
    /// `IP_MULTICAST_LOOP`, if set (default: on).
    pub(crate) looped: Option<bool>,
    /// `IP_MULTICAST_IF`'s address (answered back by `getsockopt`).
    pub(crate) iface: Ipv4Addr,
    /// `IP_MULTICAST_ALL` (default: on; noted, the server behaves as on).
    pub(crate) all: bool,
}

impl Default for Multicast {
    fn default() -> Self {
        Multicast {
            groups: [Ipv4Addr::UNSPECIFIED; MAX_GROUPS],
            via: [Via::default(); MAX_GROUPS],
            n: 0,
            ttl: None,
            looped: None,
            iface: Ipv4Addr::UNSPECIFIED,
            all: true,
        }
    }
}

impl Multicast {
    /// The groups joined.
    pub(crate) fn groups(&self) -> &[Ipv4Addr] {
        &self.groups[..usize::from(self.n)]
    }

    fn add(&mut self, g: Ipv4Addr, via: Via) {
        self.groups[usize::from(self.n)] = g;
        self.via[usize::from(self.n)] = via;
        self.n += 1;
    }

    fn remove(&mut self, g: Ipv4Addr) {
        if let Some(i) = self.groups().iter().position(|&x| x == g) {
            self.groups.copy_within(i + 1..usize::from(self.n), i);
            self.via.copy_within(i + 1..usize::from(self.n), i);
            self.n -= 1;
        }
    }
}

/// The interface a join named: an address (`ip_mreq`, `ip_mreqn`) and an index
/// (`ip_mreqn`, `group_req`); zero for "any". Kept to give the kernel the same request
/// should the socket become its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Via {
    addr: Ipv4Addr,
    ifindex: i32,
}

impl Default for Via {
    fn default() -> Self {
        Via {
            addr: Ipv4Addr::UNSPECIFIED,
            ifindex: 0,
        }
    }
}

/// What a multicast option asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Join(Ipv4Addr, Via),
    Leave(Ipv4Addr),
    Ttl(u8),
    Loop(bool),
    /// `IP_MULTICAST_IF`: the interface to send from (noted only).
    Iface(Ipv4Addr),
    /// `IP_MULTICAST_ALL` (noted only).
    All(bool),
}

/// Whether `(level, name)` is a multicast option this module answers for (a
/// source-specific one included, which it refuses).
pub(crate) fn is_multicast_option(level: c_int, name: c_int) -> bool {
    level == libc::IPPROTO_IP
        && matches!(
            name,
            libc::IP_ADD_MEMBERSHIP
                | libc::IP_DROP_MEMBERSHIP
                | libc::MCAST_JOIN_GROUP
                | libc::MCAST_LEAVE_GROUP
                | libc::IP_MULTICAST_TTL
                | libc::IP_MULTICAST_LOOP
                | libc::IP_MULTICAST_IF
                | libc::IP_MULTICAST_ALL
        )
        || source_specific(level, name)
}

fn source_specific(level: c_int, name: c_int) -> bool {
    level == libc::IPPROTO_IP
        && matches!(
            name,
            libc::IP_ADD_SOURCE_MEMBERSHIP
                | libc::IP_DROP_SOURCE_MEMBERSHIP
                | libc::IP_BLOCK_SOURCE
                | libc::IP_UNBLOCK_SOURCE
                | libc::MCAST_JOIN_SOURCE_GROUP
                | libc::MCAST_LEAVE_SOURCE_GROUP
                | libc::MCAST_BLOCK_SOURCE
                | libc::MCAST_UNBLOCK_SOURCE
                | libc::IP_MSFILTER
                | libc::MCAST_MSFILTER
        )
}

/// Reads `len` bytes at `val` (at most `N`), or `None` when fewer than `min` are there.
///
/// # Safety
/// `val` null or valid for `len` bytes.
unsafe fn bytes<const N: usize>(val: *const c_void, len: socklen_t, min: usize) -> Option<[u8; N]> {
    let len = len as usize;
    if val.is_null() || len < min {
        return None;
    }
    let mut out = [0u8; N];
    let n = len.min(N);
    // SAFETY: the caller's contract: `val` holds `len >= n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(val.cast::<u8>(), out.as_mut_ptr(), n) };
    Some(out)
}

/// Parses a multicast option's value as Linux's `ip_setsockopt` does; `Err(errno)` as it
/// would refuse it.
///
/// # Safety
/// `val` null or valid for `len` bytes.
pub(crate) unsafe fn parse(
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<Change, c_int> {
    let addr = |b: &[u8]| Ipv4Addr::new(b[0], b[1], b[2], b[3]);
    match name {
        libc::IP_ADD_MEMBERSHIP | libc::IP_DROP_MEMBERSHIP => {
            // struct ip_mreq (8 bytes) or ip_mreqn (12): the group first.
            // SAFETY: the caller's contract.
            let b: [u8; 12] = unsafe { bytes(val, len, 8) }.ok_or(libc::EINVAL)?;
            let g = addr(&b[..4]);
            let via = Via {
                addr: addr(&b[4..8]),
                ifindex: if len as usize >= 12 {
                    i32::from_ne_bytes([b[8], b[9], b[10], b[11]])
                } else {
                    0
                },
            };
            // Linux refuses to join a unicast address (EINVAL); leaving one finds no
            // membership (EADDRNOTAVAIL, from `note`).
            match name {
                libc::IP_ADD_MEMBERSHIP if !g.is_multicast() => Err(libc::EINVAL),
                libc::IP_ADD_MEMBERSHIP => Ok(Change::Join(g, via)),
                _ => Ok(Change::Leave(g)),
            }
        }
        libc::MCAST_JOIN_GROUP | libc::MCAST_LEAVE_GROUP => {
            // struct group_req: a 32-bit interface index, then (aligned to 8) a
            // sockaddr_storage holding the group.
            let size = std::mem::size_of::<libc::group_req>();
            // SAFETY: the caller's contract.
            let b: [u8; 136] = unsafe { bytes(val, len, size) }.ok_or(libc::EINVAL)?;
            let at = std::mem::offset_of!(libc::group_req, gr_group);
            let family = u16::from_ne_bytes([b[at], b[at + 1]]);
            if c_int::from(family) != libc::AF_INET {
                return Err(libc::EINVAL);
            }
            let g = addr(&b[at + 4..at + 8]);
            let via = Via {
                addr: Ipv4Addr::UNSPECIFIED,
                ifindex: i32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            };
            match name {
                libc::MCAST_JOIN_GROUP if !g.is_multicast() => Err(libc::EINVAL),
                libc::MCAST_JOIN_GROUP => Ok(Change::Join(g, via)),
                _ => Ok(Change::Leave(g)),
            }
        }
        libc::IP_MULTICAST_TTL => match small_int(val, len)? {
            -1 => Ok(Change::Ttl(1)),
            v @ 0..=255 => Ok(Change::Ttl(v as u8)),
            _ => Err(libc::EINVAL),
        },
        libc::IP_MULTICAST_LOOP => Ok(Change::Loop(small_int(val, len)? != 0)),
        libc::IP_MULTICAST_ALL => match small_int(val, len)? {
            v @ (0 | 1) => Ok(Change::All(v == 1)),
            _ => Err(libc::EINVAL),
        },
        libc::IP_MULTICAST_IF => {
            // struct ip_mreqn (its address second), ip_mreq (its interface second) or
            // in_addr; Linux reads ip_mreqn's imr_address, ip_mreq's imr_interface.
            // SAFETY: the caller's contract.
            let b: [u8; 12] = unsafe { bytes(val, len, 4) }.ok_or(libc::EINVAL)?;
            Ok(Change::Iface(if len as usize >= 8 {
                addr(&b[4..8])
            } else {
                addr(&b[..4])
            }))
        }
        _ => Err(libc::ENOPROTOOPT),
    }
}

/// An `int` option that Linux also takes as one byte (`IP_MULTICAST_TTL`, `_LOOP`, `_ALL`).
fn small_int(val: *const c_void, len: socklen_t) -> Result<c_int, c_int> {
    if val.is_null() || len == 0 {
        return Err(libc::EINVAL);
    }
    if len as usize >= std::mem::size_of::<c_int>() {
        // SAFETY: `val` holds at least an int (the caller's contract, via `setsockopt`).
        Ok(unsafe { std::ptr::read_unaligned(val.cast::<c_int>()) })
    } else {
        // SAFETY: `val` holds at least one byte.
        Ok(c_int::from(unsafe { *val.cast::<u8>() }))
    }
}

/// Notes `c` in a socket's options; `Err(errno)` as Linux refuses it (nothing changed).
fn note(m: &mut Multicast, c: Change) -> Result<(), c_int> {
    match c {
        Change::Join(g, _) if m.groups().contains(&g) => return Err(libc::EADDRINUSE),
        Change::Join(..) if usize::from(m.n) >= MAX_GROUPS => return Err(libc::ENOBUFS),
        Change::Join(g, via) => m.add(g, via),
        Change::Leave(g) if !m.groups().contains(&g) => return Err(libc::EADDRNOTAVAIL),
        Change::Leave(g) => m.remove(g),
        Change::Ttl(t) => m.ttl = Some(t),
        Change::Loop(on) => m.looped = Some(on),
        Change::Iface(a) => m.iface = a,
        Change::All(on) => m.all = on,
    }
    Ok(())
}

/// `setsockopt` of a multicast option on `fd`, a socket of the library's (undecided or
/// the server's UDP socket); returns `setsockopt`'s answer.
///
/// # Safety
/// `val` null or valid for `len` bytes.
pub(crate) unsafe fn set(
    st: &mut State,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<(), c_int> {
    if source_specific(level, name) {
        debug!("setsockopt({fd}, IPPROTO_IP, {name}): source-specific multicast is not carried");
        return Err(libc::ENOPROTOOPT);
    }
    if !st.sock(fd).is_some_and(|s| s.opts().udp) {
        // The caller hands over UDP sockets only.
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract.
    let c = unsafe { parse(name, val, len) }?;
    let key = st.key(fd);
    let port = match st.socks.get(&key) {
        Some(Sock::Udp(u)) => Some(u.port),
        Some(Sock::Undecided { .. }) => None,
        _ => return Err(libc::EBADF),
    };
    let Some(port) = port else {
        debug!("setsockopt({fd}): {c:?} noted until the socket is decided");
        let Some(sock) = st.socks.get_mut(&key) else {
            return Err(libc::EBADF);
        };
        return note(&mut sock.opts_mut().multicast, c);
    };
    // Checked against the socket's own state first, so the port's is changed only for a
    // change that stands.
    let mut m = match st.socks.get(&key) {
        Some(s) => s.opts().multicast,
        None => return Err(libc::EBADF),
    };
    note(&mut m, c)?;
    apply_to_port(st, port, c)?;
    if let Some(sock) = st.socks.get_mut(&key) {
        sock.opts_mut().multicast = m;
    }
    debug!("setsockopt({fd}): {c:?} on the server's port {port}");
    Ok(())
}

/// Gives change `c` of one member to the server socket of `port`: a group's first join
/// and last leave reach the server; the rest only move the port's counts.
fn apply_to_port(st: &mut State, port: u16, c: Change) -> Result<(), c_int> {
    let Some(p) = st.udp_ports.get_mut(&port) else {
        return Err(libc::EBADF);
    };
    let op = match c {
        Change::Join(g, _) => {
            if let Some(e) = p.groups.iter_mut().find(|e| e.0 == g) {
                e.1 += 1;
                return Ok(());
            }
            MulticastOp::Join(g)
        }
        Change::Leave(g) => {
            let Some(i) = p.groups.iter().position(|e| e.0 == g) else {
                return Err(libc::EADDRNOTAVAIL);
            };
            if p.groups[i].1 > 1 {
                p.groups[i].1 -= 1;
                return Ok(());
            }
            MulticastOp::Leave(g)
        }
        Change::Ttl(t) => MulticastOp::Ttl(t),
        Change::Loop(on) => MulticastOp::Loop(on),
        Change::Iface(_) | Change::All(_) => return Ok(()),
    };
    p.u.multicast(op)
        .map_err(|e| crate::net::errno_of(&e, crate::net::Call::Other))?;
    match c {
        Change::Join(g, _) => p.groups.push((g, 1)),
        Change::Leave(g) => p.groups.retain(|e| e.0 != g),
        _ => {}
    }
    Ok(())
}

/// A socket just became the server's on `port` with options `m` noted while undecided:
/// they are applied to the port (a join the server refuses is dropped from the socket and
/// logged: the program's `setsockopt` said 0 long ago).
pub(crate) fn adopt(st: &mut State, fd: c_int, port: u16, m: Multicast) {
    let mut kept = m;
    for (&g, &via) in m.groups().iter().zip(&m.via) {
        if let Err(e) = apply_to_port(st, port, Change::Join(g, via)) {
            debug!("socket {fd}: its join of {g} refused by the server (errno {e})");
            kept.remove(g);
        }
    }
    for c in [m.ttl.map(Change::Ttl), m.looped.map(Change::Loop)]
        .into_iter()
        .flatten()
    {
        if let Err(e) = apply_to_port(st, port, c) {
            debug!("socket {fd}: {c:?} refused by the server (errno {e})");
        }
    }
    if let Some(sock) = st.sock_mut(fd) {
        sock.opts_mut().multicast = kept;
    }
}

/// A member of `port` with options `m` closes: its joins are let go.
pub(crate) fn depart(st: &mut State, port: u16, m: &Multicast) {
    for &g in m.groups() {
        let _ = apply_to_port(st, port, Change::Leave(g));
    }
}

/// An undecided socket with options `m` became the kernel's: they are given to the kernel
/// socket now, as the program would have (a refusal is logged: its `setsockopt` said 0).
pub(crate) fn apply_to_kernel(fd: c_int, m: &Multicast) {
    let set = |name: c_int, val: *const c_void, len: usize| {
        // SAFETY: `val` points at a local of `len` bytes.
        let r =
            unsafe { crate::real::setsockopt(fd, libc::IPPROTO_IP, name, val, len as socklen_t) };
        if r != 0 {
            debug!(
                "socket {fd}: the kernel refused multicast option {name} noted before: {}",
                std::io::Error::last_os_error()
            );
        }
    };
    let in_addr = |a: Ipv4Addr| libc::in_addr {
        s_addr: u32::from(a).to_be(),
    };
    for (&g, via) in m.groups().iter().zip(&m.via) {
        let mreq = libc::ip_mreqn {
            imr_multiaddr: in_addr(g),
            imr_address: in_addr(via.addr),
            imr_ifindex: via.ifindex,
        };
        set(
            libc::IP_ADD_MEMBERSHIP,
            (&raw const mreq).cast(),
            std::mem::size_of_val(&mreq),
        );
    }
    if let Some(t) = m.ttl {
        let v = c_int::from(t);
        set(libc::IP_MULTICAST_TTL, (&raw const v).cast(), 4);
    }
    if let Some(on) = m.looped {
        let v = c_int::from(on);
        set(libc::IP_MULTICAST_LOOP, (&raw const v).cast(), 4);
    }
    if !m.iface.is_unspecified() {
        let a = in_addr(m.iface);
        set(libc::IP_MULTICAST_IF, (&raw const a).cast(), 4);
    }
    if !m.all {
        let v: c_int = 0;
        set(libc::IP_MULTICAST_ALL, (&raw const v).cast(), 4);
    }
}

/// `getsockopt`'s answer for a multicast option of a socket with options `m` (`None`: not
/// one of them).
pub(crate) fn get(m: &Multicast, level: c_int, name: c_int) -> Option<c_int> {
    if level != libc::IPPROTO_IP {
        return None;
    }
    match name {
        libc::IP_MULTICAST_TTL => Some(c_int::from(m.ttl.unwrap_or(1))),
        libc::IP_MULTICAST_LOOP => Some(c_int::from(m.looped.unwrap_or(true))),
        libc::IP_MULTICAST_ALL => Some(c_int::from(m.all)),
        libc::IP_MULTICAST_IF => Some(u32::from(m.iface).to_be() as c_int),
        _ => None,
    }
}
