//! IPv6's receive path, for an interface given an address ([`Config::ipv6`]): it answers
//! neighbour solicitations for that address (RFC 4861) and ICMPv6 echo requests
//! (RFC 4443), so that a host on the link can resolve and ping it; every other ICMPv6
//! message is consumed and counted (`icmpv6_other`).
//!
//! What it leaves out: a neighbour cache (an answer goes to the link-layer address the
//! request came from, or named in its source link-layer address option), extension headers
//! and fragments (counted `ipv6_unsupported`), UDP and TCP over IPv6 (the same), MLD (we
//! report no group: a switch that snoops MLD may withhold our solicited-node group), router
//! discovery and address autoconfiguration.
//!
//! Invariants: the frame handed to [`Interface::rx_ipv6`] is either sent back as the answer
//! (rewritten in place, as ARP's replies are: no other buffer is taken) or freed, exactly
//! once; a refused packet is counted under exactly one drop counter ([`Refused`]); nothing
//! here allocates or panics on any input.

use std::net::Ipv6Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, IpProtocol, Ipv6Repr,
    NdiscNeighborFlags, NdiscRepr, RawHardwareAddress,
};

use super::{Config, Interface, TxSink};
use crate::buf::{BufIdx, BufferPool, set_window, valid};
use crate::eth;
use crate::ipv6::{self, ALL_NODES, Addressing, Ipv6Error};

/// Why an IPv6 packet was refused; each names one drop counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    /// Shorter than the IPv6 header (`runt`).
    Runt,
    /// Malformed: header, ICMPv6 message, checksum, or a solicitation failing RFC 4861's
    /// validation (`ipv6_bad`).
    Bad,
    /// Addressed to another node (`ipv6_not_for_us`).
    NotForUs,
    /// Next header other than ICMPv6, or an echo whose reply would exceed the MTU
    /// (`ipv6_unsupported`).
    Unsupported,
}

/// The answer a valid ICMPv6 message for us asks for: sent from our address, to `to` at
/// Ethernet address `mac`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reply {
    to: Ipv6Addr,
    mac: EthernetAddress,
    kind: ReplyKind,
}

/// Which answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyKind {
    /// An echo reply: the request's `msg_len` bytes of ICMPv6 turned round.
    Echo { msg_len: usize },
    /// A neighbour advertisement of our address with `flags`.
    Advert { flags: NdiscNeighborFlags },
}

