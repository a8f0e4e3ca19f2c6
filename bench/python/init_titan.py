#!/usr/bin/env python3
"""layerinit.torch.init_ on torchtitan's llama3 with Llama-3-8B-shaped layers (dim 4096, 32 heads, 8 kv
heads, hidden 14336, vocab 128256, torchtitan's fused wqkv with q and k in its interleaved RoPE rows),
fewer of them so that it fits a small machine, in bf16 on the CPU, on the meta device.

Prints one line: layers,parameters,fill_calls,seconds: init_ wall time (materialize + fill, after the
model is built on the meta device) and how many fill calls the package made into the library.

usage: bench/python/init_titan.py [LAYERS] [THREADS]   (default 2 layers, torch's thread count)"""
import sys
import time
from pathlib import Path

import torch

import layerinit
import layerinit.torch as lt

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python" / "tests"))


def model(layers: int) -> torch.nn.Module:
    from titan_models import llama3  # python/tests: torchtitan's own llama3 builder with these numbers

    with torch.device("meta"):
        m = llama3(4096, 32, 8, layers, 128256, 14336, False, max_seq_len=8192).build()
    return m.to(torch.bfloat16)


def main() -> None:
    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    if len(sys.argv) > 2:
        torch.set_num_threads(int(sys.argv[2]))
    m = model(layers)
    calls = [0]

    def counted(owner: object, name: str) -> None:
        f = getattr(owner, name)

        def call(*a, **k):
            calls[0] += 1
            return f(*a, **k)

        setattr(owner, name, call)

    # The package's ways into the library's fills of a module: one fill_composites call for all its
    # parameters now, one fill_composite per parameter before it, one Plan.fill per row box before
    # that (bench rows "before" in docs/benchmarks.md).
    counted(layerinit._core, "fill_composites")
    counted(layerinit._core, "fill_composite")
    counted(layerinit.Plan, "fill")
    t0 = time.perf_counter()
    lt.init_(m, recipe="torchtitan", seed=0)
    dt = time.perf_counter() - t0
    n = sum(p.numel() for p in m.parameters())
    print(f"{layers},{n},{calls[0]},{dt:.2f}")


if __name__ == "__main__":
    main()
