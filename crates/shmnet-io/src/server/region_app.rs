//! An application under `--isolation regions` (seed 004, docs/isolation.md): it sees only
//! its own memory.
//!
//! Its window holds four rings and nothing of the server's: `REQ` (sends by handle),
//! `RX` (deliveries and send completions), `POST_SMALL` and `POST_LARGE` (empty receive
//! buffers). Every descriptor on them names bytes of a region the application registered,
//! by handle, and every handle is checked by the lookup cache against the registration
//! (region, bounds, permission, owner) before the server touches a byte:
//!
//! - a **send** is gathered from where it lies in a readable region and completed on `RX`
//!   (`Sent`, `Miss`: send again, `Refused`, `Failed`);
//! - a **receive** is copied by the server from its pool buffers into a buffer the
//!   application posted in a writable region, the source in the buffer's first 8 bytes, and
//!   the pool buffers are free again at once: no chain of the server's is ever lent out.
//!
//! A miss never stalls the data plane for other applications: under `--on-miss drop` (the
//! seed's choice) the send completes as `Miss` and the datagram being received is dropped
//! and counted; under `--on-miss buffer` the request waits — later sends of the same
//! application behind it, the datagram in its socket's queue — until the miss thread has
//! served the line. Nothing the application writes on its rings can reach another
//! application's memory or a pool buffer: the rings are checked for their indices only, and
//! the handles by the cache.

use super::sockets::{Backlog, Parked, Progress, Sockets, TcpItem, send_parts};
use super::stalled::Stalled;
use super::stats::AppCounters;
use super::transport::{
    AppTransport, BURST, BURSTS_PER_ROUND, Round, TCP_CHAIN_BYTES, WaitForReceiver, counted,
    handle_bytes, send_by_handle,
};
use crate::spec::OnMiss;
use crate::windows::{self, RECV_HEADER, SendStatus};
use rustix::event::{PollFd, PollFlags};
use shmnet_chan::handles::{Access, Handle, LookupError, Pch, RegionId};
use shmnet_chan::{Consumer, Desc, DescLimits, Producer, Window};
use shmnet_stack::{BufferPool, Message};

/// The two classes of posted receive buffers, in the order of `POST_SMALL`, `POST_LARGE`.
const CLASSES: usize = 2;

/// An application of the `server` structure under `--isolation regions`. See the
/// [module docs](self).
pub(crate) struct RegionApp {
    /// Its application number: the `app` of its handles.
    pch: Pch,
    win: Window,
    req: Consumer,
    rx: Producer,
    /// Its posted receive buffers, by class.
    posts: [Consumer; CLASSES],
    /// A posted buffer taken off its ring whose line missed: used first when it arrives.
    post_held: [Option<Desc>; CLASSES],
    on_miss: OnMiss,
    /// Sends held behind one that missed (`--on-miss buffer`) or whose local receiver is
    /// full, in order.
    stalled: Stalled,
    /// The fill count when a send was last held on a miss (`--on-miss buffer`): held sends
    /// are tried again only once it has moved. `None` while they wait for a local
    /// receiver's room, which is looked at every round.
    stalled_fills: Option<u64>,
    /// The same for a datagram held in its socket's queue because its post missed.
    recv_stalled_fills: Option<u64>,
    /// By class: bytes waited for a posted buffer of it in the last delivery round, so
    /// that ring's wake-up is armed before sleeping. Only those rings: a ring of the other
    /// class full of posts nobody wants now would fail its arming — and keep the data
    /// plane from ever sleeping (a TCP stream waiting for large posts beside 255 small
    /// ones spun a CPU for as long as it waited).
    starved: [bool; CLASSES],
    /// Which post rings the last `prepare_sleep` armed.
    posts_armed: [bool; CLASSES],
    /// TCP requests waiting for send-buffer room or a line, in order.
    backlog: Backlog,
    /// A TCP request waits for a line (not for the peer): keep polling, as for a held send.
    tcp_missed: bool,
    batch: [Desc; BURST],
}

impl RegionApp {
    /// Takes the server's ends of a fresh region window `win` for application `pch`.
    pub(crate) fn new(
        win: Window,
        pch: Pch,
        on_miss: OnMiss,
    ) -> Result<Self, shmnet_chan::window::HandleError> {
        // Opaque: every descriptor carries a handle, which the lookup cache checks.
        let consumer = |ring| win.consumer_with_limits(ring, DescLimits::OPAQUE);
        Ok(Self {
            pch,
            req: consumer(windows::REQ)?,
            rx: win.producer(windows::RX)?,
            posts: [
                consumer(windows::POST_SMALL)?,
                consumer(windows::POST_LARGE)?,
            ],
            post_held: [None; CLASSES],
            on_miss,
            stalled: Stalled::new(),
            stalled_fills: None,
            recv_stalled_fills: None,
            starved: [false; CLASSES],
            posts_armed: [false; CLASSES],
            backlog: Backlog::default(),
            tcp_missed: false,
            batch: [Desc::default(); BURST],
            win,
        })
    }

