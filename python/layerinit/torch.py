"""Filling ``torch.nn.Module`` parameters in place with layerinit's values (docs/python.md).

:func:`init_` gives every parameter of a module the bytes ``layerinit emit`` writes for the tensor
of the same name: on the meta device it materializes the module first, tied weights are filled
once, and a local shard (a DTensor's under FSDP2 ``fully_shard`` or tensor parallelism, an
spmd_types shard's, a Megatron-core tensor-parallel shard's) is filled as its slice of the global
tensor, so the values do not depend on the mesh.
"""
from __future__ import annotations

import functools
import importlib
import sys
import warnings
import weakref
from collections.abc import Callable, Container, Mapping
from typing import Any, NamedTuple, Optional, TypeVar, Union

import torch

from . import (Composite, ModelLike, Plan, ProgressLike, Spec, _bad, _bool, _refused, _check_patterns, _core, _describe, _fill_text, _int,
               _items, _listed, _overrides, _plan, _Progress, _progress, _reporting, _show, _str, _unwrapped, hf_spec, spec as _spec)

__all__ = ["init_", "hf_spec", "make", "module_spec", "plan", "tensor_map", "torchtitan_spec"]

NameMap = Union[Mapping[str, Any], Callable[[str], Any]]

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

#: The module init_ fills and returns: its own type, so `model = init_(Model(...))` keeps Model's attributes.
M = TypeVar("M", bound=torch.nn.Module)


# ---- The description of any module: what its framework says, for the library to make a spec of ----


def _tensor_name(module: torch.nn.Module, name: str) -> str:
    """A parameter's name as a tensor's: without the components wrappers add (activation
    checkpointing, torch.compile, FSDP1; DistributedDataParallel's and DataParallel's `module.`
    when `module` is one), so wrapping a model never changes its values."""
    n = _unwrapped(name)
    if type(module).__name__ in ("DistributedDataParallel", "DataParallel") and n.startswith("module."):
        n = n[len("module."):]
    return n


def _norm_like(mod: torch.nn.Module) -> bool:
    name = type(mod).__name__
    return isinstance(mod, (torch.nn.LayerNorm, torch.nn.GroupNorm)) or "Norm" in name


def _map(fan_in: int, fan_out: int, pname: str, p: torch.Tensor) -> tuple[dict[str, Any], Optional[tuple[int, ...]]]:
    """A linear map's parameter, stored [out, in] as nn.Linear stores it: its description fields, and
    the whole parameter's shape (None for another parameter of the module)."""
    d: dict[str, Any] = {"module": "linear", "fan_in": int(fan_in), "fan_out": int(fan_out)}
    if pname == "weight" and p.dim() == 2:
        d["storage"] = "out-in"
    return d, {"weight": (int(fan_out), int(fan_in)), "bias": (int(fan_out),)}.get(pname)


def _megatron(mod: Any) -> bool:
    """Whether `mod` is Megatron-core's (or a subclass of one of its classes)."""
    return any(c.__module__.startswith("megatron.core.") for c in type(mod).__mro__)


def _reading(mod: torch.nn.Module, pname: str, p: torch.Tensor) -> tuple[dict[str, Any], Optional[tuple[int, ...]]]:
    """What a parameter's own module says of it: (the description's fields: the module's kind, a map's
    global fans and storage; the whole parameter's shape as the module declares it, or None).

    nn.Linear and nn.Embedding; Megatron-core's ColumnParallelLinear and RowParallelLinear (global
    `input_size`, `output_size`; weight [out, in]), VocabParallelEmbedding (global `num_embeddings`)
    and MoE Router (a raw `weight` [num_moe_experts, hidden_size]), read from
    megatron/core/tensor_parallel/layers.py and transformer/moe/router.py; norms, classes named
    ``*Norm*`` (Megatron's WrappedTorchNorm makes a torch LayerNorm or RMSNorm, FusedLayerNorm and
    TENorm are named so)."""
    if isinstance(mod, torch.nn.Linear):
        return _map(mod.in_features, mod.out_features, pname, p)
    if isinstance(mod, torch.nn.Embedding):
        return {"module": "embedding"}, (mod.num_embeddings, mod.embedding_dim) if pname == "weight" else None
    if _megatron(mod):
        layers = sys.modules.get("megatron.core.tensor_parallel.layers")
        router = sys.modules.get("megatron.core.transformer.moe.router")
        if layers is not None and isinstance(mod, (layers.ColumnParallelLinear, layers.RowParallelLinear)):
            return _map(mod.input_size, mod.output_size, pname, p)
        if layers is not None and isinstance(mod, layers.VocabParallelEmbedding):
            return {"module": "embedding"}, (mod.num_embeddings, mod.embedding_dim) if pname == "weight" else None
        if router is not None and isinstance(mod, router.Router):
            return _map(mod.config.hidden_size, mod.config.num_moe_experts, pname, p)
    if _norm_like(mod):
        return {"module": "norm"}, None
    return {}, None


def _description(module: torch.nn.Module, skip: Callable[[str], bool], name: str = "module",
                 places: Optional[dict[str, "_Place"]] = None) -> dict[str, Any]:
    """The model description (init/describe.hpp) of every parameter of `module` but those `skip`
    names: its global shape (`places`, default _places(module)), what its own module says of it
    (_reading) and its ties (a later name of the same Parameter); for a Megatron-core model, its
    config's init_method_std as hyper.initializer_range and its tie of the embedding and the output
    layer. The library decides roles, layers and ties. ValueError listing 0-d parameters, plain local
    shards, pieces of wrappers that do not say where they sit (_unplaced) and a Megatron-core model's
    part named as the whole (_megatron_parts)."""
    _unplaced(module)
    _megatron_parts(module)
    places = _places(module) if places is None else places
    params: list[dict[str, Any]] = []
    scalars, local_shards = [], []
    first: dict[int, str] = {}
    for mname, mod in module.named_modules(remove_duplicate=False):
        for pname, p in mod.named_parameters(recurse=False):
            real = f"{mname}.{pname}" if mname else pname
            if skip(real):
                continue
            full = _tensor_name(module, real)
            if p.dim() == 0:
                if id(p) not in first:
                    scalars.append(full)
                first.setdefault(id(p), full)
                continue
            shape = places[real].shape
            fields, declared = _reading(mod, pname, p)
            d: dict[str, Any] = {"name": full, "shape": list(shape), **fields}
            if declared is not None and tuple(declared) != shape and id(p) not in first:
                local_shards.append(f"{full} {tuple(shape)} of {tuple(declared)}")
            if id(p) in first:
                d["tied_to"] = first[id(p)]
            else:
                first[id(p)] = full
            params.append(d)
    if local_shards:
        raise _refused("module", f"{len(local_shards)} parameter(s) hold a part of their module's weight with nothing saying "
                                 f"which (a plain tensor, not a DTensor, an spmd_types shard with its PartitionSpec or a "
                                 f"Megatron-core shard with its tensor_model_parallel attributes): {_listed(local_shards)}; call "
                                 f"init_ on the meta device after parallelizing (torchtitan's to_empty drops the PartitionSpec)")
    if scalars:
        raise _refused("module", f"{len(scalars)} parameter(s) are 0-d (scalars), which layerinit does not fill: "
                                 f"{_listed(scalars)}; skip them with name_map={{{scalars[0]!r}: None}} and set them yourself")
    out: dict[str, Any] = {"name": name, "parameters": params}
    cfg = _megatron_config(module)
    if cfg is not None:
        # megatron/core/transformer/transformer_config.py: init_method_std is the std of every init method by
        # default; gpt_model.py: a shared embedding and output layer is the embedding's one Parameter.
        out["hyper"] = {"initializer_range": float(cfg.init_method_std),
                        "tie_word_embeddings": bool(getattr(module, "share_embeddings_and_output_weights", False))}
    return out


def _unplaced(module: torch.nn.Module) -> None:
    """ValueError naming the parameters that are pieces of a sharding wrapper which records no place
    layerinit reads: FSDP1's FlatParameters and the views of them use_orig_params gives
    (torch/distributed/fsdp/_flat_param.py marks both _fsdp_flattened: each rank holds a contiguous
    run of the flattened, concatenated parameters), and DeepSpeed ZeRO-3's partitions (a parameter
    with ds_id whose data is not its ds_shape: deepspeed/runtime/zero/partition_parameters.py keeps
    the rank's partition in ds_tensor and an empty data)."""
    fsdp1 = [n for n, p in module.named_parameters() if getattr(p, "_fsdp_flattened", False) is True]
    if fsdp1:
        raise _refused("module", f"{len(fsdp1)} parameter(s) are FSDP1's flattened shards (FullyShardedDataParallel; "
                                 f"_fsdp_flattened): {_listed(fsdp1)}; call init_ before wrapping the model, or shard it with "
                                 f"FSDP2's fully_shard, whose DTensor shards init_ fills in place")
    zero3 = [f"{n} {tuple(p.shape)} of {tuple(p.ds_shape)}" for n, p in module.named_parameters()
             if hasattr(p, "ds_id") and tuple(p.shape) != tuple(getattr(p, "ds_shape", p.shape))]
    if zero3:
        raise _refused("module", f"{len(zero3)} parameter(s) are DeepSpeed ZeRO-3 partitions (ds_id): {_listed(zero3)}; call "
                                 f"init_ inside deepspeed.zero.GatheredParameters(model.parameters(), modifier_rank=0), or "
                                 f"before deepspeed.zero.Init partitions them")


