//! The application side of the `server` structure.
//!
//! ```no_run
//! use shmnet_io::client::Client;
//! let client = Client::connect(shmnet_io::control::default_socket())?;
//! let sock = client.udp_bind(5001)?;
//! let mut buf = vec![0u8; 65_536];
//! let (n, from) = sock.recv(&mut buf)?;        // sleeps on a wake-up until a message comes
//! sock.send_to(&buf[..n], from)?;              // echo it
//! # Ok::<(), shmnet_io::client::ClientError>(())
//! ```
//!
//! Under the server's default `--isolation regions` the application maps only its own
//! window (rings) and two regions the library creates and registers at connect
//! (`client/regions.rs`): a message to send is copied into the send region with the destination in
//! front and posted by handle, asynchronously; a received message was copied by the server
//! into a buffer the library posted, and is copied from there into the caller's buffer
//! (`recv`) or lent where it lies (`recv_in_place`, [`Lent`]), then the buffer is posted
//! again.
//!
//! Under `--isolation shared` a received message is read where the driver put it, in the
//! data window, and copied into the caller's buffer buffer by buffer (or lent there, chain
//! and all); the chain then goes back to the server on the return queue. A message to send is copied into send buffers of the
//! application's own window with the destination in front, and the server takes it from
//! there.
//!
//! Everything read from the windows is checked (the server is trusted no more than any other
//! peer): descriptor indices by the rings, chain walks bounded, lengths clamped.

use self::deadline::Deadline;
use crate::control::{self, ControlError, PROTOCOL_VERSION, Request, Response};
use crate::windows::{self, REQ, RET, RX, SEND_HEADER};
use rustc_hash::FxHashMap;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::{AsFd, OwnedFd};
use shmnet_chan::handles::{Perms, Region, RegionId};
use shmnet_chan::handoff::recv_window;
use shmnet_chan::{Consumer, Desc, Producer, ServerPools, Window};
use shmnet_stack::{BufIdx, NoHook, RecvHook};
/// The multicast changes a UDP socket takes ([`UdpSocket::multicast`]), and why one is refused.
pub use shmnet_stack::{MulticastError, MulticastOp};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

mod deadline;
mod fork;
mod lent;
mod pending;
mod poll;
mod regions;
mod tcp;

pub use fork::{Adopted, ForkTicket, Reserved, Unread};
pub use lent::Lent;
pub use poll::{Interest, PollItem, PollSocket, WakeFds};
pub use tcp::{Linger, LingeringClose, TcpListener, TcpStream};

/// What went wrong, in terms an application can act on.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server closed the connection or died.
    #[error("the shmnet server has gone away")]
    ServerGone,
    /// The port is bound already (by this or another application).
    #[error("{0}")]
    Refused(String),
    /// The message cannot be sent in one datagram.
    #[error("a {0}-byte message does not fit in one UDP datagram (at most 65,507 bytes)")]
    MessageTooLarge(usize),
    /// Nothing arrived in time, or no send buffer came free in time.
    #[error("timed out")]
    TimedOut,
    /// The server said something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The process answering on the control socket runs as neither root nor our own user
    /// (`SO_PEERCRED`): it may be squatting the path, so the client refuses it.
    #[error(
        "the process answering on the control socket (pid {pid}) runs as uid {uid}, neither root nor us: refusing it; stop it, or remove the socket and start `shmnet serve` again"
    )]
    UntrustedServer {
        /// The server's uid.
        uid: u32,
        /// The server's pid.
        pid: u32,
    },
    /// The control socket failed.
    #[error(transparent)]
    Control(ControlError),
    /// A TCP connection failed: refused, reset, or timed out.
    #[error("the connection {0}")]
    Connection(windows::TcpFailure),
    /// The server refused a multicast change ([`UdpSocket::multicast`]).
    #[error("multicast: {0}")]
    Multicast(shmnet_stack::MulticastError),
}

impl From<ControlError> for ClientError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::HungUp => Self::ServerGone,
            ControlError::UntrustedServer { uid, pid, .. } => Self::UntrustedServer { uid, pid },
            other => Self::Control(other),
        }
    }
}

struct Inner {
    ctl: OwnedFd,
    /// `ipc`: the socket datagrams travel on (the control socket carries only control).
    data_sock: Option<OwnedFd>,
    /// The shared-memory parts; `None` in the `ipc` structure.
    shm: Option<Shm>,
    /// Deliveries read off the ring for a socket other than the one being read.
    pending: pending::Pending,
    /// Completions of sends by handle read off the ring while receiving.
    done: VecDeque<Desc>,
    /// `ipc`: datagrams received in packets for a socket other than the one being read.
    ipc_pending: FxHashMap<u16, VecDeque<(Vec<u8>, SocketAddrV4)>>,
    packet: Vec<u8>,
    /// `ipc`: where a datagram lent by [`UdpSocket::recv_in_place`] lies (sized at its
    /// first use).
    lend_scratch: Vec<u8>,
    gone: bool,
    /// The server's address on its interface, and its prefix length, as its `Welcome` said.
    address: Option<Ipv4Addr>,
    prefix: Option<u8>,
    /// Items (deliveries, events, completions) moved off the receive ring or the data
    /// socket so far: grows whenever a look found something ([`Client::gather`]).
    moved: u64,
    /// Datagrams of UDP sockets dropped because too many waited unread ([`Client::udp_overflows`]).
    udp_overflows: u64,
    /// Per socket, when a receive last looked for a delivery of its own (coarse clock),
    /// except for the socket in `latest_read`, whose entry here may be older.
    last_read: FxHashMap<u16, Duration>,
    /// The socket the latest receive looked for, and when: a receiver reading one socket
    /// over and over stamps a field, not the map.
    latest_read: Option<(u16, Duration)>,
    /// The TCP sockets.
    tcp: tcp::Book,
    /// When [`Inner::check_alive_now_and_then`] last looked (coarse clock).
    alive_checked: Duration,
    /// Looks at an empty receive ring before a wait sleeps ([`Client::set_spin_polls`]).
    spin_polls: u32,
}

/// How often a send looks whether the server is still there. A send into a ring with room
/// needs no system call; looking at the control socket is one, so a busy sender looks at most
/// once per this interval (and every sleep looks too). Datagrams sent into the ring of a
/// server that died in between are lost, as on a network.
const ALIVE_CHECK_EVERY: Duration = Duration::from_millis(1);

/// How long [`UdpSocket::send_from`] keeps sending a datagram the server dropped on a
/// lookup-cache miss before it gives up (`TimedOut`). The miss thread serves a line in tens
/// to hundreds of microseconds, but on a loaded machine it may wait for a CPU far longer: a
/// count of tries would give up on a busy machine, a deadline does not.
const SEND_FROM_PATIENCE: Duration = Duration::from_secs(10);

/// Completions of sends by handle the library keeps that are not its own: the one a
/// `send_from` awaits, and a few the server made up (dropped beyond this).
const MAX_STRAY_COMPLETIONS: usize = 64;

/// Under `--isolation shared`, deliveries held for later reads past which a UDP socket's
/// oldest datagram is dropped (each holds a chain of the server's pool, whose buffers the
/// driver receives every frame into).
const HELD_SHARED: usize = 512;

/// How long a UDP socket goes without a receive looking at it before it counts as not being
/// read, and its held datagrams may be dropped while too many are held (see
/// `Inner::stash_unless`): a reader that keeps reading keeps its bursts.
const UNREAD_AFTER: Duration = Duration::from_millis(50);

/// How many send buffers a writer short of memory waits for at once: a quarter of its pool,
/// so that a writer that outruns the network is woken once per batch — as Linux wakes a
/// blocked writer only when a third of its send buffer is free — instead of at every
/// buffer the server gives back (a system call for the server, two context switches).
///
/// A batch may never come: the server may hold most of the pool for a connection whose peer
/// stopped reading while another socket's sends trickle back. So a batch is waited for at
/// most [`SendBatch::PATIENCE`], and one that did not come halves the next (down to what the
/// send needs); one that came doubles it again, up to the quarter.
#[derive(Debug)]
struct SendBatch {
    /// What the next wait asks for (before the send's own need).
    size: u32,
    /// A quarter of the pool.
    most: u32,
}

