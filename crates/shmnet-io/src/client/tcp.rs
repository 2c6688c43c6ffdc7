//! TCP for applications of the `server` and `ipc` structures: [`TcpListener`] and
//! [`TcpStream`], blocking and non-blocking.
//!
//! A TCP socket travels the same rings as a UDP socket (docs/tcp.md, "In the server"):
//! - bytes written are sends on `REQ` — staged in the send region or send buffers — which
//!   the server holds, in order, until the connection's send buffer takes them: a writer
//!   that outruns the network runs out of send memory and waits, which is its flow control;
//! - bytes read are deliveries on `RX`: a chain of the driver's buffers lent where they lie
//!   (`--isolation shared`), a posted buffer the server copied them into (`regions`), a
//!   packet (`ipc`). What a `read` cannot take stays for the next one;
//! - shutdown, close and the socket options are operations on `REQ`, behind the writes
//!   before them; connected, accepted, end of stream and failure are events on `RX`, behind
//!   the bytes before them.
//!
//! A closed socket's number comes back to the server only when the application has read
//! its `Released` event: whatever the ring still held for it is given back unread.

use super::{ClientError, Inner};
use crate::control::{self, Request, Response};
use crate::windows::{self, TcpEvent, TcpFailure, TcpOp};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use shmnet_chan::Desc;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// What the library keeps of its TCP sockets.
#[derive(Default)]
pub(super) struct Book {
    /// Numbers that are TCP sockets (an `ipc` delivery for one is stream bytes).
    pub(super) ids: HashSet<u16>,
    /// Closed by us; anything for them until `Released` is given back unread.
    pub(super) closing: HashSet<u16>,
    /// Bytes delivered that a `read` could not take: (bytes, how many were read).
    leftover: HashMap<u16, (Vec<u8>, usize)>,
    /// Connections that failed (the event is queued too, in order).
    pub(super) failed: HashMap<u16, TcpFailure>,
    /// `ipc`: events and stream bytes for TCP sockets, in order.
    pub(super) ipc_items: HashMap<u16, VecDeque<IpcItem>>,
    /// Closed with a linger that is still waited for ([`TcpStream::close_linger`]).
    lingering: HashSet<u16>,
    /// Lingering sockets released while waited for: the failure reported before, if any.
    lingered: HashMap<u16, Option<TcpFailure>>,
    /// The ticket of the next connect.
    next_ticket: u32,
    /// Connections opened by [`super::Client::tcp_connect_start`] whose `Connected` event
    /// has not been read yet: not writable until it comes.
    pub(super) connecting: HashSet<u16>,
    /// Shared by a fork and not used since ([`super::fork`]): the next read, accept or
    /// poll claims it first.
    pub(super) dormant: HashSet<u16>,
    /// Within [`super::Client::prepare_fork`]'s `take_delivered`: dormant sockets stay so.
    pub(super) claims_held: bool,
    /// Listeners a fork shared: each wait for a connection asks for one
    /// ([`Inner::listener_wants`]).
    pub(super) pull: HashSet<u16>,
    /// Listeners of `pull` that asked and were not handed a connection yet.
    pub(super) asked: HashSet<u16>,
    /// UDP sockets' ICMP errors not yet taken ([`super::UdpSocket::take_error`]), oldest
    /// first, at most [`shmnet_stack::socket::UDP_ERRORS_KEPT`] each; no empty queue is
    /// kept, so an empty map is the common case's one check.
    pub(super) udp_errors: HashMap<u16, VecDeque<super::UdpUnreachable>>,
}

impl Book {
    /// Whether bytes a `read` could not take wait for socket `id`.
    pub(super) fn has_leftover(&self, id: u16) -> bool {
        self.leftover.contains_key(&id)
    }
}

/// An `ipc` item of a TCP socket.
pub(super) enum IpcItem {
    /// Stream bytes.
    Data(Vec<u8>),
    /// An event (its descriptor).
    Event(Desc),
}

/// The next thing that came for a TCP socket.
enum Item {
    /// Bytes, in a delivery of the rings.
    Delivery(Desc),
    /// Bytes, copied out of an `ipc` packet.
    Bytes(Vec<u8>),
    Event(TcpEvent),
}

/// How long one wait for send memory lasts before the library looks whether the
/// connection failed (a write blocks for as long as the peer keeps its window shut).
const WRITE_PATIENCE: Duration = Duration::from_millis(200);

/// The error of a socket number given again before its old socket's `Released` came.
fn not_released(id: u16) -> ClientError {
    ClientError::Protocol(format!(
        "socket number {id} was given again before its release came"
    ))
}

