//! Named counters: what came in, what went out, and every reason a frame was refused.
//!
//! Invariant: every frame handed to [`crate::Interface::receive`] that the stack refuses is
//! counted under exactly one drop counter (from `runt` on), and its buffers are back in the
//! pool before `receive` returns. Frames it accepts are held (a fragment, a queued message),
//! answered (ARP, ICMP, neighbour discovery, ICMPv6 echo) or simply consumed (an ARP packet
//! about someone else, an ICMPv6 message we do not answer). A TCP segment that reached TCP
//! is counted in [`crate::tcp::TcpCounters`] instead (its own refusals, from `malformed`
//! on), which the interface reports beside these.

macro_rules! stats {
    ($( $(#[$m:meta])* $name:ident ),* $(,)?) => {
        /// Counters of the interface. All are monotonically increasing `u64`s.
        #[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct Stats {
            $( $(#[$m])* pub $name: u64, )*
        }

        impl Stats {
            /// Every counter with its name, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$( (stringify!($name), self.$name), )*]
            }

            /// The first counter at or after `first` (in declaration order) that differs
            /// from `before`'s: with `first` the first drop counter, the reason a frame
            /// handed over in between was refused. Allocates nothing.
            pub fn drop_since(&self, before: &Self, first: &str) -> Option<&'static str> {
                let mut from = false;
                $(
                    from |= stringify!($name) == first;
                    if from && self.$name != before.$name {
                        return Some(stringify!($name));
                    }
                )*
                None
            }
        }
    };
}

stats! {
    /// Frames handed to `receive`.
    rx_frames,
    /// Frames emitted to the transmit sink.
    tx_frames,
    /// Buffers of sent frames the send side's cache maintenance kept coherent by hand
    /// ([`crate::Config::buffers`]; zero unless asked for).
    maintained_tx,
    /// Received frames the receive side's cache maintenance kept coherent by hand.
    maintained_rx,
    /// Times a local UDP socket's full queue held its senders back (host-local flow
    /// control: one per episode, see [`crate::Config::udp_local_hold`]).
    udp_local_held,
    /// Episodes in which a local socket stayed full past the hold, so its senders went on
    /// (what they sent then overflowed its queue, counted in `queue_full`).
    udp_local_hold_expired,
    /// UDP datagrams placed on a socket queue.
    udp_delivered,
    /// UDP messages read by `udp_recv`.
    udp_read,
    /// UDP datagrams sent (before fragmentation).
    udp_sent,
    /// IPv4 fragments received.
    frags_received,
    /// Datagrams completed by reassembly.
    reasm_ok,
    /// Fragments sent.
    frags_sent,
    /// ICMP destination-unreachable messages about a datagram a UDP socket sent, kept for
    /// the socket (its application reads them: `ECONNREFUSED` on a connected socket).
    udp_icmp_errors,
    /// Of those, the ones that pushed out an older error nobody had read.
    udp_icmp_errors_dropped,
    /// IPv4 multicast groups joined by a socket.
    igmp_joins,
    /// IPv4 multicast groups left by a socket (closing sockets leave theirs).
    igmp_leaves,
    /// IGMP membership reports (and IGMPv2 leaves) sent.
    igmp_reports_sent,
    /// IGMP membership queries heard.
    igmp_queries,
    /// Other hosts' IGMP reports and leaves, and IGMP messages a host ignores.
    igmp_other,
    /// Datagrams a socket sent to a group we belong to, delivered to our own socket on
    /// their port too (multicast loop-back).
    multicast_looped,
    /// ICMP echo replies sent.
    icmp_echo_replies,
    /// ICMP port-unreachable messages sent.
    icmp_unreach_sent,
    /// ARP requests answered.
    arp_replies_sent,
    /// ARP requests sent.
    arp_requests_sent,
    /// Neighbour cache entries learnt or refreshed.
    arp_learnt,
    /// IPv6 packets for us (to our address, its solicited-node group or all nodes) carrying
    /// ICMPv6, handed to the ICMPv6 path (only with [`crate::Config::ipv6`]).
    ipv6_rx,
    /// Neighbour advertisements sent, answering solicitations for our IPv6 address (another
    /// node's duplicate address detection included).
    nd_advertisements_sent,
    /// ICMPv6 echo replies sent.
    icmpv6_echo_replies,
    /// ICMPv6 messages consumed without an answer (neighbour advertisements, router
    /// discovery, MLD, errors, unknown types).
    icmpv6_other,

    // ---- drops ----
    /// Frame shorter than the header it claims to carry.
    runt,
    /// Buffer header inconsistent (chained frame, `off`/`len` beyond the capacity).
    bad_buffer,
    /// Ethernet destination is neither us nor broadcast (nor, with an IPv6 address, an IPv6
    /// multicast address for an IPv6 frame).
    not_for_us,
    /// EtherType neither IPv4 nor ARP (nor IPv6, with an IPv6 address).
    unknown_ethertype,
    /// ARP packet we do not handle (not Ethernet/IPv4, unknown operation).
    arp_bad,
    /// Malformed IPv6 packet: version not 6, payload length beyond the frame, multicast
    /// (or our own) source, ICMPv6 message malformed or with a wrong checksum, echo request
    /// with nobody to answer, or neighbour solicitation failing RFC 4861's validation (hop
    /// limit not 255, multicast target, bad options, bad duplicate address detection).
    /// A frame shorter than the IPv6 header is a `runt`.
    ipv6_bad,
    /// IPv6 destination neither our address, nor its solicited-node group, nor all nodes;
    /// or a neighbour solicitation for another node's address.
    ipv6_not_for_us,
    /// IPv6 packet we cannot handle: next header other than ICMPv6 (UDP, TCP, extension
    /// headers, fragments), or an echo request whose reply would exceed the MTU.
    ipv6_unsupported,
    /// IPv4 version field is not 4.
    bad_version,
    /// IPv4 header checksum wrong.
    bad_checksum,
    /// IPv4 total length or IHL inconsistent with the frame, or UDP length inconsistent.
    bad_length,
    /// Source address broadcast, multicast or ours.
    bad_address,
    /// TTL of zero.
    ttl,
    /// IPv4 protocol neither ICMP nor UDP.
    unknown_protocol,
    /// Malformed fragment (not a multiple of 8, empty, beyond the known end, conflicting end).
    bad_fragment,
    /// Fragments overlapping with different contents: the datagram was abandoned (RFC 5722).
    reasm_overlap,
    /// Fragment of a datagram already abandoned, discarded until the entry times out.
    reasm_discarded,
    /// Exact duplicate fragment, ignored.
    reasm_duplicate,
    /// Reassembled datagram would exceed 65,535 bytes.
    reasm_oversize,
    /// Too many fragments for one datagram.
    reasm_too_many_frags,
    /// Reassembly table full: the oldest datagram was evicted (its fragments freed) to make
    /// room for a new one.
    reasm_table_full,
    /// Incomplete datagram evicted (its fragments freed) because reassembly held more than
    /// its global budget of buffers or bytes (a quarter of the pool by default).
    reasm_evicted_budget,
    /// Incomplete datagram evicted because its source address held more than its share of
    /// the reassembly budget.
    reasm_evicted_source,
    /// Incomplete datagram abandoned early, older than an eighth of the timeout, because
    /// reassembly held more than half its budget.
    reasm_expired_pressure,
    /// Datagram abandoned because its timeout (from the first fragment) expired.
    reasm_timeout,
    /// UDP checksum wrong.
    udp_bad_checksum,
    /// UDP to a port nobody is bound to.
    no_socket,
    /// Socket receive queue full.
    queue_full,
    /// Datagrams dropped because the pool was scarce (less than an eighth free) and their
    /// socket already held [`crate::iface::UDP_POOL_FLOOR`] unread.
    pool_drops,
    /// ICMP checksum wrong.
    icmp_bad_checksum,
    /// IGMP message malformed (short, wrong checksum, a query about a unicast address, in
    /// fragments).
    igmp_bad,
    /// ICMP message we do not answer (anything but echo request).
    icmp_ignored,
    /// ICMP error suppressed by the rate limiter.
    icmp_rate_limited,
    /// No buffer available to build a reply or to send.
    no_buffers,
    /// Frame waiting for ARP dropped because the pending queue was full.
    arp_queue_full,
    /// Frame waiting for ARP dropped because no answer came in time.
    arp_timeout,
    /// Send refused: no route (destination off-link and no gateway).
    no_route,
}

impl Stats {
    /// The sum of every drop counter.
    pub fn total_drops(&self) -> u64 {
        let fields = self.fields();
        let first_drop = fields
            .iter()
            .position(|(n, _)| *n == "runt")
            .unwrap_or(fields.len());
        fields[first_drop..].iter().map(|(_, v)| v).sum()
    }
}
