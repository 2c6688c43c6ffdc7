//! `shmnet top`: a live view of a running server in the terminal (ratatui), refreshed
//! every second from the counters `shmnet stats` reads: rates through the driver, the
//! rings' and pools' fill, drops by reason, each application's traffic and CPU. `q`, Esc
//! or Ctrl-C quits. Plain terminal escape codes only, so it works over ssh and in tmux.

use anyhow::{Context, Result};
use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Gauge, Paragraph, Row, Table};
use shmnet_io::server::ServerStats;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `shmnet top`'s arguments.
#[derive(Args)]
pub struct TopArgs {
    /// The server's control socket (default: the one `shmnet serve` uses by default).
    #[arg(long, default_value_os_t = shmnet_io::control::default_socket())]
    socket: PathBuf,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
}

/// One reading of the server, and when it was taken.
struct Sample {
    at: Instant,
    stats: ServerStats,
    /// CPU seconds (user + system) by pid: the server's and each application's.
    cpu: Vec<(i32, f64)>,
}

/// The server's pid, from the control socket's peer credentials.
fn server_pid(socket: &std::path::Path) -> Option<i32> {
    let (_fd, cred) = shmnet_io::control::connect_checked(socket).ok()?;
    Some(cred.pid as i32)
}

/// CPU seconds a process has used, from /proc (`None` if it is gone or out of sight).
fn cpu_seconds(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis: utime and stime are the 12th and
    // 13th of them (fields 14 and 15 of the line).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz.max(1.0))
}

fn sample(socket: &std::path::Path, server: Option<i32>) -> Result<Sample> {
    let stats = shmnet_io::server::query_stats(socket).with_context(|| {
        format!(
            "asking the server at {} (is it running? --socket names another)",
            socket.display()
        )
    })?;
    let cpu = server
        .into_iter()
        .chain(stats.apps.iter().map(|a| a.pid))
        .filter_map(|pid| Some((pid, cpu_seconds(pid)?)))
        .collect();
    Ok(Sample {
        at: Instant::now(),
        stats,
        cpu,
    })
}

/// Runs the view until `q`.
pub fn run(a: TopArgs) -> Result<()> {
    let interval = Duration::from_secs_f64(a.interval.clamp(0.1, 60.0));
    let server = server_pid(&a.socket);
    // Fail before the screen is taken over if there is no server to watch.
    let mut now = sample(&a.socket, server)?;
    let mut terminal = ratatui::init();
    let result = (|| -> Result<()> {
        let mut prev: Option<Sample> = None;
        loop {
            terminal.draw(|f| draw(f, &a.socket, server, prev.as_ref(), &now))?;
            let deadline = Instant::now() + interval;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                if event::poll(left)? {
                    if let Event::Key(k) = event::read()? {
                        let ctrl_c = k.code == KeyCode::Char('c')
                            && k.modifiers.contains(KeyModifiers::CONTROL);
                        if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                            return Ok(());
                        }
                    }
                }
            }
            match sample(&a.socket, server) {
                Ok(s) => prev = Some(std::mem::replace(&mut now, s)),
                Err(e) => return Err(e.context("the server stopped answering")),
            }
        }
    })();
    ratatui::restore();
    result
}

/// Per-second rate of a counter between two samples.
fn rate(prev: Option<&Sample>, now: &Sample, f: impl Fn(&ServerStats) -> u64) -> f64 {
    let Some(p) = prev else {
        return 0.0;
    };
    let secs = (now.at - p.at).as_secs_f64().max(1e-3);
    f(&now.stats).saturating_sub(f(&p.stats)) as f64 / secs
}

/// A rate in SI units.
fn si(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.2} G", x / 1e9),
        x if x >= 1e6 => format!("{:.2} M", x / 1e6),
        x if x >= 1e3 => format!("{:.1} k", x / 1e3),
        x => format!("{x:.0} "),
    }
}

