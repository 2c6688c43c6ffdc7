//! How datagrams cross between the server and one application: the [`AppTransport`] trait
//! and its two implementations.
//!
//! - [`ShmApp`] (the `server` structure): the application's own window holds its request,
//!   delivery and return rings and its send buffers; a delivery is a descriptor naming a
//!   chain in the data window, read by the application where the driver put it.
//! - [`IpcApp`] (the `ipc` structure, the message-passing baseline seed 002 replaced): every
//!   datagram is copied into a packet on a socket of its own, both ways.
//!
//! The data plane calls [`AppTransport::take`] (returns and sends) and
//! [`AppTransport::deliver`] every round, and the sleep methods when it has nothing to do.
//! Everything the application wrote is untrusted: descriptors were bounds-checked by the
//! ring, chains are walked with a bound, returns are checked against what was delivered.

use super::held::Held;
use super::stats::AppCounters;
use crate::control;
use crate::pool::ChanPool;
use crate::windows::SendStatus;
use crate::windows::{self, SEND_HEADER};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::OwnedFd;
use shmnet_chan::handles::{Access, Handle, LookupError, Pch, RegionId};
use shmnet_chan::{Consumer, Desc, DriverPools, Producer, Window};
use shmnet_stack::{BufIdx, BufferPool, Interface, SocketHandle};

/// Descriptors moved per ring operation.
pub(crate) const BURST: usize = 32;
/// Bursts one application's ring may be worked per round of the data plane: a fairness
/// budget, so that one application cannot keep the data plane from the others.
pub(crate) const BURSTS_PER_ROUND: usize = 4;

/// What a transport works with in one round of the data plane.
pub(crate) struct Round<'a> {
    pub iface: &'a mut Interface,
    pub pool: &'a mut ChanPool,
    pub tx: &'a mut Vec<BufIdx>,
    pub now: shmnet_stack::Instant,
    /// Room for one datagram (a send being gathered, an `ipc` packet).
    pub scratch: &'a mut [u8],
    /// The lookup cache and its miss port (sends by handle).
    pub handles: &'a mut super::handles::HandleCtx,
    /// The instrument around the server's copies into posted buffers, if one is installed
    /// ([`super::Server::probe_copies`]).
    pub copy_probe: Option<&'a mut dyn super::CopyProbe>,
}

/// One application's side of the data plane.
pub(crate) trait AppTransport: Send {
    /// `shm` or `ipc`.
    fn kind(&self) -> &'static str;
    /// Takes back the chains the application returned and carries out its sends on
    /// `sockets` (socket number → stack socket). Returns how much it did.
    fn take(
        &mut self,
        r: &mut Round<'_>,
        sockets: &[Option<SocketHandle>],
        c: &mut AppCounters,
    ) -> usize;
    /// Delivers the queued messages of `sockets`, as many as the application can take now.
    fn deliver(
        &mut self,
        r: &mut Round<'_>,
        sockets: &[Option<SocketHandle>],
        c: &mut AppCounters,
    ) -> usize;
    /// Announces sleep on everything this transport consumes; `false` (nothing left armed)
    /// if there is work already.
    fn prepare_sleep(&mut self) -> bool;
    /// Undoes [`AppTransport::prepare_sleep`] after the wait.
    fn finish_sleep(&mut self);
    /// The fds that wake the data plane for this application.
    fn wait_fds<'a>(&'a self, out: &mut Vec<PollFd<'a>>);
    /// The application has gone: frees every chain it held.
    fn reclaim(&mut self, pool: &mut ChanPool);
    /// Chains held by the application now.
    fn holding(&self) -> usize;
    /// Its window, if it has one.
    fn window(&self) -> Option<&Window>;
    /// Wake-ups sent to it.
    fn wakeups(&self) -> u64;
    /// Whether a delivery waits for room in a socket (`ipc`), which no eventfd announces.
    fn blocked(&self) -> bool {
        false
    }
}

/// An application of the `server` structure.
pub(crate) struct ShmApp {
    /// Its application number: the `app` of its handles.
    pch: Pch,
    win: Window,
    /// Its send buffers (kept: making the view walks the window's regions).
    bufs: shmnet_chan::Buffers,
    req: Consumer,
    rx: Producer,
    ret: Consumer,
    send_bufs: DriverPools,
    held: Held,
    batch: [Desc; BURST],
}

