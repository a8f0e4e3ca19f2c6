"""layerinit.jax.init on Equinox and Flax NNX pytrees: every leaf is the tensor `layerinit emit` writes
under its name, the same for every mesh, PartitionSpec, device count, under jit and eagerly, written by
the FFI handler into XLA's own buffers; bad input is refused before anything is built."""
import json
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
eqx = pytest.importorskip("equinox")
nnx = pytest.importorskip("flax.nnx")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import layerinit  # noqa: E402
import layerinit.jax as ljax  # noqa: E402
from conftest import run_cli  # noqa: E402


class Block(eqx.Module):
    attn: eqx.nn.Linear
    proj: eqx.nn.Linear
    norm: eqx.nn.LayerNorm
    gain: jax.Array  # no module says what it is: a rule does

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.attn = eqx.nn.Linear(24, 12, key=k1)             # weight [12, 24], bias [12]
        self.proj = eqx.nn.Linear(12, 24, use_bias=False, key=k2)
        self.norm = eqx.nn.LayerNorm(24)
        self.gain = jnp.ones((3,))


class Net(eqx.Module):
    emb: eqx.nn.Embedding
    blocks: Block      # stacked: every leaf [4, ...]
    head: list

    def __init__(self, key, stacked=True):
        k1, k2, k3 = jax.random.split(key, 3)
        self.emb = eqx.nn.Embedding(40, 24, key=k1)
        keys = jax.random.split(k2, 4)
        self.blocks = eqx.filter_vmap(Block)(keys) if stacked else [Block(k) for k in keys]
        self.head = [eqx.nn.RMSNorm(24), eqx.nn.Linear(24, 40, key=k3)]


# "blocks*" matches the stacked leaf (blocks.proj.weight) and the listed layers' (blocks.0.proj.weight).
RULES = {"blocks*.attn.weight": "linear_weight", "blocks*.proj.weight": "output_weight", "*.gain": "uniform(-0.5, 0.5)", "head.1.weight": "head_weight"}


def abstract(stacked=True):
    return eqx.filter_eval_shape(Net, jax.random.key(0), stacked)


def arrays(tree):
    return jax.tree_util.tree_leaves(eqx.filter(tree, eqx.is_array))