    /// Whether requests held on a miss may be tried (a line arrived since they missed).
    fn may_retry(&self, r: &Round<'_>) -> bool {
        self.stalled_fills != Some(r.handles.fills())
    }

    /// Sends `self.batch[..n]` in order, writing completions into `done`. Returns how many it
    /// took (fewer than `n` only under `--on-miss buffer`, stopped by a miss) and how many
    /// completions it wrote.
    fn send_batch(
        &mut self,
        r: &mut Round<'_>,
        sockets: &mut Sockets,
        c: &mut AppCounters,
        n: usize,
        done: &mut [Desc; BURST],
    ) -> (usize, usize) {
        let mut k = 0;
        for (j, d) in self.batch[..n].iter().enumerate() {
            if d.flags & windows::REQ_OP != 0 || sockets.tcp(d.aux as usize).is_some() {
                // TCP: in order behind what is parked, parked itself if it cannot be
                // carried out whole now (no room in the send buffer, a line that missed —
                // a TCP send is never dropped on a miss, or its bytes would come out of
                // order).
                if windows::is_abort(d) {
                    // Sends it drops complete as failed, so the application frees their
                    // extents (a completion RX has no room for is lost: the extent with it).
                    let rx = &mut self.rx;
                    self.backlog.drop_socket(d.aux, |x| {
                        if x.flags & windows::REQ_OP == 0 {
                            let _ = rx.enqueue(windows::done_desc(x, SendStatus::Failed));
                        }
                    });
                }
                let p = Parked { d: *d, done: 0 };
                let progress = if windows::connect_of(d).is_none() && self.backlog.holds(d.aux) {
                    Progress::Blocked(0)
                } else {
                    region_tcp_request(r, self.pch, sockets, &p, c)
                };
                match progress {
                    Progress::Done(status) if d.flags & windows::REQ_OP == 0 => {
                        done[k] = windows::done_desc(d, status);
                        k += 1;
                    }
                    Progress::Done(_) => {}
                    Progress::Blocked(sent) => {
                        if !self.backlog.park(*d, sent) {
                            c.bad_sends += 1;
                            if d.flags & windows::REQ_OP == 0 {
                                done[k] = windows::done_desc(d, SendStatus::Failed);
                                k += 1;
                            }
                        }
                    }
                }
                continue;
            }
            let status = if d.flags & windows::REQ_HANDLE == 0 {
                // Only sends by handle exist here: a chain index names nothing of ours.
                SendStatus::Refused
            } else {
                match send_by_handle(r, self.pch, sockets, d) {
                    Ok(status) => status,
                    Err(WaitForReceiver) => {
                        self.stalled_fills = None;
                        return (j, k);
                    }
                }
            };
            match status {
                SendStatus::Sent => c.sent += 1,
                SendStatus::Miss => {
                    c.send_misses += 1;
                    if self.on_miss == OnMiss::Buffer {
                        self.stalled_fills = Some(r.handles.fills());
                        return (j, k);
                    }
                }
                SendStatus::Refused | SendStatus::Failed => c.bad_sends += 1,
            }
            done[k] = windows::done_desc(d, status);
            k += 1;
        }
        (n, k)
    }

    /// Withdraws the post rings' armings of the last `prepare_sleep`.
    fn finish_posts(&mut self) {
        for k in 0..CLASSES {
            if std::mem::take(&mut self.posts_armed[k]) {
                self.posts[k].finish_wait();
            }
        }
    }

    /// The next posted buffer of `class`: the one held on a miss, else the ring's next.
    fn next_post(&mut self, class: usize) -> Option<Desc> {
        self.post_held[class]
            .take()
            .or_else(|| self.posts[class].dequeue())
    }

