#!/usr/bin/env python3
"""Emit cost against the number of tensors: a spec of N tiny tensors (MoE experts in Hugging Face
names, as DeepSeek-V3's ~46k and Kimi-K2's ~70k tensors are), emitted to safetensors and to HDF5 by
the CLI; wall time and peak RSS of each run (os.wait4's rusage of that one process), the median of
--reps runs. Emitting N tensors should cost O(N) time and O(1) memory per tensor beyond the index.

usage: bench/cpu/many_tensors.py [--binary build/bin/layerinit] [--counts 25000,50000,100000,200000]
                                 [--reps 3] [--out bench/results/many-tensors-DATE.csv]
Each layer holds 256 experts of three [8, 4] bf16 weights (64 bytes each), so N tensors are
ceil(N / 768) layers plus the embedding, norm and head."""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

EXPERTS = 256
WEIGHTS = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")


def spec(tensors):
    per_layer = EXPERTS * len(WEIGHTS)
    layers = -(-tensors // per_layer)
    layer = []
    for w in WEIGHTS:
        for e in range(EXPERTS):
            layer.append({"name": f"mlp.experts.{e}.{w}", "shape": [8, 4], "role": "linear_weight",
                          "fan_in": 4, "fan_out": 8, "transposable": True})
    # Experts must be listed expert by expert within each weight: 0..E-1 of one `rest`, then the next.
    return {
        "name": f"many-{tensors}",
        "family": "custom",
        "hyper": {"hidden_size": 4, "initializer_range": 0.02},
        "pre": [{"name": "model.embed_tokens.weight", "shape": [64, 4], "role": "embedding"}],
        "layer": {"prefix": "model.layers.", "count": layers, "expert_prefix": "mlp.experts.", "tensors": layer},
        "post": [{"name": "model.norm.weight", "shape": [4], "role": "norm_weight"},
                 {"name": "lm_head.weight", "shape": [64, 4], "role": "head_weight", "fan_in": 4, "fan_out": 64,
                  "transposable": True}],
    }, 3 + layers * per_layer


def run(cmd):
    """Wall seconds and peak RSS (KiB) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode()
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    return wall, usage.ru_maxrss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/layerinit")
    ap.add_argument("--counts", default="25000,50000,100000,200000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--out", default=f"bench/results/many-tensors-{datetime.date.today()}.csv")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="layerinit-many-") as tmp:
        for n in (int(x) for x in a.counts.split(",")):
            s, total = spec(n)
            spec_path = os.path.join(tmp, "spec.json")
            with open(spec_path, "w") as f:
                json.dump(s, f)
            for fmt in ("safetensors", "hdf5"):
                walls, rss = [], []
                for _ in range(a.reps):
                    out = os.path.join(tmp, "out")
                    wall, kib = run([a.binary, "emit", "--spec", spec_path, "--backend", "cpu", "--threads", a.threads,
                                     "--format", fmt, "-o", out])
                    walls.append(wall)
                    rss.append(kib)
                    shutil.rmtree(out, ignore_errors=True) if os.path.isdir(out) else os.remove(out)
                row = (total, fmt, statistics.median(walls), statistics.median(rss) / 1024, os.getloadavg()[0])
                rows.append(row)
                print(f"{row[0]:>7} tensors  {fmt:<11}  {row[2]:7.2f} s  {row[3]:8.1f} MiB peak RSS  (load {row[4]:.2f})",
                      flush=True)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        f.write(f"# {' '.join(sys.argv)}\n# {datetime.datetime.now().isoformat(timespec='seconds')}\n")
        f.write("tensors,format,wall_s,peak_rss_mib,load1\n")
        for r in rows:
            f.write(f"{r[0]},{r[1]},{r[2]:.3f},{r[3]:.1f},{r[4]:.2f}\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
