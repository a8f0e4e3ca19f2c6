"""torchtitan models for the tests, built through torchtitan's own config factories: its llama3
debugmodel, and tiny llama3 (GQA, tied), qwen3 (dense, tied), qwen3 MoE and deepseek_v3 flavours of
the same builders with small numbers, and the way torchtitan loads a Hugging Face checkpoint into
one (its state-dict adapter, DCP's HuggingFaceStorageReader)."""
import torch


def llama3(dim, heads, kv, layers, vocab, hidden, tied, max_seq_len=64):
    """A config of torchtitan's llama3 builder (fused wqkv, llama RoPE scaling) with these numbers."""
    import torchtitan.models.llama3 as L
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm

    return L.Llama3Model.Config(
        dim=dim, vocab_size=vocab, enable_weight_tying=tied,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                        param_init=L._EMBEDDING_SKIP_INIT if tied else L._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=L._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=L._output_linear_init(dim)),
        layers=L._build_llama3_layers(fuse_qkv=True, n_layers=layers, dim=dim, n_heads=heads, n_kv_heads=kv,
                                      hidden_dim=hidden, attn_backend="flex",
                                      rope=ComplexRoPE.Config(dim=dim // heads, max_seq_len=max_seq_len, theta=500000,
                                                              scaling="llama")))


def _qwen3(moe):
    import torchtitan.models.qwen3 as Q
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear

    dim, hd = 64, 16
    rope = CosSinRoPE.Config(dim=hd, max_seq_len=64, theta=1000000.0)
    if moe:
        layers = Q._build_qwen3_moe_layers(n_layers=2, dim=dim, n_heads=4, n_kv_heads=2, head_dim=hd, moe_hidden_dim=32,
                                           num_experts=4, top_k=2, attn_backend="flex", moe_comm_backend="standard",
                                           rope=rope)
    else:
        layers = Q._build_qwen3_layers(n_layers=3, dim=dim, n_heads=4, n_kv_heads=2, head_dim=hd, hidden_dim=96,
                                       attn_backend="flex", rope=rope)
    return Q.Qwen3Model.Config(
        vocab_size=256, dim=dim, norm=Q._qwen3_norm(dim), enable_weight_tying=not moe,
        tok_embeddings=Embedding.Config(num_embeddings=256, embedding_dim=dim,
                                        param_init=Q._EMBEDDING_INIT if moe else Q._EMBEDDING_SKIP_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=256, param_init=Q._LINEAR_INIT), layers=layers)


def _deepseek_v3():
    import torchtitan.models.deepseek_v3 as D
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm

    dim = 64
    layers = D._build_dsv3_layers(
        n_layers=3, n_dense_layers=1, dim=dim, n_heads=4, q_lora_rank=0, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, mscale=0.7, dense_hidden_dim=96, moe_hidden_dim=32, num_experts=4,
        num_shared_experts=1, router_top_k=2, router_score_func="softmax", attn_backend="flex",
        moe_comm_backend="standard", non_blocking_capacity_factor=None,
        rope=ComplexRoPE.Config(dim=8, max_seq_len=64, theta=10000.0, scaling="yarn", rope_factor=40.0, beta_fast=32.0,
                                beta_slow=1.0, original_seq_len=16))
    return D.DeepSeekV3Model.Config(
        vocab_size=256, dim=dim,
        tok_embeddings=Embedding.Config(num_embeddings=256, embedding_dim=dim, param_init=D._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=D._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=256, param_init=D._output_linear_init(dim)),
        layers=layers)


def config(flavor):
    """A torchtitan model config: llama3's own debugmodel, or a tiny flavour of torchtitan's builders."""
    if flavor == "llama3-debugmodel":
        from torchtitan.models.llama3 import model_registry

        return model_registry("debugmodel", attn_backend="flex").model
    if flavor == "llama3-tiny-tied":
        return llama3(64, 4, 2, 3, 256, 96, True)
    if flavor == "qwen3-tiny":
        return _qwen3(False)
    if flavor == "qwen3-moe-tiny":
        return _qwen3(True)
    if flavor == "deepseek-v3-tiny":
        return _deepseek_v3()
    raise ValueError(flavor)


FLAVORS = ["llama3-debugmodel", "llama3-tiny-tied", "qwen3-tiny", "qwen3-moe-tiny", "deepseek-v3-tiny"]


def meta_model(flavor, dtype=torch.float32):
    with torch.device("meta"):
        return config(flavor).build().to(dtype)


def adapter(model):
    """torchtitan's own state-dict adapter of the model's package (as its ModelSpec names it)."""
    import importlib

    pkg = importlib.import_module(type(model).__module__.rsplit(".", 1)[0])
    cls = {"llama3": "Llama3StateDictAdapter", "qwen3": "Qwen3StateDictAdapter",
           "deepseek_v3": "DeepSeekV3StateDictAdapter"}[pkg.__name__.rsplit(".", 1)[1]]
    return getattr(pkg, cls)(model.config, None)


def load_hf(model, directory):
    """Loads a Hugging Face safetensors directory into `model` the way torchtitan's checkpointer
    does: to_hf of its state dict, DCP's HuggingFaceStorageReader, from_hf, load_state_dict.
    Returns load_state_dict's (missing, unexpected) keys."""
    import warnings

    import torch.distributed.checkpoint as dcp

    ad = adapter(model)
    hf_sd = ad.to_hf(model.state_dict())
    with warnings.catch_warnings():  # one process, no process group: DCP says so
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        dcp.load(hf_sd, storage_reader=ad.get_hf_storage_reader(str(directory)))
    result = model.load_state_dict(ad.from_hf(hf_sd), strict=False)
    return result.missing_keys, result.unexpected_keys
