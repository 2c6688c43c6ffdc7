//! Packet drivers: the party that owns the device.
//!
//! A driver moves frames between a device and pool buffers and never waits: a full queue or
//! an empty pool is a counted drop. It also does the seed's first-level demultiplexing
//! ([`classify`]): runts and unknown EtherTypes are shed here, before they cost the protocol
//! server anything.

pub mod af_packet;
mod checksum;
pub mod softnic;

use shmnet_chan::DriverPools;

/// The protocol family of a frame, by EtherType: which IN queue it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// EtherType 0x0800.
    Ipv4,
    /// EtherType 0x0806.
    Arp,
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
pub const ETH_HDR: usize = 14;

/// First-level demultiplexing of one frame by EtherType.
pub fn classify(frame: &[u8]) -> Result<Family, Shed> {
    if frame.len() < ETH_HDR {
        return Err(Shed::Runt);
    }
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 if frame.len() >= ETH_HDR + 20 => Ok(Family::Ipv4),
        0x0806 if frame.len() >= ETH_HDR + 28 => Ok(Family::Arp),
        0x0800 | 0x0806 => Err(Shed::Runt),
        _ => Err(Shed::UnknownType),
    }
}

/// Counters every driver keeps.
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
pub trait Driver: Send {
    /// Receives up to `max` frames into buffers allocated from `pools` and appends them to
    /// `out`, classified. Frames that find no buffer, and frames shed by [`classify`], are
    /// counted and never appear in `out`. Never blocks. Returns how many were appended.
    fn rx_burst(
        &mut self,
        pools: &mut DriverPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize>;

    /// Transmits single-buffer frames (`off`/`len` from each buffer's header) and releases
    /// every buffer in `frames`, sent or not (a frame the device cannot take is counted in
    /// `tx_errors`) — or, for a loopback, keeps it to hand back from `rx_burst`. Never blocks.
    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()>;

    /// A file descriptor that becomes readable when frames arrive, for a caller that wants
    /// to sleep instead of polling (`None`: poll).
    fn rx_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>>;

    /// For a device without an fd: how long until it will have frames again (`None`: no
    /// idea). A caller that sleeps when idle sleeps no longer than this.
    fn idle_hint(&self) -> Option<std::time::Duration> {
        None
    }

    /// The driver's counters.
    fn stats(&self) -> DriverStats;

    /// The device's MAC address.
    fn mac(&self) -> [u8; 6];
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
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        assert_eq!(classify(&f), Err(Shed::UnknownType));
        assert_eq!(classify(&f[..10]), Err(Shed::Runt));
    }
}
