//! `shmnet sockets`: the server's sockets listed as `ss -tunap` lists the kernel's — once
//! traffic bypasses the kernel, `ss` sees none of them.
//!
//! The data plane answers a [`crate::control::Request::Sockets`] with one [`SocketsPage`]
//! at a time (a control message holds at most [`crate::control::MAX_MSG`] bytes, and a
//! server may hold 100,000 connections): the asker sends the page's `next` cursor back
//! until it is `None`. Like a netlink dump, the listing is not one atomic snapshot — a
//! socket opened or closed between two pages may be missed or seen — but every page is.
//!
//! The order, and what a cursor names: first every TCP connection of the stack, by slot
//! (cursor = the slot), whoever holds it — an application, several after a `fork`, or
//! none (closed by its application and still in FIN-WAIT, TIME-WAIT…); then the sockets
//! applications hold that are not connections — UDP sockets and listeners — application
//! by application (cursor = [`APP_PHASE`] + application index × 65,536 + socket number).

use super::sockets::AppSocket;
use serde::{Deserialize, Serialize};
use shmnet_stack::Interface;
use shmnet_stack::tcp::{ListenerInfo, State, TcpInfo};
use std::net::SocketAddrV4;

/// Where the cursor of the second part of a listing starts (see the [module docs](self)).
pub const APP_PHASE: u64 = 1 << 40;

/// Entries per page at most (fewer when their owners are many: a page stays well under a
/// control message).
pub const PAGE_ENTRIES: usize = 64;

/// A socket's transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// TCP: a connection or a listener.
    Tcp,
    /// UDP.
    Udp,
}

/// A socket's state: TCP's RFC 9293 states, a listener, or a UDP socket (which `ss`
/// calls `UNCONN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SocketState {
    /// A TCP listener.
    Listen,
    /// A bound UDP socket.
    Unconn,
    /// A TCP connection in this state.
    #[serde(untagged)]
    Tcp(State),
}

impl SocketState {
    /// The name `ss` prints for it.
    pub fn ss_name(self) -> &'static str {
        match self {
            SocketState::Listen => "LISTEN",
            SocketState::Unconn => "UNCONN",
            SocketState::Tcp(s) => match s {
                State::SynSent => "SYN-SENT",
                State::SynReceived => "SYN-RECV",
                State::Established => "ESTAB",
                State::FinWait1 => "FIN-WAIT-1",
                State::FinWait2 => "FIN-WAIT-2",
                State::CloseWait => "CLOSE-WAIT",
                State::Closing => "CLOSING",
                State::LastAck => "LAST-ACK",
                State::TimeWait => "TIME-WAIT",
                State::Closed => "CLOSED",
            },
        }
    }
}

/// An application holding a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketOwner {
    /// Its process (as its control socket's credentials said when it attached).
    pub pid: i32,
    /// Its user.
    pub uid: u32,
    /// The socket's number in that application (not its file descriptor: the sockets
    /// library maps descriptors to numbers in the program).
    pub socket: u32,
}

/// One socket of the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SocketEntry {
    /// TCP or UDP.
    pub proto: Proto,
    /// Its state.
    pub state: SocketState,
    /// Our address and port.
    pub local: SocketAddrV4,
    /// The peer's (`None` for listeners and UDP sockets).
    pub remote: Option<SocketAddrV4>,
    /// As `ss`'s Recv-Q: bytes received and not yet delivered to the application
    /// (connections, UDP sockets); connections waiting for `accept` (listeners).
    pub recv_q: u64,
    /// As `ss`'s Send-Q: bytes queued to send and not yet acknowledged (connections); the
    /// backlog (listeners); 0 for UDP.
    pub send_q: u64,
    /// Who holds it: none once its application closed it (TIME-WAIT, a FIN still to be
    /// acknowledged), several after a `fork` shared it.
    pub owners: Vec<SocketOwner>,
    /// Holders beyond the first [`MAX_OWNERS`], not listed.
    #[serde(default)]
    pub more_owners: u32,
    /// A connection's windows, timers and counters.
    pub tcp: Option<TcpInfo>,
    /// A listener's queues.
    pub listener: Option<ListenerInfo>,
    /// A UDP socket: datagrams its full queue refused.
    pub udp_overflows: Option<u64>,
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketsPage {
    /// Its sockets, at most [`PAGE_ENTRIES`].
    pub entries: Vec<SocketEntry>,
    /// The cursor to ask with for the next page; `None` after the last.
    pub next: Option<u64>,
}

