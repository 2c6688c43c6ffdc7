//! Keeping a buffer coherent with a device that does not snoop the caches, by hand — the
//! three methods of seed 003 (Qu, Gou, Cheng) done with what an x86-64 CPU offers a
//! user-space program. The residency lab (`shmnet lab buffers`) times them; the stack applies
//! them to its frames when asked (`shmnet_stack::iface::Config::buffers`).
//!
//! x86's DMA is coherent, so none of this is *needed* here: the point is to pay each method's
//! cost on a real CPU, as the seed's driver did on its Unity machine.
//!
//! - [`Mode::Ch`]: clean (send) or clean and invalidate (receive) a buffer's own lines with
//!   `clflushopt` (`clflush` where the CPU lacks it), then a fence — x86's per-line
//!   maintenance, which the seed's platform did not have.
//! - [`Mode::ChAll`]: the seed's CH: clean every line of a region the size of the data cache,
//!   dirty or not, as a whole-cache clean does, and the buffer's lines with it.
//! - [`Mode::Cs`]: the seed's software clean: read junk that maps to the same L2 sets as the
//!   buffer's lines, as many lines per set as the L2 has ways ([`soft_clean`]).
//! - [`Mode::Nc`]: bypass: non-temporal stores into the buffer ([`copy_nt`]); streaming loads
//!   out of it ([`copy_streaming`]) and its lines evicted after use. True uncacheable memory
//!   needs the kernel to map the buffer so; here a load still allocates a line.
//!
//! Hand-written because it is the subject of seed 003's experiments: no crate offers
//! cache-maintenance loops, and each instruction's cost is what is measured.

/// A cache line's bytes on the CPUs shmnet runs on.
pub const LINE: usize = 64;

/// How K is kept coherent with the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Per-line clean / invalidate of K (`clflushopt`).
    Ch,
    /// The seed's CH: a whole-cache clean (every line of an L1d-sized region, and K's).
    ChAll,
    /// The seed's CS: reading junk in K's sets to push K out.
    Cs,
    /// Bypass: non-temporal stores (send), streaming loads and eviction after use (receive).
    Nc,
}

impl Mode {
    /// Every mode, in the report's order.
    pub const ALL: [Mode; 4] = [Mode::Ch, Mode::ChAll, Mode::Cs, Mode::Nc];

    /// The name the report and the JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ch => "ch",
            Mode::ChAll => "ch-all",
            Mode::Cs => "cs",
            Mode::Nc => "nc",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A word that names no mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModesError {
    /// Not `ch`, `ch-all`, `cs`, `nc` or `none`.
    #[error("{0:?} is not a buffer mode: give ch, ch-all, cs, nc or none")]
    UnknownMode(String),
    /// Not `send=MODE` or `recv=MODE`.
    #[error("{0:?} is not send=MODE or recv=MODE (for example --buffers send=nc,recv=ch)")]
    BadPart(String),
}

impl std::str::FromStr for Mode {
    type Err = ModesError;
    fn from_str(s: &str) -> Result<Self, ModesError> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| ModesError::UnknownMode(s.to_owned()))
    }
}

/// How each direction's buffers are kept coherent with the device: `None` is the hardware's
/// coherence (x86's DMA snoops the caches), the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BufferModes {
    /// Frames the device reads (sent).
    pub send: Option<Mode>,
    /// Frames the device writes (received).
    pub recv: Option<Mode>,
}

impl BufferModes {
    /// Neither direction does anything by hand.
    pub fn is_none(&self) -> bool {
        self.send.is_none() && self.recv.is_none()
    }
}

impl std::fmt::Display for BufferModes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = |m: Option<Mode>| m.map_or("none", Mode::name);
        write!(f, "send={},recv={}", name(self.send), name(self.recv))
    }
}

