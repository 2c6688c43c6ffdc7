//! IPv4 multicast, the host's side: which groups the interface belongs to, and IGMP — the
//! reports that tell multicast routers and snooping switches of its joins and leaves, and
//! its answers to their queries.
//!
//! The protocol is RFC 3376's IGMPv3 (what Linux speaks by default), any-source only: a
//! join is a `CHANGE_TO_EXCLUDE_MODE` record with no sources, a leave a
//! `CHANGE_TO_INCLUDE_MODE` one, each sent at once and repeated once ([`ROBUSTNESS`]) after
//! a random delay of up to [`UNSOLICITED_INTERVAL`]; a query is answered after a random
//! delay of up to its maximum response time with a `MODE_IS_EXCLUDE` record per group it
//! asks about. A querier speaking IGMPv1 or IGMPv2 (an 8-byte query) puts the host in that
//! version's compatibility mode for [`OLDER_QUERIER_TIMEOUT`] (RFC 3376 §7.2.1; a timer
//! per version, v1 ruling while both run): reports are then version 1 or 2 messages sent to
//! the group itself, one group each (an IGMPv3 query is answered so too), and leaves
//! (version 2 only) go to all-routers. The all-systems group 224.0.0.1 is always joined
//! (a socket may join it too) and never reported (RFC 3376 §5).
//!
//! Not built: other hosts' v1/v2 reports do not suppress ours (RFC 2236 §3 allows the
//! duplicate), and a group-and-source query is answered as its group's query.
//!
//! Written here rather than taken from smoltcp's `wire::igmp`: that module has no IGMPv3
//! (neither its reports nor its longer queries), and the messages are a few fixed bytes.
//!
//! Sans-I/O like the rest of the stack: [`Groups`] decides what to report and when; the
//! interface builds the frames ([`write_report`]) and sends them from its `poll`.
//!
//! Invariants: `joined` holds each group at most once, each with a nonzero count, at most
//! [`MAX_GROUPS`] of them; `due` holds at most one report per (kind, group): a change or an
//! answer for each group joined, one general answer, and leaves of groups no longer joined,
//! at most `3 × MAX_GROUPS + 1` in all (the oldest leave's repetition is given up past
//! that), so neither queries nor sockets churning through groups can grow it.

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::Instant;
use crate::checksum;

/// Groups the interface may belong to at once (over all its sockets): few enough that a
/// report of every one (8 bytes each) fits one frame of the smallest MTU IPv4 allows (576).
pub const MAX_GROUPS: usize = 64;
/// Groups one socket may join (Linux's `igmp_max_memberships` default).
pub const MAX_SOCKET_GROUPS: usize = 20;
/// Reports owed at most: a change and an answer per group joined, a general answer, and
/// as many leaves again (see [`Groups`]'s invariants).
const MAX_DUE: usize = 3 * MAX_GROUPS + 1;
/// Times a state change is reported (RFC 3376's Robustness Variable).
pub const ROBUSTNESS: u8 = 2;
/// The longest wait before a state change's repetition (RFC 3376's Unsolicited Report
/// Interval).
pub const UNSOLICITED_INTERVAL: Duration = Duration::from_secs(1);
/// How long an IGMPv1 or IGMPv2 querier keeps the host in that version's mode after its
/// last query: Robustness × Query Interval + Query Response Interval (2 × 125 s + 10 s).
pub const OLDER_QUERIER_TIMEOUT: Duration = Duration::from_secs(260);

/// All systems on this subnet: every host is a member; general queries go here.
pub const ALL_SYSTEMS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 1);
/// All multicast routers: IGMPv2 leaves go here.
pub const ALL_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 2);
/// IGMPv3-capable routers: IGMPv3 reports go here.
pub const ALL_V3_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 22);

const TYPE_QUERY: u8 = 0x11;
const TYPE_V1_REPORT: u8 = 0x12;
const TYPE_V2_REPORT: u8 = 0x16;
const TYPE_V2_LEAVE: u8 = 0x17;
const TYPE_V3_REPORT: u8 = 0x22;

