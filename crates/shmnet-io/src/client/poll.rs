//! Readiness across many sockets in one wait: [`Client::poll`], the library's `poll(2)`.
//!
//! A socket is **readable** when a read (or an accept) would not wait: a datagram, stream
//! bytes, the end of the stream or a failure, or a connection to accept is there. It is
//! **writable** when a write of up to one datagram's worth (a TCP write's chunk) would not
//! wait for send memory: the send buffers of the app window (`--isolation shared`) or the
//! send region (`regions`) have room for it, or the data socket (`ipc`) takes more. A TCP stream that failed or that this side closed is readable and writable both, as
//! `poll(2)` reports an error: the read or write then says what happened.
//!
//! What `poll` looks at is the library's own state, after it has moved everything the
//! server delivered to its sockets' queues; it sleeps only when nothing asked for is ready,
//! on the same wake-ups the blocking calls use (the receive ring's, the send pool's, the
//! control socket for the server's death), so a busy application pays no system call.

use super::{Client, ClientError, Inner, Mode, UdpSocket};
use super::{TcpListener, TcpStream};
use crate::windows::{self, TcpEvent};
use rustix::event::{PollFd, PollFlags, Timespec};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// What to wait for on a socket, or what was found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// A read or an accept would not wait.
    pub readable: bool,
    /// A write would not wait for send memory.
    pub writable: bool,
}

impl Interest {
    /// Readable.
    pub const READABLE: Interest = Interest {
        readable: true,
        writable: false,
    };
    /// Writable.
    pub const WRITABLE: Interest = Interest {
        readable: false,
        writable: true,
    };
    /// Either.
    pub const BOTH: Interest = Interest {
        readable: true,
        writable: true,
    };

    fn any(self) -> bool {
        self.readable || self.writable
    }

    fn and(self, other: Interest) -> Interest {
        Interest {
            readable: self.readable && other.readable,
            writable: self.writable && other.writable,
        }
    }
}

/// A socket [`Client::poll`] looks at.
#[derive(Clone, Copy, Debug)]
pub enum PollSocket<'a> {
    /// A UDP socket.
    Udp(&'a UdpSocket),
    /// A TCP listener (readable: a connection to accept; never writable).
    Listener(&'a TcpListener),
    /// A TCP connection.
    Stream(&'a TcpStream),
}

/// One socket's entry in [`Client::poll`]: what to wait for, and what was found.
#[derive(Debug)]
pub struct PollItem<'a> {
    socket: PollSocket<'a>,
    interest: Interest,
    ready: Interest,
}

impl<'a> PollItem<'a> {
    /// Waits for `interest` on `socket`.
    pub fn new(socket: PollSocket<'a>, interest: Interest) -> Self {
        Self {
            socket,
            interest,
            ready: Interest::default(),
        }
    }

    /// What the last [`Client::poll`] found ready of what was asked.
    pub fn ready(&self) -> Interest {
        self.ready
    }

    /// The socket it looks at.
    pub fn socket(&self) -> PollSocket<'a> {
        self.socket
    }
}

impl Client {
    /// Waits until at least one of `items` is ready for what it asks, or `timeout` passes
    /// (`None`: without limit; zero: look and return). Sets each item's
    /// [`PollItem::ready`] and returns how many are ready (0: timed out).
    ///
    /// Every socket must belong to this client (`Refused` otherwise). Readiness is a hint,
    /// as for `poll(2)`: another call on the socket may take what was there first. With no
    /// items it only waits out `timeout` (or the server's death).
    pub fn poll(
        &self,
        items: &mut [PollItem<'_>],
        timeout: Option<Duration>,
    ) -> Result<usize, ClientError> {
        if items.iter().any(|it| !Rc::ptr_eq(it.inner(), &self.inner)) {
            return Err(ClientError::Refused(
                "poll: a socket of another client (each Client polls its own)".into(),
            ));
        }
        // A zero timeout only looks: no clock is read.
        let once = timeout == Some(Duration::ZERO);
        let deadline = timeout.filter(|_| !once).map(|t| Instant::now() + t);
        let mut i = self.inner.borrow_mut();
        loop {
            i.gather()?;
            let mut ready = 0;
            for it in items.iter_mut() {
                it.ready = i.readiness(&it.socket).and(it.interest);
                ready += usize::from(it.ready.any());
            }
            if ready > 0 || once {
                return Ok(ready);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(0);
            }
            let writers = items.iter().any(|it| it.interest.writable);
            i.sleep_any(deadline, writers)?;
        }
    }
}

/// What a thread waits on when it waits for a [`Client`] outside of it — among fds of its
/// own, as a sockets library's `poll` does, with the client free for other threads
/// meanwhile: from [`Client::prepare_sleep`]. Every fd is waited on for `POLLIN`.
#[derive(Clone, Copy, Debug)]
pub struct WakeFds {
    fds: [RawFd; 2],
    n: usize,
    nap: bool,
}

impl WakeFds {
    /// The fds to wait on for `POLLIN` (the control socket, which also reports the server's
    /// death, and the receive ring's wake-up or the data socket).
    pub fn fds(&self) -> &[RawFd] {
        &self.fds[..self.n]
    }

