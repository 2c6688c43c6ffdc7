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
use super::sockets::{Backlog, Parked, Progress, Sockets, TcpItem, send_parts};
use super::stalled::Stalled;
use super::stats::AppCounters;
use crate::control;
use crate::pool::ChanPool;
use crate::windows::SendStatus;
use crate::windows::{self, SEND_HEADER};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::OwnedFd;
use shmnet_chan::handles::{Access, Handle, LookupError, Pch, RegionId};
use shmnet_chan::{Consumer, Desc, DriverPools, Producer, Window};
use shmnet_stack::tcp::memory::PoolLevel;
use shmnet_stack::{BufIdx, BufferPool, Interface};

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
    /// Pool buffers lent out as TCP chains (`--isolation shared`), and their bound.
    pub tcp_lent: &'a mut TcpLent,
    /// TCP sockets shared by `fork` ([`super::forks`]).
    pub forks: &'a mut super::forks::Forks,
    /// The application is going away: TCP bytes it wrote go into the connections' send
    /// queues past their limit (they have nowhere else to wait), so none is lost.
    pub last_call: bool,
    /// Frames the driver takes this round without dropping one (`usize::MAX`: no bound
    /// known); the frames already in `tx` count against it. Applications' sends past it
    /// wait in their queues for a later round ([`Round::send_room`]).
    pub tx_room: usize,
}

impl Round<'_> {
    /// How many of an application's sends to take now, at most `want`: as many as the
    /// driver has room for after the frames already emitted this round (a send is at
    /// least one frame; one that fragments may still find the device full). An
    /// application going away waits for room like the others: it departs over as many
    /// rounds as it needs (`DETACH_LIMIT`), and must not crowd them out meanwhile.
    pub(crate) fn send_room(&self, want: usize) -> usize {
        want.min(self.tx_room.saturating_sub(self.tx.len()))
    }
}

/// One application's side of the data plane.
pub(crate) trait AppTransport: Send {
    /// `shm` or `ipc`.
    fn kind(&self) -> &'static str;
    /// Takes back the chains the application returned and carries out its sends on
    /// `sockets` (socket number → stack socket). Returns how much it did.
    fn take(&mut self, r: &mut Round<'_>, sockets: &mut Sockets, c: &mut AppCounters) -> usize;
    /// Delivers the queued messages of `sockets`, as many as the application can take now.
    fn deliver(&mut self, r: &mut Round<'_>, sockets: &mut Sockets, c: &mut AppCounters) -> usize;
    /// Announces sleep on everything this transport consumes; `false` (nothing left armed)
    /// if there is work already.
    fn prepare_sleep(&mut self) -> bool;
    /// Undoes [`AppTransport::prepare_sleep`] after the wait.
    fn finish_sleep(&mut self);
    /// The fds that wake the data plane for this application.
    fn wait_fds<'a>(&'a self, out: &mut Vec<PollFd<'a>>);
    /// The application has gone: frees every chain it held.
    fn reclaim(&mut self, pool: &mut ChanPool, lent: &mut TcpLent);
    /// Chains held by the application now.
    fn holding(&self) -> usize;
    /// Its window, if it has one.
    fn window(&self) -> Option<&Window>;
    /// Wake-ups sent to it.
    fn wakeups(&self) -> u64;
    /// Whether it waits for something no eventfd announces — room in a socket for a
    /// delivery (`ipc`), room in a local receiver's queue for a datagram it sent
    /// ([`WaitForReceiver`]): the data plane then sleeps no longer than a short recheck.
    fn blocked(&self) -> bool {
        false
    }
    /// TCP requests it has made that wait for the stack (or a line).
    fn parked(&self) -> usize;
    /// Whether requests wait on its ring that no round has taken yet (a round may take
    /// none when the driver has no room: an application going away is not done then).
    fn requests_waiting(&mut self) -> bool {
        false
    }
    /// The sockets of the requests parked now (an application going away with requests
    /// that could not be carried out: their connections are reset, not closed, so their
    /// peers never take what they got for the whole stream).
    fn parked_sockets(&self, out: &mut Vec<u32>);
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
    send_bufs: SendReturns,
    held: Held,
    /// Per buffer index: the buffers of the TCP chain headed there that the application
    /// holds (0: none, or not a TCP chain).
    tcp_chains: Vec<u16>,
    /// Buffers of TCP chains it holds, in all.
    tcp_lent: u32,
    /// TCP requests waiting for send-buffer room, in order.
    backlog: Backlog,
    /// Requests behind a datagram whose local receiver is full, in order.
    stalled: Stalled,
    batch: [Desc; BURST],
}

/// An application's send buffers on their way back to it once their bytes are sent (or
/// copied into a connection's send queue): handed back a burst at a time
/// ([`DriverPools::hand_back_burst`]), so the application frees them itself, on its own
/// core, and the headers, lock and free list it allocates from never leave its cache — one
/// queue slot per chain and one wake-up check per burst here. [`ShmApp::take`] flushes what
/// is left at its end, so none waits past the round.
struct SendReturns {
    pools: DriverPools,
    pending: arrayvec::ArrayVec<u32, BURST>,
}

impl SendReturns {
    /// Gives the chain at `head` back (with the next ones).
    fn hand_back(&mut self, head: u32) {
        if self.pending.is_full() {
            self.flush();
        }
        self.pending.push(head);
    }

    /// Gives back everything pending.
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            self.pools.hand_back_burst(&self.pending);
            self.pending.clear();
        }
    }
}

