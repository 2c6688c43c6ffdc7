//! `fork`: the parent's TCP sockets shared with its child (docs/preload.md, "fork").
//!
//! A client is one process's attachment: its rings have one producer and one consumer, so
//! a forked child cannot use its parent's. The parent asks the server for a ticket just
//! before it forks ([`Client::prepare_fork`]); the child, which inherits a copy of the
//! parent's memory and with it the ticket, lets go of its copy of the parent's client
//! without a word to the server ([`Client::abandon_after_fork`]), attaches as an
//! application of its own and adopts the ticket's sockets ([`Client::adopt`]). Both then
//! hold every socket, as both hold inherited descriptors in the kernel; a connection closes
//! when its last holder lets go.
//!
//! After the fork the server delivers nothing for a shared socket until a holder uses it:
//! the first read, accept or poll of a socket in either process claims it (`Resume`), and
//! its bytes, events and connections go to that holder from then on. (Two processes that
//! both read one socket therefore take turns by who asked last; a kernel hands each read
//! whatever is there. Servers that fork per connection, or fork workers that share one
//! listener, read each socket in one process.)

use super::{Client, ClientError, Inner};
use crate::control::{AdoptedSocket, Request, Response};
use crate::windows::TcpOp;
use rustix::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The secret a parent's [`Client::prepare_fork`] got, which its child presents to
/// [`Client::adopt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkTicket(pub u64);

/// A control connection made and not yet attached over ([`Client::reserve`]).
#[derive(Debug)]
pub struct Reserved(pub(super) rustix::fd::OwnedFd);

impl Reserved {
    /// The connection's descriptor, to carry across an `exec`: the sockets library clears
    /// its close-on-exec flag, names it to the new program, and that program takes it back
    /// with [`Reserved::from_fd`]. Closing it unattached lets the ticket it holds go.
    pub fn into_fd(self) -> rustix::fd::OwnedFd {
        self.0
    }

    /// A connection [`Reserved::into_fd`] gave, in the program that was `exec`ed.
    pub fn from_fd(fd: rustix::fd::OwnedFd) -> Self {
        Self(fd)
    }
}

/// A socket of the parent's, adopted by the child.
#[derive(Debug)]
pub enum Adopted {
    /// A listener.
    Listener(super::TcpListener),
    /// A connection.
    Stream(super::TcpStream),
}

/// Bytes taken off connections and not read, by the socket's number: what
/// [`Client::prepare_fork`] gives back to the server, and what it could not.
pub type Unread = Vec<(u16, Vec<u8>)>;

/// How long [`Client::prepare_fork`] waits for the server to take what the parent queued
/// on its request ring (so that what it asked before the fork — a `Resume`, a close — is
/// done before the fork is).
const DRAIN_PATIENCE: Duration = Duration::from_secs(1);

impl Client {
    /// [`Client::reserve`] for the child of the fork `ticket` is for: the server keeps the
    /// ticket as long as this connection is open (no expiry) and lets it go as soon as it
    /// closes unadopted — when the child exits, or `exec`s (the descriptor is close-on-exec)
    /// before a call on a socket. An `exec` that hands sockets to the program it starts
    /// takes a ticket of its own and carries this connection across ([`Reserved::into_fd`]).
    pub fn reserve_for_child(
        path: impl AsRef<std::path::Path>,
        ticket: ForkTicket,
    ) -> Result<Reserved, ClientError> {
        let r = Self::reserve(path)?;
        crate::control::send(&r.0, &Request::ForChild { ticket: ticket.0 })?;
        Ok(r)
    }

