//! The capture filter: a small, documented subset of pcap-filter(7), parsed by
//! `shmnet capture` and evaluated by the server on every frame at a capture point.
//!
//! Grammar (case-sensitive keywords, as tcpdump's):
//!
//! ```text
//! expr      := term ("or" term)*            also "||"
//! term      := factor ("and" factor)*       also "&&"; juxtaposition means "and"
//! factor    := ("not" | "!") factor | "(" expr ")" | primitive
//! primitive := "ip" | "ip6" | "arp" | "tcp" | "udp" | "icmp" | "icmp6"
//!            | ["src" | "dst"] "host" ADDRESS      an IPv4 or IPv6 address
//!            | ["src" | "dst"] "port" NUMBER       TCP or UDP, over IPv4 or IPv6
//!            | "less" NUMBER | "greater" NUMBER   frame length <= / >= NUMBER
//! ```
//!
//! Why our own and not libpcap's compiler: the server evaluates the filter on frames from
//! an untrusted wire, in the data plane, and takes the filter itself from a client; a
//! typed tree of a few kinds of nodes, bounded in size ([`MAX_NODES`]) and checked when
//! it arrives, is simpler to make safe than a BPF program and its interpreter, and covers
//! what operators filter a capture by. What it leaves out (byte offsets, `net`, VLANs,
//! extension headers) is refused when parsed, never silently ignored.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// Nodes a filter may have at most: the server refuses a larger one.
pub const MAX_NODES: usize = 64;

/// A parsed filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Filter {
    /// Both.
    And(Box<Filter>, Box<Filter>),
    /// Either.
    Or(Box<Filter>, Box<Filter>),
    /// Not.
    Not(Box<Filter>),
    /// Frames of a protocol.
    Proto(Proto),
    /// Frames from, to, or from or to an address.
    Host(Dir, IpAddr),
    /// TCP or UDP segments from, to, or from or to a port.
    Port(Dir, u16),
    /// Frames at most this long.
    Less(u32),
    /// Frames at least this long.
    Greater(u32),
}

/// A protocol a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// IPv4.
    Ip,
    /// IPv6.
    Ip6,
    /// ARP.
    Arp,
    /// TCP over IPv4 or IPv6.
    Tcp,
    /// UDP over IPv4 or IPv6.
    Udp,
    /// ICMP (IPv4).
    Icmp,
    /// ICMPv6.
    Icmp6,
}

/// Which address or port of a packet a primitive names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// The source.
    Src,
    /// The destination.
    Dst,
    /// Either.
    Any,
}

/// Why a filter expression was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The expression ended where more was needed.
    #[error("the filter ends too early: {0} expected")]
    Incomplete(&'static str),
    /// A word this subset does not have.
    #[error(
        "`{0}` is not part of shmnet's filter subset (ip ip6 arp tcp udp icmp icmp6, [src|dst] host ADDR, [src|dst] port N, less N, greater N, and or not, parentheses)"
    )]
    Unknown(String),
    /// A value that is not an address or a number in range.
    #[error("`{got}` is not {wanted}")]
    BadValue {
        /// What was written.
        got: String,
        /// What was expected.
        wanted: &'static str,
    },
    /// A closing parenthesis without its opening one, or words after the end.
    #[error("unexpected `{0}`")]
    Unexpected(String),
    /// More than [`MAX_NODES`] nodes.
    #[error("the filter has more than {MAX_NODES} terms")]
    TooLarge,
}

impl Filter {
    /// Parses `words`, the filter's arguments (as tcpdump takes them: trailing arguments,
    /// joined; parentheses may be words of their own or stuck to their neighbours).
    pub fn parse(words: &[String]) -> Result<Filter, FilterError> {
        let text = words.join(" ");
        let tokens = tokenize(&text);
        let mut p = Parser { t: &tokens, at: 0 };
        let f = p.expr()?;
        if let Some(t) = p.t.get(p.at) {
            return Err(FilterError::Unexpected(t.clone()));
        }
        f.check()?;
        Ok(f)
    }

    /// Nodes in the tree.
    pub fn nodes(&self) -> usize {
        match self {
            Filter::And(a, b) | Filter::Or(a, b) => 1 + a.nodes() + b.nodes(),
            Filter::Not(a) => 1 + a.nodes(),
            _ => 1,
        }
    }