def _megatron_parts(module: torch.nn.Module) -> None:
    """ValueError when a Megatron-core model holds a part of the model under the names of the whole,
    where layerinit would give it another part's values: a pipeline stage (a TransformerBlock whose
    layers are not 1..config.num_layers by their layer_number: transformer_block.py numbers a stage's
    ModuleList from 0, transformer_layer.py's layer_number counts in the whole model), or an
    expert-parallel rank's experts (allreduce False: layers.py's ColumnParallelLinear and
    RowParallelLinear of an expert under expert parallelism, which experts.py names by their index
    among the rank's experts)."""
    tb = sys.modules.get("megatron.core.transformer.transformer_block")
    for name, block in module.named_modules():
        if tb is None or not isinstance(block, tb.TransformerBlock):
            continue
        numbers = [getattr(layer, "layer_number", None) for layer in block.layers]
        if numbers != list(range(1, block.config.num_layers + 1)):
            held = ", ".join(str(n - 1) if isinstance(n, int) else "?" for n in numbers)
            raise _refused("module", f"Megatron-core's {name or 'model'} holds {len(numbers)} of its config's "
                                     f"{block.config.num_layers} layers (a pipeline stage: layer_number - 1 = {held}) and names "
                                     f"them from 0; layerinit names a tensor by its layer and scales output projections by the "
                                     f"depth, so they would take other layers' values: initialize at pipeline parallelism 1, or "
                                     f"pass spec= (module_spec of the model at pipeline parallelism 1) and name_map= ({name}."
                                     f"layers.i. -> {name}.layers.(layer_number - 1).)")
    experts = [n for n, p in module.named_parameters() if getattr(p, "allreduce", True) is False]
    if experts:
        raise _refused("module", f"{len(experts)} parameter(s) are experts only this expert-parallel rank holds (Megatron-core's "
                                 f"allreduce=False), named by their index among this rank's experts, not the model's: "
                                 f"{_listed(experts)}; initialize at expert parallelism 1, or pass spec= (module_spec of the "
                                 f"model at expert parallelism 1) and name_map= (each expert's name here -> its name in the "
                                 f"model)")


def _megatron_config(module: torch.nn.Module) -> Optional[Any]:
    """A Megatron-core model's TransformerConfig (`module.config`), or None."""
    tc = sys.modules.get("megatron.core.transformer.transformer_config")
    cfg = getattr(module, "config", None)
    return cfg if tc is not None and isinstance(cfg, tc.TransformerConfig) else None


def _normal_std(fn: Any) -> Optional[float]:
    """σ of functools.partial(torch.nn.init.normal_, mean=0.0, std=σ), what megatron/core/utils.py's
    init_method_normal and scaled_init_method_normal return; None for any other function."""
    if not (isinstance(fn, functools.partial) and fn.func is torch.nn.init.normal_ and not fn.args
            and set(fn.keywords) <= {"mean", "std"} and fn.keywords.get("mean", 0.0) == 0):
        return None
    return float(fn.keywords.get("std", 1.0))


def _megatron_init_check(module: torch.nn.Module, s: Spec, described: list[_core.DescribedParameter],
                         recipe: Optional[str], overrides: Optional[Mapping[str, Any]]) -> None:
    """With recipe megatron, the library's check of it against the model's TransformerConfig (its init
    methods' σ where they are normal, its zero-centered norms): ValueError listing the parameters the
    config draws otherwise, unless overrides= names them (init/describe.hpp check_megatron_config)."""
    cfg = _megatron_config(module)
    if cfg is None or recipe is None or recipe.partition(":")[0] != "megatron":
        return
    methods = [(f, _normal_std(getattr(cfg, f, None)), repr(getattr(cfg, f, None)))
               for f in ("init_method", "output_layer_init_method", "embedding_init_method")]
    _core.check_megatron_config(methods, bool(cfg.layernorm_zero_centered_gamma), described,
                                _plan(s, dtype="fp32", recipe=recipe, overrides=overrides), list(overrides or ()))


def _module(arg: str, v: Any) -> torch.nn.Module:
    if not isinstance(v, torch.nn.Module):
        raise _refused(arg, f"{arg} must be a torch.nn.Module, got {type(v).__name__} {_show(v)}")
    return v


def _name_map(v: Any) -> Optional[NameMap]:
    """name_map as init_ reads it: None, a function of the name, or a dict copy of a mapping with str keys."""
    if v is None or callable(v):
        return v
    if not isinstance(v, Mapping):
        raise _refused("name_map", f"name_map must be a mapping or a function of the parameter name, got {type(v).__name__} "
                                   f"{_show(v)}")
    return {_str(f"name_map key {_show(k)}", k): x for k, x in _items("name_map", v)}


def _device(v: Any) -> Optional[torch.device]:
    """init_'s device=: None, or a CPU or CUDA device ("cuda" or "cuda:N") that torch and layerinit both see."""
    if v is None:
        return None
    if not isinstance(v, (str, torch.device)):
        raise _refused("device", f"device must be a str or torch.device like 'cpu' or 'cuda:0', got {type(v).__name__} {_show(v)}")
    try:
        d = torch.device(v)
    except (RuntimeError, ValueError):
        raise _refused("device", f"device {v!r} is not a device torch knows") from None
    why = _device_problem(d)
    if why is not None:
        raise _refused("device", f"device {v!r}: {why}")
    return d


def _device_problem(d: torch.device) -> Optional[str]:
    """Why layerinit cannot fill memory on `d`, or None: it fills the CPU's and every CUDA device's that
    torch and layerinit both see ("cuda" alone: torch's current device, as to_empty takes it)."""
    if d.type == "cpu":
        return None
    if d.type != "cuda":
        return "layerinit fills CPU and CUDA memory"
    seen = torch.cuda.device_count()
    if seen == 0:
        return "torch sees no CUDA device"
    index = d.index if d.index is not None else torch.cuda.current_device()
    if index >= seen:
        return f"torch sees {seen} CUDA device{'s' if seen > 1 else ''} (cuda:0 .. cuda:{seen - 1})"
    usable, why = _core.cuda_available()
    if not usable:
        return f"layerinit's CUDA backend is unusable: {why}"
    ours = _core.cuda_device_count()
    if index >= ours:
        return f"layerinit sees {ours} CUDA device{'s' if ours > 1 else ''} where torch sees {seen}"
    return None


def module_spec(module: torch.nn.Module, *, name: str = "module", recipe: Optional[str] = None,
                overrides: Optional[Mapping[str, str]] = None,
                skip: Callable[[str], bool] = lambda n: False) -> dict[str, Any]:
    """A JSON spec (as a dict) of any module, each parameter a tensor under its qualified name.

    The module's description (each parameter's global shape and owner: ``nn.Linear`` with its fans,
    ``nn.Embedding``, Megatron-core's parallel linears with their global fans, its
    VocabParallelEmbedding and Router, norms; its ties; a Megatron-core config's init_method_std)
    goes to the library, which decides with one set of rules for every adapter (docs/spec.md,
    "Descriptions"): a linear map's role from the names the recipes' sources use
    (``wo``/``w2``/``o_proj``/``down_proj``/``c_proj``/``linear_proj``/``linear_fc2``,
    ``lm_head``/``output``/``output_layer``, ``router.gate``), layer numbers from names with an
    integer component (the prefix holding the most parameters is the layers'), a tied embedding and
    head as one tensor with the head's rule.

    - ``recipe``: refuse (ValueError listing them) the parameters whose fill under that recipe
      depends on a role or layer the module does not tell, or that it has no rule for; with recipe
      megatron, those a Megatron-core model's config draws otherwise than the recipe.
    - ``skip``: names left out. A 0-d parameter is a ValueError naming it.
    """
    _module("module", module)
    if not callable(skip):
        raise _refused("skip", f"skip must be a function of the parameter name, got {type(skip).__name__} {_show(skip)}")
    s, described = _describe(_description(module, skip, _str("name", name)), recipe=recipe, overrides=overrides)
    if recipe is not None:
        _megatron_init_check(module, s, described, recipe, overrides)
    return s.to_dict()


# ---- Which tensors make up a parameter ----


# A parameter as layerinit's tensors: made from the plan of the parameter's dtype (a Composite has
# one dtype), so one description serves a module whose parameters differ in dtype.
Maker = Callable[[Plan], Composite]


def _mapped(v: Any, name: str) -> Union[str, Maker]:
    """A name_map entry: a canonical name, a Composite (used as it is), or a function of the
    Plan that returns one (``lambda p: p.composite([...], groups=...)``)."""
    if isinstance(v, str):
        return v
    if isinstance(v, Composite):
        return lambda pl: v
    if callable(v):
        return v
    raise _refused("name_map", f"name_map[{name!r}] must be a canonical name, a layerinit.Composite, a function of the Plan "
                               f"returning one, or None; got {type(v).__name__}")