/// Pool buffers lent out as TCP chains, by every application together and by each.
///
/// A connection's window opens when its bytes are lent (they left its queue), so this, not
/// the window, bounds the pool buffers slow readers keep: past `cap` (half the pool) for
/// everyone, or a quarter of that for one application, bytes wait in their connections'
/// queues (whose windows then close) until chains come back. Below [`TCP_LENT_FLOOR`] an
/// application may always borrow, so readers that never read cannot starve one that does.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TcpLent {
    pub(crate) bufs: u32,
    pub(crate) cap: u32,
}

/// Buffers any application may hold as TCP chains whatever the others hold (about one
/// 64 KiB chain of full-sized segments, and some).
const TCP_LENT_FLOOR: u32 = 64;

impl TcpLent {
    /// Whether an application holding `mine` buffers may be lent another chain, from
    /// `pool`. While the pool is scarce only the floor may be lent: each chain lent
    /// reopens its connection's window, and the stack keeps the pool's last part from TCP's
    /// queues (`shmnet_stack::tcp::memory`) only if lending stops refilling them.
    fn may_lend<P: BufferPool + ?Sized>(&self, mine: u32, pool: &P) -> bool {
        mine < TCP_LENT_FLOOR
            || (self.bufs < self.cap
                && mine < self.cap / 4
                && PoolLevel::of(pool) < PoolLevel::Scarce)
    }
}
/// Bytes of one lent chain of TCP bytes, at most.
pub(crate) const TCP_CHAIN_BYTES: u32 = 65_536;

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
            send_bufs: SendReturns {
                pools: win.driver_pools()?,
                pending: arrayvec::ArrayVec::new(),
            },
            held: Held::new(total),
            tcp_chains: vec![0; total as usize],
            tcp_lent: 0,
            backlog: Backlog::default(),
            stalled: Stalled::new(),
            batch: [Desc::default(); BURST],
            bufs: win.buffers(),
            win,
        })
    }

    /// Chain `head` is back (or was never placed): if it carried TCP bytes, its buffers no
    /// longer count as lent.
    fn forget_tcp_chain(&mut self, head: u32, lent: &mut TcpLent) {
        if let Some(b) = self.tcp_chains.get_mut(head as usize) {
            let n = u32::from(std::mem::take(b));
            self.tcp_lent -= n;
            lent.bufs -= n;
        }
    }

    fn flush_deliveries(
        &mut self,
        n: usize,
        pool: &mut ChanPool,
        lent: &mut TcpLent,
        c: &mut AppCounters,
    ) {
        let placed = self.rx.enqueue_burst(&self.batch[..n]);
        c.delivered += placed as u64;
        // Cannot happen (room was counted); never leak a chain if it does.
        for k in placed..n {
            let d = self.batch[k];
            if windows::event_of(&d).is_none() {
                self.held.remove(d.buf);
                self.forget_tcp_chain(d.buf, lent);
                pool.free_chain(BufIdx(d.buf));
            }
        }
    }
}

