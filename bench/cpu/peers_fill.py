#!/usr/bin/env python3
"""Fill rate of the peers on the CPU, values per second, in the CSV columns of fill_rate:
impl,dtype,kind,threads,n,reps,median_s,min_s,values_per_s

numpy: default_rng().standard_normal(n, dtype=float32) (normal) or .random(n, dtype=float32)
(uniform), then cast to fp16 (astype) or bf16 (ml_dtypes.bfloat16, as JAX does); numpy has no
truncated normal. numpy is single-threaded: the all-threads rows split the array into one slice per
thread, each with its own generator (SeedSequence.spawn), generated and cast in a thread pool
(numpy releases the GIL in both).
torch: torch.empty(n, dtype).normal_(0, 0.02), nn.init.trunc_normal_(x, 0, 0.02, -0.04, 0.04),
x.uniform_(-0.02, 0.02), with torch.set_num_threads(threads).
One warm-up, then --reps timed runs; median reported."""
import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=1 << 25)
p.add_argument("--reps", type=int, default=7)
p.add_argument("--threads", default=f"1,{os.cpu_count()}")
p.add_argument("--impls", default="numpy,torch")
a = p.parse_args()
threads = [int(t) for t in a.threads.split(",")]


def timed(f):
    f()
    s = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        f()
        s.append(time.perf_counter() - t0)
    return statistics.median(s), min(s)


def row(impl, dtype, kind, th, med, mn):
    print(f"{impl},{dtype},{kind},{th},{a.n},{a.reps},{med:.6f},{mn:.6f},{a.n / med:.4e}", flush=True)


print("impl,dtype,kind,threads,n,reps,median_s,min_s,values_per_s")
if "numpy" in a.impls:
    import numpy as np
    try:
        import ml_dtypes
        bf16 = ml_dtypes.bfloat16
    except ImportError:
        bf16 = None
        print("peers_fill: ml_dtypes missing: no numpy bf16 rows", file=sys.stderr)
    dtypes = {"fp32": np.float32, "fp16": np.float16, "bf16": bf16}
    src = np.empty(a.n, dtype=np.float32)
    for dname, dt in dtypes.items():
        if dt is None:
            continue
        dst = src if dt is np.float32 else np.empty(a.n, dtype=dt)
        for kind in ("normal", "uniform"):
            for th in threads:
                gens = [np.random.default_rng(s) for s in np.random.SeedSequence(1234).spawn(th)]
                bounds = [(a.n * i // th, a.n * (i + 1) // th) for i in range(th)]

                def part(i, kind=kind, dst=dst, dt=dt):
                    b, e = bounds[i]
                    g = gens[i]
                    if kind == "normal":
                        g.standard_normal(dtype=np.float32, out=src[b:e])
                    else:
                        g.random(dtype=np.float32, out=src[b:e])
                    if dt is not np.float32:
                        dst[b:e] = src[b:e].astype(dt)

                if th == 1:
                    med, mn = timed(lambda: part(0))
                else:
                    with ThreadPoolExecutor(th) as ex:
                        med, mn = timed(lambda: list(ex.map(part, range(th))))
                row("numpy", dname, kind, th, med, mn)
        del dst
    del src

if "torch" in a.impls:
    import torch
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    for dname, dt in dtypes.items():
        x = torch.empty(a.n, dtype=dt)
        fills = {
            "normal": lambda: x.normal_(0.0, 0.02),
            "trunc_normal": lambda: torch.nn.init.trunc_normal_(x, 0.0, 0.02, -0.04, 0.04),
            "uniform": lambda: x.uniform_(-0.02, 0.02),
        }
        for kind, f in fills.items():
            for th in threads:
                torch.set_num_threads(th)
                med, mn = timed(f)
                row("torch", dname, kind, th, med, mn)
        del x
