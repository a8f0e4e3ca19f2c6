"""Filling ``torch.nn.Module`` parameters in place with layerinit's values (docs/python.md).

:func:`init_` gives every parameter of a module the bytes ``layerinit emit`` writes for the tensor
of the same name: on the meta device it materializes the module first, tied weights are filled
once, and a DTensor parameter (FSDP2 ``fully_shard``, tensor parallelism) gets its local shard
filled at its global offset, so the values do not depend on the mesh.
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

import torch

from . import ModelLike, Plan, hf_spec, plan, spec as _spec

__all__ = ["init_", "hf_spec", "module_spec", "tensor_map"]

NameMap = Union[Mapping[str, Optional[str]], Callable[[str], Optional[str]]]

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _norm_like(mod: torch.nn.Module) -> bool:
    name = type(mod).__name__
    return isinstance(mod, (torch.nn.LayerNorm, torch.nn.GroupNorm)) or "Norm" in name


def module_spec(module: torch.nn.Module, *, name: str = "module") -> dict[str, Any]:
    """A JSON spec (as a dict) of any module, each parameter a tensor under its qualified name, with
    the role its owner gives it: ``nn.Linear`` weights (fan_in, fan_out) and biases, ``nn.Embedding``,
    norms (classes named ``*Norm*``); anything else is role ``other``. Parameters inside the first
    ``nn.ModuleList`` of blocks carry their layer number, so depth-scaled recipes see it."""
    blocks_prefix, depth = "", 0
    for qn, mod in module.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) > 0 and any(True for _ in mod.parameters()):
            blocks_prefix, depth = qn + ".", len(mod)
            break
    tensors = []
    seen: set[int] = set()
    for mname, mod in module.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            full = f"{mname}.{pname}" if mname else pname
            t: dict[str, Any] = {"name": full, "shape": list(p.shape)}
            if isinstance(mod, torch.nn.Linear):
                if pname == "weight":
                    t.update(role="linear_weight", fan_in=mod.in_features, fan_out=mod.out_features, transposable=True)
                else:
                    t.update(role="linear_bias", fan_in=mod.in_features, fan_out=mod.out_features)
            elif isinstance(mod, torch.nn.Embedding):
                t.update(role="embedding")
            elif _norm_like(mod):
                t.update(role="norm_weight" if pname == "weight" else "norm_bias")
            else:
                t.update(role="other")
            tensors.append(t)
    out: dict[str, Any] = {"name": name, "family": "custom", "pre": tensors}
    if depth:
        # No repeated block: the blocks' tensors stay in `pre`, named as layers 0..depth-1 before it.
        out["layer"] = {"prefix": blocks_prefix, "first": depth, "count": 0, "tensors": []}
    return out


class _Piece:
    """Part of a parameter that is one layerinit tensor: the box [offset, offset + shape) of the
    parameter, whose leading `squeeze` dimensions (of size 1) the tensor does not have."""

    __slots__ = ("tensor", "offset", "shape", "squeeze")

    def __init__(self, tensor: str, offset: tuple[int, ...], shape: tuple[int, ...], squeeze: int = 0):
        self.tensor, self.offset, self.shape, self.squeeze = tensor, offset, shape, squeeze


def _expert_pieces(name: str, shape: tuple[int, ...], names: set[str]) -> Optional[list[_Piece]]:
    """transformers 5's fused experts: `...mlp.experts.gate_up_proj` [E, 2F, H] is cat(w1, w3) of
    each expert, `...mlp.experts.down_proj` [E, H, F] is w2 (Mixtral's block_sparse_moe, or mlp)."""
    m = re.match(r"^(.*\.)(mlp|block_sparse_moe)\.experts\.(gate_up_proj|down_proj)$", name)
    if not m or len(shape) != 3:
        return None
    base, kind = m.group(1), m.group(3)
    for moe in ("block_sparse_moe", "mlp"):
        for gate, up, down in (("w1", "w3", "w2"), ("gate_proj", "up_proj", "down_proj")):
            first = f"{base}{moe}.experts.0.{gate if kind == 'gate_up_proj' else down}.weight"
            if first not in names:
                continue
            E, a, b = shape
            if kind == "down_proj":
                return [_Piece(f"{base}{moe}.experts.{e}.{down}.weight", (e, 0, 0), (1, a, b), 1) for e in range(E)]
            f = a // 2
            return [p for e in range(E) for p in (
                _Piece(f"{base}{moe}.experts.{e}.{gate}.weight", (e, 0, 0), (1, f, b), 1),
                _Piece(f"{base}{moe}.experts.{e}.{up}.weight", (e, f, 0), (1, f, b), 1))]
    return None


def tensor_map(names: list[tuple[str, tuple[int, ...]]], spec_names: set[str],
               name_map: Optional[NameMap] = None) -> dict[str, list[_Piece]]:
    """Which layerinit tensors make up each parameter (name, global shape): the name itself (after
    ``name_map``), Mixtral's ``block_sparse_moe`` under transformers 5's ``mlp``, or fused experts.
    A name that ``name_map`` maps to None is skipped. ValueError listing the names without a tensor."""
    out: dict[str, list[_Piece]] = {}
    missing = []
    for name, shape in names:
        target: Optional[str] = name
        if name_map is not None:
            if callable(name_map):
                target = name_map(name)
            elif name in name_map:
                target = name_map[name]
            if target is None:
                continue
        full = tuple(0 for _ in shape)
        if target in spec_names:
            out[name] = [_Piece(target, full, tuple(shape))]
            continue
        moe = target.replace(".mlp.", ".block_sparse_moe.")
        if moe in spec_names:
            out[name] = [_Piece(moe, full, tuple(shape))]
            continue
        pieces = _expert_pieces(target, tuple(shape), spec_names)
        if pieces is not None:
            out[name] = pieces
            continue
        missing.append(name if target == name else f"{name} (mapped to {target})")
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(f"no layerinit tensor for {len(missing)} parameter(s): {shown}; pass name_map= "
                         f"(module name -> canonical name, None to skip)")
    return out


def _local(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...], tuple[int, ...]]:
    """(local tensor, its offset, the global shape) of a plain tensor or a DTensor."""
    try:
        from torch.distributed.tensor import DTensor, Replicate, Shard
    except ImportError:  # torch without distributed
        return t, tuple(0 for _ in t.shape), tuple(t.shape)
    if not isinstance(t, DTensor):
        return t, tuple(0 for _ in t.shape), tuple(t.shape)
    for p in t.placements:
        if type(p) not in (Shard, Replicate):
            raise ValueError(f"DTensor placement {p} is not filled in place (Shard and Replicate are)")
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = t._local_tensor
    shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    if tuple(shape) != tuple(local.shape):
        raise ValueError(f"DTensor local shape {tuple(local.shape)} is not the piece {tuple(shape)} its placements give")
    return local, tuple(int(o) for o in offset), tuple(t.shape)


