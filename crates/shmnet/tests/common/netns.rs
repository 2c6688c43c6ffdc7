//! A network namespace holding a veth pair (`v0`, `v1`, both up), removed when dropped: the
//! test bed of the tests that put shmnet on a real interface (`v0`) with Linux on the other
//! end (`v1`). Included with `#[path]` by the tests that need root, so the others do not
//! compile it.

use std::process::{Command, Stdio};

/// The namespace, by name.
pub struct Netns(pub String);

impl Netns {
    /// A fresh namespace `{prefix}-{pid}-{tag}` (an old one of that name is removed first),
    /// or `None` when namespaces or veth pairs cannot be made here.
    pub fn new(prefix: &str, tag: &str) -> Option<Netns> {
        let name = format!("{prefix}-{}-{tag}", std::process::id());
        let _ = ip(&["netns", "del", &name]);
        if !ip(&["netns", "add", &name]) {
            return None;
        }
        let ns = Netns(name);
        let ok = ip(&[
            "-n", &ns.0, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
        ]) && ip(&["-n", &ns.0, "link", "set", "v0", "up"])
            && ip(&["-n", &ns.0, "link", "set", "v1", "up"]);
        ok.then_some(ns)
    }

    /// `prog` run inside the namespace.
    pub fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, prog]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// `ip args…` succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