def bits(x):
    a = np.asarray(x)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def named(tree):
    """{leaf name: array} of a filled tree, names as init gives them."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p, simple=True, separator="."): v for p, v in flat if hasattr(v, "shape")}


def emit(cli, tmp_path, spec, *flags):
    import ml_dtypes  # noqa: F401  (safetensors' numpy reader needs it for bf16)
    from safetensors.numpy import load_file

    f = tmp_path / "spec.json"
    f.write_text(spec.to_json())
    out = tmp_path / "out"
    run_cli(cli, "emit", "--spec", str(f), "--backend", "cpu", "--format", "safetensors", "-o", str(out), *flags)
    tensors = {}
    for part in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(str(part)))
    return tensors


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_every_leaf_is_the_emitted_tensor(cli, tmp_path, dtype):
    spec = ljax.spec_of(abstract(), rules=RULES)
    ref = emit(cli, tmp_path, spec, "--recipe", "torchtitan", "--seed", "7", "--dtype", dtype)
    model = ljax.init(abstract(), seed=7, recipe="torchtitan", rules=RULES, dtype=dtype)
    got = named(model)
    assert got["blocks.attn.weight"].shape == (4, 12, 24) and got["blocks.attn.weight"].dtype == ljax._jnp_dtype(dtype)
    compared = 0
    for name, a in got.items():
        a = np.asarray(a)
        if name.startswith("blocks."):
            for layer in range(4):
                canonical = name.replace("blocks.", f"blocks.{layer}.", 1)
                assert np.array_equal(bits(a[layer]), bits(ref[canonical])), canonical
                compared += 1
        else:
            assert np.array_equal(bits(a), bits(ref[name])), name
            compared += 1
    assert compared == len(ref) == 4 * 6 + 5  # every emitted tensor, once
    # torchtitan's depth scaling reaches the stacked slices: layer 3's std is below layer 0's.
    proj = np.asarray(got["blocks.proj.weight"]).astype(np.float32)
    assert proj[3].std() < proj[0].std()


def test_stacked_slices_are_the_per_layer_tensors():
    stacked = named(ljax.init(abstract(True), seed=3, rules=RULES, recipe="equinox"))
    per_layer = named(ljax.init(abstract(False), seed=3, rules=RULES, recipe="equinox"))
    assert len(per_layer) == 5 + 4 * 6 and len(stacked) == 5 + 6
    for name, a in per_layer.items():
        if name.startswith("blocks."):
            layer, rest = name.split(".", 2)[1:]
            assert np.array_equal(np.asarray(stacked["blocks." + rest][int(layer)]), np.asarray(a)), name
        else:
            assert np.array_equal(np.asarray(stacked[name]), np.asarray(a)), name


class NnxBlock(nnx.Module):
    def __init__(self, rngs):
        self.up = nnx.Linear(16, 32, rngs=rngs)
        self.norm = nnx.RMSNorm(32, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)


class NnxNet(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(50, 16, rngs=rngs)

        @nnx.split_rngs(splits=3)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(rngs):
            return NnxBlock(rngs)

        self.blocks = make(rngs)
        self.head = nnx.Linear(16, 50, use_bias=False, rngs=rngs)


def test_nnx_kernels_are_stored_in_out(cli, tmp_path):
    tree = nnx.eval_shape(lambda: NnxNet(nnx.Rngs(0)))
    spec = ljax.spec_of(tree)
    layer = json.loads(spec.to_json())["layer"]
    assert layer["prefix"] == "blocks." and layer["count"] == 3 and "up.kernel" in [t["name"] for t in layer["tensors"]]
    ref = emit(cli, tmp_path, spec, "--recipe", "flax", "--seed", "2", "--dtype", "fp32")
    model = ljax.init(tree, seed=2, recipe="flax")
    kernel = np.asarray(model.blocks.up.kernel[...])
    assert kernel.shape == (3, 16, 32)  # [L, in, out]
    for layer in range(3):
        assert np.array_equal(kernel[layer].T, ref[f"blocks.{layer}.up.kernel"])  # emit writes [out, in]
    assert np.array_equal(np.asarray(model.head.kernel[...]).T, ref["head.kernel"])
    assert np.array_equal(np.asarray(model.blocks.norm.scale[...]), np.ones((3, 32), np.float32))
    assert isinstance(model.blocks.drop.rngs.key, nnx.Variable)  # random streams are left as they were


def test_linen_params_by_rules(cli, tmp_path):
    """A Flax linen init's abstract params (plain dicts: no module says anything) with rules."""
    linen = pytest.importorskip("flax.linen")

    class Mlp(linen.Module):
        @linen.compact
        def __call__(self, x):
            return linen.Dense(3)(linen.relu(linen.Dense(8)(x)))

    tree = jax.eval_shape(Mlp().init, jax.random.key(0), jnp.ones((1, 5)))
    rules = {"*.kernel": {"role": "linear_weight", "orientation": "in-out"}, "*.bias": "linear_bias"}
    ref = emit(cli, tmp_path, ljax.spec_of(tree, rules=rules), "--recipe", "flax", "--seed", "1", "--dtype", "fp32")
    params = ljax.init(tree, seed=1, recipe="flax", rules=rules)["params"]
    # Dense(3) is made first (Dense_0), before the Dense(8) of its argument (Dense_1).
    assert params["Dense_1"]["kernel"].shape == (5, 8)  # [in, out], as linen stores it
    for name in ("Dense_0", "Dense_1"):
        assert np.array_equal(np.asarray(params[name]["kernel"]).T, ref[f"params.{name}.kernel"])
    assert ref["params.Dense_1.kernel"].shape == (8, 5)  # the [out, in] tensor
    assert np.array_equal(np.asarray(params["Dense_0"]["bias"]), np.zeros(3, np.float32))