    /// Copies up to `readable` bytes of connection `h` into a posted buffer (a small one if
    /// they fit, else a large one): returns the post and the bytes, or `None` if no post is
    /// there or its line missed (the bytes stay queued; the post is held for next time).
    fn tcp_into_post(
        &mut self,
        r: &mut Round<'_>,
        h: shmnet_stack::tcp::TcpHandle,
        readable: u32,
        c: &mut AppCounters,
    ) -> Option<(Desc, u32)> {
        let want = readable.min(TCP_CHAIN_BYTES) as usize;
        let class = usize::from(windows::post_ring_for(want) == windows::POST_LARGE);
        let Some(post) = self.next_post(class) else {
            self.starved[class] = true;
            return None;
        };
        let cap = (post.len as usize).saturating_sub(RECV_HEADER);
        if cap == 0 {
            c.bad_posts += 1;
            return None;
        }
        let want = want.min(cap);
        let (region, off) = windows::posted_handle(&post);
        let handle = Handle {
            app: self.pch,
            region: RegionId(region),
            off,
            len: (RECV_HEADER + want) as u32,
        };
        let at = match r.handles.translate(&handle, Access::Write) {
            Ok(at) => at,
            Err(LookupError::Miss(_)) => {
                c.recv_misses += 1;
                self.post_held[class] = Some(post);
                self.recv_stalled_fills = Some(r.handles.fills());
                return None;
            }
            Err(LookupError::Refused(_)) => {
                c.bad_posts += 1;
                return None;
            }
        };
        // SAFETY: the cache translated exactly `RECV_HEADER + want` bytes of a region this
        // application registered writable, mapped until its lines are dropped (between
        // rounds, not during this one). The application may scribble on them meanwhile:
        // that changes only what it will read.
        let dst = unsafe { std::slice::from_raw_parts_mut(at.as_ptr(), RECV_HEADER + want) };
        let k = match r
            .iface
            .tcp_recv(r.pool, h, &mut dst[RECV_HEADER..], r.now, r.tx)
        {
            Ok(k) if k > 0 => k,
            _ => {
                self.post_held[class] = Some(post);
                return None;
            }
        };
        let src = r
            .iface
            .tcp_info(h)
            .map(|i| i.remote)
            .unwrap_or(std::net::SocketAddrV4::new(
                std::net::Ipv4Addr::UNSPECIFIED,
                0,
            ));
        dst[..RECV_HEADER].copy_from_slice(&windows::encode_dst(src));
        Some((post, k as u32))
    }

    fn flush_deliveries(&mut self, n: usize, c: &mut AppCounters) {
        // Room was counted before the copies; the buffers are the application's either way.
        c.delivered += self.rx.enqueue_burst(&self.batch[..n]) as u64;
    }
}

/// Copies datagram `msg` (its chain in the server's pools) into the application's buffer at
/// `at`: the source in the first [`RECV_HEADER`] bytes, then the payload. Returns the bytes
/// of payload copied (short only if the chain is malformed, which the stack never makes).
///
/// # Safety
///
/// `at` must be valid for writes of `RECV_HEADER + msg.len` bytes (the lookup cache
/// translated exactly that span of a region registered writable, mapped until its lines are
/// dropped), and the chain must be the server's own.
unsafe fn copy_into(
    pool: &crate::pool::ChanPool,
    msg: &Message,
    at: *mut u8,
    mut probe: Option<&mut dyn super::CopyProbe>,
) -> usize {
    let src = windows::encode_dst(msg.src);
    // SAFETY: the caller promises `at` holds RECV_HEADER + msg.len bytes.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), at, RECV_HEADER) };
    let bufs = pool.buffers();
    let mut copied = 0;
    for seg in bufs.segments(msg.head, msg.len) {
        let Ok(seg) = seg else { break };
        // SAFETY: the chain was taken off the socket's queue: the server owns it until it
        // frees it after this copy.
        let Ok(data) = (unsafe { bufs.segment_bytes(seg) }) else {
            break;
        };
        let take = data.len().min(msg.len - copied);
        let data = &data[..take];
        if let Some(p) = probe.as_deref_mut() {
            p.on_buffer(seg.idx(), data);
        }
        // SAFETY: `copied + take <= msg.len`, inside the span the caller promises; the
        // source is a pool buffer, never the application's memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at.add(RECV_HEADER + copied), take) };
        if let Some(p) = probe.as_deref_mut() {
            p.after_buffer(seg.idx(), data);
        }
        copied += take;
    }
    if let Some(p) = probe {
        p.end_message();
    }
    copied
}

/// Carries out TCP request `p` of an application under `--isolation regions`: an
/// operation, or a send by handle (bytes past `p.done`; a miss leaves it blocked until the
/// line arrives).
fn region_tcp_request(
    r: &mut Round<'_>,
    pch: Pch,
    sockets: &mut Sockets,
    p: &Parked,
    c: &mut AppCounters,
) -> Progress {
    let d = &p.d;
    if d.flags & windows::REQ_OP != 0 {
        sockets.request(r, d);
        return Progress::Done(SendStatus::Sent);
    }
    if d.flags & windows::REQ_HANDLE == 0 {
        return counted(Some(Progress::Done(SendStatus::Refused)), c);
    }
    let bytes = match handle_bytes(r, pch, d) {
        Ok(b) => b,
        Err(SendStatus::Miss) => {
            c.send_misses += 1;
            return Progress::Blocked(p.done);
        }
        Err(status) => return counted(Some(Progress::Done(status)), c),
    };
    let sent = sockets
        .tcp(d.aux as usize)
        .and_then(|h| send_parts(r, h, &[&bytes[windows::SEND_HEADER..]], p.done));
    counted(sent, c)
}

