"""Builds Hugging Face models in transformers on the meta device from config.json files and compares
each with the layerinit spec of the same model: every state_dict key and shape, which of them are
buffers, and the parameter count. Usage: hf_meta.py CONFIG.json SPEC.json [CONFIG.json SPEC.json ...]
(a config.json as emit writes it or a user gives it, and spec_to_json of layerinit's spec for it).
Exit 0 if all agree; with --differ first, exit 0 if every pair differs (the test's broken specs).

transformers 5 fuses MoE experts in its modules ([E, 2F, H] gate_up_proj = cat(gate, up) per
expert, [E, H, F] down_proj) and renames Mixtral's block_sparse_moe to mlp; checkpoints keep one
tensor per expert, as layerinit writes them. The comparison maps layerinit's per-expert tensors to
the fused ones when the model has them, and compares directly otherwise (transformers 4)."""
import json
import re
import sys

import torch
import transformers

# Per-expert weight names: (gate, up, down) as the checkpoints name them.
EXPERT_WEIGHTS = [("w1.weight", "w3.weight", "w2.weight"), ("gate_proj.weight", "up_proj.weight", "down_proj.weight")]


def spec_tensors(spec):
    """Canonical name -> (shape, buffer) of every tensor of a layerinit spec."""
    out = {t["name"]: (tuple(t["shape"]), t.get("buffer", False)) for t in spec["pre"] + spec["post"]}
    layer = spec["layer"]
    first = layer.get("first", 0)
    for i in range(first, first + layer["count"]):
        for t in layer["tensors"]:
            out[f'{layer["prefix"]}{i}.{t["name"]}'] = (tuple(t["shape"]), t.get("buffer", False))
    return out


def fused_view(spec, tensors):
    """The same tensors as transformers 5 holds them: each layer's experts fused, Mixtral's
    block_sparse_moe renamed to mlp. Returns name -> (shape, buffer)."""
    layer = spec["layer"]
    prefix = layer.get("expert_prefix", "")
    if not prefix:
        return dict(tensors)
    out = {}
    experts = {}  # layer name -> {expert: {rest: shape}}
    pat = re.compile(re.escape(layer["prefix"]) + r"(\d+)\." + re.escape(prefix) + r"(\d+)\.(.+)$")
    for n, s in tensors.items():
        m = pat.match(n)
        if m:
            experts.setdefault(f'{layer["prefix"]}{m.group(1)}', {}).setdefault(int(m.group(2)), {})[m.group(3)] = s[0]
        else:
            out[n.replace(".block_sparse_moe.", ".mlp.")] = s
    for lname, per_expert in experts.items():
        E = len(per_expert)
        rests = per_expert[0]
        for gate, up, down in EXPERT_WEIGHTS:
            if gate in rests:
                f, h = rests[gate]
                assert rests[up] == (f, h) and rests[down] == (h, f), (lname, rests)
                out[f"{lname}.mlp.experts.gate_up_proj"] = ((E, 2 * f, h), False)
                out[f"{lname}.mlp.experts.down_proj"] = ((E, h, f), False)
    return out


def check(config_path, spec_path):
    spec = json.load(open(spec_path))
    name = spec["name"]
    config = json.load(open(config_path))
    # Kimi K2's model_type is its remote code's; its architecture is transformers' DeepSeek-V3.
    model_type = {"kimi_k2": "deepseek_v3"}.get(config["model_type"], config["model_type"])
    config = transformers.CONFIG_MAPPING[model_type].from_dict(config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    sd = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    buffers = {k for k, _ in model.named_buffers() if k in sd}
    if getattr(model.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)  # the embedding under another name
    ours = spec_tensors(spec)
    fused = any(k.endswith("experts.gate_up_proj") for k in sd) and spec["layer"].get("expert_prefix")
    view = fused_view(spec, ours) if fused else ours
    problems = []
    for k in sorted(set(sd) | set(view)):
        if k not in view:
            problems.append(f"{k} {sd[k]}: in transformers only")
        elif k not in sd:
            problems.append(f"{k} {view[k][0]}: in layerinit only")
        elif sd[k] != view[k][0]:
            problems.append(f"{k}: transformers {sd[k]}, layerinit {view[k][0]}")
        elif (k in buffers) != view[k][1]:
            problems.append(f"{k}: a {'buffer' if k in buffers else 'parameter'} in transformers, not in layerinit")
    params = sum(torch.Size(s).numel() for s, b in ours.values() if not b)
    in_buffers = sum(torch.Size(s).numel() for s, b in ours.values() if b)
    if params != model.num_parameters():
        problems.append(f"parameters: transformers {model.num_parameters()}, layerinit {params}")
    print(f"{name}: {type(model).__name__}, {len(sd)} state_dict tensors, {model.num_parameters():,} parameters"
          f"{f' + {in_buffers:,} in buffers' if in_buffers else ''}: "
          f"{'equal' if not problems else 'DIFFERENT: ' + '; '.join(problems[:6])}", flush=True)
    return not problems


args = sys.argv[1:]
differ = bool(args) and args[0] == "--differ"
args = args[1:] if differ else args
if not args or len(args) % 2:
    sys.exit("usage: hf_meta.py [--differ] CONFIG.json SPEC.json [CONFIG.json SPEC.json ...]")
equal = [check(args[i], args[i + 1]) for i in range(0, len(args), 2)]
ok = not any(equal) if differ else all(equal)
print(f"transformers {transformers.__version__}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
