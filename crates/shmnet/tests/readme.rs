//! README.md's "Serving a real interface" is a test: its `sh` blocks are read from the README
//! when the test runs (the README stays the one source) and run, command by command, the
//! way a user pastes them into a root shell — including its `cargo build --release -p
//! shmnet`, so the commands use the release binary they name (`target/release/shmnet`).
//!
//! Each command's effect is checked against what the README's comments promise:
//! - every foreground command exits 0 (`ping -c 3` only does if it was answered; we also
//!   want no loss);
//! - the Python one-liner prints `N bytes echoed` for the N it sends;
//! - the TCP check exits 0 only if `cmp` found the echo equal to what `nc` sent;
//! - `shmnet stats` prints the server's counters;
//! - a background command (`… &`) is up once it has printed its first line on stderr (every
//!   `shmnet serve` and `shmnet app` says what it serves once it serves it), and still alive;
//! - the server structure runs as three processes: the server, its driver process (a child)
//!   and the application;
//! - `kill %N` (SIGTERM) stops each job cleanly: exit status 0, its final report on stdout,
//!   and no control socket left behind.
//!
//! What the harness changes, so that runs never collide with each other or with a user's own
//! namespaces and server: the namespace names `shm-a` and `shm-b` get this process's pid
//! appended, and `SHMNET_RUNTIME_DIR` points the default control socket and the interface
//! locks at a directory of this run. Everything is cleaned up at the end, also on failure;
//! namespaces left by a killed earlier run (its pid gone) are removed on the way in.
//!
//! Why a Rust test and not a script in `scripts/test`: it runs with `cargo test` like every
//! other namespace test, skips the same loud way (`shmnet_testkit::skip`, a failure under
//! CI=true), and its bookkeeping (jobs, timeouts, process trees, cleanup on panic) is easier
//! to get right here than in bash.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TEST: &str = "readme_serving_a_real_interface";

/// How long a foreground command may take (the build has no limit). Generous: a ping of 3
/// answered requests takes 2 s; this only catches a hang.
const COMMAND_LIMIT: Duration = Duration::from_secs(120);
/// How long a background command may take to say it is up, and a killed one to exit.
const START_LIMIT: Duration = Duration::from_secs(60);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The section's commands: the `sh` blocks between its heading and the next `## `, with
/// continuation lines joined, comments and blank lines dropped.
fn section_commands(readme: &str, heading: &str) -> Vec<String> {
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README.md has no {heading:?} section"));
    let body = &readme[start + heading.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut lines = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in body.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(line);
        let cmd = strip_comment(&std::mem::take(&mut pending));
        if !cmd.trim().is_empty() {
            lines.push(cmd.trim().to_string());
        }
    }
    assert!(!lines.is_empty(), "no sh commands under {heading:?}");
    lines
}

/// `line` without a `#` comment outside quotes.
fn strip_comment(line: &str) -> String {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if i == 0 || line[..i].ends_with(char::is_whitespace) => {
                return line[..i].to_string();
            }
            _ => {}
        }
    }
    line.to_string()
}

/// `line` split at `;` and `&` outside quotes: each command, and whether it runs in the
/// background.
fn split_commands(line: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut quote = None;
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                cur.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                cur.push(c);
            }
            (None, ';') => out.push((std::mem::take(&mut cur), false)),
            (None, '&') if chars.peek() != Some(&'&') => out.push((std::mem::take(&mut cur), true)),
            _ => cur.push(c),
        }
    }
    out.push((cur, false));
    out.into_iter()
        .map(|(c, bg)| (c.trim().to_string(), bg))
        .filter(|(c, _)| !c.is_empty())
        .collect()
}

/// A background job: the process, and what it has printed.
struct Job {
    cmd: String,
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

fn collect(r: impl Read + Send + 'static, into: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
}

/// Runs the README's commands; cleans up whatever they leave when dropped.
struct Session {
    suffix: String,
    runtime: PathBuf,
    /// Bash's job table: job N is `jobs[N - 1]`; a finished job leaves `None`.
    jobs: Vec<Option<Job>>,
    /// What happened, for the failure message.
    log: Vec<String>,
}

impl Session {
    fn shell(&self, cmd: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(cmd)
            .current_dir(repo_root())
            .env("SHMNET_RUNTIME_DIR", &self.runtime)
            .process_group(0);
        c
    }

    fn rename(&self, cmd: &str) -> String {
        cmd.replace("shm-a", &format!("shm-a{}", self.suffix))
            .replace("shm-b", &format!("shm-b{}", self.suffix))
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "README command failed: {what}\n--- so far:\n{}\n--- jobs:\n{}",
            self.log.join("\n"),
            self.jobs
                .iter()
                .flatten()
                .map(|j| format!(
                    "{}\n stdout: {}\n stderr: {}",
                    j.cmd,
                    j.stdout.lock().unwrap(),
                    j.stderr.lock().unwrap()
                ))
                .collect::<Vec<_>>()
                .join("\n")
        )
    }

