//! The XDP program that steers shmnet's frames to its AF_XDP socket, and the three `bpf(2)`
//! objects behind it: an `XSKMAP` (queue index → socket), the program, and the link that
//! attaches it to the interface.
//!
//! # The program
//!
//! Assembled here ([`steering`]) from a few dozen instructions. For each frame:
//!
//! - with an IPv4 address: an IPv4 packet (EtherType 0x0800, at least 34 bytes) whose
//!   destination is shmnet's address, or an ARP packet (0x0806, at least 42 bytes) whose
//!   target protocol address is shmnet's;
//! - with an IPv6 address: an IPv6 packet (0x86DD, at least 54 bytes) whose destination is
//!   shmnet's address, or a neighbour solicitation (ICMPv6 type 135 right after the fixed
//!   header, at least 78 bytes) whose target is shmnet's address — however it is sent
//!   (to the solicited-node multicast group, or unicast to probe a cached entry); a
//!   solicitation for one of the kernel's addresses that shares the group stays the kernel's;
//!
//! is redirected to the socket in `XSKMAP[rx_queue_index]` (`bpf_redirect_map`, with
//! `XDP_PASS` as the action when that slot is empty — a queue shmnet does not serve, or a
//! socket not bound yet). Everything else — the kernel's own addresses, other EtherTypes,
//! IPv6 with extension headers before a solicitation, runts — is passed to the kernel
//! untouched. So shmnet and the kernel share one interface, each answering for its own
//! address (they share its MAC address, as two IP addresses on one NIC do).
//!
//! Broadcast and multicast frames other than those solicitations go to the kernel (a frame
//! cannot go to both here).
//!
//! # Why assembled here, not compiled and loaded with a crate
//!
//! The usual way is C compiled by clang to a BPF ELF object, loaded with libbpf, libxdp or
//! the `aya` crate. Every one of those loads an ELF object: clang (an LLVM with the BPF
//! backend) would become a build dependency of the whole workspace for two dozen instructions
//! that never change shape, and libxdp's dispatcher adds a second program and a pinned
//! directory that outlives a killed driver. The program's one parameter — shmnet's
//! address — is an immediate here, so there is no map to keep in step with it. What this
//! module does instead is four `bpf(2)` commands (map create, program load, map update, link
//! create), each a fixed-layout `union bpf_attr` member, with the verifier's log returned on
//! a refusal. The link is what makes a `kill -9` safe: it belongs to the driver's fd, so the
//! kernel detaches the program when the process dies, and the interface is the kernel's
//! again.

// The instruction encoding (register nibbles) and the immediates below are laid out for a
// little-endian host, as BPF on x86-64 and arm64 is.
#[cfg(target_endian = "big")]
compile_error!("the XDP steering program is assembled for little-endian hosts");

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `bpf(2)` commands used here (`enum bpf_cmd`).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
#[cfg(test)]
const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// `BPF_MAP_TYPE_ARRAY`.
const MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_XSKMAP`.
const MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
const PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP`, the link's attach type.
const ATTACH_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, in the kernel's receive path after the skb is built.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, in the device driver's receive path.
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `XDP_DROP`.
const XDP_DROP: i32 = 1;
/// `XDP_PASS`.
const XDP_PASS: i32 = 2;
/// `BPF_FUNC_map_lookup_elem`.
const HELPER_MAP_LOOKUP: i32 = 1;
/// `BPF_FUNC_redirect_map`.
const HELPER_REDIRECT_MAP: i32 = 51;
/// `BPF_PSEUDO_MAP_FD`: a 64-bit immediate load whose value is a map's fd.
const PSEUDO_MAP_FD: u8 = 1;

/// One BPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