/// Sends a buffer-size operation for socket `id`; returns the size that holds.
fn set_buffer(inner: &Rc<RefCell<Inner>>, id: u16, op: TcpOp) -> Result<u32, ClientError> {
    inner.borrow_mut().tcp_op(id, op)?;
    Ok(shmnet_stack::tcp::buffer_size(op.arg()))
}

/// `ipc`: how long an operation waits for room on the data socket (full while the server
/// holds a send the peer has no window for) before it gives up.
pub(super) const OP_PATIENCE: Duration = Duration::from_secs(10);

/// Bytes one send request carries at most (one UDP datagram's worth: the rings' limit).
const WRITE_CHUNK: usize = super::MAX_DATAGRAM;

impl Inner {
    /// Notes what a descriptor read off `RX` means for the TCP sockets: an accepted
    /// connection's number is TCP from now on, a failure is remembered. Returns `false` if
    /// the item is for a socket being closed (the caller gives it back unread).
    pub(super) fn note_tcp(&mut self, socket: u16, ev: Option<TcpEvent>) -> bool {
        match ev {
            Some(TcpEvent::Accepted { socket: new, .. }) => {
                self.tcp.ids.insert(new);
                self.tcp.asked.remove(&socket);
            }
            Some(TcpEvent::Failed(f)) => {
                self.tcp.failed.insert(socket, f);
            }
            // A UDP socket's: kept beside it, never queued as a delivery.
            Some(TcpEvent::Unreachable { failure, peer }) => {
                if !self.tcp.closing.contains(&socket) && !self.tcp.ids.contains(&socket) {
                    let q = self.tcp.udp_errors.entry(socket).or_default();
                    if q.len() >= shmnet_stack::socket::UDP_ERRORS_KEPT {
                        q.pop_front();
                    }
                    q.push_back(super::UdpUnreachable { failure, peer });
                }
                return false;
            }
            Some(TcpEvent::Released) if self.tcp.closing.remove(&socket) => {
                self.tcp.ids.remove(&socket);
                self.tcp.pull.remove(&socket);
                self.tcp.asked.remove(&socket);
                self.tcp.dormant.remove(&socket);
                let failed = self.tcp.failed.remove(&socket);
                if self.tcp.lingering.remove(&socket) {
                    self.tcp.lingered.insert(socket, failed);
                }
                return false;
            }
            _ => {}
        }
        !self.tcp.closing.contains(&socket)
    }

    /// Gives back the memory of a delivery nobody will read (its socket was closed).
    pub(super) fn discard(&mut self, d: Desc) {
        if windows::event_of(&d).is_none() {
            let _ = self.lend(d, |_| ());
        }
    }

    /// The next item for TCP socket `id`, waiting until `deadline` (`Some(now)`: do not
    /// wait). `Ok(None)` on timeout.
    fn tcp_next(
        &mut self,
        id: u16,
        deadline: Option<Instant>,
    ) -> Result<Option<Item>, ClientError> {
        self.wake_dormant(id)?;
        if self.shm.is_none() {
            return self.ipc_tcp_next(id, deadline);
        }
        let d = match self.wait_delivery(id, deadline) {
            Ok(d) => d,
            Err(ClientError::TimedOut) => return Ok(None),
            Err(e) => return Err(e),
        };
        let item = match windows::event_of(&d) {
            Some((_, ev)) => Item::Event(ev),
            None => Item::Delivery(d),
        };
        self.note_connected(id, &item);
        Ok(Some(item))
    }

    /// A connection's `Connected` (or its failure) was read: it is no longer connecting.
    fn note_connected(&mut self, id: u16, item: &Item) {
        if matches!(item, Item::Event(TcpEvent::Connected | TcpEvent::Failed(_))) {
            self.tcp.connecting.remove(&id);
        }
    }

    fn ipc_tcp_next(
        &mut self,
        id: u16,
        deadline: Option<Instant>,
    ) -> Result<Option<Item>, ClientError> {
        loop {
            if let Some(item) = self
                .tcp
                .ipc_items
                .get_mut(&id)
                .and_then(VecDeque::pop_front)
            {
                let item = match item {
                    IpcItem::Data(v) => Item::Bytes(v),
                    IpcItem::Event(d) => match windows::event_of(&d) {
                        Some((_, ev)) => Item::Event(ev),
                        None => continue,
                    },
                };
                self.note_connected(id, &item);
                return Ok(Some(item));
            }
            let Some(n) = self.read_packet(true, deadline)? else {
                return Ok(None);
            };
            self.stash_ipc(n);
        }
    }

