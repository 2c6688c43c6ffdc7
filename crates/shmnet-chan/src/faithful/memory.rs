//! Seed 002's queues in memory shared between processes: a sealed memfd holding several
//! queues, made by one party ([`QueueMemory::create`]: the server) and passed to the other
//! ([`QueueMemory::open`]: a driver process), each mapping it and taking its ends of each
//! queue ([`QueueMemory::queue`]).
//!
//! The layout is the list of capacities both parties agree on (the server's spec says it);
//! queue `i` starts at the sum of the sizes before it ([`super::queue::queue_bytes`], 64-byte
//! aligned), a zeroed queue is an empty one. The memfd is sealed against growing and
//! shrinking before it is passed, and the opener checks the seals and the size, so a peer
//! can change the queues' words (which the ends treat as untrusted: impossible indices are
//! counted, a lock held too long is given up on) but never the memory under them.

use super::queue::{Direction, FaithfulConsumer, FaithfulProducer, faithful_queue_in, queue_bytes};
use crate::mapping::Mapping;
use crate::signal::Signal;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::ProtFlags;
use std::sync::Arc;

/// The largest sub-queue capacity a queue memory takes.
pub const MAX_CAPACITY: u32 = 1 << 20;

/// Several faithful queues in one shared mapping.
#[derive(Debug)]
pub struct QueueMemory {
    map: Arc<Mapping>,
    memfd: OwnedFd,
    offsets: Vec<usize>,
    capacities: Vec<u32>,
}

/// Why queue memory could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum QueueMemoryError {
    /// A system call failed.
    #[error("{what}: {err}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error.
        err: rustix::io::Errno,
    },
    /// The memfd passed can still change size.
    #[error("the queues' memory is not sealed against resizing")]
    NotSealed,
    /// The memfd passed is not the size the capacities need.
    #[error("the queues' memory holds {got} bytes where {want} were expected")]
    Size {
        /// Its size.
        got: u64,
        /// What the capacities need.
        want: usize,
    },
    /// A capacity is out of range.
    #[error("queue capacity {0} must be a power of two from 4 to {MAX_CAPACITY}")]
    Capacity(u32),
}

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> QueueMemoryError {
    move |err| QueueMemoryError::Sys { what, err }
}

/// Each queue's offset, and the bytes of them all (a whole number of pages).
fn layout(capacities: &[u32]) -> Result<(Vec<usize>, usize), QueueMemoryError> {
    let mut offsets = Vec::with_capacity(capacities.len());
    let mut at = 0usize;
    for &c in capacities {
        if !c.is_power_of_two() || !(4..=MAX_CAPACITY).contains(&c) {
            return Err(QueueMemoryError::Capacity(c));
        }
        offsets.push(at);
        at += queue_bytes(c).next_multiple_of(64);
    }
    Ok((offsets, at.max(1).next_multiple_of(4096)))
}

impl QueueMemory {
    /// Makes zeroed (empty) queues of these sub-queue capacities in a new sealed memfd.
    pub fn create(capacities: &[u32]) -> Result<Self, QueueMemoryError> {
        let (offsets, size) = layout(capacities)?;
        let memfd = rustix::fs::memfd_create(
            "shmnet-faithful-queues",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(sys("memfd_create"))?;
        rustix::fs::ftruncate(&memfd, size as u64).map_err(sys("sizing the queues"))?;
        rustix::fs::fcntl_add_seals(
            &memfd,
            SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
        )
        .map_err(sys("sealing the queues"))?;
        Self::map(memfd, offsets, size, capacities)
    }

    /// Opens queue memory a peer made with [`Self::create`] for the same capacities, after
    /// checking its seals and size.
    pub fn open(memfd: OwnedFd, capacities: &[u32]) -> Result<Self, QueueMemoryError> {
        let (offsets, size) = layout(capacities)?;
        let seals = rustix::fs::fcntl_get_seals(&memfd).map_err(sys("reading the seals"))?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL) {
            return Err(QueueMemoryError::NotSealed);
        }
        let got = rustix::fs::fstat(&memfd)
            .map_err(sys("fstat of the queues"))?
            .st_size as u64;
        if got != size as u64 {
            return Err(QueueMemoryError::Size { got, want: size });
        }
        Self::map(memfd, offsets, size, capacities)
    }

