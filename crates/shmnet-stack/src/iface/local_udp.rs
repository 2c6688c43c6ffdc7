//! Host-local flow control for UDP: a datagram from one of this host's sockets to another
//! waits in its sender's queue rather than being dropped at the receiver's full queue.
//!
//! On a loopback device ([`Config::loopback`](crate::Config::loopback)) a datagram to our
//! own address comes back to one of our own sockets: both ends are applications of this
//! host, and the stack knows how full the receiver is before it sends. As Linux's AF_UNIX
//! datagram sockets do, the sender is held back while the receiving socket's queue —
//! counting the datagrams already on their way to it through the device — is full; the
//! receiver's reads make room and the sender goes on. Between two applications of one host
//! that keep reading, nothing is lost however fast the sender is. (Linux's UDP over `lo`
//! drops instead, which is why a fast UDP sender loses most of what it sends there.)
//!
//! A receiver that stops reading must not stop its senders for good: a socket that stays
//! full for [`Config::udp_local_hold`](crate::Config::udp_local_hold) lets its senders
//! through again — what they send then overflows its queue and is counted in `queue_full`,
//! as without flow control — until it has room once more, when holding resumes. Each
//! episode is counted: `udp_local_held` when senders start to be held,
//! `udp_local_hold_expired` when the hold runs out.
//!
//! The stack only answers "wait or send"; holding is the caller's: the server leaves the
//! datagram (and what its application sent after it) in the application's queue.
//!
//! Invariant: [`LocalInbound::inbound`] counts datagrams sent to the socket through the
//! loopback that have not arrived yet. Should one never arrive (a device that dropped it),
//! the count is forgotten once nothing has moved it for [`INBOUND_STALE`] — a loopback
//! hands frames back within a round of its owner's loop, microseconds.

use std::net::SocketAddrV4;
use std::time::Duration;

use super::Interface;
use crate::Instant;
use crate::socket::UdpSocket;

/// The default of [`Config::udp_local_hold`](crate::Config::udp_local_hold): long enough
/// for a receiver that is descheduled for a time slice or two to come back and read, short
/// enough that one that stopped costs its senders a pause, not a hang.
pub const UDP_LOCAL_HOLD: Duration = Duration::from_millis(20);

/// How long a nonzero in-flight count may stand still before it is taken for lost frames.
pub(crate) const INBOUND_STALE: Duration = Duration::from_millis(50);

/// A socket's side of host-local flow control.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LocalInbound {
    /// Datagrams sent to it through the loopback, not arrived yet.
    inbound: u32,
    /// When `inbound` last moved.
    moved: Instant,
    /// Whether, and since when, its senders are held.
    full: Full,
}

/// Whether a socket's senders are held back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Full {
    /// It has room: nobody waits.
    #[default]
    No,
    /// Full since then: senders wait until the hold runs out.
    Holding(Instant),
    /// Full past the hold: senders go on (and overflow it) until it has room again.
    Expired,
}

impl LocalInbound {
    /// One of ours arrived (queued or not: it is no longer on its way).
    pub(crate) fn arrived(&mut self, now: Instant) {
        self.inbound = self.inbound.saturating_sub(1);
        self.moved = now;
    }

    fn sent(&mut self, now: Instant) {
        self.inbound = self.inbound.saturating_add(1);
        self.moved = now;
    }

    /// The count, forgetting one that stood still too long (see the module's invariant).
    fn in_flight(&mut self, now: Instant) -> usize {
        if self.inbound > 0 && elapsed(self.moved, now) > INBOUND_STALE {
            self.inbound = 0;
        }
        self.inbound as usize
    }
}

fn elapsed(since: Instant, now: Instant) -> Duration {
    Duration::from_nanos(now.nanos().saturating_sub(since.nanos()))
}

impl Interface {
    /// Whether a datagram to `dst` sent at `now` should wait: `dst` is one of this host's
    /// UDP sockets, reached through the loopback, whose queue (with what is on its way to
    /// it) is full, and has been for less than [`Config::udp_local_hold`]. `false` for any
    /// other destination, or with the hold off.
    ///
    /// [`Config::udp_local_hold`]: crate::Config::udp_local_hold
    pub fn udp_local_wait(&mut self, dst: SocketAddrV4, now: Instant) -> bool {
        let Some(hold) = self.cfg.udp_local_hold else {
            return false;
        };
        let Some(s) = self.local_socket(dst) else {
            return false;
        };
        if s.queue.len() + s.from_host.in_flight(now) < s.limit {
            s.from_host.full = Full::No;
            return false;
        }
        match s.from_host.full {
            Full::No => {
                s.from_host.full = Full::Holding(now);
                self.stats.udp_local_held += 1;
                true
            }
            Full::Holding(since) if elapsed(since, now) < hold => true,
            Full::Holding(_) => {
                s.from_host.full = Full::Expired;
                self.stats.udp_local_hold_expired += 1;
                false
            }
            Full::Expired => false,
        }
    }

    /// After a datagram to `dst` went out: one more on its way, if `dst` is ours.
    pub(super) fn note_local_send(&mut self, dst: SocketAddrV4, now: Instant) {
        if self.cfg.udp_local_hold.is_none() {
            return;
        }
        if let Some(s) = self.local_socket(dst) {
            s.from_host.sent(now);
        }
    }

    /// The socket a datagram to `dst` comes back to through the loopback, if any (the one
    /// the receive path would deliver it to).
    fn local_socket(&mut self, dst: SocketAddrV4) -> Option<&mut UdpSocket> {
        if !self.cfg.loopback || *dst.ip() != self.cfg.ipv4 {
            return None;
        }
        let si = self.udp_socket_for(*dst.ip(), dst.port())?;
        self.sockets.get_mut(si).and_then(Option::as_mut)
    }
}