impl SendBatch {
    /// The longest wait for a batch before taking what is there.
    const PATIENCE: Duration = Duration::from_millis(2);

    fn new(pool: u32) -> Self {
        let most = (pool / 4).max(1);
        Self { size: most, most }
    }

    /// The buffers to wait for, for a send that needs `need`.
    fn target(&self, need: u32) -> u32 {
        self.size.max(need)
    }

    /// Whether the last batch came.
    fn learn(&mut self, came: bool) {
        self.size = if came {
            (self.size * 2).min(self.most)
        } else {
            (self.size / 2).max(1)
        };
    }
}

/// Most send buffers one datagram may take: the largest datagram and its header in buffers
/// of 1,040 bytes or more (the server's app window has 2,048).
const MAX_SEND_CHAIN: usize = 64;

/// Chains an application gives back per burst on its return ring (`--isolation shared`).
const RETURN_BATCH: usize = 8;

/// The largest UDP payload in one IPv4 datagram (65,535 less the IP and UDP headers).
pub const MAX_DATAGRAM: usize = 65_507;

/// Times `recv` looks at an empty receive ring before it sleeps, unless the application
/// chose otherwise ([`Client::set_spin_polls`]), yielding the CPU every 16th look, so a
/// party that shares it runs: tens of microseconds. On a VM a sleep and the
/// wake-up that ends it cost the waker as much (an eventfd write that must interrupt a
/// halted vCPU), so an application in a conversation that slept at every pause would pay it
/// per message: with this, `shmnet rr`'s applications sleep about once per 100 transactions
/// instead of twice per transaction.
const SPIN_POLLS: u32 = 1024;

/// The application's producing rings.
#[derive(Clone, Copy)]
enum Ring {
    /// Requests (sends).
    Req,
    /// Returned chains.
    Ret,
}

/// The shared-memory parts: the application's window and its rings, and what the server's
/// isolation gives it besides.
struct Shm {
    app: Window,
    req: Producer,
    rx: Consumer,
    mode: Mode,
}

/// What an application of the `server` structure maps besides its rings.
enum Mode {
    /// `--isolation shared`: the data window (deliveries are read where the driver put
    /// them), the return ring, and the send buffers of its own window.
    Shared {
        data: Window,
        /// The buffers of `data`, made once (making them takes a reference on the mapping
        /// and looks up five regions: not per message).
        data_bufs: shmnet_chan::Buffers,
        ret: Producer,
        send_bufs: ServerPools,
        /// Buffers a writer short of send memory waits for at once (see [`SendBatch`]).
        batch: SendBatch,
        /// Chains read and given back but not yet on `ret`: they go in bursts of
        /// [`RETURN_BATCH`] while deliveries keep coming, and whenever a look finds nothing
        /// (every reap) or the application is about to sleep — so at most
        /// `RETURN_BATCH - 1` chains wait here, and only while the application is busy.
        /// Capacity [`RETURN_BATCH`], reserved at connect (no allocation per message).
        returns: Vec<Desc>,
    },
    /// `--isolation regions`: only memory of its own, registered ([`regions`]).
    Regions(regions::Own),
}

/// A connection to a shmnet server. Single-threaded: clone the sockets, not across threads.
#[derive(Clone)]
pub struct Client {
    inner: Rc<RefCell<Inner>>,
}

/// An ICMP destination-unreachable the server received about a datagram a UDP socket sent
/// ([`UdpSocket::take_error`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpUnreachable {
    /// What could not be reached: [`TcpFailure::Refused`] (the port; `ECONNREFUSED`),
    /// [`TcpFailure::HostUnreachable`] or [`TcpFailure::NetUnreachable`].
    pub failure: windows::TcpFailure,
    /// Where the datagram was going.
    pub peer: SocketAddrV4,
}

/// A bound UDP socket.
pub struct UdpSocket {
    inner: Rc<RefCell<Inner>>,
    id: u16,
    port: u16,
}

