"""The plan's record (plan/plan.hpp plan_record): every face of layerinit gives the same bytes for the
same model and options. The golden record is tests/plan_records/llama_tiny_hf_fp32.txt, which C++
(tests/test_plan.cpp) and the CLI's `plan --record` (tests/test_cli_reports.cpp) give too; here
Python's Plan.record(), layerinit.torch.plan of transformers' own model, and layerinit.jax.plan of a
JAX tree of the same tensors. A second model, an MLP, is made in torch and in Equinox: their records
are one, and `plan --record --spec` of the JAX face's spec_of gives it too."""
import json
import subprocess
from collections import OrderedDict
from pathlib import Path

import pytest

import layerinit
from hf_configs import TINY_DIR, config

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = (ROOT / "tests" / "plan_records" / "llama_tiny_hf_fp32.txt").read_text()
LLAMA = TINY_DIR / "llama.json"


def test_python_face_is_the_golden_record():
    assert layerinit.plan(layerinit.hf_spec(str(LLAMA)), recipe="hf", dtype="fp32").record() == GOLDEN
    # A config.json dict is the same model; so is the spec under another name (the record has no name).
    d = json.loads(LLAMA.read_text())
    assert layerinit.plan(layerinit.hf_spec(d), recipe="hf", dtype="fp32").record() == GOLDEN
    # Another seed or dtype is another plan.
    assert layerinit.plan(layerinit.hf_spec(d), recipe="hf", dtype="fp32", seed=1).record() != GOLDEN
    assert layerinit.plan(layerinit.hf_spec(d), recipe="hf", dtype="bf16").record() != GOLDEN


def test_torch_face_is_the_golden_record():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config("llama"))
    assert layerinit.torch.plan(model, recipe="hf").record() == GOLDEN
    # The model's own init, recorded from transformers' _init_weights, is the hf recipe's plan.
    assert layerinit.torch.plan(model).record() == GOLDEN
    assert all(p.is_meta for p in model.parameters())  # nothing materialized or written
    with pytest.raises(layerinit.BadInputError) as e:
        layerinit.torch.plan(model, dtype=torch.int8)
    assert (e.value.argument, e.value.value) == ("dtype", "torch.int8")


def _hf_tree():
    """The tiny Llama's tensors as a JAX pytree of shapes, under transformers' names (dicts and a list of
    layers), with the rules that say their roles."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    c = json.loads(LLAMA.read_text())
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    s = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    # OrderedDicts: JAX flattens a dict in sorted key order, an OrderedDict in its own, transformers' order.
    o = lambda **kw: OrderedDict(kw)  # noqa: E731
    w = lambda *shape: o(weight=s(*shape))  # noqa: E731
    layer = o(self_attn=o(q_proj=w(d, d), k_proj=w(kv, d), v_proj=w(kv, d), o_proj=w(d, d)),
              mlp=o(gate_proj=w(f, d), up_proj=w(f, d), down_proj=w(d, f)),
              input_layernorm=w(d), post_attention_layernorm=w(d))
    tree = o(model=o(embed_tokens=w(v, d), layers=[layer] * c["num_hidden_layers"], norm=w(d)), lm_head=w(v, d))
    rules = {"*_proj.weight": {"role": "linear_weight", "orientation": "out-in"},
             "lm_head.weight": {"role": "output_weight", "orientation": "out-in"},
             "*embed_tokens.weight": "embedding", "*norm.weight": "norm_weight"}
    return tree, rules


def test_jax_face_is_the_golden_record():
    tree, rules = _hf_tree()
    p = layerinit.jax.plan(tree, rules=rules, recipe="hf", hyper={"initializer_range": 0.02})
    assert p.record() == GOLDEN


def test_torch_and_jax_faces_agree_on_an_mlp(cli, tmp_path):
    torch = pytest.importorskip("torch")
    eqx = pytest.importorskip("equinox")
    jax = pytest.importorskip("jax")

    tree = eqx.filter_eval_shape(eqx.nn.MLP, 48, 24, 96, 2, key=jax.random.key(0))
    module = torch.nn.Module()  # under the names the Equinox MLP's leaves have: layers.0.weight, ...
    module.layers = torch.nn.ModuleList([torch.nn.Linear(48, 96), torch.nn.Linear(96, 96), torch.nn.Linear(96, 24)])
    for recipe in ("hf", "equinox"):
        jax_record = layerinit.jax.plan(tree, recipe=recipe).record()
        assert layerinit.torch.plan(module, recipe=recipe).record() == jax_record, recipe
        spec = tmp_path / f"{recipe}.json"
        spec.write_text(layerinit.jax.spec_of(tree).to_json())
        out = subprocess.run([cli, "plan", "--spec", str(spec), "--recipe", recipe, "--dtype", "fp32", "--record"],
                             capture_output=True, text=True, check=True).stdout
        assert out == jax_record, recipe


def test_jax_plan_refuses_what_has_no_one_plan():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    rules = {"*": "normal(0, 0.02)"}
    mixed = {"a": jax.ShapeDtypeStruct((4, 4), jnp.float32), "b": jax.ShapeDtypeStruct((4,), jnp.bfloat16)}
    with pytest.raises(layerinit.BadInputError) as e:
        layerinit.jax.plan(mixed, rules=rules)
    assert (e.value.argument, e.value.value) == ("dtype", "None") and "bf16, fp32" in e.value.problem
    # A dtype named is every leaf's: then there is one plan.
    assert "a\t[4,4]\t[4,4]\tbf16\tnormal(0,0.02)\t-\t" in layerinit.jax.plan(mixed, rules=rules, dtype="bf16").record()
    with pytest.raises(layerinit.BadInputError) as e:
        layerinit.jax.plan({"n": 3})
    assert str(e.value) == "tree has no float array leaf"
