//! This machine's caches as the kernel describes them (`/sys/devices/system/cpu/cpu0/cache`),
//! or as cpuid does where the kernel is silent ([`crate::cpuid`]), so that working sets can
//! be sized to them and the simulator can rebuild them.

/// One cache of CPU 0.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheInfo {
    /// 1 for L1, 2 for L2, …
    pub level: u32,
    /// `data`, `instruction` or `unified`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Capacity in bytes.
    pub size_bytes: u64,
    /// Line size in bytes.
    pub line_bytes: u64,
    /// Associativity (0 if the kernel does not say).
    pub ways: u64,
}

/// The caches of CPU 0, L1 first; empty if the kernel does not describe them.
pub fn caches() -> Vec<CacheInfo> {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut out = Vec::new();
    for i in 0..16 {
        let dir = base.join(format!("index{i}"));
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let Some(level) = read("level").and_then(|s| s.parse().ok()) else {
            break;
        };
        let kind = read("type").unwrap_or_default().to_lowercase();
        out.push(CacheInfo {
            level,
            kind,
            size_bytes: read("size").as_deref().and_then(parse_size).unwrap_or(0),
            line_bytes: read("coherency_line_size")
                .and_then(|s| s.parse().ok())
                .unwrap_or(64),
            ways: read("ways_of_associativity")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        });
    }
    out.sort_by_key(|c| (c.level, c.kind != "data"));
    out
}

/// Where a list of caches came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheSource {
    /// `/sys/devices/system/cpu/cpu0/cache`.
    Sysfs,
    /// The cpuid instruction (leaf 4, or 0x8000_001D / 0x8000_0005-6 on AMD).
    Cpuid,
    /// Neither describes any cache.
    #[default]
    None,
}

/// The caches of CPU 0 from the kernel, or from cpuid ([`crate::cpuid::read`], asked only
/// then) when the kernel lists none.
pub fn caches_or_cpuid() -> Vec<CacheInfo> {
    let sysfs = caches();
    if sysfs.is_empty() {
        crate::cpuid::read().caches
    } else {
        sysfs
    }
}

/// The kernel's caches `sysfs` if it lists any, else cpuid's; with where they came from.
pub fn choose(sysfs: Vec<CacheInfo>, cpuid: &[CacheInfo]) -> (Vec<CacheInfo>, CacheSource) {
    if !sysfs.is_empty() {
        (sysfs, CacheSource::Sysfs)
    } else if !cpuid.is_empty() {
        (cpuid.to_vec(), CacheSource::Cpuid)
    } else {
        (Vec::new(), CacheSource::None)
    }
}

/// Where the kernel and cpuid describe a cache differently, one line each (`L2 unified:
/// kernel 2048 KiB 16-way, cpuid 1024 KiB 8-way`); caches only one of them lists are not
/// compared (a VM may hide either).
pub fn disagreements(sysfs: &[CacheInfo], cpuid: &[CacheInfo]) -> Vec<String> {
    let show = |c: &CacheInfo| format!("{} KiB {}-way", c.size_bytes >> 10, c.ways);
    sysfs
        .iter()
        .filter_map(|k| {
            let c = cpuid
                .iter()
                .find(|c| c.level == k.level && c.kind == k.kind)?;
            let differ = k.size_bytes != c.size_bytes
                || k.line_bytes != c.line_bytes
                || (k.ways != c.ways && k.ways != 0 && c.ways != 0);
            differ.then(|| {
                format!(
                    "L{} {}: kernel {}, cpuid {}",
                    k.level,
                    k.kind,
                    show(k),
                    show(c)
                )
            })
        })
        .collect()
}

/// Parses the kernel's cache sizes: `32K`, `1024K`, `32768K`, `2M`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// The sizes the instruments plan with: the L1 data cache, the L2 and the last level, from
/// [`caches`], or typical values (32 KiB, 1 MiB, 32 MiB) where the kernel is silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Sizes {
    /// L1 data cache bytes.
    pub l1d: u64,
    /// L2 bytes (per core).
    pub l2: u64,
    /// Last-level cache bytes.
    pub llc: u64,
    /// Whether any of these is a guess.
    pub guessed: bool,
}

