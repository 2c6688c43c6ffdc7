//! The TCP receive benchmark behind `shmnet bench tcp [--quick] [--json]`: the stack's
//! receive of a 64 KiB window of full-sized segments on an established connection, from the
//! frames in pool buffers to the bytes in the application's buffer, beside a `memcpy` of
//! the same 64 KiB measured in the same run. The target: at most 1.5× the memcpy.
//!
//! This is a benchmark, not a test: it asserts nothing about speed.
//!
//! # What is timed
//!
//! A sending interface (ours, over a simulated wire) fills the window: its frames are
//! built and copied into the receiver's pool buffers *before* the timed region (the
//! driver's DMA, as in `shmnet bench stack`). Timed: [`Interface::receive`] of every frame
//! (Ethernet, IPv4 and TCP checks, the TCP checksum when on, demultiplexing, sequence
//! processing, queueing the buffers on the connection — no copy) and [`Interface::tcp_recv`]
//! of the whole window into one user buffer (the one copy, buffer by buffer, and the frees).
//! The receiver's ACKs go back to the sender after the timed region. The memcpy row copies
//! 64 KiB from a contiguous source written just before into the same user buffer.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant as WallClock;

use crate::bench::median;
use crate::buf::{BufIdx, BufferPool, HeapPool, valid};
use crate::iface::{Config, Interface};
use crate::tcp::TcpHandle;
use crate::{EthernetAddress, Instant};

/// Bytes received per timed batch: a 64 KiB window.
pub const WINDOW: usize = 64 * 1024;

/// One configuration's figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TcpBenchRow {
    /// TCP checksums verified on receive.
    pub checksum: bool,
    /// Segments per window.
    pub segments: usize,
    /// Median nanoseconds to receive and read one window.
    pub ns_per_window: f64,
    /// Of which in `receive` (everything but the copy-out).
    pub stack_ns: f64,
    /// Of which in `tcp_recv` (the copy-out and the frees).
    pub copy_ns: f64,
    /// Median nanoseconds per memcpy of the window's bytes, same run.
    pub memcpy_ns: f64,
    /// `ns_per_window / memcpy_ns`.
    pub ratio: f64,
    /// Payload Gbit/s at `ns_per_window`.
    pub gbit_per_s: f64,
    /// Windows every byte of which arrived in order and intact (all of them, or the figures
    /// are NaN).
    pub verified: usize,
    /// Windows measured.
    pub windows: usize,
}

/// The report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TcpBenchReport {
    /// One row per checksum setting.
    pub rows: Vec<TcpBenchRow>,
    /// What the timed region covers.
    pub timed_region: &'static str,
}

const REGION: &str = "receive() of a 64 KiB window of 1460-byte segments (checks, TCP processing, queueing the buffers) + tcp_recv() of the 64 KiB (the copy-out, the frees); the driver's copy into pool buffers and the ACKs' return excluded";

const A_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const B_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

struct Bench {
    tx: Interface,
    rx: Interface,
    tx_pool: HeapPool,
    rx_pool: HeapPool,
    tx_h: TcpHandle,
    rx_h: TcpHandle,
    now: Instant,
}

fn side(mac: EthernetAddress, ip: Ipv4Addr, checksum: bool) -> Interface {
    let mut c = Config::new(mac, ip, 24);
    c.tcp.rx_checksum = checksum;
    c.tcp.nodelay = true;
    Interface::new(c)
}

/// Copy frames from one pool into buffers of the other (the wire and the driver).
fn carry(from: &mut HeapPool, frames: &mut Vec<BufIdx>, to: &mut HeapPool) -> Vec<BufIdx> {
    let mut out = Vec::with_capacity(frames.len());
    for f in frames.drain(..) {
        let bytes = valid(from, f);
        if let Some(b) = to.alloc_with(0, bytes) {
            out.push(b);
        }
        from.free(f);
    }
    out
}

