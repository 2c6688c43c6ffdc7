//! Which descriptors are shmnet's, and the one connection to the server they share.
//!
//! A descriptor is in one of three states:
//!
//! - **not ours** (almost all): every call goes to the kernel; telling costs one atomic load
//!   ([`marked`]), so a program's other descriptors pay nothing noticeable;
//! - **undecided**: an IPv4 TCP socket the program made and has not yet bound, listened on or
//!   connected. It is a real kernel socket meanwhile (its options go to the kernel as well
//!   as being noted); `bind`, `listen` or `connect` to an address the server serves makes it
//!   shmnet's, anything else (loopback, another interface's address) leaves it the kernel's;
//! - **shmnet's**: a listener or a connection of the server. The descriptor number stays
//!   taken by an eventfd put in the kernel socket's place (`dup3`), so numbering, `select`'s
//!   limit and `close` behave as the program expects.
//!
//! Everything about the server's sockets lives in one [`State`] behind one mutex: the client
//! library is single-threaded, so a program's threads take turns at it, and no thread sleeps
//! holding it ([`crate::wait`]).

use libc::c_int;
use rustc_hash::FxHasher;
use shmnet_io::client::{Client, TcpListener, TcpStream};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::config::{self, debug};
use crate::udp::{UdpPort, UdpSock};

/// Descriptors at or above this are never taken (they stay the kernel's).
pub(crate) const MAX_FD: usize = 1 << 16;

/// A descriptor's mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mark {
    NotOurs = 0,
    Undecided = 1,
    Shmnet = 2,
    /// An epoll instance watching some of the server's sockets ([`crate::epoll`]).
    Epoll = 3,
}

/// The raw mark of a server's socket that is a UDP one: [`Mark::Shmnet`] to every caller
/// but [`datagram`], so that the calls moving bytes tell UDP from TCP without the lock.
const SHMNET_UDP: u8 = 4;

static MARKS: [AtomicU8; MAX_FD] = [const { AtomicU8::new(0) }; MAX_FD];

/// The raw mark of a socket a forked child could not take from its parent (a UDP socket,
/// or any when the adoption failed): [`Mark::Shmnet`] to [`marked`], and every call on it
/// fails with `EBADF` ([`orphaned`]) but `close`, which forgets it.
const ORPHAN: u8 = 5;

/// The mark of `fd` (one relaxed load: a program that closes a descriptor while another
/// thread uses it has a race of its own, as with the kernel's descriptors).
#[inline]
pub(crate) fn marked(fd: libc::c_int) -> Mark {
    match usize::try_from(fd).ok().and_then(|i| MARKS.get(i)) {
        Some(m) => match m.load(Ordering::Relaxed) {
            1 => Mark::Undecided,
            2 | SHMNET_UDP | ORPHAN => Mark::Shmnet,
            3 => Mark::Epoll,
            _ => Mark::NotOurs,
        },
        None => Mark::NotOurs,
    }
}

/// Whether `fd` is one of the server's UDP sockets (one relaxed load, as [`marked`]).
#[inline]
pub(crate) fn datagram(fd: libc::c_int) -> bool {
    raw_mark(fd) == SHMNET_UDP
}

fn raw_mark(fd: libc::c_int) -> u8 {
    usize::try_from(fd)
        .ok()
        .and_then(|i| MARKS.get(i))
        .map_or(0, |m| m.load(Ordering::Relaxed))
}

fn set_mark(fd: libc::c_int, m: Mark) {
    set_raw_mark(fd, m as u8);
}

fn set_raw_mark(fd: libc::c_int, raw: u8) {
    if let Some(slot) = usize::try_from(fd).ok().and_then(|i| MARKS.get(i)) {
        slot.store(raw, Ordering::Relaxed);
    }
}

/// An orphan's descriptor is being closed: it is the kernel's from now on.
pub(crate) fn forget_orphan(fd: libc::c_int) {
    set_mark(fd, Mark::NotOurs);
}

