"""Builds each preset's Hugging Face model in transformers on the meta device, from the numbers of its
config.json on the Hub, and compares it with the layerinit spec of the same preset: every state_dict
key and shape, and the parameter count. Usage: hf_meta.py SPEC.json [SPEC.json ...] (spec_to_json
of presets, named by their "name"). Exit 0 if all agree.

transformers 5 fuses MoE experts in its modules ([E, 2F, H] gate_up_proj = cat(gate, up) per
expert, [E, H, F] down_proj) and renames Mixtral's block_sparse_moe to mlp; checkpoints keep one
tensor per expert, as layerinit writes them. The comparison maps layerinit's per-expert tensors to
the fused ones when the model has them, and compares directly otherwise (transformers 4)."""
import json
import re
import sys

import torch
import transformers

# The Hub config.json numbers of each preset (the tiny presets: layerinit's own small shapes).
GPT2 = dict(model_type="gpt2", vocab_size=50257, n_positions=1024)
LLAMA3 = dict(model_type="llama", vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
              tie_word_embeddings=False)
CONFIGS = {
    "gpt2": dict(GPT2, n_embd=768, n_layer=12, n_head=12),
    "gpt2-medium": dict(GPT2, n_embd=1024, n_layer=24, n_head=16),
    "gpt2-large": dict(GPT2, n_embd=1280, n_layer=36, n_head=20),
    "gpt2-xl": dict(GPT2, n_embd=1600, n_layer=48, n_head=25),
    "gpt2-tiny": dict(GPT2, vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=4, bos_token_id=511,
                      eos_token_id=511),
    "llama-3-8b": dict(LLAMA3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8),
    "llama-3-70b": dict(LLAMA3, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8),
    # meta-llama/Llama-3.1-405B
    "llama-3.1-405b": dict(LLAMA3, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                           num_attention_heads=128, num_key_value_heads=8, max_position_embeddings=131072,
                           rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                             original_max_position_embeddings=8192, rope_type="llama3")),
    "llama-tiny": dict(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    "mistral-7b": dict(model_type="mistral", vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
    "mixtral-8x7b": dict(model_type="mixtral", vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
                         num_experts_per_tok=2, tie_word_embeddings=False),
    "mixtral-tiny": dict(model_type="mixtral", vocab_size=512, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                         num_experts_per_tok=2, tie_word_embeddings=False),
    # Qwen/Qwen2.5-7B
    "qwen2.5-7b": dict(model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       max_position_embeddings=131072, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       tie_word_embeddings=False),
    "qwen2.5-tiny": dict(model_type="qwen2", vocab_size=512, hidden_size=64, intermediate_size=176,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    # google/gemma-2-9b
    "gemma-2-9b": dict(model_type="gemma2", vocab_size=256000, hidden_size=3584, intermediate_size=14336,
                       num_hidden_layers=42, num_attention_heads=16, num_key_value_heads=8, head_dim=256,
                       query_pre_attn_scalar=256, tie_word_embeddings=True),
    "gemma-2-tiny": dict(model_type="gemma2", vocab_size=512, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                         query_pre_attn_scalar=32, tie_word_embeddings=True),
    # deepseek-ai/DeepSeek-V3 (num_nextn_predict_layers = 1: transformers builds no MTP layer)
    "deepseek-v3": dict(model_type="deepseek_v3", vocab_size=129280, hidden_size=7168, intermediate_size=18432,
                        moe_intermediate_size=2048, num_hidden_layers=61, first_k_dense_replace=3,
                        n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8, n_group=8, topk_group=4,
                        num_attention_heads=128, num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, tie_word_embeddings=False),
    "deepseek-v3-tiny": dict(model_type="deepseek_v3", vocab_size=512, hidden_size=64, intermediate_size=128,
                             moe_intermediate_size=32, num_hidden_layers=3, first_k_dense_replace=1,
                             n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1,
                             num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
                             qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, tie_word_embeddings=False),
}

# Per-expert weight names: (gate, up, down) as the checkpoints name them.
EXPERT_WEIGHTS = [("w1.weight", "w3.weight", "w2.weight"), ("gate_proj.weight", "up_proj.weight", "down_proj.weight")]


def spec_tensors(spec):
    """Canonical name -> shape of every tensor of a layerinit spec."""
    out = {t["name"]: tuple(t["shape"]) for t in spec["pre"] + spec["post"]}
    layer = spec["layer"]
    first = layer.get("first", 0)
    for i in range(first, first + layer["count"]):
        for t in layer["tensors"]:
            out[f'{layer["prefix"]}{i}.{t["name"]}'] = tuple(t["shape"])
    return out


def fused_view(spec, tensors):
    """The same tensors as transformers 5 holds them: each layer's experts fused, Mixtral's
    block_sparse_moe renamed to mlp. Returns name -> shape."""
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
            experts.setdefault(f'{layer["prefix"]}{m.group(1)}', {}).setdefault(int(m.group(2)), {})[m.group(3)] = s
        else:
            out[n.replace(".block_sparse_moe.", ".mlp.")] = s
    for lname, per_expert in experts.items():
        E = len(per_expert)
        rests = per_expert[0]
        for gate, up, down in EXPERT_WEIGHTS:
            if gate in rests:
                f, h = rests[gate]
                assert rests[up] == (f, h) and rests[down] == (h, f), (lname, rests)
                out[f"{lname}.mlp.experts.gate_up_proj"] = (E, 2 * f, h)
                out[f"{lname}.mlp.experts.down_proj"] = (E, h, f)
    return out


def check(path):
    spec = json.load(open(path))
    name = spec["name"]
    kwargs = dict(CONFIGS[name])
    config = transformers.CONFIG_MAPPING[kwargs.pop("model_type")](**kwargs)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    sd = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    buffers = {k for k, _ in model.named_buffers() if k in sd}
    if getattr(model.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)  # the embedding under another name
    ours = spec_tensors(spec)
    fused = any(k.endswith("experts.gate_up_proj") for k in sd)
    view = fused_view(spec, ours) if fused else ours
    problems = []
    for k in sorted(set(sd) | set(view)):
        if k not in view:
            problems.append(f"{k} {sd[k]}: in transformers only")
        elif k not in sd:
            problems.append(f"{k} {view[k]}: in layerinit only")
        elif sd[k] != view[k]:
            problems.append(f"{k}: transformers {sd[k]}, layerinit {view[k]}")
    total = sum(torch.Size(s).numel() for s in ours.values())
    in_buffers = sum(torch.Size(sd[k]).numel() for k in buffers)
    if total - in_buffers != model.num_parameters():
        problems.append(f"parameters: transformers {model.num_parameters()}, layerinit {total} - {in_buffers} in buffers")
    print(f"{name}: {type(model).__name__}, {len(sd)} state_dict tensors, {model.num_parameters():,} parameters"
          f"{f' + {in_buffers:,} in buffers' if in_buffers else ''}: "
          f"{'equal' if not problems else 'DIFFERENT: ' + '; '.join(problems[:6])}")
    return not problems


ok = all([check(p) for p in sys.argv[1:]])
print(f"transformers {transformers.__version__}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
