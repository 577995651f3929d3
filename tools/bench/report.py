#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
#
# report.py DIR: the tables, CSV files and plots of `make bench` from the
# guest's console (DIR/bench.log, lines "kverbs-bench: row TEST IMPL QPS
# SIZE ROUND FIELDS..." and "kverbs-bench: limit TEST QPS SIZE ROUND
# size S mtu M packets P messages N tx_ns T rx_ns R crc D" written by
# tools/bench/guest-bench.sh).
#
# Bandwidth tests compare "BW average[MB/sec]" and "MsgRate[Mpps]"; latency
# tests "t_typical[usec]" (perftest's median). "kverbs" is the sample's
# default poll mode (adaptive), "kverbs_direct" busy polling and
# "kverbs_softirq" the core's softirq poll (bandwidth tests). Each figure is the median
# of the rounds. The limit of a bandwidth test (tools/bench/limit: rxe's
# per-byte work for one message, timed in the kernel, its requester half tx
# and responder half rx) is size / max(tx, rx): the two halves on the
# guest's two CPUs at once; size / (tx + rx), one CPU, is in the CSV too.
# A limit is the best of its rounds, not their median: noise only slows
# the work down, and a bound must not be lowered by it.
# A figure above the limit is listed: the model misses something. The
# loops of the 8-QP remote invalid request error ("kverbs-bench: invreq
# IMPL LOOP ok|failed statuses=..."; INV_REQ_LOOPS) are counted per
# implementation, apart from the runs. The latency runs of two poll modes
# taking turns in one run (kverbs_ab, kverbs_ab_MODE) get a table of their
# own: per cell the geometric mean and the median of the rounds' ratios
# (default over MODE) and in how many rounds the default was faster. Writes
# DIR/raw.csv (every run), DIR/limit.csv (every limit run),
# DIR/summary.csv, DIR/summary.txt (what is printed) and DIR/<test>.png
# (gnuplot, if present). The NVMe runs ("kverbs-bench: nvme ...", make
# bench-nvme) get their table, CSV files and plot from report_nvme.py.

import csv
import math
import os
import shutil
import statistics
import subprocess
import sys

import report_nvme

IMPLS = ["perftest", "c", "kverbs", "kverbs_direct", "kverbs_softirq"]
BW_FIELDS = ["bytes", "iterations", "bw_peak_mb_s", "bw_avg_mb_s", "msg_rate_mpps"]
LAT_FIELDS = ["bytes", "iterations", "t_min_us", "t_max_us", "t_typical_us",
              "t_avg_us", "t_stdev_us", "p99_us", "p99_9_us"]


# What a run was measured on (DIR/run.env, written by bench.sh): a column
# of each CSV.
RUN_KEYS = ["kernel", "commit", "machine"]
LIMIT_KEYS = ["size", "mtu", "packets", "messages", "tx_ns", "rx_ns", "crc"]
MB = 1 << 20


def limit_mb_s(lim, cpus):
    """The bound of one limit run, in MB/sec (perftest's MB, 2^20 bytes)."""
    ns = max(lim["tx_ns"], lim["rx_ns"]) if cpus == 2 else lim["tx_ns"] + lim["rx_ns"]
    return round(lim["size"] * 1e9 / ns / MB, 3) if ns else None