    /// Sends operation `op` on socket `id`, behind everything sent before it.
    pub(super) fn tcp_op(&mut self, id: u16, op: TcpOp) -> Result<(), ClientError> {
        if self.gone {
            return Err(ClientError::ServerGone);
        }
        if self.shm.is_none() {
            // The server reads no packet of ours while it holds a send the connection has no
            // room for: an operation behind it waits, at most OP_PATIENCE.
            let p = control::ipc_op(id, op);
            let deadline = Instant::now() + OP_PATIENCE;
            loop {
                let sock = self.data_sock.as_ref().unwrap_or(&self.ctl);
                match control::send_raw(sock, &[&p]) {
                    Ok(true) => return Ok(()),
                    Ok(false) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_micros(100))
                    }
                    Ok(false) => return Err(ClientError::TimedOut),
                    Err(e) => return Err(self.fail(e)),
                }
                self.check_alive()?;
            }
        }
        let d = windows::op_desc(id, op);
        while self.shm.as_mut().is_some_and(|s| s.req.enqueue(d).is_err()) {
            self.check_alive()?;
            self.sleep_for_room(super::Ring::Req);
            self.reap();
        }
        Ok(())
    }

    /// Opens a connection to `to` on the server: a connect on `REQ` (no control message:
    /// the data plane answers on [`windows::APP_EVENTS`]), or in `ipc` a `TcpConnect`.
    /// Returns its socket number and local port once the server has made the socket.
    fn tcp_open(&mut self, to: SocketAddrV4, deadline: Instant) -> Result<(u16, u16), ClientError> {
        if self.shm.is_none() {
            return self.tcp_socket(Request::TcpConnect { to });
        }
        let ticket = self.tcp.next_ticket;
        self.tcp.next_ticket = ticket.wrapping_add(1);
        let d = windows::connect_desc(ticket, to);
        while self.shm.as_mut().is_some_and(|s| s.req.enqueue(d).is_err()) {
            self.check_alive()?;
            self.sleep_for_room(super::Ring::Req);
            self.reap();
        }
        loop {
            let d = self.wait_delivery(windows::APP_EVENTS, Some(deadline))?;
            match windows::event_of(&d) {
                Some((
                    _,
                    TcpEvent::Opened {
                        ticket: t,
                        socket,
                        port,
                    },
                )) if t == ticket => {
                    if socket == windows::APP_EVENTS {
                        return Err(ClientError::Refused(format!(
                            "the server could not open a connection to {to} (no port or table room)"
                        )));
                    }
                    self.tcp.ids.insert(socket);
                    return Ok((socket, port));
                }
                // An answer to a connect that gave up waiting: let its socket go.
                Some((_, TcpEvent::Opened { socket, .. })) if socket != windows::APP_EVENTS => {
                    self.tcp.ids.insert(socket);
                    self.tcp_release(socket, TcpOp::Abort)?;
                }
                _ => {}
            }
        }
    }

    /// Makes a TCP socket on the server (`TcpListen` or `TcpConnect`).
    fn tcp_socket(&mut self, req: Request) -> Result<(u16, u16), ClientError> {
        match self.call(req)? {
            Response::TcpSocket { socket, port } => {
                let id = u16::try_from(socket)
                    .map_err(|_| ClientError::Protocol(format!("socket number {socket}")))?;
                self.await_released(id)?;
                self.tcp.ids.insert(id);
                Ok((id, port))
            }
            Response::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Protocol(format!(
                "expected TcpSocket, got {other:?}"
            ))),
        }
    }

    /// Waits until the `Released` of the socket that last had number `id` has been read, if
    /// it has not. The server reuses a number only after it sent that event, but on the data
    /// path (the data socket, or `RX`), while a number made by a control message comes on
    /// the control socket: read late, the old `Released` would take the new socket's number
    /// out of the TCP ones (its bytes then mistaken for datagrams in `ipc`).
    pub(super) fn await_released(&mut self, id: u16) -> Result<(), ClientError> {
        if self.released_by(id, Instant::now() + OP_PATIENCE)? {
            Ok(())
        } else {
            Err(not_released(id))
        }
    }

    /// Reads deliveries until the `Released` of socket `id` has been read (`true`) or
    /// `deadline` passes (`false`).
    fn released_by(&mut self, id: u16, deadline: Instant) -> Result<bool, ClientError> {
        while self.tcp.closing.contains(&id) {
            if self.shm.is_some() {
                self.drain_rx();
                if !self.tcp.closing.contains(&id) {
                    break;
                }
                if Instant::now() >= deadline {
                    return Ok(false);
                }
                self.sleep_rx(Some(deadline))?;
                continue;
            }
            let Some(n) = self.read_packet(true, Some(deadline))? else {
                return Ok(false);
            };
            self.stash_ipc(n);
        }
        Ok(true)
    }

    /// Lets go of socket `id`: `Close` (or `Abort`) goes behind what was written, and what
    /// is queued for it here is given back unread.
    fn tcp_release(&mut self, id: u16, op: TcpOp) -> Result<(), ClientError> {
        self.drop_unread(id);
        self.tcp.connecting.remove(&id);
        self.tcp.closing.insert(id);
        self.tcp_op(id, op)
    }

    /// Gives back what is queued here for socket `id`, unread; returns whether it held
    /// stream bytes.
    pub(super) fn drop_unread(&mut self, id: u16) -> bool {
        let mut bytes = self.tcp.leftover.remove(&id).is_some();
        if let Some(items) = self.tcp.ipc_items.remove(&id) {
            bytes |= items.iter().any(|it| matches!(it, IpcItem::Data(_)));
        }
        for d in self.pending.take(id) {
            bytes |= windows::event_of(&d).is_none();
            self.discard(d);
        }
        bytes
    }
}

