"""A Mistral-shaped Equinox model whose blocks are stacked by eqx.filter_vmap, created in bf16 by
layerinit.jax.init: one call, every weight made by XLA in its final dtype, peak = the weights.

    python examples/jax/mistral_equinox.py                 # the tiny config: init and a forward pass
    python examples/jax/mistral_equinox.py --spec 7b.json --config 7b   # the 7B shape's spec, nothing built:
    layerinit plan --spec 7b.json --dtype bf16             # ... what building it costs

Equinox's own init of the same model (eqx.filter_vmap over layer keys) creates every layer in fp32 at
once and then a bf16 copy (equinox#673); bench/jax/init_bench.py compares the two.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


@dataclass(frozen=True)
class Config:
    vocab: int = 256
    dim: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    hidden: int = 128
    rope_theta: float = 10000.0


CONFIGS = {
    "tiny": Config(),
    "1b": Config(vocab=32000, dim=2048, layers=16, heads=16, kv_heads=4, hidden=7168),
    "7b": Config(vocab=32000, dim=4096, layers=32, heads=32, kv_heads=8, hidden=14336, rope_theta=1e6),
}


class Attention(eqx.Module):
    wq: eqx.nn.Linear
    wk: eqx.nn.Linear
    wv: eqx.nn.Linear
    wo: eqx.nn.Linear
    heads: int = eqx.field(static=True)
    kv_heads: int = eqx.field(static=True)

    def __init__(self, c: Config, key):
        hd = c.dim // c.heads
        kq, kk, kv, ko = jax.random.split(key, 4)
        self.wq = eqx.nn.Linear(c.dim, c.heads * hd, use_bias=False, key=kq)
        self.wk = eqx.nn.Linear(c.dim, c.kv_heads * hd, use_bias=False, key=kk)
        self.wv = eqx.nn.Linear(c.dim, c.kv_heads * hd, use_bias=False, key=kv)
        self.wo = eqx.nn.Linear(c.heads * hd, c.dim, use_bias=False, key=ko)
        self.heads, self.kv_heads = c.heads, c.kv_heads


class FeedForward(eqx.Module):
    w1: eqx.nn.Linear  # gate
    w2: eqx.nn.Linear  # down
    w3: eqx.nn.Linear  # up

    def __init__(self, c: Config, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.w1 = eqx.nn.Linear(c.dim, c.hidden, use_bias=False, key=k1)
        self.w2 = eqx.nn.Linear(c.hidden, c.dim, use_bias=False, key=k2)
        self.w3 = eqx.nn.Linear(c.dim, c.hidden, use_bias=False, key=k3)


class Block(eqx.Module):
    attention_norm: eqx.nn.RMSNorm
    attention: Attention
    ffn_norm: eqx.nn.RMSNorm
    feed_forward: FeedForward

    def __init__(self, c: Config, key):
        ka, kf = jax.random.split(key)
        self.attention_norm = eqx.nn.RMSNorm(c.dim, use_bias=False)
        self.attention = Attention(c, ka)
        self.ffn_norm = eqx.nn.RMSNorm(c.dim, use_bias=False)
        self.feed_forward = FeedForward(c, kf)


class Mistral(eqx.Module):
    tok_embeddings: eqx.nn.Embedding
    layers: Block  # every leaf [L, ...]: eqx.filter_vmap over the layers' keys
    norm: eqx.nn.RMSNorm
    output: eqx.nn.Linear
    config: Config = eqx.field(static=True)

    def __init__(self, c: Config, key):
        ke, kl, ko = jax.random.split(key, 3)
        self.tok_embeddings = eqx.nn.Embedding(c.vocab, c.dim, key=ke)
        self.layers = eqx.filter_vmap(lambda k: Block(c, k))(jax.random.split(kl, c.layers))
        self.norm = eqx.nn.RMSNorm(c.dim, use_bias=False)
        self.output = eqx.nn.Linear(c.dim, c.vocab, use_bias=False, key=ko)
        self.config = c

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Logits [T, vocab] of one sequence: causal grouped-query attention with RoPE, SwiGLU."""
        c = self.config
        hd = c.dim // c.heads
        t = tokens.shape[0]
        freq = c.rope_theta ** (-jnp.arange(0, hd, 2, dtype=jnp.float32) / hd)
        angle = jnp.arange(t, dtype=jnp.float32)[:, None] * freq[None, :]
        cos, sin = jnp.cos(angle)[:, None, :], jnp.sin(angle)[:, None, :]

        def rope(x):  # [T, H, hd], rotate-half
            a, b = x[..., : hd // 2], x[..., hd // 2:]
            return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1).astype(x.dtype)

        def block(x, b: Block):
            h = jax.vmap(b.attention_norm)(x)
            q = rope(jax.vmap(b.attention.wq)(h).reshape(t, c.heads, hd))
            k = rope(jax.vmap(b.attention.wk)(h).reshape(t, c.kv_heads, hd))
            v = jax.vmap(b.attention.wv)(h).reshape(t, c.kv_heads, hd)
            k, v = (jnp.repeat(z, c.heads // c.kv_heads, axis=1) for z in (k, v))
            s = jnp.einsum("qhd,khd->hqk", q, k).astype(jnp.float32) / math.sqrt(hd)
            s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
            o = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1).astype(v.dtype), v).reshape(t, -1)
            x = x + jax.vmap(b.attention.wo)(o)
            h = jax.vmap(b.ffn_norm)(x)
            f = b.feed_forward
            return x + jax.vmap(f.w2)(jax.nn.silu(jax.vmap(f.w1)(h)) * jax.vmap(f.w3)(h)), None

        params, static = eqx.partition(self.layers, eqx.is_array)
        x = jax.vmap(self.tok_embeddings)(tokens)
        x, _ = jax.lax.scan(lambda x, p: block(x, eqx.combine(p, static)), x, params)
        return jax.vmap(self.output)(jax.vmap(self.norm)(x))