def test_a_rule_fill_keeps_every_digit():
    """A Fill given as a rule is used as it is: its text form ("normal(0, 0.123457)") rounds to 6 digits,
    which gave other values than the Fill asked for."""
    f = layerinit.Fill.parse("normal(0.1, 0.12345678912345678)")
    assert str(f) == "normal(0.1, 0.123457)" and layerinit.Fill.parse(str(f)) != f and f != "normal" and f not in ("a",)
    tree = {"w": jax.ShapeDtypeStruct((64, 32), jnp.float32)}
    got = np.asarray(ljax.init(tree, seed=4, rules={"w": f})["w"])
    want = layerinit.fill_(np.empty((64, 32), np.float32), "w", f, seed=4)
    rounded = layerinit.fill_(np.empty((64, 32), np.float32), "w", str(f), seed=4)
    assert np.array_equal(got, want) and not np.array_equal(got, rounded)


def test_identical_for_1_2_4_8_devices_and_specs():
    devices = jax.devices()
    if len(devices) < 8:
        pytest.skip(f"jax has {len(devices)} devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 (conftest)")
    tree = abstract()
    ref = {k: bits(v) for k, v in named(ljax.init(tree, seed=5, rules=RULES, dtype="bf16")).items()}
    # [L, 12, 24] pieces of 3 rows or 3 columns start inside Philox blocks (8 elements).
    specs = [P(), P(None, "x"), P(None, None, "x"), P("x"), P(None, "x", "y"), P(None, ("x", "y"))]
    runs = 0
    for n, shape in [(1, (1, 1)), (2, (2, 1)), (4, (2, 2)), (4, (4, 1)), (8, (4, 2))]:
        mesh = Mesh(np.array(devices[:n]).reshape(shape), ("x", "y"))
        for spec in specs:
            def sharding(name, spec=spec, mesh=mesh):
                if name.startswith("blocks.") and name.endswith(("attn.weight", "proj.weight")):
                    s = spec
                else:
                    s = P()
                try:
                    NamedSharding(mesh, s).shard_shape(named(tree)[name].shape)
                except Exception:  # this mesh does not divide this leaf
                    s = P()
                return NamedSharding(mesh, s)

            got = named(ljax.init(tree, seed=5, rules=RULES, dtype="bf16", sharding=sharding))
            for k, a in got.items():
                assert a.sharding == sharding(k)
                assert np.array_equal(bits(a), ref[k]), (n, shape, spec, k)
            runs += 1
    assert runs == 5 * len(specs)


def test_jit_equals_eager_and_each_device_writes_its_pieces():
    devices = jax.devices()
    if len(devices) < 8:
        pytest.skip(f"jax has {len(devices)} devices")
    mesh = Mesh(np.array(devices).reshape(2, 4), ("fsdp", "tp"))
    tree = abstract()
    shardings = jax.tree_util.tree_map(lambda x: NamedSharding(mesh, P(None, "tp", "fsdp") if x.ndim == 3 else P()),
                                       tree)
    xla = ljax._xla()
    xla.record_writes(True)
    try:
        eager = ljax.init(tree, seed=1, rules=RULES, sharding=shardings)
        jax.block_until_ready(eager)  # dispatch is asynchronous: every device's call has run
        writes = xla.take_writes()
        jitted = jax.jit(lambda: ljax.init(tree, seed=1, rules=RULES, sharding=shardings), out_shardings=shardings)()
    finally:
        xla.record_writes(False)
    for a, b in zip(arrays(eager), arrays(jitted)):
        assert a.sharding == b.sharding and np.array_equal(np.asarray(a), np.asarray(b))
    # The handler wrote XLA's own output buffers, one per device piece, and nothing else.
    wq = eager.blocks.attn.weight
    pointers = {(s.data.unsafe_buffer_pointer(), s.data.nbytes) for a in arrays(eager) for s in a.addressable_shards}
    assert {(address, size) for _, address, size in writes} == pointers
    assert sum(1 for name, _, _ in writes if name == "blocks.{0}.attn.weight") == 8  # the slices' name template
    assert {s.data.shape for s in wq.addressable_shards} == {(4, 3, 12)}