/// The opcodes the program uses (class | mode/op | size/source, as in `linux/bpf.h`).
mod op {
    /// `BPF_LDX | BPF_MEM | BPF_W`.
    pub const LDX_W: u8 = 0x61;
    /// `BPF_LDX | BPF_MEM | BPF_H`.
    pub const LDX_H: u8 = 0x69;
    /// `BPF_LDX | BPF_MEM | BPF_B`.
    pub const LDX_B: u8 = 0x71;
    /// `BPF_ALU64 | BPF_MOV | BPF_X`.
    pub const MOV64_REG: u8 = 0xbf;
    /// `BPF_ALU64 | BPF_MOV | BPF_K`.
    pub const MOV64_IMM: u8 = 0xb7;
    /// `BPF_ALU64 | BPF_ADD | BPF_K`.
    pub const ADD64_IMM: u8 = 0x07;
    /// `BPF_JMP | BPF_JGT | BPF_X`.
    pub const JGT_REG: u8 = 0x2d;
    /// `BPF_JMP32 | BPF_JEQ | BPF_K`: compares the low 32 bits.
    pub const JEQ32_IMM: u8 = 0x16;
    /// `BPF_JMP32 | BPF_JNE | BPF_K`.
    pub const JNE32_IMM: u8 = 0x56;
    /// `BPF_JMP | BPF_JEQ | BPF_K`.
    pub const JEQ_IMM: u8 = 0x15;
    /// `BPF_ST | BPF_MEM | BPF_W`: stores an immediate.
    pub const ST_W: u8 = 0x62;
    /// `BPF_STX | BPF_ATOMIC | BPF_DW` (with `imm` `BPF_ADD`: an atomic add).
    pub const ATOMIC_DW: u8 = 0xdb;
    /// `BPF_JMP | BPF_JA`.
    pub const JA: u8 = 0x05;
    /// `BPF_LD | BPF_IMM | BPF_DW`: two instruction slots.
    pub const LD_IMM64: u8 = 0x18;
    /// `BPF_JMP | BPF_CALL`.
    pub const CALL: u8 = 0x85;
    /// `BPF_JMP | BPF_EXIT`.
    pub const EXIT: u8 = 0x95;
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (dst & 0xf) | (src << 4),
        off,
        imm,
    }
}

/// A 16-bit network-order field as the program's little-endian load sees it.
fn le16(be: u16) -> i32 {
    i32::from(u16::from_le_bytes(be.to_be_bytes()))
}

/// Four network-order bytes as the program's 32-bit little-endian load sees them.
fn le32(b: [u8; 4]) -> i32 {
    i32::from_le_bytes(b)
}

/// The addresses a steering program takes frames for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addresses {
    /// shmnet's IPv4 address (IPv4 and ARP for it), if it has one.
    pub v4: Option<Ipv4Addr>,
    /// shmnet's IPv6 address (IPv6 and neighbour solicitations for it), if it has one.
    pub v6: Option<Ipv6Addr>,
}

/// What the program does with a frame it takes.
#[derive(Clone, Copy, Debug)]
pub enum OnMatch {
    /// `bpf_redirect_map` to the XSKMAP with this fd.
    Redirect(RawFd),
    /// Returns this verdict (for tests, which run the program on frames with
    /// `BPF_PROG_TEST_RUN` and read which it took).
    #[cfg(test)]
    Return(i32),
}

/// Jump targets of [`Asm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    Ipv4,
    Arp,
    Ipv6,
    Solicitation,
    Pass,
    Take,
}

