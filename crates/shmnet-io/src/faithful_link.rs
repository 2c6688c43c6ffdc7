//! `--sync faithful`: the driver and the server joined by seed 002's own IN and OUT queues
//! ([`shmnet_chan::faithful`]) instead of the channel's wait-free rings.
//!
//! Each queue is two sub-queues under asymmetric Peterson mutexes with the Enable protocol,
//! and a consumer-idle condition variable over a counting event (an eventfd). The sides are
//! the seed's: on an IN queue the driver (the producer) yields — it never waits for the
//! server, and a frame it cannot append stays in the device or is dropped — and the server
//! (the consumer) spins; on the OUT queue the server (the producer) spins and the driver
//! (the consumer) yields. Both IN queues share one event, since one party sleeps on both.
//!
//! # Where the queues live
//!
//! In a sealed memfd of their own ([`shmnet_chan::faithful::QueueMemory`]), made by the
//! server beside the data window: a driver thread takes its ends from the same mapping, a
//! driver process is sent the memfd and the two eventfds after the data window and maps it
//! (as the seed's kernel and server shared their queues' memory).
//!
//! # Trust
//!
//! The consumers check every descriptor against the data window's buffer limits (as the
//! rings' consumers do) and count what they refuse.

use rustix::fd::{BorrowedFd, OwnedFd};
use shmnet_chan::faithful::{
    ConsumerStats, Direction, FaithfulConsumer, FaithfulProducer, ProducerStats, QueueMemory,
    QueueMemoryError,
};
use shmnet_chan::signal::EventFd;
use shmnet_chan::{DescLimits, DriverPools, Signal};
use std::sync::Arc;

/// Slots per sub-queue of the IPv4 IN queue, the ARP IN queue and the OUT queue, in the
/// order they lie in the memory (the rings' sizes).
const CAPACITIES: [u32; 3] = [1024, 64, 1024];
const Q_IN_IP: usize = 0;
const Q_IN_ARP: usize = 1;
const Q_OUT: usize = 2;

/// The greeting of the hand-off that sends a driver process the queues.
pub(crate) const HANDOFF_GREETING: &[u8; 16] = b"shmnet-faithful1";

/// Why the queues could not be made or joined.
#[derive(Debug, thiserror::Error)]
pub enum FaithfulError {
    /// The queues' memory.
    #[error("seed 002's queues: {0}")]
    Memory(#[from] QueueMemoryError),
    /// An eventfd could not be made.
    #[error("seed 002's queues: an eventfd: {0}")]
    Event(std::io::Error),
    /// The server sent something else where the queues' fds belong.
    #[error("seed 002's queues: the server sent {0} fds where 3 (memory and two eventfds) belong")]
    Fds(usize),
    /// A passed fd is not the eventfd it should be.
    #[error("seed 002's queues: {0}")]
    NotAnEventFd(String),
}

/// The queues' memory and their two events: what the server makes and the driver joins.
pub(crate) struct FaithfulShared {
    memory: QueueMemory,
    /// Raised by the driver when it appended to an IN queue the server sleeps on.
    to_server: Arc<EventFd>,
    /// Raised by the server when it appended to OUT while the driver sleeps.
    to_driver: Arc<EventFd>,
}

impl FaithfulShared {
    /// Makes empty queues and their events (the server).
    pub(crate) fn create() -> Result<Self, FaithfulError> {
        Ok(Self {
            memory: QueueMemory::create(&CAPACITIES)?,
            to_server: Arc::new(EventFd::new().map_err(FaithfulError::Event)?),
            to_driver: Arc::new(EventFd::new().map_err(FaithfulError::Event)?),
        })
    }

    /// The fds a driver process is sent, in the order [`Self::open`] takes them.
    pub(crate) fn fds(&self) -> [BorrowedFd<'_>; 3] {
        [self.memory.fd(), self.to_server.fd(), self.to_driver.fd()]
    }

    /// Joins the queues a server made, from the fds it sent (a driver process). Every fd
    /// is checked: the memory's seals and size, and that the events are eventfds.
    pub(crate) fn open(mut fds: Vec<OwnedFd>) -> Result<Self, FaithfulError> {
        if fds.len() != 3 {
            return Err(FaithfulError::Fds(fds.len()));
        }
        let to_driver = EventFd::from_peer(fds.pop().expect("three fds"))
            .map_err(FaithfulError::NotAnEventFd)?;
        let to_server = EventFd::from_peer(fds.pop().expect("three fds"))
            .map_err(FaithfulError::NotAnEventFd)?;
        let memory = QueueMemory::open(fds.pop().expect("three fds"), &CAPACITIES)?;
        Ok(Self {
            memory,
            to_server: Arc::new(to_server),
            to_driver: Arc::new(to_driver),
        })
    }

