//! UDP over IPv4 multicast: sockets join groups, datagrams to a joined group are delivered,
//! datagrams to a group are sent (with the socket's multicast TTL, and a copy for our own
//! socket on the port when it loops back), and IGMP ([`crate::igmp`]) reports it all.
//!
//! As on Linux with `IP_MULTICAST_ALL` (its default), a datagram to a group the interface
//! belongs to goes to the socket bound to its port, whichever socket joined: the stack binds
//! one socket per port, so "every socket on the port" is that one.
//!
//! **Looping back.** A datagram sent to a group the interface belongs to is also delivered
//! to our socket on its port, unless the sending socket turned `loop` off
//! ([`MulticastOp::Loop`], Linux's `IP_MULTICAST_LOOP`, on by default). The copy is made
//! here from the bytes sent; on a loopback device ([`crate::Config::loopback`]) the device
//! hands the frame back instead, and no copy is made.

use std::net::{Ipv4Addr, SocketAddrV4};

use super::{Interface, TxSink};
use crate::buf::BufferPool;
use crate::igmp::{self, Message as IgmpMessage};
use crate::ipv4::Datagram;
use crate::socket::{Message, SocketHandle};
use crate::tcp::memory::PoolLevel;
use crate::tcp::queue::ChainQueue;
use crate::{Instant, eth};

/// A change to a UDP socket's multicast state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MulticastOp {
    /// Join a group (`IP_ADD_MEMBERSHIP`).
    Join(Ipv4Addr),
    /// Leave a group (`IP_DROP_MEMBERSHIP`).
    Leave(Ipv4Addr),
    /// The TTL of the datagrams it sends to groups (`IP_MULTICAST_TTL`; 1 by default: the
    /// link only).
    Ttl(u8),
    /// Whether its datagrams to a group we belong to come back to our own socket on their
    /// port (`IP_MULTICAST_LOOP`; on by default).
    Loop(bool),
}

/// Why a multicast change was refused. Nothing changed.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize,
)]
pub enum MulticastError {
    /// No such socket.
    #[error("invalid socket handle")]
    InvalidHandle,
    /// The address is not a group a socket may join (not multicast, or all-systems).
    #[error("not a multicast group")]
    NotMulticast,
    /// The socket is in that group already.
    #[error("the socket is in that group already")]
    AlreadyJoined,
    /// The socket is not in that group.
    #[error("the socket is not in that group")]
    NotJoined,
    /// The socket is in [`igmp::MAX_SOCKET_GROUPS`] groups, or the interface in
    /// [`igmp::MAX_GROUPS`].
    #[error("too many groups joined")]
    TooMany,
}

/// A socket's multicast state.
#[derive(Clone, Debug)]
pub(crate) struct SocketMulticast {
    /// The groups it joined (at most [`igmp::MAX_SOCKET_GROUPS`]; empty and unallocated
    /// until it joins one).
    pub(crate) groups: Vec<Ipv4Addr>,
    pub(crate) ttl: u8,
    pub(crate) looped: bool,
}

impl Default for SocketMulticast {
    fn default() -> Self {
        SocketMulticast {
            groups: Vec::new(),
            ttl: 1,
            looped: true,
        }
    }
}

impl Interface {
    /// Changes UDP socket `h`'s multicast state. A first join of a group by the interface,
    /// or its last leave, is reported by IGMP at the next [`Interface::poll`].
    pub fn udp_multicast(
        &mut self,
        h: SocketHandle,
        op: MulticastOp,
        now: Instant,
    ) -> Result<(), MulticastError> {
        let s = self
            .sockets
            .get_mut(h.0)
            .and_then(Option::as_mut)
            .ok_or(MulticastError::InvalidHandle)?;
        let m = &mut s.multicast;
        match op {
            MulticastOp::Ttl(t) => m.ttl = t,
            MulticastOp::Loop(on) => m.looped = on,
            MulticastOp::Join(g) => {
                if !igmp::joinable(g) {
                    return Err(MulticastError::NotMulticast);
                }
                if m.groups.contains(&g) {
                    return Err(MulticastError::AlreadyJoined);
                }
                if m.groups.len() >= igmp::MAX_SOCKET_GROUPS {
                    return Err(MulticastError::TooMany);
                }
                self.groups
                    .join(g, now)
                    .map_err(|()| MulticastError::TooMany)?;
                m.groups.push(g);
                self.stats.igmp_joins += 1;
            }
            MulticastOp::Leave(g) => {
                let Some(i) = m.groups.iter().position(|&x| x == g) else {
                    return Err(MulticastError::NotJoined);
                };
                m.groups.swap_remove(i);
                self.groups.leave(g, now);
                self.stats.igmp_leaves += 1;
            }
        }
        Ok(())
    }

    /// The groups UDP socket `h` joined.
    pub fn udp_groups(&self, h: SocketHandle) -> Result<&[Ipv4Addr], crate::RecvError> {
        Ok(&self.socket(h)?.multicast.groups)
    }

    /// Whether the interface belongs to `group` (through any socket; all-systems always).
    pub fn in_group(&self, group: Ipv4Addr) -> bool {
        self.groups.contains(group)
    }