def _makers(names: list[tuple[str, tuple[int, ...]]], p0: Plan, spec_names: set[str],
            name_map: Optional[NameMap] = None, rename: Callable[[str], str] = lambda n: n) -> dict[str, Maker]:
    """How each parameter (name, global shape) is made of p0's tensors: the name itself (after
    ``name_map``), Mixtral's ``block_sparse_moe`` under transformers 5's ``mlp``, transformers 5's
    fused experts (the library's Plan.fused_experts), or what ``name_map`` says. A name that
    ``name_map`` maps to None is skipped (``spec_names``: the names p0 lists). ValueError listing the
    names without a tensor."""
    out: dict[str, Maker] = {}
    missing = []
    for name, shape in names:
        target: Any = rename(name)
        if name_map is not None:
            if callable(name_map):
                target = name_map(name)
            elif name in name_map:
                target = name_map[name]
            if target is None:
                continue
            target = _mapped(target, name)
        if not isinstance(target, str):
            out[name] = target
            continue
        moe = target.replace(".mlp.", ".block_sparse_moe.")
        whole = target if target in spec_names else moe if moe in spec_names else None
        if whole is not None:
            out[name] = lambda pl, w=whole: pl.composite(w)
        elif p0.fused_experts(target, shape) is not None:
            out[name] = lambda pl, t=target, s=shape: pl.fused_experts(t, s)
        else:
            missing.append(name if target == name else f"{name} (mapped to {target})")
    if missing:
        raise _refused("name_map", f"no layerinit tensor for {len(missing)} parameter(s): {_listed(missing)}; pass name_map= "
                                   f"(module name -> canonical name, a Composite, or a function of the Plan returning one; None "
                                   f"to skip)")
    return out


def tensor_map(names: list[tuple[str, tuple[int, ...]]], plan: Plan,
               name_map: Optional[NameMap] = None) -> dict[str, Composite]:
    """Each parameter (name, global shape) as a :class:`layerinit.Composite` of ``plan``'s tensors,
    in the plan's dtype: the name itself (after ``name_map``), Mixtral's ``block_sparse_moe`` under
    transformers 5's ``mlp``, transformers 5's fused experts, or what ``name_map`` returns for it
    (a canonical name, a Composite, or a function of the Plan returning one; None skips it).
    ValueError listing the names without a tensor, or naming one whose shape is not its composite's."""
    shapes = dict(names)
    return {name: _checked(name, shapes[name], make(plan), None) for name, make in _makers(names, plan, {t[0] for t in plan.tensors()}, name_map).items()}


def _checked(name: str, shape: tuple[int, ...], c: Any, dtype: Optional[str]) -> Composite:
    """`c` when it is a Composite of `shape` (and `dtype`); else a ValueError naming the parameter."""
    if not isinstance(c, Composite):
        raise _refused("name_map", f"name_map for {name} returned {type(c).__name__}, not a layerinit.Composite")
    if tuple(c.shape) != tuple(shape):
        what = ", ".join(sorted({p["name"] for p in c.parts}))
        raise _refused("name_map", f"parameter {name} of shape {tuple(shape)}: layerinit's {what} is {list(c.shape)}")
    if dtype is not None and c.dtype != dtype:
        raise _refused("name_map", f"parameter {name} is {dtype}, its layerinit.Composite {c.dtype}")
    return c


# ---- torchtitan models: their tensors in Hugging Face names, as torchtitan's own adapter loads them ----

def _titan_class(module: torch.nn.Module) -> Optional[type]:
    """The torchtitan model class of `module` (FSDP2's fully_shard makes a subclass of it), or None."""
    if not hasattr(getattr(module, "config", None), "layers"):
        return None
    return next((c for c in type(module).__mro__ if c.__module__.startswith("torchtitan.models.")), None)


def _is_torchtitan(module: torch.nn.Module) -> bool:
    return _titan_class(module) is not None


def _titan_family(model: torch.nn.Module) -> tuple[str, str, bool]:
    """(torchtitan package, the Hugging Face family whose checkpoints its adapter loads, whether the adapter
    permutes q/k rows to interleaved RoPE), as the family records say (torchtitan_family, init/hf_spec.hpp)."""
    cls = _titan_class(model)
    pkg = cls.__module__.split(".")[2]  # type: ignore[union-attr]
    found = _core.torchtitan_family(pkg, getattr(model.config.layers[-1], "moe", None) is not None)
    if found is None:
        raise _refused("module", f"torchtitan model {cls.__name__} ({pkg}) has no layerinit mapping (known: "  # type: ignore[union-attr]
                                 f"{', '.join(_core.torchtitan_packages())}): pass spec= and name_map=")
    return (pkg, *found)


def _titan_adapter(model: torch.nn.Module) -> Any:
    """The state-dict adapter the model's torchtitan package exports, made as its checkpointer
    makes it (no Hugging Face assets path)."""
    from torchtitan.protocols.state_dict_adapter import BaseStateDictAdapter

    pkg = importlib.import_module(_titan_class(model).__module__.rsplit(".", 1)[0])  # type: ignore[union-attr]
    found = [v for v in vars(pkg).values() if isinstance(v, type) and issubclass(v, BaseStateDictAdapter)
             and v.__module__.startswith(pkg.__name__ + ".")]
    if len(found) != 1:
        raise _refused("module", f"torchtitan package {pkg.__name__} exports {len(found)} state-dict adapters, not one")
    return found[0](model.config, None)


def _titan_hyper(model: torch.nn.Module, family: str) -> dict[str, Any]:
    """The numbers layerinit's Hyper carries, from the torchtitan model config (recipes read
    tie_word_embeddings and num_experts; a llama spec's config.json reads the rest)."""
    cfg = model.config
    layer = cfg.layers[-1]
    att = layer.attention
    n_heads = att.n_heads
    hyper: dict[str, Any] = {"vocab_size": cfg.vocab_size, "hidden_size": cfg.dim, "num_heads": n_heads,
                             "norm_eps": cfg.norm.eps, "tie_word_embeddings": bool(cfg.enable_weight_tying)}
    if getattr(att, "n_kv_heads", None):
        hyper["num_kv_heads"] = att.n_kv_heads
    if getattr(att, "head_dim", None):
        hyper["head_dim"] = att.head_dim
    dense = next((c.feed_forward for c in cfg.layers if c.feed_forward is not None), None)
    if dense is not None:
        hyper["intermediate_size"] = dense.w1.out_features
    if layer.moe is not None:
        hyper["num_experts"] = layer.moe.num_experts
        hyper["experts_per_token"] = layer.moe.router.top_k
    rope = att.rope
    hyper["rope_theta"] = rope.theta
    hyper["max_position_embeddings"] = rope.max_seq_len
    if family == "llama" and rope.scaling == "llama":
        # A cache shorter than the scaling's original context (a short training run) still has it.
        hyper["max_position_embeddings"] = max(rope.max_seq_len, rope.original_max_position_embeddings)
        hyper["rope_scaling"] = {"rope_type": "llama3", "factor": rope.scaling_factor,
                                 "low_freq_factor": rope.low_freq_factor, "high_freq_factor": rope.high_freq_factor,
                                 "original_max_position_embeddings": rope.original_max_position_embeddings}
    return hyper


def _titan(model: torch.nn.Module) -> tuple[Spec, dict[str, Maker]]:
    """(spec in Hugging Face names, how each parameter and buffer is made of its tensors) of a torchtitan model:
    the tensors `layerinit emit` writes and torchtitan's adapter (`from_hf`) loads into it. The library maps
    them (torchtitan_parameters, init/describe.hpp); this reads the model, its config and its adapter."""
    from torchtitan.models.common.attention import FusedQKVLinear

    pkg, family, interleaved = _titan_family(model)
    cfg = model.config
    if getattr(cfg, "mtp_layers", None):
        raise _refused("module", "torchtitan DeepSeek-V3 with multi-token prediction layers (mtp_layers) has no layerinit "
                                 "mapping: pass spec= and name_map=")
    adapter = _titan_adapter(model)
    if not interleaved and hasattr(adapter, "_reverse_permute"):
        raise _refused("module", f"torchtitan's {type(adapter).__name__} permutes rows in a way layerinit does not know")
    att = cfg.layers[-1].attention
    fused = [(_tensor_name(model, n), m.head_dim, m.heads_per_kv) for n, m in model.named_modules()
             if isinstance(m, FusedQKVLinear)]
    _, described = _describe(_description(model, lambda n: False))
    spec, parts = _core.torchtitan_spec(
        {"name": f"torchtitan-{pkg}", "family": family, "hyper": _titan_hyper(model, family), "parameters": []}, pkg, type(adapter).__name__,
        [(v, k) for k, v in adapter.from_hf_map.items() if v is not None], interleaved, att.n_heads,
        getattr(att, "n_kv_heads", None) or att.n_heads, cfg.dim, fused, described,
        [(_tensor_name(model, n), list(b.shape)) for n, b in model.named_buffers()])
    makers: dict[str, Maker] = {}
    for name, templates, whole, rows, stack, groups in parts:
        makers[name] = (lambda pl, n=templates[0]: pl.composite(n)) if whole else (
            lambda pl, t=templates, r=rows, s=stack, g=groups: pl.composite(t, stack=s, rows=r, groups=g))
    return spec, makers


def torchtitan_spec(model: torch.nn.Module) -> dict[str, Any]:
    """The spec (a dict, docs/spec.md) of a torchtitan llama3, qwen3 or deepseek_v3 model in
    Hugging Face names: what ``layerinit emit --spec`` writes and torchtitan's own state-dict adapter
    loads into ``model``. :func:`init_` fills such a model with the same values, no map needed."""
    if not _is_torchtitan(model):
        raise _refused("module", f"{type(model).__name__} is not a torchtitan model")
    return _titan(model)[0].to_dict()


# ---- Where each local tensor sits in its parameter ----


def _dtensor_type() -> Optional[type]:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch without distributed
        return None
    return DTensor