impl AppTransport for ShmApp {
    fn kind(&self) -> &'static str {
        "shm"
    }

    fn take(&mut self, r: &mut Round<'_>, sockets: &mut Sockets, c: &mut AppCounters) -> usize {
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
            // Freed as one burst: one pool lock per run and one wake-up check (a fence).
            let mut heads = [0u32; BURST];
            let mut back = 0;
            for k in 0..n {
                let d = self.batch[k];
                if self.held.remove(d.buf) {
                    self.forget_tcp_chain(d.buf, r.tcp_lent);
                    c.returned += 1;
                    heads[back] = d.buf;
                    back += 1;
                } else {
                    c.bad_returns += 1;
                }
            }
            r.pool.pools().release_burst(&heads[..back]);
        }
        let bufs = &self.bufs;
        // Uninitialised storage: this runs at every poll of every application.
        let mut parts = SendParts::new();
        let send_bufs = &mut self.send_bufs;
        if !self.backlog.is_empty() {
            work += self.backlog.retry(
                |p| shm_tcp_request(r, sockets, bufs, p, c),
                |d, _| {
                    if d.flags & windows::REQ_OP == 0 {
                        send_bufs.hand_back(d.buf);
                    }
                    true
                },
            );
        }
        let mut done = [Desc::default(); BURST];
        for _ in 0..BURSTS_PER_ROUND {
            // A send by handle answers on RX: take no more than RX has room for (known
            // without touching the application's cache line while RX has a burst of room),
            // unless the application went away (it reads no more completions).
            let room = if r.last_call {
                BURST
            } else {
                (self.rx.room_for(BURST as u32) as usize).min(BURST)
            };
            let room = r.send_room(room);
            if room == 0 {
                break;
            }
            // What waits for a local receiver goes first (see `Stalled`).
            let from_held = !self.stalled.is_empty();
            let n = if from_held {
                self.stalled.fill(&mut self.batch[..room])
            } else {
                self.req.dequeue_burst(&mut self.batch[..room])
            };
            if n == 0 {
                break;
            }
            let mut took = n;
            let mut k = 0;
            for (j, d) in self.batch[..n].iter().enumerate() {
                if d.flags & windows::REQ_OP != 0 || sockets.tcp(d.aux as usize).is_some() {
                    // TCP: in order behind what is parked, parked itself if the stack
                    // cannot take it whole now.
                    if windows::is_abort(d) {
                        let send_bufs = &mut self.send_bufs;
                        self.backlog.drop_socket(d.aux, |x| {
                            if x.flags & windows::REQ_OP == 0 {
                                send_bufs.hand_back(x.buf);
                            }
                        });
                    }
                    let p = Parked { d: *d, done: 0 };
                    let parked = if windows::connect_of(d).is_none() && self.backlog.holds(d.aux) {
                        self.backlog.park(*d, 0)
                    } else {
                        match shm_tcp_request(r, sockets, bufs, &p, c) {
                            Progress::Done(_) => {
                                if d.flags & windows::REQ_OP == 0 {
                                    self.send_bufs.hand_back(d.buf);
                                }
                                continue;
                            }
                            Progress::Blocked(sent) => self.backlog.park(*d, sent),
                        }
                    };
                    if !parked {
                        c.bad_sends += 1;
                        if d.flags & windows::REQ_OP == 0 {
                            self.send_bufs.hand_back(d.buf);
                        }
                    }
                    continue;
                }
                if d.flags & windows::REQ_HANDLE != 0 {
                    let Ok(status) = send_by_handle(r, self.pch, sockets, d) else {
                        took = j;
                        break;
                    };
                    match status {
                        SendStatus::Sent => c.sent += 1,
                        SendStatus::Miss => c.send_misses += 1,
                        SendStatus::Refused | SendStatus::Failed => c.bad_sends += 1,
                    }
                    done[k] = windows::done_desc(d, status);
                    k += 1;
                    continue;
                }
                let dst = gather_send(bufs, d, &mut parts);
                let h = sockets.udp(d.aux as usize);
                if let (Some(dst), Some(_)) = (dst, h)
                    && r.iface.udp_local_wait(dst, r.now)
                {
                    took = j;
                    break;
                }
                let sent = dst.zip(h).and_then(|(dst, h)| {
                    r.iface
                        .udp_send_gather(r.pool, h, &parts, dst, r.now, r.tx)
                        .ok()
                });
                match sent {
                    Some(()) => c.sent += 1,
                    None => c.bad_sends += 1,
                }
                self.send_bufs.hand_back(d.buf);
            }
            if k > 0 {
                // Room was counted before the dequeue; this side alone produces on RX (the
                // enqueue wakes the application if it sleeps).
                self.rx.enqueue_burst(&done[..k]);
            }
            work += took;
            self.stalled.settle(&self.batch, n, took, from_held);
            if took < n {
                break;
            }
        }
        self.send_bufs.flush();
        work
    }

    fn deliver(&mut self, r: &mut Round<'_>, sockets: &mut Sockets, c: &mut AppCounters) -> usize {
        // The ring's tail is the application's to write: read it (a cache line that moves
        // between cores) only when there is something to deliver.
        let mut item = sockets.next_item(r);
        if item.is_none() && !sockets.any_udp_waiting(r.iface) {
            return 0;
        }
        let mut room = self.rx.free_slots() as usize;
        let mut n = 0;
        let mut work = 0;
        // TCP first: its events and bytes, lent as chains where the driver wrote them.
        while let Some(it) = item.filter(|_| room > 0) {
            let d = match it {
                TcpItem::Event(socket, ev) => {
                    sockets.delivered(r.iface, socket, ev);
                    windows::event_desc(socket, ev)
                }
                TcpItem::Data { socket, h, .. } => {
                    if !r.tcp_lent.may_lend(self.tcp_lent, &*r.pool) {
                        break;
                    }
                    let Ok(Some(msg)) =
                        r.iface
                            .tcp_recv_chain(r.pool, h, TCP_CHAIN_BYTES, r.now, r.tx)
                    else {
                        break;
                    };
                    self.held.insert(msg.head.0);
                    let bufs = msg.bufs.min(usize::from(u16::MAX)) as u16;
                    if let Some(b) = self.tcp_chains.get_mut(msg.head.0 as usize) {
                        *b = bufs;
                        self.tcp_lent += u32::from(bufs);
                        r.tcp_lent.bufs += u32::from(bufs);
                    }
                    windows::rx_desc(msg.head.0, msg.len as u32, socket, msg.src)
                }
            };
            self.batch[n] = d;
            n += 1;
            room -= 1;
            work += 1;
            if n == BURST {
                self.flush_deliveries(n, r.pool, r.tcp_lent, c);
                n = 0;
            }
            item = sockets.next_item(r);
        }
        for (sock, h) in sockets.udp_sockets() {
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
                    self.flush_deliveries(n, r.pool, r.tcp_lent, c);
                    n = 0;
                }
            }
        }
        if n > 0 {
            // One publish (and at most one wake-up) for the whole batch.
            self.flush_deliveries(n, r.pool, r.tcp_lent, c);
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

    fn blocked(&self) -> bool {
        !self.stalled.is_empty()
    }

    fn wait_fds<'a>(&'a self, out: &mut Vec<PollFd<'a>>) {
        for c in [&self.req, &self.ret] {
            if let Some(fd) = c.wake_fd() {
                out.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
            }
        }
    }

    fn reclaim(&mut self, pool: &mut ChanPool, lent: &mut TcpLent) {
        lent.bufs -= std::mem::take(&mut self.tcp_lent);
        self.tcp_chains.fill(0);
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

    fn parked(&self) -> usize {
        self.backlog.len()
    }

    fn requests_waiting(&mut self) -> bool {
        !self.stalled.is_empty() || self.req.available() > 0
    }

    fn parked_sockets(&self, out: &mut Vec<u32>) {
        self.backlog.sockets(out);
    }
}

