//! `shmnet sockets`: a running server's sockets, as `ss -tunap` lists the kernel's.

use anyhow::{Context, Result};
use clap::Args;
use shmnet_io::server::listing::{Proto, SocketEntry, SocketOwner, SocketState};
use std::fmt::Write as _;
use std::path::PathBuf;

/// `shmnet sockets`'s arguments.
#[derive(Args)]
pub struct SocketsArgs {
    /// The server's control socket (default: the one `shmnet serve` uses by default).
    #[arg(long, default_value_os_t = shmnet_io::control::default_socket())]
    socket: PathBuf,
    /// TCP sockets only.
    #[arg(short, long)]
    tcp: bool,
    /// UDP sockets only.
    #[arg(short, long)]
    udp: bool,
    /// Listeners only (and UDP sockets, which `ss -l` lists too).
    #[arg(short, long)]
    listening: bool,
    /// Each connection's TCP internals below it, as `ss -i`: window scales, RTO, RTT,
    /// MSS, congestion window, slow-start threshold, bytes in flight and out of order,
    /// retransmitted segments.
    #[arg(short, long)]
    info: bool,
    /// Print the listing as JSON: `{"sockets": [...]}`, every field of every socket.
    #[arg(long)]
    json: bool,
}

/// Lists the sockets of the server at `--socket`.
pub fn run(a: SocketsArgs) -> Result<()> {
    let all = shmnet_io::server::query_sockets(&a.socket)
        .with_context(|| format!("asking the server at {} for its sockets (is `shmnet serve --structure server` running there? --socket names another)", a.socket.display()))?;
    let shown: Vec<&SocketEntry> = all.iter().filter(|e| wanted(&a, e)).collect();
    if a.json {
        println!("{}", serde_json::json!({ "sockets": shown }));
        return Ok(());
    }
    print!("{}", table(&shown, a.info, &command_of));
    Ok(())
}

/// Whether `--tcp`, `--udp` and `--listening` keep `e`.
fn wanted(a: &SocketsArgs, e: &SocketEntry) -> bool {
    let proto_ok = match (a.tcp, a.udp) {
        (true, false) => e.proto == Proto::Tcp,
        (false, true) => e.proto == Proto::Udp,
        _ => true,
    };
    let listening = matches!(e.state, SocketState::Listen | SocketState::Unconn);
    proto_ok && (!a.listening || listening)
}

/// A process's command name, as `ss -p` shows it (`None` if it is gone or out of sight).
fn command_of(pid: i32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_owned())
}