/// IGMPv3 group record types (RFC 3376 §4.2.12).
const MODE_IS_EXCLUDE: u8 = 2;
const CHANGE_TO_INCLUDE: u8 = 3;
const CHANGE_TO_EXCLUDE: u8 = 4;

/// The Ethernet address frames to `group` go to (RFC 1112 §6.4: 01:00:5e and the group's
/// low 23 bits).
pub fn group_mac(group: Ipv4Addr) -> smoltcp::wire::EthernetAddress {
    let o = group.octets();
    smoltcp::wire::EthernetAddress([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
}

/// Whether `ip` is a group a socket may join: any multicast address (all-systems too, as
/// on Linux: every host is in it already, and it is never reported).
pub fn joinable(ip: Ipv4Addr) -> bool {
    ip.is_multicast()
}

/// Which IGMP version the host speaks, by the queriers it has heard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// IGMPv1 (RFC 1112): reports only, no leaves.
    V1,
    /// IGMPv2 (RFC 2236).
    V2,
    /// IGMPv3 (RFC 3376), the default.
    V3,
}

/// A query heard on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    /// The querier's version, from the message's length and maximum response code.
    pub version: Version,
    /// The group asked about; `None` for a general query.
    pub group: Option<Ipv4Addr>,
    /// The longest the answer may wait.
    pub max_response: Duration,
}

/// What an IGMP message heard on the link is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// A membership query.
    Query(Query),
    /// Another host's report or leave, or a message type a host ignores.
    Other,
}

/// Why an IGMP message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IgmpError {
    /// Shorter than its type's fixed part.
    #[error("shorter than an IGMP message")]
    Runt,
    /// The checksum over the message is wrong.
    #[error("wrong IGMP checksum")]
    BadChecksum,
    /// A query whose group is set but is not a multicast address.
    #[error("a query about a group that is not multicast")]
    BadGroup,
}

/// Parses an IGMP message (the IP payload, `bytes`).
pub fn parse(bytes: &[u8]) -> Result<Message, IgmpError> {
    if bytes.len() < 8 {
        return Err(IgmpError::Runt);
    }
    if !checksum::verify(bytes) {
        return Err(IgmpError::BadChecksum);
    }
    if bytes[0] != TYPE_QUERY {
        return Ok(Message::Other);
    }
    let group = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
    let group = if group.is_unspecified() {
        None
    } else if group.is_multicast() {
        Some(group)
    } else {
        return Err(IgmpError::BadGroup);
    };
    let code = bytes[1];
    let (version, tenths) = match bytes.len() {
        // RFC 3376 §7.1: 8 bytes is v1 (code 0, meaning 10 s) or v2; 12 or more is v3;
        // 9–11 bytes is no version and is ignored.
        8 if code == 0 => (Version::V1, 100),
        8 => (Version::V2, u32::from(code)),
        9..=11 => return Ok(Message::Other),
        _ => (Version::V3, v3_code_tenths(code)),
    };
    Ok(Message::Query(Query {
        version,
        group,
        max_response: Duration::from_millis(u64::from(tenths) * 100),
    }))
}

/// An IGMPv3 Max Resp Code in tenths of a second (RFC 3376 §4.1.1: a floating-point form
/// from 128 up).
fn v3_code_tenths(code: u8) -> u32 {
    if code < 128 {
        u32::from(code)
    } else {
        let mant = u32::from(code & 0x0f);
        let exp = u32::from((code >> 4) & 0x07);
        (mant | 0x10) << (exp + 3)
    }
}

/// A report the host is to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The host joined (`true`) or left the group: a state change.
    Change {
        /// The group.
        group: Ipv4Addr,
        /// Joined, or left.
        joined: bool,
    },
    /// The host's current membership, answering a query: of one group, or (`None`) of
    /// every group it belongs to.
    Current(Option<Ipv4Addr>),
}

#[derive(Clone, Copy, Debug)]
struct Member {
    group: Ipv4Addr,
    /// Sockets in the group.
    sockets: u32,
}