/// An application as the listing sees it.
pub(crate) struct AppView<'a> {
    pub(crate) pid: i32,
    pub(crate) uid: u32,
    pub(crate) sockets: &'a super::sockets::Sockets,
}

/// Bytes of JSON a page may take, by [`SocketEntry::size_bound`]: room to spare in a
/// control message.
const PAGE_BYTES: usize = crate::control::MAX_MSG * 3 / 4;

/// The page of the listing that starts at cursor `from` (see the [module docs](self)).
/// Built by the data plane between rounds: for each socket on the page it walks the
/// applications' tables once for its owners.
pub(crate) fn page(iface: &Interface, apps: &[AppView<'_>], from: u64) -> SocketsPage {
    let mut page = Page::default();
    if from < APP_PHASE {
        for (h, info) in iface
            .tcp_infos()
            .filter(|(h, _)| u64::from(h.index()) >= from)
        {
            let mut e = connection(info);
            set_owners(
                &mut e,
                apps,
                |s| matches!(s, AppSocket::Tcp(t) | AppSocket::Lingering(t) if t.h == h),
            );
            if !page.add(e) {
                return page.done(Some(u64::from(h.index())));
            }
        }
    }
    let at = from.saturating_sub(APP_PHASE);
    let (first_app, first_socket) = ((at >> 16) as usize, (at & 0xffff) as usize);
    let ip = iface.config().ipv4;
    for (ai, a) in apps.iter().enumerate().skip(first_app) {
        for (n, s) in a.sockets.entries() {
            if ai == first_app && n < first_socket {
                continue;
            }
            let e = match s {
                AppSocket::Udp(h) => SocketEntry {
                    proto: Proto::Udp,
                    state: SocketState::Unconn,
                    local: iface.udp_local_addr(h).unwrap_or(SocketAddrV4::new(ip, 0)),
                    remote: None,
                    recv_q: iface.udp_queued_bytes(h).unwrap_or(0) as u64,
                    send_q: 0,
                    owners: vec![owner(a, n)],
                    more_owners: 0,
                    tcp: None,
                    listener: None,
                    udp_overflows: iface.udp_overflows(h).ok(),
                },
                AppSocket::Listener { l, .. } => {
                    // A listener a fork shared is listed once, under the first application
                    // holding it, with every holder.
                    let holds =
                        |s: AppSocket| matches!(s, AppSocket::Listener { l: o, .. } if o == l);
                    let earlier = apps[..ai]
                        .iter()
                        .any(|b| b.sockets.entries().any(|(_, s)| holds(s)));
                    let Ok(li) = iface.tcp_listener_info(l) else {
                        continue;
                    };
                    if earlier {
                        continue;
                    }
                    let mut e = SocketEntry {
                        proto: Proto::Tcp,
                        state: SocketState::Listen,
                        local: SocketAddrV4::new(ip, li.port),
                        remote: None,
                        recv_q: u64::from(li.ready),
                        send_q: u64::from(li.backlog),
                        owners: Vec::new(),
                        more_owners: 0,
                        tcp: None,
                        listener: Some(li),
                        udp_overflows: None,
                    };
                    set_owners(&mut e, &apps[ai..], holds);
                    e
                }
                _ => continue,
            };
            if !page.add(e) {
                return page.done(Some(APP_PHASE + ((ai as u64) << 16) + n as u64));
            }
        }
    }
    page.done(None)
}

/// A page being filled, within [`PAGE_ENTRIES`] and [`PAGE_BYTES`].
#[derive(Default)]
struct Page {
    entries: Vec<SocketEntry>,
    bytes: usize,
}

impl Page {
    /// Adds `e` if the page has room for it; `false` (and `e` dropped) if not.
    fn add(&mut self, e: SocketEntry) -> bool {
        let b = e.size_bound();
        if self.entries.len() == PAGE_ENTRIES || self.bytes + b > PAGE_BYTES {
            return false;
        }
        self.bytes += b;
        self.entries.push(e);
        true
    }

    fn done(self, next: Option<u64>) -> SocketsPage {
        SocketsPage {
            entries: self.entries,
            next,
        }
    }
}

/// Owners listed per socket at most ([`SocketEntry::more_owners`] counts the rest): a
/// socket a prefork server shares among thousands of workers still fits a page.
pub const MAX_OWNERS: usize = 32;

/// Fills `e`'s owners: every socket of `apps` that `holds` says is it.
fn set_owners(e: &mut SocketEntry, apps: &[AppView<'_>], holds: impl Fn(AppSocket) -> bool) {
    for a in apps {
        for (n, s) in a.sockets.entries() {
            if holds(s) {
                if e.owners.len() < MAX_OWNERS {
                    e.owners.push(owner(a, n));
                } else {
                    e.more_owners += 1;
                }
            }
        }
    }
}

fn owner(a: &AppView<'_>, n: usize) -> SocketOwner {
    SocketOwner {
        pid: a.pid,
        uid: a.uid,
        socket: n as u32,
    }
}

/// A connection's entry, its owners still to be found.
fn connection(info: TcpInfo) -> SocketEntry {
    SocketEntry {
        proto: Proto::Tcp,
        state: SocketState::Tcp(info.state),
        local: info.local,
        remote: Some(info.remote),
        recv_q: u64::from(info.readable),
        send_q: u64::from(info.send_queued),
        owners: Vec::new(),
        more_owners: 0,
        tcp: Some(info),
        listener: None,
        udp_overflows: None,
    }
}

impl SocketEntry {
    /// Bytes of JSON this entry takes at most (every number at its widest): what a page
    /// budgets for it.
    pub fn size_bound(&self) -> usize {
        // The entry with every field at its widest and no owner, measured by
        // `size_bounds_hold`; then each owner.
        const BASE: usize = 900;
        const PER_OWNER: usize = 64;
        BASE + PER_OWNER * self.owners.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_serialise_as_one_flat_name() {
        let j = |s: SocketState| serde_json::to_string(&s).unwrap();
        assert_eq!(j(SocketState::Listen), "\"listen\"");
        assert_eq!(j(SocketState::Unconn), "\"unconn\"");
        assert_eq!(j(SocketState::Tcp(State::TimeWait)), "\"time-wait\"");
        for s in [
            SocketState::Listen,
            SocketState::Unconn,
            SocketState::Tcp(State::Established),
            SocketState::Tcp(State::FinWait2),
        ] {
            let back: SocketState = serde_json::from_str(&j(s)).unwrap();
            assert_eq!(back, s);
        }
    }

    fn widest_entry(owners: usize) -> SocketEntry {
        let a: SocketAddrV4 = "255.255.255.255:65535".parse().unwrap();
        let info = TcpInfo {
            state: State::Established,
            local: a,
            remote: a,
            cwnd: u32::MAX,
            ssthresh: u32::MAX,
            srtt_us: u32::MAX,
            rto_us: u32::MAX,
            snd_wnd: u32::MAX,
            mss: u16::MAX,
            snd_wscale: 14,
            rcv_wscale: 14,
            send_queued: u32::MAX,
            readable: u32::MAX,
            ooo_bytes: u32::MAX,
            in_flight: u32::MAX,
            retransmits: u32::MAX,
            sack: true,
            timestamps: true,
        };
        let owner = SocketOwner {
            pid: i32::MIN,
            uid: u32::MAX,
            socket: u32::MAX,
        };
        SocketEntry {
            proto: Proto::Tcp,
            state: SocketState::Tcp(State::Established),
            local: a,
            remote: Some(a),
            recv_q: u64::MAX,
            send_q: u64::MAX,
            owners: vec![owner; owners],
            more_owners: u32::MAX,
            tcp: Some(info),
            listener: Some(ListenerInfo {
                port: u16::MAX,
                backlog: u32::MAX,
                half_open: u32::MAX,
                ready: u32::MAX,
            }),
            udp_overflows: Some(u64::MAX),
        }
    }

    #[test]
    fn size_bounds_hold() {
        for owners in [0, 1, 7, MAX_OWNERS] {
            let e = widest_entry(owners);
            let n = serde_json::to_vec(&e).unwrap().len();
            assert!(
                n <= e.size_bound(),
                "{owners} owners: {n} > {}",
                e.size_bound()
            );
        }
    }

    #[test]
    fn a_full_page_fits_a_control_message() {
        // The page budget in bytes, filled with the widest entries, plus the answer's frame.
        let mut page = Page::default();
        while page.add(widest_entry(3)) {}
        let resp = crate::control::Response::Sockets(Box::new(page.done(Some(u64::MAX))));
        let n = serde_json::to_vec(&resp).unwrap().len();
        assert!(n < crate::control::MAX_MSG, "{n} bytes");
        let mut page = Page::default();
        while page.add(widest_entry(MAX_OWNERS)) {}
        assert!(!page.entries.is_empty());
        let resp = crate::control::Response::Sockets(Box::new(page.done(Some(u64::MAX))));
        let n = serde_json::to_vec(&resp).unwrap().len();
        assert!(n < crate::control::MAX_MSG, "{n} bytes");
    }
}
