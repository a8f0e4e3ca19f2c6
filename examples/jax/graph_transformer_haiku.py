"""A graph Transformer in DM-Haiku whose parameters layerinit makes without running the model (issue 30).

Haiku makes parameters by running the whole forward function: `hk.transform(f).init(rng, x)` computes
every activation, here an outer product over every pair of nodes, [N, N, outer^2] floats per layer. At
N = 414 nodes that is 4.1 GiB for one tensor (t.init's growth, measured up to N = 256 and scaled by N^2:
about 4.6 GiB; docs/benchmarks.md) while the parameters are 7.3 MiB, and they do not even depend on N.
layerinit makes them from their shapes alone:

    abstract = jax.eval_shape(t.init, key, x)  # (params, state) of shapes: no memory
    params, state = layerinit.jax.init(abstract, recipe="haiku:mha_w_init_scale=0.5", stacked="layers")

The model, per layer (hk.layer_stack, one scan over the layers): an outer product of two node projections
makes the pair representation [N, N, outer^2] -> hk.Linear to [N, N, pair], plus outer sums of two more
node projections, a pair MLP; an attention bias [N, N, heads] from the pair tensor weights an average of
the nodes' values (pair-weighted averaging); hk.MultiHeadAttention over the nodes (w_init
hk.initializers.VarianceScaling(0.5), which Haiku requires to be given); hk.LayerNorm; an MLP. A readout
head gives each node `classes` logits. `--loop` makes the layers a Python loop instead (a module per layer);
`--batch-norm` puts an hk.BatchNorm before the head (hk.transform_with_state): its moving averages, which
t.init sets from the activations, keep the forward inside jax.jit(t.init) (see the bench). layerinit.jax.init
makes the state beside the parameters as Haiku's modules create it (hidden zeros, counters 0), and the
running statistics where the model says they start (STATE: mean 0, variance 1; t.init would store the
example batch's there).

The script: the shapes at --nodes (default 414) with jax.eval_shape; the parameters from layerinit
(asserting that the process's peak resident memory grew by at most the parameters' bytes plus a fixed
allowance, ALLOWANCE, during the call); each leaf checked against Haiku's own init of the same model on
a small graph (constants exactly, the rest by a two-sample KS test); t.apply on a graph of --apply-nodes
(default 64; the parameters fit every N, and a forward pass at 414 nodes needs GBs of its own).
`--haiku-init` runs Haiku's t.init at --nodes instead and prints what it needed (try --nodes 128).

    python examples/jax/graph_transformer_haiku.py                       # layerinit at N = 414
    python examples/jax/graph_transformer_haiku.py --haiku-init --nodes 128
"""
from __future__ import annotations

import argparse
import os
import resource
import time
from dataclasses import dataclass

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

import layerinit.jax

#: hk.MultiHeadAttention's w_init is VarianceScaling(MHA_SCALE); the recipe is told the same scale.
MHA_SCALE = 0.5
#: What layerinit's init may add to the process's peak resident memory beyond the parameters' bytes:
#: the compiled fill program, XLA's buffers and threads (measured: the whole call, parameters included,
#: 6-15 MiB). Independent of N.
ALLOWANCE = 256 * 2**20


@dataclass(frozen=True)
class Config:
    features: int = 32  # input features per node
    dim: int = 128  # node width
    heads: int = 8
    outer: int = 80  # outer-product channels: each pair starts as outer^2 = 6400 floats
    pair: int = 32  # pair width
    layers: int = 4
    classes: int = 10
    loop: bool = False  # the layers as a Python loop instead of hk.layer_stack
    batch_norm: bool = False  # hk.BatchNorm before the head: a model with state (hk.transform_with_state)