/// Whether `fd` is a socket a forked child could not take from its parent ([`ORPHAN`]).
#[inline]
pub(crate) fn orphaned(fd: libc::c_int) -> bool {
    raw_mark(fd) == ORPHAN
}

/// Options a program set, applied when the socket becomes the server's (and answered back
/// from here by `getsockopt`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Opts {
    /// Made `AF_INET6`: addresses go back to the program as `::ffff:a.b.c.d`.
    pub(crate) v6: bool,
    /// `IPV6_V6ONLY` set: the socket wants no IPv4, so it stays the kernel's.
    pub(crate) v6only: bool,
    /// A UDP (`SOCK_DGRAM`) socket ([`crate::udp`]); else TCP.
    pub(crate) udp: bool,
    /// `SO_REUSEADDR` or `SO_REUSEPORT` set: another of the program's UDP sockets may share
    /// its port.
    pub(crate) reuse: bool,
    pub(crate) nonblock: bool,
    pub(crate) nodelay: bool,
    pub(crate) keepalive: bool,
    /// `IP_PKTINFO` set: a UDP receive by `recvmsg` names the datagram's destination in a
    /// control message.
    pub(crate) pktinfo: bool,
    /// `SO_BROADCAST` set: a UDP socket may send to (and connect to) a broadcast address;
    /// without it that is `EACCES`, as on Linux.
    pub(crate) broadcast: bool,
    pub(crate) sndbuf: Option<u32>,
    pub(crate) rcvbuf: Option<u32>,
    /// `SO_RCVTIMEO`: how long a blocking read, receive or accept waits (`None`: for ever).
    pub(crate) rcvtimeo: Option<std::time::Duration>,
    /// `SO_SNDTIMEO`: how long a blocking write or send waits.
    pub(crate) sndtimeo: Option<std::time::Duration>,
    /// `SO_LINGER`: `None` off; `Some(0)` makes `close` reset the connection (unsent bytes
    /// dropped, as Linux's abortive close); `Some(seconds)` closes in order and `close`
    /// waits at most that long for the peer's acknowledgement (`sockets::linger`).
    pub(crate) linger: Option<u32>,
    /// IPv4 multicast: groups joined, and how the socket sends to groups.
    pub(crate) multicast: crate::multicast::Multicast,
}

/// One of the program's sockets that this library looks after.
pub(crate) enum Sock {
    /// A kernel socket not yet bound, listened on or connected; `bound` is where `bind`
    /// put it if that address is the server's (the kernel socket itself stays unbound).
    Undecided {
        opts: Opts,
        bound: Option<SocketAddrV4>,
    },
    /// A listener of the server.
    Listener {
        l: TcpListener,
        addr: SocketAddrV4,
        opts: Opts,
    },
    /// A connection of the server.
    Stream {
        s: TcpStream,
        local: SocketAddrV4,
        opts: Opts,
        shut_rd: bool,
        shut_wr: bool,
        /// A write reported the connection's failure: later ones say `EPIPE`.
        failed: bool,
        /// A non-blocking `connect` that said `EINPROGRESS`: the next `connect` after the
        /// handshake says 0, as Linux's, and only later ones `EISCONN`.
        in_progress: bool,
        /// Bytes taken off the stream by `MSG_PEEK` or `FIONREAD` and not yet read: the
        /// next reads take them first ([`crate::io`]).
        peeked: Vec<u8>,
        /// A failure found by a read that returned bytes before it: the next read's.
        deferred: Option<c_int>,
    },
    /// A UDP socket of the server.
    Udp(UdpSock),
}

impl Opts {
    /// An `AF_INET6` socket that wants no IPv4 (`IPV6_V6ONLY`): the kernel's.
    pub(crate) fn v6_only(&self) -> bool {
        self.v6 && self.v6only
    }
}

impl Sock {
    /// A connection of the server's, just made (`in_progress`: by a non-blocking connect).
    pub(crate) fn stream(s: TcpStream, local: SocketAddrV4, opts: Opts, in_progress: bool) -> Self {
        Sock::Stream {
            s,
            local,
            opts,
            shut_rd: false,
            shut_wr: false,
            failed: false,
            in_progress,
            peeked: Vec::new(),
            deferred: None,
        }
    }

