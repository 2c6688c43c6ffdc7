//! TCP on the interface: segments in ([`Interface::rx_tcp`]), segments out (one frame per
//! segment, the payload copied once from the send queue into the frame's buffer), the
//! timers, and the socket calls.

use std::net::SocketAddrV4;

use smoltcp::wire::{IpProtocol, TcpControl, TcpPacket, TcpRepr};

use super::Interface;
use crate::buf::{BufIdx, BufferPool, set_window, valid};
use crate::checksum::{Sum, pseudo_v4};
use crate::ipv4::{self, Datagram, EmitHeader};
use crate::tcp::conn::{Accept, rst_for};
use crate::tcp::spill;
use crate::tcp::{
    Buffer, CloseReason, Conn, ListenHandle, SegIn, SegOut, State, TcpCounters, TcpError,
    TcpHandle, TcpInfo,
};
use crate::tcp::{CookieOutcome, SynAnswer, SynCookies};
use crate::{Instant, eth};

mod predict;

/// Where the TCP header starts in a frame we build.
const TCP_AT: usize = eth::HEADER_LEN + ipv4::HEADER_LEN;
/// The checksum field's offset in a TCP header.
const CHECKSUM_AT: usize = 16;
/// Segments one flush may emit for one connection (the rest go at the next event).
const FLUSH_BURST: usize = 64;

/// The header of an arriving segment, read with smoltcp's checked view.
fn parse(bytes: &[u8]) -> Option<(SegIn, u16, u16, usize)> {
    let pkt = TcpPacket::new_checked(bytes).ok()?;
    let hlen = usize::from(pkt.header_len());
    // smoltcp's Repr checks flags and options; addresses only matter for the checksum,
    // which we verify ourselves.
    let any = smoltcp::wire::IpAddress::v4(0, 0, 0, 0);
    let repr = TcpRepr::parse(
        &pkt,
        &any,
        &any,
        &smoltcp::phy::ChecksumCapabilities::ignored(),
    )
    .ok()?;
    let (syn, fin, rst) = match repr.control {
        TcpControl::Syn => (true, false, false),
        TcpControl::Fin => (false, true, false),
        TcpControl::Rst => (false, false, true),
        TcpControl::None | TcpControl::Psh => (false, false, false),
    };
    let seg = SegIn {
        seq: repr.seq_number.into(),
        ack: repr.ack_number.map(Into::into),
        wnd: repr.window_len,
        syn,
        fin,
        rst,
        mss: repr.max_seg_size,
        wscale: repr.window_scale,
        sack_perm: repr.sack_permitted,
        sack: repr
            .sack_ranges
            .map(|r| r.map(|(s, e)| (crate::tcp::Seq(s), crate::tcp::Seq(e)))),
        ts: repr.timestamp.map(|t| (t.tsval, t.tsecr)),
        len: repr.payload.len() as u32,
    };
    Some((seg, repr.src_port, repr.dst_port, hlen))
}