impl std::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("socket", &self.id)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Whether an ICMP error waits for any UDP socket of this client
    /// ([`UdpSocket::take_error`]): one look.
    pub fn udp_errors_waiting(&self) -> bool {
        !self.inner.borrow().tcp.udp_errors.is_empty()
    }

    /// Attaches to the server listening on `path`: checks that it runs as root or as our own
    /// user ([`ClientError::UntrustedServer`] if not), version handshake, then both windows.
    pub fn connect(path: impl AsRef<Path>) -> Result<Self, ClientError> {
        Self::attach_reserved(Self::reserve(path)?)
    }

    /// The first half of [`Client::connect`]: a control connection to the server at `path`,
    /// checked, on which nothing is said yet. A parent about to `fork` makes one for its
    /// child, which attaches over it ([`Client::attach_reserved`]) with the parent's
    /// credentials — a worker that gave up its privileges after the fork still reaches the
    /// server, and its fork ticket is for the parent's user. The server closes a
    /// connection that says nothing for 5 s.
    pub fn reserve(path: impl AsRef<Path>) -> Result<Reserved, ClientError> {
        let (ctl, _server) = control::connect_checked(path.as_ref())?;
        Ok(Reserved(ctl))
    }

    /// The second half of [`Client::connect`]: the version handshake and both windows, over
    /// a connection [`Client::reserve`] made.
    pub fn attach_reserved(reserved: Reserved) -> Result<Self, ClientError> {
        let ctl = reserved.0;
        control::send(
            &ctl,
            &Request::Hello {
                version: PROTOCOL_VERSION,
            },
        )?;
        let (ipc, isolated, address, prefix) =
            match control::recv_blocking::<Response>(ctl.as_fd())? {
                Response::Welcome {
                    ipc,
                    isolated,
                    address,
                    prefix,
                    ..
                } => (ipc, isolated, address, prefix),
                Response::Error(e) => return Err(ClientError::Refused(e)),
                other => {
                    return Err(ClientError::Protocol(format!(
                        "expected Welcome, got {other:?}"
                    )));
                }
            };
        let data_sock = if ipc {
            Some(control::recv_fd(&ctl)?)
        } else {
            None
        };
        let proto = |e: &dyn std::fmt::Display| ClientError::Protocol(e.to_string());
        let shm = if ipc {
            None
        } else {
            let data = if isolated {
                None
            } else {
                Some(recv_window(&ctl).map_err(|e| proto(&e))?)
            };
            let app = recv_window(&ctl).map_err(|e| proto(&e))?;
            let mode = match data {
                Some(data) => {
                    let send_bufs = app.server_pools().map_err(|e| proto(&e))?;
                    Mode::Shared {
                        ret: app.producer(RET).map_err(|e| proto(&e))?,
                        batch: SendBatch::new(send_bufs.buffers().geometry().total()),
                        returns: Vec::with_capacity(RETURN_BATCH),
                        data_bufs: data.buffers(),
                        send_bufs,
                        data,
                    }
                }
                None => Mode::Regions(regions::Own {
                    send: Region::create("shmnet-send", regions::SEND_REGION)
                        .map_err(|e| proto(&e))?,
                    send_id: RegionId(0),
                    arena: regions::SendArena::new(regions::SEND_REGION),
                    recv: Region::create("shmnet-recv", regions::recv_region_bytes())
                        .map_err(|e| proto(&e))?,
                    recv_id: RegionId(0),
                    posts: [
                        app.producer(windows::POST_SMALL).map_err(|e| proto(&e))?,
                        app.producer(windows::POST_LARGE).map_err(|e| proto(&e))?,
                    ],
                    resend: VecDeque::with_capacity(windows::APP_RING as usize),
                    failed_sends: 0,
                    bad_deliveries: 0,
                    posted: Default::default(),
                    reposts: Vec::with_capacity(regions::REPOST_BATCH),
                }),
            };
            Some(Shm {
                req: app.producer(REQ).map_err(|e| proto(&e))?,
                // Opaque: RX carries deliveries (a chain head, checked by the chain walk
                // that reads it, or a handle, checked against the receive region) and
                // completions of sends by handle (no buffer at all).
                rx: app
                    .consumer_with_limits(RX, shmnet_chan::DescLimits::OPAQUE)
                    .map_err(|e| proto(&e))?,
                app,
                mode,
            })
        };
        let inner = Inner {
            ctl,
            data_sock,
            shm,
            pending: pending::Pending::default(),
            done: VecDeque::new(),
            ipc_pending: FxHashMap::default(),
            packet: vec![0u8; 65_536 + control::IPC_HEADER],
            gone: false,
            address,
            prefix,
            moved: 0,
            udp_overflows: 0,
            last_read: FxHashMap::default(),
            latest_read: None,
            tcp: tcp::Book::default(),
            alive_checked: Duration::ZERO,
            spin_polls: SPIN_POLLS,
            lend_scratch: Vec::new(),
        };
        let client = Self {
            inner: Rc::new(RefCell::new(inner)),
        };
        client.set_up_regions()?;
        Ok(client)
    }

    /// `--isolation regions`: registers the library's send and receive regions and posts
    /// every receive buffer.
    fn set_up_regions(&self) -> Result<(), ClientError> {
        let mut guard = self.inner.borrow_mut();
        let i = &mut *guard;
        let fds = match i.shm.as_ref().map(|s| &s.mode) {
            Some(Mode::Regions(own)) => {
                let dup = |r: &Region| {
                    rustix::io::fcntl_dupfd_cloexec(r.fd(), 0)
                        .map_err(|e| ClientError::Protocol(format!("dup: {e}")))
                };
                (dup(&own.send)?, dup(&own.recv)?)
            }
            _ => return Ok(()),
        };
        let send_id = i.register_fd(fds.0.as_fd(), Perms::READ)?;
        let recv_id = i.register_fd(fds.1.as_fd(), Perms::WRITE)?;
        let Some(Mode::Regions(own)) = i.shm.as_mut().map(|s| &mut s.mode) else {
            unreachable!("matched above");
        };
        own.send_id = send_id;
        own.recv_id = recv_id;
        for (ring, d) in regions::all_posts(recv_id) {
            let k = usize::from(ring == windows::POST_LARGE);
            own.posts[k]
                .enqueue(d)
                .map_err(|_| ClientError::Protocol("a post ring is too small".into()))?;
            own.mark_posted(windows::posted_handle(&d).1);
        }
        Ok(())
    }

    /// Binds UDP `port` on the server's address; port 0 binds a free ephemeral port
    /// (49152–65535), which [`UdpSocket::port`] then names.
    pub fn udp_bind(&self, port: u16) -> Result<UdpSocket, ClientError> {
        let mut i = self.inner.borrow_mut();
        match i.call(Request::Bind { port })? {
            Response::Bound { socket, port: got } => {
                let id = u16::try_from(socket)
                    .map_err(|_| ClientError::Protocol(format!("socket number {socket}")))?;
                // A number reused: what the ring still holds for its old socket is read (and
                // given back) before this one takes it.
                i.await_released(id)?;
                Ok(UdpSocket {
                    inner: self.inner.clone(),
                    id,
                    // A server older than `Bound::port` says 0: the port asked for.
                    port: if got != 0 { got } else { port },
                })
            }
            Response::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Protocol(format!(
                "expected Bound, got {other:?}"
            ))),
        }
    }

    /// Registers `region`, the application's own memory, with the server: it may read it
    /// (`perms.read`: the application will send from it) and write it (`perms.write`: it
    /// will receive into it). Returns the region's number, which handles name. The server
    /// maps it until [`Client::unregister`] or the application goes (docs/isolation.md).
    pub fn register(&self, region: &Region, perms: Perms) -> Result<RegionId, ClientError> {
        self.inner.borrow_mut().register_fd(region.fd(), perms)
    }

    /// Unregisters a region: the server unmaps it and refuses handles to it from then on.
    pub fn unregister(&self, region: RegionId) -> Result<(), ClientError> {
        let mut i = self.inner.borrow_mut();
        match i.call(Request::Unregister { region: region.0 })? {
            Response::Unregistered { .. } => Ok(()),
            Response::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Protocol(format!(
                "expected Unregistered, got {other:?}"
            ))),
        }
    }

    /// The address the server answers for on its interface (`None` from a server older
    /// than the field).
    pub fn address(&self) -> Option<Ipv4Addr> {
        self.inner.borrow().address
    }

    /// The broadcast addresses of the server's subnet: the limited one (255.255.255.255)
    /// and, for a prefix shorter than 31 bits, the subnet's (what the stack accepts as
    /// broadcast and sends to Ethernet's broadcast address).
    pub fn is_broadcast(&self, ip: Ipv4Addr) -> bool {
        let i = self.inner.borrow();
        ip.is_broadcast()
            || matches!((i.address, i.prefix), (Some(a), Some(p)) if p < 31
                && ip == Ipv4Addr::from(u32::from(a) | (u32::MAX >> p)))
    }

    /// How many times a blocking receive looks at an empty receive ring before it sleeps
    /// (default 1,024: tens of microseconds, yielding the CPU every 16th look). Spinning
    /// saves the sleep and the wake-up a reply that comes soon would cost — on a VM they
    /// cost the waker as much as the sleeper — at the price of a CPU that looks meanwhile:
    /// 0 sleeps at once (a receiver that shares its CPUs with busier parties), more suits a
    /// latency-bound conversation on a CPU of its own. Like Linux's `SO_BUSY_POLL`, but
    /// counted in looks, not time (a look reads no clock). No effect under `ipc`.
    pub fn set_spin_polls(&self, polls: u32) {
        self.inner.borrow_mut().spin_polls = polls;
    }

    /// Bytes of the two windows this application maps (data, own); zeros in the `ipc`
    /// structure, which shares no memory.
    pub fn window_sizes(&self) -> (usize, usize) {
        let i = self.inner.borrow();
        i.shm.as_ref().map_or((0, 0), |s| match &s.mode {
            Mode::Shared { data, .. } => (data.size(), s.app.size()),
            Mode::Regions(_) => (0, s.app.size()),
        })
    }

    /// Whether the server runs `--isolation regions`: this application maps no memory but
    /// its own rings and regions.
    pub fn is_isolated(&self) -> bool {
        let i = self.inner.borrow();
        i.shm
            .as_ref()
            .is_some_and(|s| matches!(s.mode, Mode::Regions(_)))
    }

    /// `--isolation regions`: sends the server refused or could not make (completed as
    /// refused or failed, after `send_to` had returned), and deliveries that named no
    /// posted buffer and were ignored. Zeros otherwise.
    pub fn region_errors(&self) -> (u64, u64) {
        let i = self.inner.borrow();
        match i.shm.as_ref().map(|s| &s.mode) {
            Some(Mode::Regions(own)) => (own.failed_sends, own.bad_deliveries),
            _ => (0, 0),
        }
    }

    /// What a wait outside the client (a sockets library's `poll`) does before it sleeps:
    /// while too many deliveries are held, drops the datagrams of UDP sockets not being read
    /// (see [`Client::udp_overflows`]); returns how long the sleep may last at most (`None`:
    /// no bound), so that it looks again once another socket counts as unread.
    pub fn trim_unread(&self) -> Option<Duration> {
        self.inner.borrow_mut().trim_unread()
    }

    /// Datagrams dropped here because the application left too many unread on UDP sockets
    /// (each held receive memory its other sockets need: see `Inner::held_bound`), as a
    /// kernel drops what overflows a socket's receive buffer.
    pub fn udp_overflows(&self) -> u64 {
        self.inner.borrow().udp_overflows
    }

    /// Whether the server runs the `ipc` structure (datagrams copied through the socket).
    pub fn is_ipc(&self) -> bool {
        self.inner.borrow().shm.is_none()
    }
}