def _retie(module: torch.nn.Module, groups: list[list[str]]) -> None:
    """Makes every name of each group the same Parameter again (to_empty re-creates them apart)."""
    for names in groups:
        first = module.get_parameter(names[0])
        for n in names[1:]:
            owner, _, attr = n.rpartition(".")
            setattr(module.get_submodule(owner) if owner else module, attr, first)


def _materialize(module: torch.nn.Module, device: Optional[Union[str, torch.device]], filled: set[str]) -> None:
    tensors = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    if not any(t.is_meta for _, t in tensors):
        return
    groups: dict[int, list[str]] = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(n)
    meta_buffers = {n for n, b in module.named_buffers() if b.is_meta and n not in filled}
    if device is None:
        device = "cpu"
        try:
            from torch.distributed.tensor import DTensor

            for _, t in tensors:
                if isinstance(t, DTensor):
                    device = t.device_mesh.device_type
                    break
        except ImportError:
            pass
    module.to_empty(device=device)
    _retie(module, [g for g in groups.values() if len(g) > 1])
    # Buffers no recipe names (rotary inv_freq): the model's own code computes them.
    left = set()
    init_weights = getattr(module, "_init_weights", None)  # Hugging Face PreTrainedModel
    for mname, mod in module.named_modules():
        own = {f"{mname}.{b}" if mname else b for b, _ in mod.named_buffers(recurse=False)} & meta_buffers
        if not own:
            continue
        # Gemma's scaled embedding holds embed_scale beside its weight: the weight _init_weights draws
        # is filled from the spec afterwards.
        if init_weights is not None:
            init_weights(mod)
        else:
            left |= own
    if left:
        warnings.warn(f"buffers left uninitialized after to_empty (no recipe names them): {sorted(left)}; "
                      f"compute them with the model's own code", stacklevel=3)


