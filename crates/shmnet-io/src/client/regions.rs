//! The client's side of `--isolation regions` (docs/isolation.md): the memory an application
//! owns and the server reads and writes only through handles.
//!
//! At connect the library creates two regions of its own and registers them:
//!
//! - a **send region**, readable by the server: [`SendArena`] carves each datagram's
//!   extent (8-byte destination, then the payload) out of it in order; the extent is the
//!   server's until its completion comes back on `RX` (`Sent`, `Refused`, `Failed`: free it;
//!   `Miss`: post it again, the miss thread is bringing the line in);
//! - a **receive region**, writable by the server: [`SMALL_BUFFERS`] buffers of
//!   [`SMALL_POST`] bytes and [`LARGE_BUFFERS`] of [`LARGE_POST`], all posted at once on
//!   the two post rings; each delivery names one, which is read and posted again.
//!
//! What the server writes is checked like any peer's: a delivery must name a buffer of the
//! receive region at a buffer boundary, with a length that fits it.

use crate::windows::{self, LARGE_POST, RECV_HEADER, SEND_HEADER, SMALL_POST};
use shmnet_chan::handles::{Region, RegionId};
use shmnet_chan::{Desc, Producer};
use std::collections::VecDeque;
use std::net::SocketAddrV4;

/// Small receive buffers posted at connect (as many as a post ring holds).
pub(super) const SMALL_BUFFERS: u32 = windows::APP_RING;
/// Large receive buffers posted at connect: enough for a window of large datagrams.
pub(super) const LARGE_BUFFERS: u32 = 32;
/// Receive buffers in all: no more deliveries can be waiting to be read.
pub(super) const POSTED_BUFFERS: usize = (SMALL_BUFFERS + LARGE_BUFFERS) as usize;
/// Bytes of the send region: room for 32 of the largest datagrams, or thousands of small.
pub(super) const SEND_REGION: u64 = 2 << 20;
/// One more than the extents in flight at most (sends posted and not completed): `RX` has
/// room for the completion of every send in flight. The server takes a send only when `RX`
/// has room for its completion, so with more in flight than that (it was `REQ` and `RX`
/// together, 576), an application that sent a burst and then stopped calling the library
/// left its last sends unsent: `RX` full of completions it did not read, the rest waiting in
/// `REQ` (the server also holds up to 32 sends that missed, beside `REQ`'s 256).
const MAX_IN_FLIGHT: usize = windows::APP_RING as usize + 1;
/// Extents are aligned to cache lines, so two datagrams never share one.
const ALIGN: u64 = 64;

/// The in-order allocator over the send region. Extents are carved at `head`, freed in any
/// order, and their space reused once every older extent is freed too (completions come
/// back nearly in order, so this costs one comparison per completion).
#[derive(Debug)]
pub(super) struct SendArena {
    size: u64,
    /// Where the next extent starts (bytes since the start, not wrapped).
    head: u64,
    /// Where the oldest extent still in flight starts (not wrapped).
    tail: u64,
    /// Extents in flight, oldest first.
    live: VecDeque<Extent>,
}

/// One extent of the send region.
#[derive(Clone, Copy, Debug)]
struct Extent {
    /// Where it starts (bytes since the start, not wrapped).
    start: u64,
    /// Bytes it occupies (its length rounded up to [`ALIGN`], or a skipped tail end).
    span: u32,
    /// Bytes of the send it holds (0 for a skipped tail end).
    len: u32,
    /// Completed (or never a send): its space is free once every older one is.
    done: bool,
}

impl SendArena {
    /// An empty arena over `size` bytes.
    pub(super) fn new(size: u64) -> Self {
        Self {
            size,
            head: 0,
            tail: 0,
            live: VecDeque::with_capacity(MAX_IN_FLIGHT),
        }
    }

    /// Carves `len` contiguous bytes; returns their offset in the region, or `None` if the
    /// region (or the count of extents in flight) is full now.
    pub(super) fn alloc(&mut self, len: u32) -> Option<u64> {
        let (need, skip) = self.place(len)?;
        if skip > 0 {
            // A completed filler extent, so `tail` passes over the skipped bytes in order.
            self.live.push_back(Extent {
                start: self.head,
                span: skip as u32,
                len: 0,
                done: true,
            });
            self.head += skip;
        }
        self.live.push_back(Extent {
            start: self.head,
            span: need as u32,
            len,
            done: false,
        });
        let off = self.head % self.size;
        self.head += need;
        Some(off)
    }