class _Place(NamedTuple):
    """Where a local tensor sits in its parameter: the parameter's global shape, and the boxes of it
    the local tensor holds side by side, each (offset in the local tensor, offset in the parameter,
    shape): one box, or several for Megatron-core's strided shards. `problem` says why it is not
    filled in place (a Partial DTensor); its boxes are then none."""
    shape: tuple[int, ...]
    boxes: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]
    problem: Optional[str] = None


def _box(shape: tuple[int, ...], offset: tuple[int, ...], local: tuple[int, ...]) -> _Place:
    """One box: a local tensor of shape `local` at `offset` of a parameter of `shape`."""
    return _Place(tuple(int(d) for d in shape), ((tuple(0 for _ in local), tuple(int(o) for o in offset),
                                                  tuple(int(d) for d in local)),))


def _spmd_place(t: torch.Tensor) -> Optional[_Place]:
    """The place of a local shard that torchtitan's spmd_types backend (its default for tensor
    parallelism) annotates with a PartitionSpec: each sharded dimension split over each of its mesh
    axes in turn, this rank taking its place in each axis's process group, as the library's
    chunked_shard places it. None for a tensor without one."""
    try:
        from spmd_types._mesh_axis import _pg_to_mesh_axis
        from spmd_types.runtime import get_partition_spec
    except ImportError:
        return None
    spec = get_partition_spec(t)
    if spec is None or all(e is None for e in spec):
        return None
    import torch.distributed as dist

    splits = []
    for d, entry in enumerate(spec):
        for axis in () if entry is None else entry if isinstance(entry, tuple) else (entry,):
            group = next((g for g, a in list(_pg_to_mesh_axis.items()) if a == axis), None)
            if group is None:
                raise _refused("module", f"spmd_types mesh axis {axis} has no process group on this rank")
            splits.append((d, axis.size(), dist.get_rank(group)))
    return _Place(*_core.chunked_shard(tuple(t.shape), splits))


def _dtensor_place(t: torch.Tensor) -> _Place:
    """A DTensor's local shard at its global offset (compute_local_shape_and_global_offset); a
    placement other than Shard and Replicate is a problem."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape = tuple(int(d) for d in t.shape)
    for p in t.placements:
        if type(p) not in (Shard, Replicate):
            return _Place(shape, (), f"DTensor placement {p} is not filled in place (Shard and Replicate are)")
    local = _local_data(t)
    piece, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    if tuple(piece) != tuple(local.shape):
        return _Place(shape, (), f"DTensor local shape {tuple(local.shape)} is not the piece {tuple(piece)} its "
                                 f"placements give")
    return _box(shape, tuple(offset), tuple(piece))


# Megatron-core's annotations of a parameter (megatron/core/tensor_parallel/layers.py:
# set_tensor_model_parallel_attributes, _MODEL_PARALLEL_ATTRIBUTE_DEFAULTS; ColumnParallelLinear and
# RowParallelLinear's allreduce; Router's and the norms' sequence_parallel; gpt_model.py and
# language_module.py's embedding and output marks), which its optimizer and gradient reduction read.
_MEGATRON_ATTRS = ("tensor_model_parallel", "partition_dim", "partition_stride", "allreduce", "sequence_parallel",
                   "expert_tp", "is_qkv", "is_embedding_or_output_parameter", "shared", "shared_embedding",
                   "zero_out_wgrad")


def _megatron_place(t: torch.Tensor, tp: tuple[int, int], split: Optional[tuple[int, int]]) -> Optional[_Place]:
    """The place of a Megatron-core tensor-parallel shard on rank `tp[0]` of `tp[1]`, split along
    `partition_dim` with `partition_stride` as its attributes say (`tensor_model_parallel`), else as
    its module does (`split`, _megatron_splits), as the library's strided_shard places it (the way
    _initialize_affine_weight_cpu cuts the master weight). None for a tensor neither splits."""
    if getattr(t, "tensor_model_parallel", False) is True:
        split = int(getattr(t, "partition_dim", -1)), int(getattr(t, "partition_stride", 1))
    if split is None:
        return None
    return _Place(*_core.strided_shard(tuple(t.shape), split[0], split[1], tp[0], tp[1]))


def _megatron_splits(module: torch.nn.Module) -> dict[int, tuple[tuple[int, int], Optional[tuple[int, int]]]]:
    """id(parameter) -> ((rank, size) of its Megatron-core module's tensor-parallel group, the
    (partition_dim, partition_stride) the module splits it with, or None), for the parameters of
    Megatron-core modules with a `tp_group`. A module's __init__ (layers.py) hands the split to
    _initialize_affine_weight_cpu, which sets it as the weight's attributes; with
    perform_initialization=False nothing sets them on the weight, so it is read from the module here:
    ColumnParallelLinear splits weight and bias along 0 with its stride (what its bias's attributes
    say, which it always sets; without a bias 1, but 2 for an MLP's linear_fc1 of a gated linear
    unit, mlp.py:103-115), RowParallelLinear its weight along 1 (not its bias), VocabParallelEmbedding
    its weight along 0."""
    layers = sys.modules.get("megatron.core.tensor_parallel.layers")
    mlp = sys.modules.get("megatron.core.transformer.mlp")
    if layers is None:
        return {}
    fc1_stride: dict[int, int] = {}
    for mod in module.modules():
        if mlp is not None and isinstance(mod, mlp.MLP) and isinstance(getattr(mod, "linear_fc1", None), torch.nn.Module):
            glu = bool(mod.config.gated_linear_unit) and not getattr(mod.config, "use_kitchen", False)
            fc1_stride[id(mod.linear_fc1)] = 2 if glu else 1
    out: dict[int, tuple[tuple[int, int], Optional[tuple[int, int]]]] = {}
    for mod in module.modules():
        group = _megatron_group(mod)
        if group is None:
            continue
        for pname, p in mod.named_parameters(recurse=False):
            split: Optional[tuple[int, int]] = None
            if isinstance(mod, layers.ColumnParallelLinear):
                bias = mod.bias if isinstance(mod.bias, torch.Tensor) else None
                split = 0, int(getattr(bias, "partition_stride", 0) or fc1_stride.get(id(mod), 1))
            elif isinstance(mod, layers.RowParallelLinear):
                split = (1, 1) if pname == "weight" else None
            elif isinstance(mod, layers.VocabParallelEmbedding):
                split = 0, 1
            out[id(p)] = group, split
    return out


def _megatron_group(mod: torch.nn.Module) -> Optional[tuple[int, int]]:
    """(rank, size) in the tensor-parallel group a Megatron-core module splits its parameters over:
    its `tp_group`, which its __init__ hands _initialize_affine_weight_cpu (layers.py), read as
    megatron/core/utils.py's get_pg_rank and get_pg_size read it (None, or no torch.distributed: rank
    0 of 1). None for a module without one."""
    if not _megatron(mod) or not hasattr(mod, "tp_group"):
        return None
    import torch.distributed as dist

    group = mod.tp_group
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return int(group.rank()), int(group.size())


def _megatron_parallel_state() -> tuple[int, int]:
    """(rank, size) of megatron.core.parallel_state's tensor-parallel group (get_tensor_model_parallel_rank,
    _world_size), for a marked tensor whose module has no group of its own; rank 0 of 1 before
    initialize_model_parallel."""
    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is None or not ps.model_parallel_is_initialized():
        return 0, 1
    return int(ps.get_tensor_model_parallel_rank()), int(ps.get_tensor_model_parallel_world_size())


def _place(t: torch.Tensor, megatron: Optional[tuple[tuple[int, int], Optional[tuple[int, int]]]] = None) -> _Place:
    """Where `t` sits in its parameter: a DTensor's shard, an spmd_types shard's box, a Megatron-core
    shard's boxes (`megatron`: its module's group and split, _megatron_splits; else parallel_state's
    group and the tensor's attributes), else the whole."""
    DTensor = _dtensor_type()
    if DTensor is not None and isinstance(t, DTensor):
        return _dtensor_place(t)
    spmd = _spmd_place(t)  # on the Parameter itself: its .data has no annotation
    if spmd is not None:
        return spmd
    tp, split = megatron if megatron is not None else (None, None)
    if tp is None and getattr(t, "tensor_model_parallel", False) is True:
        tp = _megatron_parallel_state()
    place = _megatron_place(t, tp or (0, 1), split)
    return place if place is not None else _box(tuple(t.shape), tuple(0 for _ in t.shape), tuple(t.shape))


def _places(module: torch.nn.Module) -> dict[str, _Place]:
    """The place of every parameter and buffer of `module`, under each of its names."""
    megatron = _megatron_splits(module)
    tensors = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    return {n: _place(t, megatron.get(id(t))) for n, t in tensors}


def _local_data(t: torch.Tensor) -> torch.Tensor:
    """The memory a parameter or buffer's fill writes: a DTensor's local tensor, else its data."""
    data = t.data if isinstance(t, torch.nn.Parameter) else t
    DTensor = _dtensor_type()
    return data._local_tensor if DTensor is not None and isinstance(data, DTensor) else data


# Annotations that say where a tensor sits, which to_empty drops with the Parameter: spmd_types'
# (spmd_types/_type_attr.py, runtime.py) and Megatron-core's.
_ANNOTATIONS = ("_local_type", "_partition_spec") + _MEGATRON_ATTRS


# ---- Materializing, buffers ----


def _retie(module: torch.nn.Module, groups: list[list[str]]) -> None:
    """Makes every name of each group the same Parameter again (to_empty re-creates them apart)."""
    for names in groups:
        first = module.get_parameter(names[0])
        for n in names[1:]:
            owner, _, attr = n.rpartition(".")
            setattr(module.get_submodule(owner) if owner else module, attr, first)


