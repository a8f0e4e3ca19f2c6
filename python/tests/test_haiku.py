"""DM-Haiku models: layerinit.jax.init of `jax.eval_shape(t.init, ...)` (no forward pass run) reads
Haiku's names, returns params (and state) that `t.apply` takes as they are, every leaf the tensor
`layerinit emit --spec` writes under its name; recipe="haiku" draws what Haiku's own `t.init` draws."""
import json

import numpy as np
import pytest

jax = pytest.importorskip("jax")
hk = pytest.importorskip("haiku")
scipy_stats = pytest.importorskip("scipy.stats")
import jax.numpy as jnp  # noqa: E402

import layerinit.jax as ljax  # noqa: E402
from test_jax_init import bits, emit  # noqa: E402

MHA_SCALE = 0.5  # the models' attention: hk.MultiHeadAttention(w_init=VarianceScaling(MHA_SCALE))
RECIPE = f"haiku:mha_w_init_scale={MHA_SCALE}"


class Block(hk.Module):
    def __init__(self, width, heads, name=None):
        super().__init__(name=name)
        self.width, self.heads = width, heads

    def __call__(self, x):
        h = hk.LayerNorm(-1, create_scale=True, create_offset=True)(x)
        attn = hk.MultiHeadAttention(self.heads, self.width // self.heads,
                                     w_init=hk.initializers.VarianceScaling(MHA_SCALE))
        x = x + attn(h, h, h)
        h = hk.RMSNorm(-1)(x)
        return x + hk.Linear(self.width)(jax.nn.gelu(hk.Linear(4 * self.width)(h)))


def transformer(stacked, width=16, heads=2, layers=3, vocab=64):
    def f(tokens):
        x = hk.Embed(vocab, width)(tokens)
        if stacked:
            x = hk.layer_stack(layers)(lambda x: Block(width, heads)(x))(x)
        else:
            for _ in range(layers):
                x = Block(width, heads)(x)
        x = hk.LayerNorm(-1, create_scale=True, create_offset=True)(x)
        return hk.Linear(vocab, name="head")(x)
    return hk.transform(f), jnp.zeros((2, 5), jnp.int32)


def mlp():
    return hk.transform(lambda x: hk.nets.MLP([32, 16, 4])(x)), jnp.ones((3, 8))


def conv():
    def f(x):
        x = jax.nn.relu(hk.Conv2D(6, 3)(x))
        x = hk.Conv1D(5, 2)(x[:, 0])
        return hk.BatchNorm(True, True, 0.9)(x, is_training=True)
    return hk.transform_with_state(f), jnp.ones((2, 7, 7, 3))


MODELS = {"mlp": mlp, "transformer": lambda: transformer(False), "stacked": lambda: transformer(True), "conv": conv}
# Where BatchNorm's running statistics start: Haiku's t.init stores the example batch's in them (from the
# forward pass, which layerinit does not run), so the model says.
STATE = {"*mean_ema.average": "constant(0)", "*var_ema.average": "constant(1)"}


def shapes(model):
    t, x = MODELS[model]()
    return t, x, jax.eval_shape(t.init, jax.random.key(0), x)


def leaves(tree):
    """{Haiku name "module/path.param": array} of a params dict, or of (params, state)."""
    out = {}
    for d in tree if isinstance(tree, tuple) else (tree,):
        out.update({f"{m}.{n}": a for m, ps in d.items() for n, a in ps.items()})
    return out


def apply(t, tree, x):
    if isinstance(tree, tuple):
        return t.apply(*tree, None, x)[0]
    return t.apply(tree, None, x)


@pytest.mark.parametrize("model", list(MODELS))
def test_every_leaf_is_the_emitted_tensor_and_apply_takes_the_tree(cli, tmp_path, model):
    t, x, tree = shapes(model)
    made = ljax.init(tree, seed=5, recipe=RECIPE, rules=STATE if model == "conv" else None)
    assert jax.tree_util.tree_structure(made) == jax.tree_util.tree_structure(tree)
    out = apply(t, made, x)
    assert np.isfinite(np.asarray(out)).all()
    spec = ljax.spec_of(tree, rules=STATE if model == "conv" else None)
    ref = emit(cli, tmp_path, spec, "--recipe", RECIPE, "--seed", "5", "--dtype", "fp32")
    compared = 0
    for name, a in leaves(made).items():
        a = np.asarray(a)
        if a.dtype.kind == "i":  # BatchNorm's moving-average counters: Haiku starts them at 0
            assert name.endswith("_ema.counter") and (a == 0).all(), name
            continue
        if name.startswith("__layer_stack_no_per_layer/"):
            module = name.split("/", 1)[1]
            for layer in range(a.shape[0]):
                slice_name = f"__layer_stack_no_per_layer.{layer}.{module}"
                stored = ref[slice_name].T if name.endswith(".w") else ref[slice_name]  # emit writes [out, in]
                assert np.array_equal(bits(a[layer]), bits(stored)), slice_name
                compared += 1
            continue
        stored = ref[name]
        if name.endswith(".w") and a.ndim == 2:
            stored = stored.T
        elif name.endswith(".w"):  # a conv kernel [..., in, out]: emit writes it as it is stored
            assert stored.shape == a.shape
        assert np.array_equal(bits(a), bits(stored)), name
        compared += 1
    assert compared == len(ref)


