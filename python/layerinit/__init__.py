"""layerinit: model weights created layer by layer, handed to PyTorch, JAX and NumPy without a copy.

Every element's value is a pure function of (seed, tensor name, element index, dtype), so a tensor
built whole, a piece of it built on one rank, and a framework's own array filled in place all hold
the same bytes as ``layerinit emit`` writes (docs/python.md).

- :func:`build` makes a model's tensors in layerinit's tracked memory and returns them as
  :class:`Array` objects that ``torch.from_dlpack``, ``jax.numpy.from_dlpack`` and
  ``numpy.from_dlpack`` take without a copy.
- :func:`fill_` writes one tensor's values (or a piece's) into any writable DLPack array in place.
- :mod:`layerinit.torch` fills a ``torch.nn.Module`` (meta device, tied weights, DTensor shards),
  :mod:`layerinit.jax` builds ``jax.Array`` objects shard by shard.

Errors: ``ValueError`` for bad input (an unknown preset, recipe or fill; an array that is not
contiguous, read-only or of another dtype), ``MemoryError`` when memory runs out (with the bytes).
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from . import _core
from ._core import Array, Fill

__version__: str = _core.__version__

__all__ = [
    "Array",
    "Fill",
    "Plan",
    "Spec",
    "__version__",
    "build",
    "cuda_available",
    "fill_",
    "hf_spec",
    "memory_stats",
    "plan",
    "preset_names",
    "recipe_fill",
    "recipe_names",
    "reset_peak",
    "spec",
]

Spec = _core.Spec
Plan = _core.Plan

#: What a model argument may be: a preset name, a JSON spec file's path, a spec as a dict, or a Spec.
ModelLike = Union[str, "os.PathLike[str]", Mapping[str, Any], "_core.Spec"]
#: A fill: the CLI's text ("normal(0, 0.02)") or a Fill (``Fill.parse``, ``recipe_fill``).
FillLike = Union[str, "_core.Fill"]


def _array_method(self: Array, dtype: Any = None, copy: Optional[bool] = None) -> Any:
    """``numpy.asarray(array)``: a view of the bytes, no copy (bfloat16 through ml_dtypes)."""
    view = self._numpy_view()
    if self.dtype == "bf16":
        try:
            import ml_dtypes
        except ImportError as e:  # numpy has no bfloat16 of its own
            raise ValueError(
                "numpy has no bfloat16: install ml_dtypes, or take the array with torch.from_dlpack"
            ) from e
        view = view.view(ml_dtypes.bfloat16)
    if copy:
        view = view.copy()
    if dtype is not None and view.dtype != dtype:
        if copy is False:
            raise ValueError(f"a {self.dtype} array cannot become {dtype} without a copy")
        view = view.astype(dtype)
    return view


Array.__array__ = _array_method  # type: ignore[attr-defined]


def __getattr__(name: str) -> Any:
    # layerinit.torch and layerinit.jax import their framework: load them on first use only.
    if name in ("torch", "jax"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'layerinit' has no attribute {name!r}")


def preset_names() -> list[str]:
    """The model presets (``layerinit build --preset NAME``)."""
    return list(_core.preset_names())


def recipe_names() -> list[str]:
    """The init recipes (docs/recipes.md)."""
    return list(_core.recipe_names())


def cuda_available() -> bool:
    """Whether this build of layerinit has CUDA and a usable GPU."""
    return bool(_core.has_cuda_build and _core.cuda_available()[0])


def hf_spec(config: Any) -> Spec:
    """The spec of a Hugging Face model: its config (``model.config``, any object with
    ``to_json_string``), a config.json dict, or the path of a config.json or of the directory
    holding one. layerinit's C++ reader maps it (docs/spec.md); ValueError names the field, or the
    supported model_types."""
    if isinstance(config, (str, os.PathLike)):
        return _core.Spec.from_hf_config_path(os.fspath(config))
    if isinstance(config, Mapping):
        return _core.Spec.from_hf_config(json.dumps(dict(config)))
    to_json = getattr(config, "to_json_string", None)
    if callable(to_json):
        return _core.Spec.from_hf_config(to_json(use_diff=False))
    raise ValueError(f"config must be a transformers config, a config.json dict or path, got {type(config).__name__}")


def spec(model: ModelLike) -> Spec:
    """A model spec: a preset name, the path of a JSON spec file, a spec dict (docs/spec.md), a
    Hugging Face config.json dict (with ``model_type``) or directory (:func:`hf_spec`), or a Spec.

    Raises ValueError for an unknown preset (listing the valid ones) or a malformed spec.
    """
    if isinstance(model, _core.Spec):
        return model
    if isinstance(model, Mapping):
        if "model_type" in model:
            return hf_spec(model)
        return _core.Spec.from_json(json.dumps(model))
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if os.path.isdir(text):
            return hf_spec(text)
        if text in _core.preset_names():
            return _core.Spec.preset(text)
        if text.endswith(".json") or os.sep in text:
            try:
                with open(text, encoding="utf-8") as f:
                    return _core.Spec.from_json(f.read())
            except OSError as e:
                raise ValueError(f"cannot read spec file '{text}': {e.strerror}") from e
        return _core.Spec.preset(text)  # ValueError listing the presets
    raise ValueError(f"model must be a preset name, a spec file path, a spec dict or a Spec, got {type(model).__name__}")


def _fill(f: FillLike) -> Fill:
    if isinstance(f, _core.Fill):
        return f
    if isinstance(f, str):
        return _core.Fill.parse(f)
    raise ValueError(f"fill must be a string like 'normal(0, 0.02)' or a Fill, got {type(f).__name__}")


def plan(
    model: ModelLike,
    *,
    dtype: str = "bf16",
    seed: int = 0,
    recipe: str = "hf",
    layout: str = "per-layer",
    orientation: str = "out-in",
    experts: str = "stacked",
    overrides: Optional[Mapping[str, FillLike]] = None,
    dtype_overrides: Optional[Mapping[str, str]] = None,
) -> Plan:
    """What :func:`build` would make, without memory: ``plan(...).tensors()`` lists (name, shape,
    dtype, kind, layer); ``plan(...).fill(name, array, offset)`` fills a piece of one tensor.

    ``overrides`` maps name globs to fills (the CLI's ``--init-override``), ``dtype_overrides``
    name globs to dtypes (``--dtype-override``).
    """
    if seed < 0 or seed >= 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    fills = {k: _fill(v) for k, v in (overrides or {}).items()}
    return _core.Plan(spec(model), recipe, fills, dtype, dict(dtype_overrides or {}), seed, layout, orientation, experts)


def build(
    model: ModelLike,
    *,
    dtype: str = "bf16",
    seed: int = 0,
    recipe: str = "hf",
    layout: str = "per-layer",
    orientation: str = "out-in",
    device: str = "cpu",
    mesh: Optional[Mapping[str, int]] = None,
    rank: Optional[int] = None,
    experts: str = "stacked",
    overrides: Optional[Mapping[str, FillLike]] = None,
    dtype_overrides: Optional[Mapping[str, str]] = None,
    threads: int = 0,
) -> dict[str, Array]:
    """Builds a model's tensors and returns them by name, in file order.

    Each :class:`Array` owns its bytes in layerinit's tracked memory (:func:`memory_stats`) until it
    and every array taken from it (``torch.from_dlpack(a)``, ``numpy.asarray(a)``, ...) are gone.

    - ``model``: a preset name, a JSON spec path, a spec dict or a :class:`Spec`.
    - ``dtype``: ``"bf16"``, ``"fp16"`` or ``"fp32"``; ``recipe``: a name of :func:`recipe_names`,
      with parameters as ``"mup:base_width=256"``; ``seed``: 0 .. 2**64 - 1.
    - ``layout``: ``"per-layer"`` (one array per tensor) or ``"stacked"`` (one ``[L, ...]`` array per
      layer parameter; MoE experts ``[L, E, ...]`` unless ``experts="per-expert"``).
    - ``orientation``: ``"out-in"`` (PyTorch) or ``"in-out"`` (JAX/Flax: linear weights ``[in, out]``).
    - ``device``: ``"cpu"`` or ``"cuda"`` (a CUDA build with a GPU).
    - ``mesh`` and ``rank``: only rank ``rank``'s pieces of the mesh ``{"tp": T, "pp": P, "ep": E,
      "fsdp": F}`` (docs/sharding.md); each Array's ``global_shape`` and ``offset`` say where its
      piece sits.
    - ``threads``: host threads (0: all cores).
    """
    if mesh is not None and not isinstance(mesh, Mapping):
        raise ValueError("mesh must be a mapping like {'tp': 2, 'fsdp': 2}")
    if rank is not None and rank < 0:
        raise ValueError(f"rank must be >= 0, got {rank}")
    p = plan(model, dtype=dtype, seed=seed, recipe=recipe, layout=layout, orientation=orientation, experts=experts,
             overrides=overrides, dtype_overrides=dtype_overrides)
    return p.build(device, dict(mesh) if mesh is not None else None, rank, threads)


def fill_(
    array: Any,
    name: str,
    fill: FillLike,
    *,
    seed: int = 0,
    global_shape: Optional[Sequence[int]] = None,
    offset: Optional[Sequence[int]] = None,
    transposed: bool = False,
    dtype: Optional[str] = None,
) -> Any:
    """Fills ``array`` in place with the values of tensor ``name`` and returns it.

    ``array`` is any writable, contiguous array that exports DLPack or the buffer protocol: a torch
    tensor (CPU or CUDA), a NumPy array (bfloat16 through ml_dtypes), a CuPy array. Its dtype
    (float32, float16, bfloat16) is the tensor's: values differ between dtypes.

    - ``fill``: the CLI's grammar, ``"normal(0, 0.02)"``, ``"trunc_normal(0, 0.02, -2, 2)"``,
      ``"trunc_normal_std(0, 0.02, -3, 3)"``, ``"uniform(-0.1, 0.1)"``, ``"constant(1)"``, or a
      :class:`Fill` (``recipe_fill`` gives a recipe's).
    - ``global_shape`` and ``offset``: the array is the piece at ``offset`` of a tensor of
      ``global_shape`` (default: the whole tensor), as DTensor or a JAX shard holds it.
    - ``transposed``: the array holds a 2-D tensor stored ``[in, out]`` (in-out orientation);
      ``global_shape`` is the stored shape.
    - ``dtype``: when given, the array's dtype must be this one.

    Raises ValueError for a non-contiguous, read-only or immutable (JAX) array, a dtype other than
    float32/float16/bfloat16 or other than ``dtype``, a piece outside ``global_shape``, a bad fill.
    """
    if seed < 0 or seed >= 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    target, bits_as = array, None
    if getattr(array, "requires_grad", False) and hasattr(array, "detach"):
        target = array.detach()  # same storage; DLPack refuses tensors that require grad
    elif type(array).__module__ == "numpy" and getattr(array.dtype, "name", "") == "bfloat16":
        target, bits_as = array.view("uint16"), "bf16"  # ml_dtypes' bfloat16: numpy cannot export it
    _core.fill(
        target,
        name,
        _fill(fill),
        seed,
        None if global_shape is None else [int(d) for d in global_shape],
        None if offset is None else [int(d) for d in offset],
        transposed,
        dtype,
        bits_as,
    )
    return array


def recipe_fill(model: ModelLike, name: str, *, recipe: str = "hf") -> Fill:
    """The fill ``recipe`` gives tensor ``name`` (canonical) of ``model``: ``fill_(a, name,
    recipe_fill(m, name), seed=s)`` puts in ``a`` what ``build(m, seed=s)[name]`` holds."""
    return plan(model, recipe=recipe).fill_of(name)


def memory_stats(device: str = "cpu") -> dict[str, int]:
    """layerinit's tracked memory on ``device``: current_bytes, peak_bytes, total_bytes and the
    allocation counts (current_count, peak_count, total_count). Arrays count until they are freed."""
    return dict(_core.memory_stats(device))


def reset_peak(device: str = "cpu") -> None:
    """Resets ``memory_stats(device)["peak_bytes"]`` to the bytes in use now."""
    _core.reset_peak(device)