# [docs:haiku]
def block(x: jax.Array, c: Config) -> jax.Array:
    """One layer over the nodes x [N, dim]."""
    n = x.shape[0]
    ln = lambda name: hk.LayerNorm(-1, create_scale=True, create_offset=True, name=name)  # noqa: E731
    h = ln("ln_node")(x)
    # The pair representation: an outer product of two node projections (this is what makes t.init big)
    # and outer sums of two others, through a pair MLP.
    a, b = hk.Linear(c.outer, name="outer_a")(h), hk.Linear(c.outer, name="outer_b")(h)
    pair = jnp.einsum("ic,jd->ijcd", a, b).reshape(n, n, c.outer * c.outer)
    pair = (hk.Linear(c.pair, name="pair_in")(pair) + hk.Linear(c.pair, name="pair_row")(h)[:, None]
            + hk.Linear(c.pair, name="pair_col")(h)[None, :])
    pair = pair + hk.Linear(c.pair, name="pair_mlp_out")(jax.nn.gelu(hk.Linear(4 * c.pair, name="pair_mlp_in")(
        ln("ln_pair")(pair))))
    # Attention over the nodes, and an average of the nodes' values weighted by the pair tensor's bias.
    # Haiku's own module name, multi_head_attention: the haiku recipe finds the projections by it (a
    # renamed one is read as plain Linears, TruncatedNormal(1 / sqrt(fan_in)), unless rules say otherwise).
    mha = hk.MultiHeadAttention(c.heads, c.dim // c.heads, w_init=hk.initializers.VarianceScaling(MHA_SCALE))
    x = x + mha(h, h, h)
    bias = hk.Linear(c.heads, name="pair_bias")(ln("ln_bias")(pair))  # [N, N, heads]
    v = hk.Linear(c.dim, name="pwa_value")(h).reshape(n, c.heads, c.dim // c.heads)
    avg = jnp.einsum("ijh,jhd->ihd", jax.nn.softmax(bias, axis=1), v).reshape(n, c.dim)
    x = x + hk.Linear(c.dim, name="pwa_out")(avg)
    m = ln("ln_mlp")(x)
    return x + hk.Linear(c.dim, name="mlp_out")(jax.nn.gelu(hk.Linear(4 * c.dim, name="mlp_in")(m)))


def transformed(c: Config) -> hk.TransformedWithState:
    """The model; its init and apply take and return state (empty without --batch-norm), as Haiku's
    hk.transform_with_state makes them."""
    def forward(nodes: jax.Array) -> jax.Array:  # [N, features] -> [N, classes]
        x = hk.Linear(c.dim, name="embed")(nodes)
        if c.loop:
            for i in range(c.layers):
                with hk.experimental.name_scope(f"layer_{i}"):
                    x = block(x, c)
        else:
            x = hk.layer_stack(c.layers, name="layers")(lambda x: block(x, c))(x)
        if c.batch_norm:
            x = hk.BatchNorm(create_scale=True, create_offset=True, decay_rate=0.9, name="bn_out")(x, is_training=True)
        else:
            x = hk.LayerNorm(-1, create_scale=True, create_offset=True, name="ln_out")(x)
        return hk.Linear(c.classes, name="head")(x)

    return hk.transform_with_state(forward)
# [end]


#: Where hk.BatchNorm's running statistics start (t.init stores the example batch's, from the forward).
STATE = {"*mean_ema.average": "constant(0)", "*var_ema.average": "constant(1)"}


def init_with_layerinit(abstract: tuple, c: Config, seed: int = 0) -> tuple:
    """(params, state) from the shapes of t.init's: Haiku's distributions (recipe "haiku"; its
    hk.MultiHeadAttention has VarianceScaling(MHA_SCALE)); the state as Haiku's modules create it
    (hk.BatchNorm's hidden averages 0, their counters 0), its running statistics at STATE. The stack
    is named "layers", so layerinit is told."""
    return layerinit.jax.init(abstract, seed=seed, recipe=f"haiku:mha_w_init_scale={MHA_SCALE}",
                              stacked=None if c.loop else "layers", rules=STATE if c.batch_norm else None)


def nodes_input(n: int, c: Config) -> jax.Array:
    return jax.random.normal(jax.random.key(1), (n, c.features), jnp.float32)


class PeakMemory:
    """The process's resident memory before a block and its peak during it (Linux: VmHWM, reset at the
    start through /proc/self/clear_refs, so the peak is the block's own; elsewhere getrusage's maxrss,
    the process's peak so far)."""

    def __enter__(self) -> "PeakMemory":
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
            self.exact = True
        except OSError:
            self.exact = False
        self.baseline = rss_bytes()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.peak = vm_hwm() if self.exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    @property
    def growth(self) -> int:
        return self.peak - self.baseline


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


def tree_bytes(tree: object) -> int:
    return sum(x.size * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree))


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = np.sort(a.ravel()), np.sort(b.ravel())
    x = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, x, "right") / a.size - np.searchsorted(b, x, "right") / b.size)))


