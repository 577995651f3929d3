# SPDX-License-Identifier: GPL-2.0
#
# The NVMe table of `make bench` (report.py calls it): the runs of
# tools/bench/guest-nvme.sh ("kverbs-bench: nvme TEST IMPL QD BS ROUND IOPS
# KIB_S P50_US P99_US"), fio on kverbs_nvme's disk and on the C host's
# (nvme-rdma, one I/O queue; the _2q ones: two), against one nvmet-rdma
# target in one guest, taking turns. Per test the medians of the rounds
# (IOPS for 4 KiB, MB/s for 128 KiB; completion latency p50 and p99 in
# us), kverbs_nvme over nvme_rdma of the medians, and the geometric mean
# of the rounds' own ratios (runs of one round are minutes apart at most).
# Writes DIR/nvme_raw.csv, DIR/nvme_summary.csv and DIR/nvme.png.

import csv
import math
import os
import shutil
import statistics
import subprocess

IMPLS = ["kverbs_nvme", "nvme_rdma", "kverbs_nvme_2q", "nvme_rdma_2q"]
FIELDS = ["iops", "kib_s", "p50_us", "p99_us"]


def parse(words):
    """A line's words after "nvme": TEST IMPL QD BS ROUND and the four
    figures; None if not that."""
    if len(words) != 9:
        return None
    try:
        r = dict(zip(FIELDS, (float(x) for x in words[5:])))
        r.update(test=words[0], impl=words[1], qd=int(words[2]), bs=words[3], round=int(words[4]))
    except ValueError:
        return None
    return r


def metric(r):
    """The figure a test is compared by: MB/s (2^20 bytes) for sequential
    transfers, IOPS for the others."""
    return "mb_s" if r["test"].startswith("seq") else "iops"


def report(out, runs, env, run_keys, p):
    if not runs:
        return
    for r in runs:
        r["mb_s"] = r["kib_s"] / 1024
    with open(os.path.join(out, "nvme_raw.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["test", "impl", "qd", "bs", "round"] + FIELDS + run_keys)
        for r in runs:
            w.writerow([r[k] for k in ("test", "impl", "qd", "bs", "round")] + [r[k] for k in FIELDS] +
                       [env[k] for k in run_keys])

    def of(test, impl, key):
        return {r["round"]: r[key] for r in runs if (r["test"], r["impl"]) == (test, impl)}

    def med(test, impl, key):
        v = list(of(test, impl, key).values())
        return statistics.median(v) if v else None

    def fmt(x, width=9, digits=1):
        return f"{x:{width}.{digits}f}" if x is not None else f"{'-':>{width}}"

    tests = []
    for r in runs:
        if r["test"] not in tests:
            tests.append(r["test"])
    p("")
    p("NVMe over RDMA: fio (libaio, O_DIRECT) on kverbs_nvme and on the C host (nvme-rdma), one nvmet-rdma")
    p("target on rxe, one guest, taking turns; median of rounds. kv/C: kverbs_nvme over nvme_rdma (1 I/O")
    p("queue each), of the medians; geo: the geometric mean of the rounds' own ratios; 2q: 2 I/O queues each")
    p(f"{'test':<15} {'qd':>3} {'bs':>5} {'unit':>5} {'kverbs':>9} {'C':>9} {'kv/C':>6} {'geo':>6}"
      f" {'kv 2q':>9} {'C 2q':>9} {'2q kv/C':>7} {'p50 kv':>8} {'p50 C':>8} {'p99 kv':>8} {'p99 C':>8}")
    summary = []
    for test in tests:
        r0 = next(r for r in runs if r["test"] == test)
        key = metric(r0)
        kv, c, kv2, c2 = (med(test, i, key) for i in IMPLS)
        mine, theirs = of(test, "kverbs_nvme", key), of(test, "nvme_rdma", key)
        ratios = [mine[k] / theirs[k] for k in sorted(set(mine) & set(theirs)) if theirs[k] and mine[k]]
        gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
        lat = {(i, q): med(test, i, q) for i in IMPLS for q in ("p50_us", "p99_us")}
        p(f"{test:<15} {r0['qd']:>3} {r0['bs']:>5} {'MB/s' if key == 'mb_s' else 'IOPS':>5} {fmt(kv)} {fmt(c)}"
          f" {fmt(kv / c if kv is not None and c else None, 6, 2)} {fmt(gm, 6, 2)}"
          f" {fmt(kv2)} {fmt(c2)} {fmt(kv2 / c2 if kv2 is not None and c2 else None, 7, 2)}"
          f" {fmt(lat['kverbs_nvme', 'p50_us'], 8, 0)} {fmt(lat['nvme_rdma', 'p50_us'], 8, 0)}"
          f" {fmt(lat['kverbs_nvme', 'p99_us'], 8, 0)} {fmt(lat['nvme_rdma', 'p99_us'], 8, 0)}")
        summary.append(dict(test=test, qd=r0["qd"], bs=r0["bs"], metric=key, kverbs_nvme=kv, nvme_rdma=c,
                            kverbs_nvme_2q=kv2, nvme_rdma_2q=c2,
                            ratio_2q=round(kv2 / c2, 4) if kv2 is not None and c2 else None, ratio=round(kv / c, 4) if kv is not None and c else None,
                            ratio_rounds=round(gm, 4) if gm else None, rounds=len(ratios),
                            p50_kverbs_nvme=lat["kverbs_nvme", "p50_us"], p50_nvme_rdma=lat["nvme_rdma", "p50_us"],
                            p99_kverbs_nvme=lat["kverbs_nvme", "p99_us"], p99_nvme_rdma=lat["nvme_rdma", "p99_us"],
                            **{k: env[k] for k in run_keys}))
    keys = list(summary[0].keys())
    with open(os.path.join(out, "nvme_summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        w.writerows(summary)
    plot(out, summary)


def plot(out, summary):
    """Bars: each test's figure for the three hosts, relative to
    nvme_rdma's (1.0)."""
    if not shutil.which("gnuplot"):
        return
    dat = os.path.join(out, "nvme.dat")
    with open(dat, "w") as f:
        for s in summary:
            c = s["nvme_rdma"]
            vals = [s[i] / c if s[i] is not None and c else "NaN" for i in IMPLS]
            f.write(f"{s['test']} " + " ".join(str(v) for v in vals) + "\n")
    script = f"""
set terminal png size 900,600 noenhanced
set output '{os.path.join(out, "nvme.png")}'
set title 'fio, one nvmet-rdma target on rxe: median of rounds, relative to nvme-rdma (1 queue)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel 'IOPS or MB/s, nvme-rdma = 1'
set yrange [0:*]
set grid ytics
set key below horizontal
set xtics rotate by -30
plot '{dat}' using 2:xtic(1) title 'kverbs_nvme (1 queue)', '' using 3 title 'nvme-rdma (1 queue)', \\
     '' using 4 title 'kverbs_nvme (2 queues)', '' using 5 title 'nvme-rdma (2 queues)'
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True, check=False)
    if r.returncode != 0:
        print(f"gnuplot failed for nvme:\n{r.stderr}")
