//! The control plane: a `SOCK_SEQPACKET` Unix socket on which applications attach to the
//! server, bind ports, and learn its counters.
//!
//! Every message is one packet holding one JSON object (the control path is not the data
//! path: readability beats bytes here), at most [`MAX_MSG`] bytes: a larger one is refused
//! by [`send`] and reported by [`recv`] as [`ControlError::TooLarge`], never truncated.
//! Window hand-offs are packets of their own carrying the fds (see `shmnet_chan::handoff`).
//! Packets keep their boundaries, so a JSON message and a hand-off never run together, and a
//! hang-up reads as a zero-length packet: that is how each side notices the other's death.
//!
//! ```text
//! app → server  {"Hello":{"version":1}}
//! server → app  {"Welcome":{"version":1,"data_window":..., "app_window":...}}  then two hand-offs
//! app → server  {"Bind":{"port":5001}}  server → app {"Bound":{"socket":0,"port":5001}} | {"Error":"…"}
//! app → server  {"Close":{"socket":0}}      server → app {"Closed":{"socket":0}}
//! app → server  {"Fork":{"sockets":[…]}}    server → app {"Forked":{"ticket":…}}
//! app → server  {"ForChild":{"ticket":…}}   (no answer: on the connection made for the child)
//! app → server  {"Adopt":{"ticket":…}}      server → app {"Adopted":{"sockets":[…]}}  (a forked child)
//! any → server  {"Stats":null}              server → any {"Stats":{…}}
//! driver → server {"DriverHello":{"version":1}}  server → driver {"Welcome":…}, {"Driver":{…}}
//!                                            (its device: a `DriverSetup`), then the data window
//! server → driver "Start"                    driver → server {"DriverStats":{…}} every 100 ms
//! ```
//!
//! Who may talk to whom: by default the socket lives in a directory only its owner can enter
//! ([`runtime_dir`], made 0700 by [`listen`]), and a client checks with `SO_PEERCRED` that
//! the process that answers runs as root or as the client's own user ([`connect_checked`]),
//! so no other local user can squat the path or answer in the server's place. A server reads
//! each client's pid and uid with [`peer_credentials`].

use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketAddrUnix, SocketFlags, SocketType};
use std::cell::RefCell;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The control protocol's version. Both sides must agree.
pub const PROTOCOL_VERSION: u32 = 6;

/// The largest control message, in bytes (JSON text). Big enough for every request and for a
/// server's counters; a larger message is refused whole ([`ControlError::TooLarge`]), never
/// cut short.
pub const MAX_MSG: usize = 64 * 1024;

/// The environment variable that, when set to an absolute path, names the directory of the
/// default control socket (and of the interface locks) instead of the per-user default: for
/// tests, and for servers run side by side.
pub const RUNTIME_DIR_ENV: &str = "SHMNET_RUNTIME_DIR";

/// The directory of the default control socket and of the interface locks, private to the
/// user who runs shmnet:
///
/// - `$SHMNET_RUNTIME_DIR` if set to an absolute path;
/// - `/run/shmnet` for root;
/// - `$XDG_RUNTIME_DIR/shmnet` for other users when `XDG_RUNTIME_DIR` is set (an absolute
///   path), else `/tmp/shmnet-$UID`.
///
/// [`listen`] creates it with mode 0700 and refuses to use it if it belongs to someone else
/// or others may enter it. A server meant for other users' applications listens on a path
/// they can reach, given with `--socket`.
pub fn runtime_dir() -> PathBuf {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    if let Some(dir) = std::env::var_os(RUNTIME_DIR_ENV).and_then(absolute) {
        return dir;
    }
    let uid = rustix::process::geteuid().as_raw();
    if uid == 0 {
        return PathBuf::from("/run/shmnet");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").and_then(absolute) {
        Some(dir) => dir.join("shmnet"),
        None => PathBuf::from(format!("/tmp/shmnet-{uid}")),
    }
}

/// The default control socket: `shmnet.sock` in [`runtime_dir`].
pub fn default_socket() -> PathBuf {
    runtime_dir().join("shmnet.sock")
}

/// Creates [`runtime_dir`] (mode 0700) if it is missing and checks it is private; returns it.
pub fn ensure_runtime_dir() -> Result<PathBuf, ControlError> {
    let dir = runtime_dir();
    ensure_private_dir(&dir)?;
    Ok(dir)
}

/// What makes a directory unfit to hold a control socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirProblem {
    /// It is a symbolic link or not a directory at all.
    NotADirectory,
    /// Another user owns it.
    NotOurs {
        /// Its owner's uid.
        owner: u32,
    },
    /// Its group or other users may enter it.
    OpenToOthers {
        /// Its permission bits.
        mode: u32,
    },
}

