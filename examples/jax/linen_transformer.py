"""A Flax linen Transformer (nn.Embed, nn.LayerNorm, nn.MultiHeadDotProductAttention, nn.Dense) whose params
layerinit makes: jax.eval_shape of the model's init gives the tree (shapes, no memory), layerinit.jax.init
fills it with Flax's own distributions (recipe "flax"). Linen's params are plain dicts, so the roles come
from the leaves' names; rules say the rest. Every leaf is checked against linen's own init of the model.

    python examples/jax/linen_transformer.py
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import layerinit.jax


# [docs:linen]
class Block(nn.Module):
    heads: int

    @nn.compact
    def __call__(self, x):
        d = x.shape[-1]
        x = x + nn.MultiHeadDotProductAttention(self.heads, name="attn")(nn.LayerNorm(name="ln1")(x))
        return x + nn.Dense(d, name="fc2")(nn.gelu(nn.Dense(4 * d, name="fc1")(nn.LayerNorm(name="ln2")(x))))


class Model(nn.Module):
    vocab: int = 512
    dim: int = 64
    heads: int = 4
    layers: int = 2
    length: int = 16

    @nn.compact
    def __call__(self, tokens):  # [B, T]
        pos = self.param("pos_embedding", nn.initializers.normal(0.02), (self.length, self.dim))
        x = nn.Embed(self.vocab, self.dim, name="embed")(tokens) + pos[: tokens.shape[-1]]
        for i in range(self.layers):
            x = Block(self.heads, name=f"blocks_{i}")(x)
        return nn.Dense(self.vocab, use_bias=False, name="head")(nn.LayerNorm(name="ln_f")(x))


model = Model()
tokens = jnp.arange(16).reshape(2, 8)
abstract = jax.eval_shape(model.init, jax.random.key(0), tokens)  # {"params": {...}}: shapes, no memory
# The names give the other leaves their roles: a `kernel` is a map stored [in, out] (`fc2` an output
# projection, `head` the head), `embedding` an embedding, an `ln*` module's `scale` and `bias` a norm's.
RULES = {
    "params.pos_embedding": "normal(0, 0.02)",  # a raw param (role other): its fill, the model's own
    # DenseGeneral's kernels ([64, heads, 16] and [heads, 16, 64]) are made as the [64, 64] map they flatten
    # to, so their fans are 64; from the shape alone they would be those of a convolution's kernel.
    "*.attn.*.kernel": {"fan_in": 64, "fan_out": 64},
}
params = layerinit.jax.init(abstract, seed=0, recipe="flax", rules=RULES)
logits = model.apply(params, tokens)
# [end]

assert logits.shape == (2, 8, 512) and bool(jnp.isfinite(logits).all())
assert params["params"]["blocks_0"]["fc1"]["kernel"].shape == (64, 256)  # [in, out], as linen stores it


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = np.sort(a.ravel()), np.sort(b.ravel())
    x = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, x, "right") / a.size - np.searchsorted(b, x, "right") / b.size)))


# Linen's own init of the same model: each leaf has its distribution (constants exactly).
own = model.init(jax.random.key(0), tokens)
flat_own = dict(jax.tree_util.tree_leaves_with_path(own))
for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    name, a, b = jax.tree_util.keystr(path, simple=True, separator="."), np.asarray(leaf), np.asarray(flat_own[path])
    assert a.shape == b.shape and a.dtype == b.dtype, name
    if np.all(b == b.flat[0]):
        assert np.array_equal(a, b), name  # biases 0, norm scales 1
    else:  # the KS test at level 1e-6 (a kernel with the wrong fans, half the std, has a gap of 0.18)
        level = np.sqrt(-np.log(1e-6 / 2) / 2) * np.sqrt((a.size + b.size) / (a.size * b.size))
        assert ks_statistic(a, b) < level, (name, ks_statistic(a, b), level)

# Every leaf is an array, so a compiled init is plain jax.jit (out_shardings= where the arrays are sharded).
compiled = jax.jit(lambda: layerinit.jax.init(abstract, seed=0, recipe="flax", rules=RULES))()
for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(compiled)):
    assert np.array_equal(np.asarray(a), np.asarray(b))
print(f"{sum(x.size for x in jax.tree_util.tree_leaves(params)):,} parameters, logits {logits.shape}")
