#!/usr/bin/env python3
"""Prints the tables of a bench/cpu/run CSV (medians over runs), markdown-ready.
usage: summarize.py bench/results/cpu-DATE.csv"""
import csv
import statistics
import sys
from collections import defaultdict

path = sys.argv[1]
with open(path) as f:
    header = [l for l in f if l.startswith("#")]
    f.seek(0)
    rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
for h in header:
    print(h.rstrip())


def med(xs):
    xs = [float(x) for x in xs if x not in ("", None)]
    return statistics.median(xs) if xs else None


fill = defaultdict(list)
loads = defaultdict(list)
for r in rows:
    if r["section"] == "fill":
        fill[(r["impl"], r["dtype"], r["kind"], int(r["threads"]))].append(r["values_per_s"])
        loads["fill"].append(float(r["load1"]))
if fill:
    threads = sorted({k[3] for k in fill})
    print(f"\n### Fill rate, million values per second (median of runs; load1 during runs "
          f"{min(loads['fill']):.1f}-{max(loads['fill']):.1f})\n")
    cols = [(impl, t) for t in threads for impl in ("layerinit", "numpy", "torch")]
    print("| dtype | kind | " + " | ".join(f"{i} {t}T" for i, t in cols) +
          " | vs numpy 1T | vs torch 1T | vs numpy all | vs torch all |")
    print("|" + "---|" * (2 + len(cols) + 4))
    for d in ("bf16", "fp16", "fp32"):
        for k in ("normal", "trunc_normal", "uniform"):
            v = {c: med(fill.get((c[0], d, k, c[1]), [])) for c in cols}
            if v[("layerinit", threads[0])] is None:
                continue
            cells = ["-" if v[c] is None else f"{v[c] / 1e6:.0f}" for c in cols]
            ratios = []
            for t in (threads[0], threads[-1]):
                for peer in ("numpy", "torch"):
                    li, p = v[("layerinit", t)], v.get((peer, t))
                    ratios.append("-" if not li or not p else f"{li / p:.2f}x")
            print(f"| {d} | {k} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")

model = defaultdict(list)
for r in rows:
    if r["section"] == "model":
        model[(r["impl"], int(r["threads"]))].append(r)
if model:
    def base_of(impl):
        if impl.startswith("layerinit"):
            return "layerinit-nothing"
        return "torch-nothing" if impl.startswith(("torch", "hf")) else "jax-nothing"

    print("\n### Llama 3.2 1B shape (1,235,814,400 parameters) in bf16 on the CPU (median of runs)\n")
    print("| method | threads | create s | process wall s | peak RSS GiB | baseline GiB | peak - baseline GiB "
          "| weights GiB | (peak - baseline) / weights | load1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    gib = 1 << 30
    for (impl, th), rs in model.items():
        if impl.endswith("nothing"):
            continue
        sec, wall, rss = med(r["seconds"] for r in rs), med(r["wall_s"] for r in rs), med(r["peak_rss_kib"] for r in rs)
        w = med(r["weights_bytes"] for r in rs)
        b = med(r["peak_rss_kib"] for r in model.get((base_of(impl), th), []))
        ld = [float(r["load1"]) for r in rs]
        if rss is None:
            print(f"| {impl} | {th} | failed | | | | | | | |")
            continue
        over = (rss - b) * 1024 if b is not None else None
        print(f"| {impl} | {th} | {sec:.2f} | {wall:.2f} | {rss / 1048576:.2f} | "
              + ("-" if b is None else f"{b / 1048576:.2f}") + " | "
              + ("-" if over is None else f"{over / gib:.2f}") + f" | {w / gib:.2f} | "
              + ("-" if over is None or not w else f"{over / w:.3f}") + f" | {min(ld):.1f}-{max(ld):.1f} |")

huge = defaultdict(list)
for r in rows:
    if r["section"] == "huge":
        huge[r["impl"]].append(r)
if huge.get("huge-memset") and huge.get("huge-stacked"):
    ms, st = huge["huge-memset"], huge["huge-stacked"]
    t_ms, t_st = med(r["seconds"] for r in ms), med(r["seconds"] for r in st)
    w = med(r["weights_bytes"] for r in st)
    ld = [float(r["load1"]) for r in ms + st]
    print(f"\n### A huge model in bf16 beside memset on the same {st[0]['threads']} threads (median of runs; "
          f"load1 {min(ld):.1f}-{max(ld):.1f})\n")
    print("| method | seconds | GB/s | peak RSS GiB | build / memset |")
    print("|---|---|---|---|---|")
    for name, rs, t in (("memset (first touch)", ms, t_ms), ("layerinit stacked build", st, t_st)):
        rss = med(r["peak_rss_kib"] for r in rs)
        print(f"| {name} | {t:.2f} | {w / t / 1e9:.2f} | {rss / 1048576:.2f} | {t / t_ms:.2f}x |")
