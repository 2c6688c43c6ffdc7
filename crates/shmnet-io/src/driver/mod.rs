//! Packet drivers: the party that owns the device.
//!
//! A driver moves frames between a device and pool buffers and never waits: a full queue or
//! an empty pool is a counted drop. It also does the seed's first-level demultiplexing
//! ([`classify`]): runts and unknown EtherTypes are shed here, before they cost the protocol
//! server anything — and so are frames of a family no protocol server takes
//! ([`RxPools::pools_for`]): each family's frames land in the pools of the server that
//! serves it, so one driver can feed several servers (an IPv4 one and an IPv6 one, say).

pub mod af_packet;
pub mod af_xdp;
pub mod impair;
pub mod nic;
pub mod softnic;

use shmnet_chan::DriverPools;
use shmnet_stack::wire::{EthernetProtocol, arp, eth, ipv4};

/// Length of an IPv6 header: the smallest IPv6 packet.
const IPV6_HEADER_LEN: usize = 40;

/// The protocol family of a frame, by EtherType: which IN queue it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// EtherType 0x0800.
    Ipv4,
    /// EtherType 0x0806.
    Arp,
    /// EtherType 0x86DD (its neighbour discovery travels inside it, as ICMPv6).
    Ipv6,
}

/// The families one protocol server takes from its driver: IPv4 (with ARP, its address
/// resolution), IPv6, or both. Each family goes to exactly one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Families {
    /// IPv4 and ARP.
    pub ipv4: bool,
    /// IPv6.
    pub ipv6: bool,
}

impl Default for Families {
    /// IPv4 and ARP: what every server took before shmnet spoke IPv6.
    fn default() -> Self {
        Self::IPV4
    }
}

impl Families {
    /// IPv4 and ARP only.
    pub const IPV4: Families = Families {
        ipv4: true,
        ipv6: false,
    };
    /// IPv6 only.
    pub const IPV6: Families = Families {
        ipv4: false,
        ipv6: true,
    };
    /// Both.
    pub const BOTH: Families = Families {
        ipv4: true,
        ipv6: true,
    };

    /// Whether frames of `family` are taken.
    pub fn contains(self, family: Family) -> bool {
        match family {
            Family::Ipv4 | Family::Arp => self.ipv4,
            Family::Ipv6 => self.ipv6,
        }
    }

    /// No family.
    pub const NONE: Families = Families {
        ipv4: false,
        ipv6: false,
    };

    /// The families of either set.
    pub fn union(self, other: Families) -> Families {
        Families {
            ipv4: self.ipv4 || other.ipv4,
            ipv6: self.ipv6 || other.ipv6,
        }
    }

    /// The families of `self` not in `other`, if there are any.
    pub fn minus(self, other: Families) -> Option<Families> {
        let left = Families {
            ipv4: self.ipv4 && !other.ipv4,
            ipv6: self.ipv6 && !other.ipv6,
        };
        (left != Families::NONE).then_some(left)
    }

    /// Whether the two sets share a family.
    pub fn overlaps(self, other: Families) -> bool {
        (self.ipv4 && other.ipv4) || (self.ipv6 && other.ipv6)
    }

    /// Its name, as the stats and messages show it: `ipv4`, `ipv6`, `ipv4+ipv6` (or `none`).
    pub fn name(self) -> &'static str {
        match (self.ipv4, self.ipv6) {
            (true, true) => "ipv4+ipv6",
            (true, false) => "ipv4",
            (false, true) => "ipv6",
            (false, false) => "none",
        }
    }
}

/// Where a driver puts the frames it receives: the pools of the server that takes each
/// family. A driver asks once per frame, after [`classify`] and before it takes a buffer.
pub trait RxPools {
    /// The pools a frame of `family` is received into, or `None` when no server takes it
    /// now (none serves the family, or its server has no room): the driver then counts the
    /// frame in [`DriverStats::rx_unserved`] and leaves it.
    fn pools_for(&mut self, family: Family) -> Option<&mut DriverPools>;

    /// The one set of pools every frame goes to, if there is only one (a decorator that
    /// holds frames back, such as [`impair::Impaired`], needs it; with several servers on
    /// one driver there is none).
    fn single(&mut self) -> Option<&mut DriverPools>;
}

