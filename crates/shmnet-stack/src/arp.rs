//! ARP: the neighbour cache (with expiry and a size bound), the bounded queue of frames
//! waiting for an address to be resolved, and building ARP packets with smoltcp's
//! `ArpRepr`.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;

use smoltcp::wire::{ArpOperation, ArpPacket, ArpRepr, EthernetAddress};

use crate::Instant;
use crate::buf::{BufIdx, BufferPool};
use crate::eth;

/// A neighbour cache: IPv4 address to Ethernet address, each entry valid until its expiry.
///
/// Invariant: at most `capacity` entries; an insertion into a full cache first drops the
/// expired entries, then the entry closest to expiry.
#[derive(Debug)]
pub struct NeighborCache {
    map: HashMap<Ipv4Addr, (EthernetAddress, Instant)>,
    capacity: usize,
}

impl NeighborCache {
    /// An empty cache of at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> NeighborCache {
        NeighborCache {
            map: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// The Ethernet address of `ip` if known and not expired at `now`.
    pub fn lookup(&self, ip: Ipv4Addr, now: Instant) -> Option<EthernetAddress> {
        match self.map.get(&ip) {
            Some(&(mac, expires)) if now < expires => Some(mac),
            _ => None,
        }
    }

    /// Whether `ip` has an entry (expired or not).
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.map.contains_key(&ip)
    }

    /// Insert or refresh an entry valid until `expires`.
    pub fn insert(&mut self, ip: Ipv4Addr, mac: EthernetAddress, now: Instant, expires: Instant) {
        if !self.map.contains_key(&ip) && self.map.len() >= self.capacity {
            self.expire(now);
            let oldest = (self.map.len() >= self.capacity)
                .then(|| {
                    self.map
                        .iter()
                        .min_by_key(|(_, (_, e))| *e)
                        .map(|(k, _)| *k)
                })
                .flatten();
            if let Some(oldest) = oldest {
                self.map.remove(&oldest);
            }
        }
        self.map.insert(ip, (mac, expires));
    }

    /// Drop every entry expired at `now`.
    pub fn expire(&mut self, now: Instant) {
        self.map.retain(|_, (_, e)| now < *e);
    }

    /// Number of entries (expired ones included until the next `expire`).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// One frame waiting for its next hop to be resolved. The frame is complete except for the
/// Ethernet destination address.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    next_hop: Ipv4Addr,
    frame: BufIdx,
    queued_at: Instant,
}

/// Frames waiting for ARP answers, bounded to `limit` frames in all, plus the time of the
/// last request sent for each address being resolved.
#[derive(Debug)]
pub struct PendingQueue {
    frames: VecDeque<Waiting>,
    requests: Vec<(Ipv4Addr, Instant)>,
    limit: usize,
}

impl PendingQueue {
    /// An empty queue holding at most `limit` frames.
    pub fn new(limit: usize) -> PendingQueue {
        PendingQueue {
            frames: VecDeque::new(),
            requests: Vec::new(),
            limit,
        }
    }