impl Sizes {
    /// From a list of caches.
    pub fn from_caches(caches: &[CacheInfo]) -> Self {
        let find = |level: u32, data_only: bool| {
            caches
                .iter()
                .find(|c| c.level == level && (!data_only || c.kind != "instruction"))
                .map(|c| c.size_bytes)
                .filter(|&s| s > 0)
        };
        let l1d = find(1, true);
        let l2 = find(2, false);
        let llc = caches
            .iter()
            .filter(|c| c.kind != "instruction")
            .max_by_key(|c| c.level)
            .map(|c| c.size_bytes)
            .filter(|&s| s > 0);
        Self {
            l1d: l1d.unwrap_or(32 << 10),
            l2: l2.unwrap_or(1 << 20),
            llc: llc.unwrap_or(32 << 20).max(l2.unwrap_or(0)),
            guessed: l1d.is_none() || l2.is_none() || llc.is_none(),
        }
    }

    /// This machine's (the kernel's caches, or cpuid's where it lists none).
    pub fn this() -> Self {
        Self::from_caches(&caches_or_cpuid())
    }
}

/// The L2's associativity as the kernel gives it; 8 where it is silent.
pub fn l2_ways(caches: &[CacheInfo]) -> usize {
    caches
        .iter()
        .find(|c| c.level == 2 && c.kind != "instruction")
        .map(|c| c.ways as usize)
        .filter(|&w| w > 0)
        .unwrap_or(8)
}

/// This machine's caches as the stack's cache maintenance sizes its regions
/// ([`shmnet_chan::coherence::Maintenance`]).
pub fn geometry() -> shmnet_chan::coherence::CacheGeometry {
    let caches = caches_or_cpuid();
    let sizes = Sizes::from_caches(&caches);
    shmnet_chan::coherence::CacheGeometry {
        l1d: sizes.l1d as usize,
        l2: sizes.l2 as usize,
        l2_ways: l2_ways(&caches),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_size("32K"), Some(32 << 10));
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn missing_levels_are_guessed_and_said_to_be() {
        let s = Sizes::from_caches(&[]);
        assert!(s.guessed);
        assert_eq!(s.l2, 1 << 20);
        let one = CacheInfo {
            level: 1,
            kind: "data".into(),
            size_bytes: 48 << 10,
            line_bytes: 64,
            ways: 12,
        };
        let l2 = CacheInfo {
            level: 2,
            kind: "unified".into(),
            size_bytes: 2 << 20,
            ..one.clone()
        };
        let s = Sizes::from_caches(&[one.clone(), l2.clone()]);
        assert_eq!((s.l1d, s.l2, s.llc), (48 << 10, 2 << 20, 2 << 20));
        assert!(!s.guessed);
    }

    #[test]
    fn cpuid_stands_in_for_a_silent_kernel_and_disagreements_are_said() {
        let one = CacheInfo {
            level: 1,
            kind: "data".into(),
            size_bytes: 48 << 10,
            line_bytes: 64,
            ways: 12,
        };
        let (list, from) = choose(Vec::new(), std::slice::from_ref(&one));
        assert_eq!((list.len(), from), (1, CacheSource::Cpuid));
        let (_, from) = choose(vec![one.clone()], &[]);
        assert_eq!(from, CacheSource::Sysfs);
        assert_eq!(choose(Vec::new(), &[]).1, CacheSource::None);
        let other = CacheInfo {
            size_bytes: 32 << 10,
            ways: 8,
            ..one.clone()
        };
        assert_eq!(
            disagreements(std::slice::from_ref(&one), &[other]),
            ["L1 data: kernel 48 KiB 12-way, cpuid 32 KiB 8-way"]
        );
        assert!(disagreements(std::slice::from_ref(&one), std::slice::from_ref(&one)).is_empty());
    }
}
