//! What machine a figure was measured on, recorded beside every published result.

/// A description of this machine.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Machine {
    /// CPU model name from `/proc/cpuinfo`.
    pub cpu: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Whether a hypervisor is present (then the TSC counts ticks, not core cycles).
    pub virtualized: bool,
}

impl Machine {
    /// Reads the description of the machine this runs on.
    pub fn this() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        Self {
            cpu: field("model name").unwrap_or_else(|| "unknown".into()),
            cpus: online_cpus(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            virtualized: field("flags")
                .is_some_and(|f| f.split_whitespace().any(|w| w == "hypervisor")),
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} x {}, Linux {}{}",
            self.cpus,
            self.cpu,
            self.kernel,
            if self.virtualized {
                " (virtual machine)"
            } else {
                ""
            }
        )
    }
}

/// CPUs online on this machine, whatever this thread's affinity (which
/// `available_parallelism` follows).
pub fn online_cpus() -> usize {
    // SAFETY: `sysconf` reads a value and has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}
