#!/usr/bin/env python3
"""Initializes a Llama 3.2 1B-shaped model (hidden 2048, intermediate 8192, 16 layers, 32 heads,
8 kv heads, vocab 128256, tied embeddings: 1,235,814,400 parameters) in bf16 on the CPU the way peers
do, one method per process, so peak RSS is measured from outside (/usr/bin/time -v).

Methods:
  torch-nothing, jax-nothing      the process baseline: same imports, nothing built
  torch-default-fp32-cast         plain nn.Module (Embedding, Linear bias=False, norm weights) with
                                  PyTorch's default init in fp32, then .to(torch.bfloat16)
  hf-from-config-bf16             transformers AutoModelForCausalLM.from_config(LlamaConfig, bf16 dtype)
  eqx-vmap-fp32-cast              equinox: filter_vmap over 16 layers of eqx.nn.Linear in fp32, then
                                  the tree cast to bfloat16
  eqx-layer-loop-bf16             equinox: a Python loop over layers, each Linear made with dtype=bf16
Prints one line: method,parameters,weights_bytes,seconds (seconds: model creation only, after imports)."""
import sys
import time

H, FF, L, NH, KV, V = 2048, 8192, 16, 32, 8, 128256
HD = H // NH
method = sys.argv[1]


def torch_default():
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(H, NH * HD, bias=False)
            self.k_proj = nn.Linear(H, KV * HD, bias=False)
            self.v_proj = nn.Linear(H, KV * HD, bias=False)
            self.o_proj = nn.Linear(NH * HD, H, bias=False)
            self.gate_proj = nn.Linear(H, FF, bias=False)
            self.up_proj = nn.Linear(H, FF, bias=False)
            self.down_proj = nn.Linear(FF, H, bias=False)
            self.input_layernorm = nn.Parameter(torch.ones(H))
            self.post_attention_layernorm = nn.Parameter(torch.ones(H))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, H)
            self.layers = nn.ModuleList(Layer() for _ in range(L))
            self.norm = nn.Parameter(torch.ones(H))

    m = Model().to(torch.bfloat16)
    return m, [p for p in m.parameters()]


def hf_from_config():
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig
    cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=FF, num_hidden_layers=L,
                      num_attention_heads=NH, num_key_value_heads=KV, max_position_embeddings=131072,
                      rope_theta=500000.0, tie_word_embeddings=True)
    try:
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    except TypeError:
        m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    assert next(m.parameters()).dtype == torch.bfloat16
    return m, list(m.parameters())


def eqx_layer(key, dtype=None):
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    ks = jax.random.split(key, 7)
    kw = {} if dtype is None else {"dtype": dtype}
    lin = lambda i, o, k: eqx.nn.Linear(i, o, use_bias=False, key=k, **kw)
    return {
        "q": lin(H, NH * HD, ks[0]), "k": lin(H, KV * HD, ks[1]), "v": lin(H, KV * HD, ks[2]),
        "o": lin(NH * HD, H, ks[3]), "gate": lin(H, FF, ks[4]), "up": lin(H, FF, ks[5]),
        "down": lin(FF, H, ks[6]),
        "ln1": jnp.ones(H, dtype or jnp.float32), "ln2": jnp.ones(H, dtype or jnp.float32),
    }


def eqx_vmap_cast():
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    k0, k1 = jax.random.split(jax.random.PRNGKey(0))
    emb = eqx.nn.Embedding(V, H, key=k0)
    layers = eqx.filter_vmap(eqx_layer)(jax.random.split(k1, L))
    tree = {"embed": emb, "layers": layers, "norm": jnp.ones(H)}
    tree = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16) if eqx.is_array(x) else x, tree)
    leaves = jax.block_until_ready([x for x in jax.tree_util.tree_leaves(tree) if eqx.is_array(x)])
    return tree, leaves


def eqx_loop_bf16():
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    k0, k1 = jax.random.split(jax.random.PRNGKey(0))
    emb = eqx.nn.Embedding(V, H, key=k0, dtype=jnp.bfloat16)
    layers = [jax.block_until_ready(eqx_layer(k, jnp.bfloat16)) for k in jax.random.split(k1, L)]
    tree = {"embed": emb, "layers": layers, "norm": jnp.ones(H, jnp.bfloat16)}
    leaves = jax.block_until_ready([x for x in jax.tree_util.tree_leaves(tree) if eqx.is_array(x)])
    assert all(x.dtype == jnp.bfloat16 for x in leaves)
    return tree, leaves


if method.startswith("torch") or method.startswith("hf"):
    import torch  # noqa: F401
    import transformers  # noqa: F401
else:
    import equinox  # noqa: F401
    import jax
    jax.numpy.zeros(1).block_until_ready()

fns = {"torch-default-fp32-cast": torch_default, "hf-from-config-bf16": hf_from_config,
       "eqx-vmap-fp32-cast": eqx_vmap_cast, "eqx-layer-loop-bf16": eqx_loop_bf16}
if method.endswith("nothing"):
    print(f"{method},0,0,0")
    sys.exit(0)
if method not in fns:
    sys.exit(f"peers_init: unknown method {method} (valid: torch-nothing, jax-nothing, {', '.join(fns)})")
t0 = time.perf_counter()
model, leaves = fns[method]()
sec = time.perf_counter() - t0
n = sum(int(x.numel() if hasattr(x, "numel") and callable(x.numel) else x.size) for x in leaves)
nbytes = sum(int(x.numel() * x.element_size()) if hasattr(x, "element_size") else int(x.nbytes) for x in leaves)
print(f"{method},{n},{nbytes},{sec:.4f}")