impl std::fmt::Display for DirProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::NotADirectory => write!(f, "not a directory (or a symbolic link)"),
            Self::NotOurs { owner } => write!(f, "owned by uid {owner}, not by us"),
            Self::OpenToOthers { mode } => write!(f, "open to others (mode {mode:03o})"),
        }
    }
}

/// Creates `dir` with mode 0700 if it is missing; refuses it if it is not a directory we
/// own that only we may enter. Its parent must exist.
pub fn ensure_private_dir(dir: &Path) -> Result<(), ControlError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(ControlError::Io(std::io::Error::new(
                e.kind(),
                format!("cannot create the directory {}: {e}", dir.display()),
            )));
        }
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let me = rustix::process::geteuid().as_raw();
    let problem = if !meta.file_type().is_dir() {
        Some(DirProblem::NotADirectory)
    } else if meta.uid() != me {
        Some(DirProblem::NotOurs { owner: meta.uid() })
    } else if meta.mode() & 0o077 != 0 {
        Some(DirProblem::OpenToOthers {
            mode: meta.mode() & 0o7777,
        })
    } else {
        None
    };
    match problem {
        Some(problem) => Err(ControlError::UnsafeDirectory {
            dir: dir.to_path_buf(),
            problem,
        }),
        None => Ok(()),
    }
}

/// Who is at the other end of a Unix socket, as the kernel recorded it when the peer
/// connected (or, for a listening server, when it listened).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PeerCred {
    /// Its process id (in our pid namespace; 0 if it is in none we can see).
    pub pid: u32,
    /// Its effective user id.
    pub uid: u32,
    /// Its effective group id.
    pub gid: u32,
}

/// The credentials of the peer of the connected socket `fd` (`SO_PEERCRED`).
pub fn peer_credentials(fd: impl AsFd) -> Result<PeerCred, ControlError> {
    let c = rustix::net::sockopt::socket_peercred(fd).map_err(std::io::Error::from)?;
    Ok(PeerCred {
        pid: c.pid.as_raw_nonzero().get() as u32,
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
    })
}

/// Whether a client running as `client_uid` may trust a server running as `server_uid`:
/// the server runs as root or as the client's own user.
pub fn trusts(client_uid: u32, server_uid: u32) -> bool {
    server_uid == 0 || server_uid == client_uid
}

/// A message from an application (or `shmnet stats`) to the server.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Request {
    /// The first message of an application.
    Hello {
        /// [`PROTOCOL_VERSION`] of the client.
        version: u32,
    },
    /// Bind a UDP port.
    Bind {
        /// The port.
        port: u16,
    },
    /// Close a socket.
    Close {
        /// The socket.
        socket: u32,
    },
    /// Change a UDP socket's multicast state (join or leave a group, its multicast TTL or
    /// loop-back). Answered by `Multicast`.
    Multicast {
        /// The socket.
        socket: u32,
        /// The change.
        op: shmnet_stack::MulticastOp,
    },
    /// Listen for TCP connections on a port (0: a free ephemeral port). Accepted
    /// connections are announced on the listener's socket (`windows::TcpEvent::Accepted`).
    TcpListen {
        /// The port.
        port: u16,
        /// Connections in the handshake or waiting to be announced, at most.
        backlog: u32,
    },
    /// Open a TCP connection; the answer comes at once, `windows::TcpEvent::Connected` (or
    /// `Failed`) on the new socket when the handshake ends.
    TcpConnect {
        /// Where to.
        to: std::net::SocketAddrV4,
    },
    /// Register a memory region of the application's own: the memfd travels with this
    /// message (`SCM_RIGHTS`). It must be sealed against shrinking and a whole number of
    /// 4 KiB pages. The server maps it whole, readable if `read` (the application will send
    /// from it), writable if `write` (it will receive into it).
    Register {
        /// The server may read the region.
        read: bool,
        /// The server may write the region.
        write: bool,
    },
    /// Unregister a region: the server unmaps it.
    Unregister {
        /// Its number, from `Registered`.
        region: u16,
    },
    /// The application is about to `fork`: the TCP sockets it names (listeners and
    /// connections it holds) are to be shared with the child (docs/preload.md, "fork").
    /// Answered by `Forked`, after which the server delivers nothing more for those sockets
    /// to anyone until a holder resumes one ([`crate::windows::TcpOp::Resume`]).
    Fork {
        /// Their numbers.
        sockets: Vec<u32>,
    },
    /// Bytes the application had taken off TCP connections and gives back unread, just
    /// after `Fork` (or before an `exec` that hands the sockets on): each `(socket, len)`
    /// part, in order, is the next `len` bytes of the memfd attached (SCM_RIGHTS), and goes
    /// back in front of what that connection has still to deliver, so whichever holder reads
    /// next gets them — once, as from a kernel socket's queue. Answered by `Unread`.
    Unread {
        /// The parts, by the socket's number.
        parts: Vec<(u32, u32)>,
    },
    /// The first message on a control connection a parent about to fork made for its child
    /// (`crate::client::Client::reserve_for_child`); no answer. The ticket lives as long as
    /// the connection does (no expiry), and is let go at once when the connection closes
    /// without adopting it — the child exited, or `exec`ed (the connection is close-on-exec).
    ForChild {
        /// The secret `Forked` gave.
        ticket: u64,
    },
    /// The first request of a forked child, attached as an application of its own: take a
    /// reference on every socket its parent's `Fork` named. Answered by `Adopted`.
    Adopt {
        /// The secret `Forked` gave the parent (the child has a copy of its memory).
        ticket: u64,
    },
    /// Ask for every counter.
    Stats,
    /// Start a packet capture (`shmnet capture`): answered by `Capture` with the ring's
    /// memfd attached (`SCM_RIGHTS`); the capture runs until this connection closes. Only
    /// root or the server's own user may capture (it sees every application's traffic).
    Capture(crate::capture::CaptureSpec),
    /// Ask for a page of the server's sockets (`shmnet sockets`): `from` is 0 for the first
    /// page, then the `next` of the page before ([`crate::server::listing`]).
    Sockets {
        /// Where the page starts.
        from: u64,
    },
    /// The first message of a driver process.
    DriverHello {
        /// [`PROTOCOL_VERSION`] of the driver.
        version: u32,
        /// A shared driver (`shmnet driver --listen`) says its device's MAC address, which
        /// the attaching server answers for (a driver the server started need not: the
        /// server knew the device first).
        #[serde(default)]
        mac: Option<[u8; 6]>,
    },
    /// A driver process's counters (sent every 100 ms).
    DriverStats(Box<crate::server::DriverThreadStats>),
}