impl ShmApp {
    /// Takes the server's ends of a fresh application window `win`, for a data window of
    /// `total` buffers.
    pub(crate) fn new(
        win: Window,
        data_limits: shmnet_chan::DescLimits,
        total: u32,
        pch: Pch,
    ) -> Result<Self, shmnet_chan::window::HandleError> {
        Ok(Self {
            pch,
            // Opaque: a send by handle carries an offset where a send chain carries a buffer
            // index; each kind is checked where it is used (the chain walk, the lookup).
            req: win.consumer_with_limits(windows::REQ, shmnet_chan::DescLimits::OPAQUE)?,
            rx: win.producer(windows::RX)?,
            ret: win.consumer_with_limits(windows::RET, data_limits)?,
            send_bufs: win.driver_pools()?,
            held: Held::new(total),
            batch: [Desc::default(); BURST],
            bufs: win.buffers(),
            win,
        })
    }

    fn flush_deliveries(&mut self, n: usize, pool: &mut ChanPool, c: &mut AppCounters) {
        let placed = self.rx.enqueue_burst(&self.batch[..n]);
        c.delivered += placed as u64;
        // Cannot happen (room was counted); never leak a chain if it does.
        for d in &self.batch[placed..n] {
            self.held.remove(d.buf);
            pool.free_chain(BufIdx(d.buf));
        }
    }
}

impl AppTransport for ShmApp {
    fn kind(&self) -> &'static str {
        "shm"
    }

    fn take(
        &mut self,
        r: &mut Round<'_>,
        sockets: &[Option<SocketHandle>],
        c: &mut AppCounters,
    ) -> usize {
        let mut work = 0;
        // Budgets per round (returns, then sends), so an application that keeps its rings
        // full — or fakes it by writing their indices — cannot keep the data plane from
        // everyone else; what is left waits for the next round.
        for _ in 0..BURSTS_PER_ROUND {
            let n = self.ret.dequeue_burst(&mut self.batch);
            if n == 0 {
                break;
            }
            work += n;
            for d in &self.batch[..n] {
                if self.held.remove(d.buf) {
                    c.returned += 1;
                    r.pool.free_chain(BufIdx(d.buf));
                } else {
                    c.bad_returns += 1;
                }
            }
        }
        let bufs = &self.bufs;
        let mut parts: [&[u8]; MAX_SEND_PARTS] = [&[]; MAX_SEND_PARTS];
        let mut done = [Desc::default(); BURST];
        for _ in 0..BURSTS_PER_ROUND {
            // A send by handle answers on RX: take no more than RX has room for (known
            // without touching the application's cache line while RX has a burst of room).
            let room = (self.rx.room_for(BURST as u32) as usize).min(BURST);
            if room == 0 {
                break;
            }
            let n = self.req.dequeue_burst(&mut self.batch[..room]);
            if n == 0 {
                break;
            }
            work += n;
            let mut k = 0;
            for d in &self.batch[..n] {
                if d.flags & windows::REQ_HANDLE != 0 {
                    let status = send_by_handle(r, self.pch, sockets, d);
                    match status {
                        SendStatus::Sent => c.sent += 1,
                        SendStatus::Miss => c.send_misses += 1,
                        SendStatus::Refused | SendStatus::Failed => c.bad_sends += 1,
                    }
                    done[k] = windows::done_desc(d, status);
                    k += 1;
                    continue;
                }
                let sent = gather_send(bufs, d, &mut parts).and_then(|(dst, k)| {
                    let h = sockets.get(d.aux as usize).copied().flatten()?;
                    r.iface
                        .udp_send_gather(r.pool, h, &parts[..k], dst, r.now, r.tx)
                        .ok()
                });
                match sent {
                    Some(()) => c.sent += 1,
                    None => c.bad_sends += 1,
                }
                self.send_bufs.release(d.buf);
            }
            if k > 0 {
                // Room was counted before the dequeue; this side alone produces on RX (the
                // enqueue wakes the application if it sleeps).
                self.rx.enqueue_burst(&done[..k]);
            }
        }
        work
    }

    fn deliver(
        &mut self,
        r: &mut Round<'_>,
        sockets: &[Option<SocketHandle>],
        c: &mut AppCounters,
    ) -> usize {
        // The ring's tail is the application's to write: read it (a cache line that moves
        // between cores) only when there is something to deliver.
        if !sockets
            .iter()
            .flatten()
            .any(|&h| matches!(r.iface.udp_peek(h), Ok(Some(_))))
        {
            return 0;
        }
        let mut room = self.rx.free_slots() as usize;
        let mut n = 0;
        let mut work = 0;
        for (sock, h) in sockets.iter().enumerate() {
            let Some(h) = *h else { continue };
            while room > 0 {
                let Ok(Some(msg)) = r.iface.udp_recv_chain(h) else {
                    break;
                };
                self.held.insert(msg.head.0);
                self.batch[n] = windows::rx_desc(msg.head.0, msg.len as u32, sock as u16, msg.src);
                n += 1;
                room -= 1;
                work += 1;
                if n == BURST {
                    self.flush_deliveries(n, r.pool, c);
                    n = 0;
                }
            }
        }
        if n > 0 {
            // One publish (and at most one wake-up) for the whole batch.
            self.flush_deliveries(n, r.pool, c);
        }
        work
    }

    fn prepare_sleep(&mut self) -> bool {
        if !self.req.prepare_wait() {
            return false;
        }
        if !self.ret.prepare_wait() {
            self.req.finish_wait();
            return false;
        }
        true
    }

    fn finish_sleep(&mut self) {
        self.req.finish_wait();
        self.ret.finish_wait();
    }

    fn wait_fds<'a>(&'a self, out: &mut Vec<PollFd<'a>>) {
        for c in [&self.req, &self.ret] {
            if let Some(fd) = c.wake_fd() {
                out.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
            }
        }
    }

    fn reclaim(&mut self, pool: &mut ChanPool) {
        for head in self.held.take_all() {
            pool.free_chain(BufIdx(head));
        }
    }

    fn holding(&self) -> usize {
        self.held.len()
    }

    fn window(&self) -> Option<&Window> {
        Some(&self.win)
    }

    fn wakeups(&self) -> u64 {
        self.rx.stats().wakeups_sent
    }
}

