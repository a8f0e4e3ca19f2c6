"""Hugging Face configs in Python: layerinit.hf_spec passes a config through to the C++ reader (no
mapping of its own), and layerinit.torch.init_ on every family's tiny model, on the meta device,
equals `layerinit emit --hf-config` of the same config.json, bitwise."""
import json
import re
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import layerinit  # noqa: E402
import layerinit.torch as lt  # noqa: E402
from conftest import run_cli  # noqa: E402
from hf_configs import TINY_DIR, config, config_dict, families  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# A fused transformers 5 expert tensor from a checkpoint's per-expert ones: module, gate, up, down.
EXPERTS = [("block_sparse_moe", "w1", "w3", "w2"), ("mlp", "gate_proj", "up_proj", "down_proj")]


@pytest.fixture(scope="session")
def emitted_hf(cli, tmp_path_factory):
    """emitted_hf(family, *flags) -> {name: tensor} of `layerinit emit --hf-config tiny/<family>.json`."""
    from safetensors.torch import load_file

    cache = {}

    def get(family, *flags):
        key = (family, *flags)
        if key not in cache:
            out = tmp_path_factory.mktemp("emit") / family
            run_cli(cli, "emit", "--hf-config", str(TINY_DIR / f"{family}.json"), "--backend", "cpu", "--format",
                    "safetensors", "-o", str(out), *flags)
            assert (out / "config.json").read_bytes() == (TINY_DIR / f"{family}.json").read_bytes()
            cache[key] = load_file(str(out / "model.safetensors"))
        return cache[key]

    return get


def reference(ref, name):
    """The file's tensor for model key `name` (fused experts stacked from the per-expert ones), or None."""
    if name in ref:
        return ref[name]
    if name.replace(".mlp.", ".block_sparse_moe.") in ref:
        return ref[name.replace(".mlp.", ".block_sparse_moe.")]
    m = re.match(r"^(.*)\.mlp\.experts\.(gate_up_proj|down_proj)$", name)
    if not m:
        return None
    base, kind = m.groups()
    for moe, gate, up, down in EXPERTS:
        E = sum(1 for k in ref if re.match(rf"^{re.escape(base)}\.{moe}\.experts\.\d+\.{down}\.weight$", k))
        if E == 0:
            continue
        e = lambda i, w: ref[f"{base}.{moe}.experts.{i}.{w}.weight"]  # noqa: E731
        if kind == "down_proj":
            return torch.stack([e(i, down) for i in range(E)])
        return torch.stack([torch.cat([e(i, gate), e(i, up)]) for i in range(E)])
    return None


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


@pytest.mark.parametrize("family", families())
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_every_family_meta_model_equals_emit(family, dtype, emitted_hf):
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config(family)).to(DTYPES[dtype])
    lt.init_(model, seed=9)  # the spec comes from model.config
    ref = emitted_hf(family, "--seed", "9", "--dtype", dtype)
    seen = 0
    for k, v in model.state_dict().items():
        if k == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        want = reference(ref, k)
        assert want is not None, f"{family}: {k} is not in the emitted checkpoint"
        want = want.to(v.dtype)  # fp32 buffers (a router's correction bias) of a bf16 model
        assert v.shape == want.shape and torch.equal(bits(v), bits(want)), f"{family}: {k}"
        seen += 1
    assert seen > 0
    # Buffers outside the checkpoint (rotary inv_freq, Gemma's embed_scale) as the model's own code makes them.
    cpu = transformers.AutoModelForCausalLM.from_config(config(family)).to(DTYPES[dtype])
    state = model.state_dict()
    for k, b in cpu.named_buffers():
        if k not in state:
            assert torch.equal(dict(model.named_buffers())[k], b), f"{family}: buffer {k}"


def zero_rows(w):
    """The rows of a 2-D tensor whose every element is zero."""
    return torch.nonzero((w.float() == 0).all(dim=1)).flatten().tolist()


