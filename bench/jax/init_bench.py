#!/usr/bin/env python3
"""Initializes the Mistral-shaped Equinox model of examples/jax/mistral_equinox.py in bf16 on the CPU,
three ways, each in its own process (so each peak RSS is its own), and prints them side by side:

  layerinit   layerinit.jax.init of the abstract model (eqx.filter_eval_shape): one XLA program whose
              outputs layerinit's FFI handler fills in place, in bf16 from the start
  equinox     the model's own __init__ (eqx.filter_vmap over the layers' keys, fp32), then cast to bf16
  normal      jax.random.normal(key, shape, dtype=bf16) for every leaf, under jax.jit
  reinit      layerinit.jax.init of the model made by layerinit, again (a re-init of a live model: the
              new arrays beside the old until they are dropped); the time is the second init's
  donate      the same with donate=True: the new arrays written into the old ones' buffers

Peak RSS is the process's (getrusage), baseline its RSS after the imports and a first jit, just before
the model is made; "over the weights" is (peak - baseline) / the weights' bytes - 1. Where JAX's default
backend is a GPU (jax[cuda]), the model is made there and the same columns are the device's: XLA's
`memory_stats()` bytes in use before the model (baseline) and its peak bytes in use (peak), and the
device's free memory after (`bytes_limit - bytes_in_use`).

    python bench/jax/init_bench.py                 # the 1B config (1.0e9 parameters, 2.0 GB bf16)
    python bench/jax/init_bench.py --config tiny   # a quick check
    python bench/jax/init_bench.py --out bench/results/jax-DATE.csv   # and the raw rows
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "jax"))

METHODS = ("layerinit", "equinox", "normal", "reinit", "donate")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one(method: str, config: str) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import layerinit.jax
    from mistral_equinox import CONFIGS, RULES, Mistral

    c = CONFIGS[config]
    jax.jit(lambda x: x + 1)(jnp.zeros(())).block_until_ready()  # the backend up and one program compiled
    abstract = eqx.filter_eval_shape(Mistral, c, jax.random.key(0))
    device = jax.devices()[0]
    on_gpu = device.platform == "gpu"
    base = device.memory_stats()["bytes_in_use"] if on_gpu else rss_bytes()
    t0 = time.perf_counter()
    if method in ("layerinit", "reinit", "donate"):
        model = layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16)
        if method != "layerinit":
            jax.block_until_ready(model)
            t0 = time.perf_counter()
            model = layerinit.jax.init(model, seed=1, recipe="torchtitan", rules=RULES, donate=method == "donate")
    elif method == "equinox":
        model = Mistral(c, jax.random.key(0))
        model = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16) if eqx.is_inexact_array(x) else x, model)
    elif method == "normal":
        params, static = eqx.partition(abstract, lambda x: isinstance(x, jax.ShapeDtypeStruct))
        leaves, treedef = jax.tree_util.tree_flatten(params)

        @jax.jit
        def make(key):
            keys = jax.random.split(key, len(leaves))
            return [jax.random.normal(k, x.shape, dtype=jnp.bfloat16) for k, x in zip(keys, leaves)]

        model = eqx.combine(jax.tree_util.tree_unflatten(treedef, make(jax.random.key(0))), static)
    else:
        raise SystemExit(f"unknown method {method} (valid: {', '.join(METHODS)})")
    arrays = [x for x in jax.tree_util.tree_leaves(model) if isinstance(x, jax.Array)]
    jax.block_until_ready(arrays)
    seconds = time.perf_counter() - t0
    assert all(x.dtype == jnp.bfloat16 and x.devices() == {device} for x in arrays)
    free = ""
    if on_gpu:
        st = device.memory_stats()
        peak, free = st["peak_bytes_in_use"], st["bytes_limit"] - st["bytes_in_use"]
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"method": method, "config": config, "device": device.device_kind if on_gpu else "cpu",
            "parameters": sum(x.size for x in arrays), "weights_bytes": sum(x.nbytes for x in arrays),
            "seconds": seconds, "baseline_bytes": base, "peak_bytes": peak, "device_free_after": free}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="1b", help="a config of examples/jax/mistral_equinox.py (tiny, 1b, 7b)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", help="also write every row (with the 1-minute load average) to this CSV")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.config)))
        return
    rows = run_methods(__file__, a.methods.split(","), ["--config", a.config])
    where = "host RSS" if rows[0]["device"] == "cpu" else f"device memory ({rows[0]['device']}, XLA memory_stats)"
    print_rows(f"Mistral-shaped Equinox model, config {a.config}: {rows[0]['parameters']:,} parameters, "
               f"{rows[0]['weights_bytes'] / 2.0**30:.3f} GiB in bf16; memory columns: {where}", rows)
    if a.out:
        write_rows(a.out, rows)


def run_methods(script: str, methods: list[str], args: list[str]) -> list[dict]:
    """Each method's row from `script --one METHOD ARGS`, in a process of its own (so each peak RSS is its
    own), with the 1-minute load average."""
    rows = []
    for m in methods:
        r = subprocess.run([sys.executable, script, "--one", m, *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{m} failed:\n{r.stderr[-3000:]}")
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row["load"] = os.getloadavg()[0]
        rows.append(row)
    return rows


def print_rows(title: str, rows: list[dict]) -> None:
    """The rows as a table: seconds, baseline and peak memory, and the peak over the weights."""
    gib = 2.0**30
    print(title)
    print(f"{'method':10} {'seconds':>8} {'baseline GiB':>13} {'peak GiB':>9} {'peak - baseline':>16} "
          f"{'over the weights':>17}")
    for r in rows:
        extra = r["peak_bytes"] - r["baseline_bytes"]
        print(f"{r['method']:10} {r['seconds']:8.2f} {r['baseline_bytes'] / gib:13.3f} {r['peak_bytes'] / gib:9.3f} "
              f"{extra / gib:16.3f} {extra / r['weights_bytes'] - 1:+17.1%}")


def write_rows(path: str, rows: list[dict]) -> None:
    """The raw rows as CSV, a column per key (bench/results)."""
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