@torch.no_grad()
def init_(
    module: torch.nn.Module,
    *,
    recipe: str = "hf",
    seed: int = 0,
    name_map: Optional[NameMap] = None,
    spec: Optional[ModelLike] = None,
    device: Optional[Union[str, torch.device]] = None,
    overrides: Optional[Mapping[str, str]] = None,
) -> torch.nn.Module:
    """Fills every parameter of ``module`` in place, by its qualified name, with the values
    ``layerinit emit --recipe RECIPE --seed SEED`` writes for it, in the parameter's own dtype
    (float32, float16 or bfloat16). Returns the module.

    - The tensors come from ``spec`` (a preset, a JSON spec path or dict, a :class:`layerinit.Spec`);
      without it, from ``module.config`` for Hugging Face models (:func:`hf_spec`), else from the
      module's own layers (:func:`module_spec`).
    - ``name_map``: module name -> canonical name (a dict or a function; None skips the parameter),
      for modules whose names are not Hugging Face's (torchtitan's ``layers.0.attention.wq.weight``).
    - A module on the meta device is materialized first with ``to_empty(device=device)`` (default:
      a DTensor's mesh device type, else "cpu"), its tied parameters tied again; buffers no spec
      names are computed by Hugging Face's ``_init_weights`` where the module has one.
    - Tied parameters are filled once. A DTensor parameter's local shard is filled at its global
      offset (Shard and Replicate placements), so the gathered tensor equals the unsharded one.
    - Buffers the spec names (a router's correction bias) are filled too.

    Raises ValueError for a parameter without a tensor (listing them), a shape or dtype the spec
    does not have, an unknown recipe or preset.
    """
    if spec is not None:
        s = _spec(spec)
    elif getattr(module, "config", None) is not None and hasattr(module.config, "model_type"):
        s = hf_spec(module.config)
    else:
        s = _spec(module_spec(module, name=type(module).__name__))
    plans: dict[str, Plan] = {}

    def plan_for(dtype: torch.dtype) -> Plan:
        if dtype not in _DTYPES:
            raise ValueError(f"parameter dtype {dtype} is not one layerinit fills (float32, float16, bfloat16)")
        key = _DTYPES[dtype]
        if key not in plans:
            plans[key] = plan(s, dtype=key, seed=seed, recipe=recipe, overrides=overrides)
        return plans[key]

    p0 = plan_for(torch.float32)
    spec_names = {t[0] for t in p0.tensors()}
    params = [(n, p) for n, p in module.named_parameters()]  # tied parameters once, under their first name
    named_buffers = [(n, b) for n, b in module.named_buffers() if n in spec_names or (
        name_map is not None and not callable(name_map) and name_map.get(n) in spec_names)]
    entries = params + named_buffers
    pieces = tensor_map([(n, tuple(t.shape)) for n, t in entries], spec_names, name_map)
    # Check every shape before anything is allocated or written.
    for n, t in entries:
        for pc in pieces.get(n, []):
            want = tuple(p0.logical_shape(pc.tensor))
            if tuple(pc.shape[pc.squeeze:]) != want:
                raise ValueError(f"parameter {n} of shape {tuple(t.shape)}: layerinit's {pc.tensor} is {list(want)}")
    _materialize(module, device, {n for n, _ in named_buffers})
    current = dict(module.named_parameters())
    current.update(dict(module.named_buffers()))
    for n, _ in entries:
        if n not in pieces:
            continue
        t = current[n]
        local, loff, _ = _local(t.data if isinstance(t, torch.nn.Parameter) else t)
        if local.numel() == 0:
            continue
        pl = plan_for(local.dtype)
        for pc in pieces[n]:
            # The intersection of the piece with this rank's local box, in parameter coordinates.
            lo = [max(a, b) for a, b in zip(pc.offset, loff)]
            hi = [min(a + s, b + ls) for a, s, b, ls in zip(pc.offset, pc.shape, loff, local.shape)]
            if any(h <= l_ for l_, h in zip(lo, hi)):
                continue
            view = local[tuple(slice(l_ - o, h - o) for l_, h, o in zip(lo, hi, loff))]
            for _ in range(pc.squeeze):
                view = view.squeeze(0)
            off = [l_ - o for l_, o in zip(lo, pc.offset)][pc.squeeze:]
            pl.fill(pc.tensor, view, off, True)
    return module