/// How a [`TcpStream::close_linger`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linger {
    /// The peer acknowledged every byte and the end of the stream.
    Acknowledged,
    /// The connection ended badly first (a reset — bytes left unread reset it too — or
    /// a timeout): what was written may not all have arrived.
    Failed(TcpFailure),
    /// The time ran out first; the connection goes on closing without the application.
    TimedOut,
}

/// A close with a linger under way ([`TcpStream::start_close_linger`]). Dropped before
/// [`poll`](Self::poll) said it ended, it stops waiting: the connection goes on closing in
/// the server, as after [`Linger::TimedOut`].
pub struct LingeringClose {
    inner: Rc<RefCell<Inner>>,
    id: u16,
    /// Bytes were left unread: the close was a reset.
    unread: bool,
    /// The outcome, once the wait has ended.
    ended: Option<Linger>,
}

impl LingeringClose {
    /// Looks once, without blocking: `Some` with the outcome when the server has let the
    /// socket go (everything acknowledged, or the connection failed; the same outcome on
    /// every later call), `None` while it is still closing.
    pub fn poll(&mut self) -> Result<Option<Linger>, ClientError> {
        if let Some(l) = self.ended {
            return Ok(Some(l));
        }
        let released = self.inner.borrow_mut().released_by(self.id, Instant::now());
        match released {
            Ok(false) => Ok(None),
            other => {
                let l = self.outcome(other);
                // Settled either way (`outcome` has cleared the books): drop undoes nothing.
                self.ended = Some(*l.as_ref().unwrap_or(&Linger::TimedOut));
                l.map(Some)
            }
        }
    }

    /// What a wait that ended with `released` comes to; stops waiting.
    fn end(mut self, released: Result<bool, ClientError>) -> Result<Linger, ClientError> {
        let l = self.outcome(released);
        // Whatever the outcome, `outcome` has settled the books: nothing for drop to undo.
        self.ended = Some(*l.as_ref().unwrap_or(&Linger::TimedOut));
        l
    }

    fn outcome(&self, released: Result<bool, ClientError>) -> Result<Linger, ClientError> {
        let mut i = self.inner.borrow_mut();
        match released {
            Ok(true) => Ok(match i.tcp.lingered.remove(&self.id).flatten() {
                Some(f) => Linger::Failed(f),
                None if self.unread => Linger::Failed(TcpFailure::Reset),
                None => Linger::Acknowledged,
            }),
            Ok(false) => {
                i.tcp.lingering.remove(&self.id);
                Ok(Linger::TimedOut)
            }
            Err(e) => {
                i.tcp.lingering.remove(&self.id);
                Err(e)
            }
        }
    }
}

impl Drop for LingeringClose {
    fn drop(&mut self) {
        if self.ended.is_none()
            && let Ok(mut i) = self.inner.try_borrow_mut()
        {
            i.tcp.lingering.remove(&self.id);
            // Released meanwhile (another call read the event) and never polled since.
            i.tcp.lingered.remove(&self.id);
        }
    }
}

/// A TCP socket listening for connections.
pub struct TcpListener {
    inner: Rc<RefCell<Inner>>,
    id: u16,
    port: u16,
    closed: bool,
}

/// A TCP connection. Reads and writes block unless named `try_`; [`std::io::Read`] and
/// [`std::io::Write`] are implemented too.
pub struct TcpStream {
    inner: Rc<RefCell<Inner>>,
    id: u16,
    local_port: u16,
    peer: SocketAddrV4,
    eof: bool,
    closed: bool,
}