    pub(crate) fn opts(&self) -> &Opts {
        match self {
            Sock::Undecided { opts, .. }
            | Sock::Listener { opts, .. }
            | Sock::Stream { opts, .. }
            | Sock::Udp(UdpSock { opts, .. }) => opts,
        }
    }

    pub(crate) fn opts_mut(&mut self) -> &mut Opts {
        match self {
            Sock::Undecided { opts, .. }
            | Sock::Listener { opts, .. }
            | Sock::Stream { opts, .. }
            | Sock::Udp(UdpSock { opts, .. }) => opts,
        }
    }
}

/// The connection to the server and the sockets on it.
/// The program's sockets the server carries, by descriptor.
pub(crate) type Socks = HashMap<libc::c_int, Sock, BuildHasherDefault<FxHasher>>;

/// Duplicates of the server's sockets: each names the descriptor `socks` holds it under.
pub(crate) type Aliases = HashMap<libc::c_int, libc::c_int, BuildHasherDefault<FxHasher>>;

/// The server's UDP sockets, by port.
pub(crate) type UdpPorts = HashMap<u16, UdpPort, BuildHasherDefault<FxHasher>>;

pub(crate) struct State {
    /// `None` until the first IPv4 TCP socket; then the client, or the reason there is none.
    pub(crate) client: Option<Result<Client, ()>>,
    pub(crate) socks: Socks,
    /// Descriptors made by `dup` and its kin from one of the server's sockets: each names
    /// the descriptor under which `socks` holds the socket.
    pub(crate) aliases: Aliases,
    /// The own eventfds of the threads asleep in [`crate::wait`] ([`own_eventfd`]).
    pub(crate) sleepers: Vec<libc::c_int>,
    /// One sleeping thread (the first to sleep) has announced its sleep to the client and
    /// waits on its wake-ups; the others wait on their own eventfds.
    pub(crate) ring_armed: bool,
    /// The client's count of moved items at the last look (see [`State::note_moves`]).
    pub(crate) moved_seen: u64,
    /// What each epoll instance watches of this library's sockets ([`crate::epoll`]).
    pub(crate) epolls: HashMap<libc::c_int, Vec<Watch>, BuildHasherDefault<FxHasher>>,
    /// The server's UDP sockets, by port, each with the program's sockets bound to it.
    pub(crate) udp_ports: UdpPorts,
    /// In a forked child: the parent's sockets, until the first call adopts them
    /// ([`crate::fork`]).
    pub(crate) inherit: Option<crate::fork::Inheritance>,
}

/// One socket an epoll instance watches, kept here because the kernel's instance cannot
/// see the server's sockets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Watch {
    pub(crate) fd: libc::c_int,
    /// `EPOLLIN`, `EPOLLOUT`, `EPOLLET`, `EPOLLONESHOT`… as the program gave them.
    pub(crate) events: u32,
    pub(crate) data: u64,
    /// Edge-triggered: the readiness last reported, so only a rise is reported again.
    pub(crate) reported: u32,
    /// A one-shot watch that fired: silent until `EPOLL_CTL_MOD` arms it again.
    pub(crate) disarmed: bool,
    /// Watched while the socket was undecided: the kernel's instance watches it too, and
    /// this copy takes over if the server gets the socket.
    pub(crate) kernel: bool,
}

// SAFETY: `State` holds the client library's `Rc`-shared sockets. Every one of them lives
// inside the one `State` value, which is only reached through `STATE`'s mutex: no `Rc`
// clone is ever handed out of it, so no two threads touch a reference count at once.
unsafe impl Send for State {}