# [docs:init]
# What the modules cannot say: which Linears are output projections (depth-scaled by torchtitan's
# recipe) and which is the head. Everything else has its role from its module.
RULES = {
    "layers.attention.wo.weight": "output_weight",
    "layers.feed_forward.w2.weight": "output_weight",
    "output.weight": "head_weight",
}


def create(c: Config, seed: int = 0):
    import layerinit.jax

    abstract = eqx.filter_eval_shape(Mistral, c, jax.random.key(0))  # shapes only, no memory
    return layerinit.jax.init(abstract, seed=seed, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16)
# [end]


# [docs:spec]
def spec(name: str) -> P:
    """Megatron's tensor parallelism on "tp", FSDP's Shard(0)-style split of the rest on "fsdp"."""
    if name.endswith(("wq.weight", "wk.weight", "wv.weight", "w1.weight", "w3.weight")):
        return P(None, "tp", "fsdp")  # [L, out, in]: column-parallel
    if name.endswith(("wo.weight", "w2.weight")):
        return P(None, "fsdp", "tp")  # [L, out, in]: row-parallel
    if name in ("tok_embeddings.weight", "output.weight"):
        return P("tp", "fsdp")        # vocab-parallel
    return P()                        # norms: replicated
# [end]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spec", help="write the model's layerinit spec (JSON) here instead of building it")
    a = ap.parse_args()
    c = CONFIGS[a.config]
    if a.spec:
        import layerinit.jax

        abstract = eqx.filter_eval_shape(Mistral, c, jax.random.key(0))
        with open(a.spec, "w", encoding="utf-8") as f:
            f.write(layerinit.jax.spec_of(abstract, rules=RULES).to_json())
        print(f"wrote {a.spec}: layerinit plan --spec {a.spec} --dtype bf16 --recipe torchtitan")
        return
    model = create(c, a.seed)
    leaves = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))
    assert all(x.dtype == jnp.bfloat16 for x in leaves)
    assert model.layers.attention.wq.weight.shape == (c.layers, c.dim, c.dim)
    logits = model(jnp.arange(8) % c.vocab)
    assert logits.shape == (8, c.vocab) and bool(jnp.isfinite(logits.astype(jnp.float32)).all())
    print(f"{a.config}: {sum(x.size for x in leaves):,} parameters in bf16, logits {logits.shape}")


if __name__ == "__main__":
    main()