    /// Whether `len` bytes could be carved now.
    pub(super) fn fits(&self, len: u32) -> bool {
        self.place(len).is_some()
    }

    /// Where `len` bytes would go: (the bytes they occupy, the tail end skipped first), or
    /// `None` if the region (or the count of extents in flight) is full now.
    fn place(&self, len: u32) -> Option<(u64, u64)> {
        let need = u64::from(len).div_ceil(ALIGN) * ALIGN;
        if need > self.size || self.live.len() >= MAX_IN_FLIGHT - 1 {
            return None;
        }
        let at = self.head % self.size;
        // An extent never wraps: skip the region's tail end if it would.
        let skip = if at + need > self.size {
            self.size - at
        } else {
            0
        };
        (self.head + skip + need - self.tail <= self.size).then_some((need, skip))
    }

    /// The length asked for the extent at `off`, if one is in flight there.
    pub(super) fn len_of(&self, off: u64) -> Option<u32> {
        self.find(off).map(|i| self.live[i].len)
    }

    fn find(&self, off: u64) -> Option<usize> {
        // Completions come nearly in order: look from the oldest.
        self.live
            .iter()
            .position(|e| !e.done && e.start % self.size == off)
    }

    /// Frees the extent at `off`; `false` if none is in flight there (a completion the
    /// server made up, or a second one).
    pub(super) fn free(&mut self, off: u64) -> bool {
        let Some(i) = self.find(off) else {
            return false;
        };
        self.live[i].done = true;
        while let Some(e) = self.live.front().filter(|e| e.done) {
            self.tail = e.start + u64::from(e.span);
            self.live.pop_front();
        }
        if self.live.is_empty() {
            // Nothing in flight: start over at the region's beginning.
            self.head = 0;
            self.tail = 0;
        }
        true
    }

    /// Extents in flight.
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        self.live.iter().filter(|e| !e.done).count()
    }
}

/// The application's own memory and the rings that name it: see the [module docs](self).
pub(super) struct Own {
    pub(super) send: Region,
    pub(super) send_id: RegionId,
    pub(super) arena: SendArena,
    pub(super) recv: Region,
    pub(super) recv_id: RegionId,
    /// `POST_SMALL`, `POST_LARGE`.
    pub(super) posts: [Producer; 2],
    /// Sends that missed and wait for room on `REQ` to be posted again.
    pub(super) resend: VecDeque<Desc>,
    /// Sends the server refused or could not make (completed `Refused` or `Failed`).
    pub(super) failed_sends: u64,
    /// Deliveries that named no buffer of ours, ignored.
    pub(super) bad_deliveries: u64,
    /// Which receive buffers are posted (bit [`slot_of`]): a delivery must name one, and
    /// claims it until it is posted again, so a server that names one buffer twice cannot
    /// have it lent twice.
    pub(super) posted: [u64; POSTED_BUFFERS.div_ceil(64)],
    /// Small buffers read and to be posted again: they go on `POST_SMALL` in bursts of
    /// [`REPOST_BATCH`] — one publication of the ring's head per burst, not per datagram —
    /// and whenever the application looks and finds nothing or is about to sleep
    /// ([`Own::flush_reposts`]). Not yet posted, so not in `posted`. Large buffers (32 in
    /// all) go back one by one. Capacity [`REPOST_BATCH`], reserved at connect.
    pub(super) reposts: Vec<Desc>,
}

/// Small buffers posted again per burst: an eighth of them.
pub(super) const REPOST_BATCH: usize = (SMALL_BUFFERS / 8) as usize;

/// The bit of [`Own::posted`] for the buffer at `off` (a buffer boundary).
fn slot_of(off: u64) -> usize {
    let small_end = u64::from(SMALL_BUFFERS) * u64::from(SMALL_POST);
    if off < small_end {
        (off / u64::from(SMALL_POST)) as usize
    } else {
        SMALL_BUFFERS as usize + ((off - small_end) / u64::from(LARGE_POST)) as usize
    }
}