    /// Call just before `fork`: asks the server for a ticket sharing the TCP sockets
    /// numbered `share` (the listeners and connections the caller holds:
    /// [`super::TcpListener::number`], [`super::TcpStream::number`]) with the child to come,
    /// then moves everything already delivered off the receive ring into the sockets'
    /// queues (nothing more comes for them until a holder uses them) and calls
    /// `take_unread`, in which the caller reads what is there without waiting and returns
    /// it, with whatever else it holds unread, by socket number. Those bytes go back to the
    /// server, in front of what each connection has still to deliver, so that whichever
    /// holder — parent or child — reads next gets them, once (as from a kernel socket's
    /// queue). Returns the ticket and the bytes the server could not take back (too few
    /// buffers), which the caller keeps.
    ///
    /// Every TCP socket is dormant from then on: its next read, accept or poll claims it
    /// back ([`TcpOp::Resume`]). (A read inside `take_unread` claims nothing.)
    pub fn prepare_fork(
        &self,
        share: &[u16],
        take_unread: impl FnOnce() -> Unread,
    ) -> Result<(ForkTicket, Unread), ClientError> {
        let mut i = self.inner.borrow_mut();
        i.drain_requests(Instant::now() + DRAIN_PATIENCE)?;
        let sockets = share.iter().map(|&n| u32::from(n)).collect();
        let ticket = match i.call(Request::Fork { sockets })? {
            Response::Forked { ticket } => ForkTicket(ticket),
            Response::Error(e) => return Err(ClientError::Refused(e)),
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected Forked, got {other:?}"
                )));
            }
        };
        i.gather()?;
        // Reads now take what is here and claim nothing, not even a socket still dormant
        // from an earlier fork: what comes after the ticket is for whoever uses it next.
        i.tcp.claims_held = true;
        drop(i);
        let unread: Unread = take_unread()
            .into_iter()
            .filter(|(_, b)| !b.is_empty())
            .collect();
        let mut i = self.inner.borrow_mut();
        i.tcp.claims_held = false;
        i.tcp.dormant.extend(share.iter().copied());
        let kept = if unread.is_empty() {
            Vec::new()
        } else {
            i.give_back_unread(unread)?
        };
        Ok((ticket, kept))
    }

    /// Whether this client's control socket is still open in this process, as a socket: a
    /// child made by `vfork` shares its parent's memory, client included, but not its
    /// descriptor table, and may have closed it (Python's `subprocess` closes every
    /// descriptor it does not pass). Such a child may use the client for
    /// [`Client::prepare_fork`] (its parent waits, and the sockets library holds its lock)
    /// only while this holds.
    pub fn control_open(&self) -> bool {
        let i = self.inner.borrow();
        rustix::fs::fstat(&i.ctl).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket
        })
    }

    /// In a forked child, before anything else touches this client (its parent's): lets go
    /// of it without telling the server anything and without touching its rings, which
    /// stay the parent's. Its control socket is closed in this process (the server notices
    /// the parent's departure when the parent goes), its windows unmapped, and every call
    /// on it or its sockets fails with [`ClientError::ServerGone`] from now on, so dropping
    /// them sends nothing.
    pub fn abandon_after_fork(&self) {
        let mut i = self.inner.borrow_mut();
        i.gone = true;
        i.shm = None;
        i.data_sock = None;
        // The control socket is replaced under its number by a descriptor that is nobody's
        // (an eventfd): this process's reference to the socket goes, the OwnedFd stays valid.
        if let Ok(placeholder) = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC) {
            let mut target = std::mem::ManuallyDrop::new(
                // SAFETY: the descriptor is the control socket's own number, owned by `i.ctl`,
                // which keeps owning it (now the eventfd's); `ManuallyDrop` keeps this second
                // owner from closing it.
                unsafe {
                    <rustix::fd::OwnedFd as rustix::fd::FromRawFd>::from_raw_fd(i.ctl.as_raw_fd())
                },
            );
            let _ = rustix::io::dup3(&placeholder, &mut target, rustix::io::DupFlags::CLOEXEC);
        }
    }

    /// In a forked child, attached with a client of its own: adopts the sockets of the
    /// parent's `ticket`. Returns each with its number in the parent. They are dormant
    /// until first used, as after [`Client::prepare_fork`].
    pub fn adopt(&self, ticket: ForkTicket) -> Result<Vec<(u16, Adopted)>, ClientError> {
        let mut i = self.inner.borrow_mut();
        let sockets = match i.call(Request::Adopt { ticket: ticket.0 })? {
            Response::Adopted { sockets } => sockets,
            Response::Error(e) => return Err(ClientError::Refused(e)),
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected Adopted, got {other:?}"
                )));
            }
        };
        let mut out = Vec::with_capacity(sockets.len());
        for a in sockets {
            let AdoptedSocket {
                parent,
                socket,
                listener,
                port,
                peer,
                connecting,
            } = a;
            let (Ok(parent), Ok(id)) = (u16::try_from(parent), u16::try_from(socket)) else {
                return Err(ClientError::Protocol(format!(
                    "adopted socket numbers {parent} and {socket}"
                )));
            };
            i.await_released(id)?;
            i.tcp.ids.insert(id);
            i.tcp.dormant.insert(id);
            if connecting {
                i.tcp.connecting.insert(id);
            }
            let s = if listener {
                Adopted::Listener(super::TcpListener::adopted(&self.inner, id, port))
            } else {
                Adopted::Stream(super::TcpStream::adopted(&self.inner, id, port, peer))
            };
            out.push((parent, s));
        }
        Ok(out)
    }
}

