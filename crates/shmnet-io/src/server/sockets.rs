//! One application's sockets on the server: socket number → UDP socket, TCP listener or
//! TCP connection, and what each TCP socket has told its application so far.
//!
//! TCP crosses the transports as UDP does — bytes out as sends, bytes in as deliveries —
//! with operations and events beside them ([`crate::windows::TcpOp`],
//! [`crate::windows::TcpEvent`]). This module holds what is the same for every transport:
//! which socket has something to say ([`Sockets::next_item`]), carrying out an operation,
//! and sending bytes. The transports only move the results.
//!
//! Socket numbers — TCP's and UDP's — are reused only after the application was told
//! [`TcpEvent::Released`]: rings are in order, so anything it reads for a number after that
//! event belongs to the socket that took the number next.

use crate::windows::{APP_EVENTS, TcpEvent, TcpFailure, TcpOp};
use shmnet_stack::icmp::Unreachable;
use shmnet_stack::tcp::{Buffer, CloseReason, ListenHandle, State, TcpHandle};
use shmnet_stack::{Interface, SocketHandle};

use super::forks::{Held, StackSock};
use super::transport::Round;

/// One socket of an application.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AppSocket {
    /// A bound UDP socket.
    Udp(SocketHandle),
    /// A TCP listener, the number of an accepted connection not yet announced, its backlog,
    /// and how many connections it announced that the application has not yet taken
    /// ([`TcpOp::Claimed`]): no more than the backlog are announced at once.
    Listener {
        l: ListenHandle,
        owed: Option<u16>,
        backlog: u16,
        unclaimed: u16,
        /// Shared by a fork and claimed by another holder ([`super::forks`]): it announces
        /// nothing.
        dormant: bool,
    },
    /// A TCP connection.
    Tcp(TcpSock),
    /// Closed by the application; its `Released` event is still to be delivered.
    Releasing,
    /// Closed by the application with a linger ([`TcpOp::CloseLinger`]): its FIN is queued,
    /// and `Released` waits until it is acknowledged or the connection ends.
    Lingering(TcpSock),
}

/// A TCP connection of an application, and which of its events were delivered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpSock {
    pub(crate) h: TcpHandle,
    /// Whether the application knows the number: an accepted connection is not announced
    /// until its listener's `Accepted` is delivered, and says nothing before (its bytes
    /// would reach an application that cannot tell whose they are).
    announced: bool,
    said_connected: bool,
    said_eof: bool,
    said_failed: bool,
    /// Shared by a fork and claimed by another holder ([`super::forks`]): it says nothing.
    dormant: bool,
}

/// Something a TCP socket has for its application.
#[derive(Clone, Copy, Debug)]
pub(crate) enum TcpItem {
    /// An event to deliver.
    Event(u16, TcpEvent),
    /// Bytes to deliver: `readable` of them are ready on connection `h`.
    Data {
        socket: u16,
        h: TcpHandle,
        readable: u32,
    },
}

/// Counted refusals of TCP requests (bad numbers, operations on the wrong kind).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Refusals {
    pub(crate) bad_ops: u64,
}

/// An application's socket table.
#[derive(Default)]
pub(crate) struct Sockets {
    /// The application's id (how [`super::forks`] names its entries).
    app: u64,
    slots: Vec<Option<AppSocket>>,
    /// Numbers whose `Released` was delivered: free for new sockets, oldest first (a number
    /// is given again as late as it can be, so that an application's logs and a slow
    /// reader of its ring see one socket per number for as long as possible).
    free: std::collections::VecDeque<u16>,
    /// Connects carried out and not yet announced: (ticket, socket and local port, or
    /// `None` if it could not be opened).
    opened: std::collections::VecDeque<(u32, Option<(u16, u16)>)>,
    /// Where the last [`Sockets::next_item`] scan stopped, so that no socket starves.
    scan_from: usize,
    /// How many entries have events to say: TCP sockets, and closed sockets (UDP ones too)
    /// whose `Released` is owed. Applications with none (open UDP sockets only) skip the
    /// scan.
    tcp: usize,
    pub(crate) refusals: Refusals,
}

