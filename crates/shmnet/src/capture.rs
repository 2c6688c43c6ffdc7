//! `shmnet capture`: what crosses a running server, written as pcapng (`-w FILE`, `-w -`
//! for a pipe into `tshark -r -`) or one line per frame, with tcpdump's habits.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use shmnet_io::capture::{CaptureSpec, Filter, Naps, Next, Point, RecordHeader, Session};
use std::borrow::Cow;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where frames are captured (`--point`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PointArg {
    /// Frames the server took from its driver.
    Rx,
    /// Frames the server handed to its driver.
    Tx,
    /// Frames the stack refused, each with the counter that says why (a pcapng comment).
    Drop,
}

/// `shmnet capture`'s arguments.
#[derive(Args)]
pub struct CaptureArgs {
    /// The server's control socket (default: the one `shmnet serve` uses by default).
    #[arg(long, default_value_os_t = shmnet_io::control::default_socket())]
    socket: PathBuf,
    /// Write the frames to this pcapng file (`-`: standard output, e.g. into
    /// `tshark -r -`) instead of printing a line for each.
    #[arg(short = 'w', value_name = "FILE")]
    write: Option<PathBuf>,
    /// Stop after this many frames.
    #[arg(short = 'c', value_name = "COUNT")]
    count: Option<u64>,
    /// Bytes kept of each frame (0: all of it, up to 65,535).
    #[arg(short = 's', value_name = "SNAPLEN", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=65_535))]
    snaplen: u32,
    /// Where to capture, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [PointArg::Rx, PointArg::Tx])]
    point: Vec<PointArg>,
    /// MiB of the ring the server fills (what the reader cannot keep up with beyond it is
    /// counted as lost, never held back).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    ring_mib: u64,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// The per-frame lines (without -w) and the final summary (with -w FILE) as JSON.
    #[arg(long)]
    json: bool,
    /// A filter, as tcpdump takes it: a subset of pcap-filter(7) — ip ip6 arp tcp udp icmp
    /// icmp6, [src|dst] host ADDR, [src|dst] port N, less N, greater N, and or not, ().
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = false,
        value_name = "FILTER"
    )]
    filter: Vec<String>,
}

/// What a capture kept and lost.
#[derive(serde::Serialize)]
struct Summary {
    captured: u64,
    lost: u64,
    seconds: f64,
    stopped: &'static str,
}

/// Where frames go.
enum Sink {
    Pcap(PcapNgWriter<Box<dyn Write>>),
    Lines(Box<dyn Write>),
}

/// The pcapng interface of each capture point: 0 rx, 1 tx, 2 drop.
fn interface_of(p: Point) -> u32 {
    match p {
        Point::Rx | Point::Skip => 0,
        Point::Tx => 1,
        Point::Drop => 2,
    }
}

