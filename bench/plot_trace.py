#!/usr/bin/env python3
"""Memory in use over time while a model is initialized, one line per trace CSV written by
`layerinit build --trace FILE.csv` or bench/cpu/init_model --trace (columns
seconds,event,bytes,current_bytes,layer,tensor). Each line is labelled with its file name (minus .csv).
The x axis is seconds since each trace's first event (traces taken one after another on the same
machine); the legend gives each peak and duration.
usage: plot_trace.py --out docs/memory-trace.png [--title T] TRACE.csv..."""
import argparse
import csv
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--title", default="memory in use while initializing")
p.add_argument("traces", nargs="+")
a = p.parse_args()

fig, ax = plt.subplots(figsize=(10, 5.5), dpi=120)
styles = {"layerinit": "-", "naive": "--"}
for path in a.traces:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        continue
    t = [float(r["seconds"]) for r in rows]
    y = [int(r["current_bytes"]) / 2**30 for r in rows]
    t0, t1 = t[0], t[-1]
    span = t1 - t0
    # A step line: bytes in use hold until the next event; start from 0 just before the first.
    xs, ys = [0.0], [0.0]
    for ti, yi in zip(t, y):
        x = ti - t0
        xs += [x, x]
        ys += [ys[-1], yi]
    name = os.path.basename(path)[:-4] if path.endswith(".csv") else os.path.basename(path)
    kind = "layerinit" if name.startswith("layerinit") else "naive"
    ax.plot(xs, ys, styles[kind], lw=2 if kind == "layerinit" else 1.5,
            label=f"{name}: peak {max(y):.2f} GiB, {span:.1f} s")
ax.set_xlabel("seconds since the first allocation")
ax.set_ylabel("bytes in use (GiB, tracked allocations)")
ax.set_title(a.title)
ax.grid(alpha=0.3)
ax.legend(fontsize=8, loc="upper left")
fig.tight_layout()
fig.savefig(a.out)
print(f"wrote {a.out}")