/// Where delivery `d` lies if it names a buffer of receive region `recv_id` at a buffer
/// boundary with a length that fits: (its post ring, offset, capacity, length).
pub(super) fn span_of(recv_id: RegionId, d: &Desc) -> Option<(usize, u64, u32, usize)> {
    let (region, off) = windows::posted_handle(d);
    let (ring, cap) = (region == recv_id.0).then(|| buffer_at(off)).flatten()?;
    ((d.len as usize) + RECV_HEADER <= cap as usize).then_some((ring, off, cap, d.len as usize))
}

/// Bytes of the receive region: the small buffers, then the large ones.
pub(super) fn recv_region_bytes() -> u64 {
    u64::from(SMALL_BUFFERS) * u64::from(SMALL_POST)
        + u64::from(LARGE_BUFFERS) * u64::from(LARGE_POST)
}

/// The posted buffer a delivery at `off` names: (its class ring, its capacity), if `off` is
/// a buffer boundary of the receive region.
pub(super) fn buffer_at(off: u64) -> Option<(usize, u32)> {
    let small_end = u64::from(SMALL_BUFFERS) * u64::from(SMALL_POST);
    if off < small_end {
        (off % u64::from(SMALL_POST) == 0).then_some((windows::POST_SMALL, SMALL_POST))
    } else {
        let k = off - small_end;
        (k % u64::from(LARGE_POST) == 0 && k / u64::from(LARGE_POST) < u64::from(LARGE_BUFFERS))
            .then_some((windows::POST_LARGE, LARGE_POST))
    }
}

/// Every receive buffer's post descriptor, small ones first.
pub(super) fn all_posts(recv_id: RegionId) -> impl Iterator<Item = (usize, Desc)> {
    let small_end = u64::from(SMALL_BUFFERS) * u64::from(SMALL_POST);
    let small = (0..u64::from(SMALL_BUFFERS)).map(|k| (k * u64::from(SMALL_POST), SMALL_POST));
    let large = (0..u64::from(LARGE_BUFFERS))
        .map(move |k| (small_end + k * u64::from(LARGE_POST), LARGE_POST));
    small.chain(large).filter_map(move |(off, cap)| {
        let ring = if cap == SMALL_POST {
            windows::POST_SMALL
        } else {
            windows::POST_LARGE
        };
        windows::post_desc(recv_id.0, off, cap).map(|d| (ring, d))
    })
}

impl Own {
    /// Posts the buffer a delivery named again (the ring has room: it held every buffer of
    /// its class once, and this one came back).
    pub(super) fn repost(&mut self, ring: usize, off: u64, cap: u32) {
        let Some(d) = windows::post_desc(self.recv_id.0, off, cap) else {
            return;
        };
        if ring == windows::POST_LARGE {
            self.post(1, &[d]);
            return;
        }
        self.reposts.push(d);
        if self.reposts.len() >= REPOST_BATCH {
            self.flush_reposts();
        }
    }

    /// Posts the small buffers waiting in `reposts`.
    pub(super) fn flush_reposts(&mut self) {
        if !self.reposts.is_empty() {
            let batch = std::mem::take(&mut self.reposts);
            self.post(0, &batch);
            self.reposts = batch;
            self.reposts.clear();
        }
    }

    /// Puts `descs` on post ring `k` (0 small, 1 large) and marks what went as posted. The
    /// ring has room: it held every buffer of its class once, and these came back; only a
    /// server that stopped taking posts fills it, and what finds it full stays ours,
    /// unposted, counted.
    fn post(&mut self, k: usize, descs: &[Desc]) {
        let placed = self.posts[k].enqueue_burst(descs);
        for d in &descs[..placed] {
            self.mark_posted(windows::posted_handle(d).1);
        }
        self.bad_deliveries += (descs.len() - placed) as u64;
    }

    /// Records that the buffer at `off` is posted.
    pub(super) fn mark_posted(&mut self, off: u64) {
        let s = slot_of(off);
        self.posted[s / 64] |= 1 << (s % 64);
    }

    /// Checks delivery `d` against the receive region and the buffers posted, and claims
    /// its buffer (it is no longer posted): (ring, offset, capacity, length). What fails is
    /// counted in `bad_deliveries`.
    pub(super) fn check_delivery(&mut self, d: &Desc) -> Option<(usize, u64, u32, usize)> {
        let claimed = span_of(self.recv_id, d).filter(|&(_, off, _, _)| {
            let s = slot_of(off);
            let bit = 1u64 << (s % 64);
            let was = self.posted[s / 64] & bit != 0;
            self.posted[s / 64] &= !bit;
            was
        });
        if claimed.is_none() {
            self.bad_deliveries += 1;
        }
        claimed
    }

