//! The control plane: a `SOCK_SEQPACKET` Unix socket on which applications attach to the
//! server, bind ports, and learn its counters.
//!
//! Every message is one packet holding one JSON object (the control path is not the data
//! path: readability beats bytes here). Window hand-offs are packets of their own carrying
//! the fds (see `shmnet_chan::handoff`). Packets keep their boundaries, so a JSON message and
//! a hand-off never run together, and a hang-up reads as a zero-length packet: that is how
//! each side notices the other's death.
//!
//! ```text
//! app → server  {"Hello":{"version":1}}
//! server → app  {"Welcome":{"version":1,"data_window":..., "app_window":...}}  then two hand-offs
//! app → server  {"Bind":{"port":5001}}      server → app {"Bound":{"socket":0}} | {"Error":"…"}
//! app → server  {"Close":{"socket":0}}      server → app {"Closed":{"socket":0}}
//! any → server  {"Stats":null}              server → any {"Stats":{…}}
//! driver → server {"DriverHello":{"version":1}}  server → driver {"Welcome":…} then the data window
//! server → driver "Start"                    driver → server {"DriverStats":{…}} every 100 ms
//! ```

use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketAddrUnix, SocketFlags, SocketType};
use std::path::Path;

/// The control protocol's version. Both sides must agree.
pub const PROTOCOL_VERSION: u32 = 1;

/// The default control socket path.
pub const DEFAULT_SOCKET: &str = "/tmp/shmnet.sock";

/// Largest control message.
pub const MAX_MSG: usize = 64 * 1024;

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
    /// Ask for every counter.
    Stats,
    /// The first message of a driver process.
    DriverHello {
        /// [`PROTOCOL_VERSION`] of the driver.
        version: u32,
    },
    /// A driver process's counters (sent every 100 ms).
    DriverStats(crate::server::DriverThreadStats),
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
    },
    /// A socket was bound.
    Bound {
        /// Its number, used in descriptors.
        socket: u32,
    },
    /// A socket was closed.
    Closed {
        /// Its number.
        socket: u32,
    },
    /// Every counter.
    Stats(Box<crate::server::ServerStats>),
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
    Io(#[from] std::io::Error),
    /// The peer sent something that is not a message of this protocol.
    #[error("malformed control message: {0}")]
    Malformed(String),
}

/// Sends one message.
pub fn send<T: serde::Serialize>(fd: impl AsFd, msg: &T) -> Result<(), ControlError> {
    let bytes = serde_json::to_vec(msg).map_err(|e| ControlError::Malformed(e.to_string()))?;
    rustix::net::send(fd, &bytes, SendFlags::NOSIGNAL).map_err(|e| {
        if e == rustix::io::Errno::PIPE || e == rustix::io::Errno::CONNRESET {
            ControlError::HungUp
        } else {
            ControlError::Io(e.into())
        }
    })?;
    Ok(())
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

/// Receives one message; `Ok(None)` if the socket is non-blocking and nothing is there.
pub fn recv<T: serde::de::DeserializeOwned>(fd: impl AsFd) -> Result<Option<T>, ControlError> {
    let mut buf = vec![0u8; MAX_MSG];
    match rustix::net::recv(fd, &mut buf, RecvFlags::empty()) {
        Ok((0, _)) => Err(ControlError::HungUp),
        Ok((n, _)) => serde_json::from_slice(&buf[..n])
            .map(Some)
            .map_err(|e| ControlError::Malformed(e.to_string())),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(rustix::io::Errno::CONNRESET) => Err(ControlError::HungUp),
        Err(e) => Err(ControlError::Io(e.into())),
    }
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
/// a live one.
pub fn listen(path: &Path) -> Result<OwnedFd, ControlError> {
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
    let addr = SocketAddrUnix::new(path).map_err(std::io::Error::from)?;
    rustix::net::bind(&fd, &addr).map_err(std::io::Error::from)?;
    rustix::net::listen(&fd, 64).map_err(std::io::Error::from)?;
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

/// Accepts a pending connection (non-blocking), if any.
pub fn accept(listener: impl AsFd) -> Result<Option<OwnedFd>, ControlError> {
    match rustix::net::accept_with(listener, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(e) => Err(ControlError::Io(e.into())),
    }
}

/// The greeting of an `ipc` data socket hand-off.
const DATA_SOCKET_GREETING: &[u8; 16] = b"shmnet-ipc-data1";

/// In the `ipc` structure: passes the application's end of its data socket pair.
pub fn send_fd(sock: impl AsFd, fd: rustix::fd::BorrowedFd<'_>) -> Result<(), ControlError> {
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)) {
        return Err(ControlError::Malformed(
            "cannot attach the data socket".into(),
        ));
    }
    rustix::net::sendmsg(
        sock,
        &[std::io::IoSlice::new(DATA_SOCKET_GREETING)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .map_err(|e| ControlError::Io(e.into()))?;
    Ok(())
}

/// In the `ipc` structure: receives the data socket passed by [`send_fd`] (blocking).
pub fn recv_fd(sock: impl AsFd) -> Result<OwnedFd, ControlError> {
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let mut buf = [0u8; 16];
    let msg = rustix::net::recvmsg(
        sock,
        &mut [std::io::IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| ControlError::Io(e.into()))?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in control.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Err(ControlError::HungUp);
    }
    if msg.bytes != buf.len() || &buf != DATA_SOCKET_GREETING || fds.len() != 1 {
        return Err(ControlError::Malformed(
            "expected the ipc data socket".into(),
        ));
    }
    Ok(fds.remove(0))
}