def _materialize(module: torch.nn.Module, device: Optional[Union[str, torch.device]]) -> bool:
    """to_empty on `device` (default: a DTensor's mesh device type, else "cpu") with ties and
    annotations (_ANNOTATIONS) kept, if anything is on the meta device; whether it was."""
    tensors = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    if not any(t.is_meta for _, t in tensors):
        return False
    groups: dict[int, list[str]] = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(n)
    annotations = {n: {a: getattr(t, a) for a in _ANNOTATIONS if hasattr(t, a)} for n, t in tensors}
    module.to_empty(device=_materialized_on(module, device))
    _retie(module, [g for g in groups.values() if len(g) > 1])
    now = dict(module.named_parameters(remove_duplicate=False))
    now.update(module.named_buffers(remove_duplicate=False))
    for n, attrs in annotations.items():
        for a, v in attrs.items():
            setattr(now[n], a, v)
    return True


def _materialized_on(module: torch.nn.Module, device: Optional[Union[str, torch.device]]) -> torch.device:
    """Where _materialize puts a meta module: `device`, else a DTensor's mesh device type, else the CPU."""
    if device is not None:
        return torch.device(device)
    DTensor = _dtensor_type()
    for t in list(module.parameters()) + list(module.buffers()):
        if DTensor is not None and isinstance(t, DTensor):
            return torch.device(t.device_mesh.device_type)
    return torch.device("cpu")


def _run_on_plain_buffers(mod: torch.nn.Module, code: Callable[[], None]) -> None:
    """Runs the model's own buffer code on `mod` with its DTensor buffers as plain tensors of their
    global shape, then keeps each rank's piece of the result under the same placements: the code
    (an in-place copy_ as transformers', or a re-assignment as torchtitan's) sees ordinary tensors,
    and no rank talks to another."""
    DTensor = _dtensor_type()
    dist = {n: b for n, b in mod._buffers.items() if DTensor is not None and isinstance(b, DTensor)}
    for n, b in dist.items():
        problem = _dtensor_place(b).problem
        if problem is not None:
            raise _refused("module", f"buffer {n}: {problem}")
        mod._buffers[n] = torch.empty(b.shape, dtype=b.dtype, device=b._local_tensor.device)
    try:
        code()
    finally:
        for n, b in dist.items():
            new = mod._buffers.get(n)
            if new is None or isinstance(new, DTensor):
                continue
            from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

            shape, offset = compute_local_shape_and_global_offset(new.shape, b.device_mesh, b.placements)
            piece = new[tuple(slice(int(o), int(o) + int(s)) for o, s in zip(offset, shape))].contiguous()
            mod._buffers[n] = DTensor.from_local(piece, b.device_mesh, b.placements, run_check=False,
                                                 shape=new.shape, stride=new.stride())


def _compute_buffers(module: torch.nn.Module, meta: set[str]) -> list[str]:
    """Computes the buffers in `meta` (those no spec names, on the meta device before to_empty) with
    the model's own code: torchtitan's `_init_self_buffers` of the module that owns them, the
    module's own `reset_running_stats` (BatchNorm's running mean, variance and batch count, as a new
    module holds them), transformers' `_init_weights` (rotary inv_freq); returns the ones no code
    computes."""
    hf_init = getattr(module, "_init_weights", None)  # transformers' PreTrainedModel
    left = []
    for mname, mod in module.named_modules():
        own = sorted(f"{mname}.{b}" if mname else b for b, _ in mod.named_buffers(recurse=False))
        own = [n for n in own if n in meta]
        if not own:
            continue
        titan = getattr(mod, "_init_self_buffers", None)
        base = getattr(type(mod), "_init_self_buffers", None)
        if callable(titan) and getattr(base, "__qualname__", "") != "Module._init_self_buffers":  # not the no-op
            _run_on_plain_buffers(mod, lambda: titan(buffer_device=None))
        elif callable(getattr(mod, "reset_running_stats", None)):
            _run_on_plain_buffers(mod, mod.reset_running_stats)
        elif hf_init is not None:
            _run_on_plain_buffers(mod, lambda: hf_init(mod))
        else:
            left += own
    return left


def _materialize_and_compute(module: torch.nn.Module, device: Optional[Union[str, torch.device]],
                             meta_buffers: set[str], skipped: list[str]) -> None:
    """Materializes a meta module and computes its buffers; warns naming what to_empty left
    uninitialized: buffers no code computes, and the meta parameters in `skipped` (name_map None)."""
    if _materialize(module, device):
        left = _compute_buffers(module, meta_buffers)
        if left:
            warnings.warn(f"buffers left uninitialized after to_empty (no spec names them and the model has no code "
                          f"for them): {sorted(left)}; compute them with the model's own code", stacklevel=4)
        if skipped:
            warnings.warn(f"parameters skipped with name_map (None) hold uninitialized memory after to_empty: "
                          f"{sorted(skipped)}; set them yourself", stacklevel=4)


def _meta_params(module: torch.nn.Module, filled: Container[str]) -> list[str]:
    """The meta parameters init_ does not fill (skipped by name_map): to_empty leaves them uninitialized."""
    return [n for n, p in module.named_parameters() if p.is_meta and n not in filled]


def _layout_problem(shape: tuple[int, ...], strides: tuple[int, ...]) -> Optional[str]:
    """Why a tensor of this shape and these strides cannot be filled in place, or None: its last
    dimension must be contiguous (the library's strided fill) and no two elements may share memory
    (an expanded tensor's stride 0, an as_strided overlap: the fills would overwrite each other)."""
    dims = sorted((st, sz) for sz, st in zip(shape, strides) if sz > 1)
    if not dims:
        return None
    if dims[0][0] == 0:
        return f"is expanded (strides {tuple(strides)}): its elements share memory"
    if shape[-1] > 1 and strides[-1] != 1:
        return f"is not contiguous in its last dimension (strides {tuple(strides)}): fill a contiguous tensor"
    span = 0  # the furthest element offset the smaller strides reach
    for st, sz in dims:
        if st <= span:
            return f"overlaps itself (strides {tuple(strides)} of shape {tuple(shape)})"
        span += st * (sz - 1)
    return None


def _check_targets(targets: list[tuple[str, torch.Tensor]], composites: dict[str, Composite],
                   places: dict[str, _Place], device: Optional[torch.device], module: torch.nn.Module) -> None:
    """Every check init_ can refuse a parameter (or buffer) for, done on all of them before anything
    is materialized or written: its dtype, its place (a DTensor's placements: _Place.problem), the
    memory its fill writes (the
    local shard's layout, as to_empty will make it for a meta tensor; its device), and that no two
    of them that hold different values share memory (tied parameters are one Parameter, filled once).
    ValueError listing them."""
    problems: list[str] = []
    regions = []  # (storage, first byte, past the last byte, name, what is written there)
    meta_device: Optional[torch.device] = None  # where to_empty will put the meta tensors
    for n, t in targets:
        if t.dtype not in _DTYPES:
            problems.append(f"{n} is {t.dtype} (layerinit fills float32, float16 and bfloat16)")
            continue
        if places[n].problem is not None:
            problems.append(f"{n}: {places[n].problem}")
            continue
        local = _local_data(t)
        if local.numel() == 0:
            continue
        if local.is_meta:
            meta_device = where = meta_device or _materialized_on(module, device)
            layout = torch.empty_like(local)  # on the meta device: the strides to_empty gives it
        else:
            where, layout = local.device, local
        why = _device_problem(where)
        if why is not None:
            problems.append(f"{n} is on {where}: {why}")
            continue
        why = _layout_problem(tuple(layout.shape), tuple(layout.stride()))
        if why is not None:
            problems.append(f"{n} {why}")
            continue
        if not local.is_meta:  # to_empty gives each meta tensor memory of its own
            size = local.element_size()
            start = local.storage_offset() * size
            end = start + (sum((d - 1) * st for d, st in zip(local.shape, local.stride())) + 1) * size
            what = (composites[n], places[n].boxes, local.data_ptr(), tuple(local.shape), tuple(local.stride()))
            regions.append(((local.device, local.untyped_storage().data_ptr()), start, end, n, what))
    if problems:
        raise _refused("module", f"{len(problems)} parameter(s) layerinit cannot fill in place: {_listed(problems)}")
    regions.sort(key=lambda r: (str(r[0][0]), r[0][1], r[1]))
    widest = None  # of the regions so far in this storage, the one reaching furthest
    for r in regions:
        if widest is not None and widest[0] == r[0] and r[1] < widest[2] and widest[4] != r[4]:
            raise _refused("module", f"parameters {widest[3]} and {r[3]} share memory but hold different tensors: filling one "
                                     f"overwrites the other; tie them (one Parameter) or give each its own storage")
        if widest is None or widest[0] != r[0] or r[2] > widest[2]:
            widest = r


# ---- The model's own init: its code run on meta tensors under the recorder (_torch_record) ----


def _post_order(module: torch.nn.Module) -> list[torch.nn.Module]:
    """Every module once, children before their parent: the order their constructors finish in."""
    out: list[torch.nn.Module] = []
    seen: set[int] = set()

    def visit(m: torch.nn.Module) -> None:
        if id(m) in seen:
            return
        seen.add(id(m))
        for c in m.children():
            visit(c)
        out.append(m)

    visit(module)
    return out


