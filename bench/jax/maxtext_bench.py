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
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

from init_bench import print_rows, rss_bytes, run_methods, write_rows  # noqa: E402 (this folder: the same table and CSV)

METHODS = ("layerinit", "maxtext")
SIZE = {"base_emb_dim": 1024, "base_num_query_heads": 16, "base_num_kv_heads": 8, "head_dim": 64,
        "base_mlp_dim": 4096, "base_num_decoder_layers": 8, "vocab_size": 32000, "max_target_length": 128}


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
    rows = run_methods(__file__, a.methods.split(","), ["--axis", str(a.axis)])
    print_rows(f"MaxText llama2 decoder {SIZE}, param_scan_axis {a.axis}: {rows[0]['parameters']:,} parameters, "
               f"{rows[0]['weights_bytes'] / 2.0**30:.3f} GiB in fp32; memory: host RSS", rows)
    if a.out:
        write_rows(a.out, rows)

if __name__ == "__main__":
    main()