impl super::Client {
    /// Listens for TCP connections on `port` of the server's address (0: a free ephemeral
    /// port, which [`TcpListener::port`] names), with room for `backlog` connections not yet
    /// accepted.
    pub fn tcp_listen(&self, port: u16, backlog: u32) -> Result<TcpListener, ClientError> {
        let mut i = self.inner.borrow_mut();
        // A listener on this port just closed (its `Close` on the ring) must be gone before
        // the server reads this request on the control socket, or the port is still taken
        // (found: `shutdown` of a listener then `listen` again failed with EADDRINUSE, 1 run
        // of 16).
        i.drain_requests(Instant::now() + OP_PATIENCE)?;
        let (id, port) = i.tcp_socket(Request::TcpListen { port, backlog })?;
        drop(i);
        Ok(TcpListener {
            inner: self.inner.clone(),
            id,
            port,
            closed: false,
        })
    }

    /// Opens a TCP connection to `to`, waiting up to `timeout` for the handshake.
    pub fn tcp_connect(
        &self,
        to: SocketAddrV4,
        timeout: Duration,
    ) -> Result<TcpStream, ClientError> {
        let deadline = Instant::now() + timeout;
        let mut i = self.inner.borrow_mut();
        let (id, local_port) = i.tcp_open(to, deadline)?;
        let mut stream = TcpStream::opened(&self.inner, id, local_port, to);
        loop {
            match i.tcp_next(id, Some(deadline)) {
                Ok(Some(Item::Event(TcpEvent::Connected))) => break,
                Ok(Some(Item::Event(TcpEvent::Failed(f)))) => {
                    drop(i);
                    stream.closed = true;
                    let _ = stream.inner.borrow_mut().tcp_release(id, TcpOp::Close);
                    return Err(ClientError::Connection(f));
                }
                Ok(Some(_)) => continue,
                Ok(None) | Err(ClientError::TimedOut) => {
                    drop(i);
                    stream.closed = true;
                    let _ = stream.inner.borrow_mut().tcp_release(id, TcpOp::Abort);
                    return Err(ClientError::TimedOut);
                }
                Err(e) => return Err(e),
            }
        }
        drop(i);
        Ok(stream)
    }
}

impl super::Client {
    /// Opens a TCP connection to `to` without waiting for the handshake (a non-blocking
    /// `connect`): returns once the server has made the socket, which takes no network
    /// round trip. [`TcpStream::connected`] tells when the handshake is done; until then the
    /// stream is not writable ([`super::Client::poll`]), and a write takes nothing.
    pub fn tcp_connect_start(&self, to: SocketAddrV4) -> Result<TcpStream, ClientError> {
        let mut i = self.inner.borrow_mut();
        let (id, local_port) = i.tcp_open(to, Instant::now() + OP_PATIENCE)?;
        i.tcp.connecting.insert(id);
        drop(i);
        Ok(TcpStream::opened(&self.inner, id, local_port, to))
    }
}

impl TcpListener {
    /// Its socket number.
    pub(super) fn id(&self) -> u16 {
        self.id
    }

    /// Its number on the server (what a fork's [`super::Client::adopt`] names it by).
    pub fn number(&self) -> u16 {
        self.id
    }

    /// A listener a forked child adopted.
    pub(super) fn adopted(inner: &Rc<RefCell<Inner>>, id: u16, port: u16) -> Self {
        TcpListener {
            inner: inner.clone(),
            id,
            port,
            closed: false,
        }
    }