/// Socket numbers fit the 16 bits descriptors carry, [`APP_EVENTS`] excluded.
const MAX_SOCKETS: usize = APP_EVENTS as usize;

/// Connects not yet announced, at most (more are refused: an application has one blocking
/// connect outstanding, a few if it opens them without waiting).
const MAX_OPENING: usize = 256;

impl Sockets {
    /// The empty table of application `app`.
    pub(crate) fn new(app: u64) -> Self {
        Self {
            app,
            ..Self::default()
        }
    }

    /// Takes a number for `s`: the longest released one if any, else a new one.
    pub(crate) fn insert(&mut self, s: AppSocket) -> Option<u16> {
        let n = match self.free.pop_front() {
            Some(n) => {
                self.slots[usize::from(n)] = Some(s);
                n
            }
            None if self.slots.len() >= MAX_SOCKETS => return None,
            None => {
                self.slots.push(Some(s));
                (self.slots.len() - 1) as u16
            }
        };
        if !matches!(s, AppSocket::Udp(_)) {
            self.tcp += 1;
        }
        Some(n)
    }

    /// The socket numbered `n`.
    pub(crate) fn get(&self, n: usize) -> Option<AppSocket> {
        self.slots.get(n).copied().flatten()
    }

    /// The UDP socket numbered `n`.
    pub(crate) fn udp(&self, n: usize) -> Option<SocketHandle> {
        match self.get(n) {
            Some(AppSocket::Udp(h)) => Some(h),
            _ => None,
        }
    }

    /// The TCP connection numbered `n`.
    pub(crate) fn tcp(&self, n: usize) -> Option<TcpHandle> {
        match self.get(n) {
            Some(AppSocket::Tcp(t)) => Some(t.h),
            _ => None,
        }
    }