impl Bench {
    fn new(checksum: bool) -> Option<Bench> {
        let mut b = Bench {
            tx: side(A_MAC, A_IP, checksum),
            rx: side(B_MAC, B_IP, checksum),
            tx_pool: HeapPool::with_count(512),
            rx_pool: HeapPool::with_count(512),
            tx_h: TcpHandle::default(),
            rx_h: TcpHandle::default(),
            now: Instant::from_secs(1),
        };
        b.tx.add_neighbor(B_IP, B_MAC, b.now);
        b.rx.add_neighbor(A_IP, A_MAC, b.now);
        let l = b.rx.tcp_listen(5001, 4).ok()?;
        let mut out = Vec::new();
        b.tx_h =
            b.tx.tcp_connect(
                &mut b.tx_pool,
                SocketAddrV4::new(B_IP, 5001),
                b.now,
                &mut out,
            )
            .ok()?;
        for _ in 0..4 {
            b.exchange(&mut out);
        }
        b.rx_h = b.rx.tcp_accept(l).ok()??;
        Some(b)
    }

    /// Carry `out` (the sender's frames) to the receiver and its answers back, once.
    fn exchange(&mut self, out: &mut Vec<BufIdx>) {
        let frames = carry(&mut self.tx_pool, out, &mut self.rx_pool);
        let mut back = Vec::new();
        for f in frames {
            self.rx.receive(&mut self.rx_pool, f, self.now, &mut back);
        }
        self.rx.flush(&mut self.rx_pool, self.now, &mut back);
        for f in carry(&mut self.rx_pool, &mut back, &mut self.tx_pool) {
            self.tx.receive(&mut self.tx_pool, f, self.now, out);
        }
        self.tx.flush(&mut self.tx_pool, self.now, out);
    }

    /// One window: returns (receive ns, copy ns, the bytes were right). The window goes in
    /// one round once the sender's congestion window has grown past it (after the first
    /// few, which the caller leaves out); until then the rounds add up.
    fn window(&mut self, data: &[u8], user: &mut [u8]) -> Option<(f64, f64, bool)> {
        let mut out = Vec::new();
        let mut sent = 0;
        while sent < data.len() {
            sent += self
                .tx
                .tcp_send(
                    &mut self.tx_pool,
                    self.tx_h,
                    &data[sent..],
                    self.now,
                    &mut out,
                )
                .ok()?;
        }
        let (mut rx_ns, mut cp_ns) = (0.0, 0.0);
        let mut got = 0;
        let mut acks = Vec::new();
        for _ in 0..64 {
            if got == data.len() {
                break;
            }
            let frames = carry(&mut self.tx_pool, &mut out, &mut self.rx_pool);
            let t0 = WallClock::now();
            for &f in &frames {
                self.rx
                    .receive(&mut self.rx_pool, black_box(f), self.now, &mut acks);
            }
            let t1 = WallClock::now();
            while got < data.len() {
                match self.rx.tcp_recv(
                    &mut self.rx_pool,
                    self.rx_h,
                    &mut user[got..],
                    self.now,
                    &mut acks,
                ) {
                    Ok(n) if n > 0 => got += n,
                    _ => break,
                }
            }
            let t2 = WallClock::now();
            rx_ns += (t1 - t0).as_nanos() as f64;
            cp_ns += (t2 - t1).as_nanos() as f64;
            // The ACKs open the sender's window again; it sends what is left.
            self.now = Instant::from_nanos(self.now.nanos() + 1_000);
            self.rx.flush(&mut self.rx_pool, self.now, &mut acks);
            for f in carry(&mut self.rx_pool, &mut acks, &mut self.tx_pool) {
                self.tx.receive(&mut self.tx_pool, f, self.now, &mut out);
            }
            self.tx.flush(&mut self.tx_pool, self.now, &mut out);
        }
        // Whatever is left (pure ACKs of the receiver's delayed-ACK timer) goes back too.
        self.now = Instant::from_nanos(self.now.nanos() + 100_000_000);
        self.rx.poll(&mut self.rx_pool, self.now, &mut acks);
        for f in carry(&mut self.rx_pool, &mut acks, &mut self.tx_pool) {
            self.tx.receive(&mut self.tx_pool, f, self.now, &mut out);
        }
        for f in out.drain(..) {
            self.tx_pool.free(f);
        }
        let ok = got == data.len() && user[..got] == *data;
        Some((rx_ns, cp_ns, ok))
    }
}

