#!/usr/bin/env python3
"""layerinit.jax.init of the Mistral-shaped Equinox model (examples/jax/mistral_equinox.py) sharded over a
global mesh of D host devices, made two ways, and printed side by side:

  1 process    one process with D host devices, the mesh over them
  N processes  N processes (jax.distributed.initialize, a localhost coordinator) of D / N host devices
               each, the same mesh over every process's devices: each process makes only its pieces

The mesh is (fsdp, tp) = (N, D / N) with examples/jax/sharded.py's PartitionSpecs (FSDP on the axis that
spans the processes, Megatron's tensor parallelism within each), bf16, recipe torchtitan. Each process
times `init` and jax.block_until_ready (compilation and layerinit's ordinal probe included), REPEATS
times, deleting the arrays between; its peak RSS is getrusage's. The N-process wall time of a repeat is
its slowest process's.

    python bench/jax/multiprocess_bench.py                  # the 1b config, 8 devices, 2 processes
    python bench/jax/multiprocess_bench.py --config tiny    # a quick check
    python bench/jax/multiprocess_bench.py --out bench/results/jax-multiprocess-DATE.csv   # and the raw rows
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(pid: int, n: int, port: str, devices: int, config: str, repeats: int) -> dict:
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices // n}"
    import resource

    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import layerinit.jax

    sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "jax"))
    from mistral_equinox import CONFIGS, RULES, Mistral

    if n > 1:
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n, process_id=pid)
    mesh = Mesh(np.array(jax.devices()).reshape(n, devices // n), ("fsdp", "tp"))

    def spec(name: str) -> P:  # examples/jax/sharded.py's
        if name.endswith(("wq.weight", "wk.weight", "wv.weight", "w1.weight", "w3.weight")):
            return P(None, "tp", "fsdp")
        if name.endswith(("wo.weight", "w2.weight")):
            return P(None, "fsdp", "tp")
        if name in ("tok_embeddings.weight", "output.weight"):
            return P("tp", "fsdp")
        return P()

    abstract = eqx.filter_eval_shape(Mistral, CONFIGS[config], jax.random.key(0))
    shardings = jax.tree_util.tree_map_with_path(
        lambda path, _: NamedSharding(mesh, spec(jax.tree_util.keystr(path, simple=True, separator="."))), abstract)
    jax.jit(lambda x: x + 1)(jnp.zeros(())).block_until_ready()
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model = layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16,
                                   sharding=shardings)
        arrays = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))
        jax.block_until_ready(arrays)
        seconds.append(time.perf_counter() - t0)
        local = sum(s.data.nbytes for x in arrays for s in x.addressable_shards)
        params = sum(x.size for x in arrays)
        for x in arrays:
            x.delete()
    return {"process": pid, "processes": n, "devices": devices, "local_devices": len(jax.local_devices()),
            "config": config, "parameters": params, "local_bytes": local, "seconds": seconds,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def run(n: int, devices: int, config: str, repeats: int) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(pid), str(n), str(port), "--devices",
                               str(devices), "--config", config, "--repeats", str(repeats)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for pid in range(n)]
    rows = []
    for pid, p in enumerate(procs):
        out, err = p.communicate(timeout=1200)
        if p.returncode != 0:
            raise SystemExit(f"process {pid} of {n} failed:\n{err[-3000:]}")
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="1b", help="a config of examples/jax/mistral_equinox.py (tiny, 1b, 7b)")
    ap.add_argument("--devices", type=int, default=8, help="host devices in all (default 8)")
    ap.add_argument("--processes", type=int, default=2, help="processes of the multi-process run (default 2)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", help="also write every process's row (with the 1-minute load average) to this CSV")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        pid, n, port = a.worker
        print(json.dumps(worker(int(pid), int(n), port, a.devices, a.config, a.repeats)))
        return
    if a.devices % a.processes:
        raise SystemExit(f"--devices {a.devices} is not a multiple of --processes {a.processes}")
    load = os.getloadavg()[0]
    one = run(1, a.devices, a.config, a.repeats)
    many = run(a.processes, a.devices, a.config, a.repeats)
    if a.out:
        import csv

        with open(a.out, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=[*one[0], "load"])
            w.writeheader()
            for r in one + many:
                w.writerow({**r, "seconds": " ".join(f"{x:.4f}" for x in r["seconds"]), "load": load})
    gib = 2.0**30
    r0 = one[0]
    print(f"Mistral-shaped Equinox model, config {a.config}: {r0['parameters']:,} parameters in bf16, mesh (fsdp, tp) "
          f"over {a.devices} host devices; {os.cpu_count()} cores, load average {load:.1f} at the start")
    print(f"{'run':24} {'first s':>8} {'best s':>8} {'GiB made here':>14} {'peak RSS GiB':>13}")
    for label, r in [("1 process", r0)] + [(f"{a.processes} processes: process {r['process']}", r) for r in many]:
        print(f"{label:24} {r['seconds'][0]:8.2f} {min(r['seconds']):8.2f} {r['local_bytes'] / gib:14.3f} "
              f"{r['peak_rss'] / gib:13.3f}")
    walls = [max(r["seconds"][i] for r in many) for i in range(a.repeats)]
    label = f"{a.processes} processes (slowest)"
    print(f"{label:24} {walls[0]:8.2f} {min(walls):8.2f}")


if __name__ == "__main__":
    main()