    /// Refuses a filter larger than [`MAX_NODES`] (what the server does with one a client
    /// sent). Serde's recursion limit bounds the depth of what can be decoded at all.
    pub fn check(&self) -> Result<(), FilterError> {
        if self.nodes() > MAX_NODES {
            return Err(FilterError::TooLarge);
        }
        Ok(())
    }

    /// Whether `frame`, an Ethernet frame of `wire_len` bytes on the wire (possibly cut
    /// short), passes. Never panics: a header the frame is too short for matches nothing
    /// that needs it.
    pub fn matches(&self, frame: &[u8], wire_len: usize) -> bool {
        self.eval(frame, &Headers::of(frame), wire_len)
    }

    /// [`Filter::matches`] with the frame's headers found once for the whole tree.
    fn eval(&self, frame: &[u8], h: &Headers, wire_len: usize) -> bool {
        match self {
            Filter::And(a, b) => a.eval(frame, h, wire_len) && b.eval(frame, h, wire_len),
            Filter::Or(a, b) => a.eval(frame, h, wire_len) || b.eval(frame, h, wire_len),
            Filter::Not(a) => !a.eval(frame, h, wire_len),
            Filter::Less(n) => wire_len <= *n as usize,
            Filter::Greater(n) => wire_len >= *n as usize,
            Filter::Proto(p) => match p {
                Proto::Ip => h.ethertype == ETH_IPV4,
                Proto::Ip6 => h.ethertype == ETH_IPV6,
                Proto::Arp => h.ethertype == ETH_ARP,
                Proto::Tcp => h.l4 == Some(6),
                Proto::Udp => h.l4 == Some(17),
                Proto::Icmp => h.ethertype == ETH_IPV4 && h.l4 == Some(1),
                Proto::Icmp6 => h.ethertype == ETH_IPV6 && h.l4 == Some(58),
            },
            Filter::Host(dir, addr) => {
                let is = |x: Option<IpAddr>| x == Some(*addr);
                match dir {
                    Dir::Src => is(h.src(frame)),
                    Dir::Dst => is(h.dst(frame)),
                    Dir::Any => is(h.src(frame)) || is(h.dst(frame)),
                }
            }
            Filter::Port(dir, port) => {
                let Some((s, d)) = h.ports(frame) else {
                    return false;
                };
                match dir {
                    Dir::Src => s == *port,
                    Dir::Dst => d == *port,
                    Dir::Any => s == *port || d == *port,
                }
            }
        }
    }
}

/// What a frame is, as far as a filter's protocol words can tell: its link type and, for
/// IP, its transport (IPv4: only a first fragment has one). The data plane finds a frame's
/// class once and tests it against each point's [`ClassSet`] before it evaluates any
/// filter, so frames no capture can want cost a few loads and one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// ARP.
    Arp,
    /// IPv4 carrying TCP.
    V4Tcp,
    /// IPv4 carrying UDP.
    V4Udp,
    /// IPv4 carrying ICMP.
    V4Icmp,
    /// Any other IPv4, a later fragment among them.
    V4Other,
    /// IPv6 carrying TCP.
    V6Tcp,
    /// IPv6 carrying UDP.
    V6Udp,
    /// IPv6 carrying ICMPv6.
    V6Icmp6,
    /// Any other IPv6.
    V6Other,
    /// Any other frame (too short to tell among them).
    Other,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 10] = [
        Class::Arp,
        Class::V4Tcp,
        Class::V4Udp,
        Class::V4Icmp,
        Class::V4Other,
        Class::V6Tcp,
        Class::V6Udp,
        Class::V6Icmp6,
        Class::V6Other,
        Class::Other,
    ];

    /// The class of `frame` (never panics: too short for a header is `Other` or the
    /// `*Other` of its link type).
    #[inline]
    pub fn of(frame: &[u8]) -> Class {
        // The common case in one bounds check: every byte the class needs is in the first
        // 24. A shorter frame takes the general path (the same answer: a property test).
        let Some(h) = frame.first_chunk::<24>() else {
            return Headers::of(frame).class();
        };
        match u16::from_be_bytes([h[12], h[13]]) {
            ETH_IPV4 => {
                let vihl = h[14];
                let first = u16::from_be_bytes([h[20], h[21]]) & 0x1fff == 0;
                if vihl >> 4 != 4 || vihl & 0x0f < 5 || !first {
                    return Class::V4Other;
                }
                match h[23] {
                    6 => Class::V4Tcp,
                    17 => Class::V4Udp,
                    1 => Class::V4Icmp,
                    _ => Class::V4Other,
                }
            }
            ETH_IPV6 => match h[20] {
                6 => Class::V6Tcp,
                17 => Class::V6Udp,
                58 => Class::V6Icmp6,
                _ => Class::V6Other,
            },
            ETH_ARP => Class::Arp,
            _ => Class::Other,
        }
    }

    #[inline]
    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// A set of [`Class`]es: those a filter may match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassSet(u16);

