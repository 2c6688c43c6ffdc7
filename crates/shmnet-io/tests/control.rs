//! The control plane's primitives against hostile or unlucky conditions: oversized messages,
//! no file descriptors left, a socket directory someone else owns or may enter, a server
//! running as another user.

use rustix::fd::OwnedFd;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use shmnet_io::client::{Client, ClientError};
use shmnet_io::control::{
    self, ControlError, DirProblem, FdReserve, MAX_MSG, Request, ensure_private_dir,
};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn pair() -> (OwnedFd, OwnedFd) {
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

fn temp(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("shmnet-ctl-test-{}-{tag}", std::process::id()))
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn a_message_over_the_limit_is_refused_by_send_and_reported_whole_by_recv() {
    let (a, b) = pair();
    // Room for the oversized packet on the way (the default buffer may hold less).
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(&a, 4 * MAX_MSG);
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&b, 4 * MAX_MSG);
    let big = "x".repeat(MAX_MSG);
    match control::send(&a, &big) {
        Err(ControlError::TooLarge { size, limit }) => {
            assert_eq!(limit, MAX_MSG);
            assert_eq!(size, MAX_MSG + 2, "the JSON string with its quotes");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // A peer that ignores the limit: the packet is consumed whole and reported with its size.
    let raw = vec![b' '; MAX_MSG + 100];
    assert!(control::send_raw(&a, &[&raw]).unwrap());
    match control::recv::<Request>(&b) {
        Err(ControlError::TooLarge { size, limit }) => {
            assert_eq!((size, limit), (MAX_MSG + 100, MAX_MSG));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn after_an_oversized_packet_the_next_message_is_read_intact() {
    let (a, b) = pair();
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(&a, 4 * MAX_MSG);
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&b, 4 * MAX_MSG);
    let raw = vec![b' '; MAX_MSG + 1];
    assert!(control::send_raw(&a, &[&raw]).unwrap());
    control::send(&a, &Request::Bind { port: 7 }).unwrap();
    assert!(matches!(
        control::recv::<Request>(&b),
        Err(ControlError::TooLarge { .. })
    ));
    assert_eq!(
        control::recv::<Request>(&b).unwrap(),
        Some(Request::Bind { port: 7 })
    );
    // A message of exactly the limit passes (JSON allows the trailing blanks).
    let mut packet = b"\"Stats\"".to_vec();
    packet.resize(MAX_MSG, b' ');
    assert!(control::send_raw(&a, &[&packet]).unwrap());
    assert_eq!(control::recv::<Request>(&b).unwrap(), Some(Request::Stats));
}

#[test]
fn peer_credentials_name_the_process_at_the_other_end() {
    let (a, _b) = pair();
    let c = control::peer_credentials(&a).unwrap();
    assert_eq!(c.pid, std::process::id());
    assert_eq!(c.uid, rustix::process::geteuid().as_raw());
    assert_eq!(c.gid, rustix::process::getegid().as_raw());
}

#[test]
fn only_root_or_our_own_user_is_trusted() {
    assert!(control::trusts(1000, 0));
    assert!(control::trusts(1000, 1000));
    assert!(!control::trusts(1000, 1001));
    assert!(control::trusts(0, 0));
    assert!(!control::trusts(0, 1000));
}

#[test]
fn the_socket_directory_is_made_private_and_refused_when_it_is_not() {
    let dir = temp("dir");
    let _ = std::fs::remove_dir_all(&dir);
    ensure_private_dir(&dir).unwrap();
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o700);
    ensure_private_dir(&dir).expect("our own private directory again");

    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    match ensure_private_dir(&dir) {
        Err(ControlError::UnsafeDirectory { problem, .. }) => {
            assert_eq!(problem, DirProblem::OpenToOthers { mode: 0o755 })
        }
        other => panic!("expected OpenToOthers, got {other:?}"),
    }
    let msg = ensure_private_dir(&dir).unwrap_err().to_string();
    assert!(msg.contains("rm -r") && msg.contains("--socket"), "{msg}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();

    let link = temp("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    assert!(matches!(
        ensure_private_dir(&link),
        Err(ControlError::UnsafeDirectory {
            problem: DirProblem::NotADirectory,
            ..
        })
    ));
    let _ = std::fs::remove_file(&link);

    if is_root() {
        std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
        assert!(matches!(
            ensure_private_dir(&dir),
            Err(ControlError::UnsafeDirectory {
                problem: DirProblem::NotOurs { owner: 65534 },
                ..
            })
        ));
    } else {
        shmnet_testkit::skip(
            "the_socket_directory_is_made_private_and_refused_when_it_is_not (other owner)",
            "needs root to give the directory to another user",
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn listen_on_the_default_path_makes_the_runtime_directory_private() {
    // The runtime directory comes from the environment: learn it in a child process, so
    // this test binary's environment stays as it is.
    let dir = temp("runtime");
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_listen_on_default",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(control::RUNTIME_DIR_ENV, &dir)
        .env("SHMNET_TEST_CHILD", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o700);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Child entry: listens on the default socket (in `$SHMNET_RUNTIME_DIR`).
#[test]
#[ignore = "child-process entry; run by listen_on_the_default_path_makes_the_runtime_directory_private"]
fn child_listen_on_default() {
    if std::env::var_os("SHMNET_TEST_CHILD").is_none() {
        return;
    }
    let path = control::default_socket();
    assert_eq!(
        path.parent().unwrap(),
        std::path::Path::new(&std::env::var_os(control::RUNTIME_DIR_ENV).unwrap())
    );
    let _l = control::listen(&path).unwrap();
    assert!(path.exists());
}

/// Child entry: as another user, listens on `SHMNET_TEST_SOCKET`, accepts one connection
/// and keeps it until its stdin closes.
#[test]
#[ignore = "child-process entry; run by a_server_of_another_user_is_refused"]
fn child_listen_as_other_user() {
    let Some(path) = std::env::var_os("SHMNET_TEST_SOCKET") else {
        return;
    };
    let l = control::listen(std::path::Path::new(&path)).unwrap();
    println!("listening");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut held = Vec::new();
    while Instant::now() < deadline {
        if let Ok(Some(fd)) = control::accept(&l) {
            held.push(fd);
        }
        let stdin = std::io::stdin();
        let mut fds = [rustix::event::PollFd::new(
            &stdin,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        if rustix::event::poll(&mut fds, Some(&ts)).unwrap_or(0) > 0 {
            use std::io::Read;
            let mut buf = [0u8; 1];
            if stdin.lock().read(&mut buf).unwrap_or(0) == 0 {
                return;
            }
        }
    }
}

#[test]
fn a_server_of_another_user_is_refused() {
    if !is_root() {
        shmnet_testkit::skip(
            "a_server_of_another_user_is_refused",
            "needs root to run a server as another user",
        );
        return;
    }
    let dir = temp("squat");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    // A copy of this test binary that uid 65534 can reach (the build tree may not be).
    let exe = dir.join("test-binary");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("s.sock");
    use std::os::unix::process::CommandExt;
    let mut child = shmnet_testkit::spawn_copied(
        Command::new(&exe)
            .args([
                "child_listen_as_other_user",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env("SHMNET_TEST_SOCKET", &path)
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    )
    .unwrap();
    // The harness prints its own lines first ("running 1 test").
    use std::io::BufRead;
    let listening = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("listening"));
    if !listening {
        let _ = child.kill();
        let _ = child.wait();
        shmnet_testkit::skip(
            "a_server_of_another_user_is_refused",
            "the test binary cannot run as uid 65534 here",
        );
        return;
    }
    let r = control::connect_checked(&path);
    match r {
        Err(ControlError::UntrustedServer { uid, pid, .. }) => {
            assert_eq!(uid, 65534);
            assert_eq!(pid, child.id());
        }
        other => panic!("expected UntrustedServer, got {other:?}"),
    }
    match Client::connect(&path) {
        Err(ClientError::UntrustedServer { uid: 65534, .. }) => {}
        Err(e) => panic!("expected UntrustedServer, got {e}"),
        Ok(_) => panic!("expected UntrustedServer, got a client"),
    }
    let msg = Client::connect(&path).err().unwrap().to_string();
    assert!(msg.contains("uid 65534"), "{msg}");
    drop(child.stdin.take());
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn out_of_file_descriptors_accept_says_so_and_the_reserve_takes_one_anyway() {
    // The limit is process-wide: lower it in a child process of its own.
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child_fd_limit", "--exact", "--ignored", "--nocapture"])
        .env("SHMNET_TEST_CHILD", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fd limit: ok"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Child entry: fills the fd table, then accepts.
#[test]
#[ignore = "child-process entry; run by out_of_file_descriptors_accept_says_so_and_the_reserve_takes_one_anyway"]
fn child_fd_limit() {
    if std::env::var_os("SHMNET_TEST_CHILD").is_none() {
        return;
    }
    let path = temp("fdlimit.sock");
    let _ = std::fs::remove_file(&path);
    let listener = control::listen(&path).unwrap();
    let mut reserve = FdReserve::new().unwrap();
    let clients: Vec<OwnedFd> = (0..3).map(|_| control::connect(&path).unwrap()).collect();
    // Lower the soft limit to what is open now, then fill any gap below it.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(open + 4),
            maximum: rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum,
        },
    )
    .unwrap();
    let mut filler = Vec::new();
    while let Ok(fd) = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        filler.push(fd);
    }
    match control::accept(&listener) {
        Err(ControlError::OutOfFds(e)) => assert_eq!(e, rustix::io::Errno::MFILE),
        other => panic!("expected OutOfFds, got {other:?}"),
    }
    let msg = control::accept(&listener).unwrap_err().to_string();
    assert!(msg.contains("ulimit -n"), "{msg}");
    // The reserve gives one connection anyway, then is spent until refilled.
    let (conn, used_reserve) = reserve
        .accept_with_reserve(&listener)
        .unwrap()
        .expect("a pending connection");
    assert!(used_reserve && !reserve.is_held());
    assert!(matches!(
        reserve.accept_with_reserve(&listener),
        Err(ControlError::OutOfFds(_))
    ));
    // The connection works: the peer sees an answer.
    control::send(&conn, &Request::Stats).unwrap();
    drop(conn);
    reserve.refill().unwrap();
    assert!(reserve.is_held());
    drop(filler);
    assert!(control::accept(&listener).unwrap().is_some());
    drop(clients);
    let _ = std::fs::remove_file(&path);
    println!("fd limit: ok");
}