def test_the_stacked_slices_are_the_loop_models_tensors():
    """hk.layer_stack's slice l is its loop twin's block_l (block for l = 0) under the slice's name."""
    _, _, stacked = shapes("stacked")
    _, _, loop = shapes("transformer")
    twin = {}
    for module, params in loop.items():
        head, _, rest = module.partition("/")
        if head == "block" or head.startswith("block_"):
            layer = 0 if head == "block" else int(head[len("block_"):])
            module = f"__layer_stack_no_per_layer.{layer}.block/{rest}"
        twin[module] = params
    a, b = leaves(ljax.init(stacked, seed=9, recipe=RECIPE)), leaves(ljax.init(twin, seed=9, recipe=RECIPE))
    assert len(b) == len(a) + 2 * (len(a) - 5)  # 3 layers of the stacked leaves, 5 outside
    for name, x in a.items():
        if name.startswith("__layer_stack_no_per_layer/"):
            for layer in range(3):
                twin_name = f"__layer_stack_no_per_layer.{layer}." + name[len("__layer_stack_no_per_layer/"):]
                assert np.array_equal(np.asarray(x[layer]), np.asarray(b[twin_name])), twin_name
        else:
            assert np.array_equal(np.asarray(x), np.asarray(b[name])), name


def test_haikus_names_make_the_spec():
    spec = json.loads(ljax.spec_of(shapes("stacked")[2]).to_json())
    assert spec["layer"]["prefix"] == "__layer_stack_no_per_layer." and spec["layer"]["count"] == 3
    roles = {t["name"]: (t["role"], t["shape"], t["fan_in"]) for t in spec["layer"]["tensors"]}
    assert roles["block/linear_1.w"] == ("linear_weight", [64, 16], 0)   # w [in, out] held [out, in]
    assert roles["block/linear_1.b"] == ("linear_bias", [64], 16)       # a bias has its w's fans
    assert roles["block/multi_head_attention/linear.w"][0] == "output_weight"
    assert roles["block/multi_head_attention/query.w"][0] == "linear_weight"
    assert roles["block/layer_norm.offset"][0] == "norm_bias" and roles["block/rms_norm.scale"][0] == "norm_weight"
    post = {t["name"]: t["role"] for t in spec["post"]}
    assert post == {"embed.embeddings": "embedding", "head.b": "linear_bias", "head.w": "head_weight",
                    "layer_norm.offset": "norm_bias", "layer_norm.scale": "norm_weight"}
    conv_spec = json.loads(ljax.spec_of(shapes("conv")[2]).to_json())
    by = {t["name"]: t for t in conv_spec["pre"]}
    assert by["conv2_d.w"]["shape"] == [3, 3, 3, 6] and by["conv2_d.w"]["fan_in"] == 27  # Conv's prod(w[:-1])
    hidden, average = by["batch_norm/~/mean_ema.hidden"], by["batch_norm/~/mean_ema.average"]
    assert hidden["init"] == {"constant": {"value": 0.0}} and hidden["buffer"] and hidden["role"] == "other"
    assert "init" not in average and average["buffer"]  # what t.init puts there is the forward's


def ks_agrees(a, b, alpha):
    """Two-sample KS: True unless the samples differ at false-alarm rate alpha."""
    return scipy_stats.ks_2samp(np.ravel(a), np.ravel(b)).pvalue > alpha


def wide(model):
    """The models with enough elements per leaf for a KS test to tell a wrong std or cut."""
    if model == "transformer":
        return transformer(False, width=64, heads=4, layers=2, vocab=2048)
    if model == "mlp":
        return hk.transform(lambda x: hk.nets.MLP([256, 256, 64])(x)), jnp.ones((3, 128))
    t, _ = conv()
    return t, jnp.ones((2, 9, 9, 32))