/// Most buffers one send can span: the largest datagram and its header in the app window's
/// smallest buffers, with room to spare.
const MAX_SEND_PARTS: usize = 64;

/// Reads a send request in place: the destination header, and the payload of the chain at
/// `d.buf` in the application's window as up to [`MAX_SEND_PARTS`] slices of its buffers
/// (the stack copies them once, into the frames — no scratch copy). Returns the
/// destination and how many slices; `None` if the chain is malformed or shorter than
/// `d.len`.
/// Sends the datagram a `REQ_HANDLE` descriptor names: translated through the lookup cache
/// (a miss is reported to the miss thread and the send dropped), its destination read from
/// its first 8 bytes, its payload gathered where it lies into frames.
pub(crate) fn send_by_handle(
    r: &mut Round<'_>,
    pch: Pch,
    sockets: &[Option<SocketHandle>],
    d: &Desc,
) -> SendStatus {
    let (region, off) = windows::handle_of(d);
    if (d.len as usize) < SEND_HEADER {
        return SendStatus::Refused;
    }
    let handle = Handle {
        app: pch,
        region: RegionId(region),
        off,
        len: d.len,
    };
    r.handles.note(&handle, Access::Read);
    let at = match r.handles.cache.translate(&handle, Access::Read) {
        Ok(p) => p,
        Err(LookupError::Miss(key)) => {
            let generation = r.handles.generation(pch);
            r.handles.misses.report(key, Access::Read, generation);
            return SendStatus::Miss;
        }
        Err(LookupError::Refused(_)) => return SendStatus::Refused,
    };
    let Some(h) = sockets.get(d.aux as usize).copied().flatten() else {
        return SendStatus::Failed;
    };
    // SAFETY: the lookup cache translated exactly these `len` bytes, all inside a region
    // this application registered readable and the server has mapped (lines are dropped
    // before a region is unmapped). The application may write them concurrently: that only
    // changes its own datagram, which the stack copies once into frames and checksums there.
    let bytes = unsafe { std::slice::from_raw_parts(at.as_ptr(), d.len as usize) };
    let mut hdr = [0u8; SEND_HEADER];
    hdr.copy_from_slice(&bytes[..SEND_HEADER]);
    let dst = windows::decode_dst(&hdr);
    match r
        .iface
        .udp_send_gather(r.pool, h, &[&bytes[SEND_HEADER..]], dst, r.now, r.tx)
    {
        Ok(()) => SendStatus::Sent,
        Err(_) => SendStatus::Failed,
    }
}

fn gather_send<'a>(
    bufs: &'a shmnet_chan::Buffers,
    d: &Desc,
    parts: &mut [&'a [u8]; MAX_SEND_PARTS],
) -> Option<(std::net::SocketAddrV4, usize)> {
    let len = d.len as usize;
    let mut hdr = [0u8; SEND_HEADER];
    if bufs.read_chain(BufIdx(d.buf), 0, &mut hdr).ok()? != SEND_HEADER {
        return None;
    }
    let mut k = 0;
    let mut total = 0;
    for seg in bufs.segments_from(BufIdx(d.buf), SEND_HEADER, len) {
        let seg = seg.ok()?;
        // SAFETY: the application handed this chain to the server with the request and
        // gets it back only through `release` after the send. The slice lies inside its
        // buffer (the walk checked offset and length). An application that writes it
        // anyway, concurrently, changes only the bytes of its own datagram: the stack
        // copies them once and checksums its copy.
        let bytes = unsafe { bufs.segment_bytes(seg) }.ok()?;
        *parts.get_mut(k)? = bytes;
        k += 1;
        total += bytes.len();
    }
    (total == len).then(|| (windows::decode_dst(&hdr), k))
}

