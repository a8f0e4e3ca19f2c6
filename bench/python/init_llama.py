#!/usr/bin/env python3
"""Initializes a Llama 3.2 1B-shaped Hugging Face model (hidden 2048, intermediate 8192, 16 layers, 32
heads, 8 kv heads, vocab 128256, tied embeddings: 1,235,814,400 parameters) in bf16 on the CPU, one
method per process, so peak RSS is measured from outside (/usr/bin/time -v; bench/python/run).

    init_llama.py METHOD [--device cuda] [--tiny]

--device cuda makes the model on the GPU (each method's own way: from_config under torch.device,
to_empty(device=), init_('s device=) and adds the device's memory to the line: the weights' bytes, the
peak torch allocated (torch.cuda.max_memory_allocated, after a warm-up that starts CUDA) and the
device's free bytes before and after (torch.cuda.mem_get_info). --tiny: 2 layers, hidden 64, vocab 256
(a quick check of the script itself).

Methods:
  nothing               the process baseline: the same imports (torch, transformers, layerinit), no model
  from-config           AutoModelForCausalLM.from_config(config, dtype=bf16): transformers' own init
  meta-init-weights     on the meta device, to_empty(cpu), then the model's own init_weights()
  meta-layerinit        on the meta device, then layerinit.torch.init_ with no recipe: the model's own
                        init recorded from its code (init_weights on meta stand-ins), then to_empty and
                        every tensor filled in place; the recording is inside the time
  meta-layerinit-hf     the same with recipe="hf" (no recording: the values `layerinit emit` writes)
Prints one line: method,parameters,seconds (model creation only, after imports),init_seconds (of those,
the init after the model exists on the meta device: to_empty + init_weights, or init_ with its
recording; the whole creation for from-config)[,weights_bytes,peak_bytes,free_before,free_after on
the GPU]."""
import sys
import time

import torch
import transformers

import layerinit
import layerinit.torch

args = sys.argv[1:]
device = args[args.index("--device") + 1] if "--device" in args else "cpu"
tiny = "--tiny" in args
H, FF, L, NH, KV, V = (64, 128, 2, 4, 2, 256) if tiny else (2048, 8192, 16, 32, 8, 128256)


def config():
    return transformers.LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=FF, num_hidden_layers=L,
                                    num_attention_heads=NH, num_key_value_heads=KV, max_position_embeddings=131072,
                                    rope_theta=500000.0, tie_word_embeddings=True)


def from_config():
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(config(), dtype=torch.bfloat16)


INIT_START = [0.0]  # when the meta model exists: the init's own time starts


def meta_model():
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(config(), dtype=torch.bfloat16)
    INIT_START[0] = time.perf_counter()
    return m


def meta_init_weights():
    m = meta_model()
    m.to_empty(device=device)
    m.init_weights()
    return m


def meta_layerinit():
    m = meta_model()
    layerinit.torch.init_(m, seed=0, device=device)
    return m


def meta_layerinit_hf():
    m = meta_model()
    layerinit.torch.init_(m, recipe="hf", seed=0, device=device)
    return m


methods = {"from-config": from_config, "meta-init-weights": meta_init_weights, "meta-layerinit": meta_layerinit,
           "meta-layerinit-hf": meta_layerinit_hf}
method = args[0] if args else ""
if method == "nothing":
    print("nothing,0,0,0")
    sys.exit(0)
if method not in methods:
    sys.exit(f"init_llama: unknown method {method} (valid: nothing, {', '.join(methods)})")
gpu = device != "cpu"
if gpu:
    torch.zeros(1, device=device)  # CUDA started before the clock, as the CPU methods start nothing
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    free0 = torch.cuda.mem_get_info()[0]
t0 = time.perf_counter()
INIT_START[0] = t0
model = methods[method]()
if gpu:
    torch.cuda.synchronize()
t1 = time.perf_counter()
sec, init_sec = t1 - t0, t1 - INIT_START[0]
params = list(model.parameters())
assert all(p.dtype == torch.bfloat16 and p.device.type == torch.device(device).type for p in params)
assert model.lm_head.weight is model.model.embed_tokens.weight
std = float(model.model.layers[0].mlp.up_proj.weight.detach().float().std())
assert 0.019 < std < 0.021, std  # every method: normal(0, 0.02)
line = f"{method},{sum(p.numel() for p in params)},{sec:.4f},{init_sec:.4f}"
if gpu:
    weights = sum(p.numel() * p.element_size() for p in params)
    line += f",{weights},{torch.cuda.max_memory_allocated()},{free0},{torch.cuda.mem_get_info()[0]}"
print(line)