def test_grid_handler_writes_what_the_host_handler_writes(monkeypatch):
    """The CUDA handler's path (jobs, launch plan, grid-stride tasks) over the host-simulated grid. The
    simulated grid is a CPU handler: on the CPU device also where jax's default is a GPU (it had no
    handler there, GPU check 2026-11-26)."""
    tree = abstract()
    with jax.default_device(jax.devices("cpu")[0]):
        host = [bits(a) for a in arrays(ljax.init(tree, seed=9, rules=RULES, recipe="torchtitan", dtype="bf16"))]
        monkeypatch.setattr(ljax, "_TARGET", "layerinit_fill_grid")
        grid = [bits(a) for a in arrays(ljax.init(tree, seed=9, rules=RULES, recipe="torchtitan", dtype="bf16"))]
    assert all(np.array_equal(a, b) for a, b in zip(host, grid))


def test_the_grid_handler_fills_on_the_device_xla_runs_it_on(monkeypatch):
    """On a simulated node (LAYERINIT_TEST_SIMULATED_CUDA_DEVICES), the CUDA handler's path over the
    simulated grid records the device ordinal XLA hands each call (the CUDA handler makes that device
    current for its launch): every device's pieces are filled on that device, and only those."""
    devices = jax.devices("cpu")
    if len(devices) < 8:
        pytest.skip(f"jax has {len(devices)} CPU devices")
    monkeypatch.setenv("LAYERINIT_TEST_SIMULATED_CUDA_DEVICES", "8")
    monkeypatch.setattr(ljax, "_TARGET", "layerinit_fill_grid")
    mesh = Mesh(np.array(devices).reshape(2, 4), ("fsdp", "tp"))
    tree = abstract()
    shardings = jax.tree_util.tree_map(lambda x: NamedSharding(mesh, P(None, "tp", "fsdp") if x.ndim == 3 else P()),
                                       tree)
    layerinit._core._simulated_device_events()
    out = ljax.init(tree, seed=1, rules=RULES, sharding=shardings)
    jax.block_until_ready(out)
    events = layerinit._core._simulated_device_events()
    want: dict[int, int] = {}
    for a in arrays(out):
        for s in a.addressable_shards:
            want[ljax._ORDINALS[s.device]] = want.get(ljax._ORDINALS[s.device], 0) + s.data.nbytes
    got: dict[int, int] = {}
    for device, what, n in events:
        assert what == "fill"
        got[device] = got.get(device, 0) + n
    assert len(want) == 8 and got == want


REGIONS_SPEC = {
    "name": "regions",
    "pre": [{"name": "emb", "shape": [40, 24], "role": "embedding",
             "regions": [{"offset": [3, 0], "shape": [1, 24], "init": {"constant": {"value": 0}}}]}],
    "layer": {"prefix": "blocks.", "count": 4, "tensors": [
        {"name": "w", "shape": [12, 24], "role": "linear_weight", "fan_in": 24, "fan_out": 12, "transposable": True,
         "regions": [{"offset": [1, 2], "shape": [5, 7], "init": {"uniform": {"lo": -1, "hi": 1}}},
                     {"offset": [4, 0], "shape": [1, 24], "init": {"constant": {"value": 0.5}}}]}]},
}