/// A tiny assembler: instructions, and jumps to labels resolved at the end.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    /// Jumps to patch: the instruction's index and where it goes.
    fixups: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn put(&mut self, i: Insn) {
        self.insns.push(i);
    }
    /// A jump (`code` with `dst`/`imm` or `dst`/`src`) to `to`.
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.fixups.push((self.insns.len(), to));
        self.put(insn(code, dst, src, 0, imm));
    }
    fn label(&mut self, l: Label) {
        self.labels.push((l, self.insns.len()));
    }
    /// `if data + len > data_end goto PASS` (r2 data, r3 data_end, r4 scratch): after it,
    /// the verifier lets the program read the frame's first `len` bytes.
    fn need(&mut self, len: i32) {
        self.put(insn(op::MOV64_REG, 4, 2, 0, 0));
        self.put(insn(op::ADD64_IMM, 4, 0, 0, len));
        self.jump(op::JGT_REG, 4, 3, 0, Label::Pass);
    }
    /// `if the 16 bytes at frame offset `at` != addr goto `miss``.
    fn compare_v6(&mut self, at: i16, addr: Ipv6Addr, miss: Label) {
        let o = addr.octets();
        for k in 0..4 {
            let w = [o[4 * k], o[4 * k + 1], o[4 * k + 2], o[4 * k + 3]];
            self.put(insn(op::LDX_W, 5, 2, at + 4 * k as i16, 0));
            self.jump(op::JNE32_IMM, 5, 0, le32(w), miss);
        }
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, to) in std::mem::take(&mut self.fixups) {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map(|(_, i)| *i)
                .expect("every label jumped to is placed");
            self.insns[at].off = (target as i64 - at as i64 - 1) as i16;
        }
        self.insns
    }
}

/// The steering program for shmnet's addresses `addrs`, doing `on_match` with the frames
/// for them. See [the module docs](self).
///
/// Registers: r1 the `xdp_md` context on entry, r6 a copy of it, r2/r3 the frame's start and
/// end, r4 scratch for bounds, r5 the loaded field.
pub fn steering(addrs: Addresses, on_match: OnMatch) -> Vec<Insn> {
    // Offsets inside the frame.
    const ETHERTYPE: i16 = 12;
    const IPV4_DST: i16 = 14 + 16;
    const ARP_TPA: i16 = 14 + 24;
    const IPV6_NEXT: i16 = 14 + 6;
    const IPV6_DST: i16 = 14 + 24;
    const ICMPV6_TYPE: i16 = 14 + 40;
    const NS_TARGET: i16 = 14 + 40 + 8;
    let mut a = Asm::default();
    a.put(insn(op::MOV64_REG, 6, 1, 0, 0));
    a.put(insn(op::LDX_W, 2, 1, 0, 0)); // r2 = ctx->data
    a.put(insn(op::LDX_W, 3, 1, 4, 0)); // r3 = ctx->data_end
    a.need(14);
    a.put(insn(op::LDX_H, 5, 2, ETHERTYPE, 0));
    if addrs.v4.is_some() {
        a.jump(op::JEQ32_IMM, 5, 0, le16(0x0800), Label::Ipv4);
        a.jump(op::JEQ32_IMM, 5, 0, le16(0x0806), Label::Arp);
    }
    if addrs.v6.is_some() {
        a.jump(op::JEQ32_IMM, 5, 0, le16(0x86dd), Label::Ipv6);
    }
    a.jump(op::JA, 0, 0, 0, Label::Pass);
    if let Some(ip) = addrs.v4 {
        let ip = le32(ip.octets());
        a.label(Label::Ipv4);
        a.need(14 + 20);
        a.put(insn(op::LDX_W, 5, 2, IPV4_DST, 0));
        a.jump(op::JEQ32_IMM, 5, 0, ip, Label::Take);
        a.jump(op::JA, 0, 0, 0, Label::Pass);
        a.label(Label::Arp);
        a.need(14 + 28);
        a.put(insn(op::LDX_W, 5, 2, ARP_TPA, 0));
        a.jump(op::JEQ32_IMM, 5, 0, ip, Label::Take);
        a.jump(op::JA, 0, 0, 0, Label::Pass);
    }
    if let Some(ip6) = addrs.v6 {
        a.label(Label::Ipv6);
        a.need(14 + 40);
        a.compare_v6(IPV6_DST, ip6, Label::Solicitation);
        a.jump(op::JA, 0, 0, 0, Label::Take);
        // Not to shmnet's address: a neighbour solicitation for it?
        a.label(Label::Solicitation);
        a.put(insn(op::LDX_B, 5, 2, IPV6_NEXT, 0));
        a.jump(op::JNE32_IMM, 5, 0, 58, Label::Pass);
        a.need(14 + 40 + 24);
        a.put(insn(op::LDX_B, 5, 2, ICMPV6_TYPE, 0));
        a.jump(op::JNE32_IMM, 5, 0, 135, Label::Pass);
        a.compare_v6(NS_TARGET, ip6, Label::Pass);
        a.jump(op::JA, 0, 0, 0, Label::Take);
    }
    a.label(Label::Pass);
    a.put(insn(op::MOV64_IMM, 0, 0, 0, XDP_PASS));
    a.put(insn(op::EXIT, 0, 0, 0, 0));
    a.label(Label::Take);
    match on_match {
        OnMatch::Redirect(map) => {
            // To XSKMAP[ctx->rx_queue_index], or to the kernel if that slot is empty.
            a.put(insn(op::LDX_W, 2, 6, 16, 0));
            a.put(insn(op::LD_IMM64, 1, PSEUDO_MAP_FD, 0, map));
            a.put(insn(0, 0, 0, 0, 0));
            a.put(insn(op::MOV64_IMM, 3, 0, 0, XDP_PASS));
            a.put(insn(op::CALL, 0, 0, 0, HELPER_REDIRECT_MAP));
        }
        #[cfg(test)]
        OnMatch::Return(v) => a.put(insn(op::MOV64_IMM, 0, 0, 0, v)),
    }
    a.put(insn(op::EXIT, 0, 0, 0, 0));
    a.finish()
}