    /// The client it belongs to.
    pub(super) fn inner(&self) -> &Rc<RefCell<Inner>> {
        &self.inner
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next connection, waiting for one.
    pub fn accept(&self) -> Result<TcpStream, ClientError> {
        self.accept_until(None)?.ok_or(ClientError::TimedOut)
    }

    /// The next connection, waiting up to `timeout` (`Ok(None)` if none came).
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Option<TcpStream>, ClientError> {
        self.accept_until(Some(Instant::now() + timeout))
    }

    /// The next connection if one is there now.
    pub fn try_accept(&self) -> Result<Option<TcpStream>, ClientError> {
        self.accept_until(Some(Instant::now()))
    }

    /// Sets the send buffer (`SO_SNDBUF`) of the connections accepted from now on; returns
    /// the size that holds (see [`shmnet_stack::tcp::buffer_size`]).
    pub fn set_send_buffer(&self, bytes: u32) -> Result<u32, ClientError> {
        set_buffer(&self.inner, self.id, TcpOp::SendBuffer(bytes))
    }

    /// Sets the receive buffer (`SO_RCVBUF`) of the connections accepted from now on: the
    /// most each offers in its window, and, set before their SYNs come, its scale; returns
    /// the size that holds.
    pub fn set_recv_buffer(&self, bytes: u32) -> Result<u32, ClientError> {
        set_buffer(&self.inner, self.id, TcpOp::RecvBuffer(bytes))
    }

    fn accept_until(&self, deadline: Option<Instant>) -> Result<Option<TcpStream>, ClientError> {
        let mut i = self.inner.borrow_mut();
        loop {
            i.listener_wants(self.id)?;
            match i.tcp_next(self.id, deadline)? {
                Some(Item::Event(TcpEvent::Accepted { socket, peer })) => {
                    i.tcp.ids.insert(socket);
                    i.tcp.asked.remove(&self.id);
                    // Taken: the server may announce one more (the backlog bounds those
                    // announced and not taken).
                    i.tcp_op(self.id, TcpOp::Claimed)?;
                    return Ok(Some(TcpStream {
                        inner: self.inner.clone(),
                        id: socket,
                        local_port: self.port,
                        peer,
                        eof: false,
                        closed: false,
                    }));
                }
                Some(Item::Delivery(d)) => i.discard(d),
                Some(_) => {}
                None => return Ok(None),
            }
        }
    }

    /// Stops listening; connections not yet accepted are reset.
    pub fn close(mut self) -> Result<(), ClientError> {
        self.closed = true;
        self.inner.borrow_mut().tcp_release(self.id, TcpOp::Close)
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        if !self.closed
            && let Ok(mut i) = self.inner.try_borrow_mut()
            && !i.gone
        {
            let _ = i.tcp_release(self.id, TcpOp::Close);
        }
    }
}

impl TcpStream {
    /// Its number on the server (what a fork's [`super::Client::adopt`] names it by).
    pub fn number(&self) -> u16 {
        self.id
    }

    /// A connection a forked child adopted.
    pub(super) fn adopted(
        inner: &Rc<RefCell<Inner>>,
        id: u16,
        local_port: u16,
        peer: SocketAddrV4,
    ) -> Self {
        Self::opened(inner, id, local_port, peer)
    }

    /// The stream of connection `id` the server just opened to `peer` from `local_port`.
    fn opened(inner: &Rc<RefCell<Inner>>, id: u16, local_port: u16, peer: SocketAddrV4) -> Self {
        TcpStream {
            inner: inner.clone(),
            id,
            local_port,
            peer,
            eof: false,
            closed: false,
        }
    }

    /// Whether the handshake of a stream from [`super::Client::tcp_connect_start`] is done,
    /// without waiting: `Ok(true)` connected (always, for any other stream), `Ok(false)`
    /// still going, `Err(Connection(_))` failed (refused, timed out…).
    pub fn connected(&mut self) -> Result<bool, ClientError> {
        let mut i = self.inner.borrow_mut();
        if !i.tcp.connecting.contains(&self.id) {
            return match i.tcp.failed.get(&self.id) {
                Some(&f) => Err(ClientError::Connection(f)),
                None => Ok(true),
            };
        }
        i.gather()?;
        // A connection that was established and then failed (reset at once) connected:
        // its Connected comes before its failure, and the failure is the next call's.
        if !i.tcp_has(self.id, |ev| matches!(ev, Some(TcpEvent::Connected))) {
            if let Some(&f) = i.tcp.failed.get(&self.id) {
                i.tcp.connecting.remove(&self.id);
                return Err(ClientError::Connection(f));
            }
            return Ok(false);
        }
        // The first thing that comes for a connecting socket is its Connected.
        match i.tcp_next(self.id, Some(Instant::now()))? {
            Some(Item::Event(TcpEvent::Connected)) => Ok(true),
            Some(Item::Event(TcpEvent::Failed(f))) => Err(ClientError::Connection(f)),
            Some(_) => Err(ClientError::Protocol(
                "a connecting socket's first delivery was not its Connected".into(),
            )),
            None => Ok(false),
        }
    }

    /// Its socket number, whether it read the end of the stream, whether it is closed.
    pub(super) fn poll_state(&self) -> (u16, bool, bool) {
        (self.id, self.eof, self.closed)
    }

    /// The client it belongs to.
    pub(super) fn inner(&self) -> &Rc<RefCell<Inner>> {
        &self.inner
    }

    /// How the connection failed, if the library has seen it fail (a reset, a refused or
    /// timed-out handshake); bytes that came before the failure may still be there to read.
    pub fn failure(&self) -> Option<TcpFailure> {
        self.inner
            .try_borrow()
            .ok()?
            .tcp
            .failed
            .get(&self.id)
            .copied()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddrV4 {
        self.peer
    }

    /// Our port.
    pub fn local_port(&self) -> u16 {
        self.local_port
    }

    /// Reads what has arrived into `buf`, waiting for at least one byte; `Ok(0)` at the
    /// end of the stream (the peer shut down its side, every byte read).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, ClientError> {
        self.read_until(buf, None)?.ok_or(ClientError::TimedOut)
    }