fn cpu_percent(prev: Option<&Sample>, now: &Sample, pid: i32) -> Option<f64> {
    let p = prev?;
    let find = |s: &Sample| s.cpu.iter().find(|(q, _)| *q == pid).map(|(_, c)| *c);
    let secs = (now.at - p.at).as_secs_f64().max(1e-3);
    Some((find(now)? - find(p)?).max(0.0) / secs * 100.0)
}

fn draw(
    f: &mut ratatui::Frame<'_>,
    socket: &std::path::Path,
    server: Option<i32>,
    prev: Option<&Sample>,
    now: &Sample,
) {
    let st = &now.stats;
    let w = st.data_window.as_ref();
    let n_rings = w.map_or(0, |w| w.rings.len());
    let n_pools = w.map_or(0, |w| w.pools.pools.len());
    let [head, driver, fill, drops, apps] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(5),
        Constraint::Length((n_rings.max(n_pools) as u16).max(1) + 2),
        Constraint::Length(8),
        Constraint::Min(4),
    ])
    .areas(f.area());

    let server_cpu = server
        .and_then(|pid| cpu_percent(prev, now, pid))
        .map_or_else(|| "?".into(), |c| format!("{c:.0} %"));
    let busy = {
        let rounds = rate(prev, now, |s| s.data_plane.rounds);
        let busy = rate(prev, now, |s| s.data_plane.busy_rounds);
        if rounds > 0.0 {
            busy / rounds * 100.0
        } else {
            0.0
        }
    };
    f.render_widget(
        Paragraph::new(vec![
            Line::styled(
                format!(
                    "shmnet top — {} structure at {}, up {:.0} s, driver {} ({}), {} applications   q: quit",
                    st.structure,
                    socket.display(),
                    st.uptime_s,
                    st.driver_placement,
                    if st.driver_running { "running" } else { "stopped" },
                    st.apps_total
                ),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Line::from(format!(
                "server CPU {server_cpu}, data plane busy in {busy:.0} % of its rounds, {:.0} sleeps/s, TCP connections {}",
                rate(prev, now, |s| s.data_plane.sleeps),
                st.tcp_memory.connections
            )),
        ]),
        head,
    );

    let d = |g: fn(&shmnet_io::driver::DriverStats) -> u64| {
        rate(prev, now, move |s| g(&s.driver.driver))
    };
    let drops_per_s = rate(prev, now, |s| {
        let d = &s.driver.driver;
        d.rx_no_buffer
            + d.rx_device_drops
            + d.rx_oversize
            + s.driver.in_queue_full
            + s.out_queue_full
    });
    f.render_widget(
        Paragraph::new(vec![
            Line::from(format!(
                "rx {}frames/s  {}bit/s",
                si(d(|x| x.rx_frames)),
                si(d(|x| x.rx_bytes) * 8.0)
            )),
            Line::from(format!(
                "tx {}frames/s  {}bit/s   ({}errors/s)",
                si(d(|x| x.tx_frames)),
                si(d(|x| x.tx_bytes) * 8.0),
                si(d(|x| x.tx_errors))
            )),
            Line::from(format!(
                "dropped before the stack: {}frames/s (no buffer, device, oversize, IN/OUT full)",
                si(drops_per_s)
            )),
        ])
        .block(Block::default().borders(Borders::ALL).title(" driver ")),
        driver,
    );

    let [rings_area, pools_area] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(fill);
    let rings_block = Block::default().borders(Borders::ALL).title(" rings ");
    let pools_block = Block::default()
        .borders(Borders::ALL)
        .title(" pools (in use) ");
    let inner_r = rings_block.inner(rings_area);
    let inner_p = pools_block.inner(pools_area);
    f.render_widget(rings_block, rings_area);
    f.render_widget(pools_block, pools_area);
    if let Some(w) = w {
        for (i, (r, name)) in w.rings.iter().zip(["in ipv4", "in arp", "out"]).enumerate() {
            let occ = r.occupancy.unwrap_or(0);
            let ratio = f64::from(occ) / f64::from(r.capacity.max(1));
            let area = row_of(inner_r, i);
            f.render_widget(
                Gauge::default()
                    .ratio(ratio.clamp(0.0, 1.0))
                    .label(format!("{name}: {occ}/{}", r.capacity)),
                area,
            );
        }
        for (i, p) in w.pools.pools.iter().enumerate() {
            let used = p.buffers.saturating_sub(p.free.unwrap_or(0));
            let ratio = f64::from(used) / f64::from(p.buffers.max(1));
            f.render_widget(
                Gauge::default()
                    .ratio(ratio.clamp(0.0, 1.0))
                    .label(format!("pool {i}: {used}/{}", p.buffers)),
                row_of(inner_p, i),
            );
        }
    }

    // Drops by reason: the busiest first (by rate, then by count).
    let mut reasons: Vec<(String, u64, f64)> = st
        .drops()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| {
            let before = prev
                .and_then(|p| p.stats.drops().into_iter().find(|(m, _)| *m == name))
                .map_or(n, |(_, v)| v);
            let secs = prev.map_or(1.0, |p| (now.at - p.at).as_secs_f64().max(1e-3));
            (name, n, n.saturating_sub(before) as f64 / secs)
        })
        .collect();
    reasons.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.cmp(&a.1)));
    let rows: Vec<Row> = reasons
        .iter()
        .take(6)
        .map(|(name, n, r)| Row::new(vec![name.clone(), n.to_string(), format!("{}/s", si(*r))]))
        .collect();
    f.render_widget(
        Table::new(
            rows,
            [
                Constraint::Length(28),
                Constraint::Length(14),
                Constraint::Length(12),
            ],
        )
        .header(
            Row::new(vec!["reason", "frames", "rate"])
                .style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" drops by reason "),
        ),
        drops,
    );

    let app_rate = |id: u64, g: fn(&shmnet_io::server::AppCounters) -> u64| -> f64 {
        let Some(p) = prev else { return 0.0 };
        let find = |s: &ServerStats| s.apps.iter().find(|a| a.id == id).map(|a| g(&a.counters));
        let secs = (now.at - p.at).as_secs_f64().max(1e-3);
        match (find(&now.stats), find(&p.stats)) {
            (Some(n), Some(b)) => n.saturating_sub(b) as f64 / secs,
            _ => 0.0,
        }
    };
    let rows: Vec<Row> = st
        .apps
        .iter()
        .map(|a| {
            Row::new(vec![
                a.pid.to_string(),
                a.uid.to_string(),
                a.transport.clone(),
                a.sockets.to_string(),
                format!("{}/s", si(app_rate(a.id, |c| c.delivered))),
                format!("{}/s", si(app_rate(a.id, |c| c.sent))),
                format!("{}/s", si(app_rate(a.id, |c| c.wakeups))),
                a.counters.tcp_parked.to_string(),
                cpu_percent(prev, now, a.pid).map_or_else(|| "?".into(), |c| format!("{c:.0} %")),
            ])
        })
        .collect();
    f.render_widget(
        Table::new(
            rows,
            [
                Constraint::Length(8),
                Constraint::Length(6),
                Constraint::Length(10),
                Constraint::Length(8),
                Constraint::Length(12),
                Constraint::Length(12),
                Constraint::Length(12),
                Constraint::Length(7),
                Constraint::Length(6),
            ],
        )
        .header(
            Row::new(vec![
                "pid",
                "uid",
                "isolation",
                "sockets",
                "delivered",
                "sent",
                "wake-ups",
                "parked",
                "CPU",
            ])
            .style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" applications "),
        ),
        apps,
    );
}

/// Row `i` (one line) of `area`, clipped to it.
fn row_of(area: ratatui::layout::Rect, i: usize) -> ratatui::layout::Rect {
    let y = area.y.saturating_add(i as u16);
    let height = u16::from(y < area.y + area.height);
    ratatui::layout::Rect { y, height, ..area }
}