/// `send=MODE,recv=MODE` (either part may be left out; `none` is the default).
impl std::str::FromStr for BufferModes {
    type Err = ModesError;
    fn from_str(s: &str) -> Result<Self, ModesError> {
        let mut out = BufferModes::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (dir, mode) = part
                .split_once('=')
                .ok_or_else(|| ModesError::BadPart(part.to_owned()))?;
            let mode = match mode {
                "none" => None,
                m => Some(m.parse()?),
            };
            match dir {
                "send" => out.send = mode,
                "recv" => out.recv = mode,
                _ => return Err(ModesError::BadPart(part.to_owned())),
            }
        }
        Ok(out)
    }
}

/// What the CPU offers for the methods. Only [`CpuOps::this`] (or [`CpuOps::cached`]) makes
/// one: the safe functions of this module trust it to say what the CPU can execute (a
/// `clflushopt` or an SSE4.1 load on a CPU without them would fault or be undefined).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct CpuOps {
    clflushopt: bool,
    streaming_loads: bool,
}

impl CpuOps {
    /// This CPU's.
    pub fn this() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID leaf 7, sub-leaf 0: EBX bit 23 (std has no detection macro for it). Asked
            // only where the CPU has leaf 7: above its highest leaf, Intel's answer is that
            // leaf's data, not zeros.
            let max_leaf = core::arch::x86_64::__get_cpuid_max(0).0;
            let leaf7_ebx = if max_leaf >= 7 {
                core::arch::x86_64::__cpuid_count(7, 0).ebx
            } else {
                0
            };
            Self {
                clflushopt: leaf7_ebx & (1 << 23) != 0,
                streaming_loads: std::arch::is_x86_feature_detected!("sse4.1"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Self {
            clflushopt: false,
            streaming_loads: false,
        }
    }

    /// `clflushopt` (else `clflush`, which is ordered and slower).
    pub fn clflushopt(self) -> bool {
        self.clflushopt
    }

    /// SSE4.1's `movntdqa` streaming load (on write-back memory it loads as usual; it
    /// bypasses only on write-combining memory, which user space cannot map).
    pub fn streaming_loads(self) -> bool {
        self.streaming_loads
    }
}

/// Junk the software clean reads: `ways` lines per set of a cache whose sets repeat every
/// `stride` bytes.
///
/// Invariant: `junk .. junk + ways * stride` is mapped and readable, and `stride` is a power
/// of two no smaller than a line.
#[derive(Clone, Copy, Debug)]
pub struct Junk {
    /// Start of the junk, aligned to `stride`.
    pub base: *const u8,
    /// Bytes between two lines of the same set (cache size ÷ ways).
    pub stride: usize,
    /// Lines read per set.
    pub ways: usize,
}

/// Writes back (and evicts) every line of `p .. p + len`, then fences (the write-backs are
/// done when it returns).
///
/// # Safety
/// The range must be mapped.
pub unsafe fn clean(ops: CpuOps, p: *const u8, len: usize) {
    // SAFETY: the caller's promise.
    unsafe { flush_lines(ops, p, len) };
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a fence has no memory operands.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
}

/// Starts the write-back and eviction of every line of `p .. p + len`, without the fence
/// that waits for them (callers that flush several ranges fence once).
///
/// # Safety
/// The range must be mapped.
unsafe fn flush_lines(ops: CpuOps, p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if len == 0 {
            return;
        }
        let mut a = p as usize & !(LINE - 1);
        let end = p as usize + len;
        while a < end {
            if ops.clflushopt {
                // SAFETY: `a` is inside a line of the mapped range (the caller's promise);
                // clflushopt reads nothing and writes no register.
                unsafe {
                    core::arch::asm!("clflushopt [{0}]", in(reg) a, options(nostack, preserves_flags))
                };
            } else {
                // SAFETY: as above.
                unsafe { core::arch::x86_64::_mm_clflush(a as *const u8) };
            }
            a += LINE;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (ops, p, len);
}

/// Reads `ways` lines of `junk` in the set of every line of `k .. k + len` (the software
/// clean). Returns a value that depends on what was read, so the reads are not removed.
///
/// # Safety
/// `junk` must hold its invariant.
pub unsafe fn soft_clean(junk: Junk, k: *const u8, len: usize) -> u64 {
    let mut acc = 0u64;
    let first = k as usize & !(LINE - 1);
    let lines = (k as usize + len).div_ceil(LINE) - first / LINE;
    for i in 0..lines {
        let set_off = (first + i * LINE) & (junk.stride - 1);
        for w in 0..junk.ways {
            // SAFETY: `set_off < stride` and `w < ways`, so the word is inside the junk.
            acc = acc.wrapping_add(unsafe {
                junk.base
                    .add(w * junk.stride + set_off)
                    .cast::<u64>()
                    .read_volatile()
            });
        }
    }
    acc
}

/// Copies `src` to `dst` with non-temporal stores over the whole lines of `dst` (the bytes
/// before the first and after the last, if any, with ordinary stores, their lines then
/// cleaned), then fences: the copy leaves none of `dst`'s lines in the caches.
///
/// # Safety
/// `dst .. dst + src.len()` must be mapped, writable and not overlap `src`.
pub unsafe fn copy_nt(ops: CpuOps, dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller's promise.
    let (head, tail) = unsafe { copy_nt_unflushed(dst, src) };
    // SAFETY: both edges lie inside `dst .. dst + src.len()`.
    unsafe {
        flush_lines(ops, dst, head);
        flush_lines(ops, dst.add(src.len() - tail), tail);
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a fence has no memory operands.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
}

/// The copy of [`copy_nt`] without its clean and fence: the whole lines of `dst` get
/// non-temporal stores, the bytes before the first and after the last ordinary stores (a
/// line that takes both kinds makes the CPU evict or fetch it mid-stream, which costs more
/// than the copy: on AMD EPYC a 1,460-byte payload beside its headers took 3.0 µs stored
/// non-temporally from a 16-byte boundary, against 1.7 µs copied and cleaned with
/// `clflushopt`). Returns how many bytes at the start and at the end were stored ordinarily:
/// the caller cleans their lines and fences (see [`Maintenance::before_device_reads`]).
///
/// # Safety
/// `dst .. dst + src.len()` must be mapped, writable and not overlap `src`, and the caller
/// must fence (`_mm_sfence`) before anything reads or writes `dst` again or hands it to
/// another thread (Rust's rule for non-temporal stores); [`copy_nt_slice_edges_cached`] does.
pub unsafe fn copy_nt_unflushed(dst: *mut u8, src: &[u8]) -> (usize, usize) {
    let n = src.len();
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = ((dst as usize).next_multiple_of(LINE) - dst as usize).min(n);
        let body = (n - head) / LINE * LINE;
        // SAFETY: every access below is inside `src` or `dst .. dst + n` (the caller's
        // promise), the streamed stores 16-byte aligned by construction of `head`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
            let mut i = head;
            while i < head + body {
                let v = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
                _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
                i += 16;
            }
            std::ptr::copy_nonoverlapping(src.as_ptr().add(i), dst.add(i), n - i);
            (head, n - i)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
        (n, 0)
    }
}

/// Copies `src .. src + dst.len()` into `dst` with streaming loads where the CPU has them
/// and `src` is 16-byte aligned (ordinary loads otherwise).
///
/// # Safety
/// `src .. src + dst.len()` must be mapped and readable and not overlap `dst`.
pub unsafe fn copy_streaming(ops: CpuOps, dst: &mut [u8], src: *const u8) {
    let n = dst.len();
    #[cfg(target_arch = "x86_64")]
    if ops.streaming_loads {
        // SAFETY: as the caller promised; the streamed loads are 16-byte aligned by
        // construction of `head`, and SSE4.1 was detected.
        unsafe { stream_copy(dst, src) };
        return;
    }
    // SAFETY: the caller's promise.
    unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), n) };
    let _ = ops;
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
unsafe fn stream_copy(dst: &mut [u8], src: *const u8) {
    use core::arch::x86_64::{__m128i, _mm_storeu_si128, _mm_stream_load_si128};
    let n = dst.len();
    let head = ((src as usize).next_multiple_of(16) - src as usize).min(n);
    let body = (n - head) / 16 * 16;
    // SAFETY: the caller's promise (see `copy_streaming`); the loads are aligned.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), head);
        let mut i = head;
        while i < head + body {
            let v = _mm_stream_load_si128(src.add(i).cast::<__m128i>().cast_mut());
            _mm_storeu_si128(dst.as_mut_ptr().add(i).cast::<__m128i>(), v);
            i += 16;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.as_mut_ptr().add(i), n - i);
    }
}

