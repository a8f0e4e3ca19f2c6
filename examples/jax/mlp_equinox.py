"""The deep MLP that started layerinit: Equinox's 2-1024x10-1 ReLU MLP (42 MB of fp32 weights), whose
own init showed 11 GB, made by layerinit.jax.init with Equinox's distribution (recipe "equinox":
uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for every weight and bias, as eqx.nn.Linear draws them).

    python examples/jax/mlp_equinox.py
"""
import equinox as eqx
import jax
import jax.numpy as jnp

import layerinit.jax

# [docs:mlp]
abstract = eqx.filter_eval_shape(eqx.nn.MLP, in_size=2, out_size=1, width_size=1024, depth=10,
                                 activation=jax.nn.relu, key=jax.random.key(0))
mlp = layerinit.jax.init(abstract, seed=0, recipe="equinox")
y = jax.vmap(mlp)(jnp.ones((4, 2)))
# [end]

weights = jax.tree_util.tree_leaves(eqx.filter(mlp, eqx.is_array))
assert len(weights) == 22 and sum(w.size for w in weights) == 2 * 1024 + 1024 + 9 * (1024 * 1024 + 1024) + 1024 + 1
bound = 1 / 1024 ** 0.5  # uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) of the hidden layers
assert float(jnp.abs(mlp.layers[5].weight).max()) <= bound
assert y.shape == (4, 1) and bool(jnp.isfinite(y).all())
print(f"{sum(w.size for w in weights):,} parameters, {sum(w.nbytes for w in weights) / 2**20:.1f} MiB fp32")