impl ClassSet {
    /// Every class (no filter).
    pub const ALL: ClassSet = ClassSet((1 << Class::ALL.len()) - 1);

    /// Whether `c` is in the set.
    #[inline]
    pub fn contains(self, c: Class) -> bool {
        self.0 & c.bit() != 0
    }

    /// Both sets' classes.
    pub fn union(self, o: ClassSet) -> ClassSet {
        ClassSet(self.0 | o.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl Filter {
    /// The classes of frames this filter may match: a frame of any other class never
    /// matches ([`Filter::matches`] is false; a property test holds the two together).
    pub fn classes(&self) -> ClassSet {
        ClassSet(
            Class::ALL
                .iter()
                .filter(|&&c| self.on_class(c) != Some(false))
                .fold(0, |m, c| m | c.bit()),
        )
    }

    /// Three-valued evaluation on a class alone: `Some` if every frame of class `c` gives
    /// that answer, `None` if it depends on more of the frame (addresses, ports, length).
    fn on_class(&self, c: Class) -> Option<bool> {
        use Class::*;
        let v4 = matches!(c, V4Tcp | V4Udp | V4Icmp | V4Other);
        let v6 = matches!(c, V6Tcp | V6Udp | V6Icmp6 | V6Other);
        match self {
            Filter::And(a, b) => match (a.on_class(c), b.on_class(c)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            Filter::Or(a, b) => match (a.on_class(c), b.on_class(c)) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
            Filter::Not(a) => a.on_class(c).map(|x| !x),
            Filter::Less(_) | Filter::Greater(_) => None,
            Filter::Proto(p) => Some(match p {
                Proto::Ip => v4,
                Proto::Ip6 => v6,
                Proto::Arp => c == Arp,
                Proto::Tcp => matches!(c, V4Tcp | V6Tcp),
                Proto::Udp => matches!(c, V4Udp | V6Udp),
                Proto::Icmp => c == V4Icmp,
                Proto::Icmp6 => c == V6Icmp6,
            }),
            // Addresses are read in any IP frame long enough to hold them; ports only in
            // TCP and UDP.
            Filter::Host(..) if v4 || v6 => None,
            Filter::Port(..) if matches!(c, V4Tcp | V4Udp | V6Tcp | V6Udp) => None,
            Filter::Host(..) | Filter::Port(..) => Some(false),
        }
    }
}

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const ETH_ARP: u16 = 0x0806;

/// Where a frame's headers are, as far as the filter looks.
struct Headers {
    ethertype: u16,
    /// The IP header's offset.
    ip: usize,
    /// The transport protocol, and where its header starts (IPv4: only in a first
    /// fragment; IPv6: only right after the fixed header).
    l4: Option<u8>,
    l4_at: usize,
}

impl Headers {
    fn of(f: &[u8]) -> Headers {
        let be16 = |i: usize| f.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let ethertype = be16(12).unwrap_or(0);
        let mut h = Headers {
            ethertype,
            ip: 14,
            l4: None,
            l4_at: 0,
        };
        match ethertype {
            ETH_IPV4 => {
                if let (Some(&vihl), Some(&proto), Some(frag)) = (f.get(14), f.get(23), be16(20)) {
                    let ihl = usize::from(vihl & 0x0f) * 4;
                    // Only a first fragment carries the transport header.
                    if vihl >> 4 == 4 && ihl >= 20 && frag & 0x1fff == 0 {
                        h.l4 = Some(proto);
                        h.l4_at = 14 + ihl;
                    }
                }
            }
            ETH_IPV6 => {
                if let Some(&next) = f.get(20) {
                    h.l4 = Some(next);
                    h.l4_at = 54;
                }
            }
            _ => {}
        }
        h
    }

    fn class(&self) -> Class {
        match (self.ethertype, self.l4) {
            (ETH_ARP, _) => Class::Arp,
            (ETH_IPV4, Some(6)) => Class::V4Tcp,
            (ETH_IPV4, Some(17)) => Class::V4Udp,
            (ETH_IPV4, Some(1)) => Class::V4Icmp,
            (ETH_IPV4, _) => Class::V4Other,
            (ETH_IPV6, Some(6)) => Class::V6Tcp,
            (ETH_IPV6, Some(17)) => Class::V6Udp,
            (ETH_IPV6, Some(58)) => Class::V6Icmp6,
            (ETH_IPV6, _) => Class::V6Other,
            _ => Class::Other,
        }
    }

    fn addr(&self, f: &[u8], v4: usize, v6: usize) -> Option<IpAddr> {
        match self.ethertype {
            ETH_IPV4 => {
                let b: [u8; 4] = f.get(self.ip + v4..self.ip + v4 + 4)?.try_into().ok()?;
                Some(IpAddr::from(b))
            }
            ETH_IPV6 => {
                let b: [u8; 16] = f.get(self.ip + v6..self.ip + v6 + 16)?.try_into().ok()?;
                Some(IpAddr::from(b))
            }
            _ => None,
        }
    }

    fn src(&self, f: &[u8]) -> Option<IpAddr> {
        self.addr(f, 12, 8)
    }

    fn dst(&self, f: &[u8]) -> Option<IpAddr> {
        self.addr(f, 16, 24)
    }

    fn ports(&self, f: &[u8]) -> Option<(u16, u16)> {
        if !matches!(self.l4, Some(6 | 17)) {
            return None;
        }
        let b = f.get(self.l4_at..self.l4_at + 4)?;
        Some((
            u16::from_be_bytes([b[0], b[1]]),
            u16::from_be_bytes([b[2], b[3]]),
        ))
    }
}

/// Words and parentheses.
fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in s.chars() {
        if c == '!' && word.is_empty() {
            out.push("!".into());
            continue;
        }
        if c == '(' || c == ')' || c.is_whitespace() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

struct Parser<'a> {
    t: &'a [String],
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.t.get(self.at).map(String::as_str)
    }

    fn next(&mut self, wanted: &'static str) -> Result<&'a str, FilterError> {
        let t = self.t.get(self.at).ok_or(FilterError::Incomplete(wanted))?;
        self.at += 1;
        Ok(t)
    }

    fn expr(&mut self) -> Result<Filter, FilterError> {
        let mut f = self.term()?;
        while matches!(self.peek(), Some("or" | "||")) {
            self.at += 1;
            f = Filter::Or(Box::new(f), Box::new(self.term()?));
            f.check()?;
        }
        Ok(f)
    }

    fn term(&mut self) -> Result<Filter, FilterError> {
        let mut f = self.factor()?;
        loop {
            match self.peek() {
                Some("and" | "&&") => self.at += 1,
                // Juxtaposition is "and", as in tcpdump's `tcp port 80`.
                Some(t) if t != "or" && t != "||" && t != ")" => {}
                _ => return Ok(f),
            }
            f = Filter::And(Box::new(f), Box::new(self.factor()?));
            f.check()?;
        }
    }

    fn factor(&mut self) -> Result<Filter, FilterError> {
        match self.next("a filter term")? {
            "not" | "!" => Ok(Filter::Not(Box::new(self.factor()?))),
            "(" => {
                let f = self.expr()?;
                match self.next("`)`")? {
                    ")" => Ok(f),
                    other => Err(FilterError::Unexpected(other.to_owned())),
                }
            }
            w @ (")" | "and" | "or" | "&&" | "||") => Err(FilterError::Unexpected(w.into())),
            w => self.primitive(w),
        }
    }

    fn primitive(&mut self, w: &str) -> Result<Filter, FilterError> {
        let proto = |p| Ok(Filter::Proto(p));
        match w {
            "ip" => proto(Proto::Ip),
            "ip6" => proto(Proto::Ip6),
            "arp" => proto(Proto::Arp),
            "tcp" => proto(Proto::Tcp),
            "udp" => proto(Proto::Udp),
            "icmp" => proto(Proto::Icmp),
            "icmp6" => proto(Proto::Icmp6),
            "src" | "dst" => {
                let dir = if w == "src" { Dir::Src } else { Dir::Dst };
                match self.next("`host` or `port`")? {
                    "host" => self.host(dir),
                    "port" => self.port(dir),
                    other => Err(FilterError::Unknown(format!("{w} {other}"))),
                }
            }
            "host" => self.host(Dir::Any),
            "port" => self.port(Dir::Any),
            "less" => Ok(Filter::Less(self.number("a length")?)),
            "greater" => Ok(Filter::Greater(self.number("a length")?)),
            other => Err(FilterError::Unknown(other.to_owned())),
        }
    }

    fn host(&mut self, dir: Dir) -> Result<Filter, FilterError> {
        let w = self.next("an address")?;
        let addr = w.parse().map_err(|_| FilterError::BadValue {
            got: w.to_owned(),
            wanted: "an IPv4 or IPv6 address",
        })?;
        Ok(Filter::Host(dir, addr))
    }

    fn port(&mut self, dir: Dir) -> Result<Filter, FilterError> {
        let w = self.next("a port")?;
        let port = w.parse().map_err(|_| FilterError::BadValue {
            got: w.to_owned(),
            wanted: "a port number (0 to 65535)",
        })?;
        Ok(Filter::Port(dir, port))
    }

    fn number(&mut self, wanted: &'static str) -> Result<u32, FilterError> {
        let w = self.next(wanted)?;
        w.parse().map_err(|_| FilterError::BadValue {
            got: w.to_owned(),
            wanted: "a number",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> Result<Filter, FilterError> {
        Filter::parse(&s.split(' ').map(str::to_owned).collect::<Vec<_>>())
    }

    /// An Ethernet frame of IPv4 `proto` from `src`:`sport` to `dst`:`dport`.
    fn v4(proto: u8, src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&ETH_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[23] = proto;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn tcpdump_expressions_parse_and_match() {
        let f = v4(6, [10, 0, 0, 2], 40000, [10, 0, 0, 1], 80);
        let m = |s: &str| parse(s).unwrap().matches(&f, f.len());
        assert!(m("tcp"));
        assert!(!m("udp"));
        assert!(m("tcp port 80"));
        assert!(m("tcp and dst port 80"));
        assert!(!m("src port 80"));
        assert!(m("host 10.0.0.2 and not port 22"));
        assert!(m("src host 10.0.0.2"));
        assert!(!m("dst host 10.0.0.2"));
        assert!(m("(udp or tcp) && port 40000"));
        assert!(m("!udp"));
        assert!(m("tcp && !(port 22)"));
        assert!(m("not (udp or arp)"));
        assert!(m("ip and greater 40"));
        assert!(!m("less 40"));
        assert!(!m("icmp6 or ip6"));
    }

    #[test]
    fn a_later_fragment_has_no_ports() {
        let mut f = v4(17, [10, 0, 0, 2], 53, [10, 0, 0, 1], 53);
        f[20..22].copy_from_slice(&0x0010u16.to_be_bytes()); // offset 128 bytes
        assert!(!parse("port 53").unwrap().matches(&f, f.len()));
        assert!(parse("ip").unwrap().matches(&f, f.len()));
    }

    #[test]
    fn what_the_subset_lacks_is_refused_with_a_reason() {
        assert!(matches!(
            parse("net 10.0.0.0/8"),
            Err(FilterError::Unknown(_))
        ));
        assert!(matches!(
            parse("port http"),
            Err(FilterError::BadValue { .. })
        ));
        assert!(matches!(parse("tcp and"), Err(FilterError::Incomplete(_))));
        assert!(matches!(parse("(tcp"), Err(FilterError::Incomplete(_))));
        assert!(matches!(parse("tcp )"), Err(FilterError::Unexpected(_))));
        assert!(matches!(parse("and tcp"), Err(FilterError::Unexpected(_))));
        assert!(matches!(
            parse("tcp or or udp"),
            Err(FilterError::Unexpected(_))
        ));
        let big = vec!["tcp"; MAX_NODES].join(" or ");
        assert_eq!(parse(&big), Err(FilterError::TooLarge));
    }

    /// Any filter of the subset, with values that the frames below do carry.
    fn any_filter() -> impl Strategy<Value = Filter> {
        let dir = prop::sample::select(vec![Dir::Src, Dir::Dst, Dir::Any]);
        let proto = prop::sample::select(vec![
            Proto::Ip,
            Proto::Ip6,
            Proto::Arp,
            Proto::Tcp,
            Proto::Udp,
            Proto::Icmp,
            Proto::Icmp6,
        ]);
        let addr = prop::sample::select(vec![
            IpAddr::from([10, 0, 0, 1]),
            IpAddr::from([10, 0, 0, 2]),
            "::1".parse::<IpAddr>().unwrap(),
        ]);
        let leaf = prop_oneof![
            proto.prop_map(Filter::Proto),
            (dir.clone(), addr).prop_map(|(d, a)| Filter::Host(d, a)),
            (dir, prop::sample::select(vec![7u16, 53, 80])).prop_map(|(d, p)| Filter::Port(d, p)),
            (0u32..90).prop_map(Filter::Less),
            (0u32..90).prop_map(Filter::Greater),
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| Filter::And(Box::new(a), Box::new(b))),
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| Filter::Or(Box::new(a), Box::new(b))),
                inner.prop_map(|a| Filter::Not(Box::new(a))),
            ]
        })
    }

    /// Frames of every class, some cut short, with the addresses and ports above.
    fn any_frame() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::sample::select(vec![ETH_IPV4, ETH_IPV6, ETH_ARP, 0x1234]),
            prop::sample::select(vec![1u8, 6, 17, 58, 47]),
            any::<bool>(),
            prop::sample::select(vec![[10u8, 0, 0, 1], [10, 0, 0, 2]]),
            prop::sample::select(vec![7u16, 53, 80, 9]),
            0usize..90,
        )
            .prop_map(|(et, proto, later, a, port, cut)| {
                let mut f = v4(proto, a, port, [10, 0, 0, 1], 53);
                f.resize(80, 0);
                f[12..14].copy_from_slice(&et.to_be_bytes());
                if later {
                    f[20..22].copy_from_slice(&0x0010u16.to_be_bytes());
                }
                if et == ETH_IPV6 {
                    f[20] = proto;
                    f[54..56].copy_from_slice(&port.to_be_bytes());
                }
                f.truncate(cut);
                f
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// A frame of a class the filter's class set leaves out never matches, and a class
        /// that decides the filter decides it as the whole evaluation does.
        #[test]
        fn classes_never_drop_a_frame_the_filter_matches(f in any_filter(), frame in any_frame()) {
            let c = Class::of(&frame);
            let m = f.matches(&frame, frame.len());
            if !f.classes().contains(c) {
                prop_assert!(!m, "{f:?} matched a {c:?} frame its classes leave out");
            }
            if let Some(b) = f.on_class(c) {
                prop_assert_eq!(b, m, "{:?} on {:?}", f, c);
            }
        }

        /// The short way to a frame's class gives the general one's answer.
        #[test]
        fn a_class_is_the_headers_class(frame in any_frame(), noise in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(Class::of(&frame), Headers::of(&frame).class());
            prop_assert_eq!(Class::of(&noise), Headers::of(&noise).class());
        }

        /// Any bytes, any filter: no panic.
        #[test]
        fn never_panics_on_any_frame(frame in proptest::collection::vec(any::<u8>(), 0..80),
                                     which in 0usize..6) {
            let exprs = ["tcp port 80", "host 10.0.0.1", "ip6 and udp", "not arp",
                "src host ::1 or dst port 7", "less 60"];
            let f = parse(exprs[which]).unwrap();
            let _ = f.matches(&frame, frame.len());
        }
    }
}