/// Carries out TCP request `p` of an application of the `server` structure: an operation,
/// or a send chain in its window (bytes past `p.done`).
fn shm_tcp_request(
    r: &mut Round<'_>,
    sockets: &mut Sockets,
    bufs: &shmnet_chan::Buffers,
    p: &Parked,
    c: &mut AppCounters,
) -> Progress {
    let d = &p.d;
    if d.flags & windows::REQ_OP != 0 {
        sockets.request(r, d);
        return Progress::Done(SendStatus::Sent);
    }
    let mut parts = SendParts::new();
    let sent = gather_send(bufs, d, &mut parts).and_then(|_| {
        let h = sockets.tcp(d.aux as usize)?;
        send_parts(r, h, &parts, p.done)
    });
    counted(sent, c)
}

/// `progress` of a TCP request, counted: `None` (the connection can send no more, or the
/// request was malformed) finishes it as `Failed`.
pub(crate) fn counted(progress: Option<Progress>, c: &mut AppCounters) -> Progress {
    match progress {
        Some(Progress::Done(SendStatus::Sent)) => {
            c.sent += 1;
            Progress::Done(SendStatus::Sent)
        }
        Some(Progress::Done(status)) => {
            c.bad_sends += 1;
            Progress::Done(status)
        }
        Some(blocked) => blocked,
        None => {
            c.bad_sends += 1;
            Progress::Done(SendStatus::Failed)
        }
    }
}