@pytest.mark.parametrize("family", families())
@pytest.mark.parametrize("pad", [5, -1, None, "file"])
def test_padding_row_is_zero_where_transformers_zeroes_it(family, pad, cli, tmp_path):
    """Ground truth: transformers builds the model on the CPU (its _init_weights draws the embedding,
    then zeroes its padding_idx row; a tied head is that tensor). The rows it leaves zero are exactly
    those of `layerinit emit --hf-config` of the same config.json and of layerinit.torch.init_ of the
    model on the meta device: pad_token_id 5, -1 (the last row, as nn.Embedding reads it), null, and
    the tiny config's own (absent: the config class's default)."""
    from safetensors.torch import load_file

    changes = {} if pad == "file" else {"pad_token_id": pad}
    cfg = config(family, **changes)
    torch.manual_seed(0)
    cpu = transformers.AutoModelForCausalLM.from_config(cfg)
    truth = zero_rows(cpu.get_input_embeddings().weight)
    vocab = cpu.get_input_embeddings().weight.shape[0]
    row = cfg.pad_token_id
    no_padding_idx = cpu.get_input_embeddings().padding_idx is None  # GPT-2's wte, GPT-NeoX's embed_in
    expected = [] if no_padding_idx or row is None else [row % vocab]
    assert truth == expected, f"transformers {transformers.__version__} zeroes rows {truth} of {family}"
    head = cpu.get_output_embeddings()
    if head.weight is cpu.get_input_embeddings().weight:
        assert zero_rows(head.weight) == truth

    name = next(n for n, p in cpu.named_parameters() if p is cpu.get_input_embeddings().weight)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(config_dict(family), **changes)))
    out = tmp_path / "out"
    run_cli(cli, "emit", "--hf-config", str(path), "--backend", "cpu", "--format", "safetensors", "-o", str(out))
    assert zero_rows(load_file(str(out / "model.safetensors"))[name]) == truth
    assert ", 0 differ, 0 missing, 0 unexpected" in run_cli(cli, "verify", str(out))

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    lt.init_(model, recipe="hf", seed=4)
    assert zero_rows(model.get_input_embeddings().weight) == truth
    assert zero_rows(model.get_output_embeddings().weight) == (truth if model.config.tie_word_embeddings else [])
    # The package's plan says so too: the spec's embedding has the region.
    regions = json.loads(layerinit.hf_spec(cfg).to_json())["pre"][0].get("regions", [])
    assert [r["offset"][0] for r in regions] == truth


def test_hf_spec_takes_a_config_a_dict_or_a_path(tmp_path):
    d = config_dict("mistral")
    from_dict = layerinit.hf_spec(d)
    from_config = layerinit.hf_spec(config("mistral"))
    (tmp_path / "Tiny-Mistral").mkdir()
    (tmp_path / "Tiny-Mistral" / "config.json").write_text(json.dumps(d))
    from_dir = layerinit.hf_spec(tmp_path / "Tiny-Mistral")
    assert from_dir.name == "Tiny-Mistral" and from_dict.name == "mistral"
    for s in (from_config, from_dir, layerinit.spec(d), layerinit.spec(tmp_path / "Tiny-Mistral")):
        assert s.parameter_count == from_dict.parameter_count == 182_592
    assert layerinit.hf_spec(TINY_DIR / "deepseek_v3.json").buffer_count == 8
    with pytest.raises(ValueError, match="no layerinit spec for Hugging Face model_type 'bert'"):
        layerinit.hf_spec(transformers.BertConfig())
    with pytest.raises(ValueError, match="config.json: num_key_value_heads: 3 does not divide num_heads 4"):
        layerinit.hf_spec(dict(d, num_key_value_heads=3))
    with pytest.raises(ValueError, match="config must be a transformers config"):
        layerinit.hf_spec(42)


def test_rope_theta_of_transformers_5_configs_is_kept():
    # transformers 5 keeps rope_theta in rope_parameters; the spec (and the config.json emit writes) keep 500000.
    cfg = transformers.LlamaConfig(rope_theta=500000.0, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                   num_hidden_layers=1, vocab_size=32)
    spec = json.loads(layerinit.hf_spec(cfg).to_json())
    assert spec["hyper"]["rope_theta"] == 500000.0
    assert json.loads(spec["hf_config"])["rope_parameters"]["rope_theta"] == 500000.0


def test_the_package_keeps_no_config_mapping():
    # Every Hugging Face config field lives in the C++ reader (init/hf_spec.cpp, init/families/): none of the names only
    # config.json uses is in the Python sources.
    package = Path(layerinit.__file__).parent
    for src in package.glob("*.py"):
        text = src.read_text()
        for field in ("num_attention_heads", "num_key_value_heads", "rms_norm_eps", "n_embd", "num_local_experts",
                      "n_routed_experts"):
            assert field not in text, f"{src.name} reads {field}"


