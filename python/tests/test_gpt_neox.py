"""GPT-NeoX, the family of one record (init/families/gpt_neox.cpp): `layerinit emit --hf-config` of a
Pythia-like config.json (untied head, so the checkpoint holds embed_out.weight) loads with
transformers' GPTNeoXForCausalLM.from_pretrained, every tensor equal to the file's and none newly
initialized; emit's config.json is the config given, byte for byte. Uses the CLI and transformers only."""
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from conftest import run_cli  # noqa: E402

CONFIG = {
    "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": 512, "hidden_size": 64,
    "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128,
    "layer_norm_eps": 1e-05, "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
    "tie_word_embeddings": False, "initializer_range": 0.02,
}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("tied", [False, True])
def test_from_pretrained_loads_the_emitted_gpt_neox(dtype, tied, cli, tmp_path):
    from safetensors.torch import load_file

    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(CONFIG, tie_word_embeddings=tied), indent=2))
    out = tmp_path / "out"
    run_cli(cli, "emit", "--hf-config", str(path), "--backend", "cpu", "--format", "safetensors", "--dtype", dtype,
            "--seed", "3", "-o", str(out))
    assert (out / "config.json").read_bytes() == path.read_bytes()
    ref = load_file(str(out / "model.safetensors"))
    assert ("embed_out.weight" in ref) != tied
    assert ref["gpt_neox.layers.0.attention.query_key_value.weight"].shape == (192, 64)

    model, info = transformers.GPTNeoXForCausalLM.from_pretrained(str(out), output_loading_info=True,
                                                                  dtype=torch.float32 if dtype == "fp32" else torch.bfloat16)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    state = model.state_dict()
    for k, v in ref.items():
        key = "lm_head.weight" if k == "embed_out.weight" else k  # transformers' rename of the checkpoints' head
        assert key in state, k
        assert state[key].dtype == v.dtype and torch.equal(state[key], v), k
    loaded = {"lm_head.weight" if k == "embed_out.weight" else k for k in ref}
    for k in state:
        if k == "lm_head.weight" and tied:
            assert torch.equal(state[k], ref["gpt_neox.embed_in.weight"])
            continue
        assert k in loaded, f"{k} was initialized by transformers, not loaded"
    # The values are the hf recipe's: normal(0, 0.02) weights, zero biases, LayerNorms at 1 and 0.
    w = ref["gpt_neox.layers.1.mlp.dense_h_to_4h.weight"].float()
    assert abs(w.std().item() - 0.02) < 0.002
    assert torch.count_nonzero(ref["gpt_neox.layers.1.attention.dense.bias"]) == 0
    assert torch.all(ref["gpt_neox.final_layer_norm.weight"] == 1)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 512) and torch.isfinite(logits.float()).all()
