#!/usr/bin/env python3
"""Generate the seed corpus of fuzz target stack_rx (see fuzz_targets/stack_rx.rs for the
record format). Frames go from 10.0.0.2 (02:00:00:00:00:02) to us, 10.0.0.1."""
import os, struct

OUR_MAC = bytes([2, 0, 0, 0, 0, 1]); PEER_MAC = bytes([2, 0, 0, 0, 0, 2])
OUR_IP = bytes([10, 0, 0, 1]); PEER_IP = bytes([10, 0, 0, 2])

def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff

def ip(payload, proto=17, ident=1, off=0, more=False, dst=OUR_IP):
    flags = (0x2000 if more else 0) | (off // 8)
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, flags, 64, proto, 0, PEER_IP, dst))
    h[10:12] = struct.pack("!H", csum(bytes(h)))
    return OUR_MAC + PEER_MAC + b"\x08\x00" + bytes(h) + payload

def udp(sport, dport, data, dst=OUR_IP):
    u = bytearray(struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data)
    pseudo = PEER_IP + dst + struct.pack("!BBH", 0, 17, len(u))
    c = csum(pseudo + bytes(u)) or 0xffff
    u[6:8] = struct.pack("!H", c)
    return bytes(u)

def rec(frame):
    return b"\x00" + struct.pack("<H", len(frame)) + frame

def frags(dg, chunk, ident):
    out, off = [], 0
    while off < len(dg):
        end = min(off + chunk, len(dg))
        out.append(ip(dg[off:end], ident=ident, off=off, more=end < len(dg)))
        off = end
    return out

arp = b"\xff" * 6 + PEER_MAC + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + PEER_MAC + PEER_IP + b"\0" * 6 + OUR_IP
icmp = bytearray(struct.pack("!BBHHH", 8, 0, 0, 0x1234, 1) + bytes(range(56)))
icmp[2:4] = struct.pack("!H", csum(bytes(icmp)))
payload = bytes((i * 31 + 7) & 0xff for i in range(4000))
dg = udp(5000, 7, payload)

def tcp(sport, dport, seq, ack, flags, data=b"", opts=b""):
    hl = 20 + len(opts)
    t = bytearray(struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (hl // 4) << 4, flags, 65535, 0, 0) + opts + data)
    pseudo = PEER_IP + OUR_IP + struct.pack("!BBH", 0, 6, len(t))
    t[16:18] = struct.pack("!H", csum(pseudo + bytes(t)))
    return bytes(t)

GROUP = bytes([239, 1, 2, 3]); ALL_SYSTEMS = bytes([224, 0, 0, 1])

def to_group(frame, group):
    """`frame` with its Ethernet destination the group's (01:00:5e and the low 23 bits)."""
    return bytes([1, 0, 0x5e, group[1] & 0x7f, group[2], group[3]]) + frame[6:]

igmp_query = bytearray(struct.pack("!BBH4s", 0x11, 100, 0, b"\0" * 4))
igmp_query[2:4] = struct.pack("!H", csum(bytes(igmp_query)))
igmp_v3_query = bytearray(struct.pack("!BBH4sBBH", 0x11, 100, 0, GROUP, 2, 125, 0))
igmp_v3_query[2:4] = struct.pack("!H", csum(bytes(igmp_v3_query)))

SYN, ACK, FIN, RST, PSH = 0x02, 0x10, 0x01, 0x04, 0x08
syn_opts = struct.pack("!BBH", 2, 4, 1460) + b"\x01\x03\x03\x07"

corpus = {
    "tcp_syn": rec(ip(tcp(40000, 7, 1000, 0, SYN, opts=syn_opts), proto=6)) + b"\xf8",
    "tcp_syn_closed_port": rec(ip(tcp(40000, 99, 1000, 0, SYN), proto=6)),
    "tcp_handshake_guess_data_fin": b"".join(rec(ip(t, proto=6)) for t in [
        tcp(40001, 7, 5000, 0, SYN, opts=syn_opts),
        tcp(40001, 7, 5001, 1, ACK),
        tcp(40001, 7, 5001, 1, ACK | PSH, b"hello over tcp"),
        tcp(40001, 7, 5015, 1, ACK | FIN),
        tcp(40001, 7, 5001, 1, RST),
    ]) + b"\xfa\xf0\x05\xfb",
    "udp_frame": rec(ip(udp(5000, 7, b"hello shmnet"))) + b"\xf8",
    "arp_request": rec(arp),
    "icmp_echo": rec(ip(bytes(icmp), proto=1)),
    "udp_closed_port": rec(ip(udp(5000, 99, b"x"))),
    "frags_in_order": b"".join(rec(f) for f in frags(dg, 1480, 7)) + b"\xf8",
    "frags_reversed_dup": b"".join(rec(f) for f in reversed(frags(dg, 1024, 8) + frags(dg, 1024, 8)[:1])) + b"\xf8",
    "frags_overlap_timeout": b"".join(rec(f) for f in frags(dg, 1480, 9)[:2] + frags(dg, 1024, 9)[1:2]) + b"\xf0\xff\xf0\xff",
    "send_and_arp": b"\xfd\x40" + rec(arp) + b"\xfc\x10",
    "multicast_udp_and_loop": rec(to_group(ip(udp(5000, 7, b"to the group", GROUP), dst=GROUP), GROUP)) + b"\xff\x02\xf8",
    "igmp_queries": rec(to_group(ip(bytes(igmp_query), proto=2, dst=ALL_SYSTEMS), ALL_SYSTEMS))
        + rec(to_group(ip(bytes(igmp_v3_query), proto=2, dst=GROUP), GROUP)) + b"\xf0\x70",
}
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "stack_rx")
os.makedirs(here, exist_ok=True)
for name, data in corpus.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(data)
print("wrote", len(corpus), "files to", here)