/// Most buffers one send can span: the largest datagram and its header in the app window's
/// smallest buffers, with room to spare.
const MAX_SEND_PARTS: usize = 64;

/// A send's payload as slices of the application's buffers.
type SendParts<'a> = arrayvec::ArrayVec<&'a [u8], MAX_SEND_PARTS>;

/// The bytes a `REQ_HANDLE` descriptor names, translated through the lookup cache (a miss
/// is reported to the miss thread): `Err(Miss)` or `Err(Refused)` when they cannot be read.
///
/// The application may write them concurrently: that changes only its own bytes, which the
/// stack copies once (into frames, or a connection's send queue) and checksums there.
pub(crate) fn handle_bytes<'r>(
    r: &mut Round<'r>,
    pch: Pch,
    d: &Desc,
) -> Result<&'r [u8], SendStatus> {
    let (region, off) = windows::handle_of(d);
    if (d.len as usize) < SEND_HEADER {
        return Err(SendStatus::Refused);
    }
    let handle = Handle {
        app: pch,
        region: RegionId(region),
        off,
        len: d.len,
    };
    let at = match r.handles.translate(&handle, Access::Read) {
        Ok(p) => p,
        Err(LookupError::Miss(_)) => return Err(SendStatus::Miss),
        Err(LookupError::Refused(_)) => return Err(SendStatus::Refused),
    };
    // SAFETY: the lookup cache translated exactly these `len` bytes, all inside a region
    // this application registered readable and the server has mapped (lines are dropped
    // before a region is unmapped, which happens only between rounds, never while a
    // round holds this slice).
    Ok(unsafe { std::slice::from_raw_parts(at.as_ptr(), d.len as usize) })
}

/// Sends the datagram a `REQ_HANDLE` descriptor names: its destination read from its first
/// 8 bytes, its payload gathered where it lies into frames.
pub(crate) fn send_by_handle(
    r: &mut Round<'_>,
    pch: Pch,
    sockets: &Sockets,
    d: &Desc,
) -> Result<SendStatus, WaitForReceiver> {
    let bytes = match handle_bytes(r, pch, d) {
        Ok(b) => b,
        Err(status) => return Ok(status),
    };
    let Some(h) = sockets.udp(d.aux as usize) else {
        return Ok(SendStatus::Failed);
    };
    let mut hdr = [0u8; SEND_HEADER];
    hdr.copy_from_slice(&bytes[..SEND_HEADER]);
    let dst = windows::decode_dst(&hdr);
    if r.iface.udp_local_wait(dst, r.now) {
        return Err(WaitForReceiver);
    }
    Ok(
        match r
            .iface
            .udp_send_gather(r.pool, h, &[&bytes[SEND_HEADER..]], dst, r.now, r.tx)
        {
            Ok(()) => SendStatus::Sent,
            // No buffer, or ARP's queue full for a moment: the datagram is lost as any the
            // network has no room for (the stack counts it: `no_buffers`, `arp_queue_full`),
            // and its bytes are free again, as after Linux's sendto whose frame a full queue
            // dropped. A failure here would stop an application over a moment's load.
            Err(shmnet_stack::SendError::NoBuffers | shmnet_stack::SendError::ArpQueueFull) => {
                SendStatus::Sent
            }
            Err(_) => SendStatus::Failed,
        },
    )
}