def check_against_haiku(params: dict, t: hk.Transformed, c: Config) -> None:
    """Every leaf against Haiku's own init of the model on a 4-node graph (the same shapes: they do not
    depend on N): constants exactly, the rest by the KS test at level 1e-6."""
    own, _ = jax.jit(t.init)(jax.random.key(0), nodes_input(4, c))
    flat_own = dict(jax.tree_util.tree_leaves_with_path(own))
    assert len(flat_own) == len(jax.tree_util.tree_leaves(params))
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        name, a, b = jax.tree_util.keystr(path), np.asarray(leaf), np.asarray(flat_own[path])
        assert a.shape == b.shape and a.dtype == b.dtype, name
        if np.all(b == b.flat[0]):
            assert np.array_equal(a, b), name  # biases and offsets 0, scales 1
        else:
            level = np.sqrt(-np.log(1e-6 / 2) / 2) * np.sqrt((a.size + b.size) / (a.size * b.size))
            assert ks_statistic(a, b) < level, (name, ks_statistic(a, b), level)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=414, help="the graph's nodes for the init (default 414)")
    ap.add_argument("--apply-nodes", type=int, default=64, help="the graph's nodes for t.apply (default 64)")
    for k, v in Config.__dataclass_fields__.items():
        if v.type in ("int", int):
            ap.add_argument(f"--{k}", type=int, default=v.default, help=f"default {v.default}")
    ap.add_argument("--loop", action="store_true", help="the layers as a Python loop instead of hk.layer_stack")
    ap.add_argument("--batch-norm", action="store_true", help="an hk.BatchNorm (state) before the head")
    ap.add_argument("--haiku-init", action="store_true", help="run Haiku's own t.init at --nodes instead")
    a = ap.parse_args()
    for k, v in vars(a).items():
        if type(v) is int and v < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    c = Config(**{k: getattr(a, k) for k in Config.__dataclass_fields__})
    if c.dim % c.heads:
        ap.error(f"--dim {c.dim} is not a multiple of --heads {c.heads}")

    t = transformed(c)
    key = jax.random.key(0)
    x = nodes_input(a.nodes, c)
    jax.jit(lambda v: v + 1)(jnp.zeros(())).block_until_ready()  # the backend up before the baseline
    abstract = jax.eval_shape(t.init, key, x)  # (params, state): the forward traced, nothing computed
    shapes, state_shapes = abstract
    count, nbytes = sum(s.size for s in jax.tree_util.tree_leaves(shapes)), tree_bytes(shapes)
    outer = a.nodes**2 * c.outer**2 * 4
    variant = "".join([" (a Python loop)" if c.loop else "", ", batch norm" if c.batch_norm else ""])
    print(f"{a.nodes} nodes, {c.layers} layers{variant}: {count:,} parameters, "
          f"{nbytes / 2**20:.1f} MiB; t.init's forward makes [N, N, outer^2] = [{a.nodes}, {a.nodes}, "
          f"{c.outer**2}] fp32 = {outer / 2**30:.2f} GiB in each layer (and more beside it)")
    # XLA's own count of what one compiled forward pass at --nodes needs beside its inputs and outputs
    # (compiled, not run); t.init runs that forward, eagerly.
    stats = jax.jit(t.apply).lower(shapes, state_shapes, None, x).compile().memory_analysis()
    if stats is not None:
        print(f"XLA's count for one compiled forward pass at {a.nodes} nodes: "
              f"{stats.temp_size_in_bytes / 2**30:.2f} GiB of temporaries")

    if a.haiku_init:
        with PeakMemory() as mem:
            params, state = jax.block_until_ready(t.init(key, x))
        print(f"Haiku's t.init: {mem.seconds:.1f} s, resident memory {mem.baseline / 2**30:.2f} GiB before, "
              f"peak {mem.peak / 2**30:.2f} GiB: +{mem.growth / 2**30:.2f} GiB for {nbytes / 2**20:.1f} MiB of "
              f"parameters")
        return

    with PeakMemory() as mem:
        params, state = jax.block_until_ready(init_with_layerinit(abstract, c))
    print(f"layerinit: {mem.seconds:.1f} s, resident memory {mem.baseline / 2**30:.2f} GiB before, peak "
          f"{mem.peak / 2**30:.2f} GiB: +{mem.growth / 2**20:.0f} MiB ({'VmHWM' if mem.exact else 'maxrss'})")
    assert jax.tree_util.tree_structure((params, state)) == jax.tree_util.tree_structure(abstract)
    assert all(p.shape == s.shape and p.dtype == s.dtype
               for p, s in zip(jax.tree_util.tree_leaves((params, state)), jax.tree_util.tree_leaves(abstract)))
    for module, s in state.items():  # hidden and counters 0; the running mean 0, the running variance 1
        for name, v in s.items():
            assert (np.asarray(v) == (name == "average" and module.endswith("var_ema"))).all(), (module, name)
    assert mem.growth <= nbytes + ALLOWANCE, (mem.growth, nbytes, ALLOWANCE)

    check_against_haiku(params, t, c)
    logits, _ = jax.jit(t.apply)(params, state, None, nodes_input(a.apply_nodes, c))
    assert logits.shape == (a.apply_nodes, c.classes) and bool(jnp.isfinite(logits).all()), logits
    print(f"every leaf distributed as Haiku's own init; t.apply on {a.apply_nodes} nodes: logits {logits.shape}")


if __name__ == "__main__":
    main()
