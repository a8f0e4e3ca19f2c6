"""MaxText 0.2.5's own tiny llama2 decoder as a test client (python/tests/maxtext_models.py builds it): its init
traced abstractly gives nn.LogicallyPartitioned boxes with the layer axis where param_scan_axis says, its init
run under jax.jit gives the initializer statistics its sources write (maxtext_models.py's docstring), and those
parameters, boxed or unboxed, run a forward pass to finite logits."""
import math

import pytest

pytest.importorskip("maxtext", reason="maxtext is not installed (scripts/python-test-env installs maxtext 0.2.5 "
                                      "without its training dependencies, on Python >= 3.12 with jax >= 0.11.1)")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import linen as nn  # noqa: E402

import maxtext_models as mm  # noqa: E402

# MaxText 0.2.5 and qwix still call what flax 0.12.12 deprecates (Variable.value, sharding=, Rngs.fork(split=),
# Module.iter_modules): hundreds of DeprecationWarnings per init that say nothing about layerinit.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CASES = [(True, 1), (True, 0), (False, 1)]  # (scan_layers, param_scan_axis)
LAYERS = mm.TINY["base_num_decoder_layers"]


@pytest.fixture(scope="module")
def built():
    """(scan_layers, param_scan_axis) -> (config, model), made once each."""
    cache = {}

    def get(scan, axis):
        if (scan, axis) not in cache:
            cfg = mm.config(scan, axis)
            cache[(scan, axis)] = (cfg, mm.model(cfg))
        return cache[(scan, axis)]

    return get


def kernel(params, layer, path):
    """A layer parameter of a params tree: the stacked one under "layers", or layer `layer`'s without scan."""
    node = params["params"]["decoder"]
    node = node["layers"] if "layers" in node else node[f"layers_{layer}"]
    for k in path:
        node = node[k]
    return node


@pytest.mark.parametrize("scan,axis", CASES)
def test_abstract_init_is_boxed_with_the_layer_axis_at_param_scan_axis(built, scan, axis):
    cfg, model = built(scan, axis)
    fn, args = mm.init_fn(model, cfg)
    boxed = jax.eval_shape(fn, *args)
    flat = jax.tree_util.tree_leaves(boxed, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
    assert flat and all(isinstance(x, nn.LogicallyPartitioned) for x in flat)
    wi = kernel(boxed, 0, ("mlp", "wi_0", "kernel"))
    query = kernel(boxed, 0, ("self_attention", "query", "kernel"))
    norm = kernel(boxed, 0, ("pre_self_attention_layer_norm", "scale"))
    if scan:
        assert wi.value.shape[axis] == LAYERS and wi.names[axis] == "layers"
        assert query.value.shape == tuple([64, 4, 16][:axis] + [LAYERS] + [64, 4, 16][axis:])
        assert norm.value.shape == ((64, LAYERS) if axis == 1 else (LAYERS, 64))
    else:
        assert wi.value.shape == (64, 128) and wi.names == ("embed", "mlp")
        assert query.value.shape == (64, 4, 16)
        assert sorted(k for k in boxed["params"]["decoder"] if k.startswith("layers")) == ["layers_0", "layers_1",
                                                                                           "layers_2"]
    unboxed = mm.unbox(boxed)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree_util.tree_leaves(unboxed))
    assert kernel(unboxed, 0, ("mlp", "wi_0", "kernel")).shape == wi.value.shape
    # The same init as a jaxpr (what a caller reading the init's own ops traces).
    assert len(jax.make_jaxpr(fn)(*args).eqns) > 0


@pytest.fixture(scope="module")
def initialized(built):
    """(scan, axis) -> (model, real params from jax.jit(init)), made once each."""
    cache = {}

    def get(scan, axis):
        if (scan, axis) not in cache:
            cfg, model = built(scan, axis)
            fn, args = mm.init_fn(model, cfg)
            cache[(scan, axis)] = (model, jax.jit(fn)(*args))
        return cache[(scan, axis)]

    return get


@pytest.mark.parametrize("scan,axis", CASES)
def test_jit_init_runs_the_forward_pass_boxed_and_unboxed(initialized, scan, axis):
    model, params = initialized(scan, axis)
    cfg = model.kwargs["config"]
    for p in (params, mm.unbox(params)):
        logits = mm.forward(model, p)
        assert logits.shape == (cfg.micro_batch_size_to_train_on, cfg.max_target_length, cfg.vocab_size)
        assert bool(jnp.isfinite(logits).all())