static STATE: Mutex<State> = Mutex::new(State {
    client: None,
    socks: HashMap::with_hasher(BuildHasherDefault::new()),
    aliases: HashMap::with_hasher(BuildHasherDefault::new()),
    sleepers: Vec::new(),
    ring_armed: false,
    moved_seen: 0,
    epolls: HashMap::with_hasher(BuildHasherDefault::new()),
    udp_ports: HashMap::with_hasher(BuildHasherDefault::new()),
    inherit: None,
});

/// The state, locked (a panic while it was held is not a reason to stop: the data it
/// guards stays consistent between calls).
pub(crate) fn lock() -> MutexGuard<'static, State> {
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if st.inherit.is_some() && !borrowed() {
        // A forked child's first call, or an exec'd program's: the sockets it inherited
        // become its own first. (Not in a vfork child: see `exec::prepare`.)
        crate::fork::adopt_inherited(&mut st);
    }
    st
}

/// The process whose memory this library's state is (set when the library is loaded, in a
/// forked child by fork's child handler, and when a client attaches): a child made without
/// `fork`'s handlers (`vfork`, as dash, `posix_spawn` and Python's `subprocess` make them)
/// shares its parent's memory — state and client included — but has a descriptor table of
/// its own, so what it does to its descriptors must not be written into the parent's state.
static OWNER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// This process owns the state (and the client now in it).
pub(crate) fn own_client() {
    OWNER.store(std::process::id() as i32, Ordering::Relaxed);
}

/// [`borrowed`], asked only when `fd` is one of the server's (or an epoll instance of
/// this library's): no system call for the program's other descriptors.
pub(crate) fn borrowed_for(fd: libc::c_int) -> bool {
    marked(fd) != Mark::NotOurs && borrowed()
}

/// Whether this process runs in memory it borrows from its parent (a `vfork` child): its
/// `dup2` or `close` of one of the server's sockets is the kernel's business alone (one
/// system call to tell, paid only on the server's descriptors).
pub(crate) fn borrowed() -> bool {
    let owner = OWNER.load(Ordering::Relaxed);
    owner != 0 && owner != std::process::id() as i32
}

/// The state, locked, without adopting what this process inherited: for the library's
/// own look at it before an `exec` ([`crate::exec`]), and when it is loaded.
pub(crate) fn lock_unadopted() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Descriptor `fd` holds a socket this program inherited across an `exec`, to adopt at its
/// first call: the server's from now on.
pub(crate) fn mark_inherited(fd: libc::c_int) {
    set_mark(fd, Mark::Shmnet);
}

/// Why a socket cannot be the server's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoServer {
    /// No server answered; the program asked to fail (the default).
    Fail,
    /// No server answered; `SHMNET_FALLBACK=1` leaves the socket to the kernel.
    Fallback,
}

impl State {
    /// The client, connecting at the first call. Says once, on stderr, why there is none.
    pub(crate) fn client(&mut self) -> Result<&Client, NoServer> {
        if self.client.is_none() {
            let cfg = config::get();
            self.client = Some(match Client::connect(&cfg.server) {
                Ok(c) => {
                    own_client();
                    debug!(
                        "attached to the server at {} (address {:?})",
                        cfg.server.display(),
                        c.address()
                    );
                    crate::fork::install_handlers();
                    Ok(c)
                }
                Err(e) => {
                    if cfg.fallback {
                        eprintln!(
                            "shmnet: no server at {} ({e}): the kernel carries this program's sockets (SHMNET_FALLBACK=1)",
                            cfg.server.display()
                        );
                    } else {
                        eprintln!(
                            "shmnet: no server at {} ({e}): start `shmnet serve --structure server`, give its socket with `shmnet run --server PATH`, or add --fallback to use the kernel",
                            cfg.server.display()
                        );
                    }
                    Err(())
                }
            });
        }
        match self.client.as_ref().expect("set above") {
            Ok(c) => Ok(c),
            Err(()) if config::get().fallback => Err(NoServer::Fallback),
            Err(()) => Err(NoServer::Fail),
        }
    }

    /// The server's address (where its listeners and connections are bound), if known.
    pub(crate) fn server_address(&self) -> Option<Ipv4Addr> {
        match &self.client {
            Some(Ok(c)) => c.address(),
            _ => None,
        }
    }

