//! One TCP connection: the transmission control block and the event processing of RFC 9293
//! section 3.10, with the retransmission timer (RFC 6298), NewReno (RFC 5681, 6582), window
//! scaling (RFC 7323), delayed ACKs, Nagle, zero-window probes and RFC 5961's challenge ACKs.
//!
//! A [`Conn`] is sans-I/O: [`Conn::on_segment`] takes a parsed segment and its payload
//! buffer, [`Conn::on_timer`] the time; [`Conn::next_segment`] says what to send next (the
//! caller builds the frame, copying the payload out of the send queue with
//! [`Conn::copy_payload`]). Data never leaves pool buffers: received payloads are queued as
//! the buffers they arrived in, and the send queue is buffers too.

use std::net::SocketAddrV4;

use super::autotune::{Look, RcvSpace};
use super::cc::{AckAction, DupAckAction, NewReno};
use super::memory::PoolLevel;
use super::queue::{ChainQueue, Cursor, Ooo, OooInsert};
use super::rtt::Rtt;
use super::sack::Scoreboard;
use super::seq::Seq;
use super::{Buffer, BufferSizes, CloseReason, TcpConfig, TcpCounters};
use crate::Instant;
use crate::buf::{BufIdx, BufferPool, set_window};

/// RFC 9293's connection states (LISTEN is a listener, not a connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Our SYN is sent; waiting for the peer's.
    SynSent,
    /// The peer's SYN arrived and ours is sent; waiting for its ACK.
    SynReceived,
    /// Data flows both ways.
    Established,
    /// We closed; our FIN is not yet acknowledged.
    FinWait1,
    /// We closed and our FIN is acknowledged; waiting for the peer's FIN.
    FinWait2,
    /// The peer closed; we may still send.
    CloseWait,
    /// Both closed at once; waiting for the ACK of our FIN.
    Closing,
    /// The peer closed, then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Both closed; waiting out old duplicates (2·MSL).
    TimeWait,
    /// Gone.
    Closed,
}

impl State {
    /// Whether the handshake completed (RFC 9293's synchronized states).
    pub fn synchronized(self) -> bool {
        !matches!(self, State::SynSent | State::SynReceived | State::Closed)
    }
}

/// A received segment's header, parsed and checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegIn {
    /// Sequence number.
    pub seq: Seq,
    /// Acknowledgement number, when the ACK flag is set.
    pub ack: Option<Seq>,
    /// Window field (unscaled).
    pub wnd: u16,
    /// SYN flag.
    pub syn: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// MSS option.
    pub mss: Option<u16>,
    /// Window-scale option.
    pub wscale: Option<u8>,
    /// SACK-permitted option (SYNs).
    pub sack_perm: bool,
    /// SACK blocks (RFC 2018), as many as the option carried.
    pub sack: [Option<(Seq, Seq)>; 3],
    /// Timestamps option (RFC 7323): `(TSval, TSecr)`.
    pub ts: Option<(u32, u32)>,
    /// Payload bytes.
    pub len: u32,
}

impl SegIn {
    /// Length in sequence space (payload, SYN and FIN).
    pub fn seq_len(&self) -> u32 {
        self.len + u32::from(self.syn) + u32::from(self.fin)
    }
}

/// A segment to send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegOut {
    /// Sequence number.
    pub seq: Seq,
    /// Acknowledgement number (the ACK flag), absent only on a SYN or a bare RST.
    pub ack: Option<Seq>,
    /// Window field (already scaled).
    pub wnd: u16,
    /// SYN flag.
    pub syn: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// PSH flag.
    pub psh: bool,
    /// MSS option (SYNs).
    pub mss: Option<u16>,
    /// Window-scale option (SYNs).
    pub wscale: Option<u8>,
    /// SACK-permitted option (SYNs).
    pub sack_perm: bool,
    /// SACK blocks of what is held out of order.
    pub sack: [Option<(Seq, Seq)>; 3],
    /// Timestamps option: `(TSval, TSecr)`.
    pub ts: Option<(u32, u32)>,
    /// A hole resent in SACK recovery.
    pub rexmit: bool,
    /// Payload: `len` bytes starting `off` bytes into the send queue.
    pub data_off: u32,
    /// Payload length.
    pub data_len: u32,
}

/// The delayed-ACK timeout (RFC 9293 allows up to 500 ms; Linux's floor is 40 ms).
const DELAYED_ACK_US: u32 = 40_000;
/// In-order segments a new connection acknowledges at once before it delays its ACKs
/// (Linux's quick-ACK mode, `TCP_MAX_QUICKACKS`): a peer's slow start grows without
/// waiting on delayed ACKs, and a short response that a sender holds back under Nagle
/// behind its first segment (a header, then a body) does not wait 40 ms for the ACK.
const QUICK_ACKS: u8 = 16;
/// Retransmissions of a SYN before the connection attempt fails (Linux: 6).
const SYN_RETRIES: u8 = 6;
/// How much older than TS.Recent (in our peers' timestamp ticks, milliseconds on Linux) a
/// segment's timestamp may be before PAWS refuses it (see `segment`).
const PAWS_TOLERANCE_TICKS: i32 = 200;
/// How often a connection whose window the pool's level holds down looks at the pool again
/// ([`super::memory`]): 10 ms.
const CLAMP_RECHECK_US: u64 = 10_000;
/// Doublings of [`CLAMP_RECHECK_US`] at most: 10 ms × 2⁷ ≈ 1.3 s.
const CLAMP_BACKOFF_MAX: u8 = 7;
/// Retransmissions of data before the connection is dropped (Linux's `tcp_retries2`).
const DATA_RETRIES: u8 = 15;

/// One connection's transmission control block.
///
/// Invariants: `snd_una <= snd_nxt <= snd_max`; the send queue's first byte is sequence
/// number `snd_una` once our SYN is acknowledged (`iss + 1` before); the receive queue holds
/// exactly the bytes before `rcv_nxt` the application has not read, the out-of-order queue
/// bytes after it; the retransmission timer runs exactly when `snd_una != snd_max`.
#[derive(Debug)]
pub struct Conn {
    /// Our address.
    pub local: SocketAddrV4,
    /// The peer's address.
    pub remote: SocketAddrV4,
    state: State,
    // ---- send sequence space
    iss: Seq,
    snd_una: Seq,
    snd_nxt: Seq,
    snd_max: Seq,
    snd_wnd: u32,
    max_snd_wnd: u32,
    snd_wl1: Seq,
    snd_wl2: Seq,
    smss: u16,
    /// The most the path to the peer carries, as a router told us (`u16::MAX`: no word).
    path_mss: u16,
    snd_wscale: u8,
    rcv_wscale: u8,
    tx: ChainQueue,
    tx_cursor: Cursor,
    snd_buf: u32,
    // ---- receive sequence space
    irs: Seq,
    rcv_nxt: Seq,
    rcv_adv: Seq,
    rcv_buf: u32,
    /// The pool's level when this connection last looked (arriving payload, a send, a
    /// read): it caps what the window offers and the send queue takes ([`super::memory`]).
    pool_level: PoolLevel,
    /// While the pool's level holds the window below the buffer: when to look at the pool
    /// again and announce the window it then allows. A peer shut out by a clamped window
    /// would otherwise learn of the room only from its persist probes, whose backoff grows
    /// to a minute.
    clamp_at: Option<Instant>,
    /// Looks at the pool that found the window still held, in a row: each doubles the wait
    /// before the next (a connection nobody reads, beside a pool others hold, is looked at
    /// once a second, not a hundred times).
    clamp_backoff: u8,
    /// The receive-buffer tuner's measurement ([`super::autotune`]).
    rcv_space: RcvSpace,
    /// The bytes autotuning added to this connection's buffers as the table last
    /// counted them (`Tcp::finish`).
    tuned_accounted: u32,
    rx: ChainQueue,
    ooo: Ooo,
    ooo_fin: Option<Seq>,
    /// The SACK blocks our ACKs carry (the run of the latest out-of-order arrival first).
    sack_out: [(Seq, Seq); 3],
    sack_out_n: u8,
    /// A duplicate received (RFC 2883 DSACK): the first SACK block of our next ACK, while
    /// `flags.dsack_out`.
    dsack: (Seq, Seq),
    // ---- options
    /// The peer's latest timestamp worth echoing (RFC 7323 TS.Recent).
    ts_recent: u32,
    /// The acknowledgement number of the last ACK we sent.
    last_ack_sent: Seq,
    /// The scoreboard: ranges above `snd_una` the peer reported holding.
    sacked: Scoreboard,
    /// In SACK recovery, where the search for the next hole to resend starts.
    high_rxt: Seq,
    /// Segments resent in the current (or last) recovery that no DSACK has yet shown the
    /// peer already had; when DSACKs bring it to zero the recovery was spurious.
    undo_retrans: u16,
    /// Our timestamp on the first segment the current recovery resent (with
    /// `flags.eifel_armed`): an ACK past it echoing an older one was sent for the original,
    /// so nothing was lost (RFC 3522, Eifel detection).
    rxt_ts: u32,
    /// When (milliseconds, wrapping) the last challenge or out-of-window ACK went.
    last_oow_ms: u16,
    // ---- control
    rtt: Rtt,
    cc: NewReno,
    rtt_probe: Option<(Seq, Instant)>,
    rto_at: Option<Instant>,
    /// The early-recovery deadline (RFC 8985's probe timeout, 2·SRTT + 2 ms): with no ACK
    /// advancing by then, a tail-loss probe goes out, or — in SACK recovery — the holes
    /// already resent are taken as lost again. Set only while data is outstanding.
    early_at: Option<Instant>,
    /// Early timeouts since an ACK last advanced (each doubles the next).
    early_backoff: u8,
    ack_at: Option<Instant>,
    persist_at: Option<Instant>,
    /// Keepalive (RFC 1122 4.2.3.6): when the next probe is due, if keepalive is on.
    keepalive_at: Option<Instant>,
    /// Keepalive probes sent since the peer was last heard from.
    keepalive_probes: u8,
    tw_at: Option<Instant>,
    retries: u8,
    /// Segments sent again (timer, duplicate ACKs, SACK holes), for `tcp_info`.
    retransmits: u32,
    unacked_segs: u8,
    /// In-order segments still to be acknowledged at once ([`QUICK_ACKS`] at the start).
    quick_acks: u8,
    flags: Flags,
    error: Option<CloseReason>,
    /// Who owns it: the application, or a listener until it is accepted.
    pub(crate) accept: Accept,
    /// The earliest deadline this connection has in the timer queue.
    pub(crate) timer_armed: Option<Instant>,
    /// On the table's list of connections to flush.
    pub(crate) out_queued: bool,
}

/// Who owns a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Accept {
    /// The application (it connected, or accepted it).
    Owned,
    /// Listener `0`'s, in its handshake.
    HalfOpen(u32),
    /// Listener `0`'s, established and waiting in its accept queue.
    Ready(u32),
}

/// Booleans of a connection, one byte each (kept together for the size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Flags {
    /// The last send took less than the buffer allowed because the pool was short (an
    /// episode of `pool_limited_sends` is under way).
    pool_limited: bool,
    /// The application will send no more: a FIN follows the queue.
    fin_queued: bool,
    /// Our FIN is acknowledged.
    fin_acked: bool,
    /// The peer's FIN is in: the stream ends after the receive queue.
    rx_fin: bool,
    /// Send an ACK at the next chance.
    ack_now: bool,
    /// Resend the first unacknowledged segment (fast retransmit, partial ACK).
    retransmit_one: bool,
    /// Send one byte beyond a zero window (the persist timer fired).
    probe: bool,
    /// Send a tail-loss probe (the early timer fired outside recovery).
    tail_probe: bool,
    /// The early timer acted (a tail-loss probe, or holes taken as lost) and no ACK has
    /// advanced since: it does not act again until one does, and a SACK now showing a hole
    /// means the hole is lost (it was sent 2·SRTT ago or more).
    early_fired: bool,
    /// Keepalive is on.
    keepalive: bool,
    /// Send a keepalive probe.
    keepalive_probe: bool,
    /// Send a RST and close.
    rst: bool,
    /// Nagle off.
    nodelay: bool,
    /// The application closed its handle: free the connection when it is closed.
    orphan: bool,
    /// Our window scale option was offered (on a SYN we sent).
    ws_offered: bool,
    /// The application set the receive buffer: it is not autotuned.
    rcv_buf_set: bool,
    /// The application set the send buffer: it is not autotuned.
    snd_buf_set: bool,
    /// Both sides agreed to SACK.
    sack_ok: bool,
    /// Both sides agreed to timestamps.
    ts_ok: bool,
    /// Our next ACK carries `dsack` first.
    dsack_out: bool,
    /// `rxt_ts` holds the first resend of this recovery.
    eifel_armed: bool,
    /// `last_oow_ms` holds when the last challenge or out-of-window ACK went.
    oow_acked: bool,
    /// The path reorders (a recovery proved spurious): losses are found by time only,
    /// not by three segments' worth of SACKs (RACK's answer to reordering, coarsely).
    reordering: bool,
    /// A router said the path is narrower than [`super::MIN_PMTU`]: segments go without
    /// don't-fragment, sized for `MIN_PMTU`, and routers cut them (Linux locks such a
    /// path's MTU the same way).
    may_fragment: bool,
}