impl Inner {
    /// A dormant TCP socket is about to be read, accepted from or polled: claim it.
    pub(super) fn wake_dormant(&mut self, id: u16) -> Result<(), ClientError> {
        if !self.tcp.dormant.is_empty() && !self.tcp.claims_held && self.tcp.dormant.remove(&id) {
            self.tcp_op(id, TcpOp::Resume)?;
        }
        Ok(())
    }

    /// Listener `id` is about to be waited on (accepted from, polled). If a fork shared it,
    /// it asks the server for a connection, unless it asked already or has one here: the
    /// server hands each connection to the first of its holders that asked.
    pub(super) fn listener_wants(&mut self, id: u16) -> Result<(), ClientError> {
        if self.tcp.claims_held || (self.tcp.pull.is_empty() && self.tcp.dormant.is_empty()) {
            return Ok(());
        }
        if self.tcp.dormant.remove(&id) {
            self.tcp.pull.insert(id);
        }
        if !self.tcp.pull.contains(&id) || self.tcp.asked.contains(&id) {
            return Ok(());
        }
        if self.tcp_has(id, |ev| {
            matches!(ev, Some(crate::windows::TcpEvent::Accepted { .. }))
        }) {
            return Ok(());
        }
        self.tcp_op(id, TcpOp::Resume)?;
        self.tcp.asked.insert(id);
        Ok(())
    }

    /// `Request::Unread`: `parts`' bytes, in a memfd, back to the server; returns the parts
    /// it refused.
    fn give_back_unread(&mut self, parts: Unread) -> Result<Unread, ClientError> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let io =
            |e: rustix::io::Errno| ClientError::Control(crate::control::ControlError::Io(e.into()));
        let fd = rustix::fs::memfd_create(
            "shmnet-unread",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(io)?;
        for (_, bytes) in &parts {
            let mut done = 0;
            while done < bytes.len() {
                done += rustix::io::write(&fd, &bytes[done..]).map_err(io)?;
            }
        }
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE)
            .map_err(io)?;
        let req = Request::Unread {
            parts: parts
                .iter()
                .map(|(n, b)| (u32::from(*n), b.len() as u32))
                .collect(),
        };
        match self.call_with_fd(&req, rustix::fd::AsFd::as_fd(&fd))? {
            Response::Unread { refused } => Ok(parts
                .into_iter()
                .filter(|(n, _)| refused.contains(&u32::from(*n)))
                .collect()),
            Response::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Protocol(format!(
                "expected Unread, got {other:?}"
            ))),
        }
    }

    /// Waits until the server has taken everything on the request ring, or `deadline`: a
    /// control request sent then comes after them (the two travel apart).
    pub(super) fn drain_requests(&mut self, deadline: Instant) -> Result<(), ClientError> {
        loop {
            let Some(shm) = self.shm.as_mut() else {
                return Ok(()); // ipc: requests travel in order on the data socket
            };
            if shm.req.free_slots() == shm.req.capacity() || Instant::now() >= deadline {
                return Ok(());
            }
            self.check_alive()?;
            std::thread::sleep(Duration::from_micros(50));
            self.reap();
        }
    }
}