/// One server's pools taking every frame of IPv4 and ARP — what a driver fed the server
/// before there was more than one family.
impl RxPools for DriverPools {
    fn pools_for(&mut self, family: Family) -> Option<&mut DriverPools> {
        Families::IPV4.contains(family).then_some(self)
    }

    fn single(&mut self) -> Option<&mut DriverPools> {
        Some(self)
    }
}

/// One server's pools, taking the families it serves.
pub struct ServedPools<'a> {
    /// The server's pools.
    pub pools: &'a mut DriverPools,
    /// What it serves.
    pub families: Families,
}

impl RxPools for ServedPools<'_> {
    fn pools_for(&mut self, family: Family) -> Option<&mut DriverPools> {
        self.families.contains(family).then_some(&mut *self.pools)
    }

    fn single(&mut self) -> Option<&mut DriverPools> {
        Some(self.pools)
    }
}

/// Why a driver shed a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// Shorter than an Ethernet header plus the smallest header of its family.
    Runt,
    /// An EtherType no configured family handles.
    UnknownType,
}

/// Ethernet header length.
pub const ETH_HDR: usize = eth::HEADER_LEN;

/// First-level demultiplexing of one frame by EtherType, read with the stack's wire layer:
/// a frame too short for an Ethernet header, or for the smallest header of its family (an
/// IPv4 header, an ARP packet), is a runt.
#[inline]
pub fn classify(frame: &[u8]) -> Result<Family, Shed> {
    let Some(ethertype) = eth::ethertype(frame) else {
        return Err(Shed::Runt);
    };
    let body = frame.len() - eth::HEADER_LEN;
    match ethertype {
        EthernetProtocol::Ipv4 if body >= ipv4::HEADER_LEN => Ok(Family::Ipv4),
        EthernetProtocol::Arp if body >= arp::ARP_LEN => Ok(Family::Arp),
        EthernetProtocol::Ipv6 if body >= IPV6_HEADER_LEN => Ok(Family::Ipv6),
        EthernetProtocol::Ipv4 | EthernetProtocol::Arp | EthernetProtocol::Ipv6 => Err(Shed::Runt),
        _ => Err(Shed::UnknownType),
    }
}

/// Whether a driver's device is usable, as the driver last saw it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    /// The device is there and the driver moves frames (the state of a device that cannot
    /// go away, such as the softnic).
    #[default]
    Up,
    /// The device errored or disappeared; the driver is trying to reopen it and drops what
    /// it is given meanwhile (counted in [`DriverStats::link_drops`]).
    Down,
    /// The driver gave up on the device: `rx_burst` and `tx_burst` return `Err` from now on.
    Failed,
}

/// Counters every driver keeps.
///
/// Driver processes send these as JSON to the server; every field added after the first
/// version carries `#[serde(default)]`, so a driver and a server of different versions
/// still understand each other.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DriverStats {
    /// Frames received from the device.
    pub rx_frames: u64,
    /// Bytes received from the device.
    pub rx_bytes: u64,
    /// Frames dropped because no pool had a buffer.
    pub rx_no_buffer: u64,
    /// Frames shed as runts.
    pub rx_runts: u64,
    /// Frames shed for an unknown EtherType.
    pub rx_unknown_type: u64,
    /// Frames of a family no server took when they came ([`RxPools::pools_for`]: none
    /// serves it, or its server's IN queue was full), left unreceived.
    #[serde(default)]
    pub rx_unserved: u64,
    /// Frames dropped by the device or kernel before we saw them (as it reports them).
    pub rx_device_drops: u64,
    /// Frames seen but not for us (another host's unicast, outgoing, unwanted multicast).
    pub rx_filtered: u64,
    /// Frames longer than a pool buffer (or truncated by the device), dropped.
    pub rx_oversize: u64,
    /// Device descriptors that failed a bounds check (each drops what it described).
    pub rx_bad_ring: u64,
    /// Frames transmitted.
    pub tx_frames: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames the device could not take (transmit ring full) or refused.
    pub tx_errors: u64,
    /// The device's state: [`LinkState::Up`] unless the driver watches a device that can
    /// go away and it did.
    #[serde(default)]
    pub link: LinkState,
    /// How many times the device went from up to down.
    #[serde(default)]
    pub link_down_events: u64,
    /// How many times the driver reopened the device after it came back.
    #[serde(default)]
    pub reopens: u64,
    /// Frames lost because the device went down: frames handed to `tx_burst` while it was
    /// down (their buffers are released as always), and frames still queued in the device's
    /// rings when the driver closed it.
    #[serde(default)]
    pub link_drops: u64,
    /// What `--impair` did to the frames, per direction (only for a driver wrapped in
    /// [`impair::Impaired`]: absent otherwise). Boxed: most drivers have none, and these
    /// counters travel in every control message that carries a driver's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impair: Option<Box<impair::ImpairStats>>,
    /// The AF_XDP side (only for [`af_xdp::AfXdp`]: absent otherwise): rings, mode, and the
    /// kernel's drops by reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp: Option<Box<af_xdp::XdpStats>>,
}

