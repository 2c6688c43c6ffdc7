//! The wake-up protocols, with real eventfds and threads: the consumer-idle one (the producer
//! wakes a consumer that sleeps on an empty ring) and the room one (the consumer wakes a
//! producer that sleeps on a full ring).

#![cfg(not(loom))]

use shmnet_chan::ring::{heap_ring, heap_ring_with_room};
use shmnet_chan::signal::EventFd;
use shmnet_chan::{Desc, DescLimits, Signal, WaitOutcome};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const LONG: Option<Duration> = Some(Duration::from_secs(30));

#[test]
fn a_busy_consumer_costs_the_producer_no_wakeups() {
    let signal: Arc<dyn Signal> = Arc::new(EventFd::new().unwrap());
    let (mut tx, mut rx) = heap_ring(256, Some(signal), DescLimits::OPAQUE);
    const N: u32 = 200_000;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Busy: polls and never arms the wake word.
            let mut got = 0;
            let mut batch = [Desc::default(); 32];
            while got < N {
                got += rx.dequeue_burst(&mut batch) as u32;
            }
            stop.store(true, Ordering::Relaxed);
        });
        let mut seq = 0;
        while seq < N {
            if tx.enqueue(Desc::new(seq, 0)).is_ok() {
                seq += 1;
            }
        }
    });
    assert!(stop.load(Ordering::Relaxed));
    let st = tx.stats();
    assert_eq!(st.wakeups_sent, 0);
    assert_eq!(st.sleeps, 0);
    assert!(st.wakeups_suppressed > 0);
    assert_eq!(st.dequeued, u64::from(N));
}

#[test]
fn a_sleeping_consumer_is_always_woken_and_never_over_signalled() {
    let signal: Arc<dyn Signal> = Arc::new(EventFd::new().unwrap());
    let (mut tx, mut rx) = heap_ring(64, Some(signal), DescLimits::OPAQUE);
    const N: u32 = 20_000;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut next = 0;
            while next < N {
                match rx.dequeue() {
                    Some(d) => {
                        assert_eq!(d.buf, next);
                        next += 1;
                    }
                    // A lost wake-up would hang here until the long timeout and fail.
                    None => assert_eq!(rx.wait(LONG), WaitOutcome::Woken, "lost wake-up"),
                }
            }
        });
        for seq in 0..N {
            while tx.enqueue(Desc::new(seq, 0)).is_err() {
                std::thread::yield_now();
            }
            // Let the consumer run dry and fall asleep now and then.
            if seq % 97 == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    });
    let st = tx.stats();
    assert!(st.sleeps > 0, "the consumer never slept: {st:?}");
    assert!(st.wakeups_sent > 0);
    assert!(st.wakeups_sent <= st.sleeps, "{st:?}");
    assert!(st.wakeups_suppressed > 0, "{st:?}");
}

#[test]
fn a_wait_times_out_when_nothing_arrives() {
    let signal: Arc<dyn Signal> = Arc::new(EventFd::new().unwrap());
    let (_tx, mut rx) = heap_ring(8, Some(signal), DescLimits::OPAQUE);
    assert_eq!(
        rx.wait(Some(Duration::from_millis(20))),
        WaitOutcome::TimedOut
    );
}

#[test]
fn a_multi_wait_is_woken_through_the_fd() {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let signal: Arc<dyn Signal> = Arc::new(EventFd::new().unwrap());
    let (mut tx, mut rx) = heap_ring(8, Some(signal), DescLimits::OPAQUE);
    // Nothing there: the consumer may sleep.
    assert!(rx.prepare_wait());
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            tx.enqueue(Desc::new(7, 0)).unwrap();
        });
        let fd = rx.wake_fd().expect("an eventfd");
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: 30,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&ts)).unwrap(), 1);
    });
    rx.finish_wait();
    assert_eq!(rx.dequeue(), Some(Desc::new(7, 0)));
    assert_eq!(rx.stats().wakeups_sent, 1);
    // Work already there: no sleep.
    tx.enqueue(Desc::new(8, 0)).unwrap();
    assert!(!rx.prepare_wait());
    assert_eq!(rx.dequeue(), Some(Desc::new(8, 0)));
}