/// A datagram whose receiver is a socket of this host with a full queue
/// (`shmnet_stack::Interface::udp_local_wait`): it waits, with the requests its application
/// made after it, in [`super::stalled::Stalled`].
#[derive(Debug)]
pub(crate) struct WaitForReceiver;

/// Reads a send request in place: the destination header, and the payload of the chain at
/// `d.buf` in the application's window as up to [`MAX_SEND_PARTS`] slices of its buffers
/// (the stack copies them once, into the frames — no scratch copy), in `parts` (emptied
/// first). Returns the destination; `None` if the chain is malformed or shorter than
/// `d.len`.
fn gather_send<'a>(
    bufs: &'a shmnet_chan::Buffers,
    d: &Desc,
    parts: &mut SendParts<'a>,
) -> Option<std::net::SocketAddrV4> {
    parts.clear();
    let len = d.len as usize;
    let mut hdr = [0u8; SEND_HEADER];
    if bufs.read_chain(BufIdx(d.buf), 0, &mut hdr).ok()? != SEND_HEADER {
        return None;
    }
    let mut total = 0;
    for seg in bufs.segments_from(BufIdx(d.buf), SEND_HEADER, len) {
        let seg = seg.ok()?;
        // SAFETY: the application handed this chain to the server with the request and
        // gets it back only through `release` after the send. The slice lies inside its
        // buffer (the walk checked offset and length). An application that writes it
        // anyway, concurrently, changes only the bytes of its own datagram: the stack
        // copies them once and checksums its copy.
        let bytes = unsafe { bufs.segment_bytes(seg) }.ok()?;
        parts.try_push(bytes).ok()?;
        total += bytes.len();
    }
    (total == len).then(|| windows::decode_dst(&hdr))
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
    /// The rest of a TCP send the connection's send buffer could not take (socket, bytes):
    /// no packet is read until it has gone, so the application's requests stay in order.
    stash: Option<(u16, Vec<u8>)>,
    /// An event or delivery the socket could not take, sent before anything else.
    unsent: Vec<u8>,
}

impl IpcApp {
    /// Serves the application through the server's end of its data socket pair.
    pub(crate) fn new(sock: OwnedFd) -> Self {
        Self {
            sock,
            blocked: false,
            failed: false,
            drops: 0,
            stash: None,
            unsent: Vec::new(),
        }
    }
}

impl IpcApp {
    /// Sends the packet waiting in `unsent`: `false` if the socket cannot take it now (or
    /// failed).
    fn flush_unsent(&mut self) -> bool {
        match control::send_raw(&self.sock, &[&self.unsent]) {
            Ok(true) => {
                self.unsent.clear();
                true
            }
            Ok(false) => {
                self.blocked = true;
                false
            }
            Err(_) => {
                self.failed = true;
                self.drops += 1;
                self.unsent.clear();
                false
            }
        }
    }
}