    /// A closing socket leaves its groups.
    pub(super) fn leave_all(&mut self, groups: &[Ipv4Addr], now: Instant) {
        for &g in groups {
            self.groups.leave(g, now);
            self.stats.igmp_leaves += 1;
        }
    }

    /// An IGMP message to us (checked to be to a group we belong to, or all-systems).
    pub(super) fn rx_igmp<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        dg: Datagram,
        now: Instant,
    ) {
        let parsed = if dg.bufs == 1 {
            let bytes = crate::buf::valid(pool, dg.head);
            igmp::parse(&bytes[..dg.len.min(bytes.len())])
        } else {
            Err(igmp::IgmpError::Runt)
        };
        pool.free_chain(dg.head);
        match parsed {
            Ok(IgmpMessage::Query(q)) => {
                self.stats.igmp_queries += 1;
                self.groups.on_query(q, now);
            }
            Ok(IgmpMessage::Other) => self.stats.igmp_other += 1,
            Err(_) => self.stats.igmp_bad += 1,
        }
    }

    /// Sends the IGMP reports due at `now` (from `poll`).
    pub(super) fn send_igmp_due<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        now: Instant,
        tx: &mut T,
    ) {
        while let Some(report) = self.groups.take_due(now) {
            let version = self.groups.version(now);
            if pool.capacity() < eth::HEADER_LEN + igmp::IP_HEADER_LEN + igmp::MAX_MESSAGE {
                self.stats.no_buffers += 1;
                continue;
            }
            let Some(b) = pool.alloc() else {
                self.stats.no_buffers += 1;
                continue;
            };
            let ident = self.next_ident;
            self.next_ident = self.next_ident.wrapping_add(1);
            let src = self.cfg.ipv4;
            let data = pool.data_mut(b);
            let written = data
                .get_mut(eth::HEADER_LEN..)
                .and_then(|ip| igmp::write_report(&self.groups, report, version, src, ident, ip));
            let Some((dst, len)) = written else {
                pool.free(b);
                continue;
            };
            eth::write_header(
                data,
                self.cfg.mac,
                igmp::group_mac(dst),
                smoltcp::wire::EthernetProtocol::Ipv4,
            );
            pool.set_off_len(b, 0, (eth::HEADER_LEN + len) as u16);
            self.stats.igmp_reports_sent += 1;
            self.stats.tx_frames += 1;
            self.maintain_tx(pool, b, usize::MAX);
            tx.transmit(b);
        }
    }

    /// The multicast TTL and loop setting of socket `h` (for a send to a group).
    pub(super) fn multicast_of(&self, h: SocketHandle) -> (u8, bool) {
        self.socket(h)
            .map_or((1, false), |s| (s.multicast.ttl, s.multicast.looped))
    }

    /// Delivers a copy of the datagram `parts` sent from our `src_port` to `to` (a group
    /// we belong to) to our socket on its port, if there is one: the loop-back of a
    /// multicast send. Counted as a delivery; a copy that finds no buffers, a scarce pool
    /// or a full queue is dropped and counted as a received one would be.
    pub(super) fn loop_multicast<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        parts: &[&[u8]],
        src_port: u16,
        to: SocketAddrV4,
        now: Instant,
    ) {
        let Some(si) = self.udp_socket_for(*to.ip(), to.port()) else {
            return;
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let cap = pool.capacity().min(u16::MAX as usize);
        let bufs = len.div_ceil(cap.max(1)).max(1);
        // Admitted as a datagram from the wire would be (`rx_udp`): a socket nobody reads
        // cannot take the pool's last buffers through the loop either.
        let level = self.udp_pool_level(pool, bufs, now);
        let queued = self
            .sockets
            .get(si)
            .and_then(Option::as_ref)
            .map_or(0, |s| s.queued_bufs);
        let refused = match level {
            PoolLevel::Exhausted | PoolLevel::Reserved => true,
            PoolLevel::Scarce => queued > 0 && queued + bufs > super::UDP_POOL_FLOOR,
            _ => false,
        };
        if refused {
            self.stats.pool_drops += 1;
            return;
        }
        // The bytes into fresh buffers as TCP's send queue takes them (an empty datagram:
        // one empty buffer).
        let mut copy = ChainQueue::default();
        for part in parts {
            if copy.write(pool, part, u32::MAX, 0) < part.len() {
                copy.clear(pool);
                self.stats.no_buffers += 1;
                return;
            }
        }
        if copy.is_empty() {
            let Some(b) = pool.alloc() else {
                self.stats.no_buffers += 1;
                return;
            };
            pool.set_off_len(b, 0, 0);
            pool.set_next(b, None);
            copy.link(pool, b, b, 0, 1);
        }
        let Some(head) = copy.head() else { return };
        let msg = Message {
            head,
            len,
            bufs: copy.bufs() as usize,
            src: SocketAddrV4::new(self.cfg.ipv4, src_port),
        };
        let Some(s) = self.sockets.get_mut(si).and_then(Option::as_mut) else {
            pool.free_chain(head);
            return;
        };
        match s.push(msg) {
            Ok(()) => {
                self.stats.udp_delivered += 1;
                self.stats.multicast_looped += 1;
            }
            Err(m) => {
                self.stats.queue_full += 1;
                pool.free_chain(m.head);
            }
        }
    }
}