@pytest.mark.parametrize("target", ["layerinit_fill", "layerinit_fill_grid"])
@pytest.mark.parametrize("orientation", ["out-in", "in-out"])
def test_the_handlers_write_a_tensors_fill_regions(monkeypatch, target, orientation):
    """Leaves whose tensors have fill regions (a spec's, as a Hugging Face config's zero padding row),
    whole and stacked, as the FFI handlers make them (the host's, and the CUDA handler's path on the
    simulated grid) from the plan's composite text: the build's bytes, regions included."""
    plan = layerinit.plan(REGIONS_SPEC, dtype="fp32", seed=5, orientation=orientation)
    built = layerinit.build(REGIONS_SPEC, dtype="fp32", seed=5, orientation=orientation)
    ljax._xla()
    monkeypatch.setattr(ljax, "_TARGET", target)
    w = np.asarray(built["blocks.0.w"])
    leaves = [("emb", plan.composite("emb").text, (40, 24)),
              ("blocks.{0}.w", plan._leaf("blocks.{0}.w", [4], [4, *w.shape], "fp32").text, (4, *w.shape))]
    assert all('"regions":' in text for _, text, _ in leaves)
    with jax.default_device(jax.devices("cpu")[0]):
        for name, text, shape in leaves:
            a = ljax._Array(name=name, shape=shape, dtype="fp32", param=text)
            a.local = shape
            got = np.asarray(ljax._fill(a, 5))
            if name == "emb":
                assert np.array_equal(bits(got), bits(np.asarray(built["emb"])))
                assert not got[3].any() and got[2].all()
            else:
                for layer in range(4):
                    assert np.array_equal(bits(got[layer]), bits(np.asarray(built[f"blocks.{layer}.w"]))), layer
                row = got[0][4] if orientation == "out-in" else got[0][:, 4]
                assert (row == 0.5).all()


@pytest.mark.parametrize("target", ["layerinit_fill", "layerinit_fill_grid"])
def test_the_handlers_parse_a_param_once_per_program_and_again_from_the_persistent_cache(monkeypatch, tmp_path, target):
    """The `param` attribute (the composite text) is parsed by the FFI instantiate stage, once per
    instance of the program, not on every call; a program JAX loads from its persistent compilation
    cache carries the text, not a handle into the process that compiled it, so it is parsed again
    there and fills the same bytes."""
    plan = layerinit.plan(REGIONS_SPEC, dtype="fp32", seed=5)
    built = np.asarray(layerinit.build(REGIONS_SPEC, dtype="fp32", seed=5)["emb"])
    xla = ljax._xla()
    monkeypatch.setattr(ljax, "_TARGET", target)
    a = ljax._Array(name="emb", shape=(40, 24), dtype="fp32", param=plan.composite("emb").text)
    a.local = (40, 24)
    with jax.default_device(jax.devices("cpu")[0]):
        before = xla.params_parsed()
        compiled = jax.jit(lambda: ljax._fill(a, 5)).lower().compile()
        assert xla.params_parsed() == before + 1
        for _ in range(3):
            assert np.array_equal(bits(np.asarray(compiled())), bits(built))
        assert xla.params_parsed() == before + 1

        hits: list[str] = []
        listener = lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None  # noqa: E731
        jax.monitoring.register_event_listener(listener)
        options = {"jax_compilation_cache_dir": str(tmp_path), "jax_persistent_cache_min_compile_time_secs": 0,
                   "jax_persistent_cache_min_entry_size_bytes": 0}
        old = {option: getattr(jax.config, option) for option in options}
        try:
            for option, value in options.items():
                jax.config.update(option, value)
            fresh = lambda: ljax._fill(a, 5) + 0.0  # noqa: E731 (a program not compiled above)
            first = np.asarray(jax.jit(fresh)())
            jax.clear_caches()
            parsed = xla.params_parsed()
            again = np.asarray(jax.jit(fresh)())
            assert xla.params_parsed() == parsed + 1
        finally:
            jax.monitoring.unregister_event_listener(listener)
            for option, value in old.items():
                jax.config.update(option, value)
            from jax._src import compilation_cache
            compilation_cache.reset_cache()  # the cache it opened stays in use otherwise
        # A malformed text is refused when the program is made, before anything runs.
        bad = ljax._Array(name="emb", shape=(40, 24), dtype="fp32", param="[1]")
        bad.local = (40, 24)
        with pytest.raises(Exception, match="INVALID_ARGUMENT: layerinit: composite: ") as refused:
            jax.jit(lambda: ljax._fill(bad, 5)).lower().compile()
        assert xla.params_parsed() == parsed + 2, refused.value
    assert hits, "the second program did not come from the persistent cache"
    assert np.array_equal(bits(first), bits(built)) and np.array_equal(bits(again), bits(built))