impl AppTransport for IpcApp {
    fn kind(&self) -> &'static str {
        "ipc"
    }

    fn take(&mut self, r: &mut Round<'_>, sockets: &mut Sockets, c: &mut AppCounters) -> usize {
        let mut work = 0;
        if let Some((sock, rest)) = self.stash.as_mut() {
            let Some(h) = sockets.tcp(usize::from(*sock)) else {
                self.stash = None;
                c.bad_sends += 1;
                return 1;
            };
            match send_parts(r, h, &[rest], 0) {
                Some(Progress::Blocked(n)) => {
                    rest.drain(..n as usize);
                    return n as usize;
                }
                Some(Progress::Done(_)) => c.sent += 1,
                None => c.bad_sends += 1,
            }
            self.stash = None;
            work += 1;
        }
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
            match control::parse_ipc_header(&r.scratch[..n]) {
                Some((control::TAG_OP, sock, _)) => {
                    match control::ipc_op_of(&r.scratch[control::IPC_HEADER..n]) {
                        Some(op) => sockets.apply(r, sock, op),
                        None => c.bad_sends += 1,
                    }
                    continue;
                }
                Some((control::TAG_SEND, sock, _)) if sockets.tcp(usize::from(sock)).is_some() => {
                    let h = sockets.tcp(usize::from(sock)).expect("checked");
                    let scratch = std::mem::take(&mut r.scratch);
                    let sent = send_parts(r, h, &[&scratch[control::IPC_HEADER..n]], 0);
                    if let Some(Progress::Blocked(k)) = sent {
                        let rest = scratch[control::IPC_HEADER + k as usize..n].to_vec();
                        self.stash = Some((sock, rest));
                    }
                    r.scratch = scratch;
                    match sent {
                        Some(Progress::Done(_)) => c.sent += 1,
                        Some(Progress::Blocked(_)) => break,
                        None => c.bad_sends += 1,
                    }
                    continue;
                }
                _ => {}
            }
            let ok = control::parse_ipc_header(&r.scratch[..n]).and_then(|(tag, sock, dst)| {
                if tag != control::TAG_SEND {
                    return None;
                }
                let h = sockets.udp(usize::from(sock))?;
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

    fn deliver(&mut self, r: &mut Round<'_>, sockets: &mut Sockets, c: &mut AppCounters) -> usize {
        let mut work = 0;
        self.blocked = false;
        if !self.unsent.is_empty() && !self.flush_unsent() {
            return work;
        }
        // TCP: its events, and its bytes copied into packets.
        while !self.failed
            && let Some(item) = sockets.next_item(r)
        {
            match item {
                TcpItem::Event(socket, ev) => {
                    sockets.delivered(r.iface, socket, ev);
                    let d = windows::event_desc(socket, ev);
                    self.unsent.extend_from_slice(&control::ipc_event(&d));
                }
                TcpItem::Data {
                    socket,
                    h,
                    readable,
                } => {
                    let room = r.scratch.len() - control::IPC_HEADER;
                    let want = (readable as usize).min(room);
                    let Ok(k) = r.iface.tcp_recv(
                        r.pool,
                        h,
                        &mut r.scratch[control::IPC_HEADER..control::IPC_HEADER + want],
                        r.now,
                        r.tx,
                    ) else {
                        break;
                    };
                    if k == 0 {
                        // Nothing came out after all: a DELIVER of no bytes would read as
                        // the end of the stream to the application. (Not `continue`: the
                        // same socket would be offered again and again.)
                        break;
                    }
                    let src = std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0);
                    let hdr = control::ipc_header(control::TAG_DELIVER, socket, src);
                    r.scratch[..control::IPC_HEADER].copy_from_slice(&hdr);
                    self.unsent
                        .extend_from_slice(&r.scratch[..control::IPC_HEADER + k]);
                    c.delivered += 1;
                }
            }
            work += 1;
            if !self.flush_unsent() {
                return work;
            }
        }
        for (sock, h) in sockets.udp_sockets() {
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
        // While a TCP send is stashed no packet is read (ACKs, through the device, wake us
        // to send more): polling the socket for input would only spin.
        let mut flags = if self.stash.is_some() {
            PollFlags::empty()
        } else {
            PollFlags::IN
        };
        if self.blocked {
            flags |= PollFlags::OUT;
        }
        out.push(PollFd::new(&self.sock, flags));
    }

    fn reclaim(&mut self, _pool: &mut ChanPool, _lent: &mut TcpLent) {}

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

    fn parked(&self) -> usize {
        usize::from(self.stash.is_some())
    }

    fn parked_sockets(&self, out: &mut Vec<u32>) {
        out.extend(self.stash.as_ref().map(|(s, _)| u32::from(*s)));
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
