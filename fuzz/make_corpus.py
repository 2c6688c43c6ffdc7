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

def udp(sport, dport, data):
    u = bytearray(struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data)
    pseudo = PEER_IP + OUR_IP + struct.pack("!BBH", 0, 17, len(u))
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

corpus = {
    "udp_frame": rec(ip(udp(5000, 7, b"hello shmnet"))) + b"\xf8",
    "arp_request": rec(arp),
    "icmp_echo": rec(ip(bytes(icmp), proto=1)),
    "udp_closed_port": rec(ip(udp(5000, 99, b"x"))),
    "frags_in_order": b"".join(rec(f) for f in frags(dg, 1480, 7)) + b"\xf8",
    "frags_reversed_dup": b"".join(rec(f) for f in reversed(frags(dg, 1024, 8) + frags(dg, 1024, 8)[:1])) + b"\xf8",
    "frags_overlap_timeout": b"".join(rec(f) for f in frags(dg, 1480, 9)[:2] + frags(dg, 1024, 9)[1:2]) + b"\xf0\xff\xf0\xff",
    "send_and_arp": b"\xfd\x40" + rec(arp) + b"\xfc\x10",
}
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "stack_rx")
os.makedirs(here, exist_ok=True)
for name, data in corpus.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(data)
print("wrote", len(corpus), "files to", here)