impl Conn {
    fn new(
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: Seq,
        state: State,
        cfg: &TcpConfig,
    ) -> Conn {
        Conn {
            local,
            remote,
            state,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: Seq(0),
            snd_wl2: Seq(0),
            smss: 536,
            path_mss: u16::MAX,
            snd_wscale: 0,
            rcv_wscale: 0,
            tx: ChainQueue::default(),
            tx_cursor: Cursor::default(),
            snd_buf: cfg.snd_buf,
            irs: Seq(0),
            rcv_nxt: Seq(0),
            rcv_adv: Seq(0),
            rcv_buf: cfg.rcv_buf,
            pool_level: PoolLevel::Ample,
            clamp_at: None,
            clamp_backoff: 0,
            rcv_space: RcvSpace::default(),
            tuned_accounted: 0,
            rx: ChainQueue::default(),
            ooo: Ooo::default(),
            ooo_fin: None,
            sack_out: [(Seq(0), Seq(0)); 3],
            sack_out_n: 0,
            dsack: (Seq(0), Seq(0)),
            ts_recent: 0,
            last_ack_sent: Seq(0),
            sacked: Scoreboard::default(),
            high_rxt: iss,
            undo_retrans: 0,
            rxt_ts: 0,
            last_oow_ms: 0,
            rtt: Rtt::default(),
            cc: NewReno::new(536),
            rtt_probe: None,
            rto_at: None,
            early_at: None,
            early_backoff: 0,
            ack_at: None,
            persist_at: None,
            keepalive_at: None,
            keepalive_probes: 0,
            tw_at: None,
            retries: 0,
            retransmits: 0,
            unacked_segs: 0,
            quick_acks: QUICK_ACKS,
            flags: Flags {
                nodelay: cfg.nodelay,
                ..Flags::default()
            },
            error: None,
            accept: Accept::Owned,
            timer_armed: None,
            out_queued: false,
        }
    }

    /// An active open: SYN-SENT, with the SYN ready to go.
    pub fn active(local: SocketAddrV4, remote: SocketAddrV4, iss: Seq, cfg: &TcpConfig) -> Conn {
        let mut c = Conn::new(local, remote, iss, State::SynSent, cfg);
        c.rcv_wscale = c.offered_shift(cfg);
        c.flags.ws_offered = true;
        c
    }

    /// A passive open: the listener's SYN `seg` from `remote` makes a SYN-RECEIVED
    /// connection with the SYN-ACK ready to go.
    pub fn passive(
        local: SocketAddrV4,
        remote: SocketAddrV4,
        seg: &SegIn,
        iss: Seq,
        sizes: BufferSizes,
        cfg: &TcpConfig,
    ) -> Conn {
        let mut c = Conn::new(local, remote, iss, State::SynReceived, cfg);
        c.snd_buf = sizes.send;
        c.rcv_buf = sizes.recv;
        c.flags.rcv_buf_set = sizes.recv_set;
        c.flags.snd_buf_set = sizes.send_set;
        c.take_syn_options(seg, cfg);
        c.irs = seg.seq;
        c.rcv_nxt = seg.seq.add(1);
        c.rcv_adv = c.rcv_nxt;
        c.snd_wnd = u32::from(seg.wnd); // never scaled on a SYN
        c.max_snd_wnd = c.snd_wnd;
        c.snd_wl1 = seg.seq;
        c.snd_wl2 = iss;
        c
    }

    /// A connection made from a returning SYN cookie (RFC 4987): ESTABLISHED at once, our
    /// ISN the cookie, the peer's `peer_isn` (the pair `isns`), the MSS the cookie encoded;
    /// no window scaling, SACK or timestamps (a cookie cannot remember them). `ack` is the
    /// peer's segment that brought the cookie back; `sizes` the listener's buffers.
    pub(crate) fn from_cookie(
        local: SocketAddrV4,
        remote: SocketAddrV4,
        (iss, peer_isn): (Seq, Seq),
        mss: u16,
        ack: &SegIn,
        sizes: BufferSizes,
        cfg: &TcpConfig,
    ) -> Conn {
        let mut c = Conn::new(local, remote, iss, State::Established, cfg);
        c.snd_buf = sizes.send;
        c.rcv_buf = sizes.recv;
        c.flags.rcv_buf_set = sizes.recv_set;
        c.flags.snd_buf_set = sizes.send_set;
        c.smss = mss;
        c.cc = NewReno::new(mss);
        c.cc.algorithm = cfg.congestion;
        c.snd_una = iss.add(1);
        c.snd_nxt = c.snd_una;
        c.snd_max = c.snd_una;
        c.snd_wnd = u32::from(ack.wnd);
        c.max_snd_wnd = c.snd_wnd;
        c.snd_wl1 = ack.seq;
        c.snd_wl2 = c.snd_una;
        c.irs = peer_isn;
        c.rcv_nxt = peer_isn.add(1);
        // The window our cookie SYN-ACK offered.
        c.rcv_adv = c.rcv_nxt.add(c.rcv_buf.min(0xffff));
        c.high_rxt = c.snd_una;
        c
    }

    /// The window scale to offer: enough for the buffer, or for what autotuning may grow it
    /// to unless the application chose the buffer.
    fn offered_shift(&self, cfg: &TcpConfig) -> u8 {
        if self.flags.rcv_buf_set {
            window_shift(self.rcv_buf)
        } else {
            window_shift(self.rcv_buf.max(cfg.rcv_buf_max))
        }
    }

    fn take_syn_options(&mut self, seg: &SegIn, cfg: &TcpConfig) {
        let ours = cfg.mss;
        self.smss = seg
            .mss
            .map_or(536, |m| m.max(64))
            .min(ours)
            .min(self.path_mss);
        self.cc = NewReno::new(self.smss);
        self.cc.algorithm = cfg.congestion;
        // Offered on every SYN we send when configured; agreed when the peer's SYN has it.
        self.flags.sack_ok = cfg.sack && seg.sack_perm;
        self.cc.sack = self.flags.sack_ok;
        self.flags.ts_ok = cfg.timestamps && seg.ts.is_some();
        if let Some((tsval, _)) = seg.ts {
            self.ts_recent = tsval;
        }
        match seg.wscale {
            Some(s) if self.state == State::SynReceived || self.flags.ws_offered => {
                self.snd_wscale = s.min(14);
                if self.state == State::SynReceived {
                    self.rcv_wscale = self.offered_shift(cfg);
                    self.flags.ws_offered = true;
                }
            }
            _ => {
                self.snd_wscale = 0;
                self.rcv_wscale = 0;
                self.flags.ws_offered = false;
            }
        }
    }

    /// The state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The peer's address.
    pub fn remote(&self) -> SocketAddrV4 {
        self.remote
    }

    /// Why the connection ended, if it ended badly.
    pub fn error(&self) -> Option<CloseReason> {
        self.error
    }

    /// Bytes the application can read now.
    pub fn readable(&self) -> u32 {
        self.rx.bytes()
    }

    /// Whether the peer's FIN is in and every byte before it has been read.
    pub fn at_eof(&self) -> bool {
        self.flags.rx_fin && self.rx.is_empty()
    }

    /// Bytes the application may still queue for sending.
    pub fn send_room(&self) -> u32 {
        self.snd_buf.saturating_sub(self.tx.bytes())
    }

    /// The size of buffer `which`.
    pub fn buffer(&self, which: Buffer) -> u32 {
        match which {
            Buffer::Send => self.snd_buf,
            Buffer::Recv => self.rcv_buf,
        }
    }

    /// Sets buffer `which` to `bytes` (see [`super::buffer_size`]). A smaller send buffer
    /// keeps what is queued and takes no more until it drains below; a smaller receive
    /// buffer never takes back window already offered (the right edge does not move left).
    /// The window scale was agreed on the SYNs, so a receive buffer grown past what it can
    /// express offers at most 65,535 << scale.
    pub fn set_buffer(&mut self, which: Buffer, bytes: u32) {
        let bytes = super::buffer_size(bytes);
        match which {
            Buffer::Send => {
                self.snd_buf = bytes;
                self.flags.snd_buf_set = true;
            }
            Buffer::Recv => {
                let before = self.rcv_window();
                self.rcv_buf = bytes;
                self.flags.rcv_buf_set = true;
                if self.state.synchronized()
                    && !self.flags.rx_fin
                    && self.rcv_window() > before.max(self.rcv_adv.since(self.rcv_nxt))
                {
                    // Grown: say so at once, a peer may be waiting on a shut window.
                    self.flags.ack_now = true;
                }
            }
        }
    }

    /// Bytes queued for sending and not yet acknowledged.
    pub fn send_queued(&self) -> u32 {
        self.tx.bytes()
    }

    /// Whether the application closed its handle.
    pub fn orphaned(&self) -> bool {
        self.flags.orphan
    }

    /// Set Nagle's algorithm off (`true`) or on.
    pub fn set_nodelay(&mut self, on: bool) {
        self.flags.nodelay = on;
    }

    /// Turn keepalive on or off at `now`: after `keepalive_idle_us` without hearing from
    /// the peer, probe every `keepalive_interval_us`; after `keepalive_probes` unanswered,
    /// the connection ends as timed out.
    pub fn set_keepalive(&mut self, on: bool, now: Instant, cfg: &TcpConfig) {
        self.flags.keepalive = on;
        self.keepalive_probes = 0;
        self.keepalive_at =
            (on && self.state.synchronized()).then(|| at(now, cfg.keepalive_idle_us));
    }

    /// The peer was heard from: the keepalive clock starts again.
    fn heard(&mut self, now: Instant, cfg: &TcpConfig) {
        if self.flags.keepalive {
            self.keepalive_probes = 0;
            self.keepalive_at = Some(at(now, cfg.keepalive_idle_us));
        }
    }

    /// What `shmnet sockets` and tests show of the connection.
    pub fn info(&self) -> super::TcpInfo {
        super::TcpInfo {
            state: self.state,
            local: self.local,
            remote: self.remote,
            cwnd: self.cc.cwnd,
            ssthresh: self.cc.ssthresh,
            srtt_us: self.rtt.srtt_us(),
            rto_us: self.rtt.rto_us(),
            snd_wnd: self.snd_wnd,
            mss: self.smss,
            snd_wscale: self.snd_wscale,
            rcv_wscale: self.rcv_wscale,
            send_queued: self.tx.bytes(),
            readable: self.rx.bytes(),
            ooo_bytes: self.ooo.bytes(),
            in_flight: self.snd_max.since(self.snd_una),
            retransmits: self.retransmits,
            sack: self.flags.sack_ok,
            timestamps: self.flags.ts_ok,
        }
    }

    // ------------------------------------------------------------------ application side