@pytest.mark.parametrize("model", ["transformer", "mlp", "conv"])
def test_the_haiku_recipe_draws_what_haikus_init_draws(model):
    """Per leaf, layerinit's recipe="haiku" against Haiku's own t.init of the same model: constants
    equal (zeros, ones, BatchNorm's state), every random leaf one KS test at a false-alarm rate of 1e-4
    over the model's leaves (Bonferroni): a wrong std or cut anywhere fails it, as the control shows."""
    t, x = wide(model)
    tree = jax.eval_shape(t.init, jax.random.key(0), x)
    ours = leaves(ljax.init(tree, seed=1, recipe=RECIPE, rules=STATE if model == "conv" else None))
    theirs = leaves(t.init(jax.random.key(1), x))
    assert ours.keys() == theirs.keys()
    for name in [n for n in theirs if n.endswith("_ema.average")]:  # the example batch's statistics, from the forward
        assert np.array_equal(np.asarray(ours[name]), np.full(theirs[name].shape, name.startswith("batch_norm/~/var")))
        del ours[name], theirs[name]
    random = [n for n in theirs if np.ptp(np.asarray(theirs[n])) > 0]
    # embed, 2 x (query key value linear, 2 MLP linears), head; 3 linears; 2 conv kernels
    assert len(random) == {"transformer": 1 + 2 * 6 + 1, "mlp": 3, "conv": 2}[model]
    alpha = 1e-4 / len(random)
    for name, a in theirs.items():
        if name not in random:
            assert np.array_equal(np.asarray(ours[name]), np.asarray(a)), name  # zeros and ones
            assert ours[name].dtype == a.dtype, name
            continue
        assert ks_agrees(ours[name], a, alpha), name
    if model == "transformer":
        # The control: the same test tells a 10% wider std or an uncut normal from Haiku's draws.
        e = np.asarray(theirs["embed.embeddings"])  # [2048, 64]: TruncatedNormal(1), cut at 2 std
        assert not ks_agrees(np.asarray(ours["embed.embeddings"]) * 1.1, e, alpha)
        assert not ks_agrees(np.random.default_rng(0).normal(0, 1, e.size), e, alpha)


def test_multi_head_attention_needs_its_scale():
    """Haiku's MultiHeadAttention has no default w_init: the recipe is told it, or refuses."""
    _, _, tree = shapes("transformer")
    with pytest.raises(ValueError, match=r"recipe 'haiku' cannot tell the fill of 12 parameter\(s\): no rule for: "
                                         r"block/multi_head_attention/key\.w .*mha_w_init_scale"):
        ljax.init(tree, recipe="haiku")
    made = leaves(ljax.init(tree, recipe="haiku", rules={"*multi_head_attention*.w": "normal(0, 0.01)"}))
    assert abs(float(np.asarray(made["block_2/multi_head_attention/value.w"]).std()) - 0.01) < 0.002


def test_other_recipes_refuse_what_haikus_names_do_not_tell():
    _, _, tree = shapes("transformer")
    with pytest.raises(ValueError, match=r"recipe 'torchtitan' .*linear maps whose names do not say .*block/linear\.w.*"
                                         r"modules Haiku numbers as repeats .*block/multi_head_attention/linear\.w.*"
                                         r"or make the layers with hk\.layer_stack"):
        ljax.init(tree, recipe="torchtitan")
    # hf draws every map alike: nothing to tell.
    made = leaves(ljax.init(tree, recipe="hf", hyper={"initializer_range": 0.05}))
    assert abs(float(np.asarray(made["head.w"]).std()) - 0.05) < 0.01


def test_a_stack_is_read_from_its_module_or_told():
    t = hk.transform(lambda x: hk.layer_stack(4, name="layers")(lambda x: hk.Linear(6)(x))(x))
    x = jnp.ones((1, 6))
    tree = jax.eval_shape(t.init, jax.random.key(0), x)
    with pytest.raises(ValueError, match=r"parameter 'layers/linear\.w' is \[4, 6, 6\]: a Haiku w is .*stacked="):
        ljax.init(tree, recipe="haiku")
    made = ljax.init(tree, recipe="haiku", stacked="layers")
    assert made["layers/linear"]["w"].shape == (4, 6, 6) and np.isfinite(np.asarray(t.apply(made, None, x))).all()
    spec = json.loads(ljax.spec_of(tree, stacked="layers").to_json())
    assert spec["layer"]["prefix"] == "layers." and spec["layer"]["count"] == 4
    w = np.asarray(made["layers/linear"]["w"])
    assert not np.array_equal(w[0], w[1])  # each layer its own tensor
    # A stack's leaves are one list of layers: leading axes of two sizes are refused.
    odd = {"layers/a": {"w": jax.ShapeDtypeStruct((4, 6, 6), jnp.float32)},
           "layers/b": {"w": jax.ShapeDtypeStruct((3, 6, 6), jnp.float32)}}
    with pytest.raises(ValueError, match=r"stacked: the leaves under 'layers' have leading axes of sizes \[3, 4\]"):
        ljax.init(odd, recipe="haiku", stacked="layers")


