"""TCP edge cases against a running shmnet over a real wire, with segments crafted by scapy.

Run by crates/shmnet/tests/tcp_scapy.rs inside a network namespace where shmnet serves
`--tcp-echo 7` on one end of a veth pair (SERVER_IP, SERVER_MAC) and this script plays a
peer on the other end (IFACE) with an address and MAC of its own that the kernel does not
own: the kernel never answers for it (no stray RSTs), and this script answers ARP itself.

Each case prints one line `ok NAME` or exits non-zero with `FAIL NAME: why`. Usage:
    python3 tcp_edges.py IFACE SERVER_IP SERVER_MAC [CASE...]
"""

import random
import select
import socket
import sys
import time

from scapy.all import ARP, IP, TCP, Ether, Raw, raw

IFACE, SERVER_IP, SERVER_MAC = sys.argv[1], sys.argv[2], sys.argv[3]
ONLY = set(sys.argv[4:])
MY_IP = SERVER_IP.rsplit(".", 1)[0] + ".3"
MY_MAC = "02:00:00:00:5c:03"
PORT = 7

sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
sock.bind((IFACE, 0))
sock.setblocking(False)


class Fail(Exception):
    pass


def send(pkt):
    sock.send(raw(Ether(src=MY_MAC, dst=SERVER_MAC) / pkt))


def recv(timeout, sport=None, until=None):
    """TCP segments from the server to us within `timeout` s (answering ARP meanwhile);
    stops early once `until(segments)` is true."""
    got = []
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return got
        r, _, _ = select.select([sock], [], [], left)
        if not r:
            continue
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            continue
        p = Ether(data)
        if ARP in p and p[ARP].op == 1 and p[ARP].pdst == MY_IP:
            sock.send(raw(Ether(src=MY_MAC, dst=p.src) / ARP(
                op=2, hwsrc=MY_MAC, psrc=MY_IP, hwdst=p[ARP].hwsrc, pdst=p[ARP].psrc)))
            continue
        if IP in p and TCP in p and p[IP].dst == MY_IP and p[IP].src == SERVER_IP:
            if sport is None or p[TCP].dport == sport:
                got.append(p[TCP])
                if until and until(got):
                    return got


def opts_of(seg):
    return dict((k, v) for k, v in seg.options)


def flags(seg):
    return str(seg.flags)


def check(cond, why):
    if not cond:
        raise Fail(why)


class Conn:
    """Our side of one connection: sequence numbers, options, what came back."""

    def __init__(self, sport=None, isn=None, options=None, window=65535):
        self.sport = sport or random.randrange(20000, 60000)
        self.isn = random.randrange(0, 1 << 32) if isn is None else isn
        self.seq = self.isn
        self.options = [("MSS", 1460)] if options is None else options
        self.window = window
        self.ack = 0
        self.synack = None

    def seg(self, flags, payload=b"", seq=None, ack=None, window=None, options=None):
        t = TCP(sport=self.sport, dport=PORT, flags=flags,
                seq=self.seq if seq is None else seq,
                ack=self.ack if ack is None else ack,
                window=self.window if window is None else window,
                options=options or [])
        p = IP(src=MY_IP, dst=SERVER_IP) / t
        if payload:
            p = p / Raw(payload)
        return p

    def open(self, final_window=None):
        send(self.seg("S", options=self.options, ack=0))
        r = recv(2, self.sport, until=lambda g: any(flags(s) == "SA" for s in g))
        sa = [s for s in r if flags(s) == "SA"]
        check(sa, "no SYN-ACK")
        self.synack = sa[0]
        check(self.synack.ack == (self.isn + 1) % (1 << 32), "SYN-ACK acks the SYN")
        self.seq = (self.isn + 1) % (1 << 32)
        self.ack = (self.synack.seq + 1) % (1 << 32)
        send(self.seg("A", window=final_window))
        return self

    def data(self, payload, **kw):
        """Sends `payload` in segments of at most 1,400 bytes (a wire of MTU 1,500)."""
        for i in range(0, len(payload), 1400):
            part = payload[i:i + 1400]
            send(self.seg("PA", part, **kw))
            self.seq = (self.seq + len(part)) % (1 << 32)
            kw.pop("seq", None)

    def collect(self, want, timeout=3, window=None):
        """Reads the echo of `want` bytes, acknowledging as it comes; returns (bytes,
        segments)."""
        got = b""
        segs = []
        end = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < end:
            for s in recv(0.05, self.sport):
                segs.append(s)
                body = bytes(s.payload) if s.payload else b""
                if body and s.seq == self.ack:
                    got += body
                    self.ack = (self.ack + len(body)) % (1 << 32)
                if body:
                    send(self.seg("A", window=window))
        return got, segs

    def echoes(self, n, seed, why):
        """Sends `n` bytes and checks they all come back."""
        data = pattern(n, seed)
        self.data(data)
        got, _ = self.collect(len(data))
        check(got == data, f"{why}: {len(got)} of {n} bytes came back")

    def close(self):
        send(self.seg("FA"))
        self.seq = (self.seq + 1) % (1 << 32)
        r = recv(2, self.sport, until=lambda g: any("F" in flags(s) for s in g))
        fins = [s for s in r if "F" in flags(s)]
        check(fins, "the echo closes after we do")
        self.ack = (fins[0].seq + len(fins[0].payload or b"") + 1) % (1 << 32)
        send(self.seg("A"))