def _is_transformers(module: torch.nn.Module) -> bool:
    return any(c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel" for c in type(module).__mro__)


def _own_init_code(module: torch.nn.Module) -> list[Callable[[], Any]]:
    """The code that initializes `module`, in the order its framework runs it: torchtitan's
    ``init_states`` (every module's ``param_init`` or ``reset_parameters``);
    else each module's ``reset_parameters()`` (``_reset_parameters()``: nn.MultiheadAttention,
    nn.Transformer), children first as their constructors run them, then transformers'
    ``init_weights()`` (``_init_weights`` of every module, then the ties)."""
    if _is_torchtitan(module) and callable(getattr(module, "init_states", None)):
        return [lambda: module.init_states(buffer_device=None)]
    code: list[Callable[[], Any]] = []
    for m in _post_order(module):
        fn = getattr(m, "reset_parameters", None) or getattr(m, "_reset_parameters", None)
        if callable(fn):
            code.append(fn)
    if _is_transformers(module) and callable(getattr(module, "init_weights", None)):
        code.append(module.init_weights)
    return code


def _record_own_init(module: torch.nn.Module, names: list[str]) -> dict[str, dict[str, Any]]:
    """Runs the module's own init code (_own_init_code) on meta stand-ins of its parameters and
    buffers under the recorder and returns, for each parameter name in `names`, the library's replay
    of it: fill, regions, copy_of (a name), refusal. Nothing of the module changes: its parameters,
    buffers and submodules are put back as they were, whatever the code did.

    Ties: kept while the code runs (a write through one name is a write through all), except for
    frameworks whose init code ties them itself after initializing them apart (transformers'
    init_weights, torchtitan's init_states), whose names run untied, as they do there."""
    from . import _torch_record

    retie = _is_transformers(module) or _is_torchtitan(module)
    modules = list(module.modules())
    saved = [(m, dict(m._parameters), dict(m._buffers), dict(m._modules)) for m in modules]
    flags = [(m, m.__dict__["_is_hf_initialized"]) for m in modules if "_is_hf_initialized" in m.__dict__]
    stand_in: dict[Any, torch.nn.Parameter] = {}
    places = _places(module)
    for mname, m in module.named_modules(remove_duplicate=False):
        for attr, p in list(m._parameters.items()):
            if p is None:
                continue
            full = f"{mname}.{attr}" if mname else attr
            key = full if retie else id(p)
            if key not in stand_in:  # the whole parameter: a shard's init code is the whole tensor's
                stand_in[key] = torch.nn.Parameter(torch.empty(places[full].shape, dtype=p.dtype, device="meta"),
                                                   requires_grad=p.requires_grad)
            m._parameters[attr] = stand_in[key]
        for attr, b in list(m._buffers.items()):  # plain meta tensors too: the code writes nothing real
            if b is not None:
                m._buffers[attr] = torch.empty(tuple(b.shape), dtype=b.dtype, device="meta")
    for m, _ in flags:
        del m.__dict__["_is_hf_initialized"]
    final: dict[str, Any] = {}
    try:
        with _torch_record.recording() as rec:
            for p in stand_in.values():
                rec.root(p, made=True)
            for code in _own_init_code(module):
                code()
            for n in names:
                owner, _, attr = n.rpartition(".")
                try:
                    final[n] = (module.get_submodule(owner) if owner else module)._parameters.get(attr)
                except AttributeError:
                    final[n] = None
    finally:
        for m, params, buffers, children in saved:
            m._parameters.clear()
            m._parameters.update(params)
            m._buffers.clear()
            m._buffers.update(buffers)
            m._modules.clear()
            m._modules.update(children)
        for m, v in flags:
            m.__dict__["_is_hf_initialized"] = v
    return _replayed(rec, final, names)


def _replayed(rec: Any, final: dict[str, Any], names: list[str]) -> dict[str, dict[str, Any]]:
    """The library's replay of a recording, for each parameter name: the tensor `final` says it
    ended as (the whole of a recorded tensor, else refused), its fill, regions, copy_of (a name) and
    refusal, and `tensor`, the name its values are recorded under (a tie's first)."""
    root_name: dict[int, str] = {}
    where: dict[str, Optional[int]] = {}
    for n in names:
        t = final[n]
        b = rec.box(t) if isinstance(t, torch.Tensor) else None
        whole = b is not None and b[0].shape == list(t.shape) and (t.numel() == 0 or (not any(b[1]) and b[2] == b[0].shape))
        where[n] = b[0].index if whole else None
        if whole:
            root_name.setdefault(b[0].index, n)
    replayed = rec.replay(root_name)
    out: dict[str, dict[str, Any]] = {}
    for n in names:
        t, i = final[n], where[n]
        if i is None:
            why = ("removed by its init code" if not isinstance(t, torch.Tensor) else
                   "made by its init code as part of a larger tensor")
            out[n] = {"fill": None, "regions": [], "copy_of": None, "refusal": why}
            continue
        r = dict(replayed[i])
        r["copy_of"] = None if r["copy_of"] is None else root_name.get(r["copy_of"])
        r["data"] = None if r["data"] is None else rec.data[r["data"]]
        r["tensor"] = root_name[i]
        out[n] = r
    return out


def _own_inits(module: torch.nn.Module, entries: list[tuple[str, torch.Tensor]], makers: dict[str, "Maker"],
               p0: Plan, overrides: Optional[Mapping[str, str]],
               recorded: Optional[dict[str, dict[str, Any]]] = None
               ) -> tuple[dict[str, tuple[Any, list[Any]]], dict[str, torch.Tensor]]:
    """(The canonical tensors' inits (fill, regions) that make each parameter in `entries` what the
    module's own init code makes it, the parameters its code computes without random numbers with
    their values). `makers` is updated: a parameter that holds another's values (a tie made by
    copy_) is made as that one, a computed one is not made by layerinit. ValueError listing every
    parameter whose init no fill says (and no override covers), with what was seen and what would
    tell it, before anything is written."""
    names = [n for n, t in entries if isinstance(t, torch.nn.Parameter) and n in makers]
    if recorded is None:
        recorded = _record_own_init(module, names)
    patterns = list(overrides or ())
    inits: dict[str, tuple[Any, list[Any]]] = {}
    computed: dict[str, torch.Tensor] = {}
    refused: list[str] = []
    for n in names:
        r = recorded.get(n) or {"refusal": "not recorded", "fill": None, "regions": [], "copy_of": None}
        c = makers[n](p0)
        tensors = c.tensors()
        if r["refusal"] and all(any(_core.name_matches(pat, t) for pat in patterns) for t in tensors):
            continue  # an override fills it
        if r["refusal"]:
            refused.append(f"{n}: {r['refusal']}")
            continue
        if r["copy_of"] is not None and r["copy_of"] != n:
            src = r["copy_of"]
            if src not in makers or tuple(makers[src](p0).shape) != tuple(c.shape):
                refused.append(f"{n}: a copy of {src}, which layerinit fills otherwise")
            else:
                makers[n] = makers[src]
            continue
        if r["copy_of"] is not None:
            continue
        if r.get("data") is not None:  # computed without random numbers: the code's own values, copied
            computed[n] = r["data"]
            for t in tensors:  # planned, never filled: layerinit writes none of its values
                inits.setdefault(t, (_core.Fill.parse("constant(0)"), []))
            continue
        single = c.whole
        if r["regions"] and not single:
            refused.append(f"{n}: boxes of it written apart ({len(r['regions'])}), in a parameter made of several "
                           f"tensors ({_listed(tensors, 3)})")
            continue
        for t in tensors:
            init = (r["fill"], r["regions"] if single else [])
            if t in inits and inits[t] != init:
                refused.append(f"{n}: its tensor {t} is also another parameter's, initialized otherwise")
            inits[t] = init
    if refused:
        raise _refused("module",
            f"layerinit.torch.init_: the model's own init code gives {len(refused)} parameter(s) values no fill says: "
            f"{'; '.join(refused[:8])}{f'; and {len(refused) - 8} more' if len(refused) > 8 else ''}. Tell each with "
            f"overrides={{name glob: fill}} (e.g. {{{refused[0].split(':')[0]!r}: 'normal(0, 0.02)'}}), fill them all "
            f"with a named recipe (recipe='pytorch-default', 'hf', ...), or, when its constructor initializes it, make "
            f"the model under layerinit.torch.make(lambda: ...), which records the constructor")
    for n in computed:
        makers.pop(n)
    return inits, computed


# ---- init_ ----


# Per module, what init_ prepared for it last (its plans, each parameter's Composite) under which key:
# a later init_ with the same arguments of a module with the same parameters, buffers, modules and
# config makes none of it again, only the fills.
_PREPARED: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[Any, _Prepared]]" = weakref.WeakKeyDictionary()


def _cache_key(module: torch.nn.Module, recipe: str, seed: int, name_map: Optional[NameMap], spec: Optional[ModelLike],
               overrides: Optional[Mapping[str, str]], places: dict[str, _Place]) -> Optional[tuple[Any, ...]]:
    """What init_'s preparation of `module` depends on, or None when it is not cached (a name_map or
    spec, which may change between calls without telling): the arguments, each parameter's and
    buffer's name, global shape (`places`: _places(module)), dtype and ties, each submodule's name and
    type, the config's repr."""
    if name_map is not None or spec is not None:
        return None
    try:
        # A Fill by its exact text: str() rounds to 6 digits, and two fills that differ past them
        # would share a key. In the mapping's order: the last match wins.
        fills = None if overrides is None else tuple(
            (k, v.text if isinstance(v, _core.Fill) else str(v)) for k, v in overrides.items())
    except (AttributeError, TypeError):
        return None  # _prepare says what is wrong with it
    first: dict[int, str] = {}
    params = tuple((n, places[n].shape, p.dtype, first.setdefault(id(p), n))
                   for n, p in module.named_parameters(remove_duplicate=False))
    buffers = tuple((n, places[n].shape, b.dtype) for n, b in module.named_buffers(remove_duplicate=False))
    modules = tuple((n, type(m)) for n, m in module.named_modules(remove_duplicate=False))
    return (recipe, seed, fills, params, buffers, modules, repr(getattr(module, "config", None)))