    /// Queue `data` for sending; returns the bytes taken (0 when the send buffer is full).
    ///
    /// The pool bounds it too ([`super::memory`]): under pressure a send buffer that
    /// autotuning grew takes no more than `base` (the configured size), as Linux's
    /// `sk_stream_moderate_sndbuf` cuts one back; while the pool is scarce the queue takes
    /// no more than a few segments, and while it is exhausted nothing (counted in
    /// `pool_limited_sends`). What is queued stays, but many connections cannot together
    /// take the pool.
    pub fn send<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        data: &[u8],
        base: u32,
        ctr: &mut TcpCounters,
    ) -> usize {
        let level = self.note_pool(pool);
        let buf = if self.snd_buf > base && level.under_pressure() {
            base
        } else {
            self.snd_buf
        };
        let cap = level.send_cap(self.smss);
        let n = self.tx.write(pool, data, buf.min(cap), 0);
        let limited = n < data.len() && cap < buf && self.tx.bytes() < buf;
        if limited && !self.flags.pool_limited {
            ctr.pool_limited_sends += 1;
        }
        self.flags.pool_limited = limited;
        n
    }

    /// Looks at the pool's level (one read of its free count) and keeps it for the window.
    fn note_pool<P: BufferPool + ?Sized>(&mut self, pool: &P) -> PoolLevel {
        self.pool_level = PoolLevel::of(pool);
        self.pool_level
    }

    /// The pool's level holds the window below the buffer: look again later
    /// ([`CLAMP_RECHECK_US`], doubling while it stays held, up to a second). Armed only where
    /// the stack reschedules the connection's timers afterwards (arriving data, the timer
    /// itself).
    fn arm_clamp(&mut self, now: Instant) {
        if self.clamp_at.is_none() && self.state.synchronized() && !self.flags.rx_fin {
            let wait = CLAMP_RECHECK_US << self.clamp_backoff.min(CLAMP_BACKOFF_MAX);
            self.clamp_at = Some(at(now, wait));
        }
    }

    /// Copy received bytes into `dst`; returns how many. Opens the window: a window that
    /// grew by two segments or half the buffer is announced at once.
    /// `uncached`: copied with streaming loads, the buffers' lines evicted (`recv=nc`).
    pub fn recv<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        dst: &mut [u8],
        uncached: bool,
    ) -> usize {
        let before = self.rcv_window();
        let n = self.rx.read(pool, dst, uncached);
        self.note_pool(pool);
        if n > 0 {
            self.announce_if_opened(before);
        }
        n
    }

    /// Puts `data`, bytes the application had read, back in front of what it may read next
    /// (see [`super::queue::ChainQueue::unread`]). They were received and acknowledged
    /// already: the sequence space does not move, the window offered shrinks by as much (its
    /// right edge stays where it was announced). `false`, nothing changed, when the pool has
    /// too few buffers or the connection has ended.
    pub fn unread<P: BufferPool + ?Sized>(&mut self, pool: &mut P, data: &[u8]) -> bool {
        self.state.synchronized() && self.rx.unread(pool, data)
    }

    /// The window was `before` (or what was promised, if more): announce it at once if it
    /// opened by two segments or half the buffer since (a read, the pool's room).
    fn announce_if_opened(&mut self, before: u32) {
        if self.state.synchronized() && !self.flags.rx_fin {
            let grown = self
                .rcv_window()
                .saturating_sub(before.max(self.rcv_adv.since(self.rcv_nxt)));
            if grown >= (2 * u32::from(self.smss)).min(self.rcv_buf / 2) {
                self.flags.ack_now = true;
            }
        }
    }

    /// Whether the pool's level, as last looked at, holds the window below the buffer.
    fn window_clamped(&self) -> bool {
        self.pool_level.queue_cap(self.smss) < self.rcv_buf
    }

    /// Take received bytes out as a chain of whole buffers, at most `max` bytes (but always
    /// at least one buffer): the receive of the server structure, which hands the chain to
    /// the application where the driver wrote it. Opens the window as [`Conn::recv`] does.
    pub fn recv_chain<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        max: u32,
    ) -> Option<(BufIdx, u32, u32)> {
        let before = self.rcv_window();
        let got = self.rx.detach(pool, max)?;
        self.note_pool(pool);
        self.announce_if_opened(before);
        Some(got)
    }

    /// The application will send nothing more: queue a FIN after the data.
    pub fn shutdown_write(&mut self) {
        match self.state {
            State::SynSent => self.state = State::Closed,
            State::SynReceived | State::Established => {
                self.flags.fin_queued = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.flags.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// The application closed its handle. Unread data makes it an abort (RFC 2525 2.17:
    /// the peer learns its data was not read); otherwise the connection closes in order and
    /// is freed once closed.
    pub fn close<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        self.flags.orphan = true;
        if !self.rx.is_empty() {
            self.abort(pool);
        } else {
            self.shutdown_write();
        }
    }

    /// The application closed its handle, and its FIN waits for bytes still to be queued
    /// (a spill, see [`super::spill`]): orphans the connection now. `false` if unread data
    /// makes the close an abort, which the caller does at once with [`Conn::close`].
    pub(crate) fn close_later(&mut self) -> bool {
        if !self.rx.is_empty() {
            return false;
        }
        self.flags.orphan = true;
        true
    }

    /// Nobody will take this connection (its listener is gone, or its handshake failed):
    /// reset it if it is open, and free it once closed.
    pub(crate) fn orphan_and_abort<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        self.flags.orphan = true;
        if self.state != State::Closed {
            self.abort(pool);
        }
    }

    /// Reset the connection: a RST goes out (when the peer knows of us), every buffer back.
    pub fn abort<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        if self.state.synchronized() || self.state == State::SynReceived {
            self.flags.rst = true;
        } else {
            self.enter_closed(pool, Some(CloseReason::Aborted));
        }
    }

    // ------------------------------------------------------------------ receive side

    /// The window we can offer now: buffer space left, within what the pool allows at its
    /// level when last looked at ([`super::memory`]).
    fn rcv_window(&self) -> u32 {
        // The pool's floor bounds the in-order queue only (as `take_data` does): bytes held
        // out of order must not close the window their hole is filled through.
        self.rcv_buf
            .saturating_sub(self.rx.bytes() + self.ooo.bytes())
            .min(
                self.pool_level
                    .queue_cap(self.smss)
                    .saturating_sub(self.rx.bytes()),
            )
            .min(0x3fff_ffff)
    }

    /// Process one arriving segment. `payload` is its buffer narrowed to the payload
    /// (`seg.len` bytes), or `None` when it has none; the connection takes it. Returns a
    /// RST to send when the segment gets one in answer (no connection state changes).
    pub fn on_segment<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        seg: &SegIn,
        payload: Option<BufIdx>,
        now: Instant,
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) -> Option<SegOut> {
        let mut payload = payload;
        let rst = self.segment(pool, seg, &mut payload, now, cfg, ctr);
        if let Some(b) = payload {
            pool.free(b);
        }
        rst
    }

    fn segment<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        seg: &SegIn,
        payload: &mut Option<BufIdx>,
        now: Instant,
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) -> Option<SegOut> {
        match self.state {
            // RFC 9293 3.10.7.1: for a connection that no longer exists, a RST (this one is
            // still in the table for a moment: closed in this burst, freed at its flush).
            State::Closed if seg.rst => return None,
            State::Closed => {
                ctr.no_socket += 1;
                return Some(rst_for(seg));
            }
            State::SynSent => return self.syn_sent(pool, seg, now, cfg, ctr),
            _ => {}
        }
        // PAWS (RFC 7323 5.3): a timestamp older than the last one echoed is an old
        // duplicate from a wrapped sequence space. "Older" allows PAWS_TOLERANCE_TICKS:
        // a retransmission that fills a hole carries a newer timestamp than the segments
        // still in flight behind it, and a path that reorders by a few milliseconds would
        // otherwise have those dropped; a sequence space wraps in no less than a third of a
        // second even at 100 Gbit/s, so old duplicates are still refused.
        if let (true, Some((tsval, _)), false) = (self.flags.ts_ok, seg.ts, seg.rst) {
            if (tsval.wrapping_sub(self.ts_recent) as i32) < -PAWS_TOLERANCE_TICKS {
                ctr.paws_rejected += 1;
                self.flags.ack_now = true;
                return None;
            }
        }
        // (1) Acceptability (RFC 9293 3.10.7.4): some of the segment must lie in the window.
        // What we offered, or more if the buffer has room for more (accepting beyond the
        // offer is allowed, and spares a sender that raced our window update).
        let wnd = self.rcv_adv.since(self.rcv_nxt).max(self.rcv_window());
        let seg_len = seg.seq_len();
        let end = seg.seq.add(seg_len);
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seg.seq == self.rcv_nxt,
            (0, _) => seg.seq.in_range(self.rcv_nxt, self.rcv_nxt.add(wnd)),
            (_, 0) => false,
            (_, _) => {
                seg.seq.in_range(self.rcv_nxt, self.rcv_nxt.add(wnd))
                    || end.sub(1).in_range(self.rcv_nxt, self.rcv_nxt.add(wnd))
            }
        };
        if !acceptable {
            // A retransmitted SYN while our SYN-ACK is unacknowledged: send it again.
            if self.state == State::SynReceived && seg.syn && seg.seq == self.irs {
                self.snd_nxt = self.iss;
                // Karn: the handshake's ACK may answer either SYN-ACK; time neither.
                self.rtt_probe = None;
                return None;
            }
            ctr.out_of_window += 1;
            if seg.rst {
                return None;
            }
            if seg.len == 0 && !seg.fin && !self.oow_ack_allowed(now) {
                // A pure ACK or SYN outside the window, answered once per half second at
                // most: a blind flood draws no flood of ACKs back. (Data and FINs are
                // always answered: a resent FIN in TIME-WAIT needs its ACK.)
                ctr.oow_acks_limited += 1;
                return None;
            }
            self.flags.ack_now = true;
            if seg.len > 0 && end.le(self.rcv_nxt) && self.state.synchronized() {
                self.note_duplicate(seg.seq, seg.seq.add(seg.len));
            }
            if self.state == State::TimeWait && seg.fin {
                self.tw_at = Some(at(now, cfg.time_wait_us));
            }
            // RFC 9293 3.10.7.4: with a zero receive window a segment's data is refused,
            // but its ACK still counts (a probe acknowledging what we sent, say).
            if wnd == 0 && seg.seq == self.rcv_nxt && !seg.syn && self.state.synchronized() {
                if let Some(ack) = seg.ack.filter(|a| a.ge(self.snd_una) && a.le(self.snd_max)) {
                    self.heard(now, cfg);
                    self.process_ack(pool, seg, ack, now, cfg, ctr);
                }
            }
            return None;
        }
        self.heard(now, cfg);
        // The timestamp to echo: from a segment that covers the last ACK we sent (RFC 7323
        // 4.3).
        if let (true, Some((tsval, _))) = (self.flags.ts_ok, seg.ts) {
            if seg.seq.le(self.last_ack_sent) {
                self.ts_recent = tsval;
            }
        }
        // (2) RST (RFC 5961 3.2): exactly at rcv_nxt resets, elsewhere in the window asks.
        if seg.rst {
            if seg.seq == self.rcv_nxt {
                ctr.resets_received += 1;
                let why = match self.state {
                    State::SynReceived => CloseReason::Refused,
                    State::Closing | State::LastAck | State::TimeWait => {
                        self.enter_closed(pool, None);
                        return None;
                    }
                    _ => CloseReason::Reset,
                };
                self.enter_closed(pool, Some(why));
            } else {
                self.challenge(now, ctr);
            }
            return None;
        }
        // (4) SYN in a synchronized state (RFC 5961 4.2): a challenge ACK.
        if seg.syn {
            self.challenge(now, ctr);
            return None;
        }
        // (5) ACK.
        let Some(ack) = seg.ack else {
            ctr.no_ack += 1;
            return None;
        };
        if self.state == State::SynReceived {
            if ack.gt(self.snd_una) && ack.le(self.snd_max) {
                self.state = State::Established;
                self.snd_wnd = u32::from(seg.wnd) << self.snd_wscale;
                self.max_snd_wnd = self.snd_wnd;
                self.snd_wl1 = seg.seq;
                self.snd_wl2 = ack;
                ctr.passive_opens += 1;
            } else {
                return Some(rst_for(seg));
            }
        }
        if ack.gt(self.snd_max) {
            // ACKs data we never sent (RFC 9293: ACK and drop; RFC 5961 5.2 agrees).
            ctr.ack_unsent += 1;
            self.flags.ack_now = true;
            return None;
        }
        if ack.lt(self.snd_una.sub(self.max_snd_wnd.max(1))) {
            self.challenge(now, ctr);
            return None;
        }
        self.process_ack(pool, seg, ack, now, cfg, ctr);
        if self.state == State::Closed {
            return None;
        }
        // (7) Data.
        if seg.len > 0 {
            if let Some(b) = payload.take() {
                match self.state {
                    State::Established | State::FinWait1 | State::FinWait2 => {
                        self.take_data(pool, seg, b, now, cfg, ctr);
                    }
                    _ => {
                        pool.free(b);
                        self.flags.ack_now = true;
                    }
                }
            }
        }
        // (8) FIN.
        if seg.fin {
            let fin_seq = seg.seq.add(seg.len);
            if fin_seq == self.rcv_nxt {
                self.take_fin(now, cfg);
            } else if fin_seq.gt(self.rcv_nxt) {
                self.ooo_fin = Some(fin_seq);
                self.flags.ack_now = true;
            }
        }
        None
    }

    fn syn_sent<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        seg: &SegIn,
        now: Instant,
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) -> Option<SegOut> {
        if let Some(ack) = seg.ack {
            if ack.le(self.iss) || ack.gt(self.snd_max) {
                return (!seg.rst).then(|| rst_for(seg));
            }
        }
        if seg.rst {
            if seg.ack.is_some() {
                ctr.resets_received += 1;
                self.enter_closed(pool, Some(CloseReason::Refused));
            }
            return None;
        }
        if !seg.syn {
            return None;
        }
        self.take_syn_options(seg, cfg);
        self.irs = seg.seq;
        self.rcv_nxt = seg.seq.add(1);
        self.rcv_adv = self.rcv_nxt;
        self.snd_wl1 = seg.seq;
        if let Some(ack) = seg.ack {
            self.snd_una = ack;
            self.snd_wl2 = ack;
            self.snd_wnd = u32::from(seg.wnd); // never scaled on a SYN
            self.max_snd_wnd = self.snd_wnd;
            self.rto_at = (self.snd_una != self.snd_max).then(|| at(now, self.rtt.rto_us()));
            if let Some((_, t)) = self.rtt_probe.take() {
                if self.retries == 0 {
                    self.rtt.sample(micros_since(now, t));
                }
            }
            self.retries = 0;
            self.rtt.reset_backoff();
            self.state = State::Established;
            ctr.active_opens += 1;
            self.flags.ack_now = true;
        } else {
            // Simultaneous open: SYN-RECEIVED, our SYN again with an ACK.
            self.state = State::SynReceived;
            self.snd_nxt = self.iss;
            self.snd_wnd = u32::from(seg.wnd);
        }
        None
    }

    fn process_ack<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        seg: &SegIn,
        ack: Seq,
        now: Instant,
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) {
        let wnd = u32::from(seg.wnd) << self.snd_wscale;
        if self.flags.sack_ok {
            if let Some(d) = dsack_of(&seg.sack, ack) {
                self.on_dsack(d, ctr);
            }
            ctr.sack_blocks += u64::from(self.sacked.take(&seg.sack, self.snd_una, self.snd_max));
        }
        if ack.gt(self.snd_una) {
            let flight = self.snd_max.since(self.snd_una);
            let acked = ack.since(self.snd_una);
            // The SYN and the FIN take a sequence number but no queued byte.
            let mut data = acked;
            if self.snd_una == self.iss {
                data -= 1;
            }
            let fin_seq = self.tx_base().add(self.tx.bytes());
            let fin_acked = self.flags.fin_queued && !self.flags.fin_acked && ack.gt(fin_seq);
            if fin_acked {
                data = data.saturating_sub(1);
                self.flags.fin_acked = true;
            }
            // A writer may be waiting for room (Linux's SOCK_NOSPACE).
            let queue_was_full = self.tx.bytes() + u32::from(self.smss) > self.snd_buf;
            self.tx.consume(pool, data, Some(&mut self.tx_cursor));
            self.snd_una = ack;
            if self.snd_nxt.lt(ack) {
                self.snd_nxt = ack;
            }
            self.sacked.trim(self.snd_una);
            match self.rtt_probe {
                Some((s, t)) if ack.ge(s) => {
                    self.rtt.sample(micros_since(now, t));
                    self.rtt_probe = None;
                }
                _ => self.rtt.reset_backoff(),
            }
            self.retries = 0;
            // RFC 3522 judges the first resend alone: with others out, some may be real.
            if std::mem::take(&mut self.flags.eifel_armed)
                && self.undo_retrans == 1
                && self.cc.in_recovery
                && seg
                    .ts
                    .is_some_and(|(_, ecr)| (ecr.wrapping_sub(self.rxt_ts) as i32) < 0)
            {
                // This ACK passes the first hole resent, and echoes a timestamp from before
                // the resend: the original filled it. The path reordered.
                self.spurious_recovery(ctr);
            }
            if self
                .cc
                .on_ack(ack, acked, flight, self.smss, now, self.rtt.srtt_us())
                == AckAction::RetransmitFirst
            {
                self.flags.retransmit_one = true;
                self.rtt_probe = None;
                self.retransmits = self.retransmits.wrapping_add(1);
                ctr.fast_retransmits += 1;
            }
            if queue_was_full && !self.flags.snd_buf_set {
                self.autotune_snd_buf(pool, flight, cfg, ctr);
            }
            self.flags.early_fired = false;
            if !self.cc.in_recovery
                && self.undo_retrans > 0
                && ack.gt(self.cc.recover.add(self.cc.cwnd))
            {
                // A window past the recovery's end: its resends' DSACKs would have come.
                self.undo_retrans = 0;
            }
            self.maybe_enter_sack_recovery(ctr);
            self.rto_at = (self.snd_una != self.snd_max).then(|| at(now, self.rtt.rto_us()));
            self.early_at = None;
            self.early_backoff = 0;
            self.arm_early(now);
            if fin_acked {
                match self.state {
                    State::FinWait1 => self.state = State::FinWait2,
                    State::Closing => self.enter_time_wait(now, cfg),
                    State::LastAck => {
                        self.enter_closed(pool, None);
                        return;
                    }
                    _ => {}
                }
            }
        } else if ack == self.snd_una && wnd == 0 {
            // The peer is alive and its window still shut: the persist probe was answered,
            // so the probes' timer must not count towards giving up (RFC 1122 4.2.2.17).
            self.retries = 0;
        } else if ack == self.snd_una
            && seg.len == 0
            && !seg.fin
            && wnd == self.snd_wnd
            && self.snd_max != self.snd_una
        {
            ctr.dup_acks += 1;
            let flight = self.snd_max.since(self.snd_una);
            // On a path known to reorder, duplicates are no sign of loss: time is.
            let count_dupacks = !(self.flags.sack_ok && self.flags.reordering);
            if count_dupacks
                && self.cc.on_dupack(self.snd_max, flight, self.smss)
                    == DupAckAction::FastRetransmit
            {
                self.rtt_probe = None;
                if self.flags.sack_ok {
                    // The holes are resent by the scoreboard (next_data_segment).
                    self.begin_sack_recovery();
                } else {
                    self.flags.retransmit_one = true;
                    self.retransmits = self.retransmits.wrapping_add(1);
                    ctr.fast_retransmits += 1;
                }
            } else {
                // A receiver that ACKs once per burst sends fewer duplicates than the
                // segments it holds: its SACK blocks say more (RFC 6675's IsLost).
                self.maybe_enter_sack_recovery(ctr);
            }
        } else {
            self.maybe_enter_sack_recovery(ctr);
        }
        // Window update (RFC 9293 3.10.7.4, fifth check).
        if self.snd_wl1.lt(seg.seq) || (self.snd_wl1 == seg.seq && self.snd_wl2.le(ack)) {
            self.snd_wnd = wnd;
            self.max_snd_wnd = self.max_snd_wnd.max(wnd);
            self.snd_wl1 = seg.seq;
            self.snd_wl2 = ack;
            if wnd > 0 {
                self.persist_at = None;
            }
        }
    }

    /// RFC 5961's challenge ACK, at most one per half second with the out-of-window ACKs
    /// (RFC 5961 7; Linux's per-socket `tcp_invalid_ratelimit`, which replaced the global
    /// limit whose shared counter leaked sequence numbers, CVE-2016-5696).
    fn challenge(&mut self, now: Instant, ctr: &mut TcpCounters) {
        if self.oow_ack_allowed(now) {
            ctr.challenge_acks += 1;
            self.flags.ack_now = true;
        } else {
            ctr.oow_acks_limited += 1;
        }
    }

    /// Whether an ACK for an unacceptable segment may go now (and if so, one is counted
    /// against the next half second).
    fn oow_ack_allowed(&mut self, now: Instant) -> bool {
        let ms = (now.nanos() / 1_000_000) as u16;
        if self.flags.oow_acked && ms.wrapping_sub(self.last_oow_ms) < OOW_ACK_GAP_MS {
            return false;
        }
        self.flags.oow_acked = true;
        self.last_oow_ms = ms;
        true
    }

    /// A DSACK came for `d`: if we resent it in the last recovery, that resend was not
    /// needed; when every resend of the recovery proves so, the recovery was spurious (the
    /// path reordered, nothing was lost): undo its cut, and find losses by time from now on.
    fn on_dsack(&mut self, d: (Seq, Seq), ctr: &mut TcpCounters) {
        ctr.dsacks_received += 1;
        // Only a duplicate of what this recovery resent says its resend was needless (the
        // resends lie below `high_rxt`; a network duplicate of an original beyond, or of a
        // tail probe after the recovery, says nothing of it).
        if self.undo_retrans == 0 || d.1.gt(self.high_rxt) {
            return;
        }
        // The original and the resend both arrived: the hole was late, not lost. That alone
        // says the path reorders (Linux raises its reordering degree on it too); undoing the
        // cut needs more (every resend of the recovery needless).
        self.mark_reordering(ctr);
        let segs = d.1.since(d.0).div_ceil(u32::from(self.smss.max(1))).max(1);
        self.undo_retrans = self.undo_retrans.saturating_sub(segs.min(0xffff) as u16);
        if self.undo_retrans == 0 {
            self.spurious_recovery(ctr);
        }
    }

    /// The last recovery resent nothing that was lost: undo its cut, and from now on find
    /// losses by time, not by how much arrived above a hole.
    fn spurious_recovery(&mut self, ctr: &mut TcpCounters) {
        self.flags.eifel_armed = false;
        self.undo_retrans = 0;
        if self.cc.undo() {
            self.mark_reordering(ctr);
            ctr.spurious_recoveries += 1;
        }
    }

    /// The path reorders: from now on losses are found by time only.
    fn mark_reordering(&mut self, ctr: &mut TcpCounters) {
        if !self.flags.reordering {
            self.flags.reordering = true;
            ctr.reordering_detected += 1;
        }
    }

    /// A SACK recovery begins (the controller has cut the window): holes are resent from
    /// `SND.UNA`, and what judges the episode spurious starts afresh.
    fn begin_sack_recovery(&mut self) {
        self.high_rxt = self.snd_una;
        self.undo_retrans = 0;
        self.flags.eifel_armed = false;
    }

    /// Remembers a duplicate received for the DSACK block of the next ACK (RFC 2883: the
    /// first block, naming what came twice, so the sender can tell a needless resend).
    fn note_duplicate(&mut self, start: Seq, end: Seq) {
        if self.flags.sack_ok && start.lt(end) {
            self.dsack = (start, end);
            self.flags.dsack_out = true;
        }
    }

    /// RFC 6675's other way into recovery: the peer holds three segments' worth above a
    /// hole, whether or not three duplicate ACKs said so (a SACK can ride on data).
    fn maybe_enter_sack_recovery(&mut self, ctr: &mut TcpCounters) {
        if !self.flags.sack_ok || self.cc.in_recovery {
            return;
        }
        let lost = (!self.flags.reordering && self.sacked.bytes() >= 3 * u32::from(self.smss))
            || (self.flags.early_fired && self.sacked.bytes() > 0);
        if lost && self.next_hole().is_some() {
            let flight = self.snd_max.since(self.snd_una);
            self.cc.enter_recovery(self.snd_max, flight, self.smss);
            self.begin_sack_recovery();
            self.rtt_probe = None;
            ctr.sack_recoveries += 1;
        }
    }

    fn take_data<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        seg: &SegIn,
        b: BufIdx,
        now: Instant,
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) {
        // Trim to what is new and inside the window we offered.
        let mut start = seg.seq;
        let mut len = seg.len;
        if start.lt(self.rcv_nxt) {
            let skip = self.rcv_nxt.since(start).min(len);
            self.note_duplicate(start, start.add(skip));
            // Both from the header as it is: a pool may clamp `len` when `off` moves.
            let (off, l) = (usize::from(pool.off(b)), usize::from(pool.len(b)));
            set_window(pool, b, off + skip as usize, l - skip as usize);
            start = self.rcv_nxt;
            len -= skip;
        }
        let right = self
            .rcv_nxt
            .add(self.rcv_adv.since(self.rcv_nxt).max(self.rcv_window()));
        let keep = right.since(start).min(len);
        if keep < len {
            ctr.beyond_window += 1;
            pool.set_len(b, keep as u16);
            len = keep;
        }
        if len == 0 {
            pool.free(b);
            self.flags.ack_now = true;
            return;
        }
        // The pool's level now: while it is scarce a connection queues a few segments at
        // most in order, whatever window it offered before, and nothing out of order; while
        // it is exhausted, nothing. The peer sends the rest again (our ACK says where we
        // are). Segments held out of order from before do not count against the floor: the
        // segment that fills the hole in front of them must always fit, or they never drain.
        let level = self.note_pool(pool);
        if level.reserved() && !self.ooo.is_empty() {
            // The last of the pool: what waits out of order is given up (the peer still
            // holds it, unacknowledged) rather than every connection waiting on its hole.
            ctr.ooo_pruned += 1;
            self.ooo.clear(pool);
            self.update_sack_out(pool, None);
        }
        let refused = if level.reserved() {
            true
        } else if start == self.rcv_nxt {
            // Even exhausted: what waits out of order holds buffers that only this segment
            // lets go (nothing prunes that queue; the peer may rely on what it SACKed).
            self.ooo.is_empty() && self.rx.bytes().saturating_add(len) > level.queue_cap(self.smss)
        } else {
            level.drops_out_of_order()
        };
        if self.window_clamped() {
            self.arm_clamp(now);
        }
        if refused {
            ctr.pool_drops += 1;
            pool.free(b);
            self.flags.ack_now = true;
            return;
        }
        if start == self.rcv_nxt {
            let had_ooo = !self.ooo.is_empty();
            self.rx.push(pool, b, len);
            self.rcv_nxt = self.rcv_nxt.add(len);
            while let Some((h, t, n, bufs)) = self.ooo.take_ready(pool, self.rcv_nxt) {
                self.rx.link(pool, h, t, n, bufs);
                self.rcv_nxt = self.rcv_nxt.add(n);
            }
            if had_ooo {
                self.update_sack_out(pool, None);
            }
            if !self.flags.rcv_buf_set {
                self.autotune_rcv_buf(pool, seg, now, cfg, ctr);
            }
            self.unacked_segs = self.unacked_segs.saturating_add(1);
            if had_ooo || self.unacked_segs >= 2 || self.quick_acks > 0 {
                self.quick_acks = self.quick_acks.saturating_sub(1);
                self.flags.ack_now = true;
            } else if self.ack_at.is_none() {
                self.ack_at = Some(at(now, DELAYED_ACK_US));
            }
        } else {
            let max_bufs = 2 * self.rcv_buf / u32::from(self.smss.max(64)) + 16;
            match self.ooo.insert(pool, b, start, len, max_bufs) {
                OooInsert::Held => ctr.ooo_held += 1,
                OooInsert::Duplicate => self.note_duplicate(start, start.add(len)),
                OooInsert::Dropped => ctr.ooo_dropped += 1,
            }
            self.update_sack_out(pool, Some(start));
            // A duplicate ACK tells the sender of the hole.
            self.flags.ack_now = true;
        }
        if self.ooo_fin == Some(self.rcv_nxt) {
            self.ooo_fin = None;
            self.take_fin(now, cfg);
        }
    }

    /// One look of the receive-buffer tuner ([`super::autotune`]) after in-order data.
    /// The pool bounds the growth as Linux's `tcp_mem` does: the receive queue holds a
    /// buffer per segment, so one connection's buffer may cover an eighth of the pool's
    /// buffers at most, none grows while less than half of the pool is free, and a grown
    /// one is cut back to the configured size while less than a quarter is.
    fn autotune_rcv_buf<P: BufferPool + ?Sized>(
        &mut self,
        pool: &P,
        seg: &SegIn,
        now: Instant,
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) {
        if self.pool_level.under_pressure() {
            // Cut a grown buffer back (Linux's tcp_clamp_window): the window already
            // offered stands, later ones are the configured size's.
            self.rcv_buf = self.rcv_buf.min(cfg.rcv_buf);
            return;
        }
        let smss = u32::from(self.smss);
        let by_pool = super::autotune::pool_share(pool, smss);
        let look = Look {
            taken_to: self.rcv_nxt.sub(self.rx.bytes()),
            now_ms: (now.nanos() / 1_000_000) as u32,
            rtt_ms: self.receiver_rtt_ms(seg, now),
            rcv_buf: self.rcv_buf,
            smss,
            ceiling: cfg
                .rcv_buf_max
                .min(by_pool)
                .min(0xffff << self.rcv_wscale)
                .min(super::MAX_BUFFER),
        };
        if let Some(grown) = self.rcv_space.look(look)
            && self.pool_level.may_grow()
        {
            self.rcv_buf = grown;
            ctr.rcv_buf_grown += 1;
        }
    }

    /// The send buffer's tuning, after Linux's `tcp_should_expand_sndbuf` and
    /// `tcp_sndbuf_expand`: a writer held back by a full send buffer while the congestion
    /// window had room (`flight` below it: the buffer, not the network, limited) gets a
    /// buffer of twice the window, ten segments' worth at least — bounded as the receive
    /// buffer is, by the configured ceiling and the pool.
    fn autotune_snd_buf<P: BufferPool + ?Sized>(
        &mut self,
        pool: &P,
        flight: u32,
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) {
        if flight >= self.cc.cwnd || self.cc.in_recovery {
            return;
        }
        let smss = u32::from(self.smss);
        let by_pool = super::autotune::pool_share(pool, smss);
        let want = self
            .cc
            .cwnd
            .max(10 * smss)
            .saturating_mul(2)
            .min(cfg.snd_buf_max)
            .min(by_pool)
            .min(super::MAX_BUFFER);
        if want > self.snd_buf && PoolLevel::of(pool).may_grow() {
            self.snd_buf = want;
            ctr.snd_buf_grown += 1;
        }
    }

    /// Bytes autotuning has added to the buffers (beyond the configured sizes): as last
    /// accounted, and now (which becomes the accounted figure).
    pub(crate) fn account_tuning(&mut self, cfg: &TcpConfig) -> (u32, u32) {
        let extra = |set: bool, buf: u32, base: u32| if set { 0 } else { buf.saturating_sub(base) };
        let now = extra(self.flags.snd_buf_set, self.snd_buf, cfg.snd_buf).saturating_add(extra(
            self.flags.rcv_buf_set,
            self.rcv_buf,
            cfg.rcv_buf,
        ));
        (std::mem::replace(&mut self.tuned_accounted, now), now)
    }

    /// Gives back up to `excess` bytes of what tuning added (the send buffer's first),
    /// never below the configured sizes; what is queued stays, and the window already
    /// offered stands.
    pub(crate) fn untune(&mut self, excess: u32, cfg: &TcpConfig) {
        let mut left = excess;
        for (set, buf, base) in [
            (self.flags.snd_buf_set, &mut self.snd_buf, cfg.snd_buf),
            (self.flags.rcv_buf_set, &mut self.rcv_buf, cfg.rcv_buf),
        ] {
            if !set {
                let give = buf.saturating_sub(base).min(left);
                *buf -= give;
                left -= give;
            }
        }
    }

    /// The round trip as the receiver sees it: from the timestamp the peer echoes (our
    /// clock, milliseconds), else the smoothed RTT of what we sent; 0 if neither is known.
    fn receiver_rtt_ms(&self, seg: &SegIn, now: Instant) -> u32 {
        let echoed = seg
            .ts
            .filter(|&(_, ecr)| self.flags.ts_ok && ecr != 0)
            .map(|(_, ecr)| self.tsval(now).wrapping_sub(ecr))
            .filter(|&ms| ms < 60_000);
        echoed.unwrap_or(self.rtt.srtt_us() / 1_000)
    }

    fn take_fin(&mut self, now: Instant, cfg: &TcpConfig) {
        if self.flags.rx_fin {
            self.flags.ack_now = true;
            return;
        }
        self.rcv_nxt = self.rcv_nxt.add(1);
        self.flags.rx_fin = true;
        self.flags.ack_now = true;
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                // Our FIN is acknowledged only if FIN-WAIT-2 was reached first.
                self.state = State::Closing;
            }
            State::FinWait2 => self.enter_time_wait(now, cfg),
            _ => {}
        }
    }

    fn enter_time_wait(&mut self, now: Instant, cfg: &TcpConfig) {
        self.state = State::TimeWait;
        self.rto_at = None;
        self.persist_at = None;
        self.tw_at = Some(at(now, cfg.time_wait_us));
    }

    fn enter_closed<P: BufferPool + ?Sized>(&mut self, pool: &mut P, why: Option<CloseReason>) {
        self.state = State::Closed;
        if self.error.is_none() {
            self.error = why;
        }
        self.tx.clear(pool);
        self.tx_cursor = Cursor::default();
        // What arrived in order before a reset or a timeout stays readable, then the error
        // (as Linux's `tcp_reset` purges only the write queue, and its `tcp_recvmsg` hands
        // out the receive queue before `sk_err`): a peer that writes a reply and closes
        // with input unread resets, and its reply must still be read. Out of order bytes
        // can never be, and go.
        self.ooo.clear(pool);
        self.rto_at = None;
        self.early_at = None;
        self.ack_at = None;
        self.persist_at = None;
        self.tw_at = None;
        self.keepalive_at = None;
        self.clamp_at = None;
        self.flags.ack_now = false;
        self.flags.retransmit_one = false;
    }

    /// The buffers its receive, out-of-order and send queues hold.
    pub fn queue_bufs(&self) -> (u32, u32, u32) {
        (self.rx.bufs(), self.ooo.bufs(), self.tx.bufs())
    }

    /// Free every buffer the connection holds.
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        self.tx.clear(pool);
        self.rx.clear(pool);
        self.ooo.clear(pool);
    }

    // ------------------------------------------------------------------ timers

    /// The earliest deadline of the connection's timers.
    pub fn next_timer(&self) -> Option<Instant> {
        [
            self.rto_at,
            self.early_at,
            self.ack_at,
            self.persist_at,
            self.tw_at,
            self.keepalive_at,
            self.clamp_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A router could not forward a segment of ours whole and said the path's MTU is
    /// `mtu` (ICMP "fragmentation needed", RFC 1191), quoting the segment's sequence number
    /// `seq`. Believed only if `seq` is in flight (RFC 5927 section 4.1: a blind attacker
    /// must guess it) and `mtu` is below the MTU in use; never below [`super::MIN_PMTU`]
    /// (a smaller path is sent `MIN_PMTU`-sized segments without don't-fragment). Returns
    /// whether the MSS came down; counted either way.
    ///
    /// What is in flight went in segments too large for the path, and each was dropped at
    /// the router: they are sent again now, cut to the new size, from `SND.UNA` — without
    /// the congestion response a loss earns (nothing was lost to congestion; Linux's
    /// `tcp_simple_retransmit`).
    pub fn on_frag_needed(&mut self, mtu: u16, seq: Seq, ctr: &mut TcpCounters) -> bool {
        const HEADERS: u16 = 40;
        let in_flight = self.state.synchronized() && seq.ge(self.snd_una) && seq.lt(self.snd_max);
        let mss = mtu.max(super::MIN_PMTU).saturating_sub(HEADERS);
        // A path narrower than MIN_PMTU clears don't-fragment even when the MSS is already
        // that small (the peer offered little): the segments were dropped all the same.
        let fragments = mtu < super::MIN_PMTU && !self.flags.may_fragment;
        if !in_flight || (mss >= self.smss && !fragments) {
            ctr.frag_needed_ignored += 1;
            return false;
        }
        self.smss = self.smss.min(mss);
        self.path_mss = self.smss;
        self.flags.may_fragment |= fragments;
        ctr.pmtu_lowered += 1;
        // Not congestion: out of recovery (whose pipe would count everything resent as
        // still out), the window kept, nothing to undo.
        self.cc.resend_all();
        self.undo_retrans = 0;
        self.flags.eifel_armed = false;
        self.resend_from_una();
        true
    }

    /// A destination-unreachable message `what` quoted a segment of ours with sequence
    /// number `seq` (the caller found the connection by the quote's ports and addresses).
    /// While opening (SYN-SENT), one that quotes our SYN ends the connection with the
    /// matching error, as Linux's `tcp_v4_err` does; anything else is a soft error, ignored
    /// (RFC 1122 4.2.3.9) and counted. Returns whether the connection ended.
    pub fn on_unreachable<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        what: crate::icmp::Unreachable,
        seq: Seq,
        ctr: &mut TcpCounters,
    ) -> bool {
        if self.state != State::SynSent || seq != self.iss {
            ctr.unreachable_ignored += 1;
            return false;
        }
        ctr.unreachable_aborts += 1;
        let why = match what {
            crate::icmp::Unreachable::Port => CloseReason::Refused,
            crate::icmp::Unreachable::Host => CloseReason::HostUnreachable,
            crate::icmp::Unreachable::Net => CloseReason::NetUnreachable,
        };
        self.enter_closed(pool, Some(why));
        true
    }

    /// Everything in flight goes again from `SND.UNA` (a timeout, or a path too narrow for
    /// it): no RTT sample from it (Karn), and the SACK scoreboard forgotten — after a
    /// timeout the receiver may have discarded what it SACKed (RFC 2018).
    fn resend_from_una(&mut self) {
        self.rtt_probe = None;
        self.snd_nxt = self.snd_una;
        self.flags.retransmit_one = false;
        self.sacked.clear();
        self.high_rxt = self.snd_una;
        self.retransmits = self.retransmits.wrapping_add(1);
    }

    /// A path MTU learnt for this peer by an earlier connection ([`super::paths`]): the MSS
    /// stays within it from the start, and a path narrower than [`super::MIN_PMTU`] gets
    /// segments without don't-fragment.
    pub fn limit_to_path(&mut self, mtu: u16) {
        self.path_mss = mtu.max(super::MIN_PMTU) - 40;
        self.smss = self.smss.min(self.path_mss);
        self.flags.may_fragment |= mtu < super::MIN_PMTU;
    }

    /// Whether this connection's segments may be fragmented on the way (don't-fragment
    /// off): the path is narrower than [`super::MIN_PMTU`].
    pub fn may_fragment(&self) -> bool {
        self.flags.may_fragment
    }

    /// Run the timers due at `now`.
    pub fn on_timer<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        now: Instant,
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) {
        if self.tw_at.is_some_and(|t| t <= now) {
            self.tw_at = None;
            self.enter_closed(pool, None);
            return;
        }
        if self.keepalive_at.is_some_and(|t| t <= now) {
            if self.keepalive_probes >= cfg.keepalive_probes {
                ctr.keepalive_timeouts += 1;
                self.enter_closed(pool, Some(CloseReason::TimedOut));
                return;
            }
            self.keepalive_probes += 1;
            self.flags.keepalive_probe = true;
            self.keepalive_at = Some(at(now, cfg.keepalive_interval_us));
            ctr.keepalive_probes += 1;
        }
        if self.ack_at.is_some_and(|t| t <= now) {
            self.ack_at = None;
            self.flags.ack_now = true;
        }
        if self.clamp_at.is_some_and(|t| t <= now) {
            self.clamp_at = None;
            self.recheck_clamp(pool, now);
        }
        if self.persist_at.is_some_and(|t| t <= now) {
            self.persist_at = None;
            self.flags.probe = true;
            ctr.window_probes += 1;
        }
        if self.early_at.is_some_and(|t| t <= now) {
            self.early_at = None;
            // The RTO due as well resends anyway: no probe (nor its count) beside it.
            if self.rto_at.is_none_or(|t| t > now) {
                self.early_timeout(ctr);
            }
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            self.rto_at = None;
            self.early_at = None;
            self.flags.tail_probe = false;
            self.flags.early_fired = false;
            self.undo_retrans = 0;
            self.retries = self.retries.saturating_add(1);
            let limit = if self.state.synchronized() {
                DATA_RETRIES
            } else {
                SYN_RETRIES
            };
            if self.retries > limit {
                ctr.timeouts += 1;
                self.enter_closed(pool, Some(CloseReason::TimedOut));
                return;
            }
            ctr.rto_retransmits += 1;
            let flight = self.snd_max.since(self.snd_una);
            if self.snd_wnd > 0 {
                // A probe into a zero window that times out says nothing of congestion.
                self.cc.on_timeout(flight, self.smss);
            }
            self.rtt.back_off();
            self.resend_from_una();
        }
    }

    /// The pool held the window below the buffer when last looked at: look again, and
    /// announce the window if it grew by a useful amount (as a read that opens it does).
    fn recheck_clamp<P: BufferPool + ?Sized>(&mut self, pool: &P, now: Instant) {
        if !self.state.synchronized() || self.flags.rx_fin {
            return;
        }
        let before = self.rcv_window();
        self.note_pool(pool);
        self.announce_if_opened(before);
        if self.window_clamped() {
            self.clamp_backoff = self.clamp_backoff.saturating_add(1);
            self.arm_clamp(now);
        } else {
            self.clamp_backoff = 0;
        }
    }

    /// The early timer fired: no ACK advanced for a probe timeout while data is out. In
    /// SACK recovery, a hole resent that long ago and still not acknowledged was lost again:
    /// resend the holes from `SND.UNA` (RFC 8985's RACK finds such losses by time; this is
    /// its range-granular form, with sequence order standing for send order). Outside
    /// recovery, a hole below SACKed data is lost: recover. With nothing SACKed, send a
    /// tail-loss probe (RFC 8985 7), once until an ACK advances: its SACK shows what of the
    /// tail is missing.
    fn early_timeout(&mut self, ctr: &mut TcpCounters) {
        if self.snd_una == self.snd_max || self.snd_wnd == 0 || !self.state.synchronized() {
            return;
        }
        // Until an ACK advances, each timeout doubles the next (PTO, 2·PTO, 4·PTO…; the
        // RTO bounds them), so a silent peer draws a few resends, not a storm.
        self.early_backoff = self.early_backoff.saturating_add(1).min(16);
        let recovering = self.cc.in_recovery && self.flags.sack_ok;
        if recovering && self.high_rxt.gt(self.snd_una) {
            self.high_rxt = self.snd_una;
            self.flags.early_fired = true;
            ctr.lost_retransmits += 1;
        } else if self.flags.early_fired {
            // The probe is out (or was lost): its SACK, or the RTO, comes next.
        } else if !recovering && self.flags.sack_ok && self.sacked.bytes() > 0 {
            // The peer holds data above a hole that has had 2·SRTT to arrive: lost, however
            // few segments the SACKs cover (RACK's rule, which needs no three duplicates).
            self.flags.early_fired = true;
            self.maybe_enter_sack_recovery(ctr);
        } else {
            self.flags.tail_probe = true;
            self.flags.early_fired = true;
            ctr.tail_probes += 1;
        }
    }

    /// The probe timeout: 2·SRTT plus 2 ms for a scheduled-late ACK (Linux's
    /// `tcp_schedule_loss_probe`), plus a delayed ACK's 200 ms when one segment is out, on a
    /// reordering path at least SRTT + 4·RTTVAR; doubled per timeout without an ACK, never
    /// beyond the RTO; `None` before an RTT is measured.
    fn pto_us(&self) -> Option<u32> {
        let srtt = u64::from(self.rtt.srtt_us());
        let mut pto = 2 * srtt + 2_000;
        if self.snd_max.since(self.snd_una) <= u32::from(self.smss) {
            // One segment out: the peer may hold its ACK for a delayed-ACK time (RFC 8985
            // 7.2's WCDelAckT, 200 ms; Linux adds its minimum RTO).
            pto += u64::from(super::rtt::MIN_RTO_US);
        }
        if self.flags.reordering {
            // Round trips spread by reordering: wait as long as the RTO's estimate would
            // (without its 200 ms floor) before calling a hole lost.
            pto = pto.max(srtt + 4 * u64::from(self.rtt.rttvar_us()));
        }
        let pto = pto << self.early_backoff;
        (srtt > 0).then(|| pto.min(u64::from(self.rtt.rto_us())) as u32)
    }

    /// After a segment went out: the RTO and the early timer run, if they did not already.
    fn arm_loss_timers(&mut self, now: Instant) {
        if self.rto_at.is_none() {
            self.rto_at = Some(at(now, self.rtt.rto_us()));
        }
        self.arm_early(now);
    }

    /// Arms the early timer if data is out and it is not armed.
    fn arm_early(&mut self, now: Instant) {
        if self.early_at.is_none() && self.snd_una != self.snd_max && self.state.synchronized() {
            self.early_at = self.pto_us().map(|p| at(now, p));
        }
    }

    /// The tail-loss probe (RFC 8985 7.3): the last segment sent, again (new data, when
    /// there is any the window allows, goes out by the usual path instead).
    fn tail_probe_segment(&mut self, now: Instant, smss: u32) -> Option<SegOut> {
        let base = self.tx_base();
        let fin_seq = base.add(self.tx.bytes());
        let data_end = if self.snd_max.gt(fin_seq) {
            fin_seq
        } else {
            self.snd_max
        };
        let len = data_end.since(self.snd_una.max(base)).min(smss);
        let seq = data_end.sub(len);
        let fin = self.flags.fin_queued && !self.flags.fin_acked && self.snd_max.gt(fin_seq);
        if len == 0 && !fin {
            return None;
        }
        let seg = SegOut {
            seq,
            ack: Some(self.rcv_nxt),
            wnd: self.window_field(false),
            fin,
            data_off: seq.since(base),
            data_len: len,
            ..SegOut::default()
        };
        if self.rtt_probe.is_some_and(|(end, _)| end.gt(seq)) {
            // Karn: the timed segment is sent again; its ACK times nothing.
            self.rtt_probe = None;
        }
        self.retransmits = self.retransmits.wrapping_add(1);
        self.ack_sent();
        self.arm_early(now);
        Some(seg)
    }

    // ------------------------------------------------------------------ send side

    /// The sequence number of the send queue's first byte.
    fn tx_base(&self) -> Seq {
        if self.snd_una == self.iss {
            self.iss.add(1)
        } else {
            self.snd_una
        }
    }

    fn window_field(&mut self, syn: bool) -> u16 {
        let wnd = self.rcv_window();
        if syn {
            // Never scaled on a SYN; what it offers is a promise like any other.
            let field = wnd.min(0xffff);
            self.rcv_adv = self.rcv_adv.max(self.rcv_nxt.add(field));
            return field as u16;
        }
        // Never move the right edge back, and move it forward only by a useful amount:
        // a full segment or half the buffer (the receiver's silly-window avoidance, RFC
        // 9293 3.8.6.2.2).
        let promised = self.rcv_adv.since(self.rcv_nxt);
        let step = u32::from(self.smss).min(self.rcv_buf / 2);
        let wnd = if wnd >= promised.saturating_add(step) {
            wnd
        } else {
            promised
        };
        let field = (wnd >> self.rcv_wscale).min(0xffff);
        self.rcv_adv = self.rcv_adv.max(self.rcv_nxt.add(field << self.rcv_wscale));
        field as u16
    }

    fn ack_sent(&mut self) {
        self.flags.ack_now = false;
        self.ack_at = None;
        self.unacked_segs = 0;
    }

    /// The next segment to send, if any, with the connection's state advanced as if it was
    /// sent. The payload is copied with [`Conn::copy_payload`].
    pub fn next_segment(&mut self, now: Instant, cfg: &TcpConfig) -> Option<SegOut> {
        if self.flags.rst {
            self.flags.rst = false;
            let seg = SegOut {
                seq: self.snd_nxt,
                ack: self.state.synchronized().then_some(self.rcv_nxt),
                rst: true,
                ..SegOut::default()
            };
            self.state = State::Closed;
            if self.error.is_none() {
                self.error = Some(CloseReason::Aborted);
            }
            return Some(seg);
        }
        match self.state {
            State::Closed => None,
            State::SynSent | State::SynReceived => {
                if self.snd_nxt != self.iss {
                    // An ACK owed in SYN-RECEIVED (a challenge ACK, or the answer to an
                    // unacceptable segment): <SEQ=SND.NXT><ACK=RCV.NXT>.
                    if self.state == State::SynReceived && self.flags.ack_now {
                        let seg = SegOut {
                            seq: self.snd_nxt,
                            ack: Some(self.rcv_nxt),
                            wnd: self.window_field(true),
                            ..SegOut::default()
                        };
                        self.ack_sent();
                        return Some(seg);
                    }
                    return None;
                }
                let synack = self.state == State::SynReceived;
                let seg = SegOut {
                    seq: self.iss,
                    ack: synack.then_some(self.rcv_nxt),
                    wnd: self.window_field(true),
                    syn: true,
                    mss: Some(cfg.mss),
                    wscale: self.flags.ws_offered.then_some(self.rcv_wscale),
                    sack_perm: if synack { self.flags.sack_ok } else { cfg.sack },
                    ts: if synack {
                        self.flags.ts_ok.then(|| (self.tsval(now), self.ts_recent))
                    } else {
                        cfg.timestamps.then(|| (self.tsval(now), 0))
                    },
                    ..SegOut::default()
                };
                if synack {
                    self.last_ack_sent = self.rcv_nxt;
                }
                self.snd_nxt = self.iss.add(1);
                self.snd_max = self.snd_max.max(self.snd_nxt);
                if self.rtt_probe.is_none() && self.retries == 0 {
                    self.rtt_probe = Some((self.snd_nxt, now));
                }
                if self.rto_at.is_none() {
                    self.rto_at = Some(at(now, self.rtt.rto_us()));
                }
                if synack {
                    self.ack_sent();
                }
                Some(seg)
            }
            _ => {
                let mut seg = self.next_data_segment(now)?;
                if !seg.rst {
                    self.decorate(&mut seg, now);
                }
                Some(seg)
            }
        }
    }

    /// Our timestamp clock: milliseconds, offset per connection.
    fn tsval(&self, now: Instant) -> u32 {
        // The clock's offset is per connection, drawn from the ISN (kept nowhere: it is
        // recomputed, to keep the connection small).
        let offset = self.iss.0.wrapping_mul(0x9e37_79b9).rotate_left(16);
        ((now.nanos() / 1_000_000) as u32).wrapping_add(offset)
    }

    /// Bytes of options a segment we send now carries (timestamps, SACK blocks), padded to
    /// a multiple of four: a data segment carries that much less payload than the MSS.
    fn option_bytes(&self) -> u32 {
        let mut n = 0;
        if self.flags.ts_ok {
            n += 10;
        }
        let blocks = (self.sack_out_n + u8::from(self.flags.dsack_out)).min(3);
        if self.flags.sack_ok && blocks > 0 {
            n += 2 + 8 * u32::from(blocks);
        }
        n.div_ceil(4) * 4
    }

    /// Put the options on a segment of a synchronized connection.
    fn decorate(&mut self, seg: &mut SegOut, now: Instant) {
        if self.flags.ts_ok {
            seg.ts = Some((self.tsval(now), self.ts_recent));
        }
        if self.flags.sack_ok {
            let dsack = std::mem::take(&mut self.flags.dsack_out);
            let blocks = std::iter::once(self.dsack).filter(|_| dsack).chain(
                self.sack_out[..usize::from(self.sack_out_n)]
                    .iter()
                    .copied(),
            );
            for (slot, b) in seg.sack.iter_mut().zip(blocks) {
                *slot = Some(b);
            }
        }
        if let Some(a) = seg.ack {
            self.last_ack_sent = a;
        }
    }

    /// Recompute the SACK blocks our ACKs carry: the run holding `latest` first (RFC 2018:
    /// the most recent arrival), then the others, highest first.
    fn update_sack_out<P: BufferPool + ?Sized>(&mut self, pool: &P, latest: Option<Seq>) {
        if !self.flags.sack_ok {
            return;
        }
        let mut runs = [(Seq(0), Seq(0)); 8];
        let n = self.ooo.ranges_into(pool, &mut runs);
        let runs = &mut runs[..n];
        runs.reverse();
        if let Some(l) = latest {
            if let Some(i) = runs.iter().position(|r| l.in_range(r.0, r.1)) {
                runs[..=i].rotate_right(1);
            }
        }
        let k = runs.len().min(3);
        self.sack_out[..k].copy_from_slice(&runs[..k]);
        self.sack_out_n = k as u8;
    }

    /// The next hole to resend in SACK recovery: from `high_rxt` (or `snd_una`).
    fn next_hole(&self) -> Option<(Seq, Seq)> {
        self.sacked.next_hole(self.high_rxt.max(self.snd_una))
    }

    /// Bytes in flight by RFC 6675's reckoning: sent and not acknowledged, less what the
    /// peer holds and what is lost (holes below the highest SACK not yet resent).
    fn pipe(&self) -> u32 {
        let out = self.snd_max.since(self.snd_una);
        let lost = self.sacked.lost_after(self.high_rxt.max(self.snd_una));
        out.saturating_sub(self.sacked.bytes() + lost)
    }

    fn next_data_segment(&mut self, now: Instant) -> Option<SegOut> {
        if std::mem::take(&mut self.flags.keepalive_probe) {
            // RFC 1122: an old sequence number (one below SND.UNA), no data; the peer
            // answers with an ACK of where it is.
            let seg = SegOut {
                seq: self.snd_una.sub(1),
                ack: Some(self.rcv_nxt),
                wnd: self.window_field(false),
                ..SegOut::default()
            };
            self.ack_sent();
            return Some(seg);
        }
        let smss = u32::from(self.smss)
            .saturating_sub(self.option_bytes())
            .max(1);
        let base = self.tx_base();
        let queued = self.tx.bytes();
        let fin_seq = base.add(queued);
        let fin_pending = self.flags.fin_queued && !self.flags.fin_acked;
        if self.flags.retransmit_one {
            self.flags.retransmit_one = false;
            let off = self.snd_una.since(base);
            let len = queued.saturating_sub(off).min(smss);
            let fin = fin_pending && self.snd_una.add(len) == fin_seq && self.snd_max.gt(fin_seq);
            if len > 0 || fin {
                let seg = SegOut {
                    seq: self.snd_una,
                    ack: Some(self.rcv_nxt),
                    wnd: self.window_field(false),
                    fin,
                    data_off: off,
                    data_len: len,
                    ..SegOut::default()
                };
                self.ack_sent();
                self.arm_loss_timers(now);
                return Some(seg);
            }
        }
        // A tail-loss probe of new data: the room the peer's window has for it.
        let mut force_one = None;
        if std::mem::take(&mut self.flags.tail_probe) {
            let unsent = queued.saturating_sub(self.snd_nxt.since(base).min(queued));
            let in_window = self
                .snd_wnd
                .saturating_sub(self.snd_nxt.since(self.snd_una));
            if unsent > 0 && in_window >= unsent.min(smss) {
                // New data makes the better probe: the usual path below sends one segment
                // whatever the congestion window says.
                force_one = Some(in_window);
            } else if let Some(seg) = self.tail_probe_segment(now, smss) {
                return Some(seg);
            }
        }
        let sack_recovery = self.flags.sack_ok && self.cc.in_recovery;
        if sack_recovery && self.pipe() < self.cc.cwnd {
            // RFC 6675: resend the next hole below the highest SACKed byte.
            if let Some((hs, he)) = self.next_hole() {
                let off = hs.since(base);
                let len = he.since(hs).min(smss).min(queued.saturating_sub(off));
                if len > 0 {
                    self.high_rxt = hs.add(len);
                    self.rtt_probe = None;
                    if self.undo_retrans == 0 && self.flags.ts_ok {
                        self.rxt_ts = self.tsval(now);
                        self.flags.eifel_armed = true;
                    }
                    self.undo_retrans = self.undo_retrans.saturating_add(1);
                    let seg = SegOut {
                        seq: hs,
                        ack: Some(self.rcv_nxt),
                        wnd: self.window_field(false),
                        data_off: off,
                        data_len: len,
                        rexmit: true,
                        ..SegOut::default()
                    };
                    self.retransmits = self.retransmits.wrapping_add(1);
                    self.ack_sent();
                    self.arm_loss_timers(now);
                    return Some(seg);
                }
            }
        }
        let off = self.snd_nxt.since(base).min(queued);
        let unsent = queued - off;
        let flight = if sack_recovery {
            self.pipe()
        } else {
            self.snd_nxt.since(self.snd_una)
        };
        let wnd = self.snd_wnd.min(self.cc.cwnd);
        let mut usable = wnd.saturating_sub(flight);
        let probe = std::mem::take(&mut self.flags.probe);
        if probe && usable == 0 && unsent > 0 {
            usable = 1;
        }
        if let Some(in_window) = force_one {
            usable = usable.max(smss.min(in_window));
        }
        let mut len = unsent.min(smss).min(usable);
        if len > 0 && len < smss && !probe && force_one.is_none() {
            // Nagle (RFC 896): hold a short segment while data is unacknowledged; and the
            // sender's silly-window avoidance (RFC 9293 3.8.6.2.1): do not send a short
            // segment cut by the window unless it is half the largest window seen.
            let nagle = !self.flags.nodelay && flight > 0;
            let sws = len < unsent && len < self.max_snd_wnd / 2;
            if nagle || sws {
                len = 0;
            }
        }
        let fin = fin_pending && off + len == queued && self.snd_nxt.add(len) == fin_seq;
        if len == 0 && !fin {
            // Nothing in flight and data held back (a zero window, or one too small to be
            // worth a segment): the persist timer sends anyway when it fires, so neither a
            // lost window update nor a small window can stall the connection.
            if unsent > 0 && flight == 0 && self.persist_at.is_none() {
                self.persist_at = Some(at(now, self.rtt.rto_us().max(super::rtt::MIN_RTO_US)));
            }
            if self.flags.ack_now {
                let seg = SegOut {
                    seq: self.snd_nxt,
                    ack: Some(self.rcv_nxt),
                    wnd: self.window_field(false),
                    ..SegOut::default()
                };
                self.ack_sent();
                return Some(seg);
            }
            return None;
        }
        let seq = self.snd_nxt;
        let new_data = seq.ge(self.snd_max);
        let seg = SegOut {
            seq,
            ack: Some(self.rcv_nxt),
            wnd: self.window_field(false),
            fin,
            psh: len > 0 && len == unsent,
            data_off: off,
            data_len: len,
            ..SegOut::default()
        };
        self.snd_nxt = seq.add(len + u32::from(fin));
        self.snd_max = self.snd_max.max(self.snd_nxt);
        if new_data && self.rtt_probe.is_none() && self.rtt.backoffs() == 0 {
            self.rtt_probe = Some((self.snd_nxt, now));
        }
        if new_data && !self.cc.in_recovery {
            // RFC 8985 7.2: the probe timer restarts after new data (and, with it, what
            // the flight's size says of the delayed-ACK allowance).
            self.early_at = None;
        }
        self.arm_loss_timers(now);
        self.ack_sent();
        Some(seg)
    }

    /// Copy the payload of `seg` (from [`Conn::next_segment`]) into buffer `dst` at
    /// `dst_off`; returns the bytes copied.
    pub fn copy_payload<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        seg: &SegOut,
        dst: BufIdx,
        dst_off: usize,
        uncached: bool,
    ) -> u32 {
        self.tx.copy_out(
            pool,
            seg.data_off,
            seg.data_len,
            super::queue::CopyTo {
                buf: dst,
                off: dst_off,
                uncached,
            },
            &mut self.tx_cursor,
        )
    }
}