    /// Both ends of each queue, in layout order (IPv4 IN, ARP IN, OUT), each consumer
    /// sleeping on its queue's event; a party keeps the ends it plays.
    fn all_ends(&self) -> [(FaithfulProducer, FaithfulConsumer); 3] {
        let to_server: Arc<dyn Signal> = self.to_server.clone();
        let to_driver: Arc<dyn Signal> = self.to_driver.clone();
        let q = |i, d, sig| {
            self.memory
                .queue(i, d, Some(sig))
                .expect("a queue of the layout")
        };
        [
            q(Q_IN_IP, Direction::In, to_server.clone()),
            q(Q_IN_ARP, Direction::In, to_server),
            q(Q_OUT, Direction::Out, to_driver),
        ]
    }

    /// The server's ends, refusing descriptors outside `limits` (the data window's
    /// buffers).
    pub(crate) fn server_ends(&self, limits: DescLimits) -> FaithfulServerEnds {
        let [ipv4, arp, out] = self.all_ends();
        FaithfulServerEnds {
            in_ip: ipv4.1.with_limits(limits),
            in_arp: arp.1.with_limits(limits),
            out: out.0,
        }
    }

    /// The driver's ends, with its pools, refusing descriptors outside `limits`.
    pub(crate) fn driver_ends(&self, pools: DriverPools, limits: DescLimits) -> FaithfulDriverEnds {
        let [ipv4, arp, out] = self.all_ends();
        FaithfulDriverEnds {
            pools,
            in_ip: ipv4.0,
            in_arp: arp.0,
            out: out.1.with_limits(limits),
        }
    }
}

/// The server's ends: it consumes the IN queues (spinning side) and produces OUT (spinning).
pub(crate) struct FaithfulServerEnds {
    pub(crate) in_ip: FaithfulConsumer,
    pub(crate) in_arp: FaithfulConsumer,
    pub(crate) out: FaithfulProducer,
}

/// The driver's ends: it produces the IN queues (yielding side) and consumes OUT (yielding).
pub(crate) struct FaithfulDriverEnds {
    pub(crate) pools: DriverPools,
    pub(crate) in_ip: FaithfulProducer,
    pub(crate) in_arp: FaithfulProducer,
    pub(crate) out: FaithfulConsumer,
}

/// The server's side of the queues' counters, in its stats (`faithful`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FaithfulServerStats {
    /// The IPv4 IN queue, as its consumer counts it.
    pub in_ip: ConsumerStats,
    /// The ARP IN queue, as its consumer counts it.
    pub in_arp: ConsumerStats,
    /// The OUT queue, as its producer counts it.
    pub out: ProducerStats,
}

/// The driver's side of the queues' counters, in the driver's stats (`faithful`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FaithfulDriverStats {
    /// The IPv4 IN queue, as its producer counts it.
    pub in_ip: ProducerStats,
    /// The ARP IN queue, as its producer counts it.
    pub in_arp: ProducerStats,
    /// The OUT queue, as its consumer counts it.
    pub out: ConsumerStats,
}

impl FaithfulServerEnds {
    /// Its counters.
    pub(crate) fn stats(&self) -> FaithfulServerStats {
        FaithfulServerStats {
            in_ip: self.in_ip.stats(),
            in_arp: self.in_arp.stats(),
            out: self.out.stats(),
        }
    }

    /// Says idle on both IN queues and looks again: `true` to sleep (then
    /// [`Self::finish_wait`]), `false` if either has work (nothing left announced).
    pub(crate) fn prepare_wait(&mut self) -> bool {
        if !self.in_ip.prepare_wait() {
            return false;
        }
        if !self.in_arp.prepare_wait() {
            // Work is there: the loop runs on, and the event (if any) is consumed at its
            // next sleep.
            self.in_ip.withdraw_idle();
            return false;
        }
        true
    }

    /// Withdraws what [`Self::prepare_wait`] announced, consuming the shared event once.
    pub(crate) fn finish_wait(&mut self) {
        self.in_arp.withdraw_idle();
        self.in_ip.finish_wait();
    }
}

impl FaithfulDriverEnds {
    /// Its counters.
    pub(crate) fn stats(&self) -> FaithfulDriverStats {
        FaithfulDriverStats {
            in_ip: self.in_ip.stats(),
            in_arp: self.in_arp.stats(),
            out: self.out.stats(),
        }
    }
}
