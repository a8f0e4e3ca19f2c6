"""MaxText's own tiny llama2-style decoder on the CPU, for the tests (a fixture module, not a test file):
MaxText 0.2.5's config (pyconfig with the installed base.yml), its mesh, its Transformer (an NNX model wrapped
as a Linen module, models.transformer_as_linen), its init call and one forward pass. scripts/python-test-env
installs maxtext without its training dependencies; import this module only after
pytest.importorskip("maxtext").

The tiny model (config(): emb 64, 4 query heads, 2 kv heads, head_dim 16, mlp 128, 3 layers, vocab 256,
float32), printed by `python maxtext_models.py` (leaves(jax.eval_shape(init))) with MaxText 0.2.5, jax 0.11.2,
flax 0.12.12. Every leaf is an nn.LogicallyPartitioned box until unbox(); with scan_layers its logical axes have
"layers" inserted at param_scan_axis, where the shape has the layer count 3. Leaves sit under ["params"] and, but
for the embedding, under ["decoder"] (without scan_layers, "layers" is layers_0, layers_1, layers_2):

 leaf                                      logical axes                      axis 1          axis 0          no scan
 token_embedder.embedding                  vocab, embed_vocab                (256, 64)       (256, 64)       (256, 64)
 layers.self_attention.query.kernel        embed_attn, q_heads, kv           (64, 3, 4, 16)  (3, 64, 4, 16)  (64, 4, 16)
 layers.self_attention.key.kernel, value   embed_attn, kv_heads, kv_head_dim (64, 3, 2, 16)  (3, 64, 2, 16)  (64, 2, 16)
 layers.self_attention.out.kernel          heads, kv, embed_attn             (4, 3, 16, 64)  (3, 4, 16, 64)  (4, 16, 64)
 layers.mlp.wi_0.kernel, wi_1.kernel       embed, mlp                        (64, 3, 128)    (3, 64, 128)    (64, 128)
 layers.mlp.wo.kernel                      mlp, embed                        (128, 3, 64)    (3, 128, 64)    (128, 64)
 layers.{pre,post}_self_attention_layer_norm.scale  norm                     (64, 3)         (3, 64)         (64,)
 decoder_norm.scale                        norm                              (64,)           (64,)           (64,)
 logits_dense.kernel                       embed_vocab, vocab                (64, 256)       (64, 256)       (64, 256)

With scan_layers, param_scan_axis puts the layer axis at that dim of every layer parameter, 1-D norm scales
included (layers/nnx_scan.py:create_scanned_layers stacks the layers with jax.lax.scan, then jnp.moveaxis(x, 0,
param_scan_axis) where x.ndim > param_scan_axis, and inserts "layers" into the logical names at that place).
Without it the layers are decoder.layers_0, layers_1, layers_2.

The initializers, as the installed sources write them (paths under site-packages/maxtext/). nd_dense_init(scale,
mode, distribution) (layers/initializers.py:nd_dense_init) is jax.nn.initializers.variance_scaling(scale, mode,
distribution, in_axis, out_axis) with the axes DenseGeneral passes: in_axis = the contracted input dims, out_axis
= the output dims (layers/linears.py:DenseGeneral.__init__, kernel_in_axis = arange(len(axis))), so fan_in is
the product of the input dims of one layer's kernel (each layer is made on its own inside the scan, before the
layer axis exists). truncated_normal's std is corrected to sqrt(scale / fan_in) (jax divides by .8796...).
  - token_embedder.embedding: normal(stddev=1.0) (models/models.py:Transformer.__init__ passes
    embedding_init=jax.nn.initializers.normal(stddev=1.0) to layers/embeddings.py:Embed, overriding its default
    variance_scaling(1.0, "fan_in", "normal", out_axis=0)).
  - self_attention.query.kernel: nd_dense_init(1.0, "fan_in", "normal") divided by sqrt(head_dim)
    (layers/attentions.py:Attention.__init__ default kernel_init; Attention.init_query_w's query_init divides
    by depth_scaling = sqrt(head_dim) unless use_qk_norm or a query_pre_attn_scalar != 1): std
    1/sqrt(64)/sqrt(16) = 0.03125. Note "normal", not truncated: the llama2 layer (models/llama2.py:
    LlamaDecoderLayer.__init__) passes no kernel_init to Attention.
  - self_attention.key.kernel, value.kernel: nd_dense_init(1.0, "fan_in", "normal") (Attention.init_kv_w),
    fan_in 64: std 0.125.
  - self_attention.out.kernel: nd_dense_init(1.0, "fan_in", "normal") (Attention.init_out_w, axis (-2, -1)),
    fan_in heads * head_dim = 64: std 0.125.
  - mlp.wi_0, wi_1, wo kernels: nd_dense_init(1.0, "fan_in", "truncated_normal") (layers/linears.py:MlpBlock
    default kernel_init, passed to its DenseGeneral layers; llama2 passes none): std 1/sqrt(64) = 0.125 for wi,
    1/sqrt(128) = 0.0884 for wo.
  - logits_dense.kernel: DenseGeneral's default nd_dense_init(1.0, "fan_in", "truncated_normal")
    (layers/nnx_decoders.py:NNXDecoder.__init__, present as logits_via_embedding is false in base.yml): std 0.125.
  - every norm scale: ones (layers/normalizations.py:RMSNorm, scale_init=jax.nn.initializers.ones;
    NNXDecoder.get_norm_layer gives RMSNorm for llama2).
  - no biases (use_bias False throughout for llama2).
Keys: every parameter draws from the "params" stream of nnx.Rngs; a scanned stack forks it into one key per
layer (rngs.fork(split=length) in create_scanned_layers). The weights are made in weight_dtype (float32 here).
"""
import os
import tempfile

