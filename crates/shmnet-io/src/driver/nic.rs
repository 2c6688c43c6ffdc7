//! A real interface, whichever way it is opened ([`Access`]): one type for every structure
//! to drive, so `--driver af_packet:IFACE`, `af_xdp:IFACE[:QUEUE]` and `auto:IFACE` reach
//! the same code.

use super::af_packet::{AfPacket, AfPacketError, AfPacketOptions};
use super::af_xdp::program::Addresses;
use super::af_xdp::{AfXdp, AfXdpError, AfXdpOptions};
use super::{Driver, DriverStats, RxFrame, RxPools};
use crate::spec::Access;
use shmnet_chan::DriverPools;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// What to open.
#[derive(Clone, Debug)]
pub struct NicSpec<'a> {
    /// The interface.
    pub iface: &'a str,
    /// How.
    pub access: Access,
    /// shmnet's IPv4 address, if the server takes IPv4 (what `AF_XDP`'s steering program
    /// redirects, with ARP for it).
    pub ip: Option<Ipv4Addr>,
    /// shmnet's IPv6 address, if the server takes IPv6 (redirected with the neighbour
    /// solicitations for it).
    pub ip6: Option<Ipv6Addr>,
    /// The largest IP packet.
    pub mtu: u32,
    /// Give up after the interface has been gone this long (`None`: never).
    pub give_up_after: Option<Duration>,
}

/// Why the interface could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    /// With `AF_PACKET`.
    #[error("opening {iface} with AF_PACKET: {source}")]
    Packet {
        /// The interface.
        iface: String,
        /// Why (in the message, so not also a `source`).
        source: AfPacketError,
    },
    /// With `AF_XDP`.
    #[error("opening {iface} with AF_XDP: {source}")]
    Xdp {
        /// The interface.
        iface: String,
        /// Why (in the message, so not also a `source`).
        source: AfXdpError,
    },
}

/// The interface, opened.
pub enum Nic {
    /// Through `AF_PACKET`.
    Packet(AfPacket),
    /// Through `AF_XDP`.
    Xdp(AfXdp),
}

impl Nic {
    /// Opens the interface as `spec` says. `auto` tries `AF_XDP` and, if that cannot be
    /// had, opens `AF_PACKET`, saying why on stderr in one line.
    pub fn open(spec: &NicSpec<'_>) -> Result<Nic, NicError> {
        let packet = || {
            let opts = AfPacketOptions {
                give_up_after: spec.give_up_after,
                ..AfPacketOptions::for_mtu(spec.mtu)
            };
            AfPacket::open(spec.iface, opts)
                .map(Nic::Packet)
                .map_err(|source| NicError::Packet {
                    iface: spec.iface.to_owned(),
                    source,
                })
        };
        let xdp = |queue| {
            let opts = AfXdpOptions {
                queue,
                mtu: spec.mtu,
                give_up_after: spec.give_up_after,
                ..AfXdpOptions::default()
            };
            let addrs = Addresses {
                v4: spec.ip,
                v6: spec.ip6,
            };
            AfXdp::open(spec.iface, addrs, opts)
                .map(Nic::Xdp)
                .map_err(|source| NicError::Xdp {
                    iface: spec.iface.to_owned(),
                    source,
                })
        };
        match spec.access {
            Access::Packet => packet(),
            Access::Xdp { queue } => xdp(queue),
            Access::Auto { queue } => xdp(queue).or_else(|e| {
                eprintln!("shmnet: {e}; using AF_PACKET instead");
                packet()
            }),
        }
    }

    /// Its name, as `--driver` takes it.
    pub fn kind(&self) -> &'static str {
        match self {
            Nic::Packet(_) => "af_packet",
            Nic::Xdp(_) => "af_xdp",
        }
    }
}

impl std::fmt::Debug for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Nic::Packet(_) => f.write_str("Nic::Packet"),
            Nic::Xdp(d) => write!(f, "Nic::Xdp({d:?})"),
        }
    }
}

impl Driver for Nic {
    fn rx_burst(
        &mut self,
        pools: &mut dyn RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        match self {
            Nic::Packet(d) => d.rx_burst(pools, out, max),
            Nic::Xdp(d) => d.rx_burst(pools, out, max),
        }
    }

    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()> {
        match self {
            Nic::Packet(d) => d.tx_burst(pools, frames),
            Nic::Xdp(d) => d.tx_burst(pools, frames),
        }
    }

    fn tx_room(&self) -> Option<usize> {
        match self {
            Nic::Packet(d) => d.tx_room(),
            Nic::Xdp(d) => d.tx_room(),
        }
    }

    fn rx_fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Nic::Packet(d) => d.rx_fd(),
            Nic::Xdp(d) => d.rx_fd(),
        }
    }

    fn idle_hint(&self) -> Option<Duration> {
        match self {
            Nic::Packet(d) => d.idle_hint(),
            Nic::Xdp(d) => d.idle_hint(),
        }
    }

    fn stats(&self) -> DriverStats {
        match self {
            Nic::Packet(d) => d.stats(),
            Nic::Xdp(d) => d.stats(),
        }
    }

    fn link(&self) -> super::LinkState {
        match self {
            Nic::Packet(d) => d.link(),
            Nic::Xdp(d) => d.link(),
        }
    }

    fn mac(&self) -> [u8; 6] {
        match self {
            Nic::Packet(d) => d.mac(),
            Nic::Xdp(d) => d.mac(),
        }
    }

    fn release_held(&mut self, pools: &mut DriverPools) -> u32 {
        match self {
            Nic::Packet(d) => d.release_held(pools),
            Nic::Xdp(d) => d.release_held(pools),
        }
    }
}