impl DriverStats {
    /// Counts a shed frame.
    pub fn shed(&mut self, why: Shed) {
        match why {
            Shed::Runt => self.rx_runts += 1,
            Shed::UnknownType => self.rx_unknown_type += 1,
        }
    }
}

/// A received frame in a pool buffer, already classified. The buffer's header says where the
/// frame lies (`off`, `len`): a device that writes frames puts them at offset 0, a loopback
/// hands a transmitted buffer back with the offset the stack left in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxFrame {
    /// The buffer.
    pub buf: u32,
    /// Frame length in bytes.
    pub len: u32,
    /// Its protocol family.
    pub family: Family,
}

/// A packet device.
///
/// # Errors and health
///
/// `rx_burst` and `tx_burst` return `Err` only when the driver has given up on its device
/// for good: from then on every call returns `Err` again, and the caller should stop driving
/// it (the server stops the driver's loop and exits non-zero, printing the error). Trouble
/// that may pass — the device deleted, set down, or failing a send — is handled inside the
/// driver: it reports the device [`LinkState::Down`] in [`Driver::stats`], drops and counts
/// what it is given meanwhile, reopens the device when it returns, and reports it
/// [`LinkState::Up`] again. A caller therefore never retries on `Err` and never needs to
/// inspect transient errors.
///
/// No driver holds a pool buffer between calls except as the docs of its `tx_burst` say
/// (the loopback); a reopen therefore cannot leak buffers.
pub trait Driver: Send {
    /// Receives up to `max` frames into buffers allocated from the pools `pools` names for
    /// each frame's family, and appends them to `out`, classified. Frames that find no
    /// buffer, frames shed by [`classify`] and frames no server takes are counted and never
    /// appear in `out`. Never blocks. Returns how many were appended, or
    /// `Err` once the driver has given up on its device (see [Errors and health](Driver)).
    fn rx_burst(
        &mut self,
        pools: &mut dyn RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize>;

    /// Transmits single-buffer frames (`off`/`len` from each buffer's header) and releases
    /// every buffer in `frames`, sent or not (a frame the device cannot take is counted in
    /// `tx_errors`) — or, for a loopback, keeps it to hand back from `rx_burst`. Never blocks.
    /// Buffers are released even when it returns `Err` (the driver has given up).
    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()>;

    /// How many more frames `tx_burst` would take now without dropping one for lack of
    /// room (`None`: it does not know, or never drops for that). A caller that can hold its
    /// sends back — the server leaves applications' sends in their queues — sends no more
    /// than this, so a sender faster than the device waits instead of losing datagrams, as
    /// a kernel socket's send buffer makes it wait.
    fn tx_room(&self) -> Option<usize> {
        None
    }

    /// A file descriptor that becomes readable when frames arrive, for a caller that wants
    /// to sleep instead of polling (`None`: poll). It is the same descriptor for the driver's
    /// whole life (a caller may register it in its own epoll set once), and it also becomes
    /// readable when the driver has health work to do (an error on the device, a reopen
    /// due): a caller woken by it calls `rx_burst` even if it expects no frames.
    fn rx_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>>;

    /// For a device without an fd: how long until it will have frames again (`None`: no
    /// idea). A caller that sleeps when idle sleeps no longer than this.
    fn idle_hint(&self) -> Option<std::time::Duration> {
        None
    }

    /// The driver's counters.
    fn stats(&self) -> DriverStats;

    /// The device's state, as [`DriverStats::link`] says, without gathering the rest: for a
    /// caller that looks after every idle round.
    fn link(&self) -> LinkState {
        self.stats().link
    }

    /// The device's MAC address.
    fn mac(&self) -> [u8; 6];

    /// Hands back every pool buffer the driver holds between calls (`AF_XDP`'s fill ring
    /// and unfinished sends; none for the others), for a caller that stops driving it;
    /// returns how many. The driver may not be driven after it.
    fn release_held(&mut self, _pools: &mut DriverPools) -> u32 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_sheds_runts_and_unknown_types() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(classify(&f), Ok(Family::Ipv4));
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(classify(&f), Ok(Family::Arp));
        assert_eq!(classify(&f[..30]), Err(Shed::Runt));
        assert_eq!(classify(&f[..ETH_HDR + 28]), Ok(Family::Arp));
        assert_eq!(classify(&f[..ETH_HDR + 27]), Err(Shed::Runt));
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(classify(&f[..ETH_HDR + 20]), Ok(Family::Ipv4));
        assert_eq!(classify(&f[..ETH_HDR + 19]), Err(Shed::Runt));
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        assert_eq!(classify(&f), Ok(Family::Ipv6));
        assert_eq!(classify(&f[..ETH_HDR + 39]), Err(Shed::Runt));
        f[12..14].copy_from_slice(&0x88ccu16.to_be_bytes()); // LLDP
        assert_eq!(classify(&f), Err(Shed::UnknownType));
        assert_eq!(classify(&f[..10]), Err(Shed::Runt));
    }

