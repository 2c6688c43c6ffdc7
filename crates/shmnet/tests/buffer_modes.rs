//! `--buffers` (seed 003's cache maintenance of frames) on a running server: with NC on
//! send and CH on receive in the `server` structure, and the seed's whole-cache clean and
//! software clean in the `inline` one, files cross to and from Linux's `nc` over a veth pair
//! with every byte intact, and the final report counts the frames each side maintained. A
//! mode the CLI does not know is refused in one line that says what to give.
//!
//! Needs root and network namespaces: skips loudly without them, fails under `CI=true`.

use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "common/netns.rs"]
mod netns;
#[path = "common/served.rs"]
mod served;
use netns::Netns;
use served::{Server, nc_send, random_file, root, send_file, wait_ok};

fn netns(tag: &str) -> Option<Netns> {
    let ns = Netns::new("shmnet-buf", tag)?;
    netns::ip(&["-n", &ns.0, "addr", "add", "10.93.0.2/24", "dev", "v1"]).then_some(ns)
}

fn u(v: &serde_json::Value, path: &[&str]) -> u64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_u64()
        .unwrap_or_else(|| panic!("no {path:?} in {v}"))
}

#[test]
fn an_unknown_buffer_mode_is_refused_in_one_line_that_names_the_choices() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
        .args(["serve", "--buffers", "send=uc"])
        .output()
        .expect("run shmnet");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ch, ch-all, cs, nc or none"),
        "the error names the modes: {err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
        .args(["ttcp", "--buffers", "both=nc"])
        .output()
        .expect("run shmnet");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("send=MODE or recv=MODE"), "{err}");
}

#[test]
fn files_cross_to_and_from_linux_with_the_frames_kept_coherent_by_hand() {
    const TEST: &str = "files_cross_to_and_from_linux_with_the_frames_kept_coherent_by_hand";
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    const BYTES: usize = 8 << 20;
    let limit = Duration::from_secs(60);
    let file = random_file(BYTES, "buffers");
    let shmnet = env!("CARGO_BIN_EXE_shmnet");
    for (structure, modes) in [
        ("server", "send=nc,recv=ch"),
        ("inline", "send=ch-all,recv=cs"),
    ] {
        let Some(ns) = netns(structure) else {
            shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
            return;
        };
        let sock = std::env::temp_dir().join(format!(
            "shmnet-buf-{}-{structure}.sock",
            std::process::id()
        ));
        let sock_arg = sock.to_str().unwrap().to_string();
        let mut extra = vec!["--structure", structure, "--buffers", modes];
        if structure == "server" {
            extra.extend(["--socket", &sock_arg]);
        } else {
            extra.extend(["--tcp-sink", "5001"]);
        }
        let server = Server::start(&ns, &extra);
        let got = std::env::temp_dir().join(format!("shmnet-buf-{}-in", std::process::id()));

        // Linux → shmnet: into recv-file (server) or the inline structure's TCP sink.
        let recv = (structure == "server").then(|| {
            Command::new(shmnet)
                .args(["app", "recv-file", "5001"])
                .arg(&got)
                .args(["--socket", &sock_arg, "--json", "--timeout", "30"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start recv-file")
        });
        nc_send(&ns, &file, "10.93.0.1", 5001, structure);
        if let Some(recv) = recv {
            let out = wait_ok(recv, "recv-file", limit);
            let report: serde_json::Value = serde_json::from_str(out.trim()).expect("report");
            assert_eq!(
                u(&report, &["bytes"]),
                BYTES as u64,
                "{structure}: {report}"
            );
            assert!(
                std::fs::read(&got).unwrap() == std::fs::read(&file).unwrap(),
                "{structure}: the file nc sent arrived changed"
            );
            // shmnet → Linux.
            let mut listen = ns.cmd("nc");
            listen
                .args(["-l", "10.93.0.2", "5002"])
                .stdout(std::fs::File::create(&got).unwrap())
                .stderr(Stdio::null());
            let listen = listen.spawn().expect("start nc -l");
            send_file("10.93.0.2:5002", &file, &sock_arg, structure);
            wait_ok(listen, "nc -l", limit);
            assert!(
                std::fs::read(&got).unwrap() == std::fs::read(&file).unwrap(),
                "{structure}: the file send-file sent arrived changed"
            );
        }
        let report = server.stop();
        let stack = if report["stack"].is_object() {
            &report["stack"]
        } else {
            &report["server"]["stack"]
        };
        let (tx, rx) = (u(stack, &["maintained_tx"]), u(stack, &["maintained_rx"]));
        // At least a frame per 1,500 bytes received, and the ACKs (and data) sent.
        assert!(
            rx as usize >= BYTES / 1500,
            "{structure}: {rx} frames maintained on receive"
        );
        assert!(tx > 0, "{structure}: no frame maintained on send");
        println!("{structure} ({modes}): {tx} frames maintained on send, {rx} on receive");
        let _ = std::fs::remove_file(&got);
        let _ = std::fs::remove_file(&sock);
    }
    let _ = std::fs::remove_file(&file);
}
