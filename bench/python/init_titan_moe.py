#!/usr/bin/env python3
"""layerinit.torch.init_ per byte: torchtitan's qwen3 MoE debug model (debugmodel_moe: 8 layers, dim
256, 64 experts of hidden 768 in each layer's stacked [64, ...] w1/w2/w3, which are 1,536 tensors of
the checkpoint) against a dense qwen3 of the same bytes (the same model with each layer's experts one
feed-forward of hidden 64 x 768 = 49152), and torchtitan's own init_states of both.

Two ways, each run alternating the models and the methods, the median of RUNS printed (wall seconds,
nanoseconds per parameter byte):
- "warm": the model materialized once (by a first init_, not timed), then each method on it: for
  layerinit the plan made once (a second init_ of the same model reuses its plans and composites).
- "meta": a new model on the meta device each run: init_ (to_empty, plans, fills), against
  torchtitan's own flow, to_empty(device="cpu") then init_states.
For layerinit also the time outside its calls into the library's fills (_core.fill_composites, and
fill_composite, the package's way before it): what the package spends per parameter and per tensor.

usage: bench/python/init_titan_moe.py [RUNS] [DTYPE] [MODES]   (default 5 runs, bf16, "warm,meta")"""
import statistics
import sys
import time

import torch

import layerinit
import layerinit.torch as lt

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def config(moe: bool):
    import torchtitan.models.qwen3 as Q
    from torchtitan.models.common import CosSinRoPE

    cfg = Q.model_registry("debugmodel_moe").model
    if not moe:  # debugmodel_moe's numbers (torchtitan/models/qwen3/__init__.py), one dense feed-forward
        cfg.layers = Q._build_qwen3_layers(
            fuse_qkv=True, n_layers=8, dim=256, n_heads=16, n_kv_heads=8, head_dim=128, hidden_dim=64 * 768,
            attn_backend="flex", rope=CosSinRoPE.Config(dim=128, max_seq_len=4096, theta=1000000.0))
    return cfg


def meta(moe: bool, dtype: torch.dtype) -> torch.nn.Module:
    with torch.device("meta"):
        return config(moe).build().to(dtype)


def nbytes(m: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in m.parameters())


def titan_meta(m: torch.nn.Module) -> None:
    m.to_empty(device="cpu")
    m.init_states()


def main() -> None:
    inside = [0.0]  # seconds in the library's fill calls since it was last zeroed
    for fn in ("fill_composites", "fill_composite"):
        f = getattr(layerinit._core, fn, None)
        if f is not None:
            def call(*a, f=f):
                t0 = time.perf_counter()
                f(*a)
                inside[0] += time.perf_counter() - t0

            setattr(layerinit._core, fn, call)
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    dtype = DTYPES[sys.argv[2] if len(sys.argv) > 2 else "bf16"]
    modes = (sys.argv[3] if len(sys.argv) > 3 else "warm,meta").split(",")
    warm = {}
    if "warm" in modes:
        for name, moe in (("moe", True), ("dense", False)):
            warm[name] = lt.init_(meta(moe, dtype), recipe="torchtitan", seed=0)  # materializes; not timed
    methods = {"layerinit": lambda m: lt.init_(m, recipe="torchtitan", seed=0), "torchtitan": lambda m: m.init_states()}
    meta_methods = {"layerinit": methods["layerinit"], "torchtitan": titan_meta}
    sizes = {name: (sum(p.numel() for p in m.parameters()), len(list(m.parameters())), nbytes(m))
             for name, m in (("moe", meta(True, dtype)), ("dense", meta(False, dtype)))}
    times: dict[tuple[str, str, str], list[float]] = {}
    outside: dict[tuple[str, str], list[float]] = {}
    for _ in range(runs):
        for mode in modes:
            for meth in methods:
                for name, moe in (("moe", True), ("dense", False)):
                    m = warm[name] if mode == "warm" else meta(moe, dtype)
                    f = (methods if mode == "warm" else meta_methods)[meth]
                    inside[0] = 0.0
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        f(m)
                    dt = time.perf_counter() - t0
                    times.setdefault((mode, name, meth), []).append(dt)
                    if meth == "layerinit":
                        outside.setdefault((mode, name), []).append(dt - inside[0])
                    del m
    print("mode,model,parameters,parameter_tensors,bytes,method,median_s,min_s,max_s,ns_per_byte,outside_fills_median_ms")
    per_byte = {}
    for (mode, name, meth), ts in times.items():
        n, k, b = sizes[name]
        med = statistics.median(ts)
        per_byte[mode, name, meth] = med / b * 1e9
        out = f"{statistics.median(outside[mode, name]) * 1e3:.1f}" if meth == "layerinit" else ""
        print(f"{mode},{name},{n},{k},{b},{meth},{med:.3f},{min(ts):.3f},{max(ts):.3f},{per_byte[mode, name, meth]:.3f},{out}")
    for mode in modes:
        pb = {k[1:]: v for k, v in per_byte.items() if k[0] == mode}
        print(f"# {mode}: layerinit moe/dense per byte {pb['moe', 'layerinit'] / pb['dense', 'layerinit']:.2f}x; "
              f"torchtitan's own / layerinit: moe {pb['moe', 'torchtitan'] / pb['moe', 'layerinit']:.2f}x, "
              f"dense {pb['dense', 'torchtitan'] / pb['dense', 'layerinit']:.2f}x")


if __name__ == "__main__":
    main()