    /// Number of frames waiting.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether no frame waits.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Room left for this many more frames.
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.frames.len())
    }

    /// Queue a frame; the caller has checked [`room`](Self::room). Returns `Err(frame)` when
    /// the queue is full so the caller can free it.
    pub fn push(&mut self, next_hop: Ipv4Addr, frame: BufIdx, now: Instant) -> Result<(), BufIdx> {
        if self.frames.len() >= self.limit {
            return Err(frame);
        }
        self.frames.push_back(Waiting {
            next_hop,
            frame,
            queued_at: now,
        });
        Ok(())
    }

    /// Whether a request for `ip` should be sent now: none was sent, or the last one is
    /// older than `retry`. Records `now` as the time of the request when it returns true.
    pub fn should_request(&mut self, ip: Ipv4Addr, now: Instant, retry: u64) -> bool {
        match self.requests.iter_mut().find(|(a, _)| *a == ip) {
            Some((_, t)) if now.nanos().saturating_sub(t.nanos()) < retry => false,
            Some((_, t)) => {
                *t = now;
                true
            }
            None => {
                self.requests.push((ip, now));
                true
            }
        }
    }

    /// Remove and return, in order, every frame waiting for `ip`.
    pub fn take_for(&mut self, ip: Ipv4Addr) -> Vec<BufIdx> {
        let mut out = Vec::new();
        self.frames.retain(|w| {
            if w.next_hop == ip {
                out.push(w.frame);
                false
            } else {
                true
            }
        });
        self.requests.retain(|(a, _)| *a != ip);
        out
    }

    /// Remove the frames queued at or before `now - timeout`, returning them (to be freed),
    /// and return the addresses still waiting whose last request is older than `retry`
    /// (to be asked again).
    pub fn expire(
        &mut self,
        now: Instant,
        timeout: u64,
        retry: u64,
    ) -> (Vec<BufIdx>, Vec<Ipv4Addr>) {
        let mut dead = Vec::new();
        self.frames.retain(|w| {
            if now.nanos().saturating_sub(w.queued_at.nanos()) >= timeout {
                dead.push(w.frame);
                false
            } else {
                true
            }
        });
        let frames = &self.frames;
        self.requests
            .retain(|(a, _)| frames.iter().any(|w| w.next_hop == *a));
        let mut again = Vec::new();
        for (a, t) in &mut self.requests {
            if now.nanos().saturating_sub(t.nanos()) >= retry {
                *t = now;
                again.push(*a);
            }
        }
        (dead, again)
    }

    /// The earliest time at which [`expire`](Self::expire) has work: a frame's timeout or a
    /// request's retry.
    pub fn next_deadline(&self, timeout: u64, retry: u64) -> Option<Instant> {
        let frames = self
            .frames
            .iter()
            .map(|w| w.queued_at.nanos().saturating_add(timeout));
        let reqs = self
            .requests
            .iter()
            .map(|(_, t)| t.nanos().saturating_add(retry));
        frames.chain(reqs).min().map(Instant::from_nanos)
    }

    /// Remove every frame (to be freed).
    pub fn drain(&mut self) -> Vec<BufIdx> {
        self.requests.clear();
        self.frames.drain(..).map(|w| w.frame).collect()
    }
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;

/// Write an Ethernet frame carrying `repr` into buffer `idx` (from offset 0) and set its
/// window. The capacity must be at least [`FRAME_LEN`] bytes.
pub fn write_arp<P: BufferPool + ?Sized>(
    pool: &mut P,
    idx: BufIdx,
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    repr: &ArpRepr,
) {
    emit_frame(pool.data_mut(idx), src_mac, dst_mac, repr);
    crate::buf::set_window(pool, idx, 0, FRAME_LEN);
}

/// Length of an Ethernet frame carrying an ARP packet (without padding).
pub const FRAME_LEN: usize = eth::HEADER_LEN + ARP_LEN;

/// Write an Ethernet frame carrying `repr` at the start of `buf` (at least [`FRAME_LEN`]
/// bytes).
pub fn emit_frame(
    buf: &mut [u8],
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    repr: &ArpRepr,
) {
    let data = &mut buf[..FRAME_LEN];
    eth::write_header(data, src_mac, dst_mac, smoltcp::wire::EthernetProtocol::Arp);
    repr.emit(&mut ArpPacket::new_unchecked(&mut data[eth::HEADER_LEN..]));
}

/// Read the ARP packet at the start of `packet` (an Ethernet payload); `None` if it is too
/// short or not an Ethernet/IPv4 ARP packet.
#[inline]
pub fn parse(packet: &[u8]) -> Option<ArpRepr> {
    ArpPacket::new_checked(packet)
        .ok()
        .and_then(|p| ArpRepr::parse(&p).ok())
}

/// An ARP request for `target` from (`mac`, `ip`).
pub fn request_repr(mac: EthernetAddress, ip: Ipv4Addr, target: Ipv4Addr) -> ArpRepr {
    ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: mac,
        source_protocol_addr: ip,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    }
}
