"""A Flax NNX model whose layers are stacked by nnx.vmap, made by layerinit.jax.init from its abstract
state (nnx.eval_shape): no Flax initializer runs, each kernel is made [in, out] as NNX stores it.

    python examples/jax/nnx_stacked.py
"""
import jax
import jax.numpy as jnp
from flax import nnx

import layerinit.jax


# [docs:nnx]
class Block(nnx.Module):
    def __init__(self, dim: int, rngs: nnx.Rngs):
        self.norm = nnx.RMSNorm(dim, rngs=rngs)
        self.up = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.down = nnx.Linear(4 * dim, dim, rngs=rngs)

    def __call__(self, x):
        return x + self.down(nnx.gelu(self.up(self.norm(x))))


class Model(nnx.Module):
    def __init__(self, vocab: int, dim: int, layers: int, rngs: nnx.Rngs):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)

        @nnx.split_rngs(splits=layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def blocks(rngs):
            return Block(dim, rngs)

        self.blocks = blocks(rngs)  # every leaf [layers, ...]
        self.head = nnx.Linear(dim, vocab, use_bias=False, rngs=rngs)

    def __call__(self, tokens):
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def run(x, block):
            return block(x)

        return self.head(run(self.embed(tokens), self.blocks))


abstract = nnx.eval_shape(lambda: Model(vocab=512, dim=64, layers=4, rngs=nnx.Rngs(0)))
model = layerinit.jax.init(abstract, seed=0, recipe="flax", rules={"head.kernel": "head_weight"})
logits = model(jnp.arange(8))
# [end]

assert model.blocks.up.kernel[...].shape == (4, 64, 256)  # [layers, in, out]
assert logits.shape == (8, 512) and bool(jnp.isfinite(logits).all())
print("blocks.up.kernel", model.blocks.up.kernel[...].shape, "logits", logits.shape)
