"""Loads layerinit safetensors directories with Hugging Face transformers and checks that the load
reports no missing, unexpected or mismatched weight (none initialized anew) and that every tensor the
model ends up with equals the file's bytes (MoE experts through transformers' own conversion to
fused tensors, when it does that). Usage: hf_load.py DIR [DIR ...]. Exit 0 if all match."""
import sys

import torch
import transformers
from safetensors.torch import load_file

# How a fused transformers 5 tensor is made of a checkpoint's per-expert tensors: (module prefix,
# gate, up, down) as Mixtral and the Qwen2-MoE-style models (Qwen3-MoE, DeepSeek-V3, GLM-4.5) name them.
EXPERTS = [("block_sparse_moe", "w1", "w3", "w2"), ("mlp", "gate_proj", "up_proj", "down_proj")]


def reference(k, f):
    """The tensor the file holds for model key k, or None."""
    if k in f:
        return f[k]
    layer = k.split(".mlp.")[0]
    for moe, gate, up, down in EXPERTS:
        prefix = f"{layer}.{moe}"
        experts = sorted({int(n[len(prefix + ".experts."):].split(".")[0]) for n in f if n.startswith(prefix + ".experts.")
                          and n[len(prefix + ".experts."):].split(".")[0].isdigit()})
        if not experts:
            continue
        if k.endswith("mlp.experts.gate_up_proj"):
            return torch.stack([torch.cat([f[f"{prefix}.experts.{e}.{gate}.weight"], f[f"{prefix}.experts.{e}.{up}.weight"]])
                                for e in experts])
        if k.endswith("mlp.experts.down_proj"):
            return torch.stack([f[f"{prefix}.experts.{e}.{down}.weight"] for e in experts])
        if k.endswith("mlp.gate.weight") and f"{prefix}.gate.weight" in f:
            return f[f"{prefix}.gate.weight"]
    return None


def check(d):
    model, info = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, output_loading_info=True)
    bad = [f"{what}: {', '.join(sorted(keys)[:5])}" for what, keys in info.items() if keys]
    sd = model.state_dict()
    f = load_file(f"{d}/model.safetensors")
    for k, v in sd.items():
        if k == "lm_head.weight" and model.config.tie_word_embeddings:
            continue  # tied to the embedding, which is compared under its own name
        ref = reference(k, f)
        if ref is None:
            bad.append(k + " (not in the file)")
        elif not torch.equal(v, ref.to(v.dtype)):
            bad.append(k)
    print(f"{d}: {type(model).__name__}, {len(sd)} tensors, {'all equal to the file' if not bad else 'MISMATCH ' + '; '.join(bad[:5])}",
          flush=True)
    return not bad


ok = all([check(d) for d in sys.argv[1:]])
print(f"transformers {transformers.__version__}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