@pytest.mark.parametrize("target", ["layerinit_fill", "layerinit_fill_grid"])
def test_the_handlers_write_a_leaf_whose_layer_axis_is_at_dimension_1(monkeypatch, target):
    """Flax linen's nn.scan(..., variable_axes={"params": 1}) (MaxText's param_scan_axis=1) keeps a kernel
    [out, L, in] whose [:, l, :] is layer l's tensor: the handlers (the host's, and the CUDA handler's
    path on the simulated grid) write each layer's tensor, its regions included, whole and in pieces
    that cut the layer axis, as the leaf of that layer made alone."""
    plan = layerinit.plan(REGIONS_SPEC, dtype="fp32", seed=5)
    built = layerinit.build(REGIONS_SPEC, dtype="fp32", seed=5)
    ljax._xla()
    monkeypatch.setattr(ljax, "_TARGET", target)
    leaf = plan._leaf("blocks.{0}.w", [4], [12, 4, 24], "fp32", dims=[1])
    assert leaf.stack_dims == [1] and '"dim":1' in leaf.text
    devices = jax.devices("cpu")
    with jax.default_device(devices[0]):
        alone = [np.asarray(a) for a in ljax._make(
            [ljax._Array(f"blocks.{layer}.w", (12, 24), "fp32", plan._leaf(f"blocks.{layer}.w", [], [12, 24], "fp32").text)
             for layer in range(4)], 5)]
        for layer in range(4):
            assert np.array_equal(bits(alone[layer]), bits(np.asarray(built[f"blocks.{layer}.w"]))), layer
        assert (alone[0][4] == 0.5).all() and not np.array_equal(alone[0], alone[1])  # a region; layers differ
        shardings = [None]
        if len(devices) >= 8:
            mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("x", "y"))
            shardings += [NamedSharding(mesh, s) for s in (P(None, "y"), P("x", "y", None), P(None, "x", "y"))]
        for sharding in shardings:
            got = np.asarray(ljax._make([ljax._Array("blocks.{0}.w", (12, 4, 24), "fp32", leaf.text, sharding)], 5)[0])
            for layer in range(4):
                assert np.array_equal(bits(got[:, layer, :]), bits(alone[layer])), (sharding, layer)
    if len(shardings) == 1:
        pytest.skip(f"jax has {len(devices)} CPU devices: the whole leaf was checked, its pieces were not")


def test_gpu_handler():
    gpus = [d for d in jax.devices() if d.platform == "gpu"] if jax.default_backend() == "gpu" else []
    if not gpus:
        pytest.skip("no GPU backend in jax: the CUDA handler runs where jax[cuda] sees a GPU")
    if not ljax._xla().has_cuda_handler:
        pytest.skip("layerinit._xla was built without CUDA (no GPU answered nvidia-smi at pip install)")
    tree = abstract()
    on_gpu = ljax.init(tree, seed=4, rules=RULES, dtype="bf16")
    cpu = jax.devices("cpu")[0]
    on_cpu = ljax.init(tree, seed=4, rules=RULES, dtype="bf16", sharding=jax.sharding.SingleDeviceSharding(cpu))
    for a, b in zip(arrays(on_gpu), arrays(on_cpu)):
        assert a.devices() == {gpus[0]} and np.array_equal(bits(a), bits(b))


def test_real_arrays_are_reinitialized():
    model = eqx.nn.Linear(4, 3, key=jax.random.key(0))
    again = ljax.init(model, seed=0, recipe="equinox")
    assert again.weight.shape == (3, 4) and not np.array_equal(np.asarray(again.weight), np.asarray(model.weight))
    assert np.array_equal(np.asarray(again.weight), np.asarray(ljax.init(model, seed=0, recipe="equinox").weight))


