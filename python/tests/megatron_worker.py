"""One rank of test_megatron.py: Megatron-core's own GPTModel (local layer spec, CPU initialization) on a
gloo process group with tensor parallelism = the world size, filled by layerinit.torch.init_ with
recipe megatron, no spec and no map. Usage: megatron_worker.py OUT CASE... (env RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT). Each case writes OUT/CASE.rank-R.pt, a dict of what test_megatron.py
compares, and prints 'rank R: CASE done'; a failure exits 1 with its traceback.

Cases:
- MODEL:HOW:SEEDS, for each seed s of SEEDS ("0-7"): {s: {name: tensor, "attrs": {name: Megatron-core's
  tensor_model_parallel attributes}, "ties": [names of the embedding's Parameter]}}, each local shard
  as this rank holds it, after
  - own: Megatron-core's own construction-time init (perform_initialization=True) after
    torch.manual_seed(s);
  - ours: the same construction, then init_(recipe="megatron", seed=s);
  - bare: construction with perform_initialization=False (no tensor_model_parallel attributes on the
    weights), then init_;
  - meta: construction on the meta device, then init_ (to_empty, annotations kept);
  - made: layerinit.torch.make(lambda: construction, seed=s): Megatron-core's own init recorded on the
    meta device (its init_method and output_layer_init_method on the master weight, this rank's slice
    copied in), then filled;
  - default: the construction of own, then init_(seed=s) with no recipe (a built Megatron-core model:
    its config's init);
  all but own with "spec", the spec init_ filled the model from (module_spec).
  MODEL is gpt (GELU MLP with biases, learned positions, LayerNorm, untied output layer, fp32) or
  swiglu (gated linear unit: linear_fc1 split with partition_stride 2, RMSNorm, no biases, RoPE, the
  embedding shared with the output layer, bf16).
- refusals (2 ranks): {what: message} of init_ on a pipeline stage ("pp", pp 2) and on an expert-parallel
  rank's experts ("ep", ep 2), and the parameters that differ from the whole model's (built at pp and
  ep 1 on the same ranks) after following the message's advice ("pp_advice", "ep_advice": spec= and
  name_map=); of a config whose embedding_init_method_std is not init_method_std ("embedding_std"),
  and the word embedding's std with the overrides its message suggests ("advice_std"); of a config
  with an init_method of its own ("own_init_method").
"""
import os
import sys
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

warnings.filterwarnings("ignore")  # Megatron-core's deprecation and missing-apex warnings on every import


def model(kind, perform_initialization, **config):
    """The tiny GPTModel of kind `kind` as Megatron-core's own code builds it, on this rank's stage."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    pp = parallel_state.get_pipeline_model_parallel_world_size()
    common = dict(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, use_cpu_initialization=True,
                  init_method_std=0.02, perform_initialization=perform_initialization, pipeline_model_parallel_size=pp,
                  pipeline_dtype=torch.float32 if pp > 1 else None,
                  expert_model_parallel_size=parallel_state.get_expert_model_parallel_world_size(), **config)
    stage = dict(pre_process=parallel_state.is_pipeline_first_stage(), post_process=parallel_state.is_pipeline_last_stage())
    if kind == "gpt":
        cfg = TransformerConfig(**common)
        return GPTModel(cfg, transformer_layer_spec=get_gpt_layer_local_spec(num_experts=config.get("num_moe_experts")),
                        vocab_size=128, max_sequence_length=32, **stage)
    cfg = TransformerConfig(**common, gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm",
                            add_bias_linear=False, params_dtype=torch.bfloat16, bf16=True)
    return GPTModel(cfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"), vocab_size=128,
                    max_sequence_length=32, position_embedding_type="rope", share_embeddings_and_output_weights=True,
                    **stage)


def snapshot(m):
    """Every parameter's values (ties under each name) and its Megatron-core attributes."""
    out = {n: p.detach().clone() for n, p in m.named_parameters(remove_duplicate=False)}
    out["attrs"] = {n: {a: getattr(p, a) for a in ("tensor_model_parallel", "partition_dim", "partition_stride")
                        if hasattr(p, a)} for n, p in m.named_parameters(remove_duplicate=False)}
    out["ties"] = [n for n, p in m.named_parameters(remove_duplicate=False) if p is m.embedding.word_embeddings.weight]
    out["output_layer_has_weight"] = m.output_layer.weight is not None
    return out