# What init_ makes of a module before it writes anything: each filled name's Composite (of its dtype's
# plan, its global shape), how each is made, and the plans by dtype.
_Prepared = tuple[dict[str, Composite], dict[str, Maker], Callable[[torch.dtype], Plan], dict[str, torch.Tensor]]


def _prepare(module: torch.nn.Module, recipe: Optional[str], seed: int, name_map: Optional[NameMap], spec: Optional[ModelLike],
             overrides: Optional[Mapping[str, str]], device: Optional[Union[str, torch.device]],
             places: dict[str, _Place], strict: bool = False,
             recorded: Optional[dict[str, dict[str, Any]]] = None) -> Optional[_Prepared]:
    """init_'s checks and plans (ValueError before anything is written); None when the module has
    nothing to fill, after materializing it. `places`: _places(module)."""
    skip: Callable[[str], bool] = lambda n: False  # noqa: E731
    if name_map is not None:
        skip = (lambda n: name_map(n) is None) if callable(name_map) else (lambda n: n in name_map and name_map[n] is None)
    # A parameter's dtype first: the rules that describe it say "no rule" of an int32 index table.
    _filled_dtypes((n, p) for n, p in module.named_parameters() if not skip(n))
    makers: Optional[dict[str, Maker]] = None
    module_names: dict[str, str] = {}  # module name -> tensor name, where a family's differ (_core.hf_module_names)
    if spec is not None:
        s = _spec(spec)
    elif _is_torchtitan(module):
        s, makers = _titan(module)  # the Spec the library described, as it is
        real = {_tensor_name(module, n): n for n, _ in list(module.named_parameters()) + list(module.named_buffers())}
        makers = {real.get(k, k): v for k, v in makers.items()}  # by the names the module has, wrappers and all
    elif getattr(module, "config", None) is not None and hasattr(module.config, "model_type") and (
            recipe is not None or module.config.model_type in _core.hf_model_types()):
        s = hf_spec(module.config)  # the family's tensors under their Hugging Face names, as emit writes them
        # Where transformers' module names a parameter otherwise than the checkpoints (GPT-NeoX's lm_head).
        module_names = dict(_core.hf_module_names(module.config.model_type))
    else:  # the module's own names (a transformers family layerinit has no spec of, under its own init)
        description = _description(module, skip, type(module).__name__, places)
        if not description["parameters"]:  # nothing to fill
            _materialize_and_compute(module, device, {n for n, b in module.named_buffers() if b.is_meta},
                                     _meta_params(module, ()))
            return None
        s, described = _describe(description, recipe=recipe, overrides=overrides)
        _megatron_init_check(module, s, described, recipe, overrides)
    plans: dict[str, Plan] = {}

    def plan_for(dtype: torch.dtype) -> Plan:
        key = _DTYPES[dtype]
        if key not in plans:
            # The model's own init: every tensor filled has its recorded init, or an override.
            plans[key] = _plan(s, dtype=key, seed=seed, recipe=recipe or "hf", overrides=overrides)
        return plans[key]

    # The tensors and how each parameter is made of them; under the model's own init, before any
    # fill is known (every tensor a placeholder constant, so no recipe rule is asked).
    p0 = plan_for(torch.float32) if recipe is not None else _plan(s, dtype="fp32", recipe="hf",
                                                                  overrides={"*": "constant(0)"})
    spec_names = {t[0] for t in p0.tensors()}
    params = list(module.named_parameters())  # tied parameters once, under their first name
    if makers is not None:
        if name_map is not None:  # name_map extends torchtitan's mapping: its names only, None skips
            for n, t in params + list(module.named_buffers()):
                v = name_map(n) if callable(name_map) else name_map.get(n, n)
                if v is None:
                    makers.pop(n, None)
                elif not (isinstance(v, str) and v == n):
                    makers[n] = _makers([(n, places[n].shape)], p0, spec_names, {n: v})[n]
        entries = [(n, t) for n, t in params + list(module.named_buffers()) if n in makers]
    else:
        def named(n: str) -> bool:  # a buffer the spec names, or a name_map dict maps to a tensor
            if _tensor_name(module, n) in spec_names:
                return True
            if name_map is None or callable(name_map):
                return False
            v = name_map.get(n)
            return v is not None and (not isinstance(v, str) or v in spec_names)

        buffers = [(n, b) for n, b in module.named_buffers() if named(n)]
        entries = params + buffers
        makers = _makers([(n, places[n].shape) for n, t in entries], p0, spec_names, name_map,
                         lambda n: module_names.get(t := _tensor_name(module, n), t))
    # Every check before anything is allocated or written: dtypes, then each parameter as a Composite
    # of its dtype's plan (its tensors, their fills in that dtype) of its global shape.
    _filled_dtypes((n, t) for n, t in entries if n in makers)
    computed: dict[str, torch.Tensor] = {}
    if recipe is None:
        inits, computed = _own_inits(module, entries, makers, p0, overrides, recorded)
        s = s._with_inits(inits)
    _check_patterns(s, _overrides("overrides", overrides, _fill_text), [], strict, stacklevel=5)
    composites = {n: _checked(n, places[n].shape, makers[n](plan_for(t.dtype)), _DTYPES[t.dtype])
                  for n, t in entries if n in makers}
    return composites, makers, plan_for, computed


def _filled_dtypes(tensors: Any) -> None:
    """ValueError listing the (name, tensor) pairs of a dtype layerinit does not fill."""
    bad = [f"{n} ({t.dtype})" for n, t in tensors if t.dtype not in _DTYPES]
    if bad:
        raise _refused("module", f"{len(bad)} parameter(s) of a dtype layerinit does not fill (float32, float16, bfloat16): "
                                 f"{_listed(bad)}; skip them with name_map= (None)")


def _recipe_of(module: torch.nn.Module, recipe: Optional[str], spec: Optional[ModelLike]) -> Optional[str]:
    """The recipe init_ fills `module` by; None: the model's own init."""
    if recipe is not None:
        return _str("recipe", recipe)
    # A spec given names the values: its recipe's (hf unless told), as `layerinit emit --spec` writes them.
    # A Megatron-core model already built ran its init in its constructor, which no code can run again:
    # its config's init (recipe megatron, init_method_std and the output layers' scaling; make() records
    # the constructor itself).
    return "hf" if spec is not None else "megatron" if _megatron_config(module) is not None else None


def plan(
    module: torch.nn.Module,
    *,
    dtype: torch.dtype = torch.float32,
    recipe: Optional[str] = None,
    seed: int = 0,
    name_map: Optional[NameMap] = None,
    spec: Optional[ModelLike] = None,
    overrides: Optional[Mapping[str, str]] = None,
) -> Plan:
    """The plan :func:`init_` fills the parameters of ``module`` of ``dtype`` from, nothing written: a
    :class:`layerinit.Plan` (its tensors, their fills, and ``record()``, the bytes every face of layerinit
    gives for the model: ``layerinit plan --record`` of the same spec, recipe, dtype and seed). Made as
    init_ makes it (the model's own init recorded when no recipe is given, on the meta device as init_
    does), with init_'s refusals; a module with nothing to fill is refused. Arguments as init_'s."""
    _module("module", module)
    name_map = _name_map(name_map)
    recipe = _recipe_of(module, recipe, spec)
    seed = _int("seed", seed)
    if dtype not in _DTYPES:
        raise _bad("dtype", str(dtype), "is not a dtype layerinit fills (torch.float32, torch.float16, torch.bfloat16)")
    prepared = _prepare(module, recipe, seed, name_map, spec, overrides, None, _places(module))
    if prepared is None:
        raise _bad("module", type(module).__name__, "has no parameter layerinit fills")
    return prepared[2](dtype)