/// How long a `fork`'s ticket waits for the child's `Adopt`. Until then the parent's
/// sockets stay open for the child even if the parent closes them (as its inherited
/// descriptors would hold them in the kernel); a child that never adopts (it `exec`s, or
/// exits without a call on a socket) lets them go when this has passed.
pub const FORK_TICKET_LIFETIME: std::time::Duration = std::time::Duration::from_secs(10);

/// One socket a forked child adopted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdoptedSocket {
    /// Its number in the parent.
    pub parent: u32,
    /// Its number in the child.
    pub socket: u32,
    /// A listener (else a connection).
    pub listener: bool,
    /// Its local port.
    pub port: u16,
    /// A connection's peer (a listener's is unspecified).
    pub peer: std::net::SocketAddrV4,
    /// A connection whose handshake has not finished.
    pub connecting: bool,
}

/// A message from the server.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Response {
    /// The answer to `Hello`; the two window hand-offs follow.
    Welcome {
        /// The server's [`PROTOCOL_VERSION`].
        version: u32,
        /// Bytes of the data window (packet buffers, shared by all parties).
        data_window: usize,
        /// Bytes of this application's window (its queues and send buffers).
        app_window: usize,
        /// The `ipc` structure: no windows follow; data travels in packets on this socket.
        #[serde(default)]
        ipc: bool,
        /// `--isolation regions`: only the application's own window follows (rings, no
        /// pool of the server's); it registers regions, posts receive buffers and sends by
        /// handle (docs/isolation.md).
        #[serde(default)]
        isolated: bool,
        /// The address the server answers for on its interface (what an application's
        /// sockets are bound to); `None` to a driver, or from a server older than this field.
        #[serde(default)]
        address: Option<std::net::Ipv4Addr>,
        /// Its prefix length on that interface (the subnet, and its broadcast address);
        /// `None` as for `address`.
        #[serde(default)]
        prefix: Option<u8>,
    },
    /// A socket was bound.
    Bound {
        /// Its number, used in descriptors.
        socket: u32,
        /// The port it was bound to: the one asked for, or the ephemeral port the stack
        /// picked for a `Bind` of port 0 (0 from a server older than this field).
        #[serde(default)]
        port: u16,
    },
    /// A TCP socket was made (a listener, or a connection being opened).
    TcpSocket {
        /// Its number, used in descriptors.
        socket: u32,
        /// Its local port.
        port: u16,
    },
    /// The answer to `Multicast`.
    Multicast {
        /// The socket.
        socket: u32,
        /// Why the change was refused (nothing changed); `None`: done.
        refused: Option<shmnet_stack::MulticastError>,
    },
    /// A socket was closed.
    Closed {
        /// Its number.
        socket: u32,
    },
    /// A region was registered.
    Registered {
        /// Its number, used in handles.
        region: u16,
        /// Its size.
        bytes: u64,
    },
    /// A region was unregistered.
    Unregistered {
        /// Its number.
        region: u16,
    },
    /// The answer to `Fork`: the secret a child presents in `Adopt`, good once, for
    /// [`FORK_TICKET_LIFETIME`].
    Forked {
        /// The secret.
        ticket: u64,
    },
    /// The answer to `Unread`: the sockets whose bytes could not go back (no such
    /// connection, or too few buffers); the application keeps those itself.
    Unread {
        /// Their numbers.
        refused: Vec<u32>,
    },
    /// The answer to `Adopt`: the child's numbers for its parent's sockets.
    Adopted {
        /// One per socket the ticket named.
        sockets: Vec<AdoptedSocket>,
    },
    /// Every counter.
    Stats(Box<crate::server::ServerStats>),
    /// The capture runs: its ring travels with this message.
    Capture {
        /// The names of the drop reasons a record's `reason` indexes (0: none).
        reasons: Vec<String>,
    },
    /// A page of the server's sockets.
    Sockets(Box<crate::server::listing::SocketsPage>),
    /// To a driver process, right after its `Welcome`: the device to drive (the data window
    /// follows).
    Driver(Box<crate::spec::DriverSetup>),
    /// To a driver process: start moving frames.
    Start,
    /// The request failed.
    Error(String),
}