    /// Reads a delivery's source from its buffer at `off`.
    pub(super) fn source_at(&self, off: u64) -> SocketAddrV4 {
        let mut h = [0u8; RECV_HEADER];
        // In bounds: `check_delivery` placed `off` on a buffer of the region.
        let _ = self.recv.read(off, &mut h);
        windows::decode_dst(&h)
    }

    /// Carves an extent for a datagram of `len` bytes and writes `to` and `data` into it;
    /// returns its `REQ` descriptor for socket `socket`, or `None` if the send region is full.
    pub(super) fn stage(&mut self, data: &[u8], to: SocketAddrV4, socket: u16) -> Option<Desc> {
        let len = (SEND_HEADER + data.len()) as u32;
        let off = self.arena.alloc(len)?;
        // In bounds: the arena carved `len` bytes inside the region.
        let _ = self.send.write(off, &windows::encode_dst(to));
        let _ = self.send.write(off + SEND_HEADER as u64, data);
        windows::handle_desc(self.send_id.0, off, len, socket)
    }

    /// Handles completion `c` if it is one of a send from the send region: frees its extent,
    /// or queues it to be posted again on a miss. `false`: not ours (a `send_from` of the
    /// application's own region).
    pub(super) fn complete(&mut self, c: &Desc) -> bool {
        let (region, off) = windows::handle_of(c);
        if region != self.send_id.0 {
            return false;
        }
        match windows::done_status(c) {
            Some(windows::SendStatus::Miss) => {
                let queued = self
                    .resend
                    .iter()
                    .any(|d| d.buf == c.buf && d.flags == c.flags);
                match self.arena.len_of(off).filter(|_| !queued) {
                    Some(len) => {
                        // The original descriptor: the completion keeps all but its length,
                        // which the arena recorded.
                        self.resend.push_back(Desc { len, ..*c });
                    }
                    None => self.bad_deliveries += 1,
                }
            }
            Some(windows::SendStatus::Sent) => {
                if !self.arena.free(off) {
                    self.bad_deliveries += 1;
                }
            }
            _ => {
                self.failed_sends += 1;
                if !self.arena.free(off) {
                    self.bad_deliveries += 1;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arena_reuses_space_once_older_extents_are_freed() {
        let mut a = SendArena::new(1024);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(500).unwrap();
        assert_eq!((x, y), (0, 128));
        // 128 + 512 = 640 used: 400 more do not fit before the end, nor wrap over x.
        assert_eq!(a.alloc(400), None);
        assert!(a.free(y));
        assert_eq!(a.alloc(400), None, "y is free but x, older, is not");
        assert!(a.free(x));
        // Everything free: start over.
        assert_eq!(a.alloc(400), Some(0));
        assert!(!a.free(128), "nothing in flight there");
        assert_eq!(a.len_of(0), Some(400), "the length asked, not the span");
    }

    #[test]
    fn the_arena_skips_the_tail_rather_than_wrap_an_extent() {
        let mut a = SendArena::new(1024);
        let x = a.alloc(512).unwrap();
        let y = a.alloc(256).unwrap();
        assert!(a.free(x));
        // 256 left at the end, 512 free at the front: a 300-byte extent goes to the front.
        let z = a.alloc(300).unwrap();
        assert_eq!(z, 0);
        assert_eq!(a.in_flight(), 2);
        assert!(a.free(y) && a.free(z));
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn deliveries_must_name_a_buffer_boundary() {
        assert_eq!(buffer_at(0), Some((windows::POST_SMALL, SMALL_POST)));
        assert_eq!(
            buffer_at(u64::from(SMALL_POST)),
            Some((windows::POST_SMALL, SMALL_POST))
        );
        assert_eq!(buffer_at(1), None);
        let small_end = u64::from(SMALL_BUFFERS) * u64::from(SMALL_POST);
        assert_eq!(
            buffer_at(small_end),
            Some((windows::POST_LARGE, LARGE_POST))
        );
        assert_eq!(buffer_at(small_end + 64), None);
        assert_eq!(buffer_at(recv_region_bytes()), None);
        assert_eq!(
            all_posts(RegionId(3)).count() as u32,
            SMALL_BUFFERS + LARGE_BUFFERS
        );
    }
}