def pattern(n, seed=1):
    rnd = random.Random(seed)
    return bytes(rnd.randrange(256) for _ in range(n))


# ---------------------------------------------------------------- cases

def case_handshake_options_and_echo():
    c = Conn(options=[("MSS", 1460), ("WScale", 7), ("SAckOK", b""),
                      ("Timestamp", (12345, 0))]).open()
    o = opts_of(c.synack)
    check(o.get("MSS") == 1460, f"our MSS offered: {o}")
    check("WScale" in o and "SAckOK" in o, f"window scale and SACK offered back: {o}")
    check(o.get("Timestamp", (0, 0))[1] == 12345, f"our timestamp echoed: {o}")
    data = pattern(20000)
    c.data(data[:10000])
    c.data(data[10000:])
    got, _ = c.collect(len(data))
    check(got == data, f"echo of 20000 bytes: got {len(got)}")
    c.close()


def case_no_options_means_mss_536():
    c = Conn(options=[]).open()
    o = opts_of(c.synack)
    check("SAckOK" not in o and "Timestamp" not in o, f"nothing offered we did not: {o}")
    data = pattern(5000, 2)
    c.data(data)
    got, segs = c.collect(len(data))
    check(got == data, f"echo: got {len(got)}")
    sizes = [len(s.payload) for s in segs if s.payload]
    check(max(sizes) <= 536, f"RFC 9293's default MSS of 536 kept: {sizes}")
    c.close()


def case_peer_mss_536():
    c = Conn(options=[("MSS", 536)]).open()
    data = pattern(6000, 3)
    c.data(data[:1400])
    c.data(data[1400:2800])
    c.data(data[2800:4200])
    c.data(data[4200:])
    got, segs = c.collect(len(data))
    check(got == data, f"echo: got {len(got)}")
    sizes = [len(s.payload) for s in segs if s.payload]
    check(max(sizes) <= 536, f"segments within the peer's MSS: {sizes}")
    c.close()


def flight(c, data, window):
    """Sends `data` for echo, then reads what the server sends without acknowledging for a
    moment: the bytes in flight (the highest sent, less what we acknowledged; probes and
    retransmissions resend the same bytes) are bounded by the window we offered."""
    c.data(data, window=window)
    segs = recv(0.5, c.sport)
    return max([((s.seq + len(s.payload)) - c.ack) % (1 << 32) for s in segs if s.payload],
               default=0)


def case_window_scale_0_and_14():
    # Scale 0: a window field of 1000 means 1000 bytes.
    c = Conn(options=[("MSS", 1460), ("WScale", 0)]).open(final_window=1000)
    sent = flight(c, pattern(8000, 4), 1000)
    check(0 < sent <= 1000, f"with scale 0, at most 1000 bytes out: {sent}")
    send(c.seg("R", seq=c.seq))
    # Scale 14: a window field of 1 means 16384 bytes.
    c = Conn(options=[("MSS", 1460), ("WScale", 14)]).open(final_window=1)
    sent = flight(c, pattern(40000, 5), 1)
    check(1000 < sent <= 16384, f"with scale 14, a field of 1 allows 16384 bytes: {sent}")
    send(c.seg("R", seq=c.seq))


def case_zero_window_then_open():
    c = Conn().open(final_window=0)
    data = pattern(3000, 6)
    c.data(data, window=0)
    segs = recv(1.0, c.sport)
    payload = [s for s in segs if s.payload]
    check(all(len(s.payload) <= 1 for s in payload),
          f"nothing but one-byte probes into a zero window: {[len(s.payload) for s in payload]}")
    # The window opens: everything comes.
    send(c.seg("A", window=65535))
    got, _ = c.collect(len(data))
    check(got == data, f"after the window opened: got {len(got)}")
    c.close()