/// Why a control operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The peer hung up.
    #[error("the peer closed the control socket")]
    HungUp,
    /// A socket call failed.
    #[error("control socket: {0}")]
    Io(std::io::Error),
    /// The peer sent something that is not a message of this protocol.
    #[error("malformed control message: {0}")]
    Malformed(String),
    /// A message over [`MAX_MSG`]: refused before sending, or received and discarded whole
    /// (the connection stays usable).
    #[error("a {size}-byte control message is over the limit of {limit} bytes")]
    TooLarge {
        /// Its size in bytes.
        size: usize,
        /// The limit, [`MAX_MSG`].
        limit: usize,
    },
    /// `accept` found this process (EMFILE) or the system (ENFILE) out of file descriptors.
    /// The pending connection stays queued, so the listener stays readable: back off (or use
    /// an [`FdReserve`]) rather than retry at once, which would spin.
    #[error(
        "out of file descriptors ({0}): close idle connections, or raise the limit (`ulimit -n`)"
    )]
    OutOfFds(rustix::io::Errno),
    /// The default socket's directory is not private to us (see [`runtime_dir`]).
    #[error(
        "{} is {problem}: remove it (`rm -r {}`) so shmnet can make it afresh, or choose another path with --socket",
        dir.display(),
        dir.display()
    )]
    UnsafeDirectory {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        problem: DirProblem,
    },
    /// The process listening on the socket runs as neither root nor our own user: it may be
    /// squatting the path, so we say nothing to it.
    #[error(
        "the process answering on {} (pid {pid}) runs as uid {uid}, neither root nor us: not trusting it; stop it, or remove the socket and start `shmnet serve` again",
        path.display()
    )]
    UntrustedServer {
        /// The socket path.
        path: PathBuf,
        /// The server's uid.
        uid: u32,
        /// The server's pid.
        pid: u32,
    },
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<std::io::Error> for ControlError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Sends one message.
pub fn send<T: serde::Serialize>(fd: impl AsFd, msg: &T) -> Result<(), ControlError> {
    let bytes = encode(msg)?;
    rustix::net::send(fd, &bytes, SendFlags::NOSIGNAL).map_err(send_error)?;
    Ok(())
}

/// `msg` as one control message, refused if over [`MAX_MSG`].
fn encode<T: serde::Serialize>(msg: &T) -> Result<Vec<u8>, ControlError> {
    let bytes = serde_json::to_vec(msg).map_err(|e| ControlError::Malformed(e.to_string()))?;
    if bytes.len() > MAX_MSG {
        return Err(ControlError::TooLarge {
            size: bytes.len(),
            limit: MAX_MSG,
        });
    }
    Ok(bytes)
}

/// A failed send: the peer gone, or another error.
fn send_error(e: rustix::io::Errno) -> ControlError {
    match e {
        rustix::io::Errno::PIPE | rustix::io::Errno::CONNRESET => ControlError::HungUp,
        e => ControlError::Io(e.into()),
    }
}