def snapshot_filled(m):
    """snapshot, and the spec init_ filled it from (module_spec)."""
    import layerinit.torch as lt

    out = snapshot(m)
    out["spec"] = lt.module_spec(m, recipe="megatron")
    return out


def seeds(text):
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def filled(kind, how, seed):
    import layerinit.torch as lt

    if how == "own":
        torch.manual_seed(seed)
        return model(kind, True)
    if how == "made":
        return lt.make(lambda: model(kind, True), seed=seed)
    if how == "default":
        return lt.init_(model(kind, True), seed=seed)
    if how == "meta":
        with torch.device("meta"):
            m = model(kind, False)
    else:
        m = model(kind, how == "ours")
    return lt.init_(m, recipe="megatron", seed=seed)


def message(f):
    try:
        f()
    except ValueError as e:
        return str(e)
    return None


def refusals():
    """What init_ says of a model part named as the whole (a pipeline stage, an expert-parallel rank's
    experts), and whether following its advice (spec= of the whole model, name_map= to the whole's
    names) gives the part the whole's values; what it says of a config the recipe is not, and the
    embedding's std with the overrides it suggests."""
    import ast
    import re

    import layerinit.torch as lt
    from megatron.core import parallel_state

    out = {}
    world = dist.get_world_size()
    moe = dict(num_moe_experts=2 * world, moe_ffn_hidden_size=32)
    for what, sizes, config in (("pp", dict(pipeline_model_parallel_size=world), {}),
                                ("ep", dict(expert_model_parallel_size=world), moe)):
        parallel_state.destroy_model_parallel()
        parallel_state.initialize_model_parallel()
        whole = lt.init_(model("gpt", False, **config), recipe="megatron", seed=1)
        spec, values = lt.module_spec(whole), dict(whole.named_parameters())
        parallel_state.destroy_model_parallel()
        parallel_state.initialize_model_parallel(**sizes)
        part = model("gpt", False, **config)
        out[what] = message(lambda: lt.init_(part, recipe="megatron", seed=1))
        if what == "pp":  # decoder.layers.{i} is the layer layer_number - 1
            numbers = [layer.layer_number for layer in part.decoder.layers]
            name = lambda n: re.sub(r"^decoder\.layers\.(\d+)\.", lambda m: f"decoder.layers.{numbers[int(m[1])] - 1}.", n)  # noqa: E731
        else:  # experts.py: local expert i of expert-parallel rank r is expert r * (E / ep) + i
            first = parallel_state.get_expert_model_parallel_rank() * moe["num_moe_experts"] // world
            name = lambda n: re.sub(r"local_experts\.(\d+)\.", lambda m: f"local_experts.{first + int(m[1])}.", n)  # noqa: E731
        lt.init_(part, recipe="megatron", seed=1, spec=spec, name_map=name)
        out[what + "_advice"] = [n for n, p in part.named_parameters() if not torch.equal(p, values[name(n)])]
        out[what + "_names"] = [(n, name(n)) for n, _ in part.named_parameters()]
    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
    m = model("gpt", False, embedding_init_method_std=0.5)
    out["embedding_std"] = message(lambda: lt.init_(m, recipe="megatron", seed=1))
    advice = ast.literal_eval(out["embedding_std"].partition(" such as ")[2])
    lt.init_(m, recipe="megatron", seed=1, overrides=advice)
    out["advice"] = advice
    out["advice_std"] = float(m.embedding.word_embeddings.weight.std())
    own = model("gpt", False, init_method=torch.nn.init.xavier_uniform_)  # a function of the user's own
    out["own_init_method"] = message(lambda: lt.init_(own, recipe="megatron", seed=1))
    return out


def run(case):
    if case == "refusals":
        return refusals()
    kind, how, which = case.split(":")
    return {s: (snapshot if how == "own" else snapshot_filled)(filled(kind, how, s)) for s in seeds(which)}


def main():
    out_dir, cases = sys.argv[1], sys.argv[2:]
    dist.init_process_group("gloo")
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=dist.get_world_size())
    rank = dist.get_rank()
    try:
        for case in cases:
            torch.save(run(case), os.path.join(out_dir, f"{case.replace(':', '_')}.rank-{rank}.pt"))
            print(f"rank {rank}: {case} done", flush=True)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