    /// Every socket, with its number.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (usize, AppSocket)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|s| (i, s)))
    }

    /// Every UDP socket, with its number.
    pub(crate) fn udp_sockets(&self) -> impl Iterator<Item = (usize, SocketHandle)> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| match s {
            Some(AppSocket::Udp(h)) => Some((i, *h)),
            _ => None,
        })
    }

    /// Whether any UDP socket has a datagram waiting.
    pub(crate) fn any_udp_waiting(&self, iface: &Interface) -> bool {
        self.udp_sockets()
            .any(|(_, h)| matches!(iface.udp_peek(h), Ok(Some(_))))
    }

    /// How many sockets are open.
    pub(crate) fn count(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|s| !matches!(s, AppSocket::Releasing | AppSocket::Lingering(_)))
            .count()
    }

    /// Removes UDP socket `n` (the control plane's `Close`). Its number is reused only
    /// after its `Released` is delivered, as a TCP socket's is: datagrams already on their
    /// way to the application carry the number, and the event behind them tells it that
    /// nothing more will (without it, a datagram for the old socket would reach the next
    /// one to take the number; and never reusing numbers ran a process out of them after
    /// 65,535 binds).
    pub(crate) fn take_udp(&mut self, n: usize) -> Option<SocketHandle> {
        let slot = self.slots.get_mut(n)?;
        match *slot {
            Some(AppSocket::Udp(h)) => {
                *slot = Some(AppSocket::Releasing);
                self.tcp += 1;
                Some(h)
            }
            _ => None,
        }
    }

    /// A new TCP connection (opened by the application, or accepted).
    pub(crate) fn insert_tcp(&mut self, h: TcpHandle, accepted: bool) -> Option<u16> {
        self.insert(AppSocket::Tcp(TcpSock {
            h,
            announced: !accepted,
            said_connected: accepted,
            said_eof: false,
            said_failed: false,
            dormant: false,
        }))
    }

    /// What a fork shares of this table with the child ([`super::forks`]): the listeners and
    /// connections numbered in `numbers` — those the application holds as sockets (an
    /// announced connection it has not accepted stays its own, as it stays in a kernel's
    /// accept queue). Numbers that name nothing shareable are skipped (counted refused).
    pub(crate) fn fork_share(&mut self, numbers: &[u32]) -> Vec<Held> {
        let mut v = Vec::new();
        for &k in numbers {
            let n = k as usize;
            let held = match self.slots.get(n).copied().flatten() {
                Some(AppSocket::Listener { l, backlog, .. }) => Held {
                    parent: n as u16,
                    sock: StackSock::Listen(l),
                    listener: true,
                    backlog,
                    said_connected: false,
                },
                Some(AppSocket::Tcp(t)) if t.announced => Held {
                    parent: n as u16,
                    sock: StackSock::Conn(t.h),
                    listener: false,
                    backlog: 0,
                    said_connected: t.said_connected,
                },
                _ => {
                    self.refusals.bad_ops += 1;
                    continue;
                }
            };
            if !v.iter().any(|h: &Held| h.parent == held.parent) {
                v.push(held);
            }
        }
        v
    }

    /// A socket a fork shared, taken by this (the child's) table, silent until a `Resume`;
    /// its number, or `None` if the table is full. Its end and failure are said again (the
    /// child's library knows nothing of what its parent's was told).
    pub(crate) fn insert_adopted(&mut self, h: &Held) -> Option<u16> {
        self.insert(match h.sock {
            StackSock::Listen(l) => AppSocket::Listener {
                l,
                owed: None,
                backlog: h.backlog,
                unclaimed: 0,
                dormant: true,
            },
            StackSock::Conn(c) => AppSocket::Tcp(TcpSock {
                h: c,
                announced: true,
                said_connected: h.said_connected,
                said_eof: false,
                said_failed: false,
                dormant: true,
            }),
        })
    }

    /// Sets the `dormant` flag of every entry that refers to `sock` to what `dormant` says
    /// for its number.
    pub(crate) fn set_dormant(&mut self, sock: StackSock, dormant: impl Fn(u64, u16) -> bool) {
        let app = self.app;
        for (n, s) in self.slots.iter_mut().enumerate() {
            match s {
                Some(AppSocket::Listener { l, dormant: d, .. })
                    if sock == StackSock::Listen(*l) =>
                {
                    *d = dormant(app, n as u16);
                }
                Some(AppSocket::Tcp(t)) if sock == StackSock::Conn(t.h) => {
                    t.dormant = dormant(app, n as u16);
                }
                _ => {}
            }
        }
    }

    /// The next thing a TCP socket has for the application, round-robin from where the
    /// last call stopped. Accepting a connection (to announce it) happens here. Nothing is
    /// marked delivered: call [`Sockets::delivered`] once the transport has placed it.
    pub(crate) fn next_item(&mut self, r: &mut Round<'_>) -> Option<TcpItem> {
        if let Some(&(ticket, opened)) = self.opened.front() {
            let (socket, port) = opened.unwrap_or((APP_EVENTS, 0));
            return Some(TcpItem::Event(
                APP_EVENTS,
                TcpEvent::Opened {
                    ticket,
                    socket,
                    port,
                },
            ));
        }
        // UDP sockets have something to say only while an ICMP error waits for one (rare:
        // then every application scans its slots until it is taken).
        if self.tcp == 0 && !r.iface.udp_errors_waiting() {
            return None;
        }
        let n = self.slots.len();
        for k in 0..n {
            let i = (self.scan_from + k) % n;
            if let Some(item) = self.item_of(r, i) {
                // After bytes, the next socket's turn: one busy connection cannot keep the
                // others' bytes and events waiting. After an event, this socket's bytes.
                self.scan_from = match item {
                    TcpItem::Data { .. } => i + 1,
                    TcpItem::Event(..) => i,
                };
                return Some(item);
            }
        }
        None
    }

    fn item_of(&mut self, r: &mut Round<'_>, i: usize) -> Option<TcpItem> {
        let socket = i as u16;
        let iface = &mut *r.iface;
        match self.slots[i]? {
            AppSocket::Udp(h) => {
                let e = iface.udp_peek_error(h).ok().flatten()?;
                Some(TcpItem::Event(
                    socket,
                    TcpEvent::Unreachable {
                        failure: match e.what {
                            Unreachable::Port => TcpFailure::Refused,
                            Unreachable::Host => TcpFailure::HostUnreachable,
                            Unreachable::Net => TcpFailure::NetUnreachable,
                        },
                        peer: e.to,
                    },
                ))
            }
            AppSocket::Releasing => Some(TcpItem::Event(socket, TcpEvent::Released)),
            AppSocket::Lingering(t) => self.linger_item(r, i, t),
            // Silent, but a connection already taken for it is still announced.
            AppSocket::Listener {
                dormant: true,
                owed: None,
                ..
            } => None,
            AppSocket::Listener {
                l,
                owed,
                backlog,
                unclaimed,
                dormant,
            } => {
                let new = match owed {
                    Some(n) => n,
                    None if unclaimed >= backlog => return None,
                    None => {
                        let h = iface.tcp_accept(l).ok()??;
                        // A shared listener's first waiter had its connection.
                        r.forks.served(StackSock::Listen(l), self.app, socket);
                        let Some(n) = self.insert_tcp(h, true) else {
                            // 65,535 sockets open: nobody will own the connection. It
                            // stays in the stack, unannounced, until its peer or the
                            // keepalive ends it (no pool here to reset it with): counted.
                            self.refusals.bad_ops += 1;
                            return None;
                        };
                        self.slots[i] = Some(AppSocket::Listener {
                            l,
                            owed: Some(n),
                            backlog,
                            unclaimed,
                            dormant,
                        });
                        n
                    }
                };
                let peer = self
                    .tcp(usize::from(new))
                    .and_then(|h| iface.tcp_info(h).ok())
                    .map(|info| info.remote)?;
                Some(TcpItem::Event(
                    socket,
                    TcpEvent::Accepted { socket: new, peer },
                ))
            }
            AppSocket::Tcp(t) if !t.announced || t.dormant => None,
            AppSocket::Tcp(t) => {
                let st = iface.tcp_status(t.h).ok()?;
                if !t.said_connected && st.state.synchronized() {
                    return Some(TcpItem::Event(socket, TcpEvent::Connected));
                }
                if st.readable > 0 {
                    return Some(TcpItem::Data {
                        socket,
                        h: t.h,
                        readable: st.readable,
                    });
                }
                // The peer's FIN, once every byte before it is read, is said before a
                // failure that came after it — even when the two are found in one round
                // (the FIN and the reset arrived together) — so that reads end at the end
                // of the stream, as Linux's do (its read checks `SOCK_DONE` before
                // `sk_err`).
                if !t.said_eof && !t.said_failed && st.eof {
                    return Some(TcpItem::Event(socket, TcpEvent::Eof));
                }
                // A failure is said even after the end of the stream: a peer that ends with
                // a FIN and then resets leaves reads at the end but fails writes (`EPIPE`)
                // and polls an error, as Linux's CLOSE-WAIT reset does. (Withheld, the
                // application's writes went on into a connection that no longer existed.)
                if let Some(e) = st.error.filter(|_| !t.said_failed) {
                    return Some(TcpItem::Event(socket, TcpEvent::Failed(failure(e))));
                }
                if !t.said_eof && !t.said_failed && st.state == State::Closed {
                    return Some(TcpItem::Event(socket, TcpEvent::Eof));
                }
                None
            }
        }
    }

    /// What lingering socket `i` has to say: `Failed` once if the connection ended badly
    /// (or has unread bytes, which reset it), then `Released` once the FIN is acknowledged
    /// or the connection is over — the connection orphaned in the stack at that moment, to
    /// finish closing (TIME-WAIT, the peer's FIN) on its own.
    fn linger_item(&mut self, r: &mut Round<'_>, i: usize, t: TcpSock) -> Option<TcpItem> {
        let socket = i as u16;
        let st = r.iface.tcp_status(t.h).ok();
        let failed = st.and_then(|s| {
            if s.readable > 0 {
                Some(TcpFailure::Reset)
            } else {
                s.error.map(failure)
            }
        });
        if let Some(f) = failed.filter(|_| !t.said_failed) {
            return Some(TcpItem::Event(socket, TcpEvent::Failed(f)));
        }
        let over = st.is_none_or(|s| {
            failed.is_some() || matches!(s.state, State::FinWait2 | State::TimeWait | State::Closed)
        });
        if !over {
            return None;
        }
        // Unread bytes make this close a reset, as they make any close one.
        release(r, AppSocket::Tcp(t), false, self.app, socket);
        self.slots[i] = Some(AppSocket::Releasing);
        Some(TcpItem::Event(socket, TcpEvent::Released))
    }

    /// Event `ev` of socket `socket` was placed for the application (an ICMP error of a UDP
    /// socket is taken off `iface` now).
    pub(crate) fn delivered(&mut self, iface: &mut Interface, socket: u16, ev: TcpEvent) {
        if socket == APP_EVENTS {
            self.opened.pop_front();
            return;
        }
        let i = usize::from(socket);
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        match (slot.as_mut(), ev) {
            (Some(AppSocket::Tcp(t)), TcpEvent::Connected) => t.said_connected = true,
            (Some(AppSocket::Tcp(t)), TcpEvent::Eof) => t.said_eof = true,
            (Some(AppSocket::Tcp(t) | AppSocket::Lingering(t)), TcpEvent::Failed(_)) => {
                t.said_failed = true
            }
            (
                Some(AppSocket::Listener {
                    owed, unclaimed, ..
                }),
                TcpEvent::Accepted { socket: new, .. },
            ) => {
                *owed = None;
                *unclaimed = unclaimed.saturating_add(1);
                if let Some(Some(AppSocket::Tcp(t))) = self.slots.get_mut(usize::from(new)) {
                    t.announced = true;
                }
            }
            (Some(AppSocket::Udp(h)), TcpEvent::Unreachable { .. }) => {
                let _ = iface.udp_take_error(*h);
            }
            (Some(AppSocket::Releasing), TcpEvent::Released) => {
                *slot = None;
                self.tcp -= 1;
                self.free.push_back(socket);
            }
            _ => {}
        }
    }

    /// Carries out the operation `d` names — a connect, or a [`TcpOp`] on socket `d.aux` —
    /// counting it refused if it names none.
    pub(crate) fn request(&mut self, r: &mut Round<'_>, d: &shmnet_chan::Desc) {
        if let Some((ticket, to)) = crate::windows::connect_of(d) {
            self.connect(r, ticket, to);
            return;
        }
        match TcpOp::of_desc(d) {
            Some(op) if d.aux < u32::from(APP_EVENTS) => self.apply(r, d.aux as u16, op),
            _ => self.refusals.bad_ops += 1,
        }
    }

    /// Opens a connection to `to` for the connect named `ticket`; the answer is announced
    /// on [`APP_EVENTS`].
    fn connect(&mut self, r: &mut Round<'_>, ticket: u32, to: std::net::SocketAddrV4) {
        if self.opened.len() >= MAX_OPENING {
            self.refusals.bad_ops += 1;
            return;
        }
        let opened = r
            .iface
            .tcp_connect(r.pool, to, r.now, r.tx)
            .ok()
            .and_then(|h| {
                let port = r.iface.tcp_info(h).map_or(0, |i| i.local.port());
                match self.insert_tcp(h, false) {
                    Some(n) => Some((n, port)),
                    None => {
                        let _ = r.iface.tcp_abort(r.pool, h, r.now, r.tx);
                        None
                    }
                }
            });
        self.opened.push_back((ticket, opened));
    }

    /// Carries out operation `op` on socket `socket`.
    pub(crate) fn apply(&mut self, r: &mut Round<'_>, socket: u16, op: TcpOp) {
        let i = usize::from(socket);
        let Some(s) = self.get(i) else {
            self.refusals.bad_ops += 1;
            return;
        };
        let ok = match (s, op) {
            (AppSocket::Tcp(t), TcpOp::Shutdown) => {
                r.iface.tcp_shutdown(r.pool, t.h, r.now, r.tx).is_ok()
            }
            (AppSocket::Tcp(t), TcpOp::NoDelayOn | TcpOp::NoDelayOff) => {
                r.iface.tcp_set_nodelay(t.h, op == TcpOp::NoDelayOn).is_ok()
            }
            (AppSocket::Tcp(t), TcpOp::KeepaliveOn | TcpOp::KeepaliveOff) => r
                .iface
                .tcp_set_keepalive(r.pool, t.h, op == TcpOp::KeepaliveOn, r.now)
                .is_ok(),
            (AppSocket::Tcp(t), TcpOp::SendBuffer(n) | TcpOp::RecvBuffer(n)) => r
                .iface
                .tcp_set_buffer(r.pool, t.h, (buffer_of(op), n), r.now, r.tx)
                .is_ok(),
            (AppSocket::Listener { l, .. }, TcpOp::SendBuffer(n) | TcpOp::RecvBuffer(n)) => {
                r.iface.tcp_set_listener_buffer(l, buffer_of(op), n).is_ok()
            }
            (AppSocket::Listener { unclaimed, .. }, TcpOp::Claimed) => {
                if let Some(Some(AppSocket::Listener { unclaimed: u, .. })) = self.slots.get_mut(i)
                {
                    *u = u.saturating_sub(1);
                }
                unclaimed > 0
            }
            (AppSocket::Tcp(_) | AppSocket::Listener { .. }, TcpOp::Resume) => {
                if let Some(sock) = stack_sock(s) {
                    r.forks.claim(sock, self.app, socket);
                }
                // Awake at once; the other holders fall silent once the round is over.
                match self.slots.get_mut(i) {
                    Some(Some(AppSocket::Tcp(t))) => t.dormant = false,
                    Some(Some(AppSocket::Listener { dormant, .. })) => *dormant = false,
                    _ => {}
                }
                true
            }
            (AppSocket::Tcp(t), TcpOp::CloseLinger) if !r.forks.is_shared(StackSock::Conn(t.h)) => {
                let _ = r.iface.tcp_shutdown(r.pool, t.h, r.now, r.tx);
                self.slots[i] = Some(AppSocket::Lingering(t));
                true
            }
            (
                AppSocket::Tcp(_) | AppSocket::Listener { .. },
                TcpOp::Close | TcpOp::Abort | TcpOp::CloseLinger,
            ) => {
                // A socket a fork shared lives on for its other holders: this close, with
                // or without a linger, only lets go of this application's reference, as
                // closing one of several descriptors of a socket does in the kernel.
                release(r, s, op == TcpOp::Abort, self.app, socket);
                self.slots[i] = Some(AppSocket::Releasing);
                if let AppSocket::Listener { owed: Some(n), .. } = s {
                    // Accepted but never announced: the application does not know its
                    // number, so it is reset and its number free at once.
                    if let Some(AppSocket::Tcp(t)) = self.get(usize::from(n)) {
                        release(r, AppSocket::Tcp(t), true, self.app, n);
                    }
                    self.slots[usize::from(n)] = None;
                    self.tcp -= 1;
                    self.free.push_back(n);
                }
                true
            }
            _ => false,
        };
        if !ok {
            self.refusals.bad_ops += 1;
        }
    }

    /// The application has gone: every TCP socket closes (in order, as the kernel closes
    /// the sockets of a process that exits) — those numbered in `abort` are reset instead —
    /// and every UDP socket is returned.
    pub(crate) fn close_all(&mut self, r: &mut Round<'_>, abort: &[u32]) -> Vec<SocketHandle> {
        let mut udp = Vec::new();
        for (n, s) in self.slots.drain(..).enumerate() {
            let aborted = abort.contains(&(n as u32));
            match s {
                None => {}
                Some(AppSocket::Udp(h)) => udp.push(h),
                Some(AppSocket::Releasing) => {}
                Some(AppSocket::Lingering(t)) => {
                    release(r, AppSocket::Tcp(t), aborted, self.app, n as u16)
                }
                Some(other) => release(r, other, aborted, self.app, n as u16),
            }
        }
        self.tcp = 0;
        self.free.clear();
        udp
    }
}

