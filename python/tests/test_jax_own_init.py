"""The model's own init in JAX, read from its code (layerinit.jax.eval_shape, docs/python.md "The model's own
init"): every leaf has the distribution the framework's own init gives it (a two-sample Kolmogorov-Smirnov test
per random leaf against the framework's init, constants exactly), stacks are where the transform put them, and
what the code does not say is refused by name."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")
scipy_stats = pytest.importorskip("scipy.stats")
import jax.numpy as jnp  # noqa: E402

import layerinit.jax as ljax  # noqa: E402

KEY = jax.random.key(7)


def named(tree):
    """{leaf name: numpy array} of a tree (boxes and NNX Variables as their values)."""
    tree = nn.meta.unbox(tree)
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        parts = [str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k)))) for k in path]
        if parts and parts[-1] == "value":
            parts = parts[:-1]
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating):
            out[".".join(parts)] = np.asarray(leaf, np.float32)
    return out


def agree(own, made, alpha_total=1e-4):
    """Every leaf of `made` has the distribution of `own`'s: constants equal, the rest by a KS test at a
    false-alarm rate of alpha_total over all random leaves. Returns the names of the leaves that differ."""
    own, made = named(own), named(made)
    assert sorted(own) == sorted(made)
    random = [k for k in own if np.unique(own[k]).size > 1]
    bad = []
    for k in own:
        assert own[k].shape == made[k].shape, k
        if k in random:
            if scipy_stats.ks_2samp(own[k].ravel(), made[k].ravel()).pvalue <= alpha_total / len(random):
                bad.append(k)
        elif not np.array_equal(own[k], made[k]):
            bad.append(k)
    return bad


# ---------------------------------------------------------------------------------------------------
# Flax linen: MHA, DenseGeneral (several feature axes, axis=(-2, -1)), Dense, Embed, norms, nn.scan
# blocks with the layer axis at 0 or 1, custom and boxed initializers.

class LinenBlock(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        x = x + nn.MultiHeadDotProductAttention(4, name="attn")(nn.LayerNorm(name="ln")(x))
        h = nn.DenseGeneral((4, 32), name="up")(nn.RMSNorm(name="norm")(x))  # kernel [64, 4, 32]
        down = nn.DenseGeneral(64, axis=(-2, -1), name="down",  # kernel [4, 32, 64]: fans over (4, 32)
                               kernel_init=nn.initializers.variance_scaling(2.0, "fan_out", "uniform"))
        return x + down(nn.gelu(h)), None


class LinenModel(nn.Module):
    scan: bool = True
    axis: int = 1

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(256, 64, name="embed")(tokens)
        if self.scan:
            blocks = nn.scan(LinenBlock, variable_axes={"params": self.axis}, split_rngs={"params": True}, length=3,
                             metadata_params={nn.PARTITION_NAME: "layers"})
            x, _ = blocks(name="blocks")(x, None)
        else:
            for i in range(3):
                x, _ = LinenBlock(name=f"blocks_{i}")(x, None)
        head = nn.Dense(256, use_bias=False, name="head",
                        kernel_init=nn.with_logical_partitioning(nn.initializers.normal(0.01), ("embed", "vocab")))
        return head(x)


TOKENS = jnp.arange(16).reshape(2, 8) % 256


@pytest.mark.parametrize("scan,axis", [(True, 1), (True, 0), (False, 0)])
def test_linen_leaves_have_linens_own_distribution(scan, axis):
    model = LinenModel(scan=scan, axis=axis)
    abstract = ljax.eval_shape(model.init, KEY, TOKENS)
    made = ljax.init(abstract, seed=3)
    own = jax.jit(model.init)(jax.random.key(1), TOKENS)
    assert agree(own, made) == []
    if scan:
        kernel = made["params"]["blocks"]["up"]["kernel"]  # [64, 3, 4, 32] at axis 1
        assert kernel.shape == ((64, 3, 4, 32) if axis == 1 else (3, 64, 4, 32))
    # the boxes are kept (metadata), their values made; the forward pass takes the tree
    assert isinstance(made["params"]["head"]["kernel"], nn.LogicallyPartitioned)
    assert np.isfinite(np.asarray(model.apply(made, TOKENS))).all()
    # The test can fail: N(0, 0.02) everywhere (recipe "hf") is not linen's init.
    assert len(agree(own, ljax.init(abstract, seed=3, recipe="hf", rules={"*attn*": "normal(0, 0.02)",
                                                                            "*up.kernel": "normal(0, 0.02)",
                                                                            "*down.kernel": "normal(0, 0.02)"}))) >= 4


def test_linen_scan_axis_slices_are_the_layers_tensors():
    """Slice l of a scanned leaf at axis 1 ([64, L, ...]) holds blocks.{l}.<leaf>'s values, as at axis 0."""
    at1 = ljax.init(ljax.eval_shape(LinenModel(axis=1).init, KEY, TOKENS), seed=5)["params"]["blocks"]
    at0 = ljax.init(ljax.eval_shape(LinenModel(axis=0).init, KEY, TOKENS), seed=5)["params"]["blocks"]
    for l in range(3):
        np.testing.assert_array_equal(np.asarray(at1["up"]["kernel"][:, l]), np.asarray(at0["up"]["kernel"][l]))
        np.testing.assert_array_equal(np.asarray(at1["attn"]["query"]["kernel"][:, l]),
                                      np.asarray(at0["attn"]["query"]["kernel"][l]))
    assert not np.array_equal(np.asarray(at0["up"]["kernel"][0]), np.asarray(at0["up"]["kernel"][1]))
    described = ljax._model(ljax.eval_shape(LinenModel(axis=1).init, KEY, TOKENS), None, None, None, None, False).described
    assert "params.blocks.1.up.kernel" in described  # the layer index at the scanned module