import jax
import jax.numpy as jnp
from flax import linen as nn

# The tiny decoder's numbers (MaxText's base_* keys are the model's own dims; emb_dim etc. derive from them).
TINY = {
    "base_emb_dim": 64,
    "base_num_query_heads": 4,
    "base_num_kv_heads": 2,
    "head_dim": 16,
    "base_mlp_dim": 128,
    "base_num_decoder_layers": 3,
    "vocab_size": 256,
    "max_target_length": 16,
    "per_device_batch_size": 1,
    "dtype": "float32",
    "weight_dtype": "float32",
}


def config(scan_layers: bool = True, param_scan_axis: int = 1, **overrides):
    """MaxText's HyperParameters for the tiny llama2 decoder on the CPU: base.yml from the installed package,
    dot-product attention, no jax.distributed, no checkpointing, no compilation cache; `overrides` are more
    key=value settings (e.g. base_num_decoder_layers=4)."""
    import maxtext
    from maxtext.configs import pyconfig

    base = os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml")
    settings = {
        "run_name": "layerinit_test",
        "hardware": "cpu",
        "attention": "dot_product",
        "skip_jax_distributed_system": True,
        "enable_checkpointing": False,
        "decoder_block": "llama2",
        # base.yml's "~/jax_cache" would point JAX's persistent compilation cache into $HOME for the whole process.
        "jax_cache_dir": "",
        # Nothing is written there (no checkpoints, no metrics); it only silences the "maxtext_output" default.
        "base_output_directory": os.path.join(tempfile.gettempdir(), "layerinit-maxtext"),
        "log_config": False,
        **TINY,
        "scan_layers": scan_layers,
        "param_scan_axis": param_scan_axis,
        **overrides,
    }
    return pyconfig.initialize([None, base, *(f"{k}={v}" for k, v in settings.items())])


def model(cfg, devices=None):
    """MaxText's Transformer for `cfg` as a Linen module (models.transformer_as_linen, with the quantization
    the config gives: none here) on the mesh the config gives over `devices` (default: all of jax's,
    ici_fsdp_parallelism -1 puts them all on "fsdp"); the mesh is `model.mesh`."""
    from maxtext.layers import quantizations
    from maxtext.models import models
    from maxtext.utils import maxtext_utils

    mesh = maxtext_utils.get_mesh_from_config(cfg, devices)
    return models.transformer_as_linen(cfg, mesh, quant=quantizations.configure_quantization(cfg))


def _config_of(m):
    return m.kwargs["config"]


def inputs(cfg):
    """The decoder's inputs as MaxText's training init makes them (maxtext_utils.init_initial_state): token
    ids [micro batch, max_target_length] and their positions 0..S-1 (the init itself passes ones for both)."""
    shape = (cfg.micro_batch_size_to_train_on, cfg.max_target_length)
    ids = (jnp.arange(shape[0] * shape[1], dtype=jnp.int32).reshape(shape) * 7) % cfg.vocab_size
    positions = jnp.broadcast_to(jnp.arange(shape[1], dtype=jnp.int32), shape)
    return ids, positions


def init_fn(m, cfg=None):
    """(fn, args): fn(*args) is MaxText's init of `m`, model.init({"params": k, "dropout": k, "aqt": k}, ids,
    positions) as maxtext_utils.init_initial_state calls it, under the config's logical axis rules; it returns
    {"params": ...} with nn.LogicallyPartitioned leaves. Use as jax.eval_shape(fn, *args),
    jax.make_jaxpr(fn)(*args) or jax.jit(fn)(*args). args is (a key,)."""
    cfg = cfg if cfg is not None else _config_of(m)
    ids, positions = inputs(cfg)

    def init(key):
        # jax.set_mesh cannot be entered under a trace; MaxText's layers take the mesh from the model.
        with nn.logical_axis_rules(cfg.logical_axis_rules):
            return m.init({"params": key, "dropout": key, "aqt": key}, ids, positions)

    return init, (jax.random.key(0),)


def forward(m, params, ids=None, positions=None, *, jit=True):
    """Logits [batch, seq, vocab] of one forward pass of `m` with `params` (boxed or unboxed), dropout off."""
    cfg = _config_of(m)
    if ids is None:
        ids, positions = inputs(cfg)
    elif positions is None:
        positions = jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32), ids.shape)

    def apply(params, ids, positions):
        with nn.logical_axis_rules(cfg.logical_axis_rules):
            return m.apply(params, ids, positions, enable_dropout=False,
                           rngs={"dropout": jax.random.key(1), "aqt": jax.random.key(2)})

    return (jax.jit(apply) if jit else apply)(params, ids, positions)


def unbox(tree):
    """The tree with its nn.LogicallyPartitioned boxes replaced by their values (flax's nn.meta.unbox)."""
    return nn.meta.unbox(tree)


def leaves(tree):
    """[(name, shape, dtype, logical names or None)] of a boxed or unboxed params tree, names dot-joined."""
    out = []
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))[0]
    for path, leaf in flat:
        name = ".".join(str(getattr(k, "key", k)) for k in path)
        value = leaf.value if isinstance(leaf, nn.LogicallyPartitioned) else leaf
        names = tuple(leaf.names) if isinstance(leaf, nn.LogicallyPartitioned) else None
        out.append((name, tuple(value.shape), jnp.dtype(value.dtype).name, names))
    return out


if __name__ == "__main__":
    # Prints the leaf table above: python maxtext_models.py
    for scan, axis in ((True, 1), (True, 0), (False, 1)):
        cfg = config(scan, axis)
        fn, args = init_fn(model(cfg), cfg)
        print(f"# scan_layers={scan} param_scan_axis={axis}")
        for row in leaves(jax.eval_shape(fn, *args)):
            print(*row)