/// Sends `bytes` as one packet with `fd` attached (`SCM_RIGHTS`).
fn sendmsg_with_fd(
    sock: impl AsFd,
    bytes: &[u8],
    fd: rustix::fd::BorrowedFd<'_>,
) -> rustix::io::Result<usize> {
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    // The space holds exactly one descriptor's message, so this cannot fail.
    if !control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)) {
        return Err(rustix::io::Errno::NOBUFS);
    }
    rustix::net::sendmsg(
        sock,
        &[std::io::IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
}

/// In the `ipc` structure: a packet carrying a received datagram, server → application:
/// `[TAG_DELIVER, socket (u16 LE), source address (4), source port (u16 BE)]` + payload.
pub const TAG_DELIVER: u8 = 0x01;
/// In the `ipc` structure: a packet carrying a datagram to send, application → server:
/// `[TAG_SEND, socket (u16 LE), destination address (4), destination port (u16 BE)]` +
/// payload.
pub const TAG_SEND: u8 = 0x02;
/// Bytes in front of an `ipc` data packet's payload.
pub const IPC_HEADER: usize = 9;
/// In the `ipc` structure: a TCP event, server → application: `[TAG_EVENT, socket (u16
/// LE), aux (4, as an address), 0 (2)]` + the event descriptor's `buf` and `len` (u32 LE
/// each); see [`crate::windows::event_desc`].
pub const TAG_EVENT: u8 = 0x03;
/// In the `ipc` structure: a TCP operation, application → server: `[TAG_OP, socket (u16
/// LE), 0 (6)]` + the operation's code (u32 LE); see [`crate::windows::TcpOp`].
pub const TAG_OP: u8 = 0x04;

/// The `ipc` packet of event descriptor `d`.
pub fn ipc_event(d: &shmnet_chan::Desc) -> [u8; IPC_HEADER + 8] {
    let mut p = [0u8; IPC_HEADER + 8];
    let addr = std::net::SocketAddrV4::new(d.aux.into(), 0);
    p[..IPC_HEADER].copy_from_slice(&ipc_header(TAG_EVENT, d.flags as u16, addr));
    p[IPC_HEADER..IPC_HEADER + 4].copy_from_slice(&d.buf.to_le_bytes());
    p[IPC_HEADER + 4..].copy_from_slice(&d.len.to_le_bytes());
    p
}

/// The event descriptor an `ipc` `TAG_EVENT` packet carries (`None` if it is not one).
pub fn parse_ipc_event(p: &[u8]) -> Option<shmnet_chan::Desc> {
    let (tag, socket, addr) = parse_ipc_header(p)?;
    let rest = p.get(IPC_HEADER..IPC_HEADER + 8)?;
    (tag == TAG_EVENT).then(|| shmnet_chan::Desc {
        buf: u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")),
        len: u32::from_le_bytes(rest[4..].try_into().expect("4 bytes")),
        flags: u32::from(socket),
        aux: u32::from(*addr.ip()),
    })
}

/// The `ipc` packet of operation `op` on `socket`.
pub fn ipc_op(socket: u16, op: crate::windows::TcpOp) -> [u8; IPC_HEADER + 8] {
    let mut p = [0u8; IPC_HEADER + 8];
    let none = std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0);
    p[..IPC_HEADER].copy_from_slice(&ipc_header(TAG_OP, socket, none));
    p[IPC_HEADER..IPC_HEADER + 4].copy_from_slice(&op.code().to_le_bytes());
    p[IPC_HEADER + 4..].copy_from_slice(&op.arg().to_le_bytes());
    p
}

/// The operation of an `ipc` `TAG_OP` packet's body (after the header), if it names one.
pub fn ipc_op_of(body: &[u8]) -> Option<crate::windows::TcpOp> {
    let word = |i: usize| Some(u32::from_le_bytes(body.get(i..i + 4)?.try_into().ok()?));
    crate::windows::TcpOp::decode(word(0)?, word(4)?)
}

/// Builds the header of an `ipc` data packet.
pub fn ipc_header(tag: u8, socket: u16, addr: std::net::SocketAddrV4) -> [u8; IPC_HEADER] {
    let mut h = [0u8; IPC_HEADER];
    h[0] = tag;
    h[1..3].copy_from_slice(&socket.to_le_bytes());
    h[3..7].copy_from_slice(&addr.ip().octets());
    h[7..9].copy_from_slice(&addr.port().to_be_bytes());
    h
}

/// Reads the header of an `ipc` data packet (`None` if it is too short).
pub fn parse_ipc_header(p: &[u8]) -> Option<(u8, u16, std::net::SocketAddrV4)> {
    let h = p.get(..IPC_HEADER)?;
    Some((
        h[0],
        u16::from_le_bytes([h[1], h[2]]),
        std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::new(h[3], h[4], h[5], h[6]),
            u16::from_be_bytes([h[7], h[8]]),
        ),
    ))
}