/// How the program runs on the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the device driver (`XDP_FLAGS_DRV_MODE`): before the kernel builds an skb.
    Native,
    /// In the kernel's generic receive path (`XDP_FLAGS_SKB_MODE`): any interface, slower.
    Generic,
}

/// Why the program could not be made or attached.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// `bpf(2)` is refused: not root, or BPF is disabled.
    #[error(
        "{what}: the kernel refused bpf(2) ({source}): AF_XDP needs root (or CAP_BPF and \
         CAP_NET_ADMIN), and a kernel with BPF enabled"
    )]
    NotPermitted {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The kernel has no XSKMAP (built without `CONFIG_XDP_SOCKETS`).
    #[error(
        "this kernel cannot make an XSKMAP ({0}): it was built without AF_XDP \
         (CONFIG_XDP_SOCKETS); use --driver af_packet:IFACE"
    )]
    NoXskMap(std::io::Error),
    /// The verifier refused the program (a bug here: its log says why).
    #[error("the kernel's verifier refused the steering program ({source}):\n{log}")]
    Refused {
        /// The error.
        source: std::io::Error,
        /// The verifier's log.
        log: String,
    },
    /// The interface already has an XDP program.
    #[error(
        "interface {iface} already has an XDP program: see `ip link show {iface}`, remove it \
         with `ip link set {iface} xdp off` (or stop the shmnet driver that holds it)"
    )]
    Busy {
        /// The interface.
        iface: String,
    },
    /// Neither mode could attach.
    #[error("attaching XDP to {iface} failed in native ({native}) and generic ({generic}) mode")]
    Attach {
        /// The interface.
        iface: String,
        /// Native mode's error.
        native: std::io::Error,
        /// Generic mode's error.
        generic: std::io::Error,
    },
    /// Another `bpf(2)` call failed.
    #[error("{what} failed: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// `union bpf_attr`, as large as any command here uses (zeroed past what a command sets,
