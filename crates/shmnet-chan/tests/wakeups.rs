//! The consumer-idle wake-up protocol, with real eventfds and threads.

#![cfg(not(loom))]

use shmnet_chan::ring::heap_ring;
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