impl Interface {
    /// Process one IPv6 frame (a single buffer, its Ethernet header already read: source
    /// `src_mac`). Without an IPv6 address the frame is not ours (`unknown_ethertype`).
    #[inline(never)]
    pub(super) fn rx_ipv6<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        frame: BufIdx,
        src_mac: EthernetAddress,
        tx: &mut T,
    ) {
        let Some((addr, _)) = self.cfg.ipv6 else {
            self.stats.unknown_ethertype += 1;
            pool.free(frame);
            return;
        };
        let bytes = valid(pool, frame).get(eth::HEADER_LEN..).unwrap_or(&[]);
        let reply = check_header(&self.cfg, addr, bytes).and_then(|(h, msg)| {
            self.stats.ipv6_rx += 1;
            classify(&self.cfg, addr, &h, msg, src_mac)
        });
        match reply {
            Ok(Some(r)) => self.reply_ipv6(pool, frame, addr, r, tx),
            Ok(None) => {
                self.stats.icmpv6_other += 1;
                pool.free(frame);
            }
            Err(why) => {
                *match why {
                    Refused::Runt => &mut self.stats.runt,
                    Refused::Bad => &mut self.stats.ipv6_bad,
                    Refused::NotForUs => &mut self.stats.ipv6_not_for_us,
                    Refused::Unsupported => &mut self.stats.ipv6_unsupported,
                } += 1;
                pool.free(frame);
            }
        }
    }

    /// Rewrite `frame` into reply `r` from `addr` and send it.
    fn reply_ipv6<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        frame: BufIdx,
        addr: Ipv6Addr,
        r: Reply,
        tx: &mut T,
    ) {
        let off = usize::from(pool.off(frame));
        let cap = pool.capacity();
        let head = Addressing {
            src_mac: self.cfg.mac,
            dst_mac: r.mac,
            src: addr,
            dst: r.to,
        };
        let written = match r.kind {
            // The reply is no longer than the request, which lies within the buffer from
            // `off` (checked by `receive`).
            ReplyKind::Echo { msg_len } => {
                let buf = pool.data_mut(frame).get_mut(off..).unwrap_or_default();
                ipv6::echo_reply_in_place(buf, &head, self.cfg.ttl, msg_len).map(|n| (off, n))
            }
            // Written where the solicitation was, or from the buffer's start when it lay too
            // close to the end (an advertisement is 8 bytes longer than a solicitation
            // without options).
            ReplyKind::Advert { flags } => {
                let at = if off + ipv6::ADVERT_FRAME_LEN <= cap {
                    off
                } else {
                    0
                };
                let buf = pool.data_mut(frame).get_mut(at..).unwrap_or_default();
                ipv6::write_advert(buf, &head, flags, addr).map(|n| (at, n))
            }
        };
        let Ok((at, len)) = written else {
            // Only a pool whose buffers cannot hold an 86-byte frame gets here.
            self.stats.no_buffers += 1;
            pool.free(frame);
            return;
        };
        set_window(pool, frame, at, len);
        match r.kind {
            ReplyKind::Echo { .. } => self.stats.icmpv6_echo_replies += 1,
            ReplyKind::Advert { .. } => self.stats.nd_advertisements_sent += 1,
        }
        self.stats.tx_frames += 1;
        self.maintain_tx(pool, frame, usize::MAX);
        tx.transmit(frame);
    }
}

/// Check the IPv6 header of `packet` (an Ethernet payload) for us, whose address is `addr`,
/// and return it with its ICMPv6 message (the payload, Ethernet padding cut off).
///
/// Ours are packets to `addr`, to its solicited-node group or to all nodes (the groups a
/// node joins, RFC 4291 section 2.8), from an address that is not multicast (RFC 4291
/// section 2.7) nor ours (spoofed; unless the device is a loopback, as for IPv4).
fn check_header<'a>(
    cfg: &Config,
    addr: Ipv6Addr,
    packet: &'a [u8],
) -> Result<(Ipv6Repr, &'a [u8]), Refused> {
    let h = ipv6::parse(packet).map_err(|e| match e {
        Ipv6Error::Runt => Refused::Runt,
        Ipv6Error::BadVersion | Ipv6Error::BadLength => Refused::Bad,
    })?;
    if h.dst_addr != addr && h.dst_addr != ipv6::solicited_node(addr) && h.dst_addr != ALL_NODES {
        return Err(Refused::NotForUs);
    }
    if h.src_addr.is_multicast() || (h.src_addr == addr && !cfg.loopback) {
        return Err(Refused::Bad);
    }
    if h.next_header != IpProtocol::Icmpv6 {
        return Err(Refused::Unsupported);
    }
    let msg = packet
        .get(ipv6::HEADER_LEN..ipv6::HEADER_LEN + h.payload_len)
        .ok_or(Refused::Bad)?;
    Ok((h, msg))
}