def test_counts_that_multiply_tensors_are_refused_before_the_tensors_are_made():
    # 2^40 experts: one ValueError naming the field, not a spec of 3 * 2^40 tensors (memory exhausted).
    with pytest.raises(ValueError, match=r"config.json: num_local_experts: 1099511627776 experts make 3298534883335 tensors "
                                         r"in a layer; a spec lists at most 262144"):
        layerinit.hf_spec({"model_type": "mixtral", "num_local_experts": 2**40, "hidden_size": 8, "num_attention_heads": 2,
                           "num_key_value_heads": 2, "intermediate_size": 4, "vocab_size": 16})
    for model_type, key in [("deepseek_v3", "n_routed_experts"), ("glm4_moe", "n_routed_experts"),
                            ("qwen3_moe", "num_experts")]:
        with pytest.raises(ValueError, match=rf"config.json: {key}: 4294967296 experts make"):
            layerinit.hf_spec({"model_type": model_type, key: 2**32})


def test_plan_and_build_take_the_configs_dtype():
    # dtype=None (the default) is the config's dtype, else torch_dtype, else bf16: the CLI's rule, in the library.
    d = config_dict("llama")
    dtypes = lambda p: {t[2] for t in p.tensors()}  # noqa: E731
    assert dtypes(layerinit.plan(d)) == {"bf16"}
    assert dtypes(layerinit.plan(dict(d, torch_dtype="float32"))) == {"fp32"}
    assert dtypes(layerinit.plan(dict(d, dtype="float16", torch_dtype="float32"))) == {"fp16"}
    assert dtypes(layerinit.plan(dict(d, torch_dtype="float32"), dtype="bf16")) == {"bf16"}
    assert {a.dtype for a in layerinit.build(dict(d, torch_dtype="float32")).values()} == {"fp32"}
    with pytest.raises(ValueError, match=r"config.json: torch_dtype: 'float64' is not a dtype layerinit writes "
                                         r"\(float32, float16, bfloat16\): give the dtype to write"):
        layerinit.plan(dict(d, torch_dtype="float64"))
    assert dtypes(layerinit.plan(dict(d, torch_dtype="float64"), dtype="fp16")) == {"fp16"}


def test_jax_build_takes_the_configs_dtype():
    # layerinit.jax.build's dtype=None is layerinit.build's rule: the config's dtype, else bf16.
    import layerinit.jax
    d = dict(config_dict("llama"), torch_dtype="float32")
    assert {str(a.dtype) for a in layerinit.jax.build(d).values()} == {"float32"}
    assert {str(a.dtype) for a in layerinit.jax.build(d, dtype="bf16").values()} == {"bfloat16"}
    assert {str(a.dtype) for a in layerinit.jax.build(config_dict("llama")).values()} == {"bfloat16"}


def test_no_shared_experts_are_the_zero_element_tensors_transformers_makes():
    # n_shared_experts 0: Glm4MoeMoE still makes mlp.shared_experts of width moe_intermediate_size * 0.
    d = dict(config_dict("glm4_moe"), n_shared_experts=0)
    want = {f"model.layers.{i}.mlp.shared_experts.{w}.weight": s for i in (1, 2)
            for w, s in [("gate_proj", [0, 64]), ("up_proj", [0, 64]), ("down_proj", [64, 0])]}
    assert {t[0]: t[1] for t in layerinit.plan(d).tensors() if ".shared_experts." in t[0]} == want
    built = layerinit.build(d)
    assert {k: list(a.shape) for k, a in built.items() if ".shared_experts." in k} == want
    from layerinit.jax import build as jax_build
    assert {k: list(a.shape) for k, a in jax_build(d).items() if ".shared_experts." in k} == \
        {k: s[::-1] for k, s in want.items()}  # in-out by default
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config("glm4_moe", n_shared_experts=0)).to(torch.bfloat16)
    lt.init_(model, seed=9)
    state = model.state_dict()
    assert {k: list(state[k].shape) for k in want} == want
    assert torch.equal(bits(state["model.embed_tokens.weight"]),
                       bits(torch.from_dlpack(layerinit.build(d, seed=9)["model.embed_tokens.weight"])))