/// The stack socket an entry refers to (none for UDP and for a socket being released).
fn stack_sock(s: AppSocket) -> Option<StackSock> {
    match s {
        AppSocket::Listener { l, .. } => Some(StackSock::Listen(l)),
        AppSocket::Tcp(t) | AppSocket::Lingering(t) => Some(StackSock::Conn(t.h)),
        AppSocket::Udp(_) | AppSocket::Releasing => None,
    }
}

/// Entry `n` of application `app` lets go of TCP socket `s`. If a fork shares it and
/// another holder remains, that is all; otherwise the stack lets go too: a listener stops
/// (its unaccepted connections are reset), a connection closes in order or is reset.
fn release(r: &mut Round<'_>, s: AppSocket, abort: bool, app: u64, n: u16) {
    if let Some(sock) = stack_sock(s)
        && !r.forks.let_go(sock, app, n)
    {
        return;
    }
    match s {
        AppSocket::Listener { l, .. } => {
            let _ = r.iface.tcp_unlisten(r.pool, l, r.now, r.tx);
        }
        AppSocket::Tcp(t) if abort => {
            let _ = r.iface.tcp_abort(r.pool, t.h, r.now, r.tx);
        }
        AppSocket::Tcp(t) => {
            let _ = r.iface.tcp_close(r.pool, t.h, r.now, r.tx);
        }
        AppSocket::Udp(_) | AppSocket::Releasing | AppSocket::Lingering(_) => {}
    }
}