    #[test]
    fn families_combine_as_sets() {
        use super::Families;
        assert_eq!(Families::IPV4.union(Families::IPV6), Families::BOTH);
        assert_eq!(Families::BOTH.minus(Families::IPV4), Some(Families::IPV6));
        assert_eq!(Families::BOTH.minus(Families::BOTH), None);
        assert_eq!(Families::IPV6.minus(Families::IPV4), Some(Families::IPV6));
        assert!(Families::BOTH.overlaps(Families::IPV6));
        assert!(!Families::IPV4.overlaps(Families::IPV6));
        assert!(!Families::NONE.overlaps(Families::BOTH));
        assert_eq!(Families::NONE.name(), "none");
    }

    #[test]
    fn each_family_goes_only_where_it_is_served() {
        let (_server, mut pools) = shmnet_chan::heap::heap_pools(
            shmnet_chan::PoolGeometry {
                pools: 1,
                per_pool: 4,
                data_size: 256,
                free_cap: 4,
                policy: shmnet_chan::AllocPolicy::Lifo,
            },
            None,
        );
        // A bare DriverPools: IPv4 and ARP, as before IPv6.
        assert!(pools.pools_for(Family::Ipv4).is_some());
        assert!(pools.pools_for(Family::Arp).is_some());
        assert!(pools.pools_for(Family::Ipv6).is_none());
        let mut six = ServedPools {
            pools: &mut pools,
            families: Families::IPV6,
        };
        assert!(six.pools_for(Family::Ipv6).is_some());
        assert!(six.pools_for(Family::Arp).is_none());
        assert!(six.single().is_some());
        assert!(Families::BOTH.overlaps(Families::IPV6));
        assert!(!Families::IPV4.overlaps(Families::IPV6));
        assert_eq!(Families::default(), Families::IPV4);
        assert_eq!(Families::BOTH.name(), "ipv4+ipv6");
    }

    #[test]
    fn link_state_is_lowercase_json_and_old_stats_still_parse() {
        let s = DriverStats {
            link: LinkState::Down,
            link_down_events: 2,
            ..DriverStats::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["link"], "down");
        assert_eq!(v["link_down_events"], 2);
        let back: DriverStats = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
        // A driver process of the version before the health fields.
        let old = r#"{"rx_frames":1,"rx_bytes":60,"rx_no_buffer":0,"rx_runts":0,
            "rx_unknown_type":0,"rx_device_drops":0,"rx_filtered":0,"rx_oversize":0,
            "rx_bad_ring":0,"tx_frames":0,"tx_bytes":0,"tx_errors":0}"#;
        let old: DriverStats = serde_json::from_str(old).unwrap();
        assert_eq!(old.link, LinkState::Up);
        assert_eq!((old.rx_frames, old.reopens, old.link_drops), (1, 0, 0));
        assert_eq!(
            serde_json::to_value(LinkState::Failed).unwrap(),
            serde_json::json!("failed")
        );
    }
}