/// which the kernel requires).
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Self {
        Self([0; 128])
    }
    fn put_u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn put_u64(&mut self, at: usize, v: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

/// Runs `bpf(cmd, attr)`.
fn bpf(cmd: libc::c_long, attr: &mut Attr) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a zero-padded `union bpf_attr` of 128 bytes whose pointers (set by the
    // callers) point at live buffers of the lengths they give; the kernel reads at most
    // `size` bytes of it and writes only into those buffers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Takes ownership of the fd a `bpf(2)` command returned.
fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned this fd to us, and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

fn refused_for_privilege(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

/// The program attached to an interface, with its map. Dropping it detaches the program
/// (the link is the only thing holding it there) and frees the map.
#[derive(Debug)]
pub struct Steering {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    mode: XdpMode,
    queues: u32,
}

impl Steering {
    /// Makes the map (for queues `0..queues`), loads the program for `addrs`, and attaches
    /// it to the interface with index `ifindex` (named `iface`, for messages): in native mode
    /// if the device can, else in generic mode.
    pub fn attach(
        iface: &str,
        ifindex: u32,
        addrs: Addresses,
        queues: u32,
    ) -> Result<Steering, ProgramError> {
        let map = create_xskmap(queues)?;
        let prog = load(&steering(addrs, OnMatch::Redirect(map.as_raw_fd())))?;
        let (link, mode) = link(iface, ifindex, &prog)?;
        Ok(Steering {
            map,
            _prog: prog,
            _link: link,
            mode,
            queues,
        })
    }

    /// Which mode the program runs in.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// Points queue `queue`'s frames at the AF_XDP socket `xsk`.
    pub fn steer_queue(&self, queue: u32, xsk: RawFd) -> Result<(), ProgramError> {
        if queue >= self.queues {
            return Err(ProgramError::Sys {
                what: "steering a queue past the map",
                source: std::io::Error::from_raw_os_error(libc::E2BIG),
            });
        }
        let key = queue;
        let value = xsk as u32;
        let mut a = Attr::new();
        a.put_u32(0, self.map.as_raw_fd() as u32)
            .put_u64(8, &key as *const u32 as u64)
            .put_u64(16, &value as *const u32 as u64)
            .put_u64(24, 0);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a)
            .map(drop)
            .map_err(|source| ProgramError::Sys {
                what: "putting the AF_XDP socket in the XSKMAP",
                source,
            })
    }
}

/// An XDP program that counts every frame it sees and drops it: what `xdp-bench drop`
/// does, for the af_xdp benchmark's ceiling — the most a sender pushes through the interface
/// when the receiver does the least (Debian's `xdp-tools` 1.3.1 cannot load `xdp-bench` on
/// Linux 6.18: its object carries a `tp_btf` program for a tracepoint this kernel no longer
/// has). Dropping it detaches the program.
#[derive(Debug)]
pub struct DropCounter {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    mode: XdpMode,
}

/// [`DropCounter`]'s program: slot 0 of the array map `map` += 1, then `XDP_DROP`.
fn drop_counter(map: RawFd) -> Vec<Insn> {
    vec![
        insn(op::ST_W, 10, 0, -4, 0), // key 0 on the stack
        insn(op::MOV64_REG, 2, 10, 0, 0),
        insn(op::ADD64_IMM, 2, 0, 0, -4),
        insn(op::LD_IMM64, 1, PSEUDO_MAP_FD, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(op::CALL, 0, 0, 0, HELPER_MAP_LOOKUP),
        insn(op::JEQ_IMM, 0, 0, 2, 0), // no slot: just drop
        insn(op::MOV64_IMM, 1, 0, 0, 1),
        insn(op::ATOMIC_DW, 0, 1, 0, 0), // *(u64 *)r0 += 1
        insn(op::MOV64_IMM, 0, 0, 0, XDP_DROP),
        insn(op::EXIT, 0, 0, 0, 0),
    ]
}

impl DropCounter {
    /// Attaches it to the interface with index `ifindex` of the calling thread's network
    /// namespace (named `iface`, for messages), natively where the device can.
    pub fn attach(iface: &str, ifindex: u32) -> Result<DropCounter, ProgramError> {
        let mut a = Attr::new();
        a.put_u32(0, MAP_TYPE_ARRAY)
            .put_u32(4, 4)
            .put_u32(8, 8)
            .put_u32(12, 1);
        let map = bpf(BPF_MAP_CREATE, &mut a)
            .map(owned)
            .map_err(|source| ProgramError::Sys {
                what: "making the drop counter's map",
                source,
            })?;
        let insns = drop_counter(map.as_raw_fd());
        let prog = load(&insns)?;
        let (link, mode) = link(iface, ifindex, &prog)?;
        Ok(DropCounter {
            map,
            _prog: prog,
            _link: link,
            mode,
        })
    }

    /// Frames counted (and dropped) so far.
    pub fn count(&self) -> u64 {
        let key = 0u32;
        let mut value = 0u64;
        let mut a = Attr::new();
        a.put_u32(0, self.map.as_raw_fd() as u32)
            .put_u64(8, &key as *const u32 as u64)
            .put_u64(16, &mut value as *mut u64 as u64);
        // An array map always has slot 0: this cannot fail but for a closed fd.
        let _ = bpf(BPF_MAP_LOOKUP_ELEM, &mut a);
        value
    }

    /// Where the program runs.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }
}

fn create_xskmap(entries: u32) -> Result<OwnedFd, ProgramError> {
    let mut a = Attr::new();
    a.put_u32(0, MAP_TYPE_XSKMAP)
        .put_u32(4, 4)
        .put_u32(8, 4)
        .put_u32(12, entries.max(1));
    // map_name at 28 (after map_type, key_size, value_size, max_entries, map_flags,
    // inner_map_fd, numa_node).
    a.0[28..28 + 11].copy_from_slice(b"shmnet_xsks");
    match bpf(BPF_MAP_CREATE, &mut a) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) if refused_for_privilege(&e) => Err(ProgramError::NotPermitted {
            what: "making the XSKMAP",
            source: e,
        }),
        Err(e) => Err(ProgramError::NoXskMap(e)),
    }
}

fn load(insns: &[Insn]) -> Result<OwnedFd, ProgramError> {
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let try_load = |log_level: u32, log: &mut [u8]| {
        let mut a = Attr::new();
        a.put_u32(0, PROG_TYPE_XDP)
            .put_u32(4, insns.len() as u32)
            .put_u64(8, insns.as_ptr() as u64)
            .put_u64(16, license.as_ptr() as u64)
            .put_u32(24, log_level)
            .put_u32(28, if log_level > 0 { log.len() as u32 } else { 0 })
            .put_u64(
                32,
                if log_level > 0 {
                    log.as_mut_ptr() as u64
                } else {
                    0
                },
            );
        // prog_name at 48 (after kern_version at 40 and prog_flags at 44).
        a.0[48..48 + 12].copy_from_slice(b"shmnet_steer");
        bpf(BPF_PROG_LOAD, &mut a)
    };
    match try_load(0, &mut log) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) if refused_for_privilege(&e) => Err(ProgramError::NotPermitted {
            what: "loading the XDP program",
            source: e,
        }),
        Err(_) => {
            // Again with the verifier's log, to say why.
            let source = match try_load(1, &mut log) {
                Ok(fd) => return Ok(owned(fd)),
                Err(e) => e,
            };
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(ProgramError::Refused {
                source,
                log: String::from_utf8_lossy(&log[..end]).into_owned(),
            })
        }
    }
}