/// The RST answering segment `seg` (RFC 9293 3.10.7.1): at its ACK number if it had one,
/// else acknowledging it.
pub fn rst_for(seg: &SegIn) -> SegOut {
    match seg.ack {
        Some(a) => SegOut {
            seq: a,
            rst: true,
            ..SegOut::default()
        },
        None => SegOut {
            seq: Seq(0),
            ack: Some(seg.seq.add(seg.seq_len())),
            rst: true,
            ..SegOut::default()
        },
    }
}

/// The DSACK block of an ACK's SACK blocks, if it has one (RFC 2883): the first block, when
/// it lies below the cumulative `ack` or inside the second block.
fn dsack_of(blocks: &[Option<(Seq, Seq)>; 3], ack: Seq) -> Option<(Seq, Seq)> {
    let (s, e) = blocks[0]?;
    let inside_next = blocks[1].is_some_and(|(s1, e1)| s.ge(s1) && e.le(e1));
    (s.lt(e) && (e.le(ack) || inside_next)).then_some((s, e))
}

/// Milliseconds between two ACKs for unacceptable segments on one connection.
const OOW_ACK_GAP_MS: u16 = 500;

/// The smallest window shift that lets `buf` bytes be offered (RFC 7323: at most 14).
fn window_shift(buf: u32) -> u8 {
    let mut s = 0;
    while s < 14 && (buf >> s) > 0xffff {
        s += 1;
    }
    s
}

