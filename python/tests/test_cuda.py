"""CUDA: builds on the GPU and fills of CUDA tensors equal the CPU's bytes. Skipped, visibly, where
this build of layerinit has no CUDA or no GPU answers (scripts/test-python compiles CUDA in only
where nvidia-smi sees a GPU)."""
import numpy as np
import pytest
import torch

import layerinit

pytestmark = pytest.mark.skipif(not (layerinit.cuda_available() and torch.cuda.is_available()),
                                reason="no CUDA build of layerinit or no GPU")


def test_cuda_build_equals_cpu_and_is_zero_copy():
    gpu = layerinit.build("mixtral-tiny", device="cuda", seed=4)
    cpu = layerinit.build("mixtral-tiny", seed=4)
    assert list(gpu) == list(cpu)
    for k, a in gpu.items():
        assert a.__dlpack_device__() == (2, 0) and a.device == "cuda:0"
        t = torch.from_dlpack(a)
        assert t.is_cuda and t.data_ptr() == a.data_ptr
        assert torch.equal(t.cpu().view(torch.int16), torch.from_dlpack(cpu[k]).view(torch.int16)), k
    before = layerinit.memory_stats("cuda")["current_bytes"]
    assert before >= sum(a.nbytes for a in gpu.values())
    del gpu, t, a
    import gc

    gc.collect()
    assert layerinit.memory_stats("cuda")["current_bytes"] == 0


def test_fill_cuda_tensor_equals_cpu():
    name = "model.layers.0.mlp.up_proj.weight"
    x = torch.empty(176, 64, dtype=torch.bfloat16, device="cuda")
    layerinit.fill_(x, name, "trunc_normal(0, 0.02, -0.04, 0.04)", seed=2)
    y = torch.empty(176, 64, dtype=torch.bfloat16)
    layerinit.fill_(y, name, "trunc_normal(0, 0.02, -0.04, 0.04)", seed=2)
    assert torch.equal(x.cpu().view(torch.int16), y.view(torch.int16))
    with pytest.raises(ValueError, match="__array__ needs a CPU array"):
        np.asarray(layerinit.build("llama-tiny", device="cuda")["model.norm.weight"])


def test_torch_init_on_cuda_equals_cpu():
    """layerinit.torch.init_ of a transformers model materialized on the GPU: the CPU's bytes."""
    transformers = pytest.importorskip("transformers")
    import layerinit.torch as lt

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)

    def made(device):
        with torch.device("meta"):
            m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        return lt.init_(m, seed=3, device=device)

    gpu, cpu = dict(made("cuda").named_parameters()), dict(made("cpu").named_parameters())
    assert list(gpu) == list(cpu) and len(gpu) == 21
    for k, a in gpu.items():
        assert a.is_cuda and torch.equal(a.detach().cpu().view(torch.int16), cpu[k].detach().view(torch.int16)), k


def test_every_device_by_index_and_one_past_the_node_refused():
    """cuda:N is that device (its arrays and their DLPack device say it); one past the node is a
    ValueError before anything is allocated."""
    n = layerinit._core.cuda_device_count()
    assert n == torch.cuda.device_count()
    for d in range(n):
        a = layerinit.build("llama-tiny", device=f"cuda:{d}", seed=2)
        for x in a.values():
            assert x.__dlpack_device__() == (2, d) and x.device == f"cuda:{d}"
            t = torch.from_dlpack(x)
            assert t.device == torch.device("cuda", d)
        w = torch.empty(176, 64, dtype=torch.bfloat16, device=f"cuda:{d}")
        layerinit.fill_(w, "model.layers.0.mlp.up_proj.weight", "normal(0, 0.02)", seed=2)
        assert torch.equal(w.cpu(), layerinit.fill_(torch.empty(176, 64, dtype=torch.bfloat16),
                                                    "model.layers.0.mlp.up_proj.weight", "normal(0, 0.02)", seed=2))
    before = layerinit.memory_stats("cuda")["current_bytes"]
    with pytest.raises(ValueError, match=f"device 'cuda:{n}' does not exist"):
        layerinit.build("llama-tiny", device=f"cuda:{n}")
    assert layerinit.memory_stats("cuda")["current_bytes"] == before