    /// Whether deliveries raise none of them (a ring in polling mode): the wait must then be
    /// short, and look again.
    pub fn must_nap(&self) -> bool {
        self.nap
    }
}

impl Client {
    /// Moves everything the server has delivered to its sockets' queues, without waiting.
    /// Returns how many items this client has moved in all, so a caller can tell whether
    /// this look (or any call since its last look) found something.
    pub fn gather(&self) -> Result<u64, ClientError> {
        let mut i = self.inner.borrow_mut();
        i.gather()?;
        Ok(i.moved)
    }

    /// How many items this client has moved off its receive ring (or data socket) so far,
    /// without looking for more: a caller that waits outside the client compares it before
    /// and after a call to tell whether that call moved something.
    pub fn moved(&self) -> u64 {
        self.inner.borrow().moved
    }

    /// The first half of a wait outside the client: announces that a thread is about to
    /// sleep, so the server raises the receive ring's wake-up with its next delivery.
    /// `None` when something arrived meanwhile ([`Client::gather`] again instead of
    /// sleeping). After `Some`, block on [`WakeFds::fds`] (and any fds of your own) without
    /// using the client, then call [`Client::finish_sleep`].
    ///
    /// Several threads may sleep at once; `finish_sleep` consumes the wake-up, so the
    /// thread that takes it must let the others know when what it gathered is theirs.
    pub fn prepare_sleep(&self) -> Result<Option<WakeFds>, ClientError> {
        let mut i = self.inner.borrow_mut();
        if i.gone {
            return Err(ClientError::ServerGone);
        }
        i.flush_returns()?;
        let ctl = i.ctl.as_raw_fd();
        let Some(shm) = i.shm.as_mut() else {
            let data = i.data_sock.as_ref().map_or(ctl, |s| s.as_raw_fd());
            return Ok(Some(WakeFds {
                fds: [ctl, data],
                n: 2,
                nap: false,
            }));
        };
        let Some(wake) = shm.rx.wake_fd().map(|fd| fd.as_raw_fd()) else {
            return Ok(Some(WakeFds {
                fds: [ctl, ctl],
                n: 1,
                nap: true,
            }));
        };
        if !shm.rx.prepare_wait() {
            return Ok(None);
        }
        Ok(Some(WakeFds {
            fds: [ctl, wake],
            n: 2,
            nap: false,
        }))
    }

    /// The second half of a wait outside the client: withdraws the announcement, consumes
    /// the wake-up, and notes the server's death if the control socket reported it (the
    /// next call then fails with [`ClientError::ServerGone`]).
    pub fn finish_sleep(&self) {
        let mut i = self.inner.borrow_mut();
        if let Some(shm) = i.shm.as_mut() {
            shm.rx.finish_wait();
        }
        let mut fds = [PollFd::new(&i.ctl, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let hup = rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0) > 0
            && fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR);
        if hup {
            i.gone = true;
        }
    }
}

impl PollItem<'_> {
    fn inner(&self) -> &Rc<std::cell::RefCell<Inner>> {
        match self.socket {
            PollSocket::Udp(s) => &s.inner,
            PollSocket::Listener(l) => l.inner(),
            PollSocket::Stream(s) => s.inner(),
        }
    }
}

impl Inner {
    /// Moves everything the server has delivered to its sockets' queues (and, under
    /// `regions`, handles send completions, which free send memory), without waiting.
    pub(super) fn gather(&mut self) -> Result<(), ClientError> {
        if self.gone {
            return Err(ClientError::ServerGone);
        }
        if self.shm.is_some() {
            self.reap();
            return Ok(());
        }
        while let Some(n) = self.read_packet(true, Some(Instant::now()))? {
            self.stash_ipc(n);
        }
        Ok(())
    }

