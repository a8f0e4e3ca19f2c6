"""layerinit.torch.init_: transformers models on the meta device equal `layerinit emit`, bitwise."""
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

import layerinit  # noqa: E402
import layerinit.torch as lt  # noqa: E402
from hf_configs import config  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def meta_model(preset, dtype):
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(config(preset))
    return m.to(DTYPES[dtype])


def fused(ref, name):
    """transformers 5's fused expert tensor from the per-expert tensors of a checkpoint."""
    m = re.match(r"^(.*)\.mlp\.experts\.(gate_up_proj|down_proj)$", name)
    base, kind = m.group(1), m.group(2)
    E = sum(1 for k in ref if k.startswith(f"{base}.block_sparse_moe.experts.") and k.endswith(".w2.weight"))
    e = lambda i, w: ref[f"{base}.block_sparse_moe.experts.{i}.{w}.weight"]  # noqa: E731
    if kind == "down_proj":
        return torch.stack([e(i, "w2") for i in range(E)])
    return torch.stack([torch.cat([e(i, "w1"), e(i, "w3")]) for i in range(E)])


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16) if a.element_size() == 2 else
                                                                     a.view(torch.int32),
                                                                     b.view(torch.int16) if b.element_size() == 2 else
                                                                     b.view(torch.int32))


@pytest.mark.parametrize("preset", ["llama-tiny", "mixtral-tiny", "gpt2-tiny"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_meta_model_equals_emit(preset, dtype, emitted):
    model = meta_model(preset, dtype)
    assert all(p.is_meta for p in model.parameters())
    lt.init_(model, seed=21)
    ref = emitted(preset, "--seed", "21", "--dtype", dtype)
    sd = model.state_dict()
    used = set()
    for k, v in sd.items():
        if k in ref:
            assert same(v, ref[k]), k
            used.add(k)
        elif k.replace(".mlp.", ".block_sparse_moe.") in ref:
            assert same(v, ref[k.replace(".mlp.", ".block_sparse_moe.")]), k
            used.add(k.replace(".mlp.", ".block_sparse_moe."))
        elif k.endswith(("gate_up_proj", "down_proj")) and "experts" in k:
            assert same(v, fused(ref, k)), k
            used |= {r for r in ref if r.startswith(k.split(".mlp.")[0] + ".block_sparse_moe.experts.")}
        else:
            assert k == "lm_head.weight" and model.config.tie_word_embeddings, k
    assert used == set(ref)  # every emitted tensor is in the model


def test_tied_weights_filled_once_and_kept_tied():
    model = meta_model("gpt2-tiny", "bf16")
    lt.init_(model, seed=1)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()


def test_rotary_buffers_computed_like_transformers():
    model = meta_model("llama-tiny", "fp32")
    lt.init_(model)
    cpu = transformers.AutoModelForCausalLM.from_config(config("llama-tiny"))
    assert torch.equal(model.model.rotary_emb.inv_freq, cpu.model.rotary_emb.inv_freq)
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(logits).all()


class TitanBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = torch.nn.ModuleDict({w: torch.nn.Linear(64, o, bias=False) for w, o in
                                              (("wq", 64), ("wk", 32), ("wv", 32), ("wo", 64))})
        self.feed_forward = torch.nn.ModuleDict({"w1": torch.nn.Linear(64, 176, bias=False),
                                                 "w2": torch.nn.Linear(176, 64, bias=False),
                                                 "w3": torch.nn.Linear(64, 176, bias=False)})


def test_name_map_for_torchtitan_names():
    with torch.device("meta"):
        block = TitanBlock()
    hf = {"attention.wq": "self_attn.q_proj", "attention.wk": "self_attn.k_proj", "attention.wv": "self_attn.v_proj",
          "attention.wo": "self_attn.o_proj", "feed_forward.w1": "mlp.gate_proj", "feed_forward.w2": "mlp.down_proj",
          "feed_forward.w3": "mlp.up_proj"}
    lt.init_(block, spec="llama-tiny", recipe="torchtitan", seed=8,
             name_map=lambda n: "model.layers.2." + hf[n.rsplit(".", 1)[0]] + ".weight")
    ref = layerinit.build("llama-tiny", recipe="torchtitan", seed=8, dtype="fp32")
    for short, long in hf.items():
        got = block.get_submodule(short).weight
        assert same(got, torch.from_dlpack(ref[f"model.layers.2.{long}.weight"])), short


def test_plain_module_gets_its_roles():
    with torch.device("meta"):
        m = torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 16))
    lt.init_(m, recipe="pytorch-default", seed=2)
    bound = 1 / 32 ** 0.5
    w, b = m[2].weight, m[2].bias
    assert 0 < float(w.detach().abs().max()) <= bound and 0 < float(b.detach().abs().max()) <= bound
    assert torch.all(m[1].weight == 1) and torch.all(m[1].bias == 0)
    assert 0.9 < float(m[0].weight.detach().std()) < 1.1  # nn.Embedding: normal(0, 1)
    again = torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 16))
    lt.init_(again, recipe="pytorch-default", seed=2)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), again.parameters()))


def test_errors():
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config("llama-tiny"))
    with pytest.raises(ValueError, match="no layerinit tensor for 1 parameter"):
        lt.init_(model, name_map={"model.norm.weight": "model.final_norm.weight"})
    with pytest.raises(ValueError, match=r"parameter model.layers.0.mlp.up_proj.weight of shape \(176, 64\): "
                                         r"layerinit's transformer.wte.weight is \[512, 64\]"):
        lt.init_(model, spec="gpt2-tiny", name_map=lambda n: "transformer.wte.weight"
                 if n == "model.layers.0.mlp.up_proj.weight" else None)
    with pytest.raises(ValueError, match="unknown recipe"):
        lt.init_(model, recipe="nope")
    assert all(p.is_meta for p in model.parameters())  # refused before materializing
    with pytest.raises(ValueError, match="no layerinit spec for Hugging Face model_type 'bert'"):
        lt.hf_spec(transformers.BertConfig())