/// Receives one raw packet into `buf`; `Ok(None)` if nothing is there (non-blocking).
pub fn recv_raw(fd: impl AsFd, buf: &mut [u8]) -> Result<Option<usize>, ControlError> {
    match rustix::net::recv(fd, buf, RecvFlags::empty()) {
        Ok((0, _)) => Err(ControlError::HungUp),
        Ok((n, _)) => Ok(Some(n)),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(rustix::io::Errno::CONNRESET) => Err(ControlError::HungUp),
        Err(e) => Err(ControlError::Io(e.into())),
    }
}

/// Sends one raw packet made of `parts` (gathered); `Ok(false)` if the socket is full.
pub fn send_raw(fd: impl AsFd, parts: &[&[u8]]) -> Result<bool, ControlError> {
    let iov: Vec<std::io::IoSlice<'_>> = parts.iter().map(|p| std::io::IoSlice::new(p)).collect();
    let mut control = rustix::net::SendAncillaryBuffer::default();
    match rustix::net::sendmsg(
        fd,
        &iov,
        &mut control,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    ) {
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::AGAIN) => Ok(false),
        Err(rustix::io::Errno::PIPE) | Err(rustix::io::Errno::CONNRESET) => {
            Err(ControlError::HungUp)
        }
        Err(e) => Err(ControlError::Io(e.into())),
    }
}

thread_local! {
    /// Where [`recv`] reads a packet: allocated (and zeroed) once per thread, not per call.
    static RECV_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0u8; MAX_MSG]);
}

/// Receives one message; `Ok(None)` if the socket is non-blocking and nothing is there.
///
/// A packet over [`MAX_MSG`] is consumed whole and reported as [`ControlError::TooLarge`]
/// (with its real size): the next call reads the next message.
pub fn recv<T: serde::de::DeserializeOwned>(fd: impl AsFd) -> Result<Option<T>, ControlError> {
    RECV_BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        // TRUNC: the kernel returns the packet's real length even when it is cut to fit.
        match rustix::net::recv(fd, &mut buf[..], RecvFlags::TRUNC) {
            Ok((_, 0)) => Err(ControlError::HungUp),
            Ok((_, n)) if n > MAX_MSG => Err(ControlError::TooLarge {
                size: n,
                limit: MAX_MSG,
            }),
            Ok((_, n)) => serde_json::from_slice(&buf[..n])
                .map(Some)
                .map_err(|e| ControlError::Malformed(e.to_string())),
            Err(rustix::io::Errno::AGAIN) => Ok(None),
            Err(rustix::io::Errno::CONNRESET) => Err(ControlError::HungUp),
            Err(e) => Err(ControlError::Io(e.into())),
        }
    })
}

/// Receives one message, blocking.
pub fn recv_blocking<T: serde::de::DeserializeOwned>(fd: impl AsFd) -> Result<T, ControlError> {
    let fd = fd.as_fd();
    loop {
        if let Some(m) = recv(fd)? {
            return Ok(m);
        }
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let _ = rustix::event::poll(&mut fds, None);
    }
}

/// Listens on `path`, replacing a stale socket file nobody listens on, refusing to replace
/// a live one. A path in [`runtime_dir`] (the default's directory) gets that directory made
/// private first ([`ensure_private_dir`]); any other path is used as given.
pub fn listen(path: &Path) -> Result<OwnedFd, ControlError> {
    if path.parent() == Some(runtime_dir().as_path()) {
        ensure_runtime_dir()?;
    }
    if path.exists() {
        if connect(path).is_ok() {
            return Err(ControlError::Io(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "a server is already listening on {}: stop it, or choose another path with --socket",
                    path.display()
                ),
            )));
        }
        std::fs::remove_file(path)?;
    }
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(std::io::Error::from)?;
    // The socket appears at `path` already listening: it is bound under a temporary name
    // beside it, set listening, then renamed into place. Bound at `path` itself, a client
    // that saw the file appear (a script waiting for it, as after `shmnet serve &`) could
    // connect between the bind and the listen and be refused.
    let tmp = path.with_file_name(format!(
        ".{}.{}",
        path.file_name().map_or_else(
            || std::borrow::Cow::Borrowed("shmnet"),
            |n| n.to_string_lossy()
        ),
        std::process::id()
    ));
    let staged = SocketAddrUnix::new(&tmp).is_ok();
    let at = if staged { tmp.as_path() } else { path };
    let addr = SocketAddrUnix::new(at).map_err(std::io::Error::from)?;
    let _ = std::fs::remove_file(&tmp);
    rustix::net::bind(&fd, &addr).map_err(std::io::Error::from)?;
    rustix::net::listen(&fd, 64).map_err(std::io::Error::from)?;
    if staged && let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(fd)
}

