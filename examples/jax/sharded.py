"""The Mistral-shaped Equinox model sharded over 8 devices (8 GPUs, else 8 host devices) with FSDP- and
TP-style PartitionSpecs: every device makes only its own pieces, inside eqx.filter_jit or eagerly, and
the global arrays are those of a one-device init. An encoder with eqx.nn.MultiheadAttention and
eqx.nn.MLP (fields that are not arrays) is made the same way, and its compiled init runs as the eager one.

    python examples/jax/sharded.py
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import layerinit.jax  # noqa: E402
from mistral_equinox import RULES, Config, Mistral, spec  # noqa: E402

# [docs:sharded]
devices = jax.devices() if jax.device_count() >= 8 else jax.devices("cpu")  # 8 GPUs, else 8 host devices
mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("fsdp", "tp"))

config = Config()
abstract = eqx.filter_eval_shape(Mistral, config, jax.random.key(0))
# One NamedSharding per leaf, by the leaf's name (its path): a pytree of the model's structure.
shardings = jax.tree_util.tree_map_with_path(
    lambda path, _: NamedSharding(mesh, spec(jax.tree_util.keystr(path, simple=True, separator="."))), abstract)
model = layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16,
                           sharding=shardings)
# The same compiled: eqx.filter_jit traces the arrays and keeps the model's other fields (a Dropout's p,
# an MLP's activation) as they are, where jax.jit would return them as arrays or refuse them. It takes no
# out_shardings: each array comes out with the sharding that init's `sharding=` gives it.
jitted = eqx.filter_jit(lambda: layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES,
                                                  dtype=jnp.bfloat16, sharding=shardings))()
logits = eqx.filter_jit(lambda m, t: m(t))(jitted, jnp.arange(8))
# [end]

wq = model.layers.attention.wq.weight
assert wq.sharding == NamedSharding(mesh, spec("layers.attention.wq.weight"))
assert {s.data.shape for s in wq.addressable_shards} == {(2, 16, 32)}  # [L, 64 / tp, 64 / fsdp]
one_device = layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16)
for a, b, c, s in zip(jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)),
                      jax.tree_util.tree_leaves(eqx.filter(one_device, eqx.is_array)),
                      jax.tree_util.tree_leaves(eqx.filter(jitted, eqx.is_array)),
                      jax.tree_util.tree_leaves(shardings)):
    assert np.array_equal(np.asarray(a), np.asarray(b)) and np.array_equal(np.asarray(a), np.asarray(c))
    assert a.sharding == s and c.sharding == s
assert logits.shape == (8, config.vocab)
assert np.array_equal(np.asarray(logits), np.asarray(eqx.filter_jit(lambda m, t: m(t))(model, jnp.arange(8))))


class Encoder(eqx.Module):
    """Fields that are not arrays: the attention's Dropout (a float p, a bool), the MLP's activation."""
    attention: eqx.nn.MultiheadAttention
    norm: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, key):
        ka, km = jax.random.split(key)
        self.attention = eqx.nn.MultiheadAttention(num_heads=4, query_size=32, key=ka)
        self.norm = eqx.nn.LayerNorm(32)
        self.mlp = eqx.nn.MLP(32, 32, width_size=64, depth=1, activation=jax.nn.gelu, key=km)

    def __call__(self, x):  # [T, 32]
        x = x + self.attention(x, x, x)
        return x + jax.vmap(self.mlp)(jax.vmap(self.norm)(x))


# jax.jit(..., out_shardings=placed) of this init returns the MLP's activation (TypeError: not a valid
# JAX type); without the MLP it returns the Dropout's p and inference as arrays, and the forward raises
# "Dropout requires a key when running in non-deterministic mode".
encoder = eqx.filter_eval_shape(Encoder, jax.random.key(0))
placed = jax.tree_util.tree_map(
    lambda leaf: NamedSharding(mesh, P("fsdp", "tp") if getattr(leaf, "ndim", 0) == 2 else P()), encoder)
eager = layerinit.jax.init(encoder, seed=0, recipe="equinox", sharding=placed)
compiled = eqx.filter_jit(lambda: layerinit.jax.init(encoder, seed=0, recipe="equinox", sharding=placed))()
assert compiled.attention.dropout.p == 0.0 and compiled.mlp.activation is jax.nn.gelu  # as they were
assert compiled.attention.query_proj.weight.sharding == NamedSharding(mesh, P("fsdp", "tp"))
x = jnp.linspace(-1, 1, 8 * 32).reshape(8, 32)
forward = eqx.filter_jit(lambda m, x: m(x))
assert np.array_equal(np.asarray(forward(compiled, x)), np.asarray(forward(eager, x)))
assert np.array_equal(np.asarray(compiled(x)), np.asarray(eager(x)))
print(f"{len(mesh.devices.flat)} devices; wq pieces {sorted({s.data.shape for s in wq.addressable_shards})}")