/// The listing as `ss` prints it: a header and a row per socket, with columns as wide as
/// their widest cell; with `info`, a line of TCP internals under each connection.
fn table(rows: &[&SocketEntry], info: bool, command: &dyn Fn(i32) -> Option<String>) -> String {
    let header = [
        "Netid",
        "State",
        "Recv-Q",
        "Send-Q",
        "Local Address:Port",
        "Peer Address:Port",
        "Process",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|e| {
            [
                match e.proto {
                    Proto::Tcp => "tcp",
                    Proto::Udp => "udp",
                }
                .to_owned(),
                e.state.ss_name().to_owned(),
                e.recv_q.to_string(),
                e.send_q.to_string(),
                e.local.to_string(),
                e.remote.map_or_else(|| "*:*".to_owned(), |r| r.to_string()),
                users(&e.owners, e.more_owners, command),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, row: &[&str]| {
        let mut s = String::new();
        for (i, (c, w)) in row.iter().zip(width).enumerate() {
            if i + 1 == row.len() {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<w$} ");
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut out, &header);
    for (row, e) in cells.iter().zip(rows) {
        line(&mut out, &row.each_ref().map(String::as_str));
        if let (true, Some(t)) = (info, &e.tcp) {
            out.push_str(&internals(t));
            out.push('\n');
        }
    }
    out
}

/// `ss -i`'s line of TCP internals, in its units: times in milliseconds, the congestion
/// window and slow-start threshold in segments (no threshold while it is unset), the
/// rest in bytes.
fn internals(t: &shmnet_stack::tcp::TcpInfo) -> String {
    let ms = |us: u32| format!("{}", f64::from(us) / 1e3);
    let segs = |b: u32| b / u32::from(t.mss.max(1));
    let mut s = format!(
        "\t wscale:{},{} rto:{}",
        t.snd_wscale,
        t.rcv_wscale,
        ms(t.rto_us)
    );
    // No round trip measured yet: ss shows none either.
    if t.srtt_us > 0 {
        let _ = write!(s, " rtt:{}", ms(t.srtt_us));
    }
    let _ = write!(s, " mss:{} cwnd:{}", t.mss, segs(t.cwnd));
    if t.ssthresh != u32::MAX {
        let _ = write!(s, " ssthresh:{}", segs(t.ssthresh));
    }
    let _ = write!(
        s,
        " snd_wnd:{} unacked:{} ooo:{} retrans:{}",
        t.snd_wnd, t.in_flight, t.ooo_bytes, t.retransmits
    );
    if t.sack {
        s.push_str(" sack");
    }
    if t.timestamps {
        s.push_str(" ts");
    }
    s
}

/// `ss -p`'s process column: `users:(("nc",pid=12,sock=3),…)`; empty for a socket no
/// application holds.
fn users(owners: &[SocketOwner], more: u32, command: &dyn Fn(i32) -> Option<String>) -> String {
    if owners.is_empty() {
        return String::new();
    }
    let mut each: Vec<String> = owners
        .iter()
        .map(|o| {
            let name = command(o.pid).unwrap_or_else(|| "?".to_owned());
            format!("(\"{name}\",pid={},uid={},sock={})", o.pid, o.uid, o.socket)
        })
        .collect();
    if more > 0 {
        each.push(format!("+{more} more"));
    }
    format!("users:({})", each.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmnet_stack::tcp::{ListenerInfo, State};

    fn listener() -> SocketEntry {
        SocketEntry {
            proto: Proto::Tcp,
            state: SocketState::Listen,
            local: "10.0.0.1:80".parse().unwrap(),
            remote: None,
            recv_q: 2,
            send_q: 128,
            owners: vec![SocketOwner {
                pid: 7,
                uid: 0,
                socket: 3,
            }],
            more_owners: 0,
            tcp: None,
            listener: Some(ListenerInfo {
                port: 80,
                backlog: 128,
                half_open: 0,
                ready: 2,
            }),
            udp_overflows: None,
        }
    }

    #[test]
    fn the_table_reads_like_ss() {
        let mut orphan = listener();
        orphan.state = SocketState::Tcp(State::TimeWait);
        orphan.remote = Some("10.0.0.2:40000".parse().unwrap());
        orphan.owners.clear();
        let (l, o) = (listener(), orphan);
        let t = table(&[&l, &o], false, &|pid| (pid == 7).then(|| "nginx".into()));
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("Netid State"), "{t}");
        assert!(
            lines[1].contains("LISTEN") && lines[1].contains("*:*"),
            "{t}"
        );
        assert!(
            lines[1].ends_with("users:((\"nginx\",pid=7,uid=0,sock=3))"),
            "{t}"
        );
        assert!(
            lines[2].contains("TIME-WAIT") && lines[2].ends_with("10.0.0.2:40000"),
            "{t}"
        );
        // Columns line up: every row's Local Address starts where the header's does.
        let col = lines[0].find("Local Address").unwrap();
        assert_eq!(lines[1].find("10.0.0.1:80"), Some(col), "{t}");
        assert_eq!(lines[2].find("10.0.0.1:80"), Some(col), "{t}");
    }

    #[test]
    fn filters_keep_what_ss_would() {
        let args = |tcp, udp, listening| SocketsArgs {
            socket: PathBuf::new(),
            tcp,
            udp,
            listening,
            info: false,
            json: false,
        };
        let l = listener();
        let mut c = listener();
        c.state = SocketState::Tcp(State::Established);
        let mut u = listener();
        u.proto = Proto::Udp;
        u.state = SocketState::Unconn;
        assert!(wanted(&args(true, false, true), &l));
        assert!(!wanted(&args(true, false, true), &c));
        assert!(!wanted(&args(true, false, false), &u));
        assert!(wanted(&args(false, true, false), &u));
        assert!(wanted(&args(false, false, false), &c));
        assert!(wanted(&args(true, true, false), &c), "-t -u: both");
    }
}