/// Connects to a server's control socket (blocking socket).
pub fn connect(path: &Path) -> Result<OwnedFd, ControlError> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(std::io::Error::from)?;
    let addr = SocketAddrUnix::new(path).map_err(std::io::Error::from)?;
    rustix::net::connect(&fd, &addr).map_err(|e| {
        std::io::Error::new(
            std::io::Error::from(e).kind(),
            format!(
                "cannot reach a shmnet server at {}: {e} (is `shmnet serve` running, with this --socket?)",
                path.display()
            ),
        )
    })?;
    Ok(fd)
}

/// Connects to a server's control socket (blocking socket) and checks with `SO_PEERCRED`
/// that the server runs as root or as our own user ([`trusts`]); returns the socket and the
/// server's credentials. Every client (applications, `shmnet stats`) connects this way.
pub fn connect_checked(path: &Path) -> Result<(OwnedFd, PeerCred), ControlError> {
    let fd = connect(path)?;
    let server = peer_credentials(&fd)?;
    if !trusts(rustix::process::geteuid().as_raw(), server.uid) {
        return Err(ControlError::UntrustedServer {
            path: path.to_path_buf(),
            uid: server.uid,
            pid: server.pid,
        });
    }
    Ok((fd, server))
}

/// Accepts a pending connection (non-blocking), if any.
///
/// [`ControlError::OutOfFds`] when the process or the system has no file descriptor left:
/// the connection stays queued and the listener readable, so the caller must back off (and
/// count it) rather than call again at once; see [`FdReserve`] to serve it anyway.
pub fn accept(listener: impl AsFd) -> Result<Option<OwnedFd>, ControlError> {
    match rustix::net::accept_with(listener, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK) {
        Ok(fd) => Ok(Some(fd)),
        // A client that gave up before we came: nothing to accept from it; the listener
        // stays readable if others wait.
        Err(rustix::io::Errno::AGAIN)
        | Err(rustix::io::Errno::CONNABORTED)
        | Err(rustix::io::Errno::INTR) => Ok(None),
        Err(e @ (rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)) => {
            Err(ControlError::OutOfFds(e))
        }
        Err(e) => Err(ControlError::Io(e.into())),
    }
}

/// Sends one message with one file descriptor attached (`SCM_RIGHTS`), as `Register`
/// travels with its memfd.
pub fn send_with_fd<T: serde::Serialize>(
    sock: impl AsFd,
    msg: &T,
    fd: rustix::fd::BorrowedFd<'_>,
) -> Result<(), ControlError> {
    let bytes = encode(msg)?;
    sendmsg_with_fd(sock, &bytes, fd).map_err(send_error)?;
    Ok(())
}

/// Most descriptors [`recv_raw_with_fd`] takes from one message; the kernel closes any more.
const FDS_PER_MESSAGE: usize = 4;

/// [`recv_raw`] that also takes the descriptors attached to the packet: the first is
/// returned, the rest closed (`extra` says how many). A peer cannot make this side keep
/// descriptors it did not ask for.
pub fn recv_raw_with_fd(
    fd: impl AsFd,
    buf: &mut [u8],
) -> Result<Option<(usize, Option<OwnedFd>, usize)>, ControlError> {
    Ok(recv_raw_with_fd_cred(fd, buf)?.map(|(n, f, extra, _)| (n, f, extra)))
}

/// What [`recv_raw_with_fd_cred`] received: the message's length, its first descriptor,
/// how many more were closed, and who sent it.
pub type Received = (usize, Option<OwnedFd>, usize, Option<rustix::net::UCred>);

/// [`recv_raw_with_fd`], and the sender's credentials as the kernel vouches for them when
/// this socket has `SO_PASSCRED` set ([`pass_credentials`]): its pid at the moment it sent
/// (not when it connected, which `SO_PEERCRED` gives — a forked child that inherited its
/// parent's connection sends with its own).
pub fn recv_raw_with_fd_cred(
    fd: impl AsFd,
    buf: &mut [u8],
) -> Result<Option<Received>, ControlError> {
    let mut space = [std::mem::MaybeUninit::uninit();
        rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE), ScmCredentials(1))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let fd = fd.as_fd();
    let msg = loop {
        match rustix::net::recvmsg(
            fd,
            &mut [std::io::IoSliceMut::new(buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other,
        }
    };
    let msg = match msg {
        Ok(m) => m,
        Err(rustix::io::Errno::AGAIN) => return Ok(None),
        Err(rustix::io::Errno::CONNRESET) => return Err(ControlError::HungUp),
        Err(e) => return Err(ControlError::Io(e.into())),
    };
    let mut first = None;
    let mut extra = 0;
    let mut cred = None;
    for m in control.drain() {
        match m {
            rustix::net::RecvAncillaryMessage::ScmRights(rights) => {
                for f in rights {
                    if first.is_none() {
                        first = Some(f);
                    } else {
                        extra += 1;
                    }
                }
            }
            rustix::net::RecvAncillaryMessage::ScmCredentials(c) => cred = Some(c),
            _ => {}
        }
    }
    if msg.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        // More descriptors than we take: the kernel closed the rest. Count at least one.
        extra += 1;
    }
    if msg.bytes == 0 && first.is_none() {
        return Err(ControlError::HungUp);
    }
    Ok(Some((msg.bytes, first, extra, cred)))
}