# ---- bad input: one ValueError naming the leaf, nothing built ----

@pytest.fixture
def nothing_built():
    xla = ljax._xla()
    xla.record_writes(True)
    yield
    writes = xla.take_writes()
    xla.record_writes(False)
    assert writes == []


class Odd(eqx.Module):
    lin: eqx.nn.Linear
    steps: jax.Array

    def __init__(self, dtype):
        self.lin = eqx.nn.Linear(2, 2, key=jax.random.key(0))
        self.steps = jnp.zeros((3,), dtype)


def test_a_complex_leaf_is_refused(nothing_built):
    tree = eqx.filter_eval_shape(Odd, jnp.complex64)
    with pytest.raises(ValueError, match=r"leaf 'steps' is complex64"):
        ljax.init(tree, rules={"steps": "constant(0)"})


def _cyclic():
    a = {"w": jax.ShapeDtypeStruct((2, 2), jnp.float32)}
    a["self"] = [a]
    return a


def _deep(depth):
    tree = {"w": jax.ShapeDtypeStruct((2, 2), jnp.float32)}
    for _ in range(depth):
        tree = {"a": tree}
    return tree


def _self_list():
    a = [jax.ShapeDtypeStruct((2, 2), jnp.float32)]
    a.append(a)
    return a


@pytest.mark.parametrize("make", [_cyclic, _self_list, lambda: _deep(10_000)], ids=["cyclic", "self-list", "10000-deep"])
@pytest.mark.parametrize("call", [ljax.init, ljax.spec_of], ids=["init", "spec_of"])
def test_a_tree_that_cannot_be_walked_is_a_value_error_naming_tree(nothing_built, make, call):
    # Was a SystemError from JAX's flattening over a RecursionError; on the dict that holds itself, JAX
    # killed the interpreter (exit 1).
    with pytest.raises(ValueError, match=r"^tree is cyclic or nested deeper than Python's recursion limit \(\d+\)"):
        call(make(), rules={"*": "normal(0, 1)"})


def test_a_deep_tree_and_a_shared_subtree_are_made():
    shared = {"w": jax.ShapeDtypeStruct((2, 2), jnp.float32)}
    tree = ljax.init({"deep": _deep(300), "x": shared, "y": shared}, rules={"*": "normal(0, 1)"})
    leaf = tree["deep"]
    for _ in range(300):
        leaf = leaf["a"]
    assert leaf["w"].shape == (2, 2) and tree["x"]["w"].shape == tree["y"]["w"].shape == (2, 2)
    assert not np.array_equal(np.asarray(tree["x"]["w"]), np.asarray(tree["y"]["w"]))  # two tensors by name


@pytest.mark.parametrize("rule", [None, "normal(0, 1)", "constant(0.5)", "linear_bias"])
def test_an_integer_leaf_without_an_integer_constant_is_refused(nothing_built, rule):
    tree = eqx.filter_eval_shape(Odd, jnp.int32)
    with pytest.raises(ValueError, match=r"leaf 'steps' is int32: .*constant"):
        ljax.init(tree, rules=None if rule is None else {"steps": rule})


def test_an_integer_leaf_is_a_rules_constant():
    model = ljax.init(eqx.filter_eval_shape(Odd, jnp.int32), rules={"steps": "constant(-3)"})
    assert model.steps.dtype == jnp.int32 and np.array_equal(np.asarray(model.steps), [-3, -3, -3])
    assert np.asarray(model.lin.weight).std() > 0  # the float leaves made as before


def test_a_leaf_without_a_role_is_refused(nothing_built):
    with pytest.raises(ValueError, match=r"recipe 'hf' cannot tell the fill of 4 parameter\(s\): no rule for: "
                                         r"blocks\.0\.gain \(role other\), blocks\.1\.gain"):
        ljax.init(abstract(), rules={"head.1.weight": "head_weight"}, recipe="hf")
    # The model's own init: Equinox's modules by their type, a raw parameter from a recording of the code
    with pytest.raises(ValueError, match=r"own init is not known for 1 leaves:\n  blocks\.gain \[4, 3\]: no recording"):
        ljax.init(abstract(), rules={"head.1.weight": "head_weight"})