impl Interface {
    pub(super) fn rx_tcp<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        dg: Datagram,
        now: Instant,
        tx: &mut T,
    ) {
        self.tcp.counters.segs_in += 1;
        if dg.bufs != 1 {
            self.tcp.counters.fragmented += 1;
            pool.free_chain(dg.head);
            return;
        }
        let head = dg.head;
        let parsed = {
            let bytes = valid(pool, head);
            let bytes = &bytes[..dg.len.min(bytes.len())];
            let ok = !self.tcp.cfg.rx_checksum || {
                let mut s = Sum::of(bytes);
                s.add_word(pseudo_v4(dg.src, dg.dst, IpProtocol::Tcp, bytes.len()));
                s.value() == 0xffff
            };
            if ok {
                Ok(predict::predicted(bytes).or_else(|| parse(bytes)))
            } else {
                Err(())
            }
        };
        let (seg, src_port, dst_port, hlen) = match parsed {
            Ok(Some(p)) => p,
            Ok(None) => {
                self.tcp.counters.malformed += 1;
                pool.free(head);
                return;
            }
            Err(()) => {
                self.tcp.counters.bad_checksum += 1;
                pool.free(head);
                return;
            }
        };
        if dg.dst != self.cfg.ipv4 || !crate::tcp::Tcp::connectable(dg.src) {
            // Broadcast, or from an address no connection can have: never answered.
            self.tcp.counters.no_socket += 1;
            pool.free(head);
            return;
        }
        let payload = if seg.len > 0 {
            let off = pool.off(head) as usize + hlen;
            set_window(pool, head, off, seg.len as usize);
            Some(head)
        } else {
            pool.free(head);
            None
        };
        let remote = SocketAddrV4::new(dg.src, src_port);
        if let Some(idx) = self.tcp.lookup(remote, dst_port) {
            let Some((c, cfg, ctr)) = self.tcp.parts(idx) else {
                return;
            };
            if let Some(rst) = c.on_segment(pool, &seg, payload, now, cfg, ctr) {
                self.tcp_send_bare(pool, &rst, dst_port, remote, now, tx);
            }
            // The answer waits for the flush at the end of the burst: one ACK for many.
            self.tcp.settle(pool, idx);
            self.tcp.mark(idx);
            return;
        }
        let listener = self.tcp.listener_on(dst_port);
        match listener {
            Some(l) if seg.syn && seg.ack.is_none() && !seg.rst => {
                if let Some(b) = payload {
                    // Data on a SYN: the sender will send it again once we are synchronized.
                    pool.free(b);
                }
                self.cap_mss(pool);
                let local = SocketAddrV4::new(self.cfg.ipv4, dst_port);
                match self.tcp.on_syn(l) {
                    SynAnswer::HalfOpen => {}
                    SynAnswer::Cookie => {
                        // RFC 4987: answer without keeping state; the cookie in our ISN
                        // makes the connection when the peer's ACK brings it back.
                        let synack = self.tcp.cookie_synack(l, local, remote, &seg, now);
                        self.tcp.counters.syn_cookies_sent += 1;
                        self.tcp_send_bare(pool, &synack, dst_port, remote, now, tx);
                        return;
                    }
                    SynAnswer::Drop => {
                        self.tcp.counters.listen_overflow += 1;
                        return;
                    }
                }
                let iss = self.tcp.isn(local, remote, now);
                let sizes = self.tcp.listener_sizes(l);
                let mut c = Conn::passive(local, remote, &seg, iss, sizes, &self.tcp.cfg);
                self.tcp.fit_to_path(&mut c, now);
                c.accept = Accept::HalfOpen(l);
                match self.tcp.insert(c) {
                    Some(idx) => self.tcp.mark(idx),
                    None => self.tcp.counters.table_full += 1,
                }
            }
            Some(l)
                if self.tcp.cfg.syn_cookies != SynCookies::Never
                    && self.tcp.cookies_recent(now)
                    && !seg.syn
                    && !seg.rst
                    && seg.ack.is_some() =>
            {
                let local = SocketAddrV4::new(self.cfg.ipv4, dst_port);
                match self.tcp.accept_cookie(l, local, remote, &seg, now) {
                    CookieOutcome::Accepted(idx) => {
                        if let Some((c, cfg, ctr)) = self.tcp.parts(idx) {
                            // The ACK may carry data already.
                            if let Some(rst) = c.on_segment(pool, &seg, payload, now, cfg, ctr) {
                                self.tcp_send_bare(pool, &rst, dst_port, remote, now, tx);
                            }
                        }
                        self.tcp.mark(idx);
                    }
                    refused => {
                        if let Some(b) = payload {
                            pool.free(b);
                        }
                        // A bad cookie is a segment for no connection: a RST. A good one
                        // that finds no room is dropped (counted), as Linux does.
                        if refused == CookieOutcome::Invalid {
                            self.tcp.counters.no_socket += 1;
                            let rst = rst_for(&seg);
                            self.tcp_send_bare(pool, &rst, dst_port, remote, now, tx);
                        }
                    }
                }
            }
            _ => {
                if let Some(b) = payload {
                    // For no connection: the sender will send it again, or give up.
                    pool.free(b);
                }
                self.tcp.counters.no_socket += 1;
                if !seg.rst {
                    let rst = rst_for(&seg);
                    self.tcp_send_bare(pool, &rst, dst_port, remote, now, tx);
                }
            }
        }
    }

    /// The MSS can be no larger than a pool buffer allows (one segment, one buffer).
    fn cap_mss<P: BufferPool + ?Sized>(&mut self, pool: &P) {
        let room = pool.capacity().saturating_sub(TCP_AT + 60);
        let mtu = self.cfg.mtu.saturating_sub(ipv4::HEADER_LEN + 20);
        let cap = room.min(mtu).min(usize::from(u16::MAX)) as u16;
        self.tcp.cfg.mss = self.tcp.cfg.mss.min(cap).max(64);
    }

    /// After an event on connection `idx`: hand over a finished handshake, send what is
    /// due, free it if it is gone, re-arm its timer.
    pub(super) fn tcp_after<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        idx: u32,
        now: Instant,
        tx: &mut T,
    ) {
        self.tcp.settle(pool, idx);
        self.tcp.refill(pool, idx, now);
        self.tcp_flush(pool, idx, now, tx);
        self.tcp.finish(pool, idx);
    }

    /// Send what connection `idx` has to send.
    fn tcp_flush<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        idx: u32,
        now: Instant,
        tx: &mut T,
    ) {
        let uncached = self.maintenance.as_ref().is_some_and(|m| m.send_uncached());
        for _ in 0..FLUSH_BURST {
            let Some((c, cfg, ctr)) = self.tcp.parts(idx) else {
                return;
            };
            let Some(seg) = c.next_segment(now, cfg) else {
                return;
            };
            let (local, remote) = (c.local, c.remote);
            let dont_frag = cfg.pmtu_discovery && !c.may_fragment();
            let Some(frame) = pool.alloc() else {
                // Lost like a frame on the wire: the retransmission timer recovers it.
                ctr.no_buffers += 1;
                return;
            };
            let hlen = header_len(&seg);
            let copied = c.copy_payload(pool, &seg, frame, TCP_AT + hlen, uncached);
            ctr.segs_out += 1;
            ctr.bytes_out += u64::from(copied);
            ctr.sack_retransmits += u64::from(seg.rexmit);
            ctr.resets_sent += u64::from(seg.rst);
            let len = self.tcp_frame(
                pool,
                frame,
                &seg,
                (local.port(), remote),
                copied as usize,
                dont_frag,
            );
            set_window(pool, frame, 0, len);
            self.tcp_emit(pool, frame, remote, now, tx, TCP_AT + hlen);
        }
    }

    /// Send a segment that belongs to no connection's send queue (a RST).
    fn tcp_send_bare<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        seg: &SegOut,
        local_port: u16,
        remote: SocketAddrV4,
        now: Instant,
        tx: &mut T,
    ) {
        let Some(frame) = pool.alloc() else {
            self.tcp.counters.no_buffers += 1;
            return;
        };
        self.tcp.counters.segs_out += 1;
        self.tcp.counters.resets_sent += u64::from(seg.rst);
        let dont_frag = self.tcp.cfg.pmtu_discovery;
        let len = self.tcp_frame(pool, frame, seg, (local_port, remote), 0, dont_frag);
        set_window(pool, frame, 0, len);
        self.tcp_emit(pool, frame, remote, now, tx, usize::MAX);
    }

    /// Write the Ethernet, IPv4 and TCP headers of `seg` into `frame`, whose payload
    /// (`data_len` bytes after the TCP header) is already in place, with the checksum over
    /// the bytes as they lie in the frame, don't-fragment as `dont_frag` says. Returns the
    /// frame's length.
    fn tcp_frame<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        frame: BufIdx,
        seg: &SegOut,
        (local_port, remote): (u16, SocketAddrV4),
        data_len: usize,
        dont_frag: bool,
    ) -> usize {
        let ident = self.next_ident;
        self.next_ident = self.next_ident.wrapping_add(1);
        let repr = repr_of(seg, local_port, remote.port());
        let hlen = repr.header_len();
        let tcp_len = hlen + data_len;
        let src = self.cfg.ipv4;
        let buf = pool.data_mut(frame);
        {
            let mut pkt = TcpPacket::new_unchecked(&mut buf[TCP_AT..TCP_AT + tcp_len]);
            repr.emit(
                &mut pkt,
                &smoltcp::wire::IpAddress::Ipv4(src),
                &smoltcp::wire::IpAddress::Ipv4(*remote.ip()),
                &smoltcp::phy::ChecksumCapabilities::ignored(),
            );
        }
        let c = if self.tcp.cfg.tx_checksum {
            let mut sum = Sum::of(&buf[TCP_AT..TCP_AT + tcp_len]);
            sum.add_word(pseudo_v4(src, *remote.ip(), IpProtocol::Tcp, tcp_len));
            sum.checksum().to_be_bytes()
        } else {
            [0; 2]
        };
        buf[TCP_AT + CHECKSUM_AT..TCP_AT + CHECKSUM_AT + 2].copy_from_slice(&c);
        let hdr = EmitHeader {
            src,
            dst: *remote.ip(),
            proto: IpProtocol::Tcp,
            ttl: self.cfg.ttl,
            ident,
            dont_frag,
        };
        ipv4::write_header(&mut buf[eth::HEADER_LEN..], &hdr, tcp_len, 0, false);
        eth::write_header(
            buf,
            self.cfg.mac,
            smoltcp::wire::EthernetAddress([0; 6]),
            smoltcp::wire::EthernetProtocol::Ipv4,
        );
        TCP_AT + tcp_len
    }

    /// Route a built frame to `remote`: transmit it, or queue it for ARP.
    /// `cached_prefix`: the bytes at the start of the frame written with ordinary stores (the
    /// headers; the payload after them is non-temporal under `send=nc`).
    fn tcp_emit<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        frame: BufIdx,
        remote: SocketAddrV4,
        now: Instant,
        tx: &mut T,
        cached_prefix: usize,
    ) {
        match self.route(*remote.ip(), None, now) {
            Ok((mac, hop)) => {
                if let Some(m) = mac {
                    eth::set_dst(pool.data_mut(frame), m);
                }
                // A frame ARP had no room for is lost, and retransmitted in time.
                let _ = self.emit_frames(pool, &[frame], mac, hop, now, tx, cached_prefix);
            }
            Err(_) => pool.free(frame),
        }
    }

    /// Send what the segments received since the last flush call for (ACKs, window
    /// updates, data the ACKs let out, handshakes' answers). [`Interface::poll`] flushes
    /// first thing; a caller that wants the answers out without running timers calls this.
    pub fn flush<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        now: Instant,
        tx: &mut T,
    ) {
        while let Some(idx) = self.tcp.next_marked() {
            self.tcp_after(pool, idx, now, tx);
        }
    }

    /// Flush, then run TCP's timers due at `now`.
    pub(super) fn tcp_poll<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        now: Instant,
        tx: &mut T,
    ) {
        self.flush(pool, now, tx);
        if self.tcp.spill_retry.is_some_and(|t| t <= now) {
            self.retry_spills(pool, now, tx);
        }
        while let Some(idx) = self.tcp.due(now) {
            if let Some((c, cfg, ctr)) = self.tcp.parts(idx) {
                c.on_timer(pool, now, cfg, ctr);
            }
            self.tcp_after(pool, idx, now, tx);
        }
    }

    /// Every spill tried again (one that found no pool buffer when its connection last
    /// heard from its peer would otherwise wait for ever), and a spill stalled past its
    /// patience given up: its connection is reset.
    fn retry_spills<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        now: Instant,
        tx: &mut T,
    ) {
        let mut i = 0;
        while let Some(idx) = self.tcp.spills.idx_at(i) {
            self.tcp_after(pool, idx, now, tx);
            // A spill that ended left the list: the one now at `i` is tried next.
            if self.tcp.spills.idx_at(i) == Some(idx) {
                i += 1;
            }
        }
        while let Some(idx) = self.tcp.spills.stalled(now) {
            self.tcp.spills.drop_for(idx);
            self.tcp.counters.spills_abandoned += 1;
            if let Some(c) = self.tcp.conn_at(idx) {
                c.abort(pool);
            }
            self.tcp_after(pool, idx, now, tx);
        }
        self.tcp.spill_retry = (!self.tcp.spills.is_empty()).then(|| spill::retry_at(now));
    }

    // ------------------------------------------------------------------ socket calls

    /// Listen on `port` (every address of the interface) with room for `backlog`
    /// connections in the handshake or waiting for [`Interface::tcp_accept`].
    pub fn tcp_listen(&mut self, port: u16, backlog: u32) -> Result<ListenHandle, TcpError> {
        self.tcp.listen(port, backlog)
    }

    /// Stop listening; connections not yet accepted are reset.
    pub fn tcp_unlisten<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        l: ListenHandle,
        now: Instant,
        tx: &mut T,
    ) -> Result<(), TcpError> {
        for idx in self.tcp.unlisten(pool, l)? {
            self.tcp_after(pool, idx, now, tx);
        }
        Ok(())
    }

    /// The next connection a listener established, if any.
    pub fn tcp_accept(&mut self, l: ListenHandle) -> Result<Option<TcpHandle>, TcpError> {
        self.tcp.accept(l)
    }

    /// Open a connection to `remote` from an ephemeral port; the SYN goes out now.
    pub fn tcp_connect<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        remote: SocketAddrV4,
        now: Instant,
        tx: &mut T,
    ) -> Result<TcpHandle, TcpError> {
        if !crate::tcp::Tcp::connectable(*remote.ip())
            || remote.port() == 0
            || (*remote.ip() == self.cfg.ipv4 && !self.cfg.loopback)
        {
            return Err(TcpError::AddressNotAvailable);
        }
        let port = self
            .tcp
            .ephemeral_port(remote)
            .ok_or(TcpError::NoPortsLeft)?;
        self.cap_mss(pool);
        let local = SocketAddrV4::new(self.cfg.ipv4, port);
        let iss = self.tcp.isn(local, remote, now);
        let mut c = Conn::active(local, remote, iss, &self.tcp.cfg);
        self.tcp.fit_to_path(&mut c, now);
        let idx = self.tcp.insert(c).ok_or(TcpError::TableFull)?;
        self.tcp_after(pool, idx, now, tx);
        Ok(self.tcp.handle_of(idx))
    }

    /// Queue bytes of `data` for sending (as many as the send buffer has room for) and send
    /// what the windows allow. `Err(WouldBlock)` when no byte fit.
    pub fn tcp_send<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        data: &[u8],
        now: Instant,
        tx: &mut T,
    ) -> Result<usize, TcpError> {
        self.tcp_send_inner(pool, h, &[data], now, tx, false)
    }

    /// As [`Interface::tcp_send_gather_beyond_limit`], from one slice.
    pub fn tcp_send_beyond_limit<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        data: &[u8],
        now: Instant,
        tx: &mut T,
    ) -> Result<usize, TcpError> {
        self.tcp_send_inner(pool, h, &[data], now, tx, true)
    }

    /// As [`Interface::tcp_send`], the bytes gathered from `parts` in order (an application's
    /// buffers where they lie): as many as the send buffer has room for, a part cut short
    /// ending the send, then one pass of sending for the lot.
    pub fn tcp_send_gather<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        parts: &[&[u8]],
        now: Instant,
        tx: &mut T,
    ) -> Result<usize, TcpError> {
        self.tcp_send_inner(pool, h, parts, now, tx, false)
    }

    /// As [`Interface::tcp_send_gather`], taking every byte: what the send buffer has no
    /// room for waits in the stack's own memory and is queued as ACKs make room, a later
    /// shutdown or close after it ([`crate::tcp::spill`]). For the bytes an application
    /// wrote before it went away, which its server must not drop. Past a spill's bounds the
    /// bytes are refused (counted in `spill_refused`) and the connection is reset:
    /// `Err(Closed(Aborted))`.
    pub fn tcp_send_gather_beyond_limit<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        parts: &[&[u8]],
        now: Instant,
        tx: &mut T,
    ) -> Result<usize, TcpError> {
        self.tcp_send_inner(pool, h, parts, now, tx, true)
    }

    fn tcp_send_inner<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        parts: &[&[u8]],
        now: Instant,
        tx: &mut T,
        beyond_limit: bool,
    ) -> Result<usize, TcpError> {
        let base = self.tcp.cfg.snd_buf;
        let idx = h_idx(h);
        let spilling = self.tcp.spills.holds(idx);
        if spilling && self.tcp.spills.ended(idx) {
            // Shut down or closed behind its spill: no more bytes.
            self.tcp.get_mut(h)?;
            return Err(TcpError::NotConnected);
        }
        let c = self.tcp.get_mut(h)?;
        match c.state() {
            State::SynSent | State::SynReceived | State::Established | State::CloseWait => {}
            State::Closed => {
                return Err(c.error().map_or(TcpError::NotConnected, TcpError::Closed));
            }
            _ => return Err(TcpError::NotConnected),
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        // Bytes behind a spill join it (or wait, from an application still there): the
        // stream stays in order.
        let mut n = 0;
        if !spilling && let Some((c, _, ctr)) = self.tcp.parts(idx) {
            for part in parts {
                let took = c.send(pool, part, base, ctr);
                n += took;
                if took < part.len() {
                    break;
                }
            }
        }
        if beyond_limit && n < total {
            let mut skip = n;
            for part in parts {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                let rest = &part[skip..];
                skip = 0;
                let took = self.tcp.spills.add(idx, rest, now);
                self.tcp.counters.spilled += took as u64;
                n += took;
                if took < rest.len() {
                    // Past every bound: these bytes are lost, and the peer must not take
                    // what it gets for the whole stream.
                    self.tcp.counters.spill_refused += (total - n) as u64;
                    self.tcp.spills.drop_for(idx);
                    if let Some(c) = self.tcp.conn_at(idx) {
                        c.abort(pool);
                    }
                    self.tcp_after(pool, idx, now, tx);
                    return Err(TcpError::Closed(crate::tcp::CloseReason::Aborted));
                }
            }
            if self.tcp.spill_retry.is_none() {
                self.tcp.spill_retry = Some(spill::retry_at(now));
            }
        }
        if n == 0 && total > 0 {
            return Err(TcpError::WouldBlock);
        }
        self.tcp_after(pool, idx, now, tx);
        Ok(n)
    }

    /// Copy received bytes into `dst`. `Ok(0)` at the end of the stream (the peer's FIN,
    /// every byte read), `Err(WouldBlock)` when nothing is there yet.
    pub fn tcp_recv<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        dst: &mut [u8],
        now: Instant,
        tx: &mut T,
    ) -> Result<usize, TcpError> {
        let uncached = self.maintenance.as_ref().is_some_and(|m| m.recv_uncached());
        let c = self.tcp.get_mut(h)?;
        let n = c.recv(pool, dst, uncached);
        if n > 0 {
            self.tcp.counters.bytes_in += n as u64;
            self.tcp_after(pool, h_idx(h), now, tx);
            return Ok(n);
        }
        if dst.is_empty() || c.at_eof() {
            return Ok(0);
        }
        match (c.state(), c.error()) {
            (State::Closed, Some(e)) => Err(TcpError::Closed(e)),
            (State::Closed, None) => Ok(0),
            _ => Err(TcpError::WouldBlock),
        }
    }

    /// Take up to `max` received bytes out as a chain of whole buffers (at least one), the
    /// caller's to free: the zero-copy receive. `None` when nothing is readable.
    pub fn tcp_recv_chain<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        max: u32,
        now: Instant,
        tx: &mut T,
    ) -> Result<Option<crate::Message>, TcpError> {
        let c = self.tcp.get_mut(h)?;
        let Some((head, len, bufs)) = c.recv_chain(pool, max) else {
            return Ok(None);
        };
        let src = c.remote();
        self.tcp.counters.bytes_in += u64::from(len);
        self.tcp_after(pool, h_idx(h), now, tx);
        Ok(Some(crate::Message {
            head,
            len: len as usize,
            bufs: bufs as usize,
            src,
        }))
    }

    /// What an application of the connection needs to know now, cheaply.
    pub fn tcp_status(&self, h: TcpHandle) -> Result<crate::tcp::TcpStatus, TcpError> {
        let c = self.tcp.get(h)?;
        Ok(crate::tcp::TcpStatus {
            state: c.state(),
            readable: c.readable(),
            eof: c.at_eof(),
            error: c.error(),
        })
    }

    /// The local port of listener `l`.
    pub fn tcp_listen_port(&self, l: ListenHandle) -> Result<u16, TcpError> {
        self.tcp.listen_port(l)
    }

    /// No more data from us: a FIN follows what is queued.
    pub fn tcp_shutdown<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        now: Instant,
        tx: &mut T,
    ) -> Result<(), TcpError> {
        self.tcp.get_mut(h)?;
        if !self.tcp.spills.defer(h_idx(h), spill::After::Shutdown) {
            self.tcp.get_mut(h)?.shutdown_write();
        }
        self.tcp_after(pool, h_idx(h), now, tx);
        Ok(())
    }

    /// Let go of a connection: it closes in order (or is reset if unread data remains) and
    /// the handle is dead from now on.
    pub fn tcp_close<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        now: Instant,
        tx: &mut T,
    ) -> Result<(), TcpError> {
        let idx = h_idx(h);
        let spilled = self.tcp.spills.holds(idx);
        let c = self.tcp.get_mut(h)?;
        if spilled && c.close_later() {
            self.tcp.spills.defer(idx, spill::After::Close);
        } else {
            c.close(pool);
            self.tcp.spills.drop_for(idx);
        }
        self.tcp_after(pool, idx, now, tx);
        Ok(())
    }

    /// Reset a connection (a RST to the peer); the handle is dead from now on.
    pub fn tcp_abort<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        now: Instant,
        tx: &mut T,
    ) -> Result<(), TcpError> {
        let c = self.tcp.get_mut(h)?;
        c.orphan_and_abort(pool);
        self.tcp.spills.drop_for(h_idx(h));
        self.tcp_after(pool, h_idx(h), now, tx);
        Ok(())
    }

    /// Turn Nagle's algorithm off (`true`) or on.
    pub fn tcp_set_nodelay(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.get_mut(h)?.set_nodelay(on);
        Ok(())
    }

    /// Sets buffer `which` of connection `h` (`SO_SNDBUF`, `SO_RCVBUF`; see
    /// [`Conn::set_buffer`]). A receive buffer that grew announces its window at once.
    pub fn tcp_set_buffer<P: BufferPool + ?Sized, T: super::TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        (which, bytes): (Buffer, u32),
        now: Instant,
        tx: &mut T,
    ) -> Result<(), TcpError> {
        self.tcp.get_mut(h)?.set_buffer(which, bytes);
        self.tcp_after(pool, h_idx(h), now, tx);
        Ok(())
    }

    /// The size of buffer `which` of connection `h`.
    pub fn tcp_buffer(&self, h: TcpHandle, which: Buffer) -> Result<u32, TcpError> {
        Ok(self.tcp.get(h)?.buffer(which))
    }

    /// Sets buffer `which` of the connections listener `l` accepts from now on (set before
    /// the SYN, as on Linux, a receive buffer also chooses the window scale).
    pub fn tcp_set_listener_buffer(
        &mut self,
        l: ListenHandle,
        which: Buffer,
        bytes: u32,
    ) -> Result<(), TcpError> {
        self.tcp.set_listener_buffer(l, which, bytes)
    }

    /// Turn keepalive on or off (`SO_KEEPALIVE`), with the interface's
    /// [`crate::tcp::TcpConfig`] times and probe count.
    pub fn tcp_set_keepalive<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        on: bool,
        now: Instant,
    ) -> Result<(), TcpError> {
        let cfg = self.tcp.cfg.clone();
        self.tcp.get_mut(h)?.set_keepalive(on, now, &cfg);
        self.tcp.finish(pool, h_idx(h));
        Ok(())
    }

    /// A connection's state, windows and timers.
    pub fn tcp_info(&self, h: TcpHandle) -> Result<TcpInfo, TcpError> {
        Ok(self.tcp.get(h)?.info())
    }

    /// Every connection's [`TcpInfo`], with its handle, in any state (for `shmnet sockets`).
    pub fn tcp_infos(&self) -> impl Iterator<Item = (TcpHandle, TcpInfo)> + '_ {
        self.tcp.connections().map(|(h, c)| (h, c.info()))
    }

    /// Listener `l` as tools see it.
    pub fn tcp_listener_info(&self, l: ListenHandle) -> Result<crate::tcp::ListenerInfo, TcpError> {
        self.tcp.listener_info(l)
    }

    /// Puts `data`, bytes the application read from connection `h`, back in front of what
    /// it reads next ([`Conn::unread`]): `Ok(false)` when they cannot be (too few buffers, or
    /// the connection has ended).
    pub fn tcp_unread<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        h: TcpHandle,
        data: &[u8],
    ) -> Result<bool, TcpError> {
        Ok(self.tcp.get_mut(h)?.unread(pool, data))
    }

    /// A connection's state.
    pub fn tcp_state(&self, h: TcpHandle) -> Result<State, TcpError> {
        Ok(self.tcp.get(h)?.state())
    }

    /// Why a connection ended badly, if it did.
    pub fn tcp_error(&self, h: TcpHandle) -> Result<Option<CloseReason>, TcpError> {
        Ok(self.tcp.get(h)?.error())
    }

    /// TCP's counters.
    pub fn tcp_counters(&self) -> &TcpCounters {
        &self.tcp.counters
    }

    /// Connections in the table, in any state.
    pub fn tcp_connections(&self) -> usize {
        self.tcp.len()
    }

    /// The pool buffers TCP's queues hold now (a walk of every connection: for stats).
    pub fn tcp_memory(&self) -> crate::tcp::TcpMemory {
        self.tcp.memory()
    }
}

fn h_idx(h: TcpHandle) -> u32 {
    h.index()
}

/// The smoltcp header representation of `seg`.
fn repr_of(seg: &SegOut, src_port: u16, dst_port: u16) -> TcpRepr<'static> {
    let control = if seg.syn {
        TcpControl::Syn
    } else if seg.fin {
        TcpControl::Fin
    } else if seg.rst {
        TcpControl::Rst
    } else if seg.psh {
        TcpControl::Psh
    } else {
        TcpControl::None
    };
    TcpRepr {
        src_port,
        dst_port,
        control,
        seq_number: seg.seq.into(),
        ack_number: seg.ack.map(Into::into),
        window_len: seg.wnd,
        window_scale: seg.wscale,
        max_seg_size: seg.mss,
        sack_permitted: seg.sack_perm,
        sack_ranges: seg.sack.map(|r| r.map(|(s, e)| (s.0, e.0))),
        timestamp: seg
            .ts
            .map(|(v, e)| smoltcp::wire::TcpTimestampRepr::new(v, e)),
        payload: &[],
    }
}

/// The TCP header length of `seg`.
fn header_len(seg: &SegOut) -> usize {
    repr_of(seg, 1, 1).header_len()
}