fn at(now: Instant, us: impl Into<u64>) -> Instant {
    Instant::from_nanos(now.nanos().saturating_add(us.into().saturating_mul(1_000)))
}

fn micros_since(now: Instant, then: Instant) -> u32 {
    (now.nanos().saturating_sub(then.nanos()) / 1_000).min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::HeapPool;
    use std::net::Ipv4Addr;

    const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
    const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4000);

    /// An established connection whose peer's next byte is sequence number 1001.
    fn established(pool: &mut HeapPool) -> (Conn, TcpConfig, TcpCounters) {
        let cfg = TcpConfig::default();
        let mut ctr = TcpCounters::default();
        let syn = SegIn {
            seq: Seq(1000),
            syn: true,
            wnd: 65535,
            mss: Some(1460),
            ..SegIn::default()
        };
        let mut c = Conn::passive(LOCAL, REMOTE, &syn, Seq(5000), cfg.buffer_sizes(), &cfg);
        assert!(c.next_segment(Instant::ZERO, &cfg).is_some_and(|s| s.syn));
        let ack = SegIn {
            seq: Seq(1001),
            ack: Some(Seq(5001)),
            wnd: 65535,
            ..SegIn::default()
        };
        c.on_segment(pool, &ack, None, Instant::ZERO, &cfg, &mut ctr);
        assert_eq!(c.state(), State::Established);
        (c, cfg, ctr)
    }

    /// A segment's payload in a buffer, placed at `off`.
    fn payload(pool: &mut HeapPool, bytes: &[u8], off: usize) -> BufIdx {
        pool.alloc_with(off, bytes).expect("room in the pool")
    }

    #[test]
    fn a_segment_overlapping_what_was_received_is_trimmed_whatever_room_its_buffer_has() {
        // A retransmission that collapses segments overlaps the stream already received;
        // its buffer may have no room after the payload (the pools then cut `len` when
        // `off` moves, so the trim must set both at once).
        let mut pool = HeapPool::new(16, 2048);
        let (mut c, cfg, mut ctr) = established(&mut pool);
        let stream: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
        let first = payload(&mut pool, &stream[..1000], 100);
        let seg = |seq: u32, len: u32| SegIn {
            seq: Seq(1001 + seq),
            ack: Some(Seq(5001)),
            wnd: 65535,
            len,
            ..SegIn::default()
        };
        c.on_segment(
            &mut pool,
            &seg(0, 1000),
            Some(first),
            Instant::ZERO,
            &cfg,
            &mut ctr,
        );
        let tail = 2048 - 2000;
        let second = payload(&mut pool, &stream[500..2500], tail);
        c.on_segment(
            &mut pool,
            &seg(500, 2000),
            Some(second),
            Instant::ZERO,
            &cfg,
            &mut ctr,
        );
        let mut out = vec![0u8; 4000];
        let n = c.recv(&mut pool, &mut out, false);
        assert_eq!(&out[..n], &stream[..2500]);
        c.clear(&mut pool);
        assert_eq!(pool.free_count(), pool.total());
    }

    /// Takes `n` buffers of `pool` out, as other connections' queues would hold them.
    fn hold(pool: &mut HeapPool, n: usize) -> Vec<BufIdx> {
        (0..n)
            .map(|_| pool.alloc().expect("a free buffer"))
            .collect()
    }

    /// `bytes` arriving in order on `c` (placed at offset 64 of a fresh buffer).
    fn arrive_in_order(
        c: &mut Conn,
        pool: &mut HeapPool,
        bytes: &[u8],
        cfg: &TcpConfig,
        ctr: &mut TcpCounters,
    ) {
        let b = payload(pool, bytes, 64);
        let seg = in_order(c, bytes.len() as u32);
        c.on_segment(pool, &seg, Some(b), Instant::ZERO, cfg, ctr);
    }

    /// Twelve segments of 1,000 bytes arriving on `c` behind a hole of 1,000 at `rcv_nxt`.
    fn behind_a_hole(c: &mut Conn, pool: &mut HeapPool, cfg: &TcpConfig, ctr: &mut TcpCounters) {
        let first = c.rcv_nxt;
        for k in 1..=12u32 {
            let b = payload(pool, &[k as u8; 1000], 64);
            let seg = SegIn {
                seq: first.add(k * 1000),
                ..in_order(c, 1000)
            };
            c.on_segment(pool, &seg, Some(b), Instant::ZERO, cfg, ctr);
        }
        assert_eq!(c.ooo.bytes(), 12_000);
    }

    fn in_order(c: &Conn, len: u32) -> SegIn {
        SegIn {
            seq: c.rcv_nxt,
            ack: Some(Seq(5001)),
            wnd: 65535,
            len,
            ..SegIn::default()
        }
    }

    #[test]
    fn a_scarce_pool_queues_a_few_segments_then_announces_the_window_when_it_refills() {
        let mut pool = HeapPool::new(256, 2048);
        let (mut c, cfg, mut ctr) = established(&mut pool);
        // Less than an eighth of the pool free: scarce.
        let held = hold(&mut pool, 230);
        let floor = super::super::memory::FLOOR_SEGMENTS * 1460;
        let mut queued = 0;
        while queued + 1000 <= floor {
            arrive_in_order(&mut c, &mut pool, &[7; 1000], &cfg, &mut ctr);
            queued += 1000;
        }
        assert_eq!(c.rx.bytes(), queued);
        assert_eq!(ctr.pool_drops, 0);
        // The next in-order segment, within the window offered on the SYN-ACK, would pass
        // the floor: dropped, counted, its buffer back.
        let free = pool.free_count();
        arrive_in_order(&mut c, &mut pool, &[7; 1000], &cfg, &mut ctr);
        assert_eq!(c.rx.bytes(), queued);
        assert_eq!(ctr.pool_drops, 1);
        assert_eq!(pool.free_count(), free);
        while c.next_segment(Instant::ZERO, &cfg).is_some() {}
        let promised = c.rcv_adv;
        // A send takes no more than the floor either.
        let (mut writer, _, _) = established(&mut pool);
        let n = writer.send(&mut pool, &[1; 100_000], cfg.snd_buf, &mut ctr);
        assert_eq!(n as u32, floor);
        assert_eq!(ctr.pool_limited_sends, 1);
        writer.clear(&mut pool);
        // The pool refills; nobody reads. The clamp's timer looks again and announces the
        // window the buffer allows.
        for b in held {
            pool.free(b);
        }
        let due = c.next_timer().expect("the clamp's look is due");
        assert!(due.nanos() <= CLAMP_RECHECK_US * 1_000);
        c.on_timer(&mut pool, due, &cfg, &mut ctr);
        let update = c.next_segment(due, &cfg).expect("a window update");
        assert_eq!(update.data_len, 0);
        assert!(c.rcv_adv.gt(promised), "the window moved on ({update:?})");
        c.clear(&mut pool);
        assert_eq!(pool.free_count(), pool.total());
    }

    #[test]
    fn an_exhausted_pool_sends_its_floor_and_the_reserve_queues_nothing() {
        let mut pool = HeapPool::new(256, 2048);
        let (mut c, cfg, mut ctr) = established(&mut pool);
        // Less than a thirty-second free (6 of 256): exhausted.
        let held = hold(&mut pool, 250);
        assert_eq!(pool.free_count(), 6);
        arrive_in_order(&mut c, &mut pool, &[7; 1000], &cfg, &mut ctr);
        assert_eq!(c.rx.bytes(), 0);
        assert_eq!(ctr.pool_drops, 1);
        assert_eq!(pool.free_count(), 6);
        // Every writer may still queue a couple of segments: a writer that reads only once
        // its writes are taken moves on (and frees what its unread bytes hold).
        let floor = super::super::memory::SEND_FLOOR_SEGMENTS * 1460;
        assert_eq!(
            c.send(&mut pool, &[1; 10_000], cfg.snd_buf, &mut ctr) as u32,
            floor
        );
        assert_eq!(ctr.pool_limited_sends, 1);
        // The last sixty-fourth is the reserve (receiving ACKs, sending them): no more.
        let (mut other, _, _) = established(&mut pool);
        let leave = pool.free_count() - 3;
        let reserve = hold(&mut pool, leave);
        assert_eq!(other.send(&mut pool, &[1; 1000], cfg.snd_buf, &mut ctr), 0);
        other.clear(&mut pool);
        c.clear(&mut pool);
        for b in held.into_iter().chain(reserve) {
            pool.free(b);
        }
        // Room again: the same segment, sent again, is taken.
        let (mut c, _, _) = established(&mut pool);
        arrive_in_order(&mut c, &mut pool, &[7; 1000], &cfg, &mut ctr);
        assert_eq!(c.rx.bytes(), 1000);
        c.clear(&mut pool);
        assert_eq!(pool.free_count(), pool.total());
    }

    #[test]
    fn the_segment_that_fills_a_hole_is_taken_however_much_waits_behind_it() {
        // Out-of-order segments held while the pool had room pass the floor; the pool then
        // turns scarce, or exhausted. The missing segment must still be taken, or they
        // never drain (nothing else frees them).
        for others in [256 - 12 - 26, 256 - 12 - 6] {
            let mut pool = HeapPool::new(256, 2048);
            let (mut c, cfg, mut ctr) = established(&mut pool);
            behind_a_hole(&mut c, &mut pool, &cfg, &mut ctr);
            let held = hold(&mut pool, others);
            arrive_in_order(&mut c, &mut pool, &[0; 1000], &cfg, &mut ctr);
            assert_eq!(ctr.pool_drops, 0, "{others} held");
            assert_eq!(
                c.rx.bytes(),
                13_000,
                "{others} held: the hole filled, all moved up"
            );
            assert_eq!(c.ooo.bytes(), 0);
            for b in held {
                pool.free(b);
            }
            c.clear(&mut pool);
            assert_eq!(pool.free_count(), pool.total());
        }
    }

    #[test]
    fn at_the_reserve_a_connection_gives_up_what_it_holds_out_of_order() {
        // The segment that fills the hole is refused too at the reserve: what waits out of
        // order is freed instead (the peer holds it, unacknowledged, and sends it again).
        let mut pool = HeapPool::new(256, 2048);
        let (mut c, cfg, mut ctr) = established(&mut pool);
        behind_a_hole(&mut c, &mut pool, &cfg, &mut ctr);
        let leave = pool.free_count() - 2;
        let held = hold(&mut pool, leave);
        arrive_in_order(&mut c, &mut pool, &[0; 1000], &cfg, &mut ctr);
        assert_eq!((ctr.ooo_pruned, ctr.pool_drops), (1, 1));
        assert_eq!((c.rx.bytes(), c.ooo.bytes()), (0, 0));
        assert_eq!(pool.free_count(), 2 + 12);
        for b in held {
            pool.free(b);
        }
        c.clear(&mut pool);
        assert_eq!(pool.free_count(), pool.total());
    }
}