impl Inner {
    /// Registers the region whose memfd is `fd` (see [`Client::register`]).
    fn register_fd(
        &mut self,
        fd: rustix::fd::BorrowedFd<'_>,
        perms: Perms,
    ) -> Result<RegionId, ClientError> {
        let req = Request::Register {
            read: perms.read,
            write: perms.write,
        };
        match self.call_with_fd(&req, fd)? {
            Response::Registered { region, .. } => Ok(RegionId(region)),
            Response::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Protocol(format!(
                "expected Registered, got {other:?}"
            ))),
        }
    }

    fn call(&mut self, req: Request) -> Result<Response, ClientError> {
        if self.gone {
            return Err(ClientError::ServerGone);
        }
        control::send(&self.ctl, &req).map_err(|e| self.fail(e))?;
        self.answer()
    }

    /// [`Inner::call`] with a descriptor attached to the request.
    fn call_with_fd(
        &mut self,
        req: &Request,
        fd: rustix::fd::BorrowedFd<'_>,
    ) -> Result<Response, ClientError> {
        if self.gone {
            return Err(ClientError::ServerGone);
        }
        control::send_with_fd(&self.ctl, req, fd).map_err(|e| self.fail(e))?;
        self.answer()
    }

    /// The server's answer to the request just sent.
    fn answer(&mut self) -> Result<Response, ClientError> {
        let n = self
            .read_packet(false, None)?
            .ok_or(ClientError::TimedOut)?;
        serde_json::from_slice(&self.packet[..n]).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Reads one packet from the server into `self.packet` — from the `ipc` data socket if
    /// `data`, else from the control socket — waiting until `deadline` (`None`: without
    /// limit). `Ok(None)` on timeout.
    fn read_packet(
        &mut self,
        data: bool,
        deadline: Option<Instant>,
    ) -> Result<Option<usize>, ClientError> {
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let sock = match (&self.data_sock, data) {
                (Some(d), true) => d,
                _ => &self.ctl,
            };
            let mut fds = [PollFd::new(sock, PollFlags::IN)];
            let ts = left.map(|l| Timespec {
                tv_sec: l.as_secs() as _,
                tv_nsec: l.subsec_nanos() as _,
            });
            let ready = rustix::event::poll(&mut fds, ts.as_ref()).unwrap_or(0);
            if ready == 0 {
                if left.is_some_and(|l| l.is_zero()) {
                    return Ok(None);
                }
                continue;
            }
            let mut buf = std::mem::take(&mut self.packet);
            let r = rustix::net::recv(sock, &mut buf, rustix::net::RecvFlags::DONTWAIT);
            self.packet = buf;
            match r {
                Ok((0, _)) => {
                    self.gone = true;
                    return Err(ClientError::ServerGone);
                }
                Ok((n, _)) => return Ok(Some(n)),
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => {
                    self.gone = true;
                    return Err(ClientError::ServerGone);
                }
            }
        }
    }

    /// Counts a delivery that made no sense (under `--isolation regions`, where the count
    /// is kept).
    fn count_bad_delivery(&mut self) {
        if let Some(Mode::Regions(own)) = self.shm.as_mut().map(|s| &mut s.mode) {
            own.bad_deliveries += 1;
        }
    }

    /// Sets aside an `ipc` packet of `n` bytes in `self.packet`: a datagram for its UDP
    /// socket, stream bytes or an event for its TCP socket.
    fn stash_ipc(&mut self, n: usize) {
        self.moved += 1;
        if let Some(d) = control::parse_ipc_event(&self.packet[..n]) {
            if let Some((sock, ev)) = windows::event_of(&d)
                && self.note_tcp(sock, Some(ev))
            {
                let q = self.tcp.ipc_items.entry(sock).or_default();
                q.push_back(tcp::IpcItem::Event(d));
            }
            return;
        }
        if let Some((control::TAG_DELIVER, sock, _)) = control::parse_ipc_header(&self.packet[..n])
            && self.tcp.ids.contains(&sock)
        {
            if self.note_tcp(sock, None) {
                let bytes = self.packet[control::IPC_HEADER..n].to_vec();
                let q = self.tcp.ipc_items.entry(sock).or_default();
                q.push_back(tcp::IpcItem::Data(bytes));
            }
            return;
        }
        if let Some((_, sock, src)) = control::parse_ipc_header(&self.packet[..n])
            && !self.tcp.closing.contains(&sock)
        {
            let payload = self.packet[control::IPC_HEADER..n].to_vec();
            self.ipc_pending
                .entry(sock)
                .or_default()
                .push_back((payload, src));
        }
    }

    /// UDP socket `id` was closed: what is held for it is given back, and whatever comes
    /// for it until its `Released` is read is too.
    fn udp_release(&mut self, id: u16) {
        self.ipc_pending.remove(&id);
        self.tcp.udp_errors.remove(&id);
        self.drop_unread(id);
        self.last_read.remove(&id);
        if self.latest_read.is_some_and(|(s, _)| s == id) {
            self.latest_read = None;
        }
        self.tcp.closing.insert(id);
        // What the ring holds for it now is given back at once (its posted buffers or the
        // server's chains are memory the server wants), and room made for its `Released`.
        self.drain_rx();
    }

    /// `ipc`: the next datagram for socket `id`, waiting until `deadline`.
    fn ipc_recv(
        &mut self,
        id: u16,
        buf: &mut [u8],
        deadline: Option<Instant>,
    ) -> Result<Option<(usize, SocketAddrV4)>, ClientError> {
        loop {
            if let Some((data, src)) = self.ipc_pending.get_mut(&id).and_then(VecDeque::pop_front) {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                return Ok(Some((n, src)));
            }
            let Some(n) = self.read_packet(true, deadline)? else {
                return Ok(None);
            };
            match control::parse_ipc_header(&self.packet[..n]) {
                Some((control::TAG_DELIVER, sock, src))
                    if sock == id && !self.tcp.ids.contains(&sock) =>
                {
                    let len = (n - control::IPC_HEADER).min(buf.len());
                    buf[..len].copy_from_slice(
                        &self.packet[control::IPC_HEADER..control::IPC_HEADER + len],
                    );
                    return Ok(Some((len, src)));
                }
                Some((control::TAG_DELIVER | control::TAG_EVENT, ..)) => self.stash_ipc(n),
                _ => {}
            }
        }
    }

    fn fail(&mut self, e: ControlError) -> ClientError {
        if matches!(e, ControlError::HungUp) {
            self.gone = true;
        }
        e.into()
    }

    /// Whether the control socket says the server hung up (non-blocking).
    fn check_alive(&mut self) -> Result<(), ClientError> {
        if self.gone {
            return Err(ClientError::ServerGone);
        }
        let mut fds = [PollFd::new(&self.ctl, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0) > 0
            && fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR)
        {
            self.gone = true;
            return Err(ClientError::ServerGone);
        }
        Ok(())
    }

    /// [`Inner::check_alive`] if [`ALIVE_CHECK_EVERY`] has passed since the last look.
    fn check_alive_now_and_then(&mut self) -> Result<(), ClientError> {
        if self.gone {
            return Err(ClientError::ServerGone);
        }
        let now = crate::coarse_clock::now();
        if now.saturating_sub(self.alive_checked) < ALIVE_CHECK_EVERY {
            return Ok(());
        }
        self.alive_checked = now;
        self.check_alive()
    }

    /// The next delivery for socket `id`, if any is there now.
    fn next_for(&mut self, id: u16) -> Option<Desc> {
        let now = crate::coarse_clock::now();
        if let Some((sock, at)) = self.latest_read
            && sock != id
        {
            self.last_read.insert(sock, at);
        }
        self.latest_read = Some((id, now));
        if let Some(d) = self.pending.pop(id) {
            return Some(d);
        }
        while let Some(d) = self.shm.as_mut()?.rx.dequeue() {
            if let Some(d) = self.stash_unless(d, Some(id)) {
                return Some(d);
            }
        }
        None
    }

    /// Moves everything waiting on the receive ring to where it belongs (deliveries to
    /// their sockets' queues, completions to `done`).
    fn drain_rx(&mut self) {
        while let Some(d) = self.shm.as_mut().and_then(|s| s.rx.dequeue()) {
            self.stash_unless(d, None);
        }
    }

    /// Keeps `d` for later — a completion in `done`, a delivery in its socket's queue —
    /// unless it is a delivery for socket `wanted`, which is returned.
    fn stash_unless(&mut self, d: Desc, wanted: Option<u16>) -> Option<Desc> {
        self.moved += 1;
        if d.len & windows::RX_DONE != 0 {
            self.done.push_back(d);
            return None;
        }
        if d.len & windows::RX_EVENT != 0 {
            let Some((sock, ev)) = windows::event_of(&d) else {
                self.count_bad_delivery();
                return None;
            };
            if !self.note_tcp(sock, Some(ev)) {
                return None;
            }
            if Some(sock) == wanted {
                return Some(d);
            }
            if !self.pending.push(sock, d) {
                self.count_bad_delivery();
            }
            return None;
        }
        let sock = match self.shm.as_mut().map(|s| &mut s.mode) {
            Some(Mode::Regions(own)) => {
                // A delivery must name one of our posted buffers, with a length that fits:
                // claimed here, a buffer cannot be delivered twice, so no more deliveries
                // can wait than we posted buffers.
                own.check_delivery(&d)?;
                d.aux as u16
            }
            _ => windows::rx_meta(&d).0,
        };
        if !self.note_tcp(sock, None) {
            // For a TCP socket we closed: nobody will read it.
            self.discard(d);
            return None;
        }
        if Some(sock) == wanted {
            return Some(d);
        }
        // Data holds memory of its own (see `pending`), memory every socket of the
        // application receives into. A UDP socket that is not read would take all of it
        // and starve the others (a TCP connection's bytes could then never be delivered):
        // past a bound, while it is not being read, its oldest datagram is dropped and
        // counted, as a kernel drops what overflows a socket's receive buffer. A socket
        // being read keeps its burst (its reader is taking it).
        if !self.tcp.ids.contains(&sock)
            && self.pending.data() >= self.held_bound()
            && self.unread(sock, crate::coarse_clock::now())
        {
            self.drop_oldest(sock);
        }
        let _ = self.pending.push(sock, d);
        None
    }

    /// Whether UDP socket `sock` counts as not being read at `now`: not looked at by a
    /// receive for [`UNREAD_AFTER`] (never, if it never was).
    fn unread(&self, sock: u16, now: Duration) -> bool {
        let at = match self.latest_read {
            Some((s, at)) if s == sock => Some(at),
            _ => self.last_read.get(&sock).copied(),
        };
        at.is_none_or(|at| now.saturating_sub(at) >= UNREAD_AFTER)
    }

    /// Drops the oldest datagram held for `sock`, counted.
    fn drop_oldest(&mut self, sock: u16) {
        if let Some(old) = self.pending.pop(sock) {
            self.discard(old);
            self.udp_overflows += 1;
        }
    }

    /// Before a sleep: while more deliveries are held than the bound, the datagrams of UDP
    /// sockets not being read are dropped, oldest first, down to the bound (they may be all
    /// that keeps the server from delivering what the sleeper waits for). Returns how long
    /// the sleep may last at most: until a socket holding datagrams counts as unread, while
    /// the bound is still passed.
    fn trim_unread(&mut self) -> Option<Duration> {
        if self.pending.data() < self.held_bound() {
            return None;
        }
        let now = crate::coarse_clock::now();
        let udp: Vec<u16> = self
            .pending
            .sockets()
            .filter(|s| !self.tcp.ids.contains(s))
            .collect();
        for sock in udp {
            while self.pending.data() >= self.held_bound()
                && self.pending.any(sock, |_| true)
                && self.unread(sock, now)
            {
                self.drop_oldest(sock);
            }
        }
        (self.pending.data() >= self.held_bound()).then_some(UNREAD_AFTER)
    }

    /// Deliveries held for later reads past which a UDP socket's oldest is dropped: three
    /// quarters of the posted receive buffers (`regions`), or of what the app window's
    /// deliveries may hold of the server's pool (`shared`).
    fn held_bound(&self) -> usize {
        match self.shm.as_ref().map(|s| &s.mode) {
            Some(Mode::Regions(_)) => regions::POSTED_BUFFERS * 3 / 4,
            _ => HELD_SHARED,
        }
    }

    /// Copies delivery `d` into `buf` and gives its memory back, calling `hook` around the
    /// copy of each buffer.
    fn take<H: RecvHook + ?Sized>(
        &mut self,
        d: Desc,
        buf: &mut [u8],
        hook: &mut H,
    ) -> Result<(usize, SocketAddrV4), ClientError> {
        self.lend(d, |l| (l.copy_to_with(buf, hook), l.source()))
    }

    /// Lends delivery `d` to `f` where it lies, then gives its memory back: the posted
    /// buffer to its post ring (`--isolation regions`; the delivery was checked and its
    /// buffer claimed by [`regions::Own::check_delivery`] when it came off the ring), or
    /// the chain to the server (`--isolation shared`). The memory goes back if `f` panics
    /// too (the panic then goes on).
    fn lend<R>(&mut self, d: Desc, f: impl FnOnce(&Lent<'_>) -> R) -> Result<R, ClientError> {
        // Unwinding out of `f` would skip the give-back below and lose the buffer or chain
        // for good: catch it, give back, and resume it.
        let f = |l: &Lent<'_>| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(l)));
        let shm = self
            .shm
            .as_mut()
            .expect("deliveries come only with windows");
        match &mut shm.mode {
            Mode::Regions(own) => {
                let (ring, off, cap, len) = regions::span_of(own.recv_id, &d).ok_or_else(|| {
                    ClientError::Protocol("a delivery outside the posted buffers".into())
                })?;
                let source = own.source_at(off);
                // SAFETY: the buffer is ours until we post it again below; the server wrote
                // it before it published the delivery and writes it no more.
                let data = unsafe { own.recv.bytes(off + windows::RECV_HEADER as u64, len) }
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                let idx = BufIdx((off / u64::from(windows::SMALL_POST)) as u32);
                let r = f(&Lent::whole(idx, data, source));
                own.repost(ring, off, cap);
                Ok(r.unwrap_or_else(|p| std::panic::resume_unwind(p)))
            }
            Mode::Shared { data_bufs, .. } => {
                let (_, source) = windows::rx_meta(&d);
                let r = f(&Lent::chain(
                    data_bufs,
                    BufIdx(d.buf),
                    d.len as usize,
                    source,
                ));
                self.give_back(d.buf)?;
                Ok(r.unwrap_or_else(|p| std::panic::resume_unwind(p)))
            }
        }
    }

    /// `--isolation shared`: gives the chain at `head` back to the server, in a burst with
    /// the next ones (see `Mode::Shared::returns`): one publication of the ring's head,
    /// and one cache line handed to the server, per [`RETURN_BATCH`] chains rather than per
    /// chain.
    fn give_back(&mut self, head: u32) -> Result<(), ClientError> {
        if let Some(Mode::Shared { returns, .. }) = self.shm.as_mut().map(|s| &mut s.mode) {
            returns.push(Desc::new(head, 0));
            if returns.len() >= RETURN_BATCH {
                return self.flush_returns();
            }
        }
        Ok(())
    }

    /// Puts on the return ring what fits of the chains given back (see
    /// `Mode::Shared::returns`), or posts again the buffers read (`Own::reposts`), without
    /// waiting. Returns whether none is left.
    fn try_flush_returns(&mut self) -> bool {
        match self.shm.as_mut().map(|s| &mut s.mode) {
            Some(Mode::Regions(own)) => {
                own.flush_reposts();
                true
            }
            Some(Mode::Shared { ret, returns, .. }) if !returns.is_empty() => {
                let n = ret.enqueue_burst(returns);
                returns.drain(..n);
                returns.is_empty()
            }
            _ => true,
        }
    }

    /// Puts every chain given back on the return ring. The ring has room for everything we
    /// were given unless the server is not draining it, in which case wait for it (or for
    /// its death). The clock is read only once the ring is found full, not per message.
    fn flush_returns(&mut self) -> Result<(), ClientError> {
        let mut deadline = None;
        while !self.try_flush_returns() {
            self.check_alive()?;
            let now = Instant::now();
            if now > *deadline.get_or_insert(now + Duration::from_secs(10)) {
                return Err(ClientError::Protocol(
                    "the server stopped taking buffers back".into(),
                ));
            }
            self.sleep_for_room(Ring::Ret);
        }
        Ok(())
    }

    /// Waits for the next delivery for socket `id` until `deadline`: spins a while on an
    /// empty ring, then sleeps on its wake-up.
    ///
    /// A delivery already there is taken before anything else, with no clock read and no
    /// detour through the socket queues (the common case of a busy receiver); completions
    /// read meanwhile wait in `done` for the next reap (every send reaps, and so does every
    /// miss here).
    ///
    /// Invariant: the last thing that reads the receive ring before [`Inner::sleep_rx`] is
    /// the look for `id`'s delivery. A delivery read anywhere after that look (the `reap`
    /// used to come there) sits in its socket's queue while the ring looks empty, and the
    /// sleep waits out its deadline for a wake-up that was already spent — in a
    /// request-response exchange, forever.
    fn wait_delivery(
        &mut self,
        id: u16,
        deadline: impl Into<Deadline>,
    ) -> Result<Desc, ClientError> {
        let mut deadline = deadline.into();
        if let Some(d) = self.next_for(id) {
            return Ok(d);
        }
        // What arrived before the server died is still read (above); then its death is said.
        if self.gone {
            return Err(ClientError::ServerGone);
        }
        let mut polls = 0u32;
        loop {
            // Completions that came meanwhile: free their extents, and send again what
            // missed (drop-on-miss) — a request-response client waits here for the reply to
            // a request that may have to go again.
            self.reap();
            if let Some(d) = self.next_for(id) {
                return Ok(d);
            }
            // The clock is read on the first miss, every 16th look (with the yield), and
            // before every sleep.
            if (polls % 16 == 0 || polls >= self.spin_polls) && deadline.passed() {
                // A caller that only looks and waits elsewhere (the sockets library's reads
                // and accepts, woken by the control socket's hang-up) learns here that the
                // server died; else it would look, and wake, for ever.
                self.check_alive_now_and_then()?;
                return Err(ClientError::TimedOut);
            }
            if polls < self.spin_polls {
                polls += 1;
                if polls % 16 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            self.sleep_rx(deadline.fix())?;
        }
    }

    /// Reads everything on the receive ring; under `--isolation regions`, handles the
    /// completions of the library's own sends (freeing their extents) and posts again the
    /// sends that missed. Completions of `send_from` stay in `done` for [`Inner::wait_done`].
    fn reap(&mut self) {
        self.try_flush_returns();
        self.drain_rx();
        let Some(Shm {
            mode: Mode::Regions(own),
            req,
            ..
        }) = self.shm.as_mut()
        else {
            return;
        };
        self.done.retain(|c| !own.complete(c));
        // What is left is a `send_from`'s completion (one at most is awaited) or made up by
        // the server: keep a few, never an unbounded pile.
        while self.done.len() > MAX_STRAY_COMPLETIONS {
            self.done.pop_front();
            own.bad_deliveries += 1;
        }
        while let Some(&d) = own.resend.front() {
            if req.enqueue(d).is_err() {
                break;
            }
            own.resend.pop_front();
        }
    }

    /// Waits for the completion of send `d` (deliveries read meanwhile are kept for their
    /// sockets; completions of other sends, which cannot be pending, are dropped).
    fn wait_done(&mut self, d: &Desc) -> Result<windows::SendStatus, ClientError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.reap();
            while let Some(c) = self.done.pop_front() {
                if c.buf == d.buf && c.flags == d.flags && c.aux == d.aux {
                    return windows::done_status(&c).ok_or_else(|| {
                        ClientError::Protocol(format!("an unknown send status in {c:?}"))
                    });
                }
            }
            if Instant::now() > deadline {
                return Err(ClientError::TimedOut);
            }
            self.sleep_rx(Some(deadline))?;
        }
    }

    /// Sleeps until the server frees room in a full ring of ours (it raises the ring's room
    /// eventfd when it does), or the control socket stirs (the server died), at most 100 ms
    /// (the caller re-checks the server and its own deadline).
    fn sleep_for_room(&mut self, which: Ring) {
        let Some(shm) = self.shm.as_mut() else {
            return;
        };
        let ring = match (which, &mut shm.mode) {
            (Ring::Req, _) => &mut shm.req,
            (Ring::Ret, Mode::Shared { ret, .. }) => ret,
            (Ring::Ret, Mode::Regions(_)) => return,
        };
        if !ring.prepare_wait_room() {
            return;
        }
        if let Some(fd) = ring.room_fd() {
            let mut fds = [
                PollFd::from_borrowed_fd(fd, PollFlags::IN),
                PollFd::new(&self.ctl, PollFlags::IN),
            ];
            let ts = Timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&ts));
        }
        ring.finish_wait_room();
    }

    /// Sleeps until the receive queue has something, the server dies, or `deadline` passes.
    fn sleep_rx(&mut self, deadline: Option<Instant>) -> Result<(), ClientError> {
        self.flush_returns()?;
        let Some(shm) = self.shm.as_mut() else {
            return Ok(());
        };
        if !shm.rx.prepare_wait() {
            return Ok(());
        }
        let cap = self.trim_unread();
        let shm = self.shm.as_ref().expect("checked above");
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let left = match (left, cap) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        };
        let mut fds = vec![PollFd::new(&self.ctl, PollFlags::IN)];
        if let Some(fd) = shm.rx.wake_fd() {
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
        let ts = left.map(|l| Timespec {
            tv_sec: l.as_secs() as _,
            tv_nsec: l.subsec_nanos() as _,
        });
        let _ = rustix::event::poll(&mut fds, ts.as_ref());
        let hup = fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR);
        drop(fds);
        if let Some(shm) = self.shm.as_mut() {
            shm.rx.finish_wait();
        }
        if hup {
            self.gone = true;
            return Err(ClientError::ServerGone);
        }
        Ok(())
    }
}