    fn run(&mut self, readme_cmd: &str, background: bool) {
        let cmd = self.rename(readme_cmd);
        self.log
            .push(format!("$ {cmd}{}", if background { " &" } else { "" }));
        if let Some(args) = readme_cmd.strip_prefix("kill ") {
            return self.kill(args);
        }
        if background {
            self.start(cmd);
        } else {
            self.foreground(readme_cmd, &cmd);
        }
    }

    fn foreground(&mut self, readme_cmd: &str, cmd: &str) {
        let mut child = self
            .shell(cmd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run bash");
        let (out, err) = (Arc::default(), Arc::default());
        collect(child.stdout.take().unwrap(), Arc::clone(&out));
        collect(child.stderr.take().unwrap(), Arc::clone(&err));
        let limit = (!cmd.starts_with("cargo ")).then_some(COMMAND_LIMIT);
        let status = wait(&mut child, limit);
        // Let the readers take the last lines.
        std::thread::sleep(Duration::from_millis(50));
        let (out, err) = (out.lock().unwrap().clone(), err.lock().unwrap().clone());
        self.log.push(format!("{out}{err}"));
        match status {
            Some(s) if s.success() => {}
            Some(s) => self.fail(&format!("`{cmd}` exited with {s}")),
            None => {
                let _ = kill_group(&child);
                self.fail(&format!("`{cmd}` did not finish in {limit:?}"))
            }
        }
        check_promise(readme_cmd, &out).unwrap_or_else(|why| self.fail(&why));
        if cmd.starts_with("cargo build") && !repo_root().join("target/release/shmnet").is_file() {
            self.fail("the build left no target/release/shmnet (is CARGO_TARGET_DIR set?)");
        }
    }

    fn start(&mut self, cmd: String) {
        let mut child = self
            .shell(&format!("exec {cmd}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run bash");
        let (stdout, stderr) = (Arc::default(), Arc::default());
        collect(child.stdout.take().unwrap(), Arc::clone(&stdout));
        collect(child.stderr.take().unwrap(), Arc::clone(&stderr));
        // Bash numbers a new job one above the highest live one.
        let n = self
            .jobs
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1);
        self.jobs.truncate(n);
        self.jobs.push(Some(Job {
            cmd: cmd.clone(),
            child,
            stdout,
            stderr: Arc::clone(&stderr),
        }));
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let said = stderr.lock().unwrap().lines().next().map(str::to_string);
            let job = self.jobs[n].as_mut().unwrap();
            if let Ok(Some(s)) = job.child.try_wait() {
                self.fail(&format!("`{cmd}` exited ({s}) instead of running"));
            }
            match said {
                Some(l) if l.starts_with("shmnet: ") => self.fail(&format!("`{cmd}`: {l}")),
                Some(l) => {
                    self.log.push(format!("[{}] up: {l}", n + 1));
                    break;
                }
                None if Instant::now() > deadline => {
                    self.fail(&format!("`{cmd}` said nothing in {START_LIMIT:?}"))
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// `kill %N…`: SIGTERM to each job, then each must stop cleanly.
    fn kill(&mut self, args: &str) {
        let ns: Vec<usize> = args
            .split_whitespace()
            .map(|a| {
                a.strip_prefix('%')
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| self.fail(&format!("`kill {args}`: only %N is understood")))
            })
            .collect();
        // The server structure is three processes: the server, its driver process and the
        // application (the other job).
        for &n in &ns {
            let Some(job) = self.jobs.get(n - 1).and_then(Option::as_ref) else {
                self.fail(&format!("kill %{n}: no such job"));
            };
            if job.cmd.contains("--structure server") && !job.cmd.contains("--driver-thread") {
                let kids = children(job.child.id());
                if !kids
                    .iter()
                    .any(|c| c.contains("shmnet") && c.contains("driver"))
                {
                    self.fail(&format!("the server has no driver process: {kids:?}"));
                }
                let apps = self
                    .jobs
                    .iter()
                    .flatten()
                    .filter(|j| j.cmd.contains(" app "));
                if apps.count() == 0 {
                    self.fail("no application process beside the server");
                }
                self.log
                    .push("three processes: server, driver, application".into());
            }
        }
        for &n in &ns {
            let pid = self.jobs[n - 1].as_ref().unwrap().child.id();
            // SAFETY: `kill` on a pid we spawned and have not reaped (the `Child` is alive in
            // the job table), so the pid is still ours.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        for &n in &ns {
            let mut job = self.jobs[n - 1].take().unwrap();
            let status = wait(&mut job.child, Some(START_LIMIT));
            std::thread::sleep(Duration::from_millis(50));
            let out = job.stdout.lock().unwrap().clone();
            self.log
                .push(format!("[{n}] stopped: {status:?}; stdout:\n{out}"));
            let clean = status.is_some_and(|s| s.success());
            let report = !out.trim().is_empty();
            self.jobs[n - 1] = Some(job);
            if !clean {
                self.fail(&format!(
                    "job %{n} did not stop cleanly on SIGTERM: {status:?}"
                ));
            }
            if !report {
                self.fail(&format!("job %{n} printed no final report"));
            }
            self.jobs[n - 1] = None;
        }
        let sockets: Vec<_> = std::fs::read_dir(&self.runtime)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
            .map(|e| e.path())
            .collect();
        if !sockets.is_empty() && self.jobs.iter().all(Option::is_none) {
            self.fail(&format!("control sockets left behind: {sockets:?}"));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for job in self.jobs.iter_mut().flatten() {
            let _ = kill_group(&job.child);
            let _ = job.child.wait();
        }
        for ns in ["shm-a", "shm-b"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &format!("{ns}{}", self.suffix)])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.runtime);
    }
}

/// Kills `child`'s process group (each command runs in its own).
fn kill_group(child: &Child) -> std::io::Result<()> {
    // SAFETY: a signal to the process group of a child we spawned as its leader
    // (`process_group(0)`) and have not reaped.
    let r = unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Waits for `child` up to `limit` (`None`: without limit); `None` if it is still running.
fn wait(child: &mut Child, limit: Option<Duration>) -> Option<ExitStatus> {
    let deadline = limit.map(|l| Instant::now() + l);
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The command lines of `pid`'s children.
fn children(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces, so read after its `)`.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            out.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    out
}

/// What the README says a command does, checked against its output.
fn check_promise(cmd: &str, out: &str) -> Result<(), String> {
    if cmd.contains("ping -c") && !out.contains(" 0% packet loss") {
        return Err(format!("`{cmd}`: not every ping was answered:\n{out}"));
    }
    if cmd.contains("bytes echoed") {
        let n = cmd
            .split("b'x' * ")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|d| d.parse::<usize>().ok())
            .ok_or_else(|| format!("cannot find the message size in `{cmd}`"))?;
        if out.trim() != format!("{n} bytes echoed") {
            return Err(format!("`{cmd}`: expected {n} bytes echoed, got {out:?}"));
        }
    }
    if cmd.ends_with("shmnet stats") && !out.contains("structure up") {
        return Err(format!("`{cmd}` printed no counters:\n{out}"));
    }
    Ok(())
}

/// Why this machine cannot run the README's commands, if it cannot.
fn cannot_run() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, AF_PACKET)".into());
    }
    for tool in ["ip", "ping", "python3", "nc", "cmp", "cargo"] {
        let found = Command::new("bash")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

/// Removes namespaces of earlier runs of this test whose process is gone.
fn remove_stale_namespaces() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let pid = name
            .strip_prefix("shm-a-readme")
            .or_else(|| name.strip_prefix("shm-b-readme"))
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

#[test]
fn readme_serving_a_real_interface() {
    if let Some(why) = cannot_run() {
        shmnet_testkit::skip(TEST, &why);
        return;
    }
    remove_stale_namespaces();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let commands = section_commands(&readme, "## Serving a real interface");
    let pid = std::process::id();
    let mut s = Session {
        suffix: format!("-readme{pid}"),
        runtime: std::env::temp_dir().join(format!("shmnet-readme-{pid}")),
        jobs: Vec::new(),
        log: Vec::new(),
    };
    let _ = std::fs::remove_dir_all(&s.runtime);
    for line in &commands {
        for (cmd, background) in split_commands(line) {
            s.run(&cmd, background);
        }
    }
    assert!(
        s.jobs.iter().all(Option::is_none),
        "the README leaves jobs running"
    );
    let ran = s.log.iter().filter(|l| l.starts_with("$ ")).count();
    eprintln!(
        "{}\nREADME: {ran} commands ran and did what they say",
        s.log.join("\n")
    );
}

#[test]
fn the_parser_splits_the_readme_as_bash_would() {
    let readme = "## A\n```sh\nip a; ip b\nx -c \"a; b\" \\\n  c # note\n# only\nsrv &\n```\ntext\n```text\nno\n```\n## B\n```sh\nother\n```\n";
    let cmds = section_commands(readme, "## A");
    assert_eq!(cmds, ["ip a; ip b", "x -c \"a; b\"   c", "srv &"]);
    assert_eq!(
        split_commands(&cmds[0]),
        [("ip a".to_string(), false), ("ip b".to_string(), false)]
    );
    assert_eq!(split_commands(&cmds[1]), [(cmds[1].clone(), false)]);
    assert_eq!(split_commands("srv &"), [("srv".to_string(), true)]);
    assert_eq!(
        split_commands("kill %1 %2; ip x"),
        [
            ("kill %1 %2".to_string(), false),
            ("ip x".to_string(), false)
        ]
    );
}