def case_rst_in_syn_received():
    c = Conn()
    send(c.seg("S", options=c.options, ack=0))
    r = recv(2, c.sport, until=lambda g: any(flags(s) == "SA" for s in g))
    check(any(flags(s) == "SA" for s in r), "SYN-ACK")
    send(c.seg("R", seq=(c.isn + 1) % (1 << 32), ack=0))
    # The half-open connection is gone: completing the handshake now draws a RST.
    sa = [s for s in r if flags(s) == "SA"][0]
    c.seq, c.ack = (c.isn + 1) % (1 << 32), (sa.seq + 1) % (1 << 32)
    send(c.seg("A"))
    r = recv(1, c.sport, until=lambda g: any("R" in flags(s) for s in g))
    check(any("R" in flags(s) for s in r), f"RST for the ACK of a reset handshake: {r}")


def case_rst_in_established():
    c = Conn().open()
    # In the window but not exact: a challenge ACK, and the connection lives.
    send(c.seg("R", seq=(c.seq + 100) % (1 << 32), ack=0))
    r = recv(1, c.sport, until=lambda g: len(g) > 0)
    check(r and flags(r[0]) == "A" and r[0].ack == c.seq, f"a challenge ACK: {r}")
    c.echoes(1000, 7, "the connection survived the blind RST")
    # Exact: reset.
    send(c.seg("R"))
    c.data(b"after")
    r = recv(1, c.sport, until=lambda g: any("R" in flags(s) for s in g))
    check(any("R" in flags(s) for s in r), f"data after an exact RST draws a RST: {r}")


def case_syn_on_established_is_challenged():
    c = Conn().open()
    send(c.seg("S", seq=(c.seq + 5000) % (1 << 32), ack=0, options=c.options))
    r = recv(1, c.sport, until=lambda g: len(g) > 0)
    check(r and flags(r[0]) == "A" and r[0].ack == c.seq, f"a challenge ACK: {r}")
    c.echoes(500, 8, "the connection survived the SYN")
    c.close()


def case_ack_of_unsent_data_is_refused():
    c = Conn().open()
    c.data(b"x" * 100, ack=(c.ack + 100000) % (1 << 32))
    r = recv(1, c.sport, until=lambda g: len(g) > 0)
    check(r and not r[0].payload, f"an ACK back, no echo of the segment: {r}")
    # The same bytes again with a sane ACK are taken (the refused ones were not).
    c.seq = (c.seq - 100) % (1 << 32)
    c.data(b"y" * 100)
    got, _ = c.collect(100)
    check(got == b"y" * 100, f"echo of the accepted bytes only: {got[:10]!r}")
    c.close()


def case_out_of_window_data_is_not_delivered():
    c = Conn().open()
    c.data(b"z" * 100, seq=(c.seq + (1 << 30)) % (1 << 32))
    c.seq = (c.seq - 100) % (1 << 32)
    r = recv(1, c.sport)
    check(all(not s.payload for s in r), f"nothing echoed of a blind injection: {r}")
    c.echoes(300, 9, "the stream is undisturbed")
    c.close()


def case_bad_offsets_and_options_are_refused():
    c = Conn().open()
    ip = IP(src=MY_IP, dst=SERVER_IP)
    # A data offset past the segment's end; one below 5; an option of length 0 and one
    # running past the header.
    for t in [TCP(sport=c.sport, dport=PORT, flags="A", seq=c.seq, ack=c.ack, dataofs=15),
              TCP(sport=c.sport, dport=PORT, flags="A", seq=c.seq, ack=c.ack, dataofs=3),
              TCP(sport=c.sport, dport=PORT, flags="A", seq=c.seq, ack=c.ack,
                  options=[(2, b"")]),
              TCP(sport=c.sport, dport=PORT, flags="A", seq=c.seq, ack=c.ack, dataofs=6)
              / Raw(b"\x08\x0a\x00\x00")]:
        send(ip / t)
    c.echoes(700, 10, "the connection works after malformed segments")
    c.close()


def case_sequence_wrap():
    c = Conn(isn=(1 << 32) - 3000).open()
    data = pattern(12000, 11)
    for i in range(0, len(data), 1400):
        c.data(data[i:i + 1400])
    got, _ = c.collect(len(data))
    check(got == data, f"echo across the wrap: got {len(got)}")
    c.close()


CASES = [(n[5:], f) for n, f in sorted(globals().items()) if n.startswith("case_")]

failed = 0
for name, f in CASES:
    if ONLY and name not in ONLY:
        continue
    try:
        f()
        print("ok", name, flush=True)
    except Fail as e:
        print(f"FAIL {name}: {e}", flush=True)
        failed += 1
sys.exit(1 if failed else 0)