/// `--isolation regions`: stages `data` for `to` in the send region and posts its handle on
/// `REQ` for socket `id`, without waiting for the server: the extent is freed when its
/// completion comes back. Waits (up to `wait`) while the send region is full.
fn send_staged(
    i: &mut Inner,
    id: u16,
    data: &[u8],
    to: SocketAddrV4,
    wait: Option<Duration>,
) -> Result<(), ClientError> {
    // The clock is read only once the send region is found full, not per send.
    let mut deadline: Option<Option<Instant>> = None;
    loop {
        i.reap();
        let Some(Mode::Regions(own)) = i.shm.as_mut().map(|s| &mut s.mode) else {
            unreachable!("send_inner checked the mode");
        };
        if let Some(d) = own.stage(data, to, id) {
            while i.shm.as_mut().is_some_and(|s| s.req.enqueue(d).is_err()) {
                // REQ holds more than the send region has extents for small datagrams
                // only if the server stopped serving us.
                i.check_alive()?;
                i.sleep_for_room(Ring::Req);
                i.reap();
            }
            return Ok(());
        }
        let now = Instant::now();
        let deadline = *deadline.get_or_insert_with(|| wait.map(|w| now + w));
        if deadline.is_none_or(|d| now >= d) {
            return Err(ClientError::TimedOut);
        }
        // Completions come on RX: sleep until one does.
        i.check_alive()?;
        i.sleep_rx(deadline)?;
    }
}