/// The stack's buffer a buffer-size operation sets.
fn buffer_of(op: TcpOp) -> Buffer {
    match op {
        TcpOp::SendBuffer(_) => Buffer::Send,
        _ => Buffer::Recv,
    }
}

/// The failure an event reports for the stack's `reason`.
fn failure(reason: CloseReason) -> TcpFailure {
    match reason {
        CloseReason::Reset | CloseReason::Aborted => TcpFailure::Reset,
        CloseReason::Refused => TcpFailure::Refused,
        CloseReason::TimedOut => TcpFailure::TimedOut,
        CloseReason::HostUnreachable => TcpFailure::HostUnreachable,
        CloseReason::NetUnreachable => TcpFailure::NetUnreachable,
    }
}

/// Queues up to all of `data` on connection `h`; returns how many bytes the send buffer
/// took (0 when it is full), or `None` if the connection cannot send any more.
pub(crate) fn tcp_send(r: &mut Round<'_>, h: TcpHandle, parts: &[&[u8]]) -> Option<usize> {
    let sent = if r.last_call {
        r.iface
            .tcp_send_gather_beyond_limit(r.pool, h, parts, r.now, r.tx)
    } else {
        r.iface.tcp_send_gather(r.pool, h, parts, r.now, r.tx)
    };
    match sent {
        Ok(n) => Some(n),
        Err(shmnet_stack::tcp::TcpError::WouldBlock) => Some(0),
        Err(_) => None,
    }
}