/// What ICMPv6 message `msg` of packet `h` (checked by [`check_header`]), from Ethernet
/// source `src_mac`, asks of us (address `addr`): a reply, or nothing (consumed).
fn classify(
    cfg: &Config,
    addr: Ipv6Addr,
    h: &Ipv6Repr,
    msg: &[u8],
    src_mac: EthernetAddress,
) -> Result<Option<Reply>, Refused> {
    // RFC 4443 section 2.4 (and RFC 4861 section 7.1.1): a message with a wrong checksum,
    // or too short to have one, is discarded.
    if msg.len() < 4 || !ipv6::icmpv6_checksum_ok(h.src_addr, h.dst_addr, msg) {
        return Err(Refused::Bad);
    }
    let p = Icmpv6Packet::new_unchecked(msg);
    if !matches!(
        p.msg_type(),
        Icmpv6Message::EchoRequest | Icmpv6Message::NeighborSolicit
    ) {
        // Advertisements, router discovery, MLD, errors, and types we do not know.
        return Ok(None);
    }
    // smoltcp checks the length of the type's header, a zero code, and the options of a
    // solicitation (none of length zero, RFC 4861 section 7.1.1); the checksum is verified.
    let repr = Icmpv6Repr::parse(
        &h.src_addr,
        &h.dst_addr,
        &p,
        &ChecksumCapabilities::ignored(),
    )
    .map_err(|_| Refused::Bad)?;
    match repr {
        Icmpv6Repr::EchoRequest { .. } => echo(cfg, h, msg.len(), src_mac).map(Some),
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr,
            lladdr,
        }) => solicitation(addr, h, target_addr, lladdr, src_mac).map(Some),
        _ => Ok(None),
    }
}

/// An echo request of `msg_len` bytes (RFC 4443 section 4.1, code 0 checked): replied to
/// from our address — also when it was sent to a multicast group (section 4.2) — at the
/// Ethernet address it came from.
fn echo(
    cfg: &Config,
    h: &Ipv6Repr,
    msg_len: usize,
    src_mac: EthernetAddress,
) -> Result<Reply, Refused> {
    // Nobody to answer: no source address, or a multicast or broadcast Ethernet source.
    if h.src_addr.is_unspecified() || !src_mac.is_unicast() {
        return Err(Refused::Bad);
    }
    // The reply is as long as the request; we do not fragment.
    if ipv6::HEADER_LEN + msg_len > cfg.mtu {
        return Err(Refused::Unsupported);
    }
    Ok(Reply {
        to: h.src_addr,
        mac: src_mac,
        kind: ReplyKind::Echo { msg_len },
    })
}

/// A neighbour solicitation for `target`, with source link-layer address `lladdr` if it
/// carried one: validated as RFC 4861 section 7.1.1 says (hop limit, code, length and
/// options; the rest here), answered as section 7.2.4 says when `target` is our `addr`
/// (section 7.2.3: else it is silently discarded — counted `ipv6_not_for_us`).
fn solicitation(
    addr: Ipv6Addr,
    h: &Ipv6Repr,
    target: Ipv6Addr,
    lladdr: Option<RawHardwareAddress>,
    src_mac: EthernetAddress,
) -> Result<Reply, Refused> {
    let dad = h.src_addr.is_unspecified();
    if h.hop_limit != ipv6::ND_HOP_LIMIT
        || target.is_multicast()
        // Duplicate address detection (RFC 4862 section 5.4.2) solicits the target's
        // solicited-node group, and has no link-layer address to give.
        || (dad && (!ipv6::is_solicited_node(h.dst_addr) || lladdr.is_some()))
    {
        return Err(Refused::Bad);
    }
    if target != addr {
        return Err(Refused::NotForUs);
    }
    if dad {
        // Another node's duplicate address detection for our address: we defend it, to all
        // nodes, Solicited clear (RFC 4861 section 7.2.4, RFC 4862 section 5.4.3).
        return Ok(Reply {
            to: ALL_NODES,
            mac: ipv6::multicast_mac(ALL_NODES),
            kind: ReplyKind::Advert {
                flags: NdiscNeighborFlags::OVERRIDE,
            },
        });
    }
    // To the source, at the link-layer address it named (an Ethernet address is 6 bytes),
    // else the one it came from; Solicited, and Override since the address is not anycast.
    let mac = match lladdr {
        Some(l) => EthernetAddress(l.as_bytes().try_into().map_err(|_| Refused::Bad)?),
        None => src_mac,
    };
    if !mac.is_unicast() {
        return Err(Refused::Bad);
    }
    Ok(Reply {
        to: h.src_addr,
        mac,
        kind: ReplyKind::Advert {
            flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
        },
    })
}

#[cfg(test)]
mod tests;