impl CpuOps {
    /// This CPU's, detected once per process.
    pub fn cached() -> Self {
        static OPS: std::sync::OnceLock<CpuOps> = std::sync::OnceLock::new();
        *OPS.get_or_init(Self::this)
    }
}

/// Starts the write-back and eviction of the lines `s` touches, without the fence (the
/// caller fences once for several ranges, as [`Maintenance::before_device_reads`] does).
pub fn flush_slice_unfenced(ops: CpuOps, s: &[u8]) {
    // SAFETY: a slice's bytes are mapped.
    unsafe { flush_lines(ops, s.as_ptr(), s.len()) }
}

/// [`clean`] over a slice (always mapped).
pub fn clean_slice(ops: CpuOps, s: &[u8]) {
    // SAFETY: a slice's bytes are mapped.
    unsafe { clean(ops, s.as_ptr(), s.len()) }
}

/// [`copy_nt`] between slices of equal length (`dst` gets `src`; its lines leave no copy in
/// the caches).
///
/// # Panics
/// If the lengths differ (a caller's bug, as for `copy_from_slice`).
pub fn copy_nt_slice(ops: CpuOps, dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_nt_slice: lengths differ");
    // SAFETY: `dst` is mapped, writable and as long as `src`; `&mut` keeps them apart.
    unsafe { copy_nt(ops, dst.as_mut_ptr(), src) }
}

