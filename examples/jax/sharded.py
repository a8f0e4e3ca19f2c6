"""The Mistral-shaped Equinox model sharded over 8 devices (8 GPUs, else 8 host devices) with FSDP- and
TP-style PartitionSpecs: every device makes only its own pieces, inside jax.jit or eagerly, and the
global arrays are those of a one-device init.

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
from mistral_equinox import RULES, Config, Mistral  # noqa: E402

# [docs:sharded]
devices = jax.devices() if jax.device_count() >= 8 else jax.devices("cpu")  # 8 GPUs, else 8 host devices
mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("fsdp", "tp"))


def spec(name: str) -> P:
    """Megatron's tensor parallelism on "tp", FSDP's Shard(0)-style split of the rest on "fsdp"."""
    if name.endswith(("wq.weight", "wk.weight", "wv.weight", "w1.weight", "w3.weight")):
        return P(None, "tp", "fsdp")  # [L, out, in]: column-parallel
    if name.endswith(("wo.weight", "w2.weight")):
        return P(None, "fsdp", "tp")  # [L, out, in]: row-parallel
    if name in ("tok_embeddings.weight", "output.weight"):
        return P("tp", "fsdp")        # vocab-parallel
    return P()                        # norms: replicated


config = Config()
abstract = eqx.filter_eval_shape(Mistral, config, jax.random.key(0))
# One NamedSharding per leaf, by the leaf's name (its path): a pytree of the model's structure.
shardings = jax.tree_util.tree_map_with_path(
    lambda path, _: NamedSharding(mesh, spec(jax.tree_util.keystr(path, simple=True, separator="."))), abstract)
model = layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16,
                           sharding=shardings)
# The same inside a compiled init, with its output shardings:
jitted = jax.jit(lambda: layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16,
                                            sharding=shardings), out_shardings=shardings)()
# [end]

wq = model.layers.attention.wq.weight
assert wq.sharding == NamedSharding(mesh, spec("layers.attention.wq.weight"))
assert {s.data.shape for s in wq.addressable_shards} == {(2, 16, 32)}  # [L, 64 / tp, 64 / fsdp]
one_device = layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16)
for a, b, c in zip(jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)),
                   jax.tree_util.tree_leaves(eqx.filter(one_device, eqx.is_array)),
                   jax.tree_util.tree_leaves(eqx.filter(jitted, eqx.is_array))):
    assert np.array_equal(np.asarray(a), np.asarray(b)) and np.array_equal(np.asarray(a), np.asarray(c))
logits = jax.jit(lambda m, t: m(t))(model, jnp.arange(8))
assert logits.shape == (8, config.vocab)
print(f"{len(mesh.devices.flat)} devices; wq pieces {sorted({s.data.shape for s in wq.addressable_shards})}")