fn link_in(ifindex: u32, prog: &OwnedFd, flags: u32) -> std::io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.put_u32(0, prog.as_raw_fd() as u32)
        .put_u32(4, ifindex)
        .put_u32(8, ATTACH_XDP)
        .put_u32(12, flags);
    bpf(BPF_LINK_CREATE, &mut a).map(owned)
}

fn link(iface: &str, ifindex: u32, prog: &OwnedFd) -> Result<(OwnedFd, XdpMode), ProgramError> {
    let busy = |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST));
    let native = match link_in(ifindex, prog, XDP_FLAGS_DRV_MODE) {
        Ok(l) => return Ok((l, XdpMode::Native)),
        Err(e) if busy(&e) => {
            return Err(ProgramError::Busy {
                iface: iface.to_string(),
            });
        }
        Err(e) => e,
    };
    match link_in(ifindex, prog, XDP_FLAGS_SKB_MODE) {
        Ok(l) => Ok((l, XdpMode::Generic)),
        Err(e) if busy(&e) => Err(ProgramError::Busy {
            iface: iface.to_string(),
        }),
        Err(generic) => Err(ProgramError::Attach {
            iface: iface.to_string(),
            native,
            generic,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 200);
    const V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x1c8);
    const TAKEN: i32 = 3; // XDP_TX, a verdict the program never gives otherwise

    fn each_variant() -> [Addresses; 3] {
        [
            Addresses {
                v4: Some(V4),
                v6: None,
            },
            Addresses {
                v4: None,
                v6: Some(V6),
            },
            Addresses {
                v4: Some(V4),
                v6: Some(V6),
            },
        ]
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_exits() {
        for addrs in each_variant() {
            let p = steering(addrs, OnMatch::Redirect(3));
            let imm64 = p
                .iter()
                .position(|x| x.code == op::LD_IMM64)
                .expect("the map");
            for (i, x) in p.iter().enumerate() {
                let is_jump =
                    matches!(x.code, op::JGT_REG | op::JEQ32_IMM | op::JNE32_IMM | op::JA);
                if is_jump {
                    let to = i as i64 + 1 + i64::from(x.off);
                    assert!((0..p.len() as i64).contains(&to), "insn {i} jumps to {to}");
                    assert!(to > i as i64, "insn {i} jumps back");
                    // Never into the second half of the 64-bit immediate load.
                    assert_ne!(to, imm64 as i64 + 1, "insn {i}");
                }
            }
            assert_eq!(p.last().unwrap().code, op::EXIT);
            // The IPv4 compare sees the octets in memory order, high bit and all.
            let v4 = u32::from_le_bytes(V4.octets()) as i32;
            assert_eq!(
                p.iter().any(|x| x.code == op::JEQ32_IMM && x.imm == v4),
                addrs.v4.is_some()
            );
            assert_eq!(
                p.iter()
                    .any(|x| x.code == op::JEQ32_IMM && x.imm == le16(0x86dd)),
                addrs.v6.is_some()
            );
        }
    }

    fn eth(ethertype: u16) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend([2, 0, 0, 0, 0, 2]);
        f.extend(ethertype.to_be_bytes());
        f
    }

    fn ipv4_to(dst: Ipv4Addr) -> Vec<u8> {
        let mut f = eth(0x0800);
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[9] = 17;
        h[16..20].copy_from_slice(&dst.octets());
        f.extend(h);
        f.extend([0u8; 8]);
        f
    }

    fn arp_for(target: Ipv4Addr) -> Vec<u8> {
        let mut f = eth(0x0806);
        let mut a = [0u8; 28];
        a[24..28].copy_from_slice(&target.octets());
        f.extend(a);
        f
    }

    fn ipv6(dst: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = eth(0x86dd);
        let mut h = [0u8; 40];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        h[6] = next;
        h[7] = 255;
        h[24..40].copy_from_slice(&dst.octets());
        f.extend(h);
        f.extend(payload);
        f
    }

    fn solicitation(target: Ipv6Addr) -> Vec<u8> {
        let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
        icmp.extend(target.octets());
        icmp.extend([1, 1, 2, 0, 0, 0, 0, 2]);
        let o = target.octets();
        let group = Ipv6Addr::new(
            0xff02,
            0,
            0,
            0,
            0,
            1,
            0xff00 | u16::from(o[13]),
            u16::from_be_bytes([o[14], o[15]]),
        );
        ipv6(group, 58, &icmp)
    }

    /// Loads `prog` and runs it once on `frame` (`BPF_PROG_TEST_RUN`): its verdict.
    fn run(prog: &OwnedFd, frame: &[u8]) -> i32 {
        let mut out = vec![0u8; frame.len() + 256];
        let mut a = Attr::new();
        a.put_u32(0, prog.as_raw_fd() as u32)
            .put_u32(8, frame.len() as u32)
            .put_u32(12, out.len() as u32)
            .put_u64(16, frame.as_ptr() as u64)
            .put_u64(24, out.as_mut_ptr() as u64)
            .put_u32(32, 1);
        bpf(BPF_PROG_TEST_RUN, &mut a).expect("BPF_PROG_TEST_RUN");
        i32::from_ne_bytes(a.0[4..8].try_into().unwrap())
    }

    /// The benchmark's drop counter counts each frame it drops.
    #[test]
    fn the_drop_counter_counts_what_it_drops() {
        const TEST: &str = "the_drop_counter_counts_what_it_drops";
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            shmnet_testkit::skip(TEST, "loading BPF programs needs root");
            return;
        }
        let mut a = Attr::new();
        a.put_u32(0, MAP_TYPE_ARRAY)
            .put_u32(4, 4)
            .put_u32(8, 8)
            .put_u32(12, 1);
        let map = owned(bpf(BPF_MAP_CREATE, &mut a).expect("an array map"));
        let prog = load(&drop_counter(map.as_raw_fd())).expect("the verifier");
        for _ in 0..3 {
            assert_eq!(run(&prog, &ipv4_to(V4)), XDP_DROP);
        }
        let (key, mut value) = (0u32, 0u64);
        let mut a = Attr::new();
        a.put_u32(0, map.as_raw_fd() as u32)
            .put_u64(8, &key as *const u32 as u64)
            .put_u64(16, &mut value as *mut u64 as u64);
        bpf(BPF_MAP_LOOKUP_ELEM, &mut a).expect("lookup");
        assert_eq!(value, 3);
    }

    /// The kernel's verifier takes every variant, and each takes exactly the frames for its
    /// addresses: run in the kernel on crafted frames.
    #[test]
    fn the_kernel_runs_it_and_it_takes_only_frames_for_shmnets_addresses() {
        const TEST: &str = "the_kernel_runs_it_and_it_takes_only_frames_for_shmnets_addresses";
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            shmnet_testkit::skip(TEST, "loading BPF programs needs root");
            return;
        }
        let other4 = Ipv4Addr::new(10, 0, 0, 3);
        let other6 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3);
        // The kernel's link-local address sharing shmnet's solicited-node group.
        let same_group = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x1c8);
        let mut echo = vec![128, 0, 0, 0, 0, 1, 0, 1];
        echo.extend([0u8; 8]);
        for addrs in each_variant() {
            let prog = load(&steering(addrs, OnMatch::Return(TAKEN))).expect("the verifier");
            let (v4, v6) = (addrs.v4.is_some(), addrs.v6.is_some());
            let mut runt_ns = solicitation(V6);
            runt_ns.truncate(14 + 40 + 20);
            let cases: Vec<(&str, Vec<u8>, bool)> = vec![
                ("IPv4 to shmnet", ipv4_to(V4), v4),
                ("IPv4 to the kernel", ipv4_to(other4), false),
                ("ARP for shmnet", arp_for(V4), v4),
                ("ARP for the kernel", arp_for(other4), false),
                ("a runt IPv4", ipv4_to(V4)[..30].to_vec(), false),
                ("IPv6 to shmnet", ipv6(V6, 58, &echo), v6),
                ("IPv6 to the kernel", ipv6(other6, 58, &echo), false),
                ("a solicitation for shmnet", solicitation(V6), v6),
                ("a solicitation for the kernel", solicitation(other6), false),
                (
                    "a solicitation for the kernel's address in shmnet's group",
                    solicitation(same_group),
                    false,
                ),
                ("a runt solicitation", runt_ns, false),
                ("another EtherType", eth(0x88cc).repeat(4), false),
            ];
            for (what, frame, taken) in cases {
                let verdict = run(&prog, &frame);
                let want = if taken { TAKEN } else { XDP_PASS };
                assert_eq!(verdict, want, "{what}, with {addrs:?}");
            }
            // The real ending: a frame it takes, for a queue with no socket in the map,
            // goes to the kernel (the redirect's fallback), never dropped.
            let map = create_xskmap(4).expect("an XSKMAP");
            let real = load(&steering(addrs, OnMatch::Redirect(map.as_raw_fd())))
                .expect("the verifier, with the redirect");
            let ours = if v4 { ipv4_to(V4) } else { solicitation(V6) };
            assert_eq!(run(&real, &ours), XDP_PASS, "{addrs:?}");
        }
    }
}