#[derive(Clone, Copy, Debug)]
struct Due {
    report: Report,
    at: Instant,
    /// Times still to send it (a state change is repeated).
    times: u8,
}

/// The groups the interface belongs to and the reports it owes.
#[derive(Debug)]
pub struct Groups {
    joined: Vec<Member>,
    due: Vec<Due>,
    /// Until when an IGMPv1 querier, and an IGMPv2 one, was last heard to be present
    /// (RFC 3376 §7.2.1 keeps one timer per older version).
    v1_until: Option<Instant>,
    v2_until: Option<Instant>,
    /// The state of the delays' random numbers (splitmix64).
    rng: u64,
}

impl Groups {
    /// No groups; `seed` varies the report delays between hosts (the interface's MAC).
    pub fn new(seed: u64) -> Groups {
        Groups {
            joined: Vec::new(),
            due: Vec::new(),
            v1_until: None,
            v2_until: None,
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// Whether the interface belongs to `group` (all-systems always).
    pub fn contains(&self, group: Ipv4Addr) -> bool {
        group == ALL_SYSTEMS || self.joined.iter().any(|m| m.group == group)
    }

    /// Groups joined (all-systems not counted).
    pub fn len(&self) -> usize {
        self.joined.len()
    }

    /// Whether no group is joined.
    pub fn is_empty(&self) -> bool {
        self.joined.is_empty()
    }

    /// The version the host speaks at `now`.
    pub fn version(&self, now: Instant) -> Version {
        let present = |t: Option<Instant>| t.is_some_and(|until| now < until);
        if present(self.v1_until) {
            Version::V1
        } else if present(self.v2_until) {
            Version::V2
        } else {
            Version::V3
        }
    }

    /// One more socket joins `group`: `Ok(true)` if it is the interface's first (a report
    /// is then due at once), `Err(())` if the interface is in [`MAX_GROUPS`] already.
    #[allow(clippy::result_unit_err)]
    pub fn join(&mut self, group: Ipv4Addr, now: Instant) -> Result<bool, ()> {
        if let Some(m) = self.joined.iter_mut().find(|m| m.group == group) {
            m.sockets += 1;
            return Ok(false);
        }
        if self.joined.len() >= MAX_GROUPS {
            return Err(());
        }
        self.joined.push(Member { group, sockets: 1 });
        if group != ALL_SYSTEMS {
            self.change(group, true, now);
        }
        Ok(true)
    }

    /// One socket leaves `group`: whether it was the last (a leave is then due).
    pub fn leave(&mut self, group: Ipv4Addr, now: Instant) -> bool {
        let Some(i) = self.joined.iter().position(|m| m.group == group) else {
            return false;
        };
        self.joined[i].sockets -= 1;
        if self.joined[i].sockets > 0 {
            return false;
        }
        self.joined.swap_remove(i);
        if group != ALL_SYSTEMS {
            self.change(group, false, now);
        }
        true
    }

    /// A state change: reported now, and repeated; it replaces whatever was due for the
    /// group.
    fn change(&mut self, group: Ipv4Addr, joined: bool, now: Instant) {
        self.due.retain(|d| match d.report {
            Report::Change { group: g, .. } | Report::Current(Some(g)) => g != group,
            Report::Current(None) => true,
        });
        // Leaves of groups no longer joined are the only entries not bounded by `joined`:
        // sockets churning through groups give up the oldest one's repetition first.
        if self.due.len() >= MAX_DUE
            && let Some(i) = self
                .due
                .iter()
                .enumerate()
                .filter(|(_, d)| matches!(d.report, Report::Change { joined: false, .. }))
                .min_by_key(|(_, d)| d.at)
                .map(|(i, _)| i)
        {
            self.due.swap_remove(i);
        }
        self.due.push(Due {
            report: Report::Change { group, joined },
            at: now,
            times: ROBUSTNESS,
        });
    }

    /// A query heard at `now`: schedules the answer (nothing for a group not joined).
    pub fn on_query(&mut self, q: Query, now: Instant) {
        let until = Some(now.after(OLDER_QUERIER_TIMEOUT));
        match q.version {
            Version::V1 => self.v1_until = until,
            Version::V2 => self.v2_until = until,
            Version::V3 => {}
        }
        if let Some(g) = q.group
            && !self.joined.iter().any(|m| m.group == g)
        {
            return;
        }
        if q.group.is_some() || self.version(now) == Version::V3 {
            self.answer(Report::Current(q.group), q.max_response, now);
        } else {
            // IGMPv1 and v2 report one group per message, each after its own delay
            // (RFC 2236 §3); so does a host in their mode answering an IGMPv3 query.
            for i in 0..self.joined.len() {
                let g = self.joined[i].group;
                if g != ALL_SYSTEMS {
                    self.answer(Report::Current(Some(g)), q.max_response, now);
                }
            }
        }
    }

    /// Schedules `report` within `max` of `now`. One answer per group asked about: an
    /// earlier one stands (RFC 3376 §5.2).
    fn answer(&mut self, report: Report, max: Duration, now: Instant) {
        let at = now.after(self.random_up_to(max));
        if let Some(d) = self.due.iter_mut().find(|d| d.report == report) {
            if at < d.at {
                d.at = at;
            }
            return;
        }
        self.due.push(Due {
            report,
            at,
            times: 1,
        });
    }

    /// The next report due at or before `now`, taken (a state change's repetition is
    /// rescheduled).
    pub fn take_due(&mut self, now: Instant) -> Option<Report> {
        let i = self.due.iter().position(|d| d.at <= now)?;
        let d = self.due[i];
        if d.times > 1 {
            let delay = self.random_up_to(UNSOLICITED_INTERVAL);
            self.due[i].times -= 1;
            self.due[i].at = now.after(delay.max(Duration::from_millis(1)));
        } else {
            self.due.swap_remove(i);
        }
        Some(d.report)
    }

    /// When a report is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.due.iter().map(|d| d.at).min()
    }

    /// The groups joined, in no order.
    pub fn groups(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.joined.iter().map(|m| m.group)
    }

    fn random_up_to(&mut self, max: Duration) -> Duration {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let span = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(if span == 0 { 0 } else { z % span })
    }
}

/// Bytes of the IPv4 header an IGMP message goes in: 20 and the Router Alert option
/// (RFC 2113), which RFC 2236 and RFC 3376 require.
pub const IP_HEADER_LEN: usize = 24;

/// The longest IGMP message [`write_report`] writes: an IGMPv3 report of every group.
pub const MAX_MESSAGE: usize = 8 + 8 * MAX_GROUPS;

/// Writes the IP packet (header with Router Alert, then the IGMP message) that sends
/// `report` in `version` from `src` into `buf`; returns its destination and length, or
/// `None` when there is nothing to send (a leave in IGMPv1, a current-state report with no
/// group, a group no longer joined) or `buf` is too short.
pub fn write_report(
    groups: &Groups,
    report: Report,
    version: Version,
    src: Ipv4Addr,
    ident: u16,
    buf: &mut [u8],
) -> Option<(Ipv4Addr, usize)> {
    let msg = &mut [0u8; MAX_MESSAGE];
    let (dst, len) = match version {
        Version::V3 => {
            let mut n = 0u16;
            let mut record = |group: Ipv4Addr, kind: u8, n: &mut u16| {
                let at = 8 + 8 * usize::from(*n);
                msg[at] = kind;
                msg[at + 4..at + 8].copy_from_slice(&group.octets());
                *n += 1;
            };
            match report {
                Report::Change { group, joined } => {
                    let kind = if joined {
                        CHANGE_TO_EXCLUDE
                    } else {
                        CHANGE_TO_INCLUDE
                    };
                    record(group, kind, &mut n);
                }
                Report::Current(Some(g)) if g != ALL_SYSTEMS && groups.contains(g) => {
                    record(g, MODE_IS_EXCLUDE, &mut n)
                }
                Report::Current(Some(_)) => {}
                Report::Current(None) => {
                    for g in groups.groups().filter(|&g| g != ALL_SYSTEMS) {
                        record(g, MODE_IS_EXCLUDE, &mut n);
                    }
                }
            }
            if n == 0 {
                return None;
            }
            msg[0] = TYPE_V3_REPORT;
            msg[6..8].copy_from_slice(&n.to_be_bytes());
            (ALL_V3_ROUTERS, 8 + 8 * usize::from(n))
        }
        Version::V1 | Version::V2 => {
            let (kind, group, dst) = match report {
                Report::Change {
                    group,
                    joined: false,
                } if version == Version::V2 => (TYPE_V2_LEAVE, group, ALL_ROUTERS),
                Report::Change { joined: false, .. } => return None,
                Report::Change { group, .. } => (report_type(version), group, group),
                Report::Current(Some(g)) if groups.contains(g) => (report_type(version), g, g),
                Report::Current(_) => return None,
            };
            msg[0] = kind;
            msg[4..8].copy_from_slice(&group.octets());
            (dst, 8)
        }
    };
    let c = checksum::checksum(&msg[..len]);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    let total = IP_HEADER_LEN + len;
    let out = buf.get_mut(..total)?;
    out[0] = 0x46; // version 4, six words of header
    out[1] = 0xc0; // DSCP CS6, as Linux sends IGMP
    out[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    out[4..6].copy_from_slice(&ident.to_be_bytes());
    out[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
    out[8] = 1; // TTL: the link only
    out[9] = 2; // IGMP
    out[10..12].fill(0);
    out[12..16].copy_from_slice(&src.octets());
    out[16..20].copy_from_slice(&dst.octets());
    out[20..24].copy_from_slice(&[0x94, 0x04, 0x00, 0x00]); // Router Alert
    let c = checksum::checksum(&out[..IP_HEADER_LEN]);
    out[10..12].copy_from_slice(&c.to_be_bytes());
    out[IP_HEADER_LEN..].copy_from_slice(&msg[..len]);
    Some((dst, total))
}

fn report_type(v: Version) -> u8 {
    if v == Version::V1 {
        TYPE_V1_REPORT
    } else {
        TYPE_V2_REPORT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
    const ME: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

    fn query(code: u8, group: Ipv4Addr, len: usize) -> Vec<u8> {
        let mut q = vec![0u8; len];
        q[0] = TYPE_QUERY;
        q[1] = code;
        q[4..8].copy_from_slice(&group.octets());
        let c = checksum::checksum(&q);
        q[2..4].copy_from_slice(&c.to_be_bytes());
        q
    }

    fn sent(g: &Groups, r: Report, v: Version) -> Option<(Ipv4Addr, Vec<u8>)> {
        let mut buf = [0u8; 2048];
        let (dst, n) = write_report(g, r, v, ME, 7, &mut buf)?;
        let ip = smoltcp::wire::Ipv4Packet::new_checked(&buf[..n]).unwrap();
        assert!(ip.verify_checksum(), "the IP header's checksum");
        assert_eq!(
            (ip.hop_limit(), ip.dst_addr(), ip.header_len()),
            (1, dst, 24)
        );
        assert_eq!(&buf[20..24], &[0x94, 4, 0, 0], "Router Alert");
        let msg = buf[24..n].to_vec();
        assert!(checksum::verify(&msg), "the IGMP checksum");
        Some((dst, msg))
    }

    /// Sends every report due, repetitions included.
    fn drain(g: &mut Groups) {
        while let Some(at) = g.next_deadline() {
            g.take_due(at);
        }
    }

    #[test]
    fn queries_parse_by_length_and_code() {
        let q = |b: &[u8]| match parse(b).unwrap() {
            Message::Query(q) => q,
            Message::Other => panic!("not a query"),
        };
        let v1 = q(&query(0, Ipv4Addr::UNSPECIFIED, 8));
        assert_eq!((v1.version, v1.group), (Version::V1, None));
        assert_eq!(v1.max_response, Duration::from_secs(10));
        let v2 = q(&query(100, G, 8));
        assert_eq!((v2.version, v2.group), (Version::V2, Some(G)));
        assert_eq!(v2.max_response, Duration::from_secs(10));
        let v3 = q(&query(0x80, Ipv4Addr::UNSPECIFIED, 12));
        assert_eq!(v3.version, Version::V3);
        // 0x80: mantissa 0, exponent 0: (0 | 16) << 3 = 128 tenths.
        assert_eq!(v3.max_response, Duration::from_millis(12_800));
        assert_eq!(parse(&query(10, G, 10)), Ok(Message::Other));
        let mut bad = query(10, G, 8);
        bad[7] ^= 1;
        assert_eq!(parse(&bad), Err(IgmpError::BadChecksum));
        assert_eq!(parse(&bad[..7]), Err(IgmpError::Runt));
        assert_eq!(
            parse(&query(10, Ipv4Addr::new(10, 1, 1, 1), 8)),
            Err(IgmpError::BadGroup)
        );
    }

    #[test]
    fn a_join_is_reported_twice_and_a_second_socket_adds_nothing() {
        let mut g = Groups::new(1);
        let t0 = Instant::from_secs(5);
        assert_eq!(g.join(G, t0), Ok(true));
        assert_eq!(g.join(G, t0), Ok(false));
        let r = g.take_due(t0).unwrap();
        assert_eq!(
            r,
            Report::Change {
                group: G,
                joined: true
            }
        );
        let (dst, msg) = sent(&g, r, Version::V3).unwrap();
        assert_eq!(dst, ALL_V3_ROUTERS);
        assert_eq!(msg.len(), 16);
        assert_eq!((msg[0], &msg[6..8], msg[8]), (0x22, &[0, 1][..], 4));
        assert_eq!(&msg[12..16], &G.octets());
        assert_eq!(g.take_due(t0), None, "the repetition waits");
        let again = g.next_deadline().unwrap();
        assert!(again > t0 && again <= t0.after(UNSOLICITED_INTERVAL));
        assert_eq!(g.take_due(again), Some(r));
        assert_eq!(g.next_deadline(), None, "reported twice, then done");
        // The first socket leaves: still a member. The second: a leave, twice.
        assert!(!g.leave(G, again));
        assert!(g.contains(G));
        assert!(g.leave(G, again));
        assert!(!g.contains(G));
        let r = g.take_due(again).unwrap();
        let (_, msg) = sent(&g, r, Version::V3).unwrap();
        assert_eq!(msg[8], 3, "CHANGE_TO_INCLUDE_MODE with no sources: a leave");
    }

    #[test]
    fn queries_are_answered_within_their_time_and_only_for_our_groups() {
        let mut g = Groups::new(2);
        let t0 = Instant::from_secs(1);
        g.join(G, t0).unwrap();
        g.join(Ipv4Addr::new(239, 9, 9, 9), t0).unwrap();
        drain(&mut g);
        let now = Instant::from_secs(200);
        let Message::Query(q) = parse(&query(0x64, Ipv4Addr::UNSPECIFIED, 12)).unwrap() else {
            panic!()
        };
        g.on_query(q, now);
        g.on_query(q, now); // a repeated query does not add an answer
        let at = g.next_deadline().unwrap();
        assert!(at >= now && at <= now.after(Duration::from_secs(10)));
        let r = g.take_due(at).unwrap();
        assert_eq!(r, Report::Current(None));
        assert_eq!(g.take_due(Instant::from_secs(1000)), None);
        let (_, msg) = sent(&g, r, Version::V3).unwrap();
        assert_eq!((&msg[6..8], msg[8], msg[16]), (&[0, 2][..], 2, 2));
        // A query about a group we are not in: nothing.
        let Message::Query(q) = parse(&query(10, Ipv4Addr::new(239, 7, 7, 7), 12)).unwrap() else {
            panic!()
        };
        g.on_query(q, now);
        assert_eq!(g.next_deadline(), None);
    }

    #[test]
    fn an_igmpv2_querier_switches_reports_to_version_2_until_it_goes_quiet() {
        let mut g = Groups::new(3);
        let now = Instant::from_secs(10);
        g.join(G, now).unwrap();
        drain(&mut g);
        let Message::Query(q) = parse(&query(20, G, 8)).unwrap() else {
            panic!()
        };
        g.on_query(q, now);
        assert_eq!(g.version(now), Version::V2);
        let at = g.next_deadline().unwrap();
        let r = g.take_due(at).unwrap();
        let (dst, msg) = sent(&g, r, g.version(at)).unwrap();
        assert_eq!((dst, msg[0], &msg[4..8]), (G, 0x16, &G.octets()[..]));
        g.leave(G, at);
        let r = g.take_due(at).unwrap();
        let (dst, msg) = sent(&g, r, g.version(at)).unwrap();
        assert_eq!((dst, msg[0]), (ALL_ROUTERS, 0x17));
        assert_eq!(sent(&g, r, Version::V1), None, "IGMPv1 has no leave");
        assert_eq!(g.version(now.after(OLDER_QUERIER_TIMEOUT)), Version::V3);
    }

    #[test]
    fn each_older_querier_keeps_its_own_timer_and_v3_queries_are_answered_in_its_mode() {
        let mut g = Groups::new(5);
        let now = Instant::from_secs(10);
        g.join(G, now).unwrap();
        g.join(ALL_SYSTEMS, now).unwrap();
        drain(&mut g);
        let q = |code, len| match parse(&query(code, Ipv4Addr::UNSPECIFIED, len)).unwrap() {
            Message::Query(q) => q,
            Message::Other => panic!(),
        };
        g.on_query(q(0, 8), now); // v1
        let later = now.after(Duration::from_secs(100));
        g.on_query(q(100, 8), later); // v2, while the v1 querier is still there
        assert_eq!(g.version(later), Version::V1, "RFC 3376 7.2.1: v1 wins");
        let past_v1 = now.after(OLDER_QUERIER_TIMEOUT);
        assert_eq!(g.version(past_v1), Version::V2);
        drain(&mut g);
        // An IGMPv3 general query while in v2 mode: answered group by group, in v2, and
        // never for all-systems.
        g.on_query(q(100, 12), past_v1);
        let at = g.next_deadline().unwrap();
        let r = g.take_due(at).unwrap();
        assert_eq!(r, Report::Current(Some(G)));
        assert_eq!(sent(&g, r, g.version(at)).unwrap().1[0], 0x16);
        assert_eq!(g.next_deadline(), None, "all-systems is never reported");
    }

    #[test]
    fn sockets_churning_through_groups_cannot_grow_what_is_owed() {
        let mut g = Groups::new(6);
        let now = Instant::ZERO;
        for i in 0..10_000u32 {
            let grp = Ipv4Addr::from(0xef10_0000 + i);
            g.join(grp, now).unwrap();
            g.leave(grp, now);
            assert!(g.due.len() <= MAX_DUE, "{} owed", g.due.len());
        }
        assert!(g.is_empty());
    }

    #[test]
    fn membership_is_bounded() {
        let mut g = Groups::new(4);
        let now = Instant::ZERO;
        for i in 0..MAX_GROUPS as u32 {
            assert_eq!(g.join(Ipv4Addr::from(0xef00_0000 + i), now), Ok(true));
        }
        assert_eq!(g.join(Ipv4Addr::new(239, 255, 0, 1), now), Err(()));
        assert!(g.due.len() <= MAX_GROUPS);
        // Every group answers a general query in one report that fits.
        let mut buf = [0u8; IP_HEADER_LEN + MAX_MESSAGE];
        let n = write_report(&g, Report::Current(None), Version::V3, ME, 1, &mut buf)
            .unwrap()
            .1;
        assert_eq!(n, IP_HEADER_LEN + MAX_MESSAGE);
        assert!(joinable(G) && joinable(ALL_SYSTEMS) && !joinable(ME));
        assert_eq!(
            group_mac(Ipv4Addr::new(239, 129, 2, 3)).0,
            [1, 0, 0x5e, 1, 2, 3]
        );
    }
}