def test_a_rule_that_matches_nothing(nothing_built):
    rules = dict(RULES, **{"*.nope": "normal(0, 1)"})
    with pytest.raises(ValueError, match=r"rule '\*\.nope' matches no leaf"):
        ljax.init(abstract(), rules=rules, strict=True)
    with pytest.warns(UserWarning, match=r"rule '\*\.nope' matches no leaf"):
        ljax.spec_of(abstract(), rules=rules)


def test_rule_globs_are_the_librarys():
    """rules= and sharding= globs match as overrides= and the CLI's --init-override do (the library's
    fnmatch): a backslash escapes the character after it, so `blocks\\.gain` is the name itself."""
    escaped = {k: v for k, v in RULES.items() if k != "*.gain"}
    escaped["blocks\\.gain"] = "uniform(-0.5, 0.5)"
    got = named(ljax.init(abstract(), seed=1, rules=escaped, strict=True))
    want = named(ljax.init(abstract(), seed=1, rules=RULES))
    assert got.keys() == want.keys() and all(np.array_equal(bits(got[k]), bits(want[k])) for k in got)


def test_bad_rules_and_recipes(nothing_built):
    with pytest.raises(ValueError, match=r"^rules\['\*\.gain'\] 'gaussian' is neither a tensor role \(valid: embedding, .*\) nor a fill: cannot be parsed"):
        ljax.init(abstract(), rules={"*.gain": "gaussian"})
    # The library's own message, under the argument's name: no prefix of the package's.
    with pytest.raises(layerinit.BadInputError, match=r"^rules\['\*\.gain'\]\['fill'\] 'normal\(0\)': fill 'normal' takes 2 numbers, got 1$") as e:
        ljax.init(abstract(), rules={"*.gain": {"fill": "normal(0)"}})
    assert (e.value.argument, e.value.value) == ("rules['*.gain']['fill']", "'normal(0)'")
    with pytest.raises(ValueError, match=r"recipe 'nope' is unknown \(valid: hf, torchtitan"):
        ljax.init(abstract(), rules=RULES, recipe="nope")
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        ljax.init(abstract(), rules=RULES, seed=-1)


def test_a_shape_its_module_does_not_store_is_refused(nothing_built):
    tree = eqx.filter_eval_shape(eqx.nn.Linear, 4, 3, key=jax.random.key(0))
    tree = eqx.tree_at(lambda m: m.weight, tree, jax.ShapeDtypeStruct((4, 3), jnp.float32))  # transposed by mistake
    with pytest.raises(ValueError, match=r"leaf 'weight' is \(4, 3\), but eqx.nn.Linear\(4, 3\) stores it as \(3, 4\)"):
        ljax.init(tree)


class Strided(NamedSharding):
    """A sharding whose pieces have a step: not boxes."""

    def devices_indices_map(self, shape):
        return {d: (slice(i, None, 2),) for i, d in enumerate(self.mesh.devices.flat)}


def test_a_sharding_whose_pieces_are_not_boxes(nothing_built):
    devices = jax.devices()
    if len(devices) < 2:
        pytest.skip("needs 2 devices")
    mesh = Mesh(np.array(devices[:2]), ("x",))
    square = eqx.filter_eval_shape(eqx.nn.Linear, 4, 4, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"'bias': the piece of .* is \(slice\(0, None, 2\),\), not a box"):
        ljax.init(square, sharding=lambda name: Strided(mesh, P("x")) if name == "bias" else None)
    tree = eqx.filter_eval_shape(eqx.nn.Linear, 4, 3, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"'weight': .*cannot split \(3, 4\)"):
        ljax.init(tree, sharding=NamedSharding(mesh, P("x")))