def test_batch_norms_running_statistics_are_told():
    _, _, tree = shapes("conv")
    with pytest.raises(ValueError, match=r"no rule for: batch_norm/~/mean_ema\.average \(role other\), batch_norm/~/var_ema"
                                         r"\.average \(role other\) \(Haiku's t\.init stores the example input's statistics"):
        ljax.init(tree, recipe="haiku")


def test_state_counters():
    """BatchNorm's moving averages start at 0 (batch_norm.py: warmup 0); a bare ExponentialMovingAverage's
    counter starts at -warmup_length, which the tree does not say: a rule tells it."""
    def f(x):
        return hk.ExponentialMovingAverage(0.9, warmup_length=3, zero_debias=False)(hk.Linear(2)(x))
    t = hk.transform_with_state(f)
    x = jnp.ones((1, 2))
    tree = jax.eval_shape(t.init, jax.random.key(0), x)
    with pytest.raises(ValueError, match=r"leaf 'exponential_moving_average\.counter' is int32: .*constant"):
        ljax.init(tree, recipe="haiku")
    params, state = ljax.init(tree, recipe="haiku", rules={"*.counter": "constant(-3)", "*.average": "constant(0)"})
    ema = state["exponential_moving_average"]
    assert int(ema["counter"]) == -3 and not np.asarray(ema["hidden"]).any() and not np.asarray(ema["average"]).any()
    assert int(t.init(jax.random.key(0), x)[1]["exponential_moving_average"]["counter"]) == -3  # Haiku's own


def test_under_jit_equals_eager():
    _, _, tree = shapes("stacked")
    eager = leaves(ljax.init(tree, seed=2, recipe=RECIPE))
    jitted = leaves(jax.jit(lambda: ljax.init(tree, seed=2, recipe=RECIPE))())
    for name, a in eager.items():
        assert np.array_equal(np.asarray(a), np.asarray(jitted[name])), name


def test_donate_consumes_the_state_too():
    t, x = conv()
    params, state = t.init(jax.random.key(0), x)
    counter = state["batch_norm/~/mean_ema"]["counter"]
    new_params, new_state = ljax.init((params, state), seed=4, recipe="haiku", rules=STATE, donate=True)
    assert params["conv2_d"]["w"].is_deleted() and counter.is_deleted()  # nothing of the old tree is left
    assert int(new_state["batch_norm/~/mean_ema"]["counter"]) == 0 and new_params["conv2_d"]["w"].shape == (3, 3, 3, 6)


def test_a_multi_head_attention_under_its_users_name():
    """hk.MultiHeadAttention(name="attention") was filled as four plain Linears (1 / sqrt(fan_in)), where
    Haiku draws them with the w_init the model gives: its four Linears are its signature."""
    def f(x):
        return hk.MultiHeadAttention(4, 16, w_init=hk.initializers.VarianceScaling(MHA_SCALE), name="attention")(x, x, x)
    t = hk.transform(f)
    x = jnp.ones((2, 8, 64))
    tree = jax.eval_shape(t.init, jax.random.key(0), x)
    with pytest.raises(ValueError, match=r"no rule for: attention/key\.w .*mha_w_init_scale"):
        ljax.init(tree, recipe="haiku")
    made = ljax.init(tree, recipe=RECIPE)
    for name in ("query", "key", "value", "linear"):
        std = float(np.asarray(made[f"attention/{name}"]["w"]).std())  # [64, 64]
        assert abs(std - np.sqrt(MHA_SCALE / 64)) < 0.004, (name, std)  # VarianceScaling's, not 0.88 / 8
    roles = {t["name"]: t["role"] for t in json.loads(ljax.spec_of(tree).to_json())["pre"]}
    assert roles["attention/linear.w"] == "output_weight" and roles["attention/query.w"] == "linear_weight"