    /// The socket behind descriptor `fd` (itself, or the one it is a duplicate of).
    pub(crate) fn sock(&self, fd: libc::c_int) -> Option<&Sock> {
        self.socks.get(&self.key(fd))
    }

    /// As [`State::sock`], to change.
    pub(crate) fn sock_mut(&mut self, fd: libc::c_int) -> Option<&mut Sock> {
        let key = self.key(fd);
        self.socks.get_mut(&key)
    }

    /// The descriptor under which `socks` holds `fd`'s socket: itself, or the one it is a
    /// duplicate of.
    #[inline]
    pub(crate) fn key(&self, fd: libc::c_int) -> libc::c_int {
        if self.aliases.is_empty() {
            return fd;
        }
        self.aliases.get(&fd).copied().unwrap_or(fd)
    }

    /// `new` is a duplicate of the server's socket at `old` (made by `dup` or its kin).
    pub(crate) fn alias(&mut self, old: libc::c_int, new: libc::c_int) {
        let key = self.aliases.get(&old).copied().unwrap_or(old);
        self.aliases.insert(new, key);
        set_raw_mark(new, raw_mark(key));
    }

    /// Descriptor `fd` is being closed: whether the socket behind it lives on under
    /// another descriptor (a duplicate), in which case only `fd` goes.
    pub(crate) fn close_duplicate(&mut self, fd: libc::c_int) -> bool {
        if self.aliases.remove(&fd).is_some() {
            set_mark(fd, Mark::NotOurs);
            // An epoll instance watched that number: the watch ends with it.
            for watches in self.epolls.values_mut() {
                watches.retain(|w| w.fd != fd);
            }
            return true;
        }
        // The socket's own descriptor: a duplicate, if any, holds it from now on.
        let Some(heir) = self
            .aliases
            .iter()
            .find(|&(_, &k)| k == fd)
            .map(|(&a, _)| a)
        else {
            return false;
        };
        self.aliases.remove(&heir);
        for k in self.aliases.values_mut() {
            if *k == fd {
                *k = heir;
            }
        }
        if let Some(sock) = self.socks.remove(&fd) {
            self.socks.insert(heir, sock);
            crate::udp::renamed(self, fd, heir);
        }
        set_mark(fd, Mark::NotOurs);
        for watches in self.epolls.values_mut() {
            watches.retain(|w| w.fd != fd);
        }
        true
    }

    /// Starts looking after kernel socket `fd`.
    pub(crate) fn adopt(&mut self, fd: libc::c_int, opts: Opts) {
        self.socks.insert(fd, Sock::Undecided { opts, bound: None });
        set_mark(fd, Mark::Undecided);
    }

    /// Descriptor `fd`, and every duplicate of it, names a socket this forked child could
    /// not take from its parent: calls on it fail with `EBADF` until it is closed.
    pub(crate) fn orphan(&mut self, fd: libc::c_int) {
        set_raw_mark(fd, ORPHAN);
        let dups: Vec<libc::c_int> = self
            .aliases
            .iter()
            .filter(|&(_, &k)| k == fd)
            .map(|(&a, _)| a)
            .collect();
        for a in dups {
            self.aliases.remove(&a);
            set_raw_mark(a, ORPHAN);
        }
        for watches in self.epolls.values_mut() {
            watches.retain(|w| w.fd != fd);
        }
    }

    /// Leaves `fd` to the kernel from now on (or forgets it, closed): no epoll instance
    /// watches it here any more.
    pub(crate) fn release(&mut self, fd: libc::c_int) -> Option<Sock> {
        set_mark(fd, Mark::NotOurs);
        for watches in self.epolls.values_mut() {
            watches.retain(|w| w.fd != fd);
        }
        self.socks.remove(&fd)
    }

