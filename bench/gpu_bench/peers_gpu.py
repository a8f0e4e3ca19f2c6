#!/usr/bin/env python3
"""GPU peers, one measurement per process.
  peers_gpu.py which                      prints which peers import and see a GPU
  peers_gpu.py fill --gb G --reps R       torch normal_/uniform_/nn.init.trunc_normal_ and
                                          jax.random.normal/truncated_normal (dtype=) on G GB per fill,
                                          and layerinit's own Python paths on the same buffers (where the
                                          package is built with CUDA): layerinit.fill_ of a CUDA tensor
                                          (impl layerinit.torch) and layerinit.jax.init of one array under
                                          jax.jit, XLA's FFI handler (impl layerinit.jax):
                                          CSV impl,dtype,kind,bytes,median_ms,gb_per_s
  peers_gpu.py model PRESET METHOD        full-model init in bf16 on the GPU; METHOD is
      hf-from-config-bf16    transformers from_config(dtype=bf16) under torch.device("cuda")
      meta-to-empty-reinit   from_config on the meta device, to_empty(device="cuda"), then
                             model.init_weights() (HF's _init_weights on every module)
      eqx-vmap-fp32-cast     equinox filter_vmap over layers in fp32, then cast to bf16
    CSV impl,model,method,parameters,weights_bytes,seconds,peak_bytes,free_before,free_after  (or ...,OOM)
Presets: mistral-7b, llama-3-70b (shapes as in init/presets.cpp)."""
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
PRESETS = {  # vocab, hidden, intermediate, layers, heads, kv heads, positions, theta
    "mistral-7b": (32000, 4096, 14336, 32, 32, 8, 32768, 10000.0),
    "llama-3-70b": (128256, 8192, 28672, 80, 64, 8, 8192, 500000.0),
}


def which():
    found = []
    try:
        import torch
        found.append(f"torch {torch.__version__} (cuda: {torch.cuda.is_available()})")
    except ImportError:
        found.append("torch: not installed")
    try:
        import transformers
        found.append(f"transformers {transformers.__version__}")
    except ImportError:
        found.append("transformers: not installed")
    try:
        import jax
        found.append(f"jax {jax.__version__} ({jax.default_backend()})")
    except ImportError:
        found.append("jax: not installed")
    for m in ("equinox", "flax"):
        try:
            mod = __import__(m)
            found.append(f"{m} {getattr(mod, '__version__', '?')}")
        except ImportError:
            found.append(f"{m}: not installed")
    print("; ".join(found))


FILLS = {"normal": "normal(0, 0.02)", "uniform": "uniform(-0.02, 0.02)",
         "trunc_normal": "trunc_normal(0, 0.02, -0.04, 0.04)"}
DTYPES = ("fp32", "fp16", "bf16")


def median_ms(f, reps, sync):
    """The median of `reps` timed calls of f after one warm-up, each between two synchronizations: a host
    clock, since layerinit launches on its own stream and XLA on its own (neither's events would
    bracket the other's work); at 4 GB a fill takes over a millisecond, the clock's cost microseconds."""
    f(); sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f(); sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def row(impl, dtype, kind, nbytes, ms):
    print(f"{impl},{dtype},{kind},{nbytes},{ms:.4f},{nbytes / ms / 1e6:.1f}", flush=True)


def torch_fills(impl, gb, reps, fills_of):
    """impl's fills of a `gb` GB CUDA tensor of each dtype; fills_of(x) -> {kind: fill x in place}."""
    import torch
    if not torch.cuda.is_available():
        return
    for name in DTYPES:
        dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]
        n = int(gb * 1e9) // dt.itemsize
        x = torch.empty(n, dtype=dt, device="cuda")
        for kind, f in fills_of(x).items():
            row(impl, name, kind, n * dt.itemsize, median_ms(f, reps, torch.cuda.synchronize))
        del x
        torch.cuda.empty_cache()


def jax_fills(impl, gb, reps, makers_of):
    """impl's `gb` GB arrays of each dtype; makers_of(n, dtype) -> {kind: a jitted () -> array}."""
    import jax
    import jax.numpy as jnp
    if jax.default_backend() != "gpu":
        return
    for name in DTYPES:
        dt = {"fp32": jnp.float32, "fp16": jnp.float16, "bf16": jnp.bfloat16}[name]
        n = int(gb * 1e9) // jnp.dtype(dt).itemsize
        for kind, make in makers_of(n, dt).items():
            out = []

            def call():
                out.clear()  # the previous array freed before the next is made
                out.append(make())

            row(impl, name, kind, n * jnp.dtype(dt).itemsize, median_ms(call, reps, lambda: jax.block_until_ready(out)))
            out.clear()


