//! This machine's caches as the kernel describes them (`/sys/devices/system/cpu/cpu0/cache`),
//! so that working sets can be sized to them and the simulator can rebuild them.

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

    /// This machine's.
    pub fn this() -> Self {
        Self::from_caches(&caches())
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
    let caches = caches();
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
        let s = Sizes::from_caches(&[one, l2]);
        assert_eq!((s.l1d, s.l2, s.llc), (48 << 10, 2 << 20, 2 << 20));
        assert!(!s.guessed);
    }
}
