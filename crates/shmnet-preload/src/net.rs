//! Socket addresses across the C boundary, and what each client error means to a program.

use libc::{c_int, sockaddr, sockaddr_in, sockaddr_in6, socklen_t};
use shmnet_io::client::{ClientError, MulticastError};
use shmnet_io::windows::TcpFailure;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// The IPv4 address at `addr`: an `AF_INET` one, or an `AF_INET6` one that names IPv4 —
/// `::` (any, which a dual-stack socket binds to) or `::ffff:a.b.c.d`. `None` for anything
/// else (a real IPv6 address, another family, too short).
///
/// # Safety
/// `addr` must be null or valid for `len` bytes.
pub(crate) unsafe fn read_v4(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddrV4> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: the caller's contract: `addr` holds at least a family's bytes.
    let family = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>()) };
    match family as c_int {
        libc::AF_INET if len as usize >= std::mem::size_of::<sockaddr_in>() => {
            // SAFETY: the caller's contract: `addr` holds a `sockaddr_in`'s bytes.
            let sin = unsafe { std::ptr::read_unaligned(addr.cast::<sockaddr_in>()) };
            Some(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<sockaddr_in6>() => {
            // SAFETY: the caller's contract: `addr` holds a `sockaddr_in6`'s bytes.
            let sin6 = unsafe { std::ptr::read_unaligned(addr.cast::<sockaddr_in6>()) };
            let ip6 = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let ip = if ip6.is_unspecified() {
                Ipv4Addr::UNSPECIFIED
            } else {
                ip6.to_ipv4_mapped()?
            };
            Some(SocketAddrV4::new(ip, u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

/// Writes `a` to `addr` as `getsockname(2)` does — as `AF_INET6` (`::ffff:a.b.c.d`, or
/// `::` for any) when `v6`, the socket's family — at most `*len` bytes, and `*len` set to
/// the full size. Null pointers write nothing.
///
/// # Safety
/// `addr` and `len` must be null or valid (`addr` for `*len` bytes).
pub(crate) unsafe fn write_v4(a: SocketAddrV4, v6: bool, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: zero is a valid sockaddr_in6 and sockaddr_in.
    let (mut sin, mut sin6): (sockaddr_in, sockaddr_in6) = unsafe { std::mem::zeroed() };
    let (src, full) = if v6 {
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_port = a.port().to_be();
        if !a.ip().is_unspecified() {
            sin6.sin6_addr.s6_addr = a.ip().to_ipv6_mapped().octets();
        }
        (
            (&raw const sin6).cast::<u8>(),
            std::mem::size_of::<sockaddr_in6>(),
        )
    } else {
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = a.port().to_be();
        sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
        (
            (&raw const sin).cast::<u8>(),
            std::mem::size_of::<sockaddr_in>(),
        )
    };
    // SAFETY: `len` is valid (checked non-null; the caller's contract).
    let room = unsafe { *len } as usize;
    // SAFETY: copies at most `room` bytes, which `addr` holds, from a local.
    unsafe {
        std::ptr::copy_nonoverlapping(src, addr.cast::<u8>(), room.min(full));
        *len = full as socklen_t;
    }
}

/// Whether connections and datagrams to `ip` are the kernel's: loopback, or an address of
/// one of this host's own interfaces (read once, at the first look) — unless it is the
/// server's own address (`server`), which the server answers for.
pub(crate) fn kernels(ip: Ipv4Addr, server: Option<Ipv4Addr>) -> bool {
    ip.is_loopback() || (Some(ip) != server && host_addresses().contains(&ip))
}

/// The IPv4 addresses of this host's interfaces, from `getifaddrs` at the first call.
fn host_addresses() -> &'static [Ipv4Addr] {
    static ADDRS: std::sync::OnceLock<Vec<Ipv4Addr>> = std::sync::OnceLock::new();
    ADDRS.get_or_init(|| {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: getifaddrs writes a list head we free below; on failure it writes nothing.
        if unsafe { libc::getifaddrs(&raw mut head) } != 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut at = head;
        // SAFETY: walks the list getifaddrs made, each node and address valid until freed.
        while let Some(ifa) = unsafe { at.as_ref() } {
            // SAFETY: the node's address is null or valid (as above).
            if let Some(sa) = unsafe { ifa.ifa_addr.as_ref() }
                && c_int::from(sa.sa_family) == libc::AF_INET
            {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<sockaddr_in>() };
                out.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
            at = ifa.ifa_next;
        }
        // SAFETY: the list getifaddrs made, freed once.
        unsafe { libc::freeifaddrs(head) };
        out
    })
}

/// The call a client error happened in, which decides its `errno`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Listen,
    Connect,
    Read,
    Write,
    Other,
}

/// The `errno` a program expects for `e` in `call`.
pub(crate) fn errno_of(e: &ClientError, call: Call) -> c_int {
    match e {
        ClientError::Connection(TcpFailure::Reset) => libc::ECONNRESET,
        ClientError::Connection(TcpFailure::Refused) => libc::ECONNREFUSED,
        ClientError::Connection(TcpFailure::TimedOut) => libc::ETIMEDOUT,
        ClientError::Connection(TcpFailure::Failed | TcpFailure::NetUnreachable) => {
            libc::ENETUNREACH
        }
        ClientError::Connection(TcpFailure::HostUnreachable) => libc::EHOSTUNREACH,
        ClientError::TimedOut if call == Call::Connect => libc::ETIMEDOUT,
        ClientError::TimedOut => libc::EAGAIN,
        ClientError::Refused(_) => match call {
            Call::Listen => libc::EADDRINUSE,
            Call::Connect => libc::EADDRNOTAVAIL,
            Call::Write => libc::EPIPE,
            Call::Read | Call::Other => libc::ENOTCONN,
        },
        ClientError::ServerGone => match call {
            Call::Write => libc::EPIPE,
            _ => libc::ECONNRESET,
        },
        ClientError::MessageTooLarge(_) => libc::EMSGSIZE,
        ClientError::UntrustedServer { .. } => libc::EACCES,
        ClientError::Protocol(_) => libc::EPROTO,
        ClientError::Control(_) => libc::EIO,
        // Linux's answers to the same `setsockopt`s.
        ClientError::Multicast(m) => match m {
            MulticastError::InvalidHandle => libc::EBADF,
            MulticastError::NotMulticast => libc::EINVAL,
            MulticastError::AlreadyJoined => libc::EADDRINUSE,
            MulticastError::NotJoined => libc::EADDRNOTAVAIL,
            MulticastError::TooMany => libc::ENOBUFS,
        },
    }
}