impl Inner {
    /// Sends `data` on socket `id` (to `to`: a UDP socket's destination; a TCP socket's is
    /// ignored), waiting up to `wait` for send memory (`None`: not at all).
    fn send_message(
        &mut self,
        id: u16,
        data: &[u8],
        to: SocketAddrV4,
        wait: Option<Duration>,
    ) -> Result<(), ClientError> {
        if data.len() > MAX_DATAGRAM {
            return Err(ClientError::MessageTooLarge(data.len()));
        }
        let i = self;
        i.check_alive_now_and_then()?;
        if i.shm.is_none() {
            let hdr = control::ipc_header(control::TAG_SEND, id, to);
            let deadline = wait.map(|w| Instant::now() + w);
            let sock = i.data_sock.as_ref().unwrap_or(&i.ctl);
            loop {
                match control::send_raw(sock, &[&hdr, data]) {
                    Ok(true) => return Ok(()),
                    Ok(false) if deadline.is_some_and(|d| Instant::now() < d) => {
                        let mut fds = [PollFd::new(sock, PollFlags::OUT)];
                        let ts = Timespec {
                            tv_sec: 0,
                            tv_nsec: 10_000_000,
                        };
                        let _ = rustix::event::poll(&mut fds, Some(&ts));
                    }
                    Ok(false) => return Err(ClientError::TimedOut),
                    Err(e) => return Err(i.fail(e)),
                }
            }
        }
        if matches!(i.shm.as_ref().map(|s| &s.mode), Some(Mode::Regions(_))) {
            return send_staged(i, id, data, to, wait);
        }
        let Some(Mode::Shared {
            send_bufs, batch, ..
        }) = i.shm.as_mut().map(|s| &mut s.mode)
        else {
            unreachable!("checked above");
        };
        // Send chains the server has finished with come back through the deferred queue.
        send_bufs.drain_deferred(usize::MAX);
        let size = send_bufs.buffers().geometry().data_size as usize;
        let need = (SEND_HEADER + data.len()).div_ceil(size);
        // A chain on the stack, not the heap: a send allocates nothing.
        if need > MAX_SEND_CHAIN {
            return Err(ClientError::Protocol(format!(
                "the server's send buffers ({size} B) are too small for a {}-byte datagram",
                data.len()
            )));
        }
        // A writer short of send memory first waits for a batch to come back (one wake-up
        // for the lot); the buffers are then taken below, waiting per buffer only if the
        // batch did not come.
        if let Some(t) = wait
            && send_bufs.buffers().free_count() < need as u32
        {
            let target = batch.target(need as u32);
            let came = send_bufs.wait_for_free(target, Some(t.min(SendBatch::PATIENCE)));
            batch.learn(came);
        }
        let mut held = [0u32; MAX_SEND_CHAIN];
        for k in 0..need {
            let b = match wait {
                Some(t) => send_bufs.alloc_wait(Some(t)),
                None => send_bufs.alloc(),
            };
            match b {
                Some(b) => held[k] = b,
                None => {
                    for &b in &held[..k] {
                        send_bufs.release(b);
                    }
                    return Err(ClientError::TimedOut);
                }
            }
        }
        let chain = &held[..need];
        let bufs = send_bufs.buffers();
        let hdr = windows::encode_dst(to);
        let mut rest = data;
        for (k, &b) in chain.iter().enumerate() {
            let mut at = 0;
            if k == 0 {
                bufs.write(b, 0, &hdr).expect("buffer holds the header");
                at = SEND_HEADER;
            }
            let take = rest.len().min(size - at);
            bufs.write(b, at, &rest[..take]).expect("sized to fit");
            bufs.set_off_len(b, 0, (at + take) as u16)
                .expect("sized to fit");
            rest = &rest[take..];
        }
        bufs.chain(chain).expect("our own buffers");
        let d = Desc {
            buf: chain[0],
            len: data.len() as u32,
            flags: 0,
            aux: u32::from(id),
        };
        while i.shm.as_mut().is_some_and(|s| s.req.enqueue(d).is_err()) {
            // The request queue is deeper than the send pool, so this only happens if the
            // server stopped serving us.
            i.check_alive()?;
            i.sleep_for_room(Ring::Req);
        }
        Ok(())
    }
}

