//! The seed's Fig. 2 and Fig. 3 analogs: TCP stream throughput by message size and TCP
//! request/response rate by request and response size, with the frames' buffers kept
//! coherent by each of the seed's methods ([`BufferModes`] on shmnet's stack), normalised to
//! CH on both sides as the seed normalises.
//!
//! Two of shmnet's stacks in this process, one connection between them over a simulated
//! wire. The wire is the device: it copies each frame from one side's pool into a buffer of
//! the other's (the DMA), untimed, as the seed's device worked beside the CPU. Timed: the
//! CPU's part on both sides — the sender's copy into its frames and their maintenance, the
//! receiver's maintenance, protocol processing and copy out — so a row is what a CPU pays
//! per byte or per transaction under a method, which is what the seed's throughput on a
//! CPU-bound Unity measured.
//!
//! TCP checksums are off on both sides (offloaded, as a NIC or Linux's lo does), so the
//! rows differ only by the method; with them on, the stack's checksum over each frame
//! after the copy would read back every byte NC kept out of the cache.
//!
//! This is a benchmark: it asserts nothing about speed; it checks every byte arrived.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant as WallClock;

use shmnet_chan::coherence::{
    BufferModes, CacheGeometry, CpuOps, Mode, copy_nt_slice, copy_streaming_evict,
};
use shmnet_stack::buf::valid;
use shmnet_stack::tcp::TcpHandle;
use shmnet_stack::{BufIdx, BufferPool, Config, EthernetAddress, HeapPool, Instant, Interface};

/// Message sizes of the stream (Fig. 2 analog).
pub const STREAM_SIZES: [usize; 6] = [64, 256, 1024, 4096, 16_384, 65_536];
/// (request, response) sizes of the request/response runs (Fig. 3 analog).
pub const RR_SIZES: [(usize, usize); 5] = [(1, 1), (64, 64), (64, 1024), (1024, 64), (64, 8192)];

/// The method pairs run, as send/receive: the seed's CH on both sides (its whole-cache
/// clean: the baseline every row is divided by, as the seed normalises), the seed's proposal
/// (NC on send, its CH on receive), x86's per-line CH on both sides, NC on send with per-line
/// CH on receive, NC on both, and the hardware's coherence (nothing done by hand).
pub fn configurations() -> [(&'static str, BufferModes); 6] {
    let m = |send, recv| BufferModes {
        send: Some(send),
        recv: Some(recv),
    };
    [
        ("ch-all/ch-all", m(Mode::ChAll, Mode::ChAll)),
        ("nc/ch-all", m(Mode::Nc, Mode::ChAll)),
        ("ch/ch", m(Mode::Ch, Mode::Ch)),
        ("nc/ch", m(Mode::Nc, Mode::Ch)),
        ("nc/nc", m(Mode::Nc, Mode::Nc)),
        ("none", BufferModes::default()),
    ]
}

/// The configuration every row is divided by.
pub const BASELINE: &str = "ch-all/ch-all";

/// One stream row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StreamRow {
    /// `send/recv` methods (`none`: the hardware's coherence).
    pub buffers: String,
    /// Bytes per write.
    pub message: usize,
    /// Payload Gbit/s per CPU second (median of the repetitions).
    pub gbit_per_s: f64,
    /// `gbit_per_s` ÷ the [`BASELINE`] row's at the same size.
    pub vs_ch_all: f64,
    /// Every byte arrived, in order, in every repetition.
    pub verified: bool,
}

/// One request/response row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RrRow {
    /// `send/recv` methods.
    pub buffers: String,
    /// Request bytes.
    pub request: usize,
    /// Response bytes.
    pub response: usize,
    /// Transactions per CPU second (median of the repetitions).
    pub per_s: f64,
    /// `per_s` ÷ the [`BASELINE`] row's at the same sizes.
    pub vs_ch_all: f64,
    /// Every byte arrived, in every repetition.
    pub verified: bool,
}

/// Both figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TcpFigures {
    /// Fig. 2 analog.
    pub stream: Vec<StreamRow>,
    /// Fig. 3 analog.
    pub rr: Vec<RrRow>,
    /// Bytes each stream repetition moves.
    pub stream_bytes: usize,
    /// Transactions per request/response repetition.
    pub transactions: usize,
    /// Repetitions per row.
    pub repetitions: usize,
}

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

struct Side {
    ifc: Interface,
    pool: HeapPool,
    out: Vec<BufIdx>,
}

/// One connection between two stacks; `now` advances a microsecond per step.
struct Pair {
    a: Side,
    b: Side,
    ha: TcpHandle,
    hb: TcpHandle,
    now: Instant,
    /// Nanoseconds the CPU's part took so far.
    cpu_ns: u128,
    /// The device's bounce buffer (a frame).
    scratch: Vec<u8>,
}