    /// What `socket` is ready for now.
    fn readiness(&mut self, socket: &PollSocket<'_>) -> Interest {
        // A socket a fork shared is claimed by polling it (a listener asks for a connection).
        match *socket {
            PollSocket::Udp(_) => {}
            PollSocket::Listener(l) => {
                let _ = self.listener_wants(l.id());
            }
            PollSocket::Stream(s) if !self.tcp.dormant.is_empty() => {
                let _ = self.wake_dormant(s.poll_state().0);
            }
            PollSocket::Stream(_) => {}
        }
        match *socket {
            PollSocket::Udp(s) => Interest {
                // A datagram, or an ICMP error to take ([`UdpSocket::take_error`]).
                readable: self.pending_has(s.id, |_| true)
                    || self.ipc_pending.get(&s.id).is_some_and(|q| !q.is_empty())
                    || self.tcp.udp_errors.contains_key(&s.id),
                writable: self.send_room(),
            },
            PollSocket::Listener(l) => Interest {
                readable: self.tcp_has(l.id(), |ev| matches!(ev, Some(TcpEvent::Accepted { .. }))),
                writable: false,
            },
            PollSocket::Stream(s) => {
                let (id, eof, closed) = s.poll_state();
                // Bytes, the end, or a failure: a read says which without waiting.
                let broken = closed || self.tcp.failed.contains_key(&id);
                let readable = eof
                    || broken
                    || self.tcp.has_leftover(id)
                    || self.tcp_has(id, |ev| {
                        matches!(ev, None | Some(TcpEvent::Eof | TcpEvent::Failed(_)))
                    });
                // A connection whose handshake is still going takes no writes yet.
                let connecting = self.tcp.connecting.contains(&id)
                    && !self.tcp_has(id, |ev| matches!(ev, Some(TcpEvent::Connected)));
                Interest {
                    readable,
                    writable: broken || (!connecting && self.send_room()),
                }
            }
        }
    }

    /// Whether the queue of socket `id` holds a delivery for which `f` holds.
    fn pending_has(&self, id: u16, f: impl Fn(&shmnet_chan::Desc) -> bool) -> bool {
        self.pending.any(id, f)
    }

    /// Whether TCP socket `id` has an item queued for which `f` holds (`None`: stream
    /// bytes; `Some`: an event).
    pub(super) fn tcp_has(&self, id: u16, f: impl Fn(Option<TcpEvent>) -> bool) -> bool {
        self.pending_has(id, |d| f(windows::event_of(d).map(|(_, ev)| ev)))
            || self.tcp.ipc_items.get(&id).is_some_and(|q: &VecDeque<_>| {
                q.iter().any(|item| match item {
                    super::tcp::IpcItem::Data(_) => f(None),
                    super::tcp::IpcItem::Event(d) => windows::event_of(d)
                        .map(|(_, ev)| ev)
                        .is_some_and(|ev| f(Some(ev))),
                })
            })
    }

    /// Whether a write of the largest chunk (one datagram's worth) would find send memory
    /// now.
    fn send_room(&mut self) -> bool {
        match self.shm.as_mut().map(|s| &mut s.mode) {
            Some(Mode::Shared { send_bufs, .. }) => {
                send_bufs.drain_deferred(usize::MAX);
                send_bufs.buffers().free_count() >= chunk_buffers(send_bufs)
            }
            Some(Mode::Regions(own)) => own.arena.fits(super::MAX_DATAGRAM as u32),
            None => {
                let sock = self.data_sock.as_ref().unwrap_or(&self.ctl);
                let mut fds = [PollFd::new(sock, PollFlags::OUT)];
                let zero = Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0) > 0
            }
        }
    }

    /// Sleeps until the server delivers something, gives back send memory (if `writers`),
    /// dies, or `deadline` passes.
    fn sleep_any(&mut self, deadline: Option<Instant>, writers: bool) -> Result<(), ClientError> {
        if self.shm.is_none() {
            // `ipc`: a packet, room on the data socket, or the server's death.
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let sock = self.data_sock.as_ref().unwrap_or(&self.ctl);
            let mut flags = PollFlags::IN;
            if writers {
                flags |= PollFlags::OUT;
            }
            let mut fds = vec![PollFd::new(sock, flags)];
            if self.data_sock.is_some() {
                fds.push(PollFd::new(&self.ctl, PollFlags::IN));
            }
            let ts = left.map(|l| Timespec {
                tv_sec: l.as_secs() as _,
                tv_nsec: l.subsec_nanos() as _,
            });
            let _ = rustix::event::poll(&mut fds, ts.as_ref());
            return Ok(());
        }
        if writers
            && let Some(Mode::Shared { send_bufs, .. }) = self.shm.as_mut().map(|s| &mut s.mode)
        {
            // Send memory comes back through the pool, not the receive ring: wait for the
            // first buffer on the pool's wake-up, a short while, then look again (a delivery
            // meanwhile is seen at most that late).
            let n = chunk_buffers(send_bufs);
            send_bufs.wait_for_free(n, Some(WRITABLE_NAP));
            return Ok(());
        }
        self.sleep_rx(deadline)
    }
}

/// The send buffers the largest write chunk takes (a datagram and its header).
fn chunk_buffers(send_bufs: &shmnet_chan::ServerPools) -> u32 {
    let size = send_bufs.buffers().geometry().data_size as usize;
    (windows::SEND_HEADER + super::MAX_DATAGRAM).div_ceil(size) as u32
}

/// How long a `poll` for writability sleeps on the send pool before it looks at the receive
/// ring again (under `shared` the two have separate wake-ups).
const WRITABLE_NAP: Duration = Duration::from_millis(1);