impl std::fmt::Display for TcpBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "TCP receive of a 64 KiB window ({} segments), median per window; timed: {}",
            self.rows.first().map_or(0, |r| r.segments),
            self.timed_region
        )?;
        writeln!(
            f,
            "checksum    ns/window   receive   copy-out   Gbit/s   memcpy ns   ÷memcpy"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<8} {:>12.0} {:>9.0} {:>10.0} {:>8.1} {:>11.0} {:>9.2}",
                if r.checksum { "on" } else { "off" },
                r.ns_per_window,
                r.stack_ns,
                r.copy_ns,
                r.gbit_per_s,
                r.memcpy_ns,
                r.ratio
            )?;
        }
        for r in &self.rows {
            writeln!(
                f,
                "target (checksum {}): receive ÷ memcpy = {:.2} (need ≤ 1.5) {}",
                if r.checksum { "on" } else { "off" },
                r.ratio,
                if r.ratio <= 1.5 { "met" } else { "NOT MET" }
            )?;
        }
        Ok(())
    }
}

fn memcpy_window(user: &mut [u8], windows: usize) -> f64 {
    let mut src = vec![0u8; WINDOW];
    let mut per = Vec::with_capacity(windows);
    for i in 0..windows {
        src.fill(i as u8);
        let t0 = WallClock::now();
        user[..WINDOW].copy_from_slice(black_box(&src));
        black_box(&user);
        per.push(t0.elapsed().as_nanos() as f64);
    }
    median(per)
}

/// Run the benchmark; `progress` gets a line per row.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> TcpBenchReport {
    let windows = if quick { 101 } else { 2001 };
    let mut user = vec![0u8; WINDOW];
    let mut rows = Vec::new();
    for checksum in [false, true] {
        let memcpy_ns = memcpy_window(&mut user, windows);
        let data: Vec<u8> = (0..WINDOW).map(|i| (i * 31 + 7) as u8).collect();
        let (mut rx_ns, mut cp_ns, mut total) = (Vec::new(), Vec::new(), Vec::new());
        let mut verified = 0;
        if let Some(mut b) = Bench::new(checksum) {
            // The first windows grow the sender's congestion window; they are not counted.
            const WARM_UP: usize = 8;
            for i in 0..windows + WARM_UP {
                let Some((r, c, ok)) = b.window(&data, &mut user) else {
                    break;
                };
                verified += usize::from(ok && i >= WARM_UP);
                if i >= WARM_UP {
                    rx_ns.push(r);
                    cp_ns.push(c);
                    total.push(r + c);
                }
            }
        }
        let all = verified == windows;
        let nan_unless = |x: f64| if all { x } else { f64::NAN };
        let ns = nan_unless(median(total));
        let row = TcpBenchRow {
            checksum,
            segments: WINDOW.div_ceil(1460),
            ns_per_window: ns,
            stack_ns: nan_unless(median(rx_ns)),
            copy_ns: nan_unless(median(cp_ns)),
            memcpy_ns,
            ratio: ns / memcpy_ns,
            gbit_per_s: WINDOW as f64 * 8.0 / ns,
            verified,
            windows,
        };
        progress(&format!(
            "tcp rx checksum={checksum}: {:.0} ns per 64 KiB window = receive {:.0} + copy-out {:.0} ({:.1} Gbit/s); memcpy {:.0} ns; x{:.2}",
            row.ns_per_window, row.stack_ns, row.copy_ns, row.gbit_per_s, row.memcpy_ns, row.ratio
        ));
        rows.push(row);
    }
    TcpBenchReport {
        rows,
        timed_region: REGION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_window_arrives_whole() {
        let r = run(true, &mut |_| {});
        for row in &r.rows {
            assert_eq!(row.verified, row.windows, "{row:?}");
            assert!(row.ns_per_window.is_finite(), "{row:?}");
        }
    }
}