    /// As [`TcpStream::read`], waiting at most `timeout` (`Ok(None)`: nothing came).
    pub fn read_timeout(
        &mut self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<Option<usize>, ClientError> {
        self.read_until(buf, Some(Instant::now() + timeout))
    }

    /// Reads what is there now, without waiting (`Ok(None)`: nothing yet).
    pub fn try_read(&mut self, buf: &mut [u8]) -> Result<Option<usize>, ClientError> {
        self.read_until(buf, Some(Instant::now()))
    }

    fn read_until(
        &mut self,
        buf: &mut [u8],
        deadline: Option<Instant>,
    ) -> Result<Option<usize>, ClientError> {
        if buf.is_empty() {
            return Ok(Some(0));
        }
        let mut i = self.inner.borrow_mut();
        loop {
            if let Some((bytes, at)) = i.tcp.leftover.get_mut(&self.id) {
                let n = (bytes.len() - *at).min(buf.len());
                buf[..n].copy_from_slice(&bytes[*at..*at + n]);
                *at += n;
                if *at == bytes.len() {
                    i.tcp.leftover.remove(&self.id);
                }
                return Ok(Some(n));
            }
            if self.eof {
                return Ok(Some(0));
            }
            if self.closed {
                return Err(ClientError::Refused("the stream is closed".into()));
            }
            let Some(item) = i.tcp_next(self.id, deadline)? else {
                if i.tcp.failed.contains_key(&self.id) {
                    // The failure was read already (its event said it once): from now on
                    // the stream reads as ended, as Linux's reads give 0 after the error.
                    self.eof = true;
                    return Ok(Some(0));
                }
                return Ok(None);
            };
            match item {
                Item::Delivery(d) => {
                    let (n, rest) = i.lend(d, |l| {
                        let n = l.copy_to(buf);
                        let mut rest = Vec::new();
                        if l.len() > n {
                            let mut skip = n;
                            for seg in l.segments() {
                                let k = skip.min(seg.len());
                                skip -= k;
                                rest.extend_from_slice(&seg[k..]);
                            }
                        }
                        (n, rest)
                    })?;
                    if !rest.is_empty() {
                        i.tcp.leftover.insert(self.id, (rest, 0));
                    }
                    if n > 0 {
                        return Ok(Some(n));
                    }
                }
                // An empty message carries nothing (a leftover of no bytes would read as
                // the end of the stream).
                Item::Bytes(v) if v.is_empty() => {}
                Item::Bytes(v) => {
                    i.tcp.leftover.insert(self.id, (v, 0));
                }
                Item::Event(TcpEvent::Eof) => self.eof = true,
                Item::Event(TcpEvent::Failed(f)) => return Err(ClientError::Connection(f)),
                Item::Event(_) => {}
            }
        }
    }

    /// Writes all of `data`, waiting for send memory while the connection's send buffer is
    /// full (for as long as the peer keeps its window shut).
    pub fn write_all(&mut self, data: &[u8]) -> Result<(), ClientError> {
        for chunk in data.chunks(WRITE_CHUNK) {
            loop {
                match self.send_chunk(chunk, Some(WRITE_PATIENCE)) {
                    Ok(()) => break,
                    Err(ClientError::TimedOut) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Writes as much of `data` as send memory takes now, without waiting; returns how
    /// many bytes (0: none, try later).
    pub fn try_write(&mut self, data: &[u8]) -> Result<usize, ClientError> {
        let mut done = 0;
        for chunk in data.chunks(WRITE_CHUNK) {
            match self.send_chunk(chunk, None) {
                Ok(()) => done += chunk.len(),
                Err(ClientError::TimedOut) => break,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    fn send_chunk(&mut self, chunk: &[u8], wait: Option<Duration>) -> Result<(), ClientError> {
        if self.closed {
            return Err(ClientError::Refused("the stream is closed".into()));
        }
        let mut i = self.inner.borrow_mut();
        i.reap();
        if let Some(&f) = i.tcp.failed.get(&self.id) {
            return Err(ClientError::Connection(f));
        }
        let nowhere = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        i.send_message(self.id, chunk, nowhere, wait)
    }

    /// No more writes: the peer reads the end of the stream after the bytes written.
    pub fn shutdown(&mut self) -> Result<(), ClientError> {
        self.inner.borrow_mut().tcp_op(self.id, TcpOp::Shutdown)
    }

    /// Turns Nagle's algorithm off (`true`: every write goes out at once) or on.
    pub fn set_nodelay(&mut self, on: bool) -> Result<(), ClientError> {
        let op = if on {
            TcpOp::NoDelayOn
        } else {
            TcpOp::NoDelayOff
        };
        self.inner.borrow_mut().tcp_op(self.id, op)
    }

    /// Turns keepalive probes on or off.
    pub fn set_keepalive(&mut self, on: bool) -> Result<(), ClientError> {
        let op = if on {
            TcpOp::KeepaliveOn
        } else {
            TcpOp::KeepaliveOff
        };
        self.inner.borrow_mut().tcp_op(self.id, op)
    }

    /// Sets the send buffer (`SO_SNDBUF`): bytes written and not yet acknowledged, at most
    /// (what is queued beyond a smaller size stays, and no more is taken until it drains);
    /// returns the size that holds (see [`shmnet_stack::tcp::buffer_size`]).
    pub fn set_send_buffer(&mut self, bytes: u32) -> Result<u32, ClientError> {
        set_buffer(&self.inner, self.id, TcpOp::SendBuffer(bytes))
    }

    /// Sets the receive buffer (`SO_RCVBUF`): bytes received and not yet read, at most. A
    /// window already offered is never taken back, and the window scale was agreed on the
    /// SYNs (set it on the listener to choose that too); returns the size that holds.
    pub fn set_recv_buffer(&mut self, bytes: u32) -> Result<u32, ClientError> {
        set_buffer(&self.inner, self.id, TcpOp::RecvBuffer(bytes))
    }

    /// Closes the connection in order after what was written (the default when dropped).
    pub fn close(mut self) -> Result<(), ClientError> {
        self.closed = true;
        self.inner.borrow_mut().tcp_release(self.id, TcpOp::Close)
    }

    /// Closes the connection in order and waits, at most `timeout`, until the peer has
    /// acknowledged every byte written and the end of the stream (`SO_LINGER` with a time).
    /// Bytes not yet read, or arriving meanwhile, reset the connection instead, as any
    /// close with unread bytes does. After [`Linger::TimedOut`] the connection goes on
    /// closing in the server, as a closed socket does in the kernel.
    pub fn close_linger(self, timeout: Duration) -> Result<Linger, ClientError> {
        let deadline = Instant::now() + timeout;
        let closing = self.start_close_linger()?;
        let released = closing.inner.borrow_mut().released_by(closing.id, deadline);
        closing.end(released)
    }

    /// [`close_linger`](Self::close_linger) without the wait: the close goes to the server
    /// now, and [`LingeringClose::poll`] says, without blocking, when the peer has
    /// acknowledged everything (for a caller that must not block while it waits, such as
    /// the sockets library, which lets its lock go between looks).
    pub fn start_close_linger(mut self) -> Result<LingeringClose, ClientError> {
        self.closed = true;
        let id = self.id;
        let inner = Rc::clone(&self.inner);
        let mut i = inner.borrow_mut();
        // Bytes that reached us unread (the server handed them over already): the peer
        // learns by a reset, as from a kernel's close.
        if i.shm.is_some() {
            i.drain_rx();
        } else {
            while let Ok(Some(n)) = i.read_packet(true, Some(Instant::now())) {
                i.stash_ipc(n);
            }
        }
        let unread = i.drop_unread(id);
        let op = if unread {
            TcpOp::Abort
        } else {
            TcpOp::CloseLinger
        };
        i.tcp.lingering.insert(id);
        if let Err(e) = i.tcp_release(id, op) {
            i.tcp.lingering.remove(&id);
            return Err(e);
        }
        drop(i);
        Ok(LingeringClose {
            inner,
            id,
            unread,
            ended: None,
        })
    }

    /// Resets the connection (`SO_LINGER` of zero): unsent bytes are dropped.    /// Resets the connection (`SO_LINGER` of zero): unsent bytes are dropped.
    pub fn abort(mut self) -> Result<(), ClientError> {
        self.closed = true;
        self.inner.borrow_mut().tcp_release(self.id, TcpOp::Abort)
    }
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("socket", &self.id)
            .field("local_port", &self.local_port)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("socket", &self.id)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        if !self.closed
            && let Ok(mut i) = self.inner.try_borrow_mut()
            && !i.gone
        {
            let _ = i.tcp_release(self.id, TcpOp::Close);
        }
    }
}

impl std::io::Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        TcpStream::read(self, buf).map_err(std::io::Error::other)
    }
}

impl std::io::Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let chunk = &buf[..buf.len().min(WRITE_CHUNK)];
        self.write_all(chunk).map_err(std::io::Error::other)?;
        Ok(chunk.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