/// Asks the kernel to attach each sender's credentials to what `fd` receives
/// ([`recv_raw_with_fd_cred`]).
pub fn pass_credentials(fd: impl AsFd) -> Result<(), ControlError> {
    rustix::net::sockopt::set_socket_passcred(fd.as_fd(), true)
        .map_err(|e| ControlError::Io(e.into()))
}

/// The greeting of an `ipc` data socket hand-off.
const DATA_SOCKET_GREETING: &[u8; 16] = b"shmnet-ipc-data1";

/// In the `ipc` structure: passes the application's end of its data socket pair.
pub fn send_fd(sock: impl AsFd, fd: rustix::fd::BorrowedFd<'_>) -> Result<(), ControlError> {
    sendmsg_with_fd(sock, DATA_SOCKET_GREETING, fd).map_err(|e| ControlError::Io(e.into()))?;
    Ok(())
}

/// In the `ipc` structure: receives the data socket passed by [`send_fd`] (blocking).
pub fn recv_fd(sock: impl AsFd) -> Result<OwnedFd, ControlError> {
    let mut buf = [0u8; 16];
    match recv_raw_with_fd(sock, &mut buf)? {
        Some((n, Some(fd), 0)) if n == buf.len() && &buf == DATA_SOCKET_GREETING => Ok(fd),
        Some(_) => Err(ControlError::Malformed(
            "expected the ipc data socket".into(),
        )),
        None => Err(ControlError::Io(std::io::ErrorKind::WouldBlock.into())),
    }
}

/// One file descriptor held in reserve, so that a server out of descriptors can still take
/// one connection — to answer `stats`, or to tell the client why it is refused — instead of
/// leaving it queued.
///
/// Invariant: while [`FdReserve::is_held`], one descriptor (of `/dev/null`) is open and
/// unused, so releasing it makes room for exactly one `accept`.
#[derive(Debug)]
pub struct FdReserve(Option<OwnedFd>);

impl FdReserve {
    /// Opens the reserve descriptor.
    pub fn new() -> Result<Self, ControlError> {
        let mut r = Self(None);
        r.refill()?;
        Ok(r)
    }

    /// Whether the reserve descriptor is held (it is not between an
    /// [`FdReserve::accept_with_reserve`] that used it and the next [`FdReserve::refill`]).
    pub fn is_held(&self) -> bool {
        self.0.is_some()
    }

    /// Opens the reserve again if it was used; `Err(OutOfFds)` while no descriptor is free
    /// (close the connection taken with it first).
    pub fn refill(&mut self) -> Result<(), ControlError> {
        if self.0.is_none() {
            let fd = rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| match e {
                rustix::io::Errno::MFILE | rustix::io::Errno::NFILE => ControlError::OutOfFds(e),
                e => ControlError::Io(e.into()),
            })?;
            self.0 = Some(fd);
        }
        Ok(())
    }

    /// As [`accept`]; when that finds no descriptor free, gives up the reserve to accept the
    /// connection anyway and returns it as `Ok(Some((fd, true)))`: the caller answers it
    /// briefly (a `Stats`, or an `Error` saying the server is full), closes it, then calls
    /// [`FdReserve::refill`]. `Err(OutOfFds)` if the reserve is already spent.
    pub fn accept_with_reserve(
        &mut self,
        listener: impl AsFd,
    ) -> Result<Option<(OwnedFd, bool)>, ControlError> {
        let listener = listener.as_fd();
        match accept(listener) {
            Ok(got) => Ok(got.map(|fd| (fd, false))),
            Err(ControlError::OutOfFds(e)) => {
                if self.0.take().is_none() {
                    return Err(ControlError::OutOfFds(e));
                }
                let got = accept(listener);
                if !matches!(got, Ok(Some(_))) {
                    // Nothing taken with it: hold the reserve again.
                    let _ = self.refill();
                }
                Ok(got?.map(|fd| (fd, true)))
            }
            Err(e) => Err(e),
        }
    }
}