/// [`copy_nt_unflushed`] between slices of equal length, then a fence (the non-temporal
/// stores are done, and `dst` may be read): the edges' lines, stored ordinarily, stay in the
/// cache for the caller to clean (the stack's send maintenance does, with the frame's
/// headers).
///
/// # Panics
/// If the lengths differ.
pub fn copy_nt_slice_edges_cached(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy_nt_slice_edges_cached: lengths differ"
    );
    // SAFETY: `dst` is mapped, writable and as long as `src`; `&mut` keeps them apart. The
    // fence below orders the streamed stores before any later access to `dst` (Rust's rule
    // for `_mm_stream_si128`).
    unsafe {
        copy_nt_unflushed(dst.as_mut_ptr(), src);
        #[cfg(target_arch = "x86_64")]
        core::arch::x86_64::_mm_sfence();
    }
}

/// [`copy_streaming`] between slices of equal length, then `src`'s lines evicted: the bytes
/// leave `src` without its lines staying in the caches.
///
/// # Panics
/// If the lengths differ.
pub fn copy_streaming_evict(ops: CpuOps, dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_streaming_evict: lengths differ");
    // SAFETY: `src` is mapped and as long as `dst`; `&mut` keeps them apart.
    unsafe { copy_streaming(ops, dst, src.as_ptr()) };
    clean_slice(ops, src);
}

/// The caches a [`Maintenance`] sizes its regions to (bytes; ways of the L2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheGeometry {
    /// The first-level data cache: the whole-cache clean's region.
    pub l1d: usize,
    /// The second-level cache, whose sets the software clean's junk aliases.
    pub l2: usize,
    /// Its ways: junk lines read per set.
    pub l2_ways: usize,
}

impl Default for CacheGeometry {
    /// 32 KiB L1d, 1 MiB 8-way L2 (a common x86 core of 2026), for when nobody measured.
    fn default() -> Self {
        Self {
            l1d: 32 << 10,
            l2: 1 << 20,
            l2_ways: 8,
        }
    }
}