    fn map(
        memfd: OwnedFd,
        offsets: Vec<usize>,
        size: usize,
        capacities: &[u32],
    ) -> Result<Self, QueueMemoryError> {
        let map = Mapping::new(
            memfd.as_fd(),
            size,
            4096,
            ProtFlags::READ | ProtFlags::WRITE,
        )
        .map_err(sys("mapping the queues"))?;
        Ok(Self {
            map: Arc::new(map),
            memfd,
            offsets,
            capacities: capacities.to_vec(),
        })
    }

    /// The memfd, to pass to the peer.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.memfd.as_fd()
    }

    /// Both ends of queue `i` (a party keeps the one it plays and drops the other), running
    /// `direction`, its consumer sleeping on `signal`. `None` if there is no queue `i`.
    pub fn queue(
        &self,
        i: usize,
        direction: Direction,
        signal: Option<Arc<dyn Signal>>,
    ) -> Option<(FaithfulProducer, FaithfulConsumer)> {
        let (&off, &cap) = self.offsets.get(i).zip(self.capacities.get(i))?;
        debug_assert!(off + queue_bytes(cap) <= self.map.len());
        // SAFETY: the layout puts queue `i` at `off`, 64-byte aligned, with
        // `queue_bytes(cap)` bytes inside the mapping; the mapping stays while any end holds
        // the `Arc` passed as the owner, and every access to it goes through atomics.
        let ends = unsafe {
            faithful_queue_in(
                self.map.base().add(off),
                cap,
                direction,
                signal,
                self.map.clone(),
            )
        };
        Some(ends)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Desc;
    use crate::faithful::Pushed;

    /// Two mappings of one memfd (as the server's and a driver process's would be) carry
    /// every element in order, both ways, and the opener refuses memory of the wrong size.
    #[test]
    fn two_mappings_of_one_memfd_are_one_queue() {
        let caps = [64, 8];
        let made = QueueMemory::create(&caps).expect("create");
        let fd = rustix::io::fcntl_dupfd_cloexec(made.fd(), 0).expect("dup");
        let opened = QueueMemory::open(fd, &caps).expect("open");
        let (mut tx, _) = made.queue(0, Direction::In, None).unwrap();
        let (_, mut rx) = opened.queue(0, Direction::In, None).unwrap();
        let (mut back_tx, _) = opened.queue(1, Direction::Out, None).unwrap();
        let (_, mut back_rx) = made.queue(1, Direction::Out, None).unwrap();
        drop((made, opened));
        for i in 0..1000u32 {
            assert_eq!(tx.enqueue_burst(&[Desc::new(i, i)]), Pushed::Took(1));
            assert_eq!(rx.dequeue(), Some(Desc::new(i, i)));
            assert!(back_tx.enqueue(Desc::new(i, 1)));
            assert_eq!(back_rx.dequeue(), Some(Desc::new(i, 1)));
        }
        assert!(made_queue_is_refused_for(&[64, 16]));
    }

    fn made_queue_is_refused_for(other: &[u32]) -> bool {
        let made = QueueMemory::create(&[64, 8, 1024]).expect("create");
        let fd = rustix::io::fcntl_dupfd_cloexec(made.fd(), 0).expect("dup");
        matches!(
            QueueMemory::open(fd, other),
            Err(QueueMemoryError::Size { .. })
        )
    }

    /// A memfd that could still be shrunk under the mapping is refused.
    #[test]
    fn unsealed_memory_is_refused() {
        let fd = rustix::fs::memfd_create("x", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        assert!(matches!(
            QueueMemory::open(fd, &[4]),
            Err(QueueMemoryError::NotSealed)
        ));
        assert!(matches!(
            QueueMemory::create(&[3]),
            Err(QueueMemoryError::Capacity(3))
        ));
    }
}