    /// An undecided socket stays the kernel's ([`State::release`]): the multicast options
    /// noted for it go to the kernel socket now.
    pub(crate) fn hand_to_kernel(&mut self, fd: libc::c_int) {
        if let Some(Sock::Undecided { opts, .. }) = self.release(fd) {
            crate::multicast::apply_to_kernel(fd, &opts.multicast);
        }
    }

    /// Records `sock` as the server's under `fd` (whose number an eventfd now holds). The
    /// kernel's epoll instances lost the socket with its file: those that watched it watch
    /// it here from now on.
    pub(crate) fn install(&mut self, fd: libc::c_int, sock: Sock) {
        let raw = if matches!(sock, Sock::Udp(_)) {
            SHMNET_UDP
        } else {
            Mark::Shmnet as u8
        };
        self.socks.insert(fd, sock);
        set_raw_mark(fd, raw);
        for (&ep, watches) in &mut self.epolls {
            for w in watches.iter_mut().filter(|w| w.fd == fd) {
                w.kernel = false;
                set_mark(ep, Mark::Epoll);
            }
        }
    }

    /// A read, write or accept on `fd` found nothing (`EAGAIN`): an edge-triggered watch
    /// reports its next rise of `bits` (`EPOLLIN`, `EPOLLOUT`) again.
    pub(crate) fn drained(&mut self, fd: libc::c_int, bits: u32) {
        for watches in self.epolls.values_mut() {
            for w in watches.iter_mut().filter(|w| w.fd == fd) {
                w.reported &= !bits;
            }
        }
    }

    /// Marks `ep` as an epoll instance that watches some of the server's sockets.
    pub(crate) fn mark_epoll(ep: libc::c_int) {
        set_mark(ep, Mark::Epoll);
    }

    /// Forgets epoll instance `ep` (closed).
    pub(crate) fn forget_epoll(&mut self, ep: libc::c_int) {
        set_mark(ep, Mark::NotOurs);
        self.epolls.remove(&ep);
    }

    /// After a call that may have moved deliveries off the ring: if some moved while other
    /// threads sleep, wakes them so they look (what moved may be theirs).
    ///
    /// It must not look at the ring itself: a delivery it moved after a waiter judged its
    /// sockets would be missed by that waiter, who then sleeps on a ring already drained
    /// (the lost wake-up the client library's own waits guard against).
    pub(crate) fn note_moves(&mut self) {
        let Some(Ok(c)) = &self.client else { return };
        let moved = c.moved();
        if moved != self.moved_seen {
            self.moved_seen = moved;
            self.wake_sleepers();
        }
    }

    /// Wakes every thread asleep in [`crate::wait`] (each looks again).
    pub(crate) fn wake_sleepers(&self) {
        for &fd in &self.sleepers {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a local to a sleeping thread's own eventfd (a
            // full counter only means it is raised already).
            unsafe { crate::real::write(fd, (&raw const one).cast(), 8) };
        }
    }
}

/// This thread's own eventfd, on which it sleeps in [`crate::wait`] unless it is the one
/// armed on the client's wake-ups; made at its first wait, closed when the thread ends.
pub(crate) fn own_eventfd() -> libc::c_int {
    struct Own(OwnedFd);
    thread_local! {
        static OWN: Option<Own> = {
            // SAFETY: eventfd has no pointer arguments; a negative result is checked.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            // SAFETY: a new descriptor that nothing else owns.
            (fd >= 0).then(|| Own(unsafe { OwnedFd::from_raw_fd(fd) }))
        };
    }
    OWN.with(|o| {
        o.as_ref()
            .map_or(-1, |o| std::os::fd::AsRawFd::as_raw_fd(&o.0))
    })
}

/// Consumes whatever raised eventfd `fd`.
pub(crate) fn drain_eventfd(fd: libc::c_int) {
    let mut v: u64 = 0;
    // SAFETY: __errno_location is this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: reads 8 bytes into a local from a non-blocking eventfd of ours.
    unsafe { crate::real::read(fd, (&raw mut v).cast(), 8) };
    // An empty eventfd says EAGAIN: not the program's errno to see.
    crate::set_errno(errno);
}