/// An application of the `ipc` structure: datagrams in packets on `sock`, a socket pair of
/// its own (its control socket carries only control messages).
pub(crate) struct IpcApp {
    sock: OwnedFd,
    /// A delivery the socket could not take: wait for room before trying again.
    blocked: bool,
    /// The socket failed: the application is going away (its control socket will say so).
    failed: bool,
    /// Datagrams lost because the socket failed or the datagram could not be read.
    pub(crate) drops: u64,
}

impl IpcApp {
    /// Serves the application through the server's end of its data socket pair.
    pub(crate) fn new(sock: OwnedFd) -> Self {
        Self {
            sock,
            blocked: false,
            failed: false,
            drops: 0,
        }
    }
}

impl AppTransport for IpcApp {
    fn kind(&self) -> &'static str {
        "ipc"
    }

    fn take(
        &mut self,
        r: &mut Round<'_>,
        sockets: &[Option<SocketHandle>],
        c: &mut AppCounters,
    ) -> usize {
        let mut work = 0;
        while !self.failed && work < BURST {
            let n = match control::recv_raw(&self.sock, r.scratch) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(_) => {
                    self.failed = true;
                    break;
                }
            };
            work += 1;
            let ok = control::parse_ipc_header(&r.scratch[..n]).and_then(|(tag, sock, dst)| {
                if tag != control::TAG_SEND {
                    return None;
                }
                let h = sockets.get(usize::from(sock)).copied().flatten()?;
                r.iface
                    .udp_send_to(
                        r.pool,
                        h,
                        &r.scratch[control::IPC_HEADER..n],
                        dst,
                        r.now,
                        r.tx,
                    )
                    .ok()
            });
            match ok {
                Some(()) => c.sent += 1,
                None => c.bad_sends += 1,
            }
        }
        work
    }

    fn deliver(
        &mut self,
        r: &mut Round<'_>,
        sockets: &[Option<SocketHandle>],
        c: &mut AppCounters,
    ) -> usize {
        let mut work = 0;
        self.blocked = false;
        for (sock, h) in sockets.iter().enumerate() {
            let Some(h) = *h else { continue };
            while !self.failed {
                let Ok(Some(msg)) = r.iface.udp_peek(h) else {
                    break;
                };
                let Some(len) = copy_chain(r.pool, &msg, r.scratch) else {
                    // The stack built the chain: never in practice. Drop the datagram.
                    self.drops += 1;
                    if let Ok(Some(m)) = r.iface.udp_recv_chain(h) {
                        r.pool.free_chain(m.head);
                    }
                    continue;
                };
                let hdr = control::ipc_header(control::TAG_DELIVER, sock as u16, msg.src);
                match control::send_raw(&self.sock, &[&hdr, &r.scratch[..len]]) {
                    Ok(true) => {
                        c.delivered += 1;
                        work += 1;
                    }
                    Ok(false) => {
                        self.blocked = true;
                        return work;
                    }
                    Err(_) => {
                        self.failed = true;
                        self.drops += 1;
                    }
                }
                if let Ok(Some(m)) = r.iface.udp_recv_chain(h) {
                    r.pool.free_chain(m.head);
                }
            }
        }
        work
    }

    fn prepare_sleep(&mut self) -> bool {
        true
    }

    fn finish_sleep(&mut self) {}

    fn wait_fds<'a>(&'a self, out: &mut Vec<PollFd<'a>>) {
        if self.failed {
            return;
        }
        let mut flags = PollFlags::IN;
        if self.blocked {
            flags |= PollFlags::OUT;
        }
        out.push(PollFd::new(&self.sock, flags));
    }

    fn reclaim(&mut self, _pool: &mut ChanPool) {}

    fn holding(&self) -> usize {
        0
    }

    fn window(&self) -> Option<&Window> {
        None
    }

    fn wakeups(&self) -> u64 {
        0
    }

    fn blocked(&self) -> bool {
        self.blocked && !self.failed
    }
}

/// Copies the bytes of `msg`'s chain into `dst` (as many as fit) without freeing it, with
/// shmnet-chan's chain walk; returns how many, or `None` if the chain is malformed.
pub(crate) fn copy_chain(
    pool: &ChanPool,
    msg: &shmnet_stack::Message,
    dst: &mut [u8],
) -> Option<usize> {
    let n = msg.len.min(dst.len());
    pool.buffers().read_chain(msg.head, 0, &mut dst[..n]).ok()
}