/// Requests on TCP sockets that could not be carried out whole yet — a send the stack's
/// send buffer has no room for, a handle whose line missed — and the requests of the same
/// socket behind them, in order. Nothing else of the application waits: its other sockets
/// go on. Bounded by what the application can have outstanding (its send buffers or send
/// region), and by [`MAX_PARKED`] besides.
#[derive(Default)]
pub(crate) struct Backlog {
    q: std::collections::VecDeque<Parked>,
}

/// A parked request and how many of its bytes were sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parked {
    pub(crate) d: shmnet_chan::Desc,
    pub(crate) done: u32,
}

/// What became of a parked request when it was tried again.
pub(crate) enum Progress {
    /// Finished (sent, or refused as its status says): it leaves the backlog.
    Done(crate::windows::SendStatus),
    /// Not finished: `done` bytes of it are sent now.
    Blocked(u32),
}

/// Parked requests at most; beyond, a request is refused (an application can have no more
/// outstanding than its rings and send memory hold).
pub(crate) const MAX_PARKED: usize = 4096;

impl Backlog {
    /// Whether socket `socket` has a request parked (a new one must queue behind it).
    pub(crate) fn holds(&self, socket: u32) -> bool {
        !self.q.is_empty() && self.q.iter().any(|p| p.d.aux == socket)
    }