def run_env(out):
    env = dict.fromkeys(RUN_KEYS, "")
    try:
        with open(os.path.join(out, "run.env")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                if k in env:
                    env[k] = v
    except FileNotFoundError:
        pass
    return env


def main():
    out = sys.argv[1]
    env = run_env(out)
    runs, fails, limits, invreq, nvme = [], [], [], [], []
    with open(os.path.join(out, "bench.log"), errors="replace") as f:
        for line in f:
            words = line.split()
            if len(words) < 2 or words[0] != "kverbs-bench:":
                continue
            if words[1] == "fail":
                fails.append(" ".join(words[2:]))
            if words[1] == "invreq" and len(words) == 6:
                invreq.append((words[2], words[4], words[5].removeprefix("statuses=")))
                continue
            if words[1] == "nvme":
                r = report_nvme.parse(words[2:])
                if r is None:
                    fails.append(" ".join(words[2:8]) + ": an nvme line not understood")
                else:
                    nvme.append(r)
                continue
            if words[1] == "limit":
                lim = parse_limit(words[2:])
                if lim is None:
                    fails.append(" ".join(words[2:6]) + ": a limit line not understood")
                else:
                    limits.append(lim)
                continue
            if words[1] != "row" or len(words) < 8:
                continue
            test, impl, qps, size, rnd = words[2:7]
            fields = words[7:]
            names = LAT_FIELDS if test.endswith("_lat") else BW_FIELDS
            if len(fields) != len(names):
                fails.append(f"{test} {impl} {qps} {size} {rnd}: row of {len(fields)} fields")
                continue
            r = dict(zip(names, (float(x) for x in fields)))
            r.update(test=test, impl=impl, qps=int(qps), size=int(size), round=int(rnd))
            runs.append(r)

    with open(os.path.join(out, "raw.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["test", "impl", "qps", "size", "round"] + sorted(set(BW_FIELDS + LAT_FIELDS)) +
                   RUN_KEYS)
        for r in runs:
            w.writerow([r["test"], r["impl"], r["qps"], r["size"], r["round"]] +
                       [r.get(k, "") for k in sorted(set(BW_FIELDS + LAT_FIELDS))] +
                       [env[k] for k in RUN_KEYS])

    with open(os.path.join(out, "limit.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["test", "qps", "round"] + LIMIT_KEYS + ["limit_mb_s", "limit_1cpu_mb_s"] + RUN_KEYS)
        for lim in limits:
            w.writerow([lim["test"], lim["qps"], lim["round"]] + [lim[k] for k in LIMIT_KEYS] +
                       [limit_mb_s(lim, 2), limit_mb_s(lim, 1)] + [env[k] for k in RUN_KEYS])

    def median(test, impl, qps, size, key):
        v = [r[key] for r in runs if (r["test"], r["impl"], r["qps"], r["size"]) == (test, impl, qps, size)]
        return (statistics.median(v), len(v)) if v else (None, 0)

    def limit(test, qps, size, cpus):
        v = [limit_mb_s(x, cpus) for x in limits if (x["test"], x["qps"], x["size"]) == (test, qps, size)]
        v = [x for x in v if x is not None]
        return max(v) if v else None

    text = []
    p = text.append
    summary = []
    above = []
    tests = []
    for r in runs:
        if r["test"] not in tests:
            tests.append(r["test"])
    for test in tests:
        lat = test.endswith("_lat")
        key = "t_typical_us" if lat else "bw_avg_mb_s"
        unit = "t_typical [usec]" if lat else "BW average [MB/sec]"
        for qps in sorted({r["qps"] for r in runs if r["test"] == test}):
            sizes = sorted({r["size"] for r in runs if r["test"] == test and r["qps"] == qps})
            p("")
            p(f"{test}, {qps} QP{'s' if qps > 1 else ''}: {unit}, median of rounds"
              + ("" if lat else "; message rate [Mpps]"))
            hdr = f"{'size':>8} {'perftest':>10} {'C':>10} {'kverbs':>10} {'kv/perftest':>12} {'kv/C':>8}"
            if lat:
                hdr += f" {'kv direct':>10} {'kv/direct':>9}"
            else:
                hdr += f" {'Mpps pt':>9} {'Mpps kv':>9} {'kv/pt':>6} {'kv direct':>10} {'/perftest':>9}"
                hdr += f" {'kv softirq':>10} {'/perftest':>9}"
                hdr += f" {'limit':>10} {'kv/limit':>8}"
            p(hdr)
            for size in sizes:
                m = {i: median(test, i, qps, size, key) for i in IMPLS}
                val = {i: m[i][0] for i in IMPLS}

                def fmt(x):
                    return f"{x:10.2f}" if x is not None else f"{'-':>10}"

                def ratio(a, b, width):
                    return f"{a / b:{width}.2f}" if a is not None and b else f"{'-':>{width}}"
                line = (f"{size:>8} {fmt(val['perftest'])} {fmt(val['c'])} {fmt(val['kverbs'])} "
                        f"{ratio(val['kverbs'], val['perftest'], 12)} {ratio(val['kverbs'], val['c'], 8)}")
                row = dict(test=test, qps=qps, size=size, metric=key,
                           perftest=val["perftest"], c=val["c"], kverbs=val["kverbs"],
                           kverbs_direct=val["kverbs_direct"],
                           rounds=min((m[i][1] for i in IMPLS if m[i][1]), default=0))
                if lat:
                    line += f" {fmt(val['kverbs_direct'])} {ratio(val['kverbs'], val['kverbs_direct'], 9)}"
                else:
                    rp = median(test, "perftest", qps, size, "msg_rate_mpps")[0]
                    rk = median(test, "kverbs", qps, size, "msg_rate_mpps")[0]
                    def mpps(x):
                        return f"{x:9.6f}" if x is not None else f"{'-':>9}"
                    line += f" {mpps(rp)} {mpps(rk)} {ratio(rk, rp, 6)}"
                    line += f" {fmt(val['kverbs_direct'])} {ratio(val['kverbs_direct'], val['perftest'], 9)}"
                    line += f" {fmt(val['kverbs_softirq'])} {ratio(val['kverbs_softirq'], val['perftest'], 9)}"
                    lim, lim1 = limit(test, qps, size, 2), limit(test, qps, size, 1)
                    line += f" {fmt(lim)} {ratio(val['kverbs'], lim, 8)}"
                    row.update(mpps_perftest=rp, mpps_kverbs=rk, kverbs_softirq=val["kverbs_softirq"],
                               limit=lim, limit_1cpu=lim1)
                    if lim is not None:
                        above += [f"{test} {qps} {size} {i}: {val[i]:.2f} > {lim:.2f}"
                                  for i in IMPLS if val[i] is not None and val[i] > lim]
                p(line)
                summary.append(row)
    ab_table(runs, p, summary)
    report_nvme.report(out, nvme, env, RUN_KEYS, p)
    if limits:
        p("")
        p("limit: rxe's per-byte work for the message (copies, ICRCs, skbs; tools/bench/limit),")
        p("timed in the kernel, its two halves on the two CPUs at once, the best of its rounds: an upper bound.")
        if above:
            p(f"figures above the limit (the model misses something): {len(above)}")
            for x in above:
                p("  " + x)
    if invreq:
        p("")
        p("write_bw 64 KiB, 8 QPs, 300 iterations, short ACK timeout (INV_REQ_LOOPS): "
          "failed runs and the statuses rxe logged")
        for impl in IMPLS:
            mine = [x for x in invreq if x[0] == impl]
            if mine:
                bad = [x for x in mine if x[1] != "ok"]
                st = sorted({s for x in mine for s in x[2].split(",") if s != "none"}, key=int)
                p(f"  {impl:<15} {len(bad)} of {len(mine)} failed; statuses: {','.join(st) or 'none'}")
    if fails:
        p("")
        p(f"runs without a result: {len(fails)}")
        for x in fails:
            p("  " + x)
    p("")
    p(f"runs: {len(runs)}{f', NVMe runs: {len(nvme)}' if nvme else ''}; results: {out}")
    if any(env.values()):
        p("; ".join(f"{k}: {env[k]}" for k in RUN_KEYS if env[k]))
    print("\n".join(text))
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(text) + "\n")
    keys = ["test", "qps", "size", "metric", "perftest", "c", "kverbs", "kverbs_direct", "rounds",
            "mpps_perftest", "mpps_kverbs", "kverbs_softirq", "limit", "limit_1cpu",
            "ab_kverbs", "ab_other", "ab_ratio"] + RUN_KEYS
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for row in summary:
            w.writerow({k: row.get(k, env.get(k, "")) for k in keys})
    plot(out, summary)
    return 1 if fails else 0


def ab_table(runs, p, summary):
    """The latency runs of two poll modes interleaved in one run (kverbs_ab:
    the default mode, kverbs_ab_MODE: the other): per cell the medians of
    the rounds and the rounds' own ratios, default over other (their
    geometric mean and median; a ratio of one run compares the same guest
    at the same time). Adds ab_* to the cell's summary row."""
    others = sorted({r["impl"] for r in runs if r["impl"].startswith("kverbs_ab_")})
    for other in others:
        mode = other.removeprefix("kverbs_ab_")
        cells = sorted({(r["test"], r["size"]) for r in runs if r["impl"] == other})
        p("")
        p(f"latency, kverbs' default mode and poll={mode} taking turns in one run (ab={mode},"
          " blocks of 20 iterations): t_typical [usec]")
        p(f"{'test':>10} {'size':>6} {'default':>9} {mode:>9} {'geomean':>8} {'median':>7}"
          f" {'faster':>7} (ratios of the rounds, default / {mode})")
        for test, size in cells:
            mine = {r["round"]: r["t_typical_us"] for r in runs
                    if (r["impl"], r["test"], r["size"]) == ("kverbs_ab", test, size)}
            theirs = {r["round"]: r["t_typical_us"] for r in runs
                      if (r["impl"], r["test"], r["size"]) == (other, test, size)}
            rounds = sorted(set(mine) & set(theirs))
            ratios = [mine[k] / theirs[k] for k in rounds if theirs[k]]
            if not ratios:
                continue
            gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            med = statistics.median(ratios)
            faster = sum(1 for x in ratios if x < 1)
            a = statistics.median(mine[k] for k in rounds)
            b = statistics.median(theirs[k] for k in rounds)
            p(f"{test:>10} {size:>6} {a:9.2f} {b:9.2f} {gm:8.3f} {med:7.3f} {faster:>3}/{len(ratios):<3}")
            for row in summary:
                if (row["test"], row["qps"], row["size"]) == (test, 1, size):
                    row.update(ab_kverbs=a, ab_other=b, ab_ratio=round(gm, 4))


def parse_limit(words):
    """A limit line's words after "limit": TEST QPS SIZE ROUND, then pairs."""
    if len(words) < 4 + 2 * len(LIMIT_KEYS):
        return None
    test, qps, size, rnd = words[:4]
    pairs = dict(zip(words[4::2], words[5::2]))
    try:
        lim = {k: (pairs[k] if k == "crc" else int(pairs[k])) for k in LIMIT_KEYS}
        lim.update(test=test, qps=int(qps), round=int(rnd))
        same = lim["size"] == int(size)
    except (KeyError, ValueError):
        return None
    return lim if same else None


def plot(out, summary):
    if not shutil.which("gnuplot"):
        print("gnuplot is not installed: no plots")
        return
    for test in sorted({r["test"] for r in summary}):
        rows = [r for r in summary if r["test"] == test and r["qps"] == 1]
        if not rows:
            continue
        dat = os.path.join(out, f"{test}.dat")
        with open(dat, "w") as f:
            for r in rows:
                f.write(" ".join(str(r[k]) if r.get(k) is not None else "NaN"
                                 for k in ("size", "perftest", "c", "kverbs", "kverbs_softirq", "limit",
                                           "kverbs_direct")) + "\n")
        lat = test.endswith("_lat")
        ylabel = "t_typical [usec]" if lat else "BW average [MB/sec]"
        script = f"""
set terminal png size 900,600 noenhanced
set output '{os.path.join(out, test + ".png")}'
set title '{test}: perftest, C, kverbs{"" if lat else " and the limit"} (median of rounds, rxe on lo, one guest)'
set logscale x 2
{'' if lat else 'set logscale y 10'}
set xlabel 'message size [bytes]'
set ylabel '{ylabel}'
set key left top
set grid
plot '{dat}' using 1:2 with linespoints title 'perftest', \\
     '{dat}' using 1:3 with linespoints title 'C (raw verbs)', \\
     '{dat}' using 1:4 with linespoints title 'kverbs', \\
     '{dat}' using 1:7 with linespoints title 'kverbs, poll=direct'{"" if lat else ", '" + dat + "' using 1:5 with linespoints title 'kverbs, poll=softirq', '" + dat + "' using 1:6 with lines dashtype 2 lw 2 title 'limit (rxe per-byte work, 2 CPUs)'"}
"""
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True, check=False)
        if r.returncode != 0:
            print(f"gnuplot failed for {test}:\n{r.stderr}")


if __name__ == "__main__":
    sys.exit(main())
