#!/usr/bin/env python3
"""Makes the parameters of the Haiku graph Transformer of examples/jax/graph_transformer_haiku.py at several
node counts, three ways, each in its own process (so each peak is its own), and prints them side by side
(issue 30):

  haiku       Haiku's own t.init(key, x), eagerly: it runs the forward function, the pair tensors included
  haiku-jit   jax.jit(t.init)(key, x): the same, compiled
  layerinit   jax.eval_shape(t.init, key, x) for the shapes, then layerinit.jax.init(shapes,
              recipe="haiku:mha_w_init_scale=0.5", stacked="layers"): the parameters (and the state)
              made from their shapes alone

The parameters are the same at every node count (7.3 MiB at the defaults); what t.init computes grows as
N^2. `--batch-norm`: the model with an hk.BatchNorm before its head, whose state t.init updates from the
activations, so that XLA cannot drop the forward from jax.jit(t.init) (without it, it does: no parameter
depends on an activation).

Baseline is the process's resident memory after the imports and a first jit, just before the call;
peak its resident high-water mark during the call (VmHWM, reset at the start through
/proc/self/clear_refs); the call's seconds include the compilations it does; load is the 1-minute load
average after the run (the machine's other work slows the seconds, not the memory). A method whose
next node count would need more than --cap-gib (its last measured growth scaled by N^2) is not run there.

    python bench/jax/haiku_graph_bench.py                          # N = 32, 64, 128, 256
    python bench/jax/haiku_graph_bench.py --nodes 32,64 --methods layerinit,haiku
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "jax"))

METHODS = ("haiku", "haiku-jit", "layerinit")


def one(method: str, nodes: int, loop: bool, batch_norm: bool) -> dict:
    import jax
    import jax.numpy as jnp

    from graph_transformer_haiku import Config, PeakMemory, init_with_layerinit, nodes_input, transformed, tree_bytes

    c = Config(loop=loop, batch_norm=batch_norm)
    t = transformed(c)
    key, x = jax.random.key(0), nodes_input(nodes, c)
    jax.jit(lambda v: v + 1)(jnp.zeros(())).block_until_ready()  # the backend up and one program compiled
    with PeakMemory() as mem:
        if method == "haiku":
            params, state = t.init(key, x)
        elif method == "haiku-jit":
            params, state = jax.jit(t.init)(key, x)
        elif method == "layerinit":
            params, state = init_with_layerinit(jax.eval_shape(t.init, key, x), c)
        else:
            raise SystemExit(f"unknown method {method} (valid: {', '.join(METHODS)})")
        jax.block_until_ready((params, state))
    return {"method": method, "nodes": nodes, "loop": loop, "batch_norm": batch_norm,
            "parameters": sum(p.size for p in jax.tree.leaves(params)),
            "parameter_bytes": tree_bytes(params), "seconds": mem.seconds, "baseline_bytes": mem.baseline,
            "peak_bytes": mem.peak, "exact_peak": mem.exact}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="32,64,128,256", help="node counts, comma-separated, ascending")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--loop", action="store_true", help="the model's layers as a Python loop, not hk.layer_stack")
    ap.add_argument("--batch-norm", action="store_true", help="the model with an hk.BatchNorm (state) before its head")
    ap.add_argument("--cap-gib", type=float, default=10.0,
                    help="skip a method where its growth, scaled by N^2 from its last point, would pass this")
    ap.add_argument("--out", help="also write every row to this CSV")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    try:
        counts = [int(n) for n in a.nodes.split(",")]
    except ValueError:
        ap.error(f"--nodes '{a.nodes}' is not a comma-separated list of node counts")
    if any(n < 1 for n in counts) or counts != sorted(counts):
        ap.error(f"--nodes '{a.nodes}' must be positive node counts in ascending order")
    methods = a.methods.split(",")
    for m in methods:
        if m not in METHODS:
            ap.error(f"--methods: unknown method '{m}' (valid: {', '.join(METHODS)})")
    if a.one:
        print(json.dumps(one(a.one, counts[0], a.loop, a.batch_norm)))
        return
    gib, mib = 2.0**30, 2.0**20
    rows, skipped = [], []
    for m in methods:
        last = None
        for n in counts:
            if last is not None:
                predicted = (last["peak_bytes"] - last["baseline_bytes"]) * (n / last["nodes"]) ** 2
                if predicted > a.cap_gib * gib:
                    skipped.append(f"{m} from N = {n} on (N^2 from N = {last['nodes']}: {predicted / gib:.1f} GiB "
                                   f"> the cap {a.cap_gib:g} GiB)")
                    break
            cmd = ([sys.executable, __file__, "--one", m, "--nodes", str(n)] + (["--loop"] if a.loop else [])
                   + (["--batch-norm"] if a.batch_norm else []))
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{m} at {n} nodes failed:\n{r.stderr[-3000:]}")
            last = json.loads(r.stdout.strip().splitlines()[-1])
            last["load"] = os.getloadavg()[0]
            rows.append(last)
            growth = last["peak_bytes"] - last["baseline_bytes"]
            print(f"  {m} at {n} nodes: {last['seconds']:.1f} s, +{growth / mib:.0f} MiB", file=sys.stderr)
    if not rows:
        return
    r0 = rows[0]
    print(f"Haiku graph Transformer ({'layers as a Python loop' if a.loop else 'hk.layer_stack'}"
          f"{', hk.BatchNorm before the head' if a.batch_norm else ''}): "
          f"{r0['parameters']:,} parameters, {r0['parameter_bytes'] / mib:.2f} MiB fp32; host resident memory"
          f"{'' if all(r['exact_peak'] for r in rows) else ' (maxrss where VmHWM could not be reset)'}")
    print(f"{'method':10} {'nodes':>6} {'seconds':>8} {'baseline MiB':>13} {'peak MiB':>9} {'peak - baseline MiB':>20} "
          f"{'params MiB':>11} {'load':>5}")
    for r in rows:
        print(f"{r['method']:10} {r['nodes']:6} {r['seconds']:8.2f} {r['baseline_bytes'] / mib:13.0f} "
              f"{r['peak_bytes'] / mib:9.0f} {(r['peak_bytes'] - r['baseline_bytes']) / mib:20.0f} "
              f"{r['parameter_bytes'] / mib:11.2f} {r['load']:5.1f}")
    for s in skipped:
        print(f"not run: {s}")
    if a.out:
        from init_bench import write_rows  # bench/jax, beside this file

        write_rows(a.out, rows)


if __name__ == "__main__":
    main()