/// Frames larger than this are not expected (the software clean of a receive covers this
/// much, the seed's `L_max`: K is prepared before its length is known).
pub const MAX_FRAME: usize = 65_536;

/// A stack's cache maintenance of its frames by [`BufferModes`]: what each mode does to a
/// frame before the device reads it (send) and after the device wrote it (receive), with the
/// regions the whole-cache and software cleans need, allocated once here.
///
/// Invariant: `junk` holds `l2_ways` strides of `l2 / l2_ways` bytes (a power of two no
/// smaller than [`LINE`]) past `junk_start`; `region` holds `l1d` bytes.
pub struct Maintenance {
    modes: BufferModes,
    ops: CpuOps,
    region: Vec<u8>,
    junk: Vec<u8>,
    junk_start: usize,
    stride: usize,
    ways: usize,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("modes", &self.modes)
            .field("stride", &self.stride)
            .field("ways", &self.ways)
            .finish()
    }
}

impl Maintenance {
    /// Regions for `modes` on caches shaped as `geometry` (only those the modes use).
    pub fn new(modes: BufferModes, geometry: CacheGeometry) -> Self {
        let uses = |m: Mode| modes.send == Some(m) || modes.recv == Some(m);
        let ways = geometry.l2_ways.clamp(1, 64);
        let stride = (geometry.l2 / ways).next_power_of_two().max(LINE);
        let (junk, junk_start) = if uses(Mode::Cs) {
            // Touched once so every page is mapped before the first packet.
            let v = vec![1u8; ways * stride + stride];
            let start = (v.as_ptr() as usize).next_multiple_of(stride) - v.as_ptr() as usize;
            (v, start)
        } else {
            (Vec::new(), 0)
        };
        let region = if uses(Mode::ChAll) {
            vec![1u8; geometry.l1d.max(LINE)]
        } else {
            Vec::new()
        };
        Self {
            modes,
            ops: CpuOps::cached(),
            region,
            junk,
            junk_start,
            stride,
            ways,
        }
    }

    /// The modes.
    pub fn modes(&self) -> BufferModes {
        self.modes
    }

    /// The send side copies payloads with non-temporal stores (NC).
    pub fn send_uncached(&self) -> bool {
        self.modes.send == Some(Mode::Nc)
    }

    /// The receive side copies payloads out with streaming loads and evicts them (NC).
    pub fn recv_uncached(&self) -> bool {
        self.modes.recv == Some(Mode::Nc)
    }

    fn soft_clean_of(&self, k: &[u8], len: usize) -> u64 {
        if self.junk.is_empty() {
            return 0;
        }
        let j = Junk {
            // SAFETY: `junk_start < stride`, inside `junk` (the invariant).
            base: unsafe { self.junk.as_ptr().add(self.junk_start) },
            stride: self.stride,
            ways: self.ways,
        };
        // SAFETY: `j` holds `Junk`'s invariant by this struct's.
        unsafe { soft_clean(j, k.as_ptr(), len) }
    }

    /// Before the device reads `frame` (one buffer of a frame about to be sent): its first
    /// `cached_prefix` bytes were written with ordinary stores, the rest under NC with
    /// [`copy_nt_unflushed`] (whose ordinary edges are the line of `cached_prefix` and the
    /// last line, cleaned here); the whole frame is cleaned when `cached_prefix` covers it. Returns a value that depends on what the
    /// software clean read.
    pub fn before_device_reads(&self, frame: &[u8], cached_prefix: usize) -> u64 {
        match self.modes.send {
            None => 0,
            Some(Mode::Ch) => {
                clean_slice(self.ops, frame);
                0
            }
            Some(Mode::ChAll) => {
                clean_slice(self.ops, &self.region);
                clean_slice(self.ops, frame);
                0
            }
            Some(Mode::Cs) => self.soft_clean_of(frame, frame.len()),
            Some(Mode::Nc) => {
                // The ordinary stores' lines: the headers' (and the payload's first bytes
                // beside them) and the last line (the payload's last bytes), one fence.
                let prefix = cached_prefix.min(frame.len());
                // SAFETY: both ranges lie inside `frame`.
                unsafe {
                    flush_lines(self.ops, frame.as_ptr(), prefix);
                    if prefix < frame.len() {
                        flush_lines(self.ops, frame.as_ptr().add(frame.len() - 1), 1);
                    }
                }
                #[cfg(target_arch = "x86_64")]
                // SAFETY: a fence has no memory operands.
                unsafe {
                    core::arch::x86_64::_mm_sfence()
                };
                0
            }
        }
    }