    /// Parks `d` with `done` bytes sent; `false` if the backlog is full.
    pub(crate) fn park(&mut self, d: shmnet_chan::Desc, done: u32) -> bool {
        if self.q.len() >= MAX_PARKED {
            return false;
        }
        self.q.push_back(Parked { d, done });
        true
    }

    /// Takes every parked request of `socket` out (an `Abort` drops what was not sent):
    /// `each` gets them, to give their memory back.
    /// Nothing is dropped if the socket's `Close` (or an earlier `Abort`) is parked: the
    /// application let go of it before, so this `Abort` names a socket it no longer has,
    /// and waits its turn to be refused.
    pub(crate) fn drop_socket(&mut self, socket: u32, mut each: impl FnMut(&shmnet_chan::Desc)) {
        let closed = self.q.iter().any(|p| {
            p.d.aux == socket
                && p.d.flags & crate::windows::REQ_OP != 0
                && matches!(
                    TcpOp::of_desc(&p.d),
                    Some(TcpOp::Close | TcpOp::Abort | TcpOp::CloseLinger)
                )
        });
        if closed {
            return;
        }
        self.q.retain(|p| {
            let mine = p.d.aux == socket && crate::windows::connect_of(&p.d).is_none();
            if mine {
                each(&p.d);
            }
            !mine
        });
    }

