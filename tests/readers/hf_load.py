"""Loads layerinit safetensors directories with Hugging Face transformers and checks that every
parameter the model ends up with equals the file's bytes (Mixtral's experts through transformers'
own conversion to fused tensors, when it does that). Usage: hf_load.py DIR [DIR ...]. Exit 0 if all
match."""
import sys

import torch
import transformers
from safetensors.torch import load_file


def check(d):
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
    sd = model.state_dict()
    f = load_file(f"{d}/model.safetensors")
    bad = []
    for k, v in sd.items():
        if k in f:
            if not torch.equal(v, f[k]):
                bad.append(k)
            continue
        if k == "lm_head.weight" and model.config.tie_word_embeddings:
            continue  # tied to the embedding, which is compared under its own name
        # transformers >= 5 fuses Mixtral's experts: [E, 2F, H] = cat(w1, w3) and [E, H, F] = w2.
        layer = k.split(".mlp.")[0]
        prefix = f"{layer}.block_sparse_moe"
        experts = sorted({int(n[len(prefix + ".experts."):].split(".")[0]) for n in f if n.startswith(prefix + ".experts.")})
        if k.endswith("mlp.experts.gate_up_proj"):
            ref = torch.stack([torch.cat([f[f"{prefix}.experts.{e}.w1.weight"], f[f"{prefix}.experts.{e}.w3.weight"]]) for e in experts])
        elif k.endswith("mlp.experts.down_proj"):
            ref = torch.stack([f[f"{prefix}.experts.{e}.w2.weight"] for e in experts])
        elif k.endswith("mlp.gate.weight"):
            ref = f[f"{prefix}.gate.weight"]
        else:
            bad.append(k + " (not in the file)")
            continue
        if not torch.equal(v, ref):
            bad.append(k)
    print(f"{d}: {type(model).__name__}, {len(sd)} parameters, {'all equal to the file' if not bad else 'MISMATCH ' + ', '.join(bad[:5])}")
    return not bad


ok = all([check(d) for d in sys.argv[1:]])
print(f"transformers {transformers.__version__}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