def fill(gb, reps):
    print("impl,dtype,kind,bytes,median_ms,gb_per_s")
    try:
        import layerinit
        cuda = layerinit.cuda_available()
    except ImportError:
        cuda = False
    if not cuda:
        print("layerinit: not importable, or no CUDA build or no GPU: its Python fills not measured", file=sys.stderr)
    try:
        import torch
        if cuda:
            torch_fills("layerinit.torch", gb, reps,
                        lambda x: {k: lambda t=t: layerinit.fill_(x, "w", t, seed=1) for k, t in FILLS.items()})
        torch_fills("torch", gb, reps, lambda x: {
            "normal": lambda: x.normal_(0, 0.02), "uniform": lambda: x.uniform_(-0.02, 0.02),
            "trunc_normal": lambda: torch.nn.init.trunc_normal_(x, 0, 0.02, -0.04, 0.04)})
    except ImportError:
        pass
    try:
        import jax
        if cuda:
            import layerinit.jax as ljax
            jax_fills("layerinit.jax", gb, reps, lambda n, dt: {
                k: jax.jit(lambda t=t: ljax.init({"w": jax.ShapeDtypeStruct((n,), dt)}, seed=1, rules={"w": t}))
                for k, t in FILLS.items()})
        key = jax.random.PRNGKey(0)
        jax_fills("jax", gb, reps, lambda n, dt: {
            "normal": jax.jit(lambda: 0.02 * jax.random.normal(key, (n,), dt)),
            "trunc_normal": jax.jit(lambda: 0.02 * jax.random.truncated_normal(key, -2, 2, (n,), dt))})
    except ImportError:
        pass


def llama_config(preset):
    from transformers import LlamaConfig, MistralConfig
    v, h, ff, L, nh, kv, pos, theta = PRESETS[preset]
    cls = MistralConfig if preset.startswith("mistral") else LlamaConfig
    return cls(vocab_size=v, hidden_size=h, intermediate_size=ff, num_hidden_layers=L, num_attention_heads=nh,
               num_key_value_heads=kv, max_position_embeddings=pos, rope_theta=theta, tie_word_embeddings=False)


def model(preset, method):
    if method in ("hf-from-config-bf16", "meta-to-empty-reinit"):
        import torch
        from transformers import AutoModelForCausalLM
        cfg = llama_config(preset)
        free0, _ = torch.cuda.mem_get_info()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        try:
            def from_config(**kw):
                try:
                    return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, **kw)
                except TypeError:
                    return AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, **kw)
            if method == "hf-from-config-bf16":
                with torch.device("cuda"):
                    m = from_config()
            else:
                with torch.device("meta"):
                    m = from_config()
                m = m.to_empty(device="cuda")
                m.init_weights()
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError:
            print(f"torch,{preset},{method},OOM")
            return
        sec = time.perf_counter() - t0
        free1, _ = torch.cuda.mem_get_info()
        ps = list(m.parameters())
        n = sum(p.numel() for p in ps)
        nb = sum(p.numel() * p.element_size() for p in ps)
        print(f"torch,{preset},{method},{n},{nb},{sec:.4f},{torch.cuda.max_memory_allocated()},{free0},{free1}")
    elif method == "eqx-vmap-fp32-cast":
        import equinox as eqx
        import jax
        import jax.numpy as jnp
        v, h, ff, L, nh, kv, pos, theta = PRESETS[preset]
        hd = h // nh
        dev = jax.devices()[0]

        def layer(key):
            ks = jax.random.split(key, 7)
            lin = lambda i, o, k: eqx.nn.Linear(i, o, use_bias=False, key=k)
            return {"q": lin(h, nh * hd, ks[0]), "k": lin(h, kv * hd, ks[1]), "v": lin(h, kv * hd, ks[2]),
                    "o": lin(nh * hd, h, ks[3]), "gate": lin(h, ff, ks[4]), "up": lin(h, ff, ks[5]),
                    "down": lin(ff, h, ks[6]), "ln1": jnp.ones(h), "ln2": jnp.ones(h)}

        t0 = time.perf_counter()
        try:
            k0, k1, k2 = jax.random.split(jax.random.PRNGKey(0), 3)
            tree = {"embed": eqx.nn.Embedding(v, h, key=k0), "layers": eqx.filter_vmap(layer)(jax.random.split(k1, L)),
                    "norm": jnp.ones(h), "lm_head": eqx.nn.Linear(h, v, use_bias=False, key=k2)}
            tree = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16) if eqx.is_array(x) else x, tree)
            leaves = jax.block_until_ready([x for x in jax.tree_util.tree_leaves(tree) if eqx.is_array(x)])
        except Exception as e:  # XlaRuntimeError RESOURCE_EXHAUSTED
            if "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower():
                print(f"jax,{preset},{method},OOM")
                return
            raise
        sec = time.perf_counter() - t0
        st = dev.memory_stats() or {}
        n = sum(x.size for x in leaves)
        nb = sum(x.nbytes for x in leaves)
        limit = st.get("bytes_limit", 0)
        print(f"jax,{preset},{method},{n},{nb},{sec:.4f},{st.get('peak_bytes_in_use', '')},{limit},{limit - st.get('bytes_in_use', 0)}")
    else:
        sys.exit(f"peers_gpu: unknown method {method}")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "which":
        which()
    elif cmd == "fill":
        gb = float(sys.argv[sys.argv.index("--gb") + 1]) if "--gb" in sys.argv else 4.0
        reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 10
        fill(gb, reps)
    elif cmd == "model":
        model(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