impl AppTransport for RegionApp {
    fn kind(&self) -> &'static str {
        "regions"
    }

    fn take(&mut self, r: &mut Round<'_>, sockets: &mut Sockets, c: &mut AppCounters) -> usize {
        let mut work = 0;
        let misses = c.send_misses;
        // An application that went away reads no more completions: its RX may be full, and
        // its last requests must not wait for room there.
        let last_call = r.last_call;
        if !self.backlog.is_empty() {
            let (pch, rx) = (self.pch, &mut self.rx);
            work += self.backlog.retry(
                |p| region_tcp_request(r, pch, sockets, p, c),
                |d, status| {
                    d.flags & windows::REQ_OP != 0
                        || rx.enqueue(windows::done_desc(d, status)).is_ok()
                        || last_call
                },
            );
        }
        let mut done = [Desc::default(); BURST];
        // A budget per round, so an application that keeps its ring full (or fakes it)
        // cannot keep the data plane from everyone else.
        for _ in 0..BURSTS_PER_ROUND {
            // Each send answers on RX: take no more than RX has room for.
            let room = if last_call {
                BURST
            } else {
                (self.rx.room_for(BURST as u32) as usize).min(BURST)
            };
            let room = r.send_room(room);
            if room == 0 {
                break;
            }
            let held = !self.stalled.is_empty();
            let n = if held {
                if !self.may_retry(r) {
                    break;
                }
                self.stalled.fill(&mut self.batch[..room])
            } else {
                self.req.dequeue_burst(&mut self.batch[..room])
            };
            if n == 0 {
                break;
            }
            let (took, k) = self.send_batch(r, sockets, c, n, &mut done);
            if k > 0 {
                self.rx.enqueue_burst(&done[..k]);
            }
            work += took;
            self.stalled.settle(&self.batch, n, took, held);
            if took < n {
                break;
            }
            if self.stalled.is_empty() {
                self.stalled_fills = None;
            }
        }
        self.tcp_missed = c.send_misses != misses && !self.backlog.is_empty();
        work
    }

    fn deliver(&mut self, r: &mut Round<'_>, sockets: &mut Sockets, c: &mut AppCounters) -> usize {
        self.starved = [false; CLASSES];
        if self
            .recv_stalled_fills
            .is_some_and(|f| f == r.handles.fills())
        {
            // Held on a miss (`--on-miss buffer`) and no line has arrived since.
            return 0;
        }
        self.recv_stalled_fills = None;
        let mut item = sockets.next_item(r);
        if item.is_none() && !sockets.any_udp_waiting(r.iface) {
            return 0;
        }
        let mut room = self.rx.free_slots() as usize;
        let (mut n, mut work) = (0, 0);
        // TCP first: events, and bytes copied into posted buffers (never dropped: a miss
        // holds them in the connection's queue, closing its window, until the line comes).
        while let Some(it) = item.filter(|_| room > 0) {
            let d = match it {
                TcpItem::Event(socket, ev) => {
                    sockets.delivered(r.iface, socket, ev);
                    windows::event_desc(socket, ev)
                }
                TcpItem::Data {
                    socket,
                    h,
                    readable,
                } => match self.tcp_into_post(r, h, readable, c) {
                    Some((post, len)) => windows::region_rx_desc(&post, len, socket),
                    None => break,
                },
            };
            self.batch[n] = d;
            n += 1;
            room -= 1;
            work += 1;
            if n == BURST {
                self.flush_deliveries(n, c);
                n = 0;
            }
            item = sockets.next_item(r);
        }
        // Refused posts cost a round no more than a burst: a ring of junk posts is worked
        // through a burst per round, beside everyone else's traffic.
        let mut refusals = BURST;
        'sockets: for (sock, h) in sockets.udp_sockets() {
            while room > 0 {
                let Ok(Some(msg)) = r.iface.udp_peek(h) else {
                    break;
                };
                let class = usize::from(windows::post_ring_for(msg.len) == windows::POST_LARGE);
                let Some(post) = self.next_post(class) else {
                    // It waits in its socket's queue (which the stack bounds) for a post.
                    self.starved[class] = true;
                    break;
                };
                let need = RECV_HEADER + msg.len;
                if (post.len as usize) < need {
                    c.bad_posts += 1;
                    refusals -= 1;
                    if refusals == 0 {
                        break 'sockets;
                    }
                    continue;
                }
                let (region, off) = windows::posted_handle(&post);
                let handle = Handle {
                    app: self.pch,
                    region: RegionId(region),
                    off,
                    len: need as u32,
                };
                let at = match r.handles.translate(&handle, Access::Write) {
                    Ok(at) => at,
                    Err(LookupError::Miss(_)) => {
                        c.recv_misses += 1;
                        self.post_held[class] = Some(post);
                        match self.on_miss {
                            OnMiss::Drop => {
                                if let Ok(Some(m)) = r.iface.udp_recv_chain(h) {
                                    r.pool.free_chain(m.head);
                                    c.recv_dropped += 1;
                                    work += 1;
                                }
                                // This socket's next datagram would miss on the same line.
                                continue 'sockets;
                            }
                            OnMiss::Buffer => {
                                self.recv_stalled_fills = Some(r.handles.fills());
                                break 'sockets;
                            }
                        }
                    }
                    Err(LookupError::Refused(_)) => {
                        c.bad_posts += 1;
                        refusals -= 1;
                        if refusals == 0 {
                            break 'sockets;
                        }
                        continue;
                    }
                };
                let Ok(Some(msg)) = r.iface.udp_recv_chain(h) else {
                    // Peeked just above: cannot be gone. Keep the post for the next one.
                    self.post_held[class] = Some(post);
                    break;
                };
                // SAFETY: the cache translated exactly `need` bytes of a region this
                // application registered writable, mapped until its lines are dropped; the
                // chain came off the socket's queue and is the server's.
                let len =
                    unsafe { copy_into(r.pool, &msg, at.as_ptr(), r.copy_probe.as_deref_mut()) };
                r.pool.free_chain(msg.head);
                self.batch[n] = windows::region_rx_desc(&post, len as u32, sock as u16);
                n += 1;
                room -= 1;
                work += 1;
                if n == BURST {
                    self.flush_deliveries(n, c);
                    n = 0;
                }
            }
        }
        if n > 0 {
            // One publish (and at most one wake-up) for the whole batch.
            self.flush_deliveries(n, c);
        }
        if room == 0 {
            // RX is full, perhaps with datagrams still waiting: the application posts a
            // buffer again after each one it reads, so its posts must wake us.
            self.starved = [true; CLASSES];
        }
        work
    }

    fn prepare_sleep(&mut self) -> bool {
        // A request held on a miss is retried as soon as the line arrives: keep polling.
        // (One held for a local receiver's room is looked at again when the data plane
        // wakes, at the latest after `blocked`'s recheck interval.)
        if self.stalled_fills.is_some() || self.recv_stalled_fills.is_some() || self.tcp_missed {
            return false;
        }
        if !self.req.prepare_wait() {
            return false;
        }
        self.posts_armed = [false; CLASSES];
        for k in 0..CLASSES {
            if !self.starved[k] {
                continue;
            }
            // Bytes wait for a post of this class: the application's next one must wake us.
            if !self.posts[k].prepare_wait() {
                self.finish_posts();
                self.req.finish_wait();
                return false;
            }
            self.posts_armed[k] = true;
        }
        true
    }

    fn finish_sleep(&mut self) {
        self.req.finish_wait();
        self.finish_posts();
    }

    fn blocked(&self) -> bool {
        !self.stalled.is_empty() && self.stalled_fills.is_none()
    }

    fn wait_fds<'a>(&'a self, out: &mut Vec<PollFd<'a>>) {
        // The post rings' fds only when armed: the application holds these eventfds, and
        // one it wrote while they were not armed would stay readable — and keep the data
        // plane from ever sleeping — if they were polled unarmed (`finish_sleep` clears only
        // what it armed).
        let armed = self
            .posts
            .iter()
            .zip(self.posts_armed)
            .filter_map(|(c, armed)| armed.then_some(c));
        for c in std::iter::once(&self.req).chain(armed) {
            if let Some(fd) = c.wake_fd() {
                out.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
            }
        }
    }

    fn reclaim(
        &mut self,
        _pool: &mut crate::pool::ChanPool,
        _lent: &mut super::transport::TcpLent,
    ) {
        // Nothing of the server's is ever lent to it: every pool buffer was freed after its
        // copy. Its regions are unmapped by the control plane after the data plane has
        // dropped their lines.
    }

    fn holding(&self) -> usize {
        0
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