    /// After the device wrote `frame` (a received buffer, before anything reads it): what
    /// the receive side's mode does to the buffer the device wrote — on the seed's platform
    /// before the DMA, with the same effect here (the CPU's reads then miss). CH cleans and
    /// invalidates the frame's lines, the whole-cache clean walks its region too, CS reads
    /// junk over the largest frame, NC evicts the frame (the device's write reached memory).
    pub fn after_device_writes(&self, frame: &[u8]) -> u64 {
        match self.modes.recv {
            None => 0,
            Some(Mode::Ch) | Some(Mode::Nc) => {
                clean_slice(self.ops, frame);
                0
            }
            Some(Mode::ChAll) => {
                clean_slice(self.ops, &self.region);
                clean_slice(self.ops, frame);
                0
            }
            Some(Mode::Cs) => self.soft_clean_of(frame, MAX_FRAME),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_as_the_cli_takes_them() {
        let m: BufferModes = "send=nc,recv=ch".parse().unwrap();
        assert_eq!(m.send, Some(Mode::Nc));
        assert_eq!(m.recv, Some(Mode::Ch));
        assert_eq!(m.to_string(), "send=nc,recv=ch");
        let m: BufferModes = "recv=ch-all".parse().unwrap();
        assert_eq!((m.send, m.recv), (None, Some(Mode::ChAll)));
        assert_eq!("".parse::<BufferModes>().unwrap(), BufferModes::default());
        assert!(matches!(
            "send=xx".parse::<BufferModes>(),
            Err(ModesError::UnknownMode(_))
        ));
        assert!(matches!(
            "sned=nc".parse::<BufferModes>(),
            Err(ModesError::BadPart(_))
        ));
        assert!(matches!(
            "nc".parse::<BufferModes>(),
            Err(ModesError::BadPart(_))
        ));
    }

    #[test]
    fn copies_carry_the_bytes_at_any_alignment() {
        let ops = CpuOps::cached();
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in [0usize, 1, 15, 16, 63] {
            for len in [0usize, 1, 17, 64, 1500, 4999 - off] {
                let mut dst = vec![0u8; 5000];
                copy_nt_slice(ops, &mut dst[off..off + len], &src[..len]);
                assert_eq!(&dst[off..off + len], &src[..len]);
                let mut back = vec![0u8; len];
                copy_streaming_evict(ops, &mut back, &dst[off..off + len]);
                assert_eq!(back, &src[..len]);
            }
        }
    }

    #[test]
    fn maintenance_leaves_frames_unchanged_in_every_mode() {
        let frame: Vec<u8> = (0..1514u32).map(|i| i as u8).collect();
        let modes = [
            None,
            Some(Mode::Ch),
            Some(Mode::ChAll),
            Some(Mode::Cs),
            Some(Mode::Nc),
        ];
        let geometry = CacheGeometry {
            l1d: 32 << 10,
            l2: 256 << 10,
            l2_ways: 4,
        };
        for send in modes {
            for recv in modes {
                let m = Maintenance::new(BufferModes { send, recv }, geometry);
                let copy = frame.clone();
                m.before_device_reads(&copy, 66);
                m.after_device_writes(&copy);
                assert_eq!(copy, frame);
            }
        }
    }
}