impl UdpSocket {
    /// The bound port (for a bind of port 0, the one the server picked).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Receives the next message, sleeping until one comes. Returns its length (truncated
    /// to `buf`) and its sender.
    pub fn recv(&self, buf: &mut [u8]) -> Result<(usize, SocketAddrV4), ClientError> {
        self.recv_until(buf, Deadline::Never)
    }

    /// As [`UdpSocket::recv`], giving up after `timeout`.
    pub fn recv_timeout(
        &self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(usize, SocketAddrV4), ClientError> {
        self.recv_until(buf, Deadline::After(timeout))
    }

    /// The oldest ICMP error the server received about this socket's datagrams and the
    /// application has not taken (at most the newest eight are kept). Errors reach the
    /// socket as the receive ring is read — by any receive, poll or wait of this client —
    /// and this call does not read it: it costs one look while none waits.
    ///
    /// Only hard errors come (port, protocol, administratively prohibited, unknown net or
    /// host): those Linux reports to a connected UDP socket without `IP_RECVERR`. A receive
    /// goes on without them; [`Client::poll`] reports the socket readable while one waits.
    pub fn take_error(&self) -> Option<UdpUnreachable> {
        let mut i = self.inner.borrow_mut();
        if i.tcp.udp_errors.is_empty() {
            return None;
        }
        let q = i.tcp.udp_errors.get_mut(&self.id)?;
        let e = q.pop_front();
        if q.is_empty() {
            i.tcp.udp_errors.remove(&self.id);
        }
        e
    }

    /// Whether a datagram the library has read off the ring waits for this socket (what
    /// [`Client::poll`] calls readable, less the errors). Does not read the ring.
    pub fn has_datagram(&self) -> bool {
        let i = self.inner.borrow();
        i.pending.any(self.id, |_| true)
            || i.ipc_pending.get(&self.id).is_some_and(|q| !q.is_empty())
    }

    /// Receives a message if one is there now.
    pub fn try_recv(&self, buf: &mut [u8]) -> Result<Option<(usize, SocketAddrV4)>, ClientError> {
        let mut i = self.inner.borrow_mut();
        if i.shm.is_none() {
            return i.ipc_recv(self.id, buf, Some(Instant::now()));
        }
        match i.next_for(self.id) {
            Some(d) => i.take(d, buf, &mut NoHook).map(Some),
            None => {
                i.reap();
                i.check_alive().map(|()| None)
            }
        }
    }

    /// As [`UdpSocket::recv_timeout`], with an instrument around the copy of every buffer
    /// (the residency probe: see `shmnet_stack::RecvHook`). In the `ipc` structure, where
    /// messages arrive already copied into a socket's bytes, the hook is not called.
    pub fn recv_with_hook<H: RecvHook + ?Sized>(
        &self,
        buf: &mut [u8],
        timeout: Duration,
        hook: &mut H,
    ) -> Result<(usize, SocketAddrV4), ClientError> {
        self.recv_until_with(buf, Deadline::After(timeout), hook)
    }

    fn recv_until(
        &self,
        buf: &mut [u8],
        deadline: Deadline,
    ) -> Result<(usize, SocketAddrV4), ClientError> {
        self.recv_until_with(buf, deadline, &mut NoHook)
    }

    fn recv_until_with<H: RecvHook + ?Sized>(
        &self,
        buf: &mut [u8],
        mut deadline: Deadline,
        hook: &mut H,
    ) -> Result<(usize, SocketAddrV4), ClientError> {
        let mut i = self.inner.borrow_mut();
        if i.shm.is_none() {
            return i
                .ipc_recv(self.id, buf, deadline.fix())?
                .ok_or(ClientError::TimedOut);
        }
        let d = i.wait_delivery(self.id, deadline)?;
        i.take(d, buf, hook)
    }

    /// Receives the next message and lends it to `f` where it lies, without copying it
    /// (see [`Lent`]), sleeping until one comes; its memory goes back when `f` returns.
    /// Returns what `f` returns.
    ///
    /// `f` must not use this client or its sockets: they are busy while it runs (a call
    /// panics, as a `RefCell` borrowed twice).
    ///
    /// ```no_run
    /// # let client = shmnet_io::client::Client::connect(shmnet_io::control::default_socket())?;
    /// let sock = client.udp_bind(5001)?;
    /// let sum = sock.recv_in_place(|d| d.segments().flatten().map(|&b| u64::from(b)).sum::<u64>())?;
    /// # Ok::<(), shmnet_io::client::ClientError>(())
    /// ```
    pub fn recv_in_place<R>(&self, f: impl FnOnce(&Lent<'_>) -> R) -> Result<R, ClientError> {
        self.recv_in_place_until(Deadline::Never, f)
    }

    /// As [`UdpSocket::recv_in_place`], giving up after `timeout`.
    pub fn recv_in_place_timeout<R>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&Lent<'_>) -> R,
    ) -> Result<R, ClientError> {
        self.recv_in_place_until(Deadline::After(timeout), f)
    }

    /// As [`UdpSocket::recv_in_place`] if a message is there now (`Ok(None)` otherwise,
    /// without waiting): what a non-blocking `recvmsg` needs — the message's whole length
    /// (for `MSG_TRUNC`) and its bytes to scatter, with no copy but the one into the
    /// caller's buffers.
    pub fn try_recv_in_place<R>(
        &self,
        f: impl FnOnce(&Lent<'_>) -> R,
    ) -> Result<Option<R>, ClientError> {
        let mut i = self.inner.borrow_mut();
        if i.shm.is_none() {
            let mut scratch = std::mem::take(&mut i.lend_scratch);
            scratch.resize(MAX_DATAGRAM, 0);
            let got = i.ipc_recv(self.id, &mut scratch, Some(Instant::now()));
            let r = got
                .map(|got| got.map(|(n, src)| f(&Lent::whole(BufIdx::NONE, &scratch[..n], src))));
            i.lend_scratch = scratch;
            return r;
        }
        match i.next_for(self.id) {
            Some(d) => i.lend(d, f).map(Some),
            None => {
                i.reap();
                i.check_alive().map(|()| None)
            }
        }
    }

    fn recv_in_place_until<R>(
        &self,
        mut deadline: Deadline,
        f: impl FnOnce(&Lent<'_>) -> R,
    ) -> Result<R, ClientError> {
        let mut i = self.inner.borrow_mut();
        if i.shm.is_none() {
            // `ipc`: the datagram came in a packet; lend the bytes read out of it.
            let mut scratch = std::mem::take(&mut i.lend_scratch);
            scratch.resize(MAX_DATAGRAM, 0);
            let got = i.ipc_recv(self.id, &mut scratch, deadline.fix());
            let r = got.and_then(|got| {
                let (n, src) = got.ok_or(ClientError::TimedOut)?;
                Ok(f(&Lent::whole(BufIdx::NONE, &scratch[..n], src)))
            });
            i.lend_scratch = scratch;
            return r;
        }
        let d = i.wait_delivery(self.id, deadline)?;
        i.lend(d, f)
    }

    /// Sends `data` to `to`, waiting for send buffers if all are in use.
    pub fn send_to(&self, data: &[u8], to: SocketAddrV4) -> Result<(), ClientError> {
        self.send_inner(data, to, Some(Duration::from_secs(10)))
    }

    /// Sends `data` to `to` if send buffers are free now (else `TimedOut`).
    pub fn try_send_to(&self, data: &[u8], to: SocketAddrV4) -> Result<(), ClientError> {
        self.send_inner(data, to, None)
    }

    fn send_inner(
        &self,
        data: &[u8],
        to: SocketAddrV4,
        wait: Option<Duration>,
    ) -> Result<(), ClientError> {
        self.inner
            .borrow_mut()
            .send_message(self.id, data, to, wait)
    }

    /// Sends the `len` bytes at `off` of `region` (registered readable as `id`, see
    /// [`Client::register`]) to `to`, from where they lie: the server reads them through
    /// its lookup cache, and no send buffer or copy into one is involved. The 8 bytes before
    /// `off` are the library's (the destination goes there), so `off` must be at least 8.
    ///
    /// Returns once the server has sent the datagram, so the bytes may be reused at once.
    /// A send the server dropped on a lookup-cache miss (seed 004's drop-on-miss) is sent
    /// again here, pausing 20 µs and doubling, while the server's miss thread brings the
    /// line in (for up to 10 s; under `--on-miss buffer` the server holds it instead).
    pub fn send_from(
        &self,
        region: &Region,
        id: RegionId,
        off: u64,
        len: usize,
        to: SocketAddrV4,
    ) -> Result<(), ClientError> {
        if len > MAX_DATAGRAM {
            return Err(ClientError::MessageTooLarge(len));
        }
        let Some(start) = off.checked_sub(SEND_HEADER as u64) else {
            return Err(ClientError::Refused(format!(
                "send_from needs the {SEND_HEADER} bytes before its offset for the destination: offset {off} is too small"
            )));
        };
        region
            .write(start, &windows::encode_dst(to))
            .map_err(|e| ClientError::Refused(e.to_string()))?;
        let mut i = self.inner.borrow_mut();
        if i.shm.is_none() {
            return Err(ClientError::Refused(
                "send_from needs the server structure (the ipc structure shares no memory)".into(),
            ));
        }
        let d = windows::handle_desc(id.0, start, (SEND_HEADER + len) as u32, self.id)
            .ok_or_else(|| ClientError::Refused(format!("offset {off} is past 16 TiB")))?;
        let mut pause = Duration::from_micros(20);
        let deadline = Instant::now() + SEND_FROM_PATIENCE;
        while Instant::now() < deadline {
            i.check_alive_now_and_then()?;
            while i.shm.as_mut().is_some_and(|s| s.req.enqueue(d).is_err()) {
                i.check_alive()?;
                i.sleep_for_room(Ring::Req);
            }
            match i.wait_done(&d)? {
                windows::SendStatus::Sent => return Ok(()),
                windows::SendStatus::Miss => {
                    // The line is on its way from the miss thread: give it a moment.
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
                windows::SendStatus::Refused => {
                    return Err(ClientError::Refused(format!(
                        "the server refused to read {len} bytes at offset {off} of region {}: not inside a region registered readable",
                        id.0
                    )));
                }
                windows::SendStatus::Failed => {
                    return Err(ClientError::Refused(
                        "the server could not send the datagram (socket closed, or no route)"
                            .into(),
                    ));
                }
            }
        }
        Err(ClientError::TimedOut)
    }

    /// Changes its multicast state on the server: joins or leaves a group (the server's
    /// IGMP reports it on the link), or sets the TTL and loop-back of what it sends to
    /// groups. A datagram to a group the server belongs to is delivered to the socket bound
    /// to its port, whichever socket joined (Linux's `IP_MULTICAST_ALL`).
    pub fn multicast(&self, op: shmnet_stack::MulticastOp) -> Result<(), ClientError> {
        let mut i = self.inner.borrow_mut();
        match i.call(Request::Multicast {
            socket: u32::from(self.id),
            op,
        })? {
            Response::Multicast { refused: None, .. } => Ok(()),
            Response::Multicast {
                refused: Some(why), ..
            } => Err(ClientError::Multicast(why)),
            Response::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Protocol(format!(
                "expected Multicast, got {other:?}"
            ))),
        }
    }

    /// Its number on the server. Numbers are reused: a socket opened after this one is
    /// closed may have it.
    pub fn number(&self) -> u16 {
        self.id
    }

    /// Closes the socket on the server (also done when the application exits). Datagrams
    /// that came for it and were not read are given back unread.
    ///
    /// Its number may be given to a later socket once the server's `Released` for it has
    /// been read (the event follows every datagram delivered for it, on the same ring).
    pub fn close(self) -> Result<(), ClientError> {
        let mut i = self.inner.borrow_mut();
        // Sends written before the close are taken by the server before it reads the close
        // on the control socket: none is left to go out from whatever socket takes the
        // number next.
        i.drain_requests(Instant::now() + tcp::OP_PATIENCE)?;
        match i.call(Request::Close {
            socket: u32::from(self.id),
        })? {
            Response::Closed { .. } => {
                i.udp_release(self.id);
                Ok(())
            }
            Response::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Protocol(format!(
                "expected Closed, got {other:?}"
            ))),
        }
    }
}