    /// The sockets with requests parked, into `out`.
    pub(crate) fn sockets(&self, out: &mut Vec<u32>) {
        out.extend(self.q.iter().map(|p| p.d.aux));
    }

    /// How many requests are parked.
    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether anything is parked.
    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Tries the parked requests again in order, each socket's stopping at its first that
    /// stays blocked; `finished` is called with each that finishes and may refuse to take
    /// it (no room for its completion): it then stays. Returns how many finished.
    pub(crate) fn retry(
        &mut self,
        mut attempt: impl FnMut(&Parked) -> Progress,
        mut finished: impl FnMut(&shmnet_chan::Desc, crate::windows::SendStatus) -> bool,
    ) -> usize {
        let mut blocked: [u32; 16] = [u32::MAX; 16];
        let mut nb = 0;
        let mut n = 0;
        let mut i = 0;
        while i < self.q.len() {
            let p = self.q[i];
            if blocked[..nb].contains(&p.d.aux) {
                i += 1;
                continue;
            }
            match attempt(&p) {
                Progress::Done(status) if finished(&p.d, status) => {
                    self.q.remove(i);
                    n += 1;
                    continue;
                }
                Progress::Done(_) => self.q[i].done = p.d.len,
                Progress::Blocked(done) => self.q[i].done = done,
            }
            if nb == blocked.len() {
                // Many sockets blocked at once: the rest wait for the next round.
                break;
            }
            blocked[nb] = p.d.aux;
            nb += 1;
            i += 1;
        }
        n
    }
}

/// Sends the bytes of `parts` past the first `done` on connection `h`: `Done` when all are
/// queued, `Blocked` with the new count when the send buffer filled first, `None` if the
/// connection can send no more (the request is dropped).
pub(crate) fn send_parts(
    r: &mut Round<'_>,
    h: TcpHandle,
    parts: &[&[u8]],
    done: u32,
) -> Option<Progress> {
    // The parts not sent yet, the first cut where the last try stopped: one send for them
    // all (one pass of the connection's output, not one per part).
    let mut rest: arrayvec::ArrayVec<&[u8], MAX_GATHER> = arrayvec::ArrayVec::new();
    let mut skip = done as usize;
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let p = &part[skip..];
        skip = 0;
        if rest.try_push(p).is_err() {
            break; // a longer gather list than any transport builds: the rest goes next time
        }
    }
    let n = tcp_send(r, h, &rest)?;
    let whole: usize = parts.iter().map(|p| p.len()).sum();
    if done as usize + n < whole {
        return Some(Progress::Blocked(done + n as u32));
    }
    Some(Progress::Done(crate::windows::SendStatus::Sent))
}

/// Most parts one gathered send takes at once (the transports build at most 64).
const MAX_GATHER: usize = 64;
