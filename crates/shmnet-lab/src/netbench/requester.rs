//! The requester of an `rr` cell, whatever carries its datagrams: it keeps `outstanding`
//! requests in flight, times each transaction from just before its request is sent to just
//! after the call that received its reply returned, and records every time on the board as
//! a latency sample. The kernel's requester drives it with a UDP socket, the `server` and
//! `ipc` requesters with the shmnet client API, the `inline` one with its own thread's
//! stack; each only sends what [`Requester::request`] gives it and hands back what arrives.

use crate::scoreboard::{Permit, Scoreboard};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a request may wait for its reply before the requester gives up on it (and
/// counts it lost). Generous on purpose: on a busy two-CPU machine a reply can wait behind
/// several descheduled parties, and a late reply is a latency sample, not a loss.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// One requester's state.
pub(crate) struct Requester<'a> {
    board: &'a Scoreboard,
    outstanding: usize,
    msg: Vec<u8>,
    /// Requests in flight, oldest first: sequence number and when it was sent.
    in_flight: VecDeque<(u64, Instant)>,
    sent: u64,
    replies: u64,
    timeouts: u64,
    send_failed: u64,
    /// The board said send no more.
    done: bool,
    /// The latest clock reading (a request's stamp, a reply's arrival): what
    /// [`Requester::expire`] measures ages against, reading the clock itself only every
    /// [`EXPIRE_READS_EVERY`] calls. On a VM a reading costs tens of nanoseconds, as much
    /// as a shmnet transaction's sends; the timeout is seconds.
    now: Instant,
    expire_calls: u32,
}

/// How often [`Requester::expire`] reads the clock itself.
const EXPIRE_READS_EVERY: u32 = 64;

impl<'a> Requester<'a> {
    /// A requester of `size`-byte requests (at least 8: the sequence number), `outstanding`
    /// in flight.
    pub fn new(board: &'a Scoreboard, size: usize, outstanding: u32) -> Self {
        Self {
            board,
            outstanding: outstanding.max(1) as usize,
            msg: vec![0x5a; size.max(8)],
            in_flight: VecDeque::new(),
            sent: 0,
            replies: 0,
            timeouts: 0,
            send_failed: 0,
            done: false,
            now: Instant::now(),
            expire_calls: 0,
        }
    }

    /// The next request to send now, stamped with its sequence number and timed from this
    /// call; `None` while the requests in flight fill the window, before `go`, and once the
    /// board says send no more. Send it at once.
    pub fn request(&mut self) -> Option<&[u8]> {
        self.expire();
        if self.done || self.in_flight.len() >= self.outstanding {
            return None;
        }
        // The window is ours to keep (requests in flight): only the board's stop and limit.
        let mut unused = 0;
        match self.board.permit(self.sent, &mut unused) {
            Permit::Go => {}
            Permit::Wait => return None,
            Permit::Done => {
                self.done = true;
                return None;
            }
        }
        self.msg[..8].copy_from_slice(&self.sent.to_le_bytes());
        self.now = Instant::now();
        self.in_flight.push_back((self.sent, self.now));
        self.sent += 1;
        self.board.set_sent(self.sent);
        Some(&self.msg)
    }

    /// The request [`Requester::request`] gave last could not be sent: it will have no
    /// reply, and is counted lost here.
    pub fn send_failed(&mut self) {
        if self.in_flight.pop_back().is_some() {
            self.send_failed += 1;
        }
    }

    /// Drives the requester of a separate process over its transport until it has finished
    /// or the board says quit: every request the window allows is sent, then one reply is
    /// waited for. `send` says whether the request left (a failure is counted, not fatal);
    /// `recv` returns a datagram's length, or `None` after its own poll period. An error from
    /// either ends the run.
    pub fn run<E>(
        &mut self,
        mut send: impl FnMut(&[u8]) -> Result<bool, E>,
        mut recv: impl FnMut(&mut [u8]) -> Result<Option<usize>, E>,
    ) -> Result<(), E> {
        let mut reply = vec![0u8; 65_536];
        while !self.board.quitting() {
            while let Some(req) = self.request() {
                if !send(req)? {
                    self.send_failed();
                }
            }
            if self.finished() {
                break;
            }
            if let Some(len) = recv(&mut reply)? {
                self.reply(&reply[..len]);
            }
        }
        Ok(())
    }

    /// A datagram arrived: if it is the reply to a request in flight (its first 8 bytes),
    /// the transaction is timed and counted.
    pub fn reply(&mut self, bytes: &[u8]) {
        let Some(seq) = bytes
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        else {
            return;
        };
        let Some(pos) = self.in_flight.iter().position(|(s, _)| *s == seq) else {
            return; // a reply to a request given up on, or not a reply at all
        };
        if let Some((_, at)) = self.in_flight.remove(pos) {
            self.now = Instant::now();
            self.board
                .record_sample(self.now.duration_since(at).as_nanos() as u64);
            self.replies += 1;
            self.board.set_received(self.replies);
        }
    }

    /// Gives up on requests that have waited longer than [`REPLY_TIMEOUT`].
    fn expire(&mut self) {
        self.expire_calls = self.expire_calls.wrapping_add(1);
        if self.expire_calls % EXPIRE_READS_EVERY == 0 {
            self.now = Instant::now();
        }
        let now = self.now;
        while self
            .in_flight
            .front()
            .is_some_and(|(_, t)| now.duration_since(*t) > REPLY_TIMEOUT)
        {
            self.in_flight.pop_front();
            self.timeouts += 1;
        }
    }

    /// Whether it will send nothing more and expects no more replies.
    pub fn finished(&mut self) -> bool {
        self.expire();
        self.done && self.in_flight.is_empty()
    }

    /// Says on the board that it has finished: its final count of requests, then that no
    /// more will come.
    pub fn finish(&self) {
        self.board.set_sent(self.sent);
        self.board.set_sender_finished();
    }

    /// Its counts and its losses, for the party's report.
    pub fn report(&self) -> Value {
        json!({
            "sent": self.sent,
            "replies": self.replies,
            "lost": {
                "requester: no reply within 5 s": self.timeouts + self.in_flight.len() as u64,
                "requester: send failed": self.send_failed,
            },
        })
    }
}