def test_what_the_code_does_not_say_is_refused_by_name():
    class Ortho(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(8, kernel_init=nn.initializers.orthogonal(), name="rot")(x)

    abstract = ljax.eval_shape(Ortho().init, KEY, jnp.ones((2, 8)))
    with pytest.raises(ValueError, match=r"params\.rot\.kernel \[8, 8\]: .*(qr|householder|orthogonal)"):
        ljax.init(abstract)
    # a rule gives it what the code does not say
    made = ljax.init(abstract, rules={"params.rot.kernel": "normal(0, 0.1)"})
    assert made["params"]["rot"]["bias"].shape == (8,)
    # a tree of jax.eval_shape says nothing: the refusal says how to record it
    with pytest.raises(ValueError, match=r"layerinit\.jax\.eval_shape"):
        ljax.init(jax.eval_shape(Ortho().init, KEY, jnp.ones((2, 8))))


def test_an_output_of_arrays_is_traced_once():
    """flax.nnx is imported here, yet a linen init (arrays only, as Haiku's and MaxText's) runs once: its output is
    looked at inside the one trace. An NNX module is traced a second time, by nnx.eval_shape."""
    calls = []

    def init(key, tokens):
        calls.append("linen")
        return LinenModel(scan=False).init(key, tokens)

    def make():
        calls.append("nnx")
        return nnx.Linear(8, 16, rngs=nnx.Rngs(0))

    abstract = ljax.eval_shape(init, KEY, TOKENS)
    assert calls == ["linen"]
    leaves = jax.tree_util.tree_leaves(abstract)
    assert leaves and all(isinstance(x, ljax.Recorded) and x.fill for x in leaves)
    linear = ljax.eval_shape(make)
    assert calls == ["linen", "nnx", "nnx"]
    assert isinstance(linear, nnx.Linear)
    assert all(isinstance(x, ljax.Recorded) for x in jax.tree_util.tree_leaves(nnx.state(linear, nnx.Param)))


# ---------------------------------------------------------------------------------------------------
# Flax NNX: the same modules, nnx.vmap blocks eager and through jax.jit over the State, Dropout with
# rngs (a train-mode forward), GroupNorm.

class NnxBlock(nnx.Module):
    def __init__(self, rngs):
        self.attn = nnx.MultiHeadAttention(4, 64, decode=False, rngs=rngs)
        self.up = nnx.LinearGeneral(64, (4, 32), rngs=rngs)
        self.down = nnx.LinearGeneral((4, 32), 64, axis=(-2, -1), rngs=rngs)
        self.norm = nnx.GroupNorm(64, num_groups=4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(x)
        return x + self.drop(self.down(nnx.gelu(self.up(self.norm(x)))))


class NnxModel(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(256, 64, rngs=rngs)

        @nnx.split_rngs(splits=3)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def blocks(rngs):
            return NnxBlock(rngs)

        self.blocks = blocks(rngs)
        self.ln = nnx.LayerNorm(64, rngs=rngs)
        self.head = nnx.Linear(64, 256, use_bias=False, rngs=rngs)

    def __call__(self, tokens):
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def run(x, block):
            return block(x)

        return self.head(self.ln(run(self.embed(tokens), self.blocks)))


def test_nnx_leaves_have_nnxs_own_distribution_and_the_model_trains():
    abstract = ljax.eval_shape(lambda: NnxModel(nnx.Rngs(0)))
    model = ljax.init(abstract, seed=2)
    own = NnxModel(nnx.Rngs(1))
    assert agree(nnx.state(own, nnx.Param), nnx.state(model, nnx.Param)) == []
    assert model.blocks.up.kernel[...].shape == (3, 64, 4, 32)
    # the random streams are made as the constructor made them: a train-mode forward runs
    model.train()
    a, b = model(TOKENS), model(TOKENS)
    assert np.isfinite(np.asarray(a)).all() and not np.array_equal(np.asarray(a), np.asarray(b))  # dropout draws
    model.eval()
    assert np.array_equal(np.asarray(model(TOKENS)), np.asarray(model(TOKENS)))


def test_nnx_jit_over_the_state_equals_the_eager_call():
    abstract = ljax.eval_shape(lambda: NnxModel(nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    jitted = jax.jit(lambda: ljax.init(state, seed=4))()
    eager = nnx.state(ljax.init(abstract, seed=4))
    a, b = named(jitted), named(eager)
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    model = nnx.merge(graphdef, jitted)
    assert np.isfinite(np.asarray(model(TOKENS))).all()


def test_a_stacked_only_model_has_its_per_layer_twins_values():
    class Stacked(nnx.Module):
        def __init__(self, rngs):
            @nnx.split_rngs(splits=3)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def blocks(rngs):
                return nnx.Linear(8, 16, rngs=rngs)

            self.blocks = blocks(rngs)

    class Twin(nnx.Module):
        def __init__(self, rngs):
            self.blocks = nnx.List([nnx.Linear(8, 16, rngs=rngs) for _ in range(3)])

    stacked = ljax.init(ljax.eval_shape(lambda: Stacked(nnx.Rngs(0))), seed=9)
    twin = ljax.init(ljax.eval_shape(lambda: Twin(nnx.Rngs(0))), seed=9)
    for l in range(3):
        np.testing.assert_array_equal(np.asarray(stacked.blocks.kernel[...][l]), np.asarray(twin.blocks[l].kernel[...]))
    described = ljax._model(ljax.eval_shape(lambda: Stacked(nnx.Rngs(0))), None, None, None, None, False).described
    assert sorted(described) == [f"blocks.{l}.{p}" for l in range(3) for p in ("bias", "kernel")]


# ---------------------------------------------------------------------------------------------------
# DM-Haiku: a module's own w_init is honored; Equinox: unchanged.

def test_haiku_custom_initializers_are_honored():
    hk = pytest.importorskip("haiku")

    def f(x):
        x = hk.Linear(64, w_init=hk.initializers.VarianceScaling(2.0, "fan_in", "uniform"), name="wide")(x)
        x = hk.Linear(32, w_init=hk.initializers.RandomNormal(0.3, 0.5), b_init=hk.initializers.Constant(0.25))(x)
        return hk.LayerNorm(-1, True, True)(x)

    t = hk.transform(f)
    x = jnp.ones((2, 48))
    made = ljax.init(ljax.eval_shape(t.init, KEY, x), seed=1)
    own = t.init(jax.random.key(1), x)
    assert agree(own, made) == []
    assert np.all(np.asarray(made["linear"]["b"]) == 0.25)
    assert abs(float(np.asarray(made["linear"]["w"]).mean()) - 0.5) < 0.05  # RandomNormal(stddev=0.3, mean=0.5)


def test_equinox_is_unchanged():
    eqx = pytest.importorskip("equinox")
    make = lambda: eqx.nn.MLP(4, 3, 32, 2, key=jax.random.key(0))  # noqa: E731
    plain = eqx.filter_eval_shape(make)
    a = ljax.init(plain, seed=6)
    b = ljax.init(plain, seed=6, recipe="equinox")
    c = ljax.init(ljax.eval_shape(make), seed=6)
    for x, y, z in zip(jax.tree_util.tree_leaves(eqx.filter(a, eqx.is_array)),
                       jax.tree_util.tree_leaves(eqx.filter(b, eqx.is_array)),
                       jax.tree_util.tree_leaves(eqx.filter(c, eqx.is_array))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        np.testing.assert_array_equal(np.asarray(x), np.asarray(z))


# ---------------------------------------------------------------------------------------------------
# The initializers' small constants (fans, 1 / sqrt(head_dim), a stream's count): computed with numpy, XLA's bits.

def test_the_reading_compiles_nothing():
    """A primitive bound on constants is compiled by XLA (tens of ms each): the reading computes them with numpy."""
    compiles = []

    def listener(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.clear_caches()  # a primitive compiled by an earlier test would not be compiled again
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        abstract = ljax.eval_shape(LinenModel().init, KEY, TOKENS)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    assert all(x.fill for x in jax.tree_util.tree_leaves(abstract))


def test_constants_computed_with_numpy_are_xlas_bits():
    """Where numpy computes a primitive it gives XLA's CPU's bits, on values over the float32 range; subnormal
    and non-finite numbers, which XLA's CPU treats otherwise (it flushes subnormals to zero), are left to XLA.
    (XLA's GPU is not the reference: on an H200 its float32 / differed in 1222 of these 4096 quotients.)"""
    from jax import lax

    from layerinit import _jax_record as rec

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(4096) * 10.0 ** rng.integers(-15, 15, 4096) for _ in range(2))
    x, y = x.astype(np.float32), y.astype(np.float32)
    u = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)  # sums and products wrap around
    i = rng.integers(-2**31, 2**31, 4096, dtype=np.int64).astype(np.int32)
    cases = [(lax.add, x, y), (lax.sub, x, y), (lax.mul, x, y), (lax.div, x, y), (lax.sqrt, np.abs(x)),
             (lax.neg, x), (lax.add, u, u[::-1]), (lax.mul, u, u[::-1]), (lax.sub, i, i[::-1]), (lax.neg, i),
             (lambda a: a.astype(jnp.float32), (x > 0)), (lambda a: a.astype(jnp.float32), i % 1000),
             (lambda a: lax.broadcast_in_dim(a, (3, 2, 4096), (2,)), x), (lambda a: a.reshape(64, 64).T, x),
             (lambda a: a.reshape(1, 4096, 1).squeeze((0, 2)), x), (lambda a: a.reshape(4, 1024)[None], u)]
    for fn, *xs in cases:
        closed = jax.make_jaxpr(fn)(*xs)
        vals = {}
        for eqn in closed.jaxpr.eqns:
            ins = [vals.get(v, xs[closed.jaxpr.invars.index(v)] if v in closed.jaxpr.invars else None)
                   for v in eqn.invars]
            got = rec._fold(eqn.primitive.name, eqn.params, ins, eqn.outvars)
            assert got is not None, eqn
            with jax.default_device(jax.devices("cpu")[0]):
                want = np.asarray(eqn.primitive.bind(*[jnp.asarray(a) for a in ins], **eqn.params))
            assert got[0].dtype == want.dtype and got[0].shape == want.shape, eqn
            bad = np.flatnonzero(np.ascontiguousarray(got[0]).view(np.uint8) != np.ascontiguousarray(want).view(np.uint8))
            assert bad.size == 0, f"{eqn}: first differing bytes at {bad[:5]}"
            vals[eqn.outvars[0]] = got[0]
    # what XLA computes otherwise: left to it
    tiny = np.float32(np.finfo(np.float32).tiny)
    for fn, *xs in [(lax.mul, x, np.full_like(x, tiny)), (lax.add, np.float32([1e-40]), np.float32([1.0])),
                    (lax.div, x, np.zeros_like(x)), (lax.sqrt, x), (lax.div, i, i)]:
        eqn, = jax.make_jaxpr(fn)(*xs).jaxpr.eqns
        assert rec._fold(eqn.primitive.name, eqn.params, list(xs), eqn.outvars) is None, eqn


def test_what_the_reading_leaves_to_xla_runs_on_its_cpu(monkeypatch):
    """A constant of an init the reading cannot compute with numpy (exp, a subnormal) is XLA's CPU's, wherever
    jax's default device is: XLA's GPU rounds float32 / and sqrt otherwise, and the values would follow."""
    from jax import lax

    from layerinit import _jax_record as rec

    placed = []
    asarray = jnp.asarray
    monkeypatch.setattr(jnp, "asarray", lambda *a, **k: placed.append(asarray(*a, **k)) or placed[-1])
    # other: a GPU where there is one; else the last of the 8 host devices conftest makes
    cpu, other = jax.devices("cpu")[0], jax.devices()[-1]
    if other == cpu:
        pytest.skip("jax has 1 device: XLA_FLAGS=--xla_force_host_platform_device_count=8 (conftest)")
    x = np.float32([0.5, 1e-40])
    for fn in (lax.exp, lambda a: lax.mul(a, a)):
        eqn, = jax.make_jaxpr(fn)(x).jaxpr.eqns
        with jax.default_device(cpu):
            want = np.asarray(fn(x))
        placed.clear()
        with jax.default_device(other):
            got, = rec._bind(eqn, [x] * len(eqn.invars))
        assert {d for a in placed for d in a.devices()} == {cpu}, fn
        assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), fn