fn both_ways(capacity: u32) -> (shmnet_chan::Producer, shmnet_chan::Consumer) {
    let wake: Arc<dyn Signal> = Arc::new(EventFd::new().unwrap());
    let room: Arc<dyn Signal> = Arc::new(EventFd::new().unwrap());
    heap_ring_with_room(capacity, Some(wake), Some(room), DescLimits::OPAQUE)
}

#[test]
fn a_producer_blocked_on_a_full_ring_is_woken_when_a_slot_is_freed() {
    let (mut tx, mut rx) = both_ways(4);
    for i in 0..4 {
        tx.enqueue(Desc::new(i, 0)).unwrap();
    }
    std::thread::scope(|s| {
        let producer = s.spawn(move || {
            // Full: blocks (no timeout that matters) until the consumer frees a slot.
            while tx.enqueue(Desc::new(4, 0)).is_err() {
                assert_eq!(tx.wait_room(LONG), WaitOutcome::Woken, "lost room wake-up");
            }
        });
        // Free a slot only once the producer has announced it is waiting.
        while rx.stats().room_sleeps == 0 {
            std::thread::yield_now();
        }
        assert_eq!(rx.dequeue(), Some(Desc::new(0, 0)));
        // Then look at the ring as a polling consumer would, until the producer is through.
        while !producer.is_finished() {
            rx.available();
            std::thread::yield_now();
        }
    });
    let st = rx.stats();
    assert_eq!(st.room_wakeups_sent, 1, "{st:?}");
    assert!(st.room_sleeps >= 1, "{st:?}");
    for i in 1..5 {
        assert_eq!(rx.dequeue(), Some(Desc::new(i, 0)));
    }
}

#[test]
fn producer_and_consumer_both_sleeping_lose_nothing() {
    let (mut tx, mut rx) = both_ways(8);
    const N: u32 = 50_000;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut next = 0;
            let mut batch = [Desc::default(); 3];
            while next < N {
                let n = rx.dequeue_burst(&mut batch);
                for d in &batch[..n] {
                    assert_eq!(d.buf, next);
                    next += 1;
                }
                if n == 0 {
                    assert_eq!(rx.wait(LONG), WaitOutcome::Woken, "lost wake-up");
                }
                // Fall behind now and then, so the producer finds the ring full.
                if next % 101 == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        });
        let mut seq = 0;
        while seq < N {
            let burst: Vec<Desc> = (seq..(seq + 5).min(N)).map(|i| Desc::new(i, 0)).collect();
            let n = tx.enqueue_burst(&burst) as u32;
            seq += n;
            if n == 0 {
                assert_eq!(tx.wait_room(LONG), WaitOutcome::Woken, "lost room wake-up");
            }
        }
    });
    let st = tx.stats();
    assert_eq!(st.dequeued, u64::from(N));
    assert!(st.room_wakeups_sent <= st.room_sleeps, "{st:?}");
    assert!(st.wakeups_sent <= st.sleeps, "{st:?}");
}

#[test]
fn a_producer_with_room_costs_the_consumer_no_room_wakeups() {
    let (mut tx, mut rx) = both_ways(64);
    for round in 0..1000u32 {
        assert_eq!(tx.wait_room(LONG), WaitOutcome::Woken, "room: no wait");
        assert!(!tx.prepare_wait_room());
        tx.enqueue(Desc::new(round, 0)).unwrap();
        assert_eq!(rx.dequeue(), Some(Desc::new(round, 0)));
    }
    let st = rx.stats();
    assert_eq!((st.room_sleeps, st.room_wakeups_sent), (0, 0), "{st:?}");
}

