"""One description of a model, one set of rules (init/describe.hpp): the roles, layers, ties and
orientation both adapters used to infer on their own are decided by the library, and where a recipe
needs what the description cannot tell, both adapters refuse alike (issue 26)."""
import json
import math

import numpy as np
import pytest
import torch

import layerinit
import layerinit.torch as lt

V, D, T = 256, 64, 32


class TinyGPT(torch.nn.Module):
    """nanoGPT's layout (model.py): wte, wpe, blocks of c_attn/c_proj and c_fc/c_proj, ln_f, and a head
    tied to the embedding by `transformer.wte.weight = lm_head.weight`."""

    def __init__(self, layers=2):
        super().__init__()
        block = lambda: torch.nn.ModuleDict(dict(  # noqa: E731
            ln_1=torch.nn.LayerNorm(D), attn=torch.nn.ModuleDict(dict(c_attn=torch.nn.Linear(D, 3 * D),
                                                                        c_proj=torch.nn.Linear(D, D))),
            ln_2=torch.nn.LayerNorm(D), mlp=torch.nn.ModuleDict(dict(c_fc=torch.nn.Linear(D, 4 * D),
                                                                      c_proj=torch.nn.Linear(4 * D, D)))))
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(V, D), wpe=torch.nn.Embedding(T, D),
            h=torch.nn.ModuleList([block() for _ in range(layers)]), ln_f=torch.nn.LayerNorm(D)))
        self.lm_head = torch.nn.Linear(D, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
        for b in t.h:
            q, k, v = b.attn.c_attn(b.ln_1(x)).split(D, dim=2)
            x = x + b.attn.c_proj(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
            x = x + b.mlp.c_proj(torch.nn.functional.gelu(b.mlp.c_fc(b.ln_2(x))))
        return self.lm_head(t.ln_f(x))


def first_loss(model):
    idx = torch.randint(0, V, (8, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(idx)
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), idx[:, 1:].reshape(-1)).item()


@pytest.mark.parametrize("recipe", layerinit.recipe_names())
def test_a_tied_gpt_starts_near_ln_vocab_under_every_recipe(recipe):
    """The tied embedding/head got the embedding's N(0, 1) under pytorch-default, torchtitan and
    olmo-llama (first loss 85-90 where ln V is 6.9); a tie is one tensor with the head's rule."""
    m = TinyGPT()
    lt.init_(m, recipe=recipe, seed=1)
    assert m.transformer.wte.weight is m.lm_head.weight
    loss = first_loss(m)
    # Haiku ties by reusing Embed's matrix, TruncatedNormal(1) as Haiku makes it: its own models start there.
    assert abs(loss - math.log(V)) < 1.5 or recipe == "haiku", (recipe, loss)
    spec = lt.module_spec(m)
    assert spec["hyper"]["tie_word_embeddings"] and spec["hyper"]["hidden_size"] == D
    names = [t["name"] for t in spec["pre"] + spec["post"]]
    assert "transformer.wte.weight" in names and "lm_head.weight" not in names
    # The rule is the head's (Flax's and Haiku's tied models have no head: the embedding's): the fill
    # equals that of an untied head of the same shape.
    role = "embedding" if recipe in ("flax", "haiku") else "head_weight"
    head = {"name": "h", "shape": [V, D], "role": role, "fan_in": D, "fan_out": V}
    untied = layerinit.plan({"name": "u", "hyper": {"hidden_size": D}, "pre": [head]}, recipe=recipe, dtype="fp32")
    tied = layerinit.plan(spec, recipe=recipe, dtype="fp32")
    assert tied.fill_of("transformer.wte.weight") == untied.fill_of("h")


def test_roles_layers_and_refusals_come_from_one_set_of_rules():
    """The same description gives the same spec whichever adapter collected it."""
    desc = {"name": "m", "parameters": [
        {"name": "tok.weight", "shape": [V, D], "module": "embedding"},
        {"name": "layers.0.wo.weight", "shape": [D, D], "module": "linear", "storage": "out-in"},
        {"name": "layers.1.wo.weight", "shape": [D, D], "module": "linear", "storage": "out-in"},
        {"name": "layers.0.mix.kernel", "shape": [D, 2 * D]},  # a Flax kernel: [in, out]
        {"name": "layers.1.mix.kernel", "shape": [D, 2 * D]},
        {"name": "output.weight", "shape": [V, D], "module": "linear"},
    ]}
    spec, params = layerinit._describe(desc)
    by = {p.name: p for p in params}
    assert by["layers.0.wo.weight"].role == "output_weight" and by["output.weight"].role == "head_weight"
    assert by["layers.0.mix.kernel"].logical == [2 * D, D] and by["layers.0.mix.kernel"].stored_in_out
    assert not by["layers.0.mix.kernel"].role_known and by["layers.1.wo.weight"].layer == 1
    assert spec.num_layers == 2
    with pytest.raises(ValueError, match=r"recipe 'torchtitan' cannot tell the fill of 2 parameter\(s\): linear maps "
                                         r"whose names do not say .*: layers.0.mix.kernel, layers.1.mix.kernel"):
        layerinit._describe(desc, recipe="torchtitan")
    layerinit._describe(desc, recipe="flax")  # every map the same rule there: nothing to tell
    # An override tells it.
    layerinit._describe(desc, recipe="torchtitan", overrides={"*.mix.kernel": "normal(0, 0.02)"})


def test_regions_pass_through_as_stored_and_come_out_logical():
    """A description's regions are in the parameter's stored coordinates: the library transposes them
    with a kernel stored [in, out], and the plan's fills hold them (module_spec's JSON too)."""
    zero_row = {"offset": [3, 0], "shape": [1, D], "init": {"constant": {"value": 0}}}
    column = {"offset": [0, 1], "shape": [D, 1], "init": {"constant": {"value": 2}}}  # of the [in, out] kernel
    desc = {"name": "m", "parameters": [
        {"name": "tok.weight", "shape": [V, D], "module": "embedding", "regions": [zero_row]},
        {"name": "mix.kernel", "shape": [D, 2 * D], "regions": [column]},
    ]}
    spec, _ = layerinit._describe(desc)
    tensors = {t["name"]: t for t in json.loads(spec.to_json())["pre"]}
    assert tensors["tok.weight"]["regions"] == [zero_row]
    assert tensors["mix.kernel"]["regions"] == [{"offset": [1, 0], "shape": [1, D], "init": {"constant": {"value": 2.0}}}]
    built = layerinit.build(spec, dtype="fp32")
    tok = np.asarray(built["tok.weight"])
    assert not tok[3].any() and tok[2].all()
    assert (np.asarray(built["mix.kernel"])[1] == 2).all()  # row 1 of [out, in]: column 1 of the kernel
    with pytest.raises(ValueError, match=r"parameters\[0\]\.regions\[0\]: at \[256, 0\] of \[1, 64\] lies outside "
                                         r"\[256, 64\]"):
        layerinit._describe({"parameters": [{"name": "t", "shape": [V, D], "regions": [dict(zero_row, offset=[V, 0])]}]})


def test_bad_descriptions_are_refused():
    with pytest.raises(ValueError, match=r"parameter 'b' is tied to 'c', which is not an earlier parameter"):
        layerinit._describe({"parameters": [{"name": "b", "shape": [2], "tied_to": "c"}]})
    with pytest.raises(ValueError, match=r"parameters\[0\].storage: applies to a 2-D weight"):
        layerinit._describe({"parameters": [{"name": "b", "shape": [2], "storage": "in-out"}]})
    with pytest.raises(ValueError, match=r"parameters\[0\].module: module kind 'conv' is unknown"):
        layerinit._describe({"parameters": [{"name": "b", "shape": [2], "module": "conv"}]})
    with pytest.raises(ValueError, match=r"share one storage but not a role"):
        layerinit._describe({"parameters": [{"name": "a.weight", "shape": [4], "module": "norm"},
                                            {"name": "b.bias", "shape": [4], "module": "linear", "tied_to": "a.weight"}]})


# ---- JAX: the same rules ----

jax = pytest.importorskip("jax")
eqx = pytest.importorskip("equinox")
import jax.numpy as jnp  # noqa: E402

import layerinit.jax as ljax  # noqa: E402


class EqxBlock(eqx.Module):
    wq: eqx.nn.Linear
    wo: eqx.nn.Linear
    w1: eqx.nn.Linear
    w2: eqx.nn.Linear

    def __init__(self, key, extra=False):
        k = jax.random.split(key, 4)
        self.wq = eqx.nn.Linear(D, D, use_bias=False, key=k[0])
        self.wo = eqx.nn.Linear(D, D, use_bias=False, key=k[1])
        self.w1 = eqx.nn.Linear(D, 2 * D, use_bias=False, key=k[2])
        self.w2 = eqx.nn.Linear(2 * D, D, use_bias=False, key=k[3])


class EqxTitan(eqx.Module):
    tok: eqx.nn.Embedding
    layers: list
    output: eqx.nn.Linear

    def __init__(self, key, proj=False):
        k = jax.random.split(key, 6)
        self.tok = eqx.nn.Embedding(V, D, key=k[0])
        self.layers = [EqxBlock(k[1 + i]) for i in range(4)]
        self.output = eqx.nn.Linear(D, V, use_bias=False, key=k[5]) if not proj else eqx.nn.Linear(D, V, key=k[5])


def test_jax_output_projections_and_head_follow_the_recipe():
    """layerinit.jax.init(recipe="torchtitan") of an Equinox model with wo, w2 and output Linears and no
    rules gave every output projection 0.02 and the head 0.02; torchtitan's depth init gives
    0.02 / sqrt(2 (l + 1)) and the head D^-0.5, as layerinit.torch.init_ does."""
    tree = eqx.filter_eval_shape(EqxTitan, jax.random.key(0))
    p = layerinit.plan(ljax.spec_of(tree), recipe="torchtitan", dtype="fp32")
    for layer in range(4):
        depth = layerinit.Fill.parse(f"trunc_normal(0, {0.02 / math.sqrt(2 * (layer + 1))!r}, -2, 2)")
        assert p.fill_of(f"layers.{layer}.wo.weight") == depth
        assert p.fill_of(f"layers.{layer}.w2.weight") == depth
        assert p.fill_of(f"layers.{layer}.wq.weight") == layerinit.Fill.parse("trunc_normal(0, 0.02, -2, 2)")
    assert p.fill_of("output.weight") == layerinit.Fill.parse(f"trunc_normal_std(0, {D ** -0.5!r}, -3, 3)")
    model = ljax.init(tree, recipe="torchtitan", seed=3)
    wo = [np.asarray(b.wo.weight) for b in model.layers]
    assert wo[3].std() < 0.6 * wo[0].std()


def test_jax_refuses_a_map_whose_role_the_recipe_needs():
    class Proj(eqx.Module):
        emb: eqx.nn.Embedding
        proj: eqx.nn.Linear

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.emb = eqx.nn.Embedding(V, D, key=k1)
            self.proj = eqx.nn.Linear(D, D, key=k2)

    tree = eqx.filter_eval_shape(Proj, jax.random.key(0))
    with pytest.raises(ValueError, match=r"recipe 'torchtitan' cannot tell the fill of 1 parameter\(s\): linear maps "
                                         r"whose names do not say input, output projection, head or router: proj.weight"):
        ljax.init(tree, recipe="torchtitan")
    ljax.init(tree, recipe="torchtitan", rules={"proj.weight": "output_weight"})
    ljax.init(tree, recipe="equinox")  # every map the same rule there


def test_a_flax_linen_kernel_is_in_out():
    """A linen Dense kernel ([in, out]) given a role without an orientation took its fan-in from the
    out axis (std 2x or 8x off). Flax stores every kernel [in, out]: without rules too."""
    linen = pytest.importorskip("flax.linen")

    class Mlp(linen.Module):
        @linen.compact
        def __call__(self, x):
            x = linen.Conv(4, (3, 3))(x)
            return linen.Dense(2)(linen.Dense(64)(x.reshape(x.shape[0], -1)))

    tree = jax.eval_shape(Mlp().init, jax.random.key(0), jnp.ones((1, 4, 4, 1)))
    by_rule = ljax.spec_of(tree, rules={"*.kernel": "linear_weight", "*.bias": "linear_bias"})
    plain = ljax.spec_of(tree)
    for spec in (by_rule, plain):
        p = layerinit.plan(spec, recipe="flax", dtype="fp32")
        # linen names the Dense(2) Dense_0: it is made before the Dense(64) of its argument.
        assert p.logical_shape("params.Dense_0.kernel") == [2, 64]  # [out, in] of a [64 in, 2 out] kernel
        assert p.logical_shape("params.Dense_1.kernel") == [64, 64]
        for name, fan_in in (("params.Dense_0.kernel", 64), ("params.Conv_0.kernel", 9)):
            want = layerinit.Fill.parse(f"trunc_normal_std(0, {math.sqrt(1 / fan_in) / 0.87962566103423978!r}, -2, 2)")
            assert p.fill_of(name) == want, name
    a = ljax.init(tree, recipe="flax", seed=2, rules={"*.kernel": "linear_weight", "*.bias": "linear_bias"})
    b = ljax.init(tree, recipe="flax", seed=2)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    k = np.asarray(b["params"]["Dense_0"]["kernel"])
    assert k.shape == (64, 2) and abs(k.std() - math.sqrt(1 / 64)) < 0.03
