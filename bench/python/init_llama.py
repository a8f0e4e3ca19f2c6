#!/usr/bin/env python3
"""Initializes a Llama 3.2 1B-shaped Hugging Face model (hidden 2048, intermediate 8192, 16 layers, 32
heads, 8 kv heads, vocab 128256, tied embeddings: 1,235,814,400 parameters) in bf16 on the CPU, one
method per process, so peak RSS is measured from outside (/usr/bin/time -v; bench/python/run).

Methods:
  nothing               the process baseline: the same imports (torch, transformers, layerinit), no model
  from-config           AutoModelForCausalLM.from_config(config, dtype=bf16): transformers' own init
  meta-init-weights     on the meta device, to_empty(cpu), then the model's own init_weights()
  meta-layerinit        on the meta device, then layerinit.torch.init_ (to_empty, then every tensor
                        filled in place with the values `layerinit emit` writes)
Prints one line: method,parameters,seconds (model creation only, after imports)."""
import sys
import time

import torch
import transformers

import layerinit
import layerinit.torch

H, FF, L, NH, KV, V = 2048, 8192, 16, 32, 8, 128256


def config():
    return transformers.LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=FF, num_hidden_layers=L,
                                    num_attention_heads=NH, num_key_value_heads=KV, max_position_embeddings=131072,
                                    rope_theta=500000.0, tie_word_embeddings=True)


def from_config():
    return transformers.AutoModelForCausalLM.from_config(config(), dtype=torch.bfloat16)


def meta_model():
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config(), dtype=torch.bfloat16)


def meta_init_weights():
    m = meta_model()
    m.to_empty(device="cpu")
    m.init_weights()
    return m


def meta_layerinit():
    m = meta_model()
    layerinit.torch.init_(m, recipe="hf", seed=0, device="cpu")
    return m


methods = {"from-config": from_config, "meta-init-weights": meta_init_weights, "meta-layerinit": meta_layerinit}
method = sys.argv[1]
if method == "nothing":
    print("nothing,0,0")
    sys.exit(0)
if method not in methods:
    sys.exit(f"init_llama: unknown method {method} (valid: nothing, {', '.join(methods)})")
t0 = time.perf_counter()
model = methods[method]()
sec = time.perf_counter() - t0
params = list(model.parameters())
assert all(p.dtype == torch.bfloat16 and not p.is_meta for p in params)
assert model.lm_head.weight is model.model.embed_tokens.weight
std = float(model.model.layers[0].mlp.up_proj.weight.detach().float().std())
assert 0.019 < std < 0.021, std  # every method: normal(0, 0.02)
print(f"{method},{sum(p.numel() for p in params)},{sec:.4f}")