fn side(mac: u8, ip: Ipv4Addr, modes: BufferModes, geometry: CacheGeometry) -> Side {
    let mut c = Config::new(EthernetAddress([2, 0, 0, 0, 0, mac]), ip, 24);
    c.tcp.nodelay = true;
    // Offloaded, as a NIC (or Linux's lo) does: the figures isolate the methods. Checked in
    // software, a checksum computed over the frame after the copy reads back every byte NC
    // just kept out of the cache (shmnet's stack sums the frame, not the copy's source).
    c.tcp.tx_checksum = false;
    c.tcp.rx_checksum = false;
    c.buffers = modes;
    c.cache = geometry;
    Side {
        ifc: Interface::new(c),
        pool: HeapPool::with_count(1024),
        out: Vec::new(),
    }
}

/// The device: `from`'s frames into buffers of `to`'s pool (dropped when it has none; TCP
/// sends them again). A device reads and writes memory, not the CPU's caches: the frame is
/// read with streaming loads and its lines evicted (a DMA read leaves no line behind), and
/// written into the other pool with non-temporal stores (a DMA write lands in memory).
/// Without that, the CPU's copy standing in for the device would leave the sender's frames
/// in the cache for its next non-temporal stores to evict, a cost no device imposes.
fn wire(from: &mut Side, to: &mut HeapPool, scratch: &mut [u8]) -> Vec<BufIdx> {
    let ops = CpuOps::cached();
    let mut got = Vec::with_capacity(from.out.len());
    for f in from.out.drain(..) {
        let bytes = valid(&from.pool, f);
        let n = bytes.len();
        if n <= scratch.len() && n <= to.capacity() {
            copy_streaming_evict(ops, &mut scratch[..n], bytes);
            if let Some(b) = to.alloc() {
                copy_nt_slice(ops, &mut to.data_mut(b)[..n], &scratch[..n]);
                to.set_off(b, 0);
                to.set_len(b, n as u16);
                got.push(b);
            }
        }
        from.pool.free(f);
    }
    got
}

impl Pair {
    fn new(modes: BufferModes, geometry: CacheGeometry) -> Option<Pair> {
        let mut a = side(1, A_IP, modes, geometry);
        let mut b = side(2, B_IP, modes, geometry);
        let now = Instant::from_secs(1);
        a.ifc
            .add_neighbor(B_IP, EthernetAddress([2, 0, 0, 0, 0, 2]), now);
        b.ifc
            .add_neighbor(A_IP, EthernetAddress([2, 0, 0, 0, 0, 1]), now);
        let l = b.ifc.tcp_listen(5001, 4).ok()?;
        let ha = a
            .ifc
            .tcp_connect(&mut a.pool, SocketAddrV4::new(B_IP, 5001), now, &mut a.out)
            .ok()?;
        let mut p = Pair {
            a,
            b,
            ha,
            hb: TcpHandle::default(),
            now,
            cpu_ns: 0,
            scratch: vec![0u8; 65_536],
        };
        for _ in 0..8 {
            p.step(1_000);
        }
        p.hb = p.b.ifc.tcp_accept(l).ok()??;
        Some(p)
    }

    /// Carry each side's frames to the other (untimed) and let each process them (timed).
    fn step(&mut self, advance_ns: u64) {
        self.now = Instant::from_nanos(self.now.nanos() + advance_ns);
        let to_b = wire(&mut self.a, &mut self.b.pool, &mut self.scratch);
        let to_a = wire(&mut self.b, &mut self.a.pool, &mut self.scratch);
        let t0 = WallClock::now();
        for (s, frames) in [(&mut self.b, to_b), (&mut self.a, to_a)] {
            for f in frames {
                s.ifc.receive(&mut s.pool, f, self.now, &mut s.out);
            }
            s.ifc.poll(&mut s.pool, self.now, &mut s.out);
        }
        self.cpu_ns += t0.elapsed().as_nanos();
    }

    /// Move `data` from `from_a` ? A : B to the other side in writes of `message` bytes,
    /// received into `sink` (at least as long); returns whether every byte arrived in order
    /// (compared after the timed part).
    fn transfer(&mut self, from_a: bool, data: &[u8], message: usize, sink: &mut [u8]) -> bool {
        let (mut sent, mut got) = (0usize, 0usize);
        let ok = sink.len() >= data.len();
        let mut idle = 0;
        while got < data.len() && idle < 10_000 {
            let progress_before = (sent, got);
            let t0 = WallClock::now();
            {
                let (s, h) = if from_a {
                    (&mut self.a, self.ha)
                } else {
                    (&mut self.b, self.hb)
                };
                while sent < data.len() {
                    let end = (sent + message).min(data.len());
                    match s
                        .ifc
                        .tcp_send(&mut s.pool, h, &data[sent..end], self.now, &mut s.out)
                    {
                        Ok(n) if n > 0 => sent += n,
                        _ => break,
                    }
                }
            }
            {
                let (r, h) = if from_a {
                    (&mut self.b, self.hb)
                } else {
                    (&mut self.a, self.ha)
                };
                // Into the sink where the bytes belong; they are compared after the timing.
                let room = sink.len().min(data.len());
                while got < room {
                    match r
                        .ifc
                        .tcp_recv(&mut r.pool, h, &mut sink[got..room], self.now, &mut r.out)
                    {
                        Ok(n) if n > 0 => got += n,
                        _ => break,
                    }
                }
            }
            self.cpu_ns += t0.elapsed().as_nanos();
            if got < data.len() {
                // Nothing moving: a timer must fire (a retransmission, a window probe), so
                // time jumps a millisecond a step instead of a microsecond.
                self.step(if idle > 8 { 1_000_000 } else { 1_000 });
            }
            idle = if (sent, got) == progress_before {
                idle + 1
            } else {
                0
            };
        }
        ok && got == data.len() && sink[..got] == data[..got]
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pattern(n: usize, salt: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + salt * 7 + 1) as u8).collect()
}

