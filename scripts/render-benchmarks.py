#!/usr/bin/env python3
"""Renders docs/benchmarks.md from the JSON that scripts/bench-all collected in DIR.

Every figure on the page is the median of the runs with its range beside it when there was
more than one run; every verdict is counted over the runs ("met in 2 of 3 runs"), each run
judged against its own baseline. Nothing here is typed in by hand: change the benchmark or
this renderer, then rerun scripts/bench-all.

    python3 scripts/render-benchmarks.py DIR > docs/benchmarks.md
"""

import json
import statistics
import sys
from pathlib import Path


def load_runs(d, name):
    runs = []
    for p in sorted(d.glob(f"{name}-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1])):
        text = p.read_text().strip()
        if not text:
            raise SystemExit(f"render-benchmarks: {p} is empty: rerun scripts/bench-all")
        runs.append(json.loads(text))
    if not runs:
        raise SystemExit(f"render-benchmarks: no {name}-*.json in {d}: rerun scripts/bench-all")
    return runs


def num(x, digits):
    if x is None:
        return "—"
    if digits == "k":
        return si(x)
    s = f"{x:,.{digits}f}"
    return s


def si(x):
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e4:
        return f"{x / 1e3:.0f} k"
    return f"{x:,.0f}"


def fig(values, digits=1):
    """Median of the runs' values, with [min–max] when there is more than one."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "—"
    med = statistics.median(vals)
    if len(vals) == 1:
        return num(med, digits)
    return f"{num(med, digits)} [{num(min(vals), digits)}–{num(max(vals), digits)}]"


def ratios_over_runs(runs, num_of, den_of):
    """Each run's numerator over the same run's denominator; runs missing either are left
    out (never a numerator of one run over another's denominator)."""
    out = []
    for r in runs:
        a, b = num_of(r), den_of(r)
        if a is not None and b:
            out.append(a / b)
    return out


def placements(targets):
    """How each target's run placed the VM's two vCPUs (docs/netbench.md): "near" or "far",
    told apart by the round trips themselves. Sorted, the widest gap between neighbours splits
    near from far when it is at least 2x (the placements seen differ by 4x or more; noise
    within one by well under 2x); "one" when there is no such jump, "?" where no round trip
    was measured."""
    rtts = sorted(t["core_rtt_ns"] for t in targets if t.get("core_rtt_ns"))
    split = None
    if len(rtts) >= 2:
        gap, at = max((b / a, b) for a, b in zip(rtts, rtts[1:]) if a > 0)
        if gap >= 2.0:
            split = at

    def placement(t):
        if not t.get("core_rtt_ns"):
            return "?"
        if split is None:
            # No jump between these runs: one placement, whichever it was (the round trip
            # column says which).
            return "one"
        return "far" if t["core_rtt_ns"] >= split else "near"
    return placement


def judged_rows(ts, placement, head, measured_digits, required):
    """Table rows for one target over the runs: one per placement its judged runs ran in,
    and one for the runs not judged (their cells straddled a change of placement)."""
    out = []
    judged = [x for x in ts if x.get("judged", True)]
    for where in sorted({placement(x) for x in judged}, key=lambda p: (p != "near", p)):
        jt = [x for x in judged if placement(x) == where]
        out.append(head + [where, fig([x["core_rtt_ns"] for x in jt if x.get("core_rtt_ns")], 0),
                           fig([x["measured"] for x in jt], measured_digits), required,
                           verdict([x["met"] for x in jt])])
    unjudged = [x for x in ts if not x.get("judged", True)]
    if unjudged:
        out.append(head + ["changed", "—", fig([x["measured"] for x in unjudged], measured_digits),
                           required, f"not judged in {len(unjudged)} of {len(ts)} runs"])
    return out


def verdict(oks, runs=None):
    """Counted over the runs that measured it; says so when some did not."""
    n, k = len(oks), sum(1 for ok in oks if ok)
    if runs is not None and n < runs:
        return f"met in {k} of the {n} runs (of {runs}) that measured it"
    if n == 1:
        return "met" if k else "not met"
    if k == n:
        return f"met in all {n} runs"
    if k == 0:
        return f"not met in any of {n} runs"
    return f"met in {k} of {n} runs"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def header(meta, seconds):
    m = meta
    load = m["load_before"]
    spread = (
        "Each figure is the median of the runs, with the range over the runs in brackets."
        if m["runs"] > 1
        else "One run of each (figures without a spread)."
    )
    quick = (
        "\n**A quick run** (`scripts/bench-all --quick`): short cells, a smoke run of the "
        "pipeline; these figures are not the published ones.\n"
        if m["quick"]
        else ""
    )
    return f"""# Benchmarks

Generated by `scripts/bench-all{' --quick' if m['quick'] else ''}` (runs: {m['runs']}) on
{m['date']}, in {seconds / 60:.1f} minutes. Do not edit by hand: rerun the command.
{quick}
**Machine:** {m['cpu']}, {m['cpus']} CPUs{' (virtual machine)' if m['virtualized'] else ''},
{m['memory_gib']} GiB, Linux {m['kernel']}, {m['rustc']} (release profile). Load average
before the run: {load:.2f}. TSC figures are ticks, not core cycles, on a virtual machine.

Benchmarks are not tests: they print figures and assert nothing about speed. Every benchmark
measures its baseline in the same run, and the machines are shared and noisy, so read the
ratios; absolute figures move from run to run. {spread} A verdict is judged in each run
against that run's own baseline and counted over the runs.

"""


def chan(runs, quick):
    rows = []
    impls = [i for i in ("shmnet", "shmnet+wake", "rtrb", "rte_ring", "faithful-in", "faithful-out")
             if any(r["impl"] == i for run in runs for r in run["spsc"])]
    bursts = sorted({r["burst"] for run in runs for r in run["spsc"]})

    def cell(run, impl, burst, key):
        return next((r[key] for r in run["spsc"] if r["impl"] == impl and r["burst"] == burst), None)

    for impl in impls:
        rows.append([impl] + [
            f"{fig([cell(r, impl, b, 'ticks_per_elem') for r in runs], 2)} "
            f"({fig([cell(r, impl, b, 'ns_per_elem') for r in runs], 2)} ns)"
            for b in bursts])
    r0 = runs[0]
    elems = r0["spsc"][0]["elems"]
    reps = r0["spsc"][0]["reps"]
    s = f"""## The shared-memory queue and pools (`shmnet bench chan`)

Command: `shmnet bench chan{' --quick' if quick else ''}` with the rte_ring
harness (`scripts/bench`); {elems:,} elements × {reps} repetitions per cell, medians within a
run. Producer on CPU 0, consumer on CPU 1, 1,024-slot queues of 16-byte descriptors, the same
protocol for every implementation (`crates/shmnet-lab/src/bench/chan.rs`). `shmnet` is the
ring polling; `shmnet+wake` the same ring with wake-ups on (the consumer never sleeps here, so
it shows what the producer's wake check costs); `rtrb` runs in-process; `rte_ring` is DPDK's
`rte_ring_sp_enqueue_burst_elem`/`sc_dequeue_burst_elem` built by `scripts/build-rte-ring-bench`
(-O3, the ISA level rustc uses by default).

Ticks per element (ns per element in brackets):

"""
    s += table(["impl"] + [f"burst {b}" for b in bursts], rows)
    for n in r0.get("notes", []):
        s += f"\nNote: {n}\n"
    targets = []
    for burst, base, limit in ((32, "rte_ring", 1.0), (1, "rtrb", 1.5)):
        ratios = ratios_over_runs(runs, lambda r: cell(r, "shmnet", burst, "ticks_per_elem"),
                                  lambda r: cell(r, base, burst, "ticks_per_elem"))
        if ratios:
            targets.append([f"burst {burst}: shmnet ÷ {base} ticks", fig(ratios, 2), f"≤ {limit}",
                            verdict([x <= limit for x in ratios], len(runs))])
    if targets:
        s += "\nTargets (issue 2), each run against its own baselines:\n\n"
        s += table(["what", "measured", "target", "verdict"], targets)
    prow = []
    for policy in ("lifo", "fifo"):
        line = [policy.upper()]
        for path in ("server", "driver"):
            ns = [next((p["ns_per_pair"] for p in r["pool"] if p["policy"] == policy and p["path"] == path), None)
                  for r in runs]
            line.append(f"{fig(ns, 1)} ns")
        prow.append(line)
    s += "\nPool alloc+free pairs (one thread, a working set of 32 buffers):\n\n"
    s += table(["policy", "server path (may wait for the lock)", "driver path (try-lock only)"], prow)
    s += faithful_tables(runs)
    return s


def faithful_tables(runs):
    """Seed 002's own queues and mutex beside the rings (issue 19), from the same runs."""
    if not all("one_cpu" in r for r in runs):
        return ""

    def cell(run, table_name, impl, burst, key, sub=None):
        row = next((x for x in run[table_name] if x["impl"] == impl and x["burst"] == burst), None)
        if row is None:
            return None
        return row[key][sub] if sub else row[key]

    s = """
### Seed 002's own synchronisation beside the rings

`faithful-in` is seed 002's IN queue (driver → server: the producer gives up on a held lock
and changes sub-queue, the consumer spins), `faithful-out` its OUT queue (server → driver),
two sub-queues of 1,024 slots each under the seed's asymmetric Peterson mutex (a producer
fills one at a time, so each queue holds what the others hold; `shmnet_chan::faithful`,
[channel.md](channel.md)). The protocol counters are per 1,000 elements: looks at a held
lock, the producer's changes of sub-queue (the Enable protocol), the driver-side consumer's
give-ups, and *long waits* — entries that waited past the spin phase and began yielding the
CPU, an upper bound on the times the holder was preempted inside its critical section.

Ticks per element and protocol counters, producer and consumer on different CPUs:

"""
    rows = []
    bursts = sorted({x["burst"] for r in runs for x in r["spsc"]})
    for impl in ("faithful-in", "faithful-out"):
        for b in bursts:
            t = [cell(r, "spsc", impl, b, "ticks_per_elem") for r in runs]
            base = [cell(r, "spsc", "shmnet", b, "ticks_per_elem") for r in runs]
            ratio = [a / c for a, c in zip(t, base) if a and c]
            rows.append([impl, str(b), fig(t, 2), fig(ratio, 2),
                         fig([cell(r, "spsc", impl, b, "faithful", "lock_spins") for r in runs], 1),
                         fig([cell(r, "spsc", impl, b, "faithful", "switches") for r in runs], 2),
                         fig([cell(r, "spsc", impl, b, "faithful", "gave_up") for r in runs], 1)])
    s += table(["queue", "burst", "ticks/elem", "÷ shmnet ring", "lock spins", "sub-queue changes",
                "consumer gave up"], rows)
    for name, title in (("one_cpu", "Both parties on one CPU (the seed's uniprocessor; each "
                         "yields when it finds nothing to do)"),
                        ("driver_preempted", "Across CPUs, with a busy thread sharing the "
                         "driver's (the producer's) CPU, so the driver is preempted anywhere")):
        rows = []
        pb = sorted({x["burst"] for r in runs for x in r[name]})
        for impl in ("shmnet", "rtrb", "faithful-in"):
            for b in pb:
                t = [cell(r, name, impl, b, "ticks_per_elem") for r in runs]
                base = [cell(r, name, "shmnet", b, "ticks_per_elem") for r in runs]
                ratio = [a / c for a, c in zip(t, base) if a and c]
                extra = (fig([cell(r, name, impl, b, "faithful", "long_waits") for r in runs], 3)
                         if impl.startswith("faithful") else "—")
                rows.append([impl, str(b), fig(t, 2), fig(ratio, 2), extra])
        s += f"\n{title}:\n\n"
        s += table(["queue", "burst", "ticks/elem", "÷ shmnet ring", "long waits per 1,000"], rows)
    if all("locks" in r for r in runs):
        rows = []
        for lock in ("faithful-waiting", "faithful-yielding", "cas"):
            t = [next(x["ticks_per_pair"] for x in r["locks"] if x["lock"] == lock) for r in runs]
            cas = [next(x["ticks_per_pair"] for x in r["locks"] if x["lock"] == "cas") for r in runs]
            rows.append([lock, fig(t, 1), fig([a / c for a, c in zip(t, cas)], 2)])
        s += "\nUncontended lock + unlock in one thread, against a compare-and-swap lock:\n\n"
        s += table(["lock", "ticks", "÷ cas"], rows)
    return s


def stack(runs, quick):
    r0 = runs[0]
    keys = sorted({(row["size"], row["checksum"]) for r in runs for row in r["rx"]})

    def get(run, side, key, k):
        return next((row[k] for row in run[side] if (row["size"], row["checksum"]) == key), None)

    rows = []
    for key in keys:
        size, ck = key
        frames = next(f for f in (get(r, "rx", key, "frames") for r in runs) if f is not None)
        rows.append([
            f"{size:,} B" + (f" ({frames} frames)" if frames > 1 else ""),
            "on" if ck else "off",
            fig([get(r, "rx", key, "ns_per_msg") for r in runs], 0),
            f"{fig([get(r, 'rx', key, 'stack_ns') for r in runs], 0)} / "
            f"{fig([get(r, 'rx', key, 'copy_ns') for r in runs], 0)}",
            fig([get(r, "rx", key, "memcpy_ns") for r in runs], 0),
            fig([get(r, "rx", key, "ratio") for r in runs], 2) + "×",
            fig([get(r, "tx", key, "ns_per_msg") for r in runs], 0),
            fig([get(r, "tx", key, "ratio") for r in runs], 2) + "×",
        ])
    s = f"""## The protocol stack (`shmnet bench stack`)

Command: `shmnet bench stack{' --quick' if quick else ''}` ({r0['batches']} batches per cell, medians). The receive figure
covers {r0['timed_regions'][0]}. The baseline is a `copy_from_slice` of the same bytes
between 64-byte-aligned buffers in the same run (the best case for `memcpy`).

"""
    s += table(["size", "checksum", "rx ns/msg", "of which stack / copy-out", "memcpy ns",
                "rx ÷ memcpy", "tx ns/msg", "tx ÷ memcpy"], rows)
    key = (14792, False)
    if key in keys:
        ratios = [x for x in (get(r, "rx", key, "ratio") for r in runs) if x is not None]
        s += (f"\nTarget (issue 3): 14,792-byte receive, checksum off, within 1.5× of `memcpy`: "
              f"{fig(ratios, 2)}×, **{verdict([x <= 1.5 for x in ratios], len(runs))}**.\n")
    return s


def handoff(runs, quick):
    r0 = runs[0]
    rows = []
    for h in r0["sizes"]:
        size = h["size"]

        def get(run, k):
            return next((x[k] for x in run["sizes"] if x["size"] == size), None)

        rows.append([f"{size:,}", h["buffers_per_msg"], fig([get(r, "msgs_per_s") for r in runs], "k"),
                     fig([get(r, "gbit_per_s") for r in runs], 1)])
    shared = any(r["shared_cpu"] for r in runs)
    s = f"""## The cross-core hand-off limit (`shmnet bench handoff`)

Command: `shmnet bench handoff{' --quick' if quick else ''} --json` (median of {r0['runs']} runs of {r0['seconds_per_run'] * 1e3:.0f} ms per
size). A producer thread on CPU {r0['cpus'][0]} writes each message's frames (MTU-1,500 fragments, one per
buffer) into a LIFO pool of {r0['pool_buffers']:,} × {r0['buffer_bytes']:,}-byte buffers (the server's data window) and hands
them over a {r0['ring_slots']:,}-slot SPSC ring to a consumer on CPU {r0['cpus'][1]}, which copies the payload out and hands
the buffers back: no protocol, no system call — the physical limit the `server` structure is
measured against (ttcp measures it again in its own run).{' **Both threads shared one CPU in some run: not a cross-core figure.**' if shared else ''}

"""
    s += table(["size B", "buffers/msg", "msgs/s", "payload Gbit/s"], rows)
    rtts = [(r.get("core_rtt_ns_before"), r.get("core_rtt_ns_after")) for r in runs]
    if any(a and b for a, b in rtts):
        s += ("\nThe two CPUs' core-to-core round trip before and after each run, ns (the VM's "
              "placement of its vCPUs, which moves cross-core figures severalfold: "
              "[netbench.md](netbench.md)): "
              + "; ".join(f"{a:.0f} → {b:.0f}" if a and b else "not measured" for a, b in rtts)
              + ".\n")
    wrong = sum(r["wrong_messages"] for r in runs)
    if wrong:
        s += f"\n**{wrong} message(s) arrived wrong: the probe is broken and these figures are void.**\n"
    return s


def handles(runs, quick):
    r0 = runs[0]
    rows = []
    for row in r0["rows"]:
        a, index = row["ways"], row.get("index", "skewed")

        def get(run, k):
            return next((x[k] for x in run["rows"] if x["ways"] == a and x.get("index", "skewed") == index), None)

        ratio = ratios_over_runs(runs, lambda r: get(r, "lookup_ns"), lambda r: get(r, "bounds_ns"))
        rows.append([f"{row['entries']:,}", row["line"], a, "seed" if index == "low_bits" else "skewed", fig([get(r, "lookup_ns") for r in runs], 2),
                     fig([get(r, "bounds_ns") for r in runs], 2), fig(ratio, 2), f"{row['cache_bytes']:,}"])
    s = f"""## Handle lookup (`shmnet bench handles`)

Command: `shmnet bench handles{' --quick' if quick else ''} --json`. What translating an application's handle costs
the data plane ([isolation.md](isolation.md)): one application's 64 MiB region, {r0['handles']:,} handles of 1,500 B on
distinct random pages, every lookup a hit in seed 004's lookup cache (C entries in lines of L,
A ways, LRU; shmnet's skewed set index, and the seed's low bits at A = 4), beside the plain
bounds check of one flat table, timed in the same run (median of
{r0['reps']} repetitions of several passes). Nanoseconds per descriptor:

"""
    s += table(["C", "L", "A", "set index", "hit ns", "bounds check ns", "÷ bounds check", "cache bytes"], rows)
    oks = [r["target_met"] for r in runs if r.get("target_met") is not None]
    a4 = [next((x["lookup_ns"] for x in r["rows"] if x["ways"] == 4 and x.get("index", "skewed") == "skewed"), None) for r in runs]
    s += f"\nTarget (issue 15): a hit at A = 4 costs ≤ 10 ns per descriptor: {fig(a4, 2)} ns, **{verdict(oks)}**.\n"
    return s


def tcp(runs, quick):
    r0 = runs[0]
    rows = []
    for row in r0["rows"]:
        c = row["checksum"]

        def get(run, k):
            return next((x[k] for x in run["rows"] if x["checksum"] == c), None)

        rows.append(["on" if c else "off", fig([get(r, "ns_per_window") for r in runs], 0),
                     fig([get(r, "stack_ns") for r in runs], 0), fig([get(r, "copy_ns") for r in runs], 0),
                     fig([get(r, "gbit_per_s") for r in runs], 1), fig([get(r, "memcpy_ns") for r in runs], 0),
                     fig(ratios_over_runs(runs, lambda r: get(r, "ns_per_window"), lambda r: get(r, "memcpy_ns")), 2)])
    s = f"""## TCP receive (`shmnet bench tcp`)

Command: `shmnet bench tcp{' --quick' if quick else ''} --json` ([stack.md](stack.md)). One established connection
between two of our stacks; the sender fills a 64 KiB window ({r0['rows'][0]['segments']} segments of 1,460 B), its
frames copied into the receiver's pool buffers before the timed region (the driver's DMA).
Timed: {r0['timed_region']}. Beside it, a memcpy of the same 64 KiB in the same run. Median
over {r0['rows'][0]['windows']:,} windows per run:

"""
    s += table(["TCP checksum", "ns per window", "receive", "copy-out", "Gbit/s", "memcpy ns", "÷ memcpy"], rows)
    oks = [all(x["ns_per_window"] <= 1.5 * x["memcpy_ns"] for x in r["rows"]) for r in runs]
    s += f"\nTarget (issue 16): the stack's receive of a 64 KiB window ≤ 1.5× a memcpy of the same bytes: **{verdict(oks)}**.\n"
    return s


def tcpsetup(runs, quick):
    names = [x["structure"] for x in runs[0]["rows"]]

    def get(run, name, k):
        return next((x[k] for x in run["rows"] if x["structure"] == name and x["error"] is None), None)

    rows = []
    for name in names:
        rows.append([name, fig([get(r, name, "per_s") for r in runs], 0),
                     fig(ratios_over_runs(runs, lambda r, n=name: get(r, n, "per_s"),
                                          lambda r: get(r, "kernel", "per_s")), 2)])
    n = runs[0]["rows"][0]["connections"]
    s = f"""## TCP connection setup (`shmnet bench tcp-setup`)

Command: `shmnet bench tcp-setup{' --quick' if quick else ''} --json` ([tcp.md](tcp.md)). {n:,} connections per cell, one at
a time: the connector connects, writes a byte and reads the end of the stream; the listener
accepts, reads the byte and closes; both close in order. The kernel over 127.0.0.1 (two
threads); shmnet's server structure stepped on a thread over a loopback softnic, the
listener and the connector applications on threads of their own, under `--isolation regions`
and `shared`:

"""
    s += table(["structure", "connections/s", "÷ kernel"], rows)
    oks = [all((get(r, n, "per_s") or 0) >= 2 * (get(r, "kernel", "per_s") or float("inf"))
               for n in names if n != "kernel") for r in runs]
    s += f"\nTarget (issue 16): connection setup ≥ 2× the kernel's rate: **{verdict(oks)}**.\n"
    return s


def programs(runs, quick):
    rows = []
    udp = lambda r: r["iperf3_udp_64"]["received_kpps"]
    for get, name, digits in [
            (lambda r: r["iperf3_tcp_gbit_s"], "iperf3, one TCP stream (Gbit/s)", 2),
            (lambda r: r["sockperf_tcp_p50_us"], "sockperf TCP ping-pong p50 (µs)", 2),
            (lambda r: r["sockperf_udp_p50_us"], "sockperf UDP ping-pong p50 (µs)", 2),
            (udp, "iperf3 UDP 64 B, sender unbounded: k datagrams/s arriving", 0),
            (lambda r: r["iperf3_udp_64_lossless_kpps"],
             "iperf3 UDP 64 B at the highest rate losing ≤ 0.1 %: k datagrams/s", 0)]:
        rows.append([name, fig([get(r)["shmnet"] for r in runs], digits),
                     fig([get(r)["kernel"] for r in runs], digits),
                     fig([get(r)["ratio"] for r in runs], 2)])
    r0 = runs[0]
    s = f"""## Unmodified programs (`shmnet bench programs`)

Command: `shmnet bench programs{' --quick' if quick else ''} --json` ([preload.md](preload.md)). Stock Debian
iperf3 and sockperf, both ends on this host: on the kernel over 127.0.0.1, and under
`shmnet run` (the sockets library preloaded) on one server with `--driver loopback` (MTU
16,384; Linux's lo has 65,536 and GSO; `--no-checksum`, as lo makes and checks none); each figure the median of {r0['rounds']} round(s) of
{r0['seconds']:g} s in one run, the kernel's in the same rounds:

"""
    s += table(["program", "shmnet", "kernel", "÷ kernel"], rows)
    s += ("\nWith the UDP sender unbounded (`-b 0`), "
          f"{fig([r['iperf3_udp_64']['loss_pct_shmnet'] for r in runs], 1)} % of the datagrams were lost under "
          f"`shmnet run` and {fig([r['iperf3_udp_64']['loss_pct_kernel'] for r in runs], 1)} % on the kernel; "
          "the rate without loss steps the offered rate down by 15 % from what arrived unbounded "
          "until at most 0.1 % is lost.\n")
    s += ("\nThe interposition itself: `fcntl(F_GETFD)` on a pipe costs "
          f"{fig([r['interpose_ns']['with_library'] for r in runs], 1)} ns with the library loaded and "
          f"{fig([r['interpose_ns']['without'] for r in runs], 1)} ns without: "
          f"{fig([r['interpose_ns']['overhead'] for r in runs], 1)} ns per call on a kernel descriptor.\n\n")
    for i, t in enumerate(r0["targets"]):
        s += f"Target (issue 17): {t['what']}: **{verdict([r['targets'][i]['met'] for r in runs])}**.\n"
    return s


def shared(runs, quick):
    r0 = runs[0]
    names = {"kernel": "kernel (Linux answers)", "dedicated": "dedicated (`--placement process`)",
             "shared": "shared (`--attach`)", "shared-busy": "shared, IPv6 neighbour flooded"}
    def cell(run, name):
        return next(c for c in run["cells"] if c["cell"] == name)
    rows = []
    for name in ["kernel", "dedicated", "shared", "shared-busy"]:
        busy = [cell(r, name)["neighbour_echoes_per_s"] for r in runs]
        rows.append([names[name], fig([cell(r, name)["p50_us"] for r in runs], 1),
                     fig([cell(r, name)["p99_us"] for r in runs], 1),
                     fig([cell(r, name)["per_s"] for r in runs], "k"),
                     "" if busy[0] is None else fig(busy, "k")])
    s = f"""## One driver, several servers (`shmnet bench shared-driver`)

Command: `shmnet bench shared-driver{' --quick' if quick else ''} --json` ([io.md](io.md#several-protocol-servers-on-one-driver-shmnet-driver---listen)). Debian's
`sockperf ping-pong` (UDP, {r0['size']} B, full round trips) from a peer namespace over a veth
pair to `sockperf server` on the measured side: Linux itself, or the same program under
`shmnet run` on a server with a driver process of its own, on a server attached to a shared
driver, and on that server while an IPv6 server attached beside it on the same driver is
flooded with `ping -6 -f -l 32` (32 echoes in flight). Each figure the median of {r0['rounds']} round(s) of {r0['seconds']} s
per cell in one run:

"""
    s += table(["measured side", "p50 µs", "p99 µs", "round trips/s", "neighbour's pings/s"], rows)
    s += ("\nRatios of p50s, each round against its own cells: shared ÷ dedicated "
          f"{fig([r['shared_over_dedicated_p50'] for r in runs], 2)} (what sharing the driver costs), "
          f"shared-busy ÷ shared {fig([r['busy_over_shared_p50'] for r in runs], 2)} (what a busy "
          f"neighbour costs), dedicated ÷ kernel {fig([r['dedicated_over_kernel_p50'] for r in runs], 2)}. "
          "The driver's receive ring is TPACKET_V2, which hands each frame over (and wakes "
          "a sleeping driver) as it arrives; until 2026-11-29 it was TPACKET_V3, whose blocks "
          "are handed over only when full or when their 1 ms retire timer fires, and every "
          "shmnet row here measured about 1.0 ms (18× the kernel) for that reason alone "
          "([io.md](io.md)).\n")
    return s


def multicast(runs, quick):
    r0 = runs[0]
    names = {"kernel-unicast": "Linux, to its address", "kernel-multicast": f"Linux, to {r0['group']}",
             "server-unicast": "shmnet server, to its address",
             "server-multicast": f"shmnet server, to {r0['group']}"}
    def cell(run, name):
        return next(c for c in run["cells"] if c["cell"] == name)
    rows = [[names[n], fig([cell(r, n)["p50_us"] for r in runs], 1),
             fig([cell(r, n)["p99_us"] for r in runs], 1),
             fig([cell(r, n)["per_s"] for r in runs], "k")]
            for n in ["kernel-unicast", "kernel-multicast", "server-unicast", "server-multicast"]]
    s = f"""## IPv4 multicast (`shmnet bench multicast`)

Command: `shmnet bench multicast{' --quick' if quick else ''} --json` ([stack.md](stack.md#ipv4-multicast)). Debian's
`sockperf ping-pong` ({r0['size']} B, full round trips) from a peer namespace over a veth pair
to Debian's `sockperf server` on the measured side — on Linux's sockets, or unmodified under
`shmnet run` on `shmnet serve --structure server` (af_packet) — to the group {r0['group']} (both
ends joined, sockperf's server answering to the group: every message each way multicast)
and, as the baseline beside it, to the measured side's address. Each figure the median of
{r0['rounds']} round(s) of {r0['seconds']} s per cell in one run:

"""
    s += table(["measured side", "p50 µs", "p99 µs", "round trips/s"], rows)
    s += ("\nRatios of p50s, each round against its own cells: server ÷ kernel, multicast "
          f"{fig([r['server_over_kernel_multicast_p50'] for r in runs], 2)}, unicast "
          f"{fig([r['server_over_kernel_unicast_p50'] for r in runs], 2)}; the server's multicast ÷ its "
          f"unicast {fig([r['server_multicast_over_unicast_p50'] for r in runs], 2)} (what a group costs it).\n")
    return s


def capture(runs, quick):
    r0 = runs[0]
    dp = []
    for i, t in enumerate(r0["data_plane"]):
        def dcol(k, d=3):
            return fig([r["data_plane"][i][k] for r in runs], d)
        dp.append([f"{t['size']:,}", t["dir"], dcol("none_ns", 1), dcol("none_again_over_none"),
                   dcol("off_over_none"), dcol("miss_over_none")])
    rows = []
    for i, row in enumerate(r0["rows"]):
        def col(k):
            return fig([r["rows"][i][k] for r in runs], "k")
        def ratio(k):
            return fig([r["rows"][i][k][0] for r in runs], 2)
        rows.append([f"{row['size']:,}", row["dir"], col("off_msgs_per_s"), ratio("off_again_over_off"),
                     ratio("miss_over_off"), ratio("all_over_off"),
                     fig([r["rows"][i]["off_server_cpu_us_per_msg"] for r in runs], 3),
                     fig([100 * r["rows"][i]["miss_share_of_server"] for r in runs], 1)])
    s = f"""## What a capture costs (`shmnet bench capture`)

Command: `shmnet bench capture{' --quick' if quick else ''} --json` ([observe.md](observe.md)).

First the data plane's taps timed in one thread, where nothing else moves
(`shmnet_io::server::tap_cost`): the stack's UDP receive and send alone (`none`, and again
as a separate copy of the same code, `none_again`: the floor), the data plane's own
receive and transmit tap with no capture (`off`) and with a capture of rx and tx whose
filter (`tcp port 22`) matches none of the frames (`miss`); medians of ns per message over
the batches, interleaved batch by batch:

"""
    s += table(["size B", "dir", "none ns/msg", "none again ÷ none", "off ÷ none", "miss ÷ none"], dp)
    s += f"""
Then UDP ttcp cells of the `server` structure (softnic as the wire, one application; each
party a process): no capture (`off`, and `off_again`: the floor), `miss`, and a capture
keeping every whole frame read by a third process that discards it (`all`); {r0['rounds']}
round(s) of {r0['seconds_per_cell']} s cells per run, each cell's variants back to back in an
order that turns each round, each ratio against `off` of its own cell and round (median
over the rounds, then over runs). The taps' share is `miss − off` of the one-thread measure
÷ the server's CPU per message with no capture:

"""
    s += table(["size B", "dir", "off msgs/s", "off again ÷ off", "miss ÷ off", "all ÷ off",
                "server µs/msg", "taps' share %"], rows)
    s += "\n"
    for i, t in enumerate(r0["targets"]):
        s += f"Target (issue 22): {t['what']}: **{verdict([r['targets'][i]['met'] for r in runs])}**.\n"
    if any(r["failed"] for r in runs):
        s += "\nFailed cells: " + "; ".join(f for r in runs for f in r["failed"]) + "\n"
    return s


def ttcptcp(runs, quick, ethernet=None):
    r0 = runs[0]
    sizes = sorted({x["size"] for x in r0["rows"]})
    structures = list(dict.fromkeys(x["structure"] for x in r0["rows"]))

    def get(run, s, size, k):
        return next((x[k] for x in run["rows"] if x["structure"] == s and x["size"] == size), None)

    rows = []
    for s in structures:
        row = [s]
        for size in sizes:
            row += [fig([get(r, s, size, "gbit_per_s") for r in runs], 2),
                    fig(ratios_over_runs(runs, lambda r, s=s, size=size: get(r, s, size, "gbit_per_s"),
                                         lambda r, size=size: get(r, "kernel", size, "gbit_per_s")), 2)]
        rows.append(row)
    head = ["structure"] + [h for size in sizes for h in (f"{size:,} B Gbit/s", "÷ kernel")]
    mtu = r0.get("mtu", 1500)
    checks = "on" if r0.get("checksum") else "off, as `lo` offloads them"
    s = f"""## TCP stream (`shmnet ttcp --proto tcp`)

Command: `shmnet ttcp --proto tcp{' --quick' if quick else ''} --json` ([netbench.md](netbench.md), [tcp.md](tcp.md)). One TCP
connection from a sender application to a receiver application on this host, each message
one write of the size shown: the kernel over 127.0.0.1 (two processes); shmnet over a
loopback softnic, both applications attached to one server (every structure runs both
ends' protocol work, as the kernel does over `lo`). The loopback softnic's MTU is {mtu:,}
(`lo`'s is 65,536, with TSO/GSO), TCP checksums {checks}
([netbench.md](netbench.md#over-tcp---proto-tcp)). Every byte written was read:

"""
    s += table(head, rows)
    oks = [all((get(r, "server", size, "gbit_per_s") or 0) >= 2 * (get(r, "kernel", size, "gbit_per_s") or float("inf"))
               for size in sizes) for r in runs]
    s += f"\nTarget (issue 16): the server structure's TCP stream ≥ 2× the kernel's Gbit/s at 8 KiB and 64 KiB writes: **{verdict(oks)}**.\n"
    if ethernet:
        e0 = ethernet[0]
        es = list(dict.fromkeys(x["structure"] for x in e0["rows"]))
        erows = []
        for st in es:
            row = [st]
            for size in sizes:
                row += [fig([get(r, st, size, "gbit_per_s") for r in ethernet], 2),
                        fig(ratios_over_runs(ethernet, lambda r, st=st, size=size: get(r, st, size, "gbit_per_s"),
                                             lambda r, size=size: get(r, "kernel", size, "gbit_per_s")), 2)]
            erows.append(row)
        s += f"""
The same at an Ethernet MTU, in the same runs (`shmnet ttcp --proto tcp --mtu {e0.get("mtu", 1500)}
--structure {",".join(es)}{' --quick' if quick else ''} --json`): segments of 1,460 bytes, about eleven times as many:

"""
        s += table(head, erows)
    return s


def rrtcp(runs, quick):
    r0 = runs[0]
    structures = list(dict.fromkeys(x["structure"] for x in r0["rows"]))

    def get(run, s, k):
        return next((x[k] for x in run["rows"] if x["structure"] == s), None)

    rows = [[s, fig([get(r, s, "transactions_per_s") for r in runs], 0),
             fig([get(r, s, "p50_us") for r in runs], 1), fig([get(r, s, "p99_us") for r in runs], 1),
             fig(ratios_over_runs(runs, lambda r, s=s: get(r, s, "p50_us"), lambda r: get(r, "kernel", "p50_us")), 2)]
            for s in structures]
    size = r0["rows"][0]["size"]
    s = f"""## TCP request–response (`shmnet rr --proto tcp`)

Command: `shmnet rr --proto tcp{' --quick' if quick else ''} --json` ([netbench.md](netbench.md)). {size}-byte requests and
replies over one TCP connection with no-delay, one in flight; the kernel over 127.0.0.1 in the
same run:

"""
    s += table(["structure", "transactions/s", "p50 µs", "p99 µs", "p50 ÷ kernel"], rows)
    oks = [(get(r, "server", "p50_us") or float("inf")) <= 0.5 * (get(r, "kernel", "p50_us") or 0) for r in runs]
    s += f"\nTarget (issue 16): the server structure's p50 ≤ 0.5× the kernel's: **{verdict(oks)}**. The inline structure runs both ends in one thread, which never sleeps: it is not comparable.\n"
    return s


def labhandles(runs, quick):
    r0 = runs[0]
    sh = r0["shape"]
    agreed = sum(r["sim_agreed"] for r in runs)
    checked = sum(r["sim_checked"] for r in runs)
    workloads = sorted({x["workload"] for x in r0["sweep"]}, key=["fft", "radix", "lu", "water", "ocean"].index)

    def ratio(run, w, c, l, a, index):
        return next((x["miss_ratio"] for x in run["sweep"] if x["workload"] == w and x["entries"] == c
                     and x["line"] == l and x["ways"] == a and x["index"] == index), None)

    def pct(vals):
        return fig([None if v is None else 100.0 * v for v in vals], 2)

    rows = []
    for (c, l, a) in [(8192, 8, 2), (16384, 64, 4), (32768, 128, 8)]:
        for index, name in [("low_bits", "seed"), ("skewed", "skewed")]:
            rows.append([f"C{c // 1024}K L{l} A{a}", name] + [pct([ratio(r, w, c, l, a, index) for r in runs]) for w in workloads])
    s = f"""## Seed 004's experiments (`shmnet lab handles`)

Command: `shmnet lab handles{' --quick' if quick else ''} --json --out DIR` ([isolation.md](isolation.md)). {sh['apps']} applications
sharing one lookup cache, two regions of {sh['pages']:,} pages each, {sh['messages']:,} messages per workload (a send
and a receive reference each). The live cache and shmnet-sim's cache model agreed on the miss
count in **{agreed} of {checked}** workload × configuration runs. Miss ratio (%) at three of Table
III's 36 configurations, with the seed's set index and shmnet's skewed one (every
configuration is in each run's report.md):

"""
    s += table(["configuration", "set index"] + workloads, rows)
    prow = []
    for p in r0["penalty"]:
        L = p["line"]

        def get(run, part, k):
            return next((x[part][k] for x in run["penalty"] if x["line"] == L), None)

        prow.append([L] + [fig([get(r, part, k) for r in runs], 1) for part in ("delay_us", "processing_us") for k in ("p50", "p99")])
    s += """
The miss penalty of a live miss thread (µs; each miss pins, and first touches, a line of L
pages of a sparse memfd; the seed saw 0–50 µs of delay and 5–500 µs of processing):

"""
    s += table(["L", "delay p50", "delay p99", "processing p50", "processing p99"], prow)
    own = r0.get("own_trace_info", [])
    if own:
        orows = []
        for t in own:
            w = t["workload"]

            def own_ratio(run, c, l, a, index):
                return next((x["miss_ratio"] for x in run.get("own_traces", []) if x["workload"] == w
                             and x["entries"] == c and x["line"] == l and x["ways"] == a
                             and x["index"] == index), None)

            orows.append([w, f"{t['refs']:,}", f"{t['distinct_pages']:,}", t["apps"]]
                         + [fig([None if own_ratio(r, c, l, a, ix) is None else 100.0 * own_ratio(r, c, l, a, ix)
                                 for r in runs], 3)
                            for (c, l, a) in [(8192, 8, 2), (16384, 64, 4)] for ix in ("low_bits", "skewed")])
        s += """
Table III on traces recorded from shmnet's own runs (a live server records every handle page
its data plane translates while four pairs of applications stream 1,000-byte datagrams, four
pairs ping-pong 64 bytes, and one application sends a file-sized region with `send_from`).
Miss ratio (%) at two configurations, seed's index and skewed (every configuration is in
each run's report.md):

"""
        s += table(["workload", "references", "distinct pages", "applications",
                    "C8K L8 A2 seed", "C8K L8 A2 skewed", "C16K L64 A4 seed", "C16K L64 A4 skewed"], orows)
    pp = []
    for p in r0.get("pingpong", []):
        key = (p["on_miss"], p["size"], p["cold_fraction"])

        def cell(run, k):
            return next((x[k] for x in run.get("pingpong", [])
                         if (x["on_miss"], x["size"], x["cold_fraction"]) == key), None)

        pp.append([p["on_miss"], p["size"], f"{100 * p['cold_fraction']:.0f} %",
                   fig([cell(r, "misses_per_ping") for r in runs], 3),
                   fig([cell(r, "rtt_p50_us") for r in runs], 1),
                   fig([cell(r, "rtt_p99_us") for r in runs], 1),
                   fig([cell(r, "mbit_per_s") for r in runs], 1),
                   sum(cell(r, "retransmits") or 0 for r in runs)])
    if pp:
        s += """
Fig. 4: ping-pong through a live server (`--isolation regions`, loopback softnic) against the
share of pings sent from buffers in lines the cache has evicted, buffer-on-miss (the
default) beside drop-on-miss (the seed's choice; a ping or pong dropped on a receive
buffer's miss is sent again after 2 ms). Round trips in µs; Mbit/s counts a ping and a pong
per mean round trip; retransmits summed over the runs. The cells share one region and run in
this order: a line's first miss pins and first touches its pages, a later miss of the same
line finds them allocated, so misses in later cells cost less than in the first ones:

"""
        s += table(["on a miss", "size B", "cold pings", "misses/ping", "RTT p50", "RTT p99", "Mbit/s",
                    "retransmits"], pp)
    return s


def labbuffers(runs, quick):
    r0 = runs[0]
    g = r0["geometry"]
    modes = ["ch", "ch-all", "cs", "nc"]

    def cell(run, d, m, b, dirty, k="ticks"):
        return next((c[k] for c in run["cells"] if c["direction"] == d and c["mode"] == m
                     and c["bytes"] == b and c["dirty_pct"] == dirty), None)

    prm = [[name, fig([r["params"][k] for r in runs], 1), num(r0["unity"][k], 0) if r0["unity"][k] is not None else "—"]
           for name, k in [("C_br, read a cached line", "c_br"), ("C_bw, write a cached line", "c_bw"),
                           ("C_cr, read bypassing the cache", "c_cr"), ("C_cw, write bypassing the cache", "c_cw"),
                           ("C_fl, clean one line (not in the seed)", "c_fl")]]
    s = f"""## Seed 003's experiment: cache-bypassing buffers (`shmnet lab buffers`)

Command: `shmnet lab buffers{' --quick' if quick else ''} --json --out DIR` ([buffers.md](buffers.md)). What
keeping a network buffer K coherent with a device that does not snoop the caches costs on
this CPU, by the seed's methods — **ch** (clean K's lines, `clflushopt`), **ch-all** (the
seed's CH, a whole-cache clean of an L1d-sized region of {g['cache_bytes'] // 1024} KiB), **cs** (read junk in K's
L2 sets, {g['l2_ways']} ways), **nc** (non-temporal stores on send; streaming loads and eviction on
receive) — {r0['samples']:,} samples per cell, the mean of their middle half. The baseline is the seed's
model, equations (1)–(6), evaluated with per-line costs calibrated in the same run, and on
the seed's machine (cycles per 32-byte line):

"""
    s += table(["per-line cost", "this machine, ticks per 64 B line", "the seed's Unity, cycles per 32 B line"], prm)
    rows = []
    for d in ["send", "receive"]:
        for b in [64, 1500, 9000, 65536]:
            for dirty in [0.0, 25.0, 100.0]:
                rows.append([d, f"{b:,}", f"{dirty:g} %"] + [fig([cell(r, d, m, b, dirty) for r in runs], 0) for m in modes]
                            + [num(cell(r0, d, "nc", b, dirty, "predicted_ticks"), 0)])
    s += "\nTicks per packet (a slice of the Fig. 1 analog; every cell is in each run's report.md):\n\n"
    s += table(["direction", "bytes", "dirty", "ch", "ch-all", "cs", "nc", "nc, model"], rows)
    vrows = []
    for v in r0["verdicts"]:
        def pick(run, k):
            return next((x[k] for x in run["verdicts"] if x["direction"] == v["direction"] and x["source"] == v["source"]), None)
        ups = [pick(r, "nc_cheapest_up_to") for r in runs]
        vrows.append([v["direction"], v["source"], f"{fig([pick(r, 'nc_cheapest') for r in runs], 0)} of {v['cells']}",
                      ", ".join("none" if u is None else f"{u:,} B" for u in ups)])
    s += """
Where NC is the cheapest of the seed's three methods (ch-all, cs, nc) over the 10 lengths ×
5 dirty ratios; the seed concluded that bypassing pays on send at every size and on receive
only for small packets:

"""
    s += table(["direction", "source", "NC cheapest in (cells)", "NC cheapest at every dirty ratio up to (each run)"], vrows)
    s += f"\nMean |error| of the model on this machine, every cell: {fig([r['model_mean_abs_error_pct'] for r in runs], 0)} %.\n"
    prow = []
    for cache in ["L1d", "L2", "LLC"]:
        for d in ["send", "receive"]:
            def pol(run, m, k="added_ticks_per_line"):
                return next((x[k] for x in run["pollution"] if x["cache"] == cache and x["direction"] == d and x["mode"] == m), None)
            prow.append([f"half the {cache}", d, fig([pol(r, "ch", "baseline_ticks_per_line") for r in runs], 1)]
                        + [fig([pol(r, m) for r in runs], 1) for m in modes])
    s += """
Cache pollution (Table I's side effect): an application's working set W, half a cache, read
into the cache; 32 packets of 1,500 bytes through the method, each through its own 2 KiB
buffer; W read again. Ticks per line of W with no packets between (baseline), and what the
packets added, by method:

"""
    s += table(["W", "direction", "baseline", "ch", "ch-all", "cs", "nc"], prow)
    if all("auto" in r for r in runs):
        arow = []
        for d in ["send", "receive"]:
            def au(run, m, k="vs_best"):
                return next((x[k] for x in run["auto"] if x["direction"] == d and x["method"] == m), None)
            arow.append([d] + [fig([au(r, m) for r in runs], 2) for m in modes + ["auto"]])
        s += """
`auto` (per packet, the method the calibrated model predicts cheapest) beside each fixed
method: mean ticks per packet over every cell of Fig. 1, ÷ the per-cell best measured:

"""
        s += table(["direction", "ch", "ch-all", "cs", "nc", "auto"], arow)
    if all("tcp" in r for r in runs):
        names = [n for n in ["ch-all/ch-all", "nc/ch-all", "ch/ch", "nc/ch", "nc/nc", "none"]]
        t0 = r0["tcp"]

        def srow(run, m, n):
            return next((x for x in run["tcp"]["stream"] if x["message"] == m and x["buffers"] == n), {})

        def rrow(run, q, a, n):
            return next((x for x in run["tcp"]["rr"] if x["request"] == q and x["response"] == a and x["buffers"] == n), {})
        st = [[f"{m:,} B"] + [fig([srow(r, m, n).get("vs_ch_all") for r in runs], 2) for n in names]
              for m in sorted({x["message"] for x in t0["stream"]})]
        rr = [[f"{q} / {a} B"] + [fig([rrow(r, q, a, n).get("vs_ch_all") for r in runs], 2) for n in names]
              for (q, a) in [(x["request"], x["response"]) for x in t0["rr"] if x["buffers"] == names[0]]]
        base = [[f"{m:,} B", fig([srow(r, m, names[0]).get("gbit_per_s") for r in runs], 2)]
                for m in sorted({x["message"] for x in t0["stream"]})]
        s += f"""
The seed's Fig. 2 and 3 analogs: two of shmnet's stacks in one process, one TCP connection,
checksums offloaded, each method on both sides' frames (send/receive), the device's reads and
writes of memory untimed; CPU work timed on both sides. Stream throughput ({t0['repetitions']} runs of
{t0['stream_bytes'] >> 20} MiB) and request/response rate ({t0['transactions']:,} transactions a run), ÷ the seed's
CH on both sides (`ch-all/ch-all`, as the seed normalises; its Gbit/s per CPU second in the
last table):

"""
        s += table(["stream message"] + names, st)
        s += "\n"
        s += table(["request / response"] + names, rr)
        s += "\n"
        s += table(["stream message", "ch-all/ch-all Gbit/s per CPU second"], base)
    return s


def party_split(rows, key="cpu_us_per_msg_by_party"):
    """The median CPU µs per message (or transaction) of each party over the runs' rows; a
    party missing from a row (a polled driver has no entry of its own) counts 0 there."""
    parties = sorted({p for r in rows for p in r.get(key, {})})
    return ", ".join(
        f"{p} {statistics.median(r.get(key, {}).get(p, 0.0) for r in rows):.2f}"
        for p in parties)


def ttcp(runs, quick):
    r0 = runs[0]
    keys = []
    for r in runs:
        for row in r["rows"]:
            k = (row["dir"], row["size"], row["structure"])
            if k not in keys:
                keys.append(k)

    def same(run, key):
        return next((row for row in run["rows"] if (row["dir"], row["size"], row["structure"]) == key), None)

    rows = []
    for key in keys:
        rs = [x for x in (same(r, key) for r in runs) if x]
        # ÷ kernel: each run's structure against that run's kernel in the same cell.
        ratios = ratios_over_runs(
            runs, lambda r: (same(r, key) or {}).get("msgs_per_s"),
            lambda r: (same(r, (key[0], key[1], "kernel")) or {}).get("msgs_per_s"))
        over = [x["over_handoff"] for x in rs if x.get("over_handoff")]
        rows.append([
            key[0], f"{key[1]:,}", key[2],
            fig([x["msgs_per_s"] for x in rs], "k"),
            fig([x["gbit_per_s"] for x in rs], 2),
            f"{fig([x['cpu_s_per_msg'] * 1e6 for x in rs], 2)} ({party_split(rs)})",
            fig([x["sleeps_per_msg"] for x in rs], 2),
            fig(ratios, 2) + "×" if ratios and key[2] != "kernel" else "—",
            fig(over, 3) if over else "—",
            sum(x["lost"] for x in rs),
            sum(x["unaccounted"] for x in rs),
        ])
    cells = len(keys)
    secs = statistics.median(x["seconds"] for x in r0["rows"])
    s = f"""## ttcp: the structures against the kernel (`shmnet ttcp`)

Command: `shmnet ttcp{' --quick' if quick else ''} --json --plot ttcp.png` ({cells} cells, about {secs:.1f} s each; every
structure's parties are processes; the kernel and `memcpy` are measured in the same run).
Method and caveats: [netbench.md](netbench.md) — every sender keeps the same window of
messages in flight, checksums are off (loopback computes none), and the kernel's tx and rx
cells are one loopback pair doing both directions' protocol work (with loopback's 64 KiB MTU,
no fragmentation, where shmnet's 1,500-byte wire cuts a 14,792-byte message into ten).

CPU µs/msg is every party's user + system time (`wait4`), with the median split by party in
brackets; sleeps are voluntary context switches per message; lost and unaccounted are summed
over the runs. `server`, `server-thread` and `server-process` are the server structure with
its driver polled by the server's own loop (its work is the server's: no driver party),
on a thread of the server, or in a process of its own, the application sharing the data
window (`--isolation shared`). `server-regions` is `server` under `--isolation regions`, the
default of `shmnet serve`: the application maps only its own rings and registered regions,
sends by handle, and the server copies each datagram into a buffer it posted
([isolation.md](isolation.md)). Every receiver copies each byte once, as the kernel's
`recv` does: the shared-window application copies out of the driver's buffers (`recv`), the
isolated one takes in place (`recv_in_place`) what the server copied into its own buffer;
neither does more with the bytes.

"""
    s += table(["dir", "size B", "structure", "msgs/s", "Gbit/s", "CPU µs/msg (by party)",
                "sleeps/msg", "÷ kernel msgs/s", "÷ hand-off", "lost", "unaccounted"], rows)
    s += "\n![ttcp bars, normalised to the fastest per size (the last run)](ttcp.png)\n\n"
    mc = []
    for m in r0["memcpy"]:
        size = m["size"]
        hot = [next((x["gbit_per_s"] for x in r["memcpy"] if x["size"] == size), None) for r in runs]
        cold = [next((x["cold_gbit_per_s"] for x in r["memcpy"] if x["size"] == size), None) for r in runs]
        mc.append(f"{size:,} B: {fig(hot, 0)} / {fig(cold, 0)}")
    s += ("`memcpy` in the same runs, Gbit/s, source in cache / source in memory: "
          + "; ".join(mc) + ".\n\n")
    if r0.get("handoff"):
        ho = []
        for h in r0["handoff"]["sizes"]:
            size = h["size"]
            g = [next((x["gbit_per_s"] for x in (r.get("handoff") or {}).get("sizes", [])
                       if x["size"] == size), None) for r in runs]
            ho.append(f"{size:,} B: {fig(g, 1)}")
        s += ("The cross-core hand-off limit in the same runs (`shmnet bench handoff`; "
              "÷ hand-off above is a cell's Gbit/s over it), Gbit/s: " + "; ".join(ho) + ".\n\n")
    placement = placements([t for r in runs for t in r["targets"]])

    trows = []
    for t in r0["targets"]:
        k = (t["dir"], t["size"], t["what"])
        ts = [x for r in runs for x in r["targets"] if (x["dir"], x["size"], x["what"]) == k]
        trows += judged_rows(ts, placement, [t["dir"], f"{t['size']:,}", t["what"]], 3,
                             f"≥ {t['required']}")
    if trows:
        s += ("Targets, each run against cells of the same run: issue 14's (receive; `server` against "
              "`inline`, the kernel and the hand-off) and issue 15's (`server-regions` against `server`). "
              "Each is judged separately in each placement of the two vCPUs (near and far: the core-to-core "
              "round trips of these runs split where they jump by 2× or more), and not judged in a run whose compared "
              "cells, or the hand-off probes just before and after the `server` cell, straddled a change "
              "of placement ([netbench.md](netbench.md)):\n\n")
        s += table(["dir", "size B", "what", "placement", "core-to-core ns", "measured", "target",
                    "verdict"], trows)
        last = runs[-1]["targets"]
        s += "\nWhat limits a cell that missed its target (the last run's breakdown):\n\n"
        said = set()
        for t in last:
            if not t["met"] and t.get("limited_by") and (t["dir"], t["size"]) not in said:
                said.add((t["dir"], t["size"]))
                s += f"- {t['dir']} {t['size']:,} B: {t['limited_by']}\n"
    for r in runs:
        for f in r["failed"]:
            s += f"\nFAILED: {f}\n"
    return s


def rr(runs, quick):
    r0 = runs[0]
    keys = []
    for r in runs:
        for row in r["rows"]:
            if (row["outstanding"], row["structure"]) not in keys:
                keys.append((row["outstanding"], row["structure"]))

    def same(run, key):
        return next((row for row in run["rows"] if (row["outstanding"], row["structure"]) == key), None)

    rows = []
    for key in keys:
        rs = [x for x in (same(r, key) for r in runs) if x]
        ratios = ratios_over_runs(
            runs, lambda r: (same(r, key) or {}).get("transactions_per_s"),
            lambda r: (same(r, (key[0], "kernel")) or {}).get("transactions_per_s"))
        rows.append([
            key[0], key[1],
            fig([x["transactions_per_s"] for x in rs], "k"),
            fig(ratios, 2) + "×" if key[1] != "kernel" and ratios else "—",
            fig([x["p50_us"] for x in rs], 1),
            fig([x["p99_us"] for x in rs], 1),
            f"{fig([x['cpu_s_per_txn'] * 1e6 for x in rs], 2)} ({party_split(rs, 'cpu_us_per_txn_by_party')})",
            fig([x["sleeps_per_txn"] for x in rs], 2),
            sum(x["lost"] for x in rs),
        ])
    size = r0["rows"][0]["size"] if r0["rows"] else 32
    s = f"""## rr: request-response (`shmnet rr`)

Command: `shmnet rr{' --quick' if quick else ''} --json`. {size}-byte requests, each echoed by an application; 1 and 16 in
flight. The requester is an application process in every separated structure — a UDP socket
over loopback for `kernel`, the shmnet client API for `ipc`, the `server` placements and `server-regions`, whose wire is a
loopback softnic that hands each transmitted frame back as received — so every structure
carries each request and reply through its stack twice, as the kernel does over `lo`.
`inline`'s requester runs in the inline thread itself: no process boundary, so its ratio is
not like for like. Method: [netbench.md](netbench.md#rr).

"""
    s += table(["in flight", "structure", "transactions/s", "÷ kernel", "p50 µs", "p99 µs",
                "CPU µs/txn (by party)", "sleeps/txn", "lost"], rows)
    placement = placements([t for r in runs for t in r.get("targets", [])])
    trows = []
    for t in r0.get("targets", []):
        k = (t["outstanding"], t["what"])
        ts = [x for r in runs for x in r.get("targets", []) if (x["outstanding"], x["what"]) == k]
        trows += judged_rows(ts, placement, [t["outstanding"], t["what"]], 2,
                             f"{'≤' if t['at_most'] else '≥'} {t['required']}")
    if trows:
        s += ("\nTargets, each run against cells of the same run: issue 14's (`server` against the "
              "kernel) and issue 15's (`server-regions` against `server`), judged per placement of "
              "the two vCPUs as ttcp's are:\n\n")
        s += table(["in flight", "what", "placement", "core-to-core ns", "measured", "target",
                    "verdict"], trows)
    for r in runs:
        for f in r["failed"]:
            s += f"\nFAILED: {f}\n"
    return s


LAB_ROWS = [
    ("% buffers totally within cache", "fully_cached_pct", 1),
    ("% below a 100 % clean miss", "lt_clean_pct", 1),
    ("% below a 100 % dirty miss", "lt_dirty_pct", 1),
    ("average overhead ticks per word (8 B)", "avg_overhead_ticks_per_word", 3),
]


def lab(runs, quick):
    r0 = runs[0]
    cals = [r["calibration"] for r in runs]
    c0 = cals[0]
    lines = [
        ("line load from L1", "l1"), ("line load from L2", "l2"),
        ("line load from the last-level cache", "l3"),
        ("line fill from memory, clean victim", "dram"),
        ("line fill from memory, dirty victim", "dram_dirty"),
    ]
    t1 = [[name, fig([c["line_load_ticks"][k] for c in cals], 1)] for name, k in lines]
    t1.append(["TLB miss, 4 KiB pages", fig([c["tlb_miss_ticks"]["4k"] for c in cals], 1)])
    t1.append(["same span on 2 MiB pages", fig([c["tlb_miss_ticks"]["2m"] for c in cals], 1)])
    for name, k in [("buffer load from the last-level cache (overhead beyond L1)", "llc_overhead"),
                    ("buffer load, 100 % clean miss", "clean_overhead"),
                    ("buffer load, 100 % dirty miss", "dirty_overhead")]:
        t1.append([f"{name}: p10 / p25 / p50 / p75 / p90",
                   " / ".join(fig([c["buffer"][k].get(q) for c in cals], 0)
                              for q in ("p10", "p25", "p50", "p75", "p90"))])
    t1.append(["effective last-level cache, MiB",
               fig([c["effective_llc"]["bytes"] / 2**20 for c in cals], 1)])
    degenerate = [r["degenerate"] for r in runs]
    # The marks of the runs whose marks separate the levels (those the table uses); all
    # runs' when none did.
    marks = [r["marks"] for r, d in zip(runs, degenerate) if not d] or [r["marks"] for r in runs]
    s = f"""## The residency lab (`shmnet calibrate`, `shmnet lab`)

Command: `shmnet lab{' --quick' if quick else ''} --json` (`scripts/lab` without its setup),
taking {fig([r['seconds'] for r in runs], 0)} s. Method and findings:
[residency.md](residency.md). Table 1, ticks (the timer's empty window,
{fig([c['timer']['overhead_ticks'] for c in cals], 0)} ticks, subtracted; its step
{fig([c['timer']['quantum_ticks'] for c in cals], 0)} ticks):

"""
    s += table(["event", "ticks"], t1)
    s += (f"\nMarks for a 1,480-byte buffer, overhead ticks (in cache ≤ the upper quartile of "
          f"the last-level load; below a miss: below the lower quartile of the miss): in cache ≤ "
          f"{fig([m['cached_max'] for m in marks], 0)}, clean miss {fig([m['clean'] for m in marks], 0)}, "
          f"dirty miss {fig([m['dirty'] for m in marks], 0)}. ")
    bad = sum(1 for d in degenerate if d)
    if bad:
        s += (f"**In {bad} of {len(runs)} runs the marks were degenerate** (the slower quarter of loads "
              f"from the last-level cache reaching the faster quarter of misses): those runs' percentages "
              f"say nothing about where the data was, and they are left out of the table below.\n\n")
    else:
        s += f"The marks separated the cache from memory in every run ({len(runs)}).\n\n"
    good = [r for r, d in zip(runs, degenerate) if not d]
    if not good:
        return s + "No run had distinct marks: this machine cannot tell the levels apart.\n"
    order = ["table2", "table3", "hpux", "bsd", "fig7", "table4", "rules"]
    rank = lambda t: order.index(t) if t in order else len(order)
    names = sorted(r0["runs"], key=lambda n: (rank(r0["runs"][n].get("table", "rules")), n))
    rows = []
    for name in names:
        outs = [r["runs"].get(name, {}) for r in good]
        ran = [o for o in outs if "summary" in o]
        if not ran:
            err = next((o.get("error") for o in outs if o.get("error")), "did not run")
            rows.append([r0["runs"][name].get("table", ""), f"`{name}`"] + ["—"] * len(LAB_ROWS)
                        + [f"did not run: {err}"])
            continue
        m = ran[0]["messages"]
        table_name = r0["runs"][name].get("table", "")
        rows.append([table_name, f"`{name}`"] + [fig([o["summary"][k] for o in ran], d) for _, k, d in LAB_ROWS]
                    + [f"{m['sent']} / {m['received']} / {m['queue_full']}"])
    s += (f"Summary rows over {len(good)} run(s) with distinct marks; messages sent / received / "
          "dropped at the queue from the first. The small-gap cells with a one-message queue "
          "receive about one message in three by construction (the driver takes 3.2 messages "
          "per poll): compare where their buffers were, not how many arrived.\n\n")
    s += table(["table", "run"] + [n for n, _, _ in LAB_ROWS] + ["messages"], rows)
    knees = [r["knee_load_bytes"] for r in good if "knee_load_bytes" in r]
    if knees:
        s += (f"\nTable 4's knee (the state block at which the load alone takes the 2 ms gap per "
              f"message, measured in each run): {fig(knees, 0)} bytes per word; its loads are "
              f"multiples of it, named by the multiple (`inline-load-0.50x-knee-large-gap`: half the "
              f"knee).\n")
    if all("verdicts" in r for r in good):
        s += "\nThe seed's rules, judged in each run (a 25 % margin on the average overhead per word):\n\n"
        vrows = []
        for i, v in enumerate(good[0]["verdicts"]):
            finds = [r["verdicts"][i]["finding"] for r in good]
            counts = ", ".join(f"{f.replace('_', ' ')} in {finds.count(f)} of {len(finds)}"
                               for f in dict.fromkeys(finds))
            tpw = [r["verdicts"][i]["ticks_per_word"] for r in good if r["verdicts"][i]["ticks_per_word"]]
            vrows.append([v["rule"], f"`{v['better']}` / `{v['worse']}`",
                          f"{fig([t[0] for t in tpw], 3)} / {fig([t[1] for t in tpw], 3)}" if tpw else "—",
                          counts])
        s += table(["rule", "runs compared", "ticks per word", "finding"], vrows)
    if all(r.get("switches") for r in good):
        s += ("\nA switch between the data's last touch (the checksum) and its copy-out, against "
              "the switch's own cost calibrated with the same partner process:\n\n")
        srows = []
        for i, f0 in enumerate(good[0]["switches"]):
            fs = [r["switches"][i] for r in good if len(r["switches"]) > i]
            srows.append([f"`{f0['run']}`", f"{f0['partner_touch_bytes'] >> 10} KiB",
                          fig([f["switch_ticks"] for f in fs], 0),
                          fig([f["residency_ticks_per_message"] for f in fs], 0),
                          fig([f["share_of_switches_pct"] for f in fs], 1)])
        s += table(["run", "partner writes", "one switch, ticks", "residency cost per message, ticks",
                    "% of the message's two switches"], srows)
    return s


SEED001_ROWS = {  # seed 001's validation table: simulated µs, real µs, error %
    "tcp-send-cksum-off": (76.63, 78.58, -2.48), "tcp-send-cksum-on": (147.84, 146.66, 0.81),
    "udp-send-cksum-off": (18.43, 15.97, 15.40), "udp-send-cksum-on": (71.99, 70.30, 2.41),
    "tcp-recv-cksum-off": (58.06, 62.65, -7.33), "tcp-recv-cksum-on": (190.47, 198.39, -3.99),
    "udp-recv-cksum-off": (33.80, 32.84, 2.95), "udp-recv-cksum-on": (161.78, 158.84, 1.85),
}


def row_name(r):
    return f"{r['protocol']}-{r['direction']}-cksum-{'on' if r['checksum'] else 'off'}"


def validate(runs, quick):
    q = " --quick" if quick else ""
    s = f"""## Validating the simulator (`shmnet sim validate`)

### Seed 001's eight rows

Command: `shmnet sim validate{q} --json` (the `rows`): each row's {runs[0]['rows'][0]['bytes']:,}-byte message through
shmnet's stack, timed natively — the eight rows together, in rounds of 50 messages each, the
mean with the top and bottom tenth trimmed, less an empty window's, over the rounds in which the core was this thread's alone (at least {runs[0]['steps']['measured']:,} messages; a
throughput probe at both ends of each round tells them, [sim.md](sim.md#seed-001s-eight-rows)) — and traced under valgrind's
lackey ({runs[0]['steps']['traced']} messages), the trace simulated on `this-machine` calibrated in the same run.
*Simulated* is the out-of-order model (ticks = a × instructions + c × stores + b × ticks beyond the L1, none negative),
each row predicted from a fit on the other seven; *in order* is the seed's model (every
reference at its level's latency). Method: [sim.md](sim.md#seed-001s-eight-rows). The seed's
own table (R4400, µs) beside.

"""
    rows = []
    for r0 in runs[0]["rows"]:
        name = row_name(r0)
        rs = [x for r in runs for x in r["rows"] if row_name(x) == name]
        seed = SEED001_ROWS[name]
        rows.append([name, fig([x["measured"] for x in rs], 0), fig([x["simulated"] for x in rs], 0),
                     fig([x["error_pct"] for x in rs], 1) + " %",
                     fig([x["in_order"] for x in rs], 0), fig([x["in_order_error_pct"] for x in rs], 0) + " %",
                     fig([x["instructions"] for x in rs], 0), fig([x["stall_ticks"] for x in rs], 1),
                     fig([x["measured_all_rounds"] for x in rs], 0) if all("measured_all_rounds" in x for x in rs) else "—",
                     f"{seed[1]} / {seed[0]} ({seed[2]:+} %)"])
    s += table(["row", "measured ticks", "simulated", "error", "in order", "in-order error",
                "instructions", "ticks beyond L1", "measured, every round", "seed 001: real / simulated µs (error)"], rows)
    cs = [r["contention"] for r in runs if r.get("contention")]
    if cs:
        s += (f"\nNative timing: {fig([c['quiet_rounds'] for c in cs], 0)} of {fig([c['rounds'] for c in cs], 0)} rounds quiet "
              f"(the throughput probe within {cs[0]['quiet_slack']}× of the run's fastest round, "
              f"{fig([c['probe_fastest_ticks'] for c in cs], 0)} ticks; median round "
              f"{fig([c['probe_median_ticks'] for c in cs], 0)}). *Measured, every round* is the same estimate with the shared rounds counted too.\n")
    ipc = [r["all_rows_ipc"] for r in runs if r.get("all_rows_ipc")]
    s += (f"\nMean |error| {fig([r['mean_abs_error_pct'] for r in runs], 2)} % (seed 001: 4.65 %); "
          f"in-order model {fig([r['in_order_mean_abs_error_pct'] for r in runs], 0)} %. "
          f"Fit on all eight rows: {fig([r['all_rows_ticks_per_instruction'] for r in runs], 3)} ticks per instruction"
          + (f" + {fig([r['all_rows_ticks_per_store'] for r in runs], 3)} per store" if all("all_rows_ticks_per_store" in r for r in runs) else "")
          + f" + {fig([r['all_rows_stall_share'] for r in runs], 2)} × the ticks beyond the L1"
          + (f" ({fig(ipc, 1)} instructions per core cycle, the core clock measured against the TSC in the run)" if ipc else "")
          + ".\n")
    res = [r["residency"] for r in runs if r.get("residency")]
    if not res:
        return s
    names = [row["setting"] for row in res[0]["rows"]]
    rows = []
    for name in names:
        rs = [x for r in res for x in r["rows"] if x["setting"] == name]
        rows.append([
            name,
            f"{fig([x['measured_load_ticks'] for x in rs], 0)} / {fig([x['predicted_load_ticks'] for x in rs], 0)}",
            fig([x["load_rel_error"] * 100 for x in rs], 0) + " %",
            f"{fig([x['measured']['fully_cached_pct'] for x in rs], 1)} / {fig([x['predicted']['fully_cached_pct'] for x in rs], 1)}",
        ])
    s += f"""
### The residency lab replayed

Command: `shmnet sim validate{q} --json` (the `residency`): lab settings recorded and
replayed on `this-machine`, calibrated in the same run. Error measures:
[sim.md](sim.md).

"""
    s += table(["setting", "load ticks measured / predicted", "load error",
                "% in cache measured / predicted"], rows)
    bad = sum(1 for r in res if r.get("degenerate"))
    if bad:
        s += (f"\nIn {bad} of {len(res)} runs the calibrated marks were degenerate: the "
              "\"% in cache\" columns of those runs compare nothing.\n")
    s += (f"\nMean |load error| {fig([r['mean_abs_rel_error_load'] * 100 for r in res], 1)} %; "
          f"mean |overhead error| {fig([r['mean_abs_overhead_error_ticks'] for r in res], 1)} ticks "
          f"per buffer; mean |% in cache error| {fig([r['mean_abs_error_fully_cached_points'] for r in res], 1)} points.\n")
    return s


def signature(runs, quick):
    q = " --quick" if quick else ""
    r0 = runs[0]
    s = f"""## This machine's memory signature (`shmnet sim signature`)

Command: `shmnet sim signature{q} --json`: ticks per 8-byte read by working-set size and
stride, dependent (chase) and independent (stream), measured, beside the same references
simulated on `this-machine` calibrated in the same run (every read at its level's latency,
nothing overlapped). Ratios below 1 are what the prefetchers and the out-of-order core
hide from the model. Method: [sim.md](sim.md#the-memory-signature).

"""
    head = ["size"] + [f"stride {t}: chase / stream / simulated" for t in r0["strides"]]
    rows = []
    for size in r0["sizes"]:
        row = [f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"]
        for t in r0["strides"]:
            cs = [c for r in runs for c in r["cells"] if c["size_bytes"] == size and c["stride_bytes"] == t]
            if not cs:
                row.append("—")
                continue
            row.append(f"{fig([c['chase_ticks'] for c in cs], 1)} / {fig([c['stream_ticks'] for c in cs], 1)} / "
                       f"{fig([c['simulated_ticks'] for c in cs], 1)}")
        rows.append(row)
    return s + table(head, rows)


def future(runs, quick):
    q = " --quick" if quick else ""
    r0 = runs[0]
    ms = r0["machines"]
    s = f"""## Seed 001's future machines (`shmnet sim future`)

Command: `shmnet sim future{q} --json`: the eight rows ({r0['bytes']:,}-byte messages) traced once
and simulated with the seed's in-order model on the seed's 1994 machine, its 1996 and 1998
projections and a line of machines to this one (presets in `crates/shmnet-sim/presets/`,
this machine calibrated in the run). Method: [sim.md](sim.md#future-machines).

"""
    labels = [m["name"] for m in ms]
    for title, key, digits in [("Latency, µs (this machine measured natively in the last column)", "latency_us", 3),
                               ("CPI (this machine: TSC ticks per instruction)", "cpi", 1),
                               ("% of the time waiting for memory (what an ideal cache, every reference a first-level hit, would save)", "memory_pct", 1)]:
        s += f"\n{title}:\n\n"
        rows = []
        for fr in r0["rows"]:
            name = fr["row"]
            row = [name]
            for i, _ in enumerate(ms):
                vals = [x["on"][i][key] for r in runs for x in r["rows"] if x["row"] == name]
                row.append(fig(vals, digits))
            if key == "latency_us":
                row.append(fig([x["measured_us"] for r in runs for x in r["rows"] if x["row"] == name], 3))
            rows.append(row)
        s += table(["row"] + labels + (["measured here"] if key == "latency_us" else []), rows)
    return s


def breakdown(runs, quick):
    q = " --quick" if quick else ""
    r0 = runs[0]
    s = f"""## Seed 001's breakdowns (`shmnet sim breakdown`)

Command: `shmnet sim breakdown{q} --json`: the eight rows ({r0['bytes']:,}-byte messages) traced under
lackey and simulated on `{r0['machine']}` ({r0['tick_unit']} per message): the baseline beside a perfect
instruction cache, a perfect data cache and an ideal cache; the time waiting for memory
(what the ideal cache saves); first-level miss rates in the rows; and the instruction mix,
each traced instruction decoded from its file. Method: [sim.md](sim.md#breakdowns).

"""
    rows = []
    for br in r0["rows"]:
        name = br["row"]
        rs = [x for r in runs for x in r["rows"] if x["row"] == name]
        rows.append([name] + [fig([x[k] for x in rs], 0) for k in
                              ("ticks", "perfect_icache_ticks", "perfect_dcache_ticks", "ideal_ticks")]
                    + [fig([x["memory_pct"] for x in rs], 1) + " %",
                       fig([100 * x["l1i_miss_rate"] for x in rs], 2) + " %",
                       fig([100 * x["l1d_miss_rate"] for x in rs], 2) + " %"])
    s += table(["row", "baseline", "perfect I", "perfect D", "ideal", "waiting for memory",
                "L1I miss rate", "L1D miss rate"], rows)
    classes = [m["class"] for m in r0["rows"][0]["mix"]]
    shown = [c for c in classes if c != "unknown" or any(
        m["pct_instructions"] > 0 for r in runs for x in r["rows"] for m in x["mix"] if m["class"] == c)]
    s += "\nInstruction mix, % of instructions / % of time:\n\n"
    rows = []
    for br in r0["rows"]:
        name = br["row"]
        rs = [x for r in runs for x in r["rows"] if x["row"] == name]
        row = [name]
        for c in shown:
            ms = [m for x in rs for m in x["mix"] if m["class"] == c]
            row.append(f"{fig([m['pct_instructions'] for m in ms], 1)} / {fig([m['pct_ticks'] for m in ms], 1)}")
        rows.append(row)
    s += table(["row"] + shown, rows)
    return s


def rowsweep(runs, quick):
    q = " --quick" if quick else ""
    r0 = runs[0]
    s = f"""## Seed 001's sweeps on the eight rows (`shmnet sim row-sweep`)

Command: `shmnet sim row-sweep{q} --json`: each row traced once and simulated on `{r0['machine']}`
with its first-level caches resized, everything else as the machine has it;
{r0['tick_unit']} per message, in order. The seed's two figures: latency against the first
level's size (direct-mapped), and against its associativity (at the seed's 16 KiB).
Method: [sim.md](sim.md#breakdowns).

"""
    def cell(name, size, ways):
        vals = [c["ticks"] for r in runs for x in r["rows"] if x["row"] == name
                for c in x["cells"] if c["l1_bytes"] == size and c["l1_ways"] == ways]
        return fig(vals, 0)
    names = [x["row"] for x in r0["rows"]]
    kib = lambda b: f"{b >> 10} KiB"
    if 1 in r0["ways"]:
        s += "By size, direct-mapped:\n\n"
        s += table(["row"] + [kib(z) for z in r0["sizes"]],
                   [[n] + [cell(n, z, 1) for z in r0["sizes"]] for n in names])
    at = 16 << 10 if (16 << 10) in r0["sizes"] else r0["sizes"][0]
    s += f"\nBy associativity, {kib(at)}:\n\n"
    s += table(["row"] + [f"{w}-way" for w in r0["ways"]],
               [[n] + [cell(n, at, w) for w in r0["ways"]] for n in names])
    return s


def simbench(runs, quick):
    fmts = [r["format"] for r in runs[0]]
    rows = []
    for f in fmts:
        rs = [x for r in runs for x in r if x["format"] == f]
        per_ref = {x["ticks_per_ref"] for x in rs}
        rows.append([f, f"{rs[0]['refs']:,}", fig([x["refs_per_s"] / 1e6 for x in rs], 1),
                     f"{per_ref.pop():.6f}" if len(per_ref) == 1 else "differs from run to run"])
    per_ref = {x["ticks_per_ref"] for r in runs for x in r}
    refs = runs[0][0]["refs"]
    s = f"""## The cache/TLB simulator (`shmnet sim bench`)

Command: `shmnet sim bench --refs {refs} --json`: a synthetic trace written in each format, then read and
simulated, parsing included.

"""
    s += table(["format", "references", "M refs/s", "ticks per reference (simulated)"], rows)
    binary = [x["refs_per_s"] for r in runs for x in r if x["format"] == "shmnet"]
    s += (f"\nThe simulated result is {'identical in every run and format' if len(per_ref) == 1 else 'NOT identical across runs and formats'}. "
          f"Target (issue 7): 100 M references/s from the binary format: "
          f"**{verdict([x >= 100e6 for x in binary], len(runs))}**.\n")
    return s


def seed002(one, two):
    """Seed 002's ttcp in its own setting: one CPU and two, with its gap measure."""
    if not one or not two:
        return ""
    s = """## Seed 002's ttcp on one CPU and on two (`shmnet ttcp`, UDP)

Commands: `taskset -c 0 shmnet ttcp --structure kernel,ipc,server,inline --size 10,1024,8192
--seconds 1 --json` (every party on one CPU, as on the seed's uniprocessor: the harness's
affinity is inherited by every party it starts) and the same without `taskset`. Each row's
ratios are within one run, medians over the runs with their ranges. *Closes of the gap* is
the seed's own summary measure, `(server − ipc) ÷ (kernel − ipc)` in Gbit/s (`gap_recovered`
in the JSON): 0 at the message-based `ipc` structure's rate, 1 at the kernel's; the seed's
shared-memory server closed about half of it on transmit. Left blank where ipc and the kernel
were within 10 % of each other. *Sleeps/msg* counts every party's voluntary context switches
per message (the seed's explanation of its 10-byte receives beating the kernel: fewer
wake-ups), and *losses* the messages the `server` cell lost (the seed's 8 KB receives fell
off; a pool running dry would show here).
"""
    for runs, title in ((one, "One CPU"), (two, "Two CPUs")):
        rows = []
        for dr in ("tx", "rx"):
            for size in (10, 1024, 8192):
                def cell(run, st):
                    return next((r for r in run["rows"]
                                 if r["structure"] == st and r["size"] == size and r["dir"] == dr), None)
                def col(st, key):
                    return [cell(r, st)[key] if cell(r, st) else None for r in runs]
                lost = [sum(cell(r, "server")["lost_where"].values()) if cell(r, "server") else None
                        for r in runs]
                rows.append([dr, f"{size:,}", fig(col("kernel", "gbit_per_s"), 3),
                             fig(col("ipc", "over_kernel"), 2), fig(col("server", "over_kernel"), 2),
                             fig(col("server", "gap_recovered"), 1),
                             f"{fig(col('kernel', 'sleeps_per_msg'), 2)} / {fig(col('server', 'sleeps_per_msg'), 3)}",
                             str(max((x for x in lost if x is not None), default=0))])
        s += f"\n{title}:\n\n"
        s += table(["dir", "size B", "kernel Gbit/s", "ipc ÷ kernel", "server ÷ kernel",
                    "server closes of the gap", "sleeps/msg kernel / server", "losses (server)"], rows)
    return s


def labservers(runs, quick):
    """Seed 002's three benchmarks as it ran them: one `shmnet lab servers` run (six
    repetitions of every row inside it)."""
    r = runs[-1]
    s = """## Seed 002's benchmarks as it ran them (`shmnet lab servers`)

Command: `shmnet lab servers --json` as root (once: every row is six repetitions inside the
run, mean ± sample standard deviation). ttcp over TCP on one host (kernel over 127.0.0.1,
shmnet over a loopback wire), and transmit and receive apart across the veth pair (the
measured side writes or reads messages of each size; Linux's `nc` on the other end); ftp (`shmnet app send-file`/`recv-file`, `--kernel` for the
kernel row, Debian's `nc` on the other side) and the unmodified `x11perf -dot` (under
`shmnet run` for ipc and server) against Debian's Xvfb across a veth pair between two
namespaces. *Gap* is the seed's `(server − ipc) ÷ (kernel − ipc)` on the means. The seed's
own shape, as ratios to its kernel: ttcp transmit ipc < 1/3 with about half the gap
recovered; ttcp receive 10 B server 1.1×, 1 KB just over 1/2, 8 KB a little above ipc; ftp
ipc 0.25 / 0.4, server 0.45 / 0.5 (transmit / receive); x11perf ipc 0.5, server 0.75.
See [netbench.md](netbench.md#seed-002s-benchmarks-as-it-ran-them-shmnet-lab-servers).
"""
    if r.get("skipped"):
        s += "\nSkipped: " + "; ".join(x["why"] for x in r["skipped"]) + "\n"
    def mean_sd(v):
        if not v:
            return "—"
        return f"{num(v['mean'], 3)} ± {100 * v['sd'] / v['mean']:.0f} %" if v["mean"] else "0"
    def opt(x, d):
        return "—" if x is None else num(x, d)
    def sub(x):
        return None if x is None else x["mean"]
    names = {"ttcp": "ttcp, one host (Gbit/s)", "ttcp_transmit": "ttcp transmit, veth (MB/s)",
             "ttcp_receive": "ttcp receive, veth (MB/s)", "ftp_transmit": "ftp transmit (MB/s)",
             "ftp_receive": "ftp receive (MB/s)", "x11_dot": "x11perf -dot (dots/s)"}
    rows = []
    for x in r["rows"]:
        rows.append([names[x["bench"]], x["cpus"], f"{x['size']:,}" if x["size"] else "",
                     x["structure"], mean_sd(x["value"]), opt(x["over_kernel"], 2),
                     opt(x["gap_recovered"], 2), opt(sub(x["sleeps_per_msg"]), 3),
                     opt(sub(x["wire_bytes_per_frame_sent"]), 0),
                     opt(sub(x["wire_bytes_per_frame_received"]), 0)])
    s += "\n" + table(["benchmark", "CPUs", "size B", "structure", "mean ± sd", "÷ kernel", "gap",
                       "sleeps/msg", "B/frame sent", "B/frame received"], rows)
    if r.get("sync"):
        s += ("\nSeed 002's synchronisation beside ours: `server-faithful` (`--sync faithful`, the "
              "seed's Peterson mutexes, double sub-queues and condition variable) ÷ `server-thread` "
              "(the channel's rings), both with the driver on a thread of the server, same run:\n\n")
        def pair(p, d):
            return "—" if p is None else f"{num(p[0], d)} → {num(p[1], d)}"
        srows = []
        for c in r["sync"]:
            srows.append([names[c["bench"]], c["cpus"], f"{c['size']:,}" if c["size"] else "",
                          num(c["faithful_over_modern"], 2), pair(c.get("cpu_us_per_msg"), 2),
                          pair(c.get("sleeps_per_msg"), 3)])
        s += table(["benchmark", "CPUs", "size B", "faithful ÷ modern",
                    "CPU µs/msg (modern → faithful)", "sleeps/msg (modern → faithful)"], srows)
    if r.get("failures"):
        s += "\nFailures: " + "; ".join(r["failures"]) + "\n"
    return s


def main():
    d = Path(sys.argv[1])
    meta = json.loads((d / "meta.json").read_text())
    seconds = float((d / "seconds").read_text()) if (d / "seconds").exists() else 0.0
    quick = meta["quick"]
    # The TCP stream's table carries its Ethernet-MTU runs too.
    def tcp_stream(runs, quick):
        return ttcptcp(runs, quick, load_runs(d, "ttcptcp1500"))

    parts = [header(meta, seconds)] + [
        render(load_runs(d, name), quick)
        for name, render in [("chan", chan), ("stack", stack), ("handoff", handoff),
                             ("handles", handles), ("tcp", tcp), ("tcpsetup", tcpsetup), ("programs", programs), ("shared", shared), ("multicast", multicast), ("capture", capture), ("labhandles", labhandles), ("labbuffers", labbuffers), ("ttcp", ttcp), ("rr", rr), ("ttcptcp", tcp_stream), ("rrtcp", rrtcp),
                             ("lab", lab), ("validate", validate), ("signature", signature), ("future", future), ("breakdown", breakdown), ("rowsweep", rowsweep), ("simbench", simbench)]
    ]
    parts.insert(-7, seed002(load_runs(d, "seed002one"), load_runs(d, "seed002two")))
    parts.insert(-7, labservers(load_runs(d, "labservers"), quick))
    print("\n".join(parts), end="")


if __name__ == "__main__":
    main()