@torch.no_grad()
def init_(
    module: M,
    *,
    recipe: Optional[str] = None,
    seed: int = 0,
    name_map: Optional[NameMap] = None,
    spec: Optional[ModelLike] = None,
    device: Optional[Union[str, torch.device]] = None,
    overrides: Optional[Mapping[str, str]] = None,
    strict: bool = False,
    progress: ProgressLike = None,
) -> M:
    """Fills every parameter of ``module`` in place, by its qualified name, in the parameter's own
    dtype (float32, float16 or bfloat16), each element a pure function of (seed, tensor name, element
    index, fill). Returns the module.

    - Without ``recipe``: the module's own init. Its init code runs on meta stand-ins of its
      parameters (no memory, the module untouched) under a recorder: each module's
      ``reset_parameters()`` (``_reset_parameters()``), children first, then transformers'
      ``init_weights()`` (its ``_init_weights`` and ties), or torchtitan's ``init_states()``; every
      write it makes (``normal_``, ``uniform_`` as kaiming and xavier reduce to it, ``trunc_normal_``,
      constants, a padding row, writes through views and copies between tensors) goes to the library,
      which says what each parameter holds. What no fill says (``orthogonal_``, ``sparse_``, a
      parameter its code never writes, values copied from data) is refused, all of it in one
      ValueError naming each parameter and the op seen, before anything is written; ``overrides``
      tell those. A model whose constructor alone initializes it: :func:`make`; a Megatron-core model
      already built: its config's init (recipe "megatron", which reads ``init_method_std``).
    - ``recipe``: the values ``layerinit emit --recipe RECIPE --seed SEED`` writes for each tensor;
      with ``spec`` and no recipe, the spec's values under recipe "hf" (``layerinit emit --spec``).

    - The tensors come from ``spec`` (a preset, a JSON spec path or dict, a :class:`layerinit.Spec`);
      without it, for a torchtitan llama3, qwen3 or deepseek_v3 model from :func:`torchtitan_spec`
      (Hugging Face names, mapped back through torchtitan's own state-dict adapter: fused wqkv,
      stacked experts, RoPE row order), for Hugging Face models from ``module.config``
      (:func:`hf_spec`), else from the module's own layers (:func:`module_spec`, which refuses the
      parameters whose role or layer the recipe needs and the module's names do not tell;
      Megatron-core's GPTModel included, with its config's ``init_method_std``).
    - ``name_map``: module name -> canonical name (a dict or a function; None skips the parameter).
      It extends the mapping layerinit infers (torchtitan's included): a name it leaves out, or maps
      to itself, keeps its inferred tensor.
    - A module on the meta device is materialized first with ``to_empty(device=device)`` (default:
      a DTensor's mesh device type, else "cpu"), its tied parameters tied again; buffers no spec
      names are computed by the model's own code (torchtitan's ``_init_self_buffers``,
      transformers' ``_init_weights``), DTensor buffers on plain tensors then each rank's piece
      kept; a warning names any left uncomputed.
    - Tied parameters are filled once. A DTensor parameter's local shard is filled at its global
      offset (Shard and Replicate placements), so the gathered tensor equals the unsharded one; so
      are torchtitan's spmd_types shards and Megatron-core's tensor-parallel shards (its
      ``tensor_model_parallel``, ``partition_dim`` and ``partition_stride`` attributes, else its
      ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding, on the rank of the
      module's ``tp_group``), each as the slice Megatron's own init gives the rank.
    - Buffers the spec names (a router's correction bias) are filled too.
    - ``progress``: a function ``f(done_bytes, total_bytes)`` of the bytes this process writes (its
      local shards), called with (0, total), after each parameter and last with (total, total); True
      draws a tqdm bar; as :func:`layerinit.build`'s. With it, each parameter is its own call into the
      library (Ctrl-C and the function's exception stop between two), else all are one call.
    - All the parameters are filled by one call into the library. The plans and each parameter's
      Composite are kept with the module: init_ again with the same recipe, seed and overrides, of
      a module whose parameters, buffers, submodules and config are the same (names, global shapes,
      dtypes, ties, types), only fills. With name_map or spec it prepares every call.

    Every parameter is checked before any is materialized or written. Raises ValueError for a
    parameter without a tensor (listing them), a shape the spec does not have, a dtype other than
    float32, float16 and bfloat16, a 0-d parameter, an unknown recipe or preset, a local tensor that
    cannot be filled in place (not contiguous in its last dimension, expanded, overlapping itself, a
    Partial DTensor, a device other than the CPU and the CUDA devices torch and layerinit see), two parameters sharing memory that hold
    different tensors (naming both), and any argument of the wrong type or value (naming it).
    """
    _module("module", module)
    name_map = _name_map(name_map)
    device = _device(device)
    recipe = _recipe_of(module, recipe, spec)
    seed = _int("seed", seed)
    strict = _bool("strict", strict)
    report = _progress(progress, "init_")
    return _reporting(report, lambda f: _init(module, recipe, seed, name_map, spec, device, overrides, strict, progress=f))


def _init(module: M, recipe: Optional[str], seed: int, name_map: Optional[NameMap],
          spec: Optional[ModelLike], device: Optional[torch.device], overrides: Optional[Mapping[str, str]],
          strict: bool, recorded: Optional[dict[str, dict[str, Any]]] = None, progress: Optional[_Progress] = None) -> M:
    """init_ with its arguments checked; `recorded`: the own init already recorded (make)."""
    # Not cached: a recording made by make(), or strict (its check of the override globs runs each call).
    places = _places(module)  # before to_empty, which drops spmd_types' and Megatron-core's annotations
    key = None if recorded is not None or strict else _cache_key(module, recipe, seed, name_map, spec, overrides,
                                                                    places)
    cached = _PREPARED.get(module)
    if key is not None and cached is not None and cached[0] == key:
        prepared = cached[1]
    else:
        prepared = _prepare(module, recipe, seed, name_map, spec, overrides, device, places, strict, recorded)
        if prepared is None:  # nothing to fill: materialized
            if progress is not None:
                progress(0, 0)
            return module
    hit = key is not None and cached is not None and cached[1] is prepared
    composites, makers, plan_for, computed = prepared
    entries = list(module.named_parameters()) + [(n, b) for n, b in module.named_buffers() if n in composites]
    _check_targets([(n, t) for n, t in entries if n in composites], composites, places, device, module)
    _materialize_and_compute(module, device, {n for n, b in module.named_buffers() if b.is_meta and n not in makers},
                             _meta_params(module, set(composites) | set(computed)))
    current = dict(module.named_parameters())
    current.update(dict(module.named_buffers()))
    arrays, parts, offsets = [], [], []
    ends = []  # where each parameter's arrays end: the calls `progress` reports between
    for n, c in composites.items():
        local = _local_data(current[n])
        if local.numel() == 0:
            continue
        if c.dtype != _DTYPES.get(local.dtype):  # a buffer the model's own code made in another dtype
            c = _checked(n, places[n].shape, makers[n](plan_for(local.dtype)), None)
        # Each box of the parameter the local tensor holds is a box of its composite, whatever tensors it holds.
        for at, offset, shape in places[n].boxes:
            whole = len(places[n].boxes) == 1
            arrays.append((local if whole else local[tuple(slice(a, a + k) for a, k in zip(at, shape))]).detach())
            parts.append(c)
            offsets.append(list(offset))
        ends.append(len(arrays))
    if progress is None:
        _core.fill_composites(arrays, parts, seed, offsets, True)  # every parameter in one call
    else:
        sizes = [a.numel() * a.element_size() for a in arrays]
        total, done, start = sum(sizes), 0, 0
        progress(0, total)
        for end in ends:
            _core.fill_composites(arrays[start:end], parts[start:end], seed, offsets[start:end], True)
            done += sum(sizes[start:end])
            start = end
            progress(done, total)
    for n, values in computed.items():  # what the model's code computes without random numbers, as it computes it
        local = _local_data(current[n])
        for at, offset, shape in places[n].boxes:
            local[tuple(slice(a, a + k) for a, k in zip(at, shape))].copy_(
                values[tuple(slice(o, o + k) for o, k in zip(offset, shape))])
    if key is not None and not hit:
        # Under the module as it is now: the model's own code may have made buffers nothing fills
        # in another dtype than on the meta device.
        _PREPARED[module] = (_cache_key(module, recipe, seed, name_map, spec, overrides, _places(module)), prepared)
    return module


def make(build: Callable[[], M], *, seed: int = 0, device: Optional[Union[str, torch.device]] = None,
         name_map: Optional[NameMap] = None, spec: Optional[ModelLike] = None,
         overrides: Optional[Mapping[str, str]] = None, strict: bool = False, progress: ProgressLike = None) -> M:
    """The model ``build()`` constructs, with its own init in layerinit's values, on ``device``
    (default "cpu"): for a model whose constructor alone initializes it (Megatron-core's
    ``init_method`` through ``_initialize_affine_weight_cpu``, nanoGPT's ``apply(_init_weights)``,
    ``nn.Parameter(torch.ones(d))``).

    ``build()`` runs on the meta device under the recorder :func:`init_` uses, so the construction
    costs no parameter memory and every write its code makes is seen; then the model is materialized
    and filled as :func:`init_` without a recipe fills it (same refusals, ``overrides`` to tell what
    no fill says). A local shard a tensor-parallel framework marks as one (Megatron-core's
    ``tensor_model_parallel``) is filled as its slice of the whole tensor. A transformers or
    torchtitan model, whose top-level init does not run on the meta device, is constructed the same
    way and then initialized as :func:`init_` initializes it (its ``init_weights`` / ``init_states``).
    ``progress`` reports the fills as :func:`init_`'s."""
    from . import _torch_record

    if not callable(build) or isinstance(build, torch.nn.Module):
        raise _refused("build", f"build must be a function that returns the model (make(lambda: Model(...))), got "
                                f"{type(build).__name__} {_show(build)}")
    name_map = _name_map(name_map)
    device = _device(device)
    seed = _int("seed", seed)
    strict = _bool("strict", strict)
    report = _progress(progress, "make")
    with _torch_record.recording() as rec:
        with torch.device("meta"):
            model = build()
        if not isinstance(model, torch.nn.Module):
            raise _refused("build", f"build() must return a torch.nn.Module, got {type(model).__name__} {_show(model)}")
        names = [n for n, _ in model.named_parameters()]
        final = {n: model.get_parameter(n) for n in names}
    recorded = None if _is_transformers(model) or _is_torchtitan(model) else _replayed(rec, final, names)
    return _reporting(report, lambda f: _init(model, None, seed, name_map, spec, device, overrides, strict, recorded, f))