#[test]
fn a_room_wait_times_out_and_withdraws_when_nobody_frees_a_slot() {
    let (mut tx, mut rx) = both_ways(2);
    tx.enqueue_burst(&[Desc::new(0, 0), Desc::new(1, 0)]);
    assert_eq!(
        tx.wait_room(Some(Duration::from_millis(20))),
        WaitOutcome::TimedOut
    );
    // The announcement was withdrawn: freeing room now wakes nobody.
    assert_eq!(rx.dequeue(), Some(Desc::new(0, 0)));
    assert_eq!(rx.dequeue(), Some(Desc::new(1, 0)));
    assert_eq!(rx.dequeue(), None);
    let st = rx.stats();
    assert_eq!((st.room_sleeps, st.room_wakeups_sent), (1, 0), "{st:?}");
}

#[test]
fn a_producer_without_a_room_signal_cannot_sleep() {
    let signal: Arc<dyn Signal> = Arc::new(EventFd::new().unwrap());
    let (mut tx, _rx) = heap_ring(2, Some(signal), DescLimits::OPAQUE);
    tx.enqueue_burst(&[Desc::new(0, 0), Desc::new(1, 0)]);
    assert!(!tx.can_wait_room());
    assert!(!tx.prepare_wait_room());
    assert!(tx.room_fd().is_none());
    assert_eq!(tx.wait_room(LONG), WaitOutcome::Woken, "returns at once");
}

#[test]
fn a_multi_wait_for_room_is_woken_through_the_fd() {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let (mut tx, mut rx) = both_ways(2);
    tx.enqueue_burst(&[Desc::new(0, 0), Desc::new(1, 0)]);
    assert!(tx.prepare_wait_room(), "full: the producer may sleep");
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(rx.dequeue(), Some(Desc::new(0, 0)));
        });
        let fd = tx.room_fd().expect("an eventfd");
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: 30,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&ts)).unwrap(), 1);
    });
    tx.finish_wait_room();
    tx.enqueue(Desc::new(2, 0)).unwrap();
    let st = tx.stats();
    assert_eq!((st.room_sleeps, st.room_wakeups_sent), (1, 1), "{st:?}");
    // Room already there: no sleep.
    assert_eq!(rx.dequeue(), Some(Desc::new(1, 0)));
    assert!(!tx.prepare_wait_room());
}

/// A writer waiting for 16 buffers is woken once, when the 16th comes back — by single
/// releases and by deferred chains (counted by their length) alike — not at every release.
#[test]
fn a_buffer_waiter_is_woken_once_for_the_lot_it_waits_for() {
    use shmnet_chan::heap::heap_pools;
    use shmnet_chan::{AllocPolicy, PoolGeometry};
    let signal: Arc<dyn Signal> = Arc::new(EventFd::new().unwrap());
    let geo = PoolGeometry {
        pools: 1,
        per_pool: 32,
        data_size: 64,
        free_cap: 32,
        policy: AllocPolicy::Lifo,
    };
    let (mut waiter, mut releaser) = heap_pools(geo, Some(signal));
    let held: Vec<u32> = (0..32).map(|_| waiter.alloc().unwrap()).collect();
    // Released in this order: 8 single buffers, then two chains of 4.
    let singles = held[..8].to_vec();
    let chains = [held[8..12].to_vec(), held[12..16].to_vec()];
    for c in &chains {
        waiter.buffers().chain(c).unwrap();
    }
    let woken = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Let the waiter announce and sleep first (if it has not, it finds the buffers
            // free and is never woken at all).
            std::thread::sleep(Duration::from_millis(50));
            for &b in &singles {
                releaser.release(b);
                std::thread::sleep(Duration::from_millis(2));
                assert!(
                    !woken.load(Ordering::SeqCst),
                    "woken before its 16 came back"
                );
            }
            releaser.release(chains[0][0]);
            std::thread::sleep(Duration::from_millis(2));
            assert!(!woken.load(Ordering::SeqCst), "woken at 12 of 16");
            releaser.release(chains[1][0]);
        });
        assert!(waiter.wait_for_free(16, LONG), "the 16 buffers came back");
        woken.store(true, Ordering::SeqCst);
    });
    let st = waiter.buffers().stats();
    assert!(
        st.want_wakeups <= 1,
        "one wake-up for the lot, not {}",
        st.want_wakeups
    );
    assert_eq!(waiter.buffers().free_count(), 16);
}