/// Runs a capture until its count, its duration, Ctrl-C, or the server's end.
pub fn run(a: CaptureArgs) -> Result<()> {
    let filter = if a.filter.is_empty() {
        None
    } else {
        Some(Filter::parse(&a.filter).context("the capture filter")?)
    };
    if a.point.is_empty() {
        bail!("--point needs at least one of rx, tx, drop");
    }
    let spec = CaptureSpec {
        rx: a.point.contains(&PointArg::Rx),
        tx: a.point.contains(&PointArg::Tx),
        drops: a.point.contains(&PointArg::Drop),
        snaplen: a.snaplen,
        filter,
        ring_bytes: a.ring_mib.saturating_mul(1 << 20),
    };
    let mut session = match Session::start(&a.socket, &spec) {
        Ok(s) => s,
        Err(e @ shmnet_io::capture::StartError::Refused(_)) => return Err(e.into()),
        Err(e) => {
            return Err(anyhow::Error::from(e).context(format!(
                "starting a capture on the server at {} (is `shmnet serve --structure server` running there? --socket names another)",
                a.socket.display()
            )));
        }
    };
    let to_stdout = a.write.as_deref() == Some(std::path::Path::new("-"));
    let mut sink = match &a.write {
        None => Sink::Lines(Box::new(std::io::BufWriter::new(std::io::stdout()))),
        Some(p) => {
            let out: Box<dyn Write> = if to_stdout {
                Box::new(std::io::BufWriter::new(std::io::stdout()))
            } else {
                Box::new(std::io::BufWriter::new(
                    std::fs::File::create(p)
                        .with_context(|| format!("creating {}", p.display()))?,
                ))
            };
            let mut w = PcapNgWriter::new(out).context("writing the pcapng header")?;
            let snaplen = if a.snaplen == 0 { 65_535 } else { a.snaplen };
            for name in ["shmnet-rx", "shmnet-tx", "shmnet-drop"] {
                w.write_pcapng_block(InterfaceDescriptionBlock {
                    linktype: DataLink::ETHERNET,
                    snaplen,
                    options: vec![
                        InterfaceDescriptionOption::IfName(Cow::Borrowed(name)),
                        // Timestamps in nanoseconds.
                        InterfaceDescriptionOption::IfTsResol(9),
                    ],
                })
                .context("writing the pcapng interfaces")?;
            }
            Sink::Pcap(w)
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    ctrlc::set_handler(move || s2.store(true, Ordering::Relaxed))
        .context("installing the SIGINT/SIGTERM handler")?;
    if !to_stdout {
        eprintln!(
            "capturing on {} ({}){}; Ctrl-C to stop",
            a.socket.display(),
            a.point
                .iter()
                .map(|p| format!("{p:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join(","),
            if a.filter.is_empty() {
                String::new()
            } else {
                format!(", filter `{}`", a.filter.join(" "))
            }
        );
    }
    let start = Instant::now();
    let limit = a.duration.map(Duration::from_secs_f64);
    let mut captured = 0u64;
    let mut last_look = Instant::now();
    let mut naps = Naps::default();
    let stopped = loop {
        if a.count.is_some_and(|c| captured >= c) {
            break "count reached";
        }
        if stop.load(Ordering::Relaxed) {
            break "stopped by a signal";
        }
        if limit.is_some_and(|l| start.elapsed() >= l) {
            break "--duration reached";
        }
        match session.ring.read() {
            Next::Frame(h, data) => {
                naps.frame();
                captured += 1;
                write_frame(&mut sink, &session, h, &data, a.json)?;
            }
            Next::Stopped => break "the server ended the capture",
            Next::Empty => {
                flush(&mut sink)?;
                if last_look.elapsed() >= Duration::from_millis(100) {
                    if session.server_gone() {
                        // Whatever it wrote before it went is still in the ring.
                        while let Next::Frame(h, data) = session.ring.read() {
                            captured += 1;
                            write_frame(&mut sink, &session, h, &data, a.json)?;
                        }
                        break "the server went away";
                    }
                    last_look = Instant::now();
                }
                naps.wait(&session.ring);
            }
        }
    };
    flush(&mut sink)?;
    let summary = Summary {
        captured,
        lost: session.ring.lost(),
        seconds: start.elapsed().as_secs_f64(),
        stopped,
    };
    if a.json && a.write.is_some() && !to_stdout {
        println!("{}", serde_json::to_string(&summary)?);
    }
    eprintln!(
        "{} frames captured, {} lost{} in {:.1} s ({})",
        summary.captured,
        summary.lost,
        if summary.lost > 0 {
            " (the ring was full: a larger --ring-mib, a filter, or a faster disk)"
        } else {
            ""
        },
        summary.seconds,
        summary.stopped
    );
    Ok(())
}

fn flush(sink: &mut Sink) -> Result<()> {
    match sink {
        Sink::Pcap(w) => w.get_mut().flush(),
        Sink::Lines(w) => w.flush(),
    }
    .context("writing the capture")
}

fn write_frame(
    sink: &mut Sink,
    session: &Session,
    h: RecordHeader,
    data: &[u8],
    json: bool,
) -> Result<()> {
    let reason = (h.point == Point::Drop).then(|| session.reason(h.reason));
    match sink {
        Sink::Pcap(w) => {
            let mut options = vec![EnhancedPacketOption::Flags(match h.point {
                Point::Tx => 0b10, // outbound
                _ => 0b01,         // inbound
            })];
            if let Some(r) = reason {
                options.push(EnhancedPacketOption::Comment(Cow::Owned(format!(
                    "dropped: {r}"
                ))));
            }
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: interface_of(h.point),
                timestamp: Duration::from_nanos(h.ts_ns),
                original_len: h.orig_len,
                data: Cow::Borrowed(data),
                options,
            })
            .context("writing the capture")?;
        }
        Sink::Lines(w) => {
            let what = describe(data);
            let point = match h.point {
                Point::Rx => "rx",
                Point::Tx => "tx",
                _ => "drop",
            };
            if json {
                writeln!(
                    w,
                    "{}",
                    serde_json::json!({"ts_ns": h.ts_ns, "point": point, "len": h.orig_len,
                        "caplen": h.caplen, "summary": what, "reason": reason})
                )?;
            } else {
                let secs = h.ts_ns / 1_000_000_000;
                let (hh, mm, ss) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
                let us = (h.ts_ns / 1_000) % 1_000_000;
                write!(
                    w,
                    "{hh:02}:{mm:02}:{ss:02}.{us:06} {point:<4} {what}, length {}",
                    h.orig_len
                )?;
                match reason {
                    Some(r) => writeln!(w, " (dropped: {r})")?,
                    None => writeln!(w)?,
                }
            }
        }
    }
    Ok(())
}

/// A frame in a few words, as tcpdump's one-line summary: addresses, ports, protocol.
fn describe(frame: &[u8]) -> String {
    use etherparse::{SlicedPacket, TransportSlice};
    let Ok(p) = SlicedPacket::from_ethernet(frame) else {
        return "malformed".into();
    };
    let (src, dst) = match &p.net {
        Some(etherparse::NetSlice::Ipv4(ip)) => (
            ip.header().source_addr().to_string(),
            ip.header().destination_addr().to_string(),
        ),
        Some(etherparse::NetSlice::Ipv6(ip)) => (
            ip.header().source_addr().to_string(),
            ip.header().destination_addr().to_string(),
        ),
        _ => {
            return match &p.link {
                Some(etherparse::LinkSlice::Ethernet2(e))
                    if e.ether_type() == etherparse::EtherType::ARP =>
                {
                    format!("ARP, length {}", frame.len())
                }
                _ => format!("not IP, length {}", frame.len()),
            };
        }
    };
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            let mut flags = String::new();
            for (on, c) in [
                (t.syn(), 'S'),
                (t.fin(), 'F'),
                (t.rst(), 'R'),
                (t.psh(), 'P'),
                (t.ack(), '.'),
            ] {
                if on {
                    flags.push(c);
                }
            }
            format!(
                "IP {src}.{} > {dst}.{}: Flags [{flags}], seq {}, ack {}, win {}, length {}",
                t.source_port(),
                t.destination_port(),
                t.sequence_number(),
                t.acknowledgment_number(),
                t.window_size(),
                t.payload().len()
            )
        }
        Some(TransportSlice::Udp(u)) => format!(
            "IP {src}.{} > {dst}.{}: UDP, length {}",
            u.source_port(),
            u.destination_port(),
            u.payload().len()
        ),
        Some(TransportSlice::Icmpv4(i)) => {
            format!("IP {src} > {dst}: ICMP, length {}", i.payload().len() + 8)
        }
        Some(TransportSlice::Icmpv6(i)) => {
            format!("IP6 {src} > {dst}: ICMP6, length {}", i.payload().len() + 8)
        }
        Some(TransportSlice::Igmp(_)) => format!("IP {src} > {dst}: IGMP"),
        None => format!("IP {src} > {dst}, length {}", frame.len()),
    }
}