def test_the_initializers_maxtext_sources_write(initialized):
    """The docstring's initializer facts, read back from a real init: each kernel's std is sqrt(1 / fan_in) (the
    query's divided by sqrt(head_dim)), the embedding's 1, the norms are ones. Fixed key; the smallest kernel
    (key, value) has 6,144 values, so its sample std is within about 1.8% (2 sigma) of the true one: 5% is far
    outside."""
    _, params = initialized(True, 1)
    p = mm.unbox(params)["params"]
    layers = p["decoder"]["layers"]
    expected = {
        ("self_attention", "query", "kernel"): 1 / math.sqrt(64) / math.sqrt(16),
        ("self_attention", "key", "kernel"): 1 / math.sqrt(64),
        ("self_attention", "value", "kernel"): 1 / math.sqrt(64),
        ("self_attention", "out", "kernel"): 1 / math.sqrt(4 * 16),
        ("mlp", "wi_0", "kernel"): 1 / math.sqrt(64),
        ("mlp", "wi_1", "kernel"): 1 / math.sqrt(64),
        ("mlp", "wo", "kernel"): 1 / math.sqrt(128),
    }
    for path, std in expected.items():
        x = layers
        for k in path:
            x = x[k]
        assert abs(float(jnp.std(x)) / std - 1) < 0.05, (path, float(jnp.std(x)), std)
    assert abs(float(jnp.std(p["decoder"]["logits_dense"]["kernel"])) * math.sqrt(64) - 1) < 0.05
    assert abs(float(jnp.std(p["token_embedder"]["embedding"])) - 1) < 0.05
    for norm in (layers["pre_self_attention_layer_norm"]["scale"], layers["post_self_attention_layer_norm"]["scale"],
                 p["decoder"]["decoder_norm"]["scale"]):
        assert bool((norm == 1).all())
    # truncated_normal (the MLP) stays within 2 of its pre-correction std; normal (attention) does not.
    assert float(jnp.abs(layers["mlp"]["wo"]["kernel"]).max()) <= 2 / math.sqrt(128) / 0.87962566103423978 + 1e-6
    assert float(jnp.abs(layers["self_attention"]["key"]["kernel"]).max()) > 2 / math.sqrt(64) / 0.87962566103423978


# ---------------------------------------------------------------------------------------------------
# layerinit.jax's own init of MaxText's model: every leaf as MaxText's initializers draw it.

@pytest.mark.parametrize("boxed", [True, False])
@pytest.mark.parametrize("scan,axis", CASES)
def test_layerinit_makes_every_leaf_as_maxtexts_own_init(built, initialized, scan, axis, boxed):
    """layerinit.jax.init of the recorded abstract tree, with no rules and no recipe: each random leaf has
    the distribution of the leaf jax.jit(init) makes (two-sample KS, 1e-4 false alarms over all leaves), the
    norm scales are exactly ones, the layer axis is where param_scan_axis put it, and the forward runs."""
    import layerinit.jax as ljax
    from test_jax_own_init import agree

    cfg, model = built(scan, axis)
    fn, args = mm.init_fn(model, cfg)
    abstract = ljax.eval_shape(fn, *args)
    if not boxed:
        abstract = mm.unbox(abstract)
    made = ljax.init(abstract, seed=1)
    _, own = initialized(scan, axis)
    assert agree(own, made) == []
    assert isinstance(kernel(made, 0, ("mlp", "wi_0", "kernel")), nn.LogicallyPartitioned) == boxed
    wi = mm.unbox(made) if boxed else made
    assert kernel(wi, 0, ("mlp", "wi_0", "kernel")).shape == kernel(mm.unbox(own), 0, ("mlp", "wi_0", "kernel")).shape
    logits = mm.forward(model, made)
    assert logits.shape == (*mm.inputs(cfg)[0].shape, cfg.vocab_size) and bool(jnp.isfinite(logits).all())


def test_the_scanned_layers_are_the_layers_at_either_axis(built):
    """Slice l of a leaf stacked at param_scan_axis 1 holds the values of slice l at axis 0: each layer's
    tensor is one name (params.decoder.layers.{l}....), wherever the transform put the layer axis."""
    import layerinit.jax as ljax

    made = {}
    for axis in (0, 1):
        cfg, model = built(True, axis)
        fn, args = mm.init_fn(model, cfg)
        made[axis] = mm.unbox(ljax.init(mm.unbox(ljax.eval_shape(fn, *args)), seed=4))
    for path in (("mlp", "wo", "kernel"), ("self_attention", "query", "kernel")):
        at0, at1 = kernel(made[0], 0, path), kernel(made[1], 0, path)
        for l in range(LAYERS):
            assert jnp.array_equal(at1[:, l], at0[l]), (path, l)