/// One row's figure: on a fresh pair with `modes`, `one` (a repetition, which says whether
/// every byte arrived and its rate from the pair's CPU time) runs once to warm the connection
/// up (its congestion window, the buffers' first touch), then `repetitions` times timed.
/// Returns the median rate — NaN unless every byte of every run arrived — and that verdict.
fn rate(
    modes: BufferModes,
    geometry: CacheGeometry,
    repetitions: usize,
    mut one: impl FnMut(&mut Pair) -> (bool, f64),
) -> (f64, bool) {
    let Some(mut p) = Pair::new(modes, geometry) else {
        return (f64::NAN, false);
    };
    let mut verified = one(&mut p).0;
    let mut rates = Vec::with_capacity(repetitions);
    for _ in 0..repetitions {
        p.cpu_ns = 0;
        let (ok, r) = one(&mut p);
        verified &= ok;
        rates.push(r);
    }
    (if verified { median(rates) } else { f64::NAN }, verified)
}

/// Runs both figures; `progress` gets a line per row.
pub fn run(quick: bool, geometry: CacheGeometry, progress: &mut dyn FnMut(&str)) -> TcpFigures {
    let repetitions = if quick { 3 } else { 7 };
    let stream_bytes = if quick { 1 << 20 } else { 8 << 20 };
    let transactions = if quick { 500 } else { 5_000 };
    let mut stream = Vec::new();
    for &message in &STREAM_SIZES {
        let data = pattern(stream_bytes, message);
        let mut sink = vec![0u8; stream_bytes];
        let mut base = f64::NAN;
        for (name, modes) in configurations() {
            let (gbit, verified) = rate(modes, geometry, repetitions, |p| {
                let ok = p.transfer(true, &data, message, &mut sink);
                (ok, stream_bytes as f64 * 8.0 / p.cpu_ns.max(1) as f64)
            });
            if name == BASELINE {
                base = gbit;
            }
            progress(&format!(
                "buffers tcp stream {message:>6} B {name:<13}: {gbit:.2} Gbit/s per CPU second"
            ));
            stream.push(StreamRow {
                buffers: name.to_owned(),
                message,
                gbit_per_s: gbit,
                vs_ch_all: gbit / base,
                verified,
            });
        }
    }
    let mut rr = Vec::new();
    for &(request, response) in &RR_SIZES {
        let (req, resp) = (pattern(request, 1), pattern(response, 2));
        let mut sink = vec![0u8; 65_536];
        let mut base = f64::NAN;
        for (name, modes) in configurations() {
            let (per_s, verified) = rate(modes, geometry, repetitions, |p| {
                let mut ok = true;
                for _ in 0..transactions {
                    ok &= p.transfer(true, &req, request, &mut sink);
                    ok &= p.transfer(false, &resp, response, &mut sink);
                    if !ok {
                        break;
                    }
                }
                (ok, transactions as f64 * 1e9 / p.cpu_ns.max(1) as f64)
            });
            if name == BASELINE {
                base = per_s;
            }
            progress(&format!(
                "buffers tcp rr {request}/{response} B {name:<13}: {per_s:.0} transactions per CPU second"
            ));
            rr.push(RrRow {
                buffers: name.to_owned(),
                request,
                response,
                per_s,
                vs_ch_all: per_s / base,
                verified,
            });
        }
    }
    TcpFigures {
        stream,
        rr,
        stream_bytes,
        transactions,
        repetitions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every method pair moves a stream and request/response exchanges whole through the
    /// stacks (the figures' rows are `verified`).
    #[test]
    fn every_configuration_moves_the_bytes_whole() {
        for (name, modes) in configurations() {
            let mut p = Pair::new(modes, CacheGeometry::default()).expect("connects");
            let data = pattern(300_000, 3);
            let mut sink = vec![0u8; 300_000];
            assert!(p.transfer(true, &data, 1024, &mut sink), "{name} stream");
            let (req, resp) = (pattern(64, 1), pattern(8192, 2));
            for _ in 0..20 {
                assert!(p.transfer(true, &req, 64, &mut sink), "{name} request");
                assert!(p.transfer(false, &resp, 8192, &mut sink), "{name} response");
            }
            assert!(p.cpu_ns > 0);
        }
    }
}
