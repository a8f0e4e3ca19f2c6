#!/usr/bin/env python3
"""MaxText's own llama2-style decoder (the PyPI package, python/tests/maxtext_models.py builds it), its
parameters made two ways, each in its own process (so each peak RSS is its own), on the CPU:

  layerinit   layerinit.jax.eval_shape(init) (the init traced once, each leaf's initializer read from it),
              then layerinit.jax.init with no rules: one XLA program whose outputs the FFI handler fills
  maxtext     jax.jit(init)(key), as MaxText's training setup makes them (the forward pass included)

Seconds are from the model object to the arrays ready (the trace, the compile and the run for both);
baseline is the RSS just before, peak the process's; "over the weights" is (peak - baseline) / the
weights' bytes - 1. Needs Python >= 3.12 with maxtext installed (scripts/python-test-env).

    python bench/jax/maxtext_bench.py                  # emb 1024, 8 layers, vocab 32000 (~0.2e9 parameters)
    python bench/jax/maxtext_bench.py --axis 0   # the layer axis leading
    python bench/jax/maxtext_bench.py --out bench/results/maxtext-DATE.csv
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

METHODS = ("layerinit", "maxtext")
SIZE = {"base_emb_dim": 1024, "base_num_query_heads": 16, "base_num_kv_heads": 8, "head_dim": 64,
        "base_mlp_dim": 4096, "base_num_decoder_layers": 8, "vocab_size": 32000, "max_target_length": 128}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one(method: str, axis: int) -> dict:
    warnings.simplefilter("ignore")
    import jax
    import jax.numpy as jnp

    import layerinit.jax
    import maxtext_models as mm

    cfg = mm.config(True, axis, **SIZE)
    model = mm.model(cfg)
    fn, args = mm.init_fn(model, cfg)
    jax.jit(lambda x: x + 1)(jnp.zeros(())).block_until_ready()
    base = rss_bytes()
    t0 = time.perf_counter()
    if method == "layerinit":
        params = layerinit.jax.init(layerinit.jax.eval_shape(fn, *args), seed=0)
    elif method == "maxtext":
        params = jax.jit(fn)(*args)
    else:
        raise SystemExit(f"unknown method {method} (valid: {', '.join(METHODS)})")
    arrays = [x for x in jax.tree_util.tree_leaves(params) if isinstance(x, jax.Array)]
    jax.block_until_ready(arrays)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"method": method, "param_scan_axis": axis, "parameters": sum(x.size for x in arrays), "weights_bytes": sum(x.nbytes for x in arrays),
            "seconds": seconds, "baseline_bytes": base, "peak_bytes": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--axis", type=int, default=1, help="MaxText's param_scan_axis (its default 1, or 0)")
    ap.add_argument("--out", help="also write every row (with the 1-minute load average) to this CSV")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.axis)))
        return
    rows = []
    for m in a.methods.split(","):
        r = subprocess.run([sys.executable, __file__, "--one", m, "--axis", str(a.axis)], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{m} failed:\n{r.stderr[-3000:]}")
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row["load"] = os.getloadavg()[0]
        rows.append(row)
    gib = 2.0**30
    print(f"MaxText llama2 decoder {SIZE}, param_scan_axis {a.axis}: {rows[0]['parameters']:,} parameters, "
          f"{rows[0]['weights_bytes'] / gib:.3f} GiB in fp32; memory: host RSS")
    print(f"{'method':10} {'seconds':>8} {'baseline GiB':>13} {'peak GiB':>9} {'peak - baseline':>16} "
          f"{'over the weights':>17}")
    for r in rows:
        extra = r["peak_bytes"] - r["baseline_bytes"]
        print(f"{r['method']:10} {r['seconds']:8.2f} {r['baseline_bytes'] / gib:13.3f} {r['peak_bytes'] / gib:9.3f} "
              f"{extra / gib:16.3f} {extra / r['weights_bytes'] - 1:+17.1%}")
    if a.out:
        import csv

        with open(a.out, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
