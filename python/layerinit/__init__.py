"""layerinit: model weights created layer by layer, handed to PyTorch, JAX and NumPy without a copy.

Every element's value is a pure function of (seed, tensor name, element index, dtype), so a tensor
built whole, a piece of it built on one rank, and a framework's own array filled in place all hold
the same bytes as ``layerinit emit`` writes (docs/python.md).

- :func:`build` makes a model's tensors in layerinit's tracked memory and returns them as
  :class:`Array` objects that ``torch.from_dlpack``, ``jax.numpy.from_dlpack`` and
  ``numpy.from_dlpack`` take without a copy.
- :func:`fill_` writes one tensor's values (or a piece's) into any writable DLPack array in place.
- :func:`verify` says whether a checkpoint, a ``state_dict`` or a dict of arrays holds the init it
  claims, and what a converter did to each tensor that differs.
- :mod:`layerinit.torch` fills a ``torch.nn.Module`` (meta device, tied weights, DTensor shards),
  :mod:`layerinit.jax` builds ``jax.Array`` objects shard by shard.

- :class:`Composite` says which tensors a framework's parameter holds (stacked layers, fused QKV or
  experts, rows in torchtitan's RoPE layout); :meth:`Plan.composite` makes one, :func:`fill_` fills
  any box of it.

Errors: ``ValueError`` naming the argument for any bad input (a wrong type or value, an unknown
preset, recipe or fill; an array that is not contiguous, read-only or of another dtype); what the
library refuses is its subclass :class:`BadInputError` (``argument``, ``value``, ``problem``), a malformed
spec, config.json or composite that one's subclass :class:`SpecError` (``source``, ``reason``);
``MemoryError`` when memory runs out, as :class:`OutOfMemoryError` (``requested``, ``in_use``) or, refused before anything
is allocated, :class:`MemoryRefusedError` (``needed``, ``available``); ``RuntimeError`` for CUDA asked
where it is unusable, :class:`CudaError` (``call``) for a failed CUDA call (docs/python.md). Each is
the C++ exception's type translated by the binding, its attributes the C++ object's.
"""
from __future__ import annotations

import copy
import math
import numbers
import os
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from . import _core
from ._core import Array, BadInputError, Composite, CudaError, Fill, MemoryRefusedError, OutOfMemoryError, SpecError

__version__: str = _core.__version__

__all__ = [
    "Array",
    "BadInputError",
    "Composite",
    "CudaError",
    "Fill",
    "MemoryRefusedError",
    "OutOfMemoryError",
    "Plan",
    "Spec",
    "SpecError",
    "VerifyReport",
    "__version__",
    "build",
    "cuda_available",
    "fill_",
    "hdf5_available",
    "hf_spec",
    "memory_stats",
    "plan",
    "preset_names",
    "recipe_fill",
    "recipe_names",
    "reset_peak",
    "spec",
    "verify",
]

Spec = _core.Spec
Plan = _core.Plan

#: What a model argument may be: a preset name, a JSON spec file's path, a spec as a dict, or a Spec.
# No forward references: the adapters' annotations resolve them in their own modules (typing.get_type_hints).
ModelLike = Union[str, os.PathLike[str], Mapping[str, Any], _core.Spec]
#: A fill: the CLI's text ("normal(0, 0.02)") or a Fill (``Fill.parse``, ``recipe_fill``).
FillLike = Union[str, _core.Fill]
#: A dtype: a str ("bf16", "bfloat16", "fp16", "half", "float32", ...), a ``torch.dtype``, a NumPy dtype
#: or scalar type (``np.float32``), ml_dtypes' ``bfloat16``, a JAX dtype (``jnp.bfloat16``). Any: the
#: frameworks' types are not imported to name them.
DTypeLike = Any
#: A progress report: None, a function ``f(done_bytes, total_bytes)``, or True for a tqdm bar.
ProgressLike = Union[None, bool, Callable[[int, int], Any]]


_MAX_U64 = 2**64 - 1
_MAX_THREADS = 4096  # the CLI's --threads bound: more threads than any host has cores only cost stacks


# The modules that wrap another under a name of their own, which is no part of a tensor's name:
# activation checkpointing's CheckpointWrapper (torch.distributed.algorithms._checkpoint),
# torch.compile's OptimizedModule, FSDP1's FullyShardedDataParallel. DDP's and DataParallel's
# `module.` is stripped where the wrapper is known to be one (a module), or where every key of a
# state_dict starts with it.
_WRAPPER_COMPONENTS = re.compile(r"(?<![^.])(_checkpoint_wrapped_module|_orig_mod|_fsdp_wrapped_module)\.")


def _unwrapped(name: str) -> str:
    """A parameter's or state_dict key's name without the components wrappers add."""
    return _WRAPPER_COMPONENTS.sub("", name)


def _bad(argument: str, value: str, problem: str, line: Optional[str] = None) -> BadInputError:
    """The error of bad input, the library's own (C++ bad_input, core/errors.hpp): argument, value (as the
    line shows it; '' when none) and problem apart, the line "<argument> <value> <problem>" unless given.
    Raise it: ``raise _bad(...)``."""
    e = BadInputError(line if line is not None else " ".join(part for part in (argument, value, problem) if part))
    e.argument, e.value, e.problem = argument, value, problem
    return e


def _refused(argument: str, line: str) -> BadInputError:
    """_bad for a line of the package's own words about `argument` (a module, a tree, rules, a sharding):
    the line as it is, no one value in it, and its problem the line after the argument where it starts
    with it."""
    problem = line[len(argument):].lstrip(" :") if line.startswith(argument) else line
    return _bad(argument, "", problem, line)


def _listed(names: Any, limit: int = 5) -> str:
    """The first `limit` names, then how many more: "a, b and 3 more"."""
    names = list(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(arg: str, v: Any, lo: int = 0, hi: int = _MAX_U64) -> int:
    """An integer argument in [lo, hi] (Python or NumPy integers, not bool); ValueError naming it."""
    span = f"[{lo}, 2**64)" if hi == _MAX_U64 else f"[{lo}, {hi}]"
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise _bad(arg, f"{type(v).__name__} {_show(v)}", f"must be an integer in {span}",
                   f"{arg} must be an integer in {span}, got {type(v).__name__} {_show(v)}")
    try:  # a registered numbers.Integral whose __int__ raises
        n = int(v)
    except Exception as e:
        raise _bad(arg, type(v).__name__, f"int() raised {type(e).__name__}: {e}",
                   f"{arg}: int() of the {type(v).__name__} raised {type(e).__name__}: {e}") from e
    if not lo <= n <= hi:
        raise _bad(arg, str(n), f"must be in {span}", f"{arg} must be in {span}, got {n}")
    return n


def _str(arg: str, v: Any) -> str:
    """A text argument: a str that UTF-8 can encode (no lone surrogates); ValueError naming it."""
    if not isinstance(v, str):
        raise _bad(arg, f"{type(v).__name__} {_show(v)}", "must be a str", f"{arg} must be a str, got {type(v).__name__} {_show(v)}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _bad(arg, "", f"is not valid text: {e.reason} at index {e.start}") from None
    return v


# What every dtype argument may name: the library's dtypes, by the names frameworks give them.
_DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
_DTYPES_VALID = "'bf16', 'fp16', 'fp32', or a torch, NumPy, ml_dtypes or JAX bfloat16, float16 or float32"


def _dtype_object_name(v: Any) -> Optional[str]:
    """The name ("float32", "bfloat16", "int8", ...) of a torch, NumPy, ml_dtypes or JAX dtype object; None
    for anything else. Imports no framework: an object of one comes from a module already loaded."""
    t = type(v)
    if t.__module__ == "torch" and t.__name__ == "dtype":
        return str(v).removeprefix("torch.")
    np = sys.modules.get("numpy")  # ml_dtypes and JAX load it: none of theirs exists without it
    if np is None:
        return None
    if isinstance(v, np.dtype):  # np.dtype("float32"), jnp.dtype("bfloat16")
        return str(v.name)
    if isinstance(v, type):
        if issubclass(v, np.generic):  # np.float32, ml_dtypes.bfloat16
            return str(np.dtype(v).name)
        d = getattr(v, "dtype", None)  # jnp.float32, jnp.bfloat16: JAX's scalar types carry their dtype
        if isinstance(d, np.dtype):
            return str(d.name)
    return None


def _dtype(arg: str, v: Any) -> str:
    """A dtype argument as the library reads it: a str as given (the library's parse_dtype names what it
    accepts), a dtype object of torch, NumPy, ml_dtypes or JAX as "fp32", "fp16" or "bf16";
    ValueError naming the argument and the valid dtypes for anything else."""
    if isinstance(v, str):
        return _str(arg, v)
    name = _dtype_object_name(v)
    if name is None:
        raise _bad(arg, f"{type(v).__name__} {_show(v)}", f"must be {_DTYPES_VALID}",
                   f"{arg} must be {_DTYPES_VALID}; got {type(v).__name__} {_show(v)}")
    if name not in _DTYPE_NAMES:
        raise _bad(arg, name, f"is not a dtype layerinit makes (valid: {_DTYPES_VALID})",
                   f"{arg} is {name}, which layerinit does not make (valid: {_DTYPES_VALID})")
    return _DTYPE_NAMES[name]


def _bool(arg: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise _bad(arg, f"{type(v).__name__} {_show(v)}", "must be True or False",
                   f"{arg} must be True or False, got {type(v).__name__} {_show(v)}")
    return v


def _seq(arg: str, v: Any, what: str = "a sequence") -> list[Any]:
    """The items of a sequence argument (a tuple, a list, a torch.Size, a NumPy array; not a str,
    bytes or mapping); ValueError naming it, also when iterating it raises."""
    if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__iter__") or not hasattr(v, "__len__"):
        raise _bad(arg, f"{type(v).__name__} {_show(v)}", f"must be {what}", f"{arg} must be {what}, got {type(v).__name__} {_show(v)}")
    try:
        return list(v)
    except Exception as e:
        raise _bad(arg, type(v).__name__, f"iterating it raised {type(e).__name__}: {e}",
                   f"{arg}: iterating the {type(v).__name__} raised {type(e).__name__}: {e}") from e


def _ints(arg: str, v: Any, lo: int = 0) -> list[int]:
    """A sequence of integers in [lo, 2**64) (a tuple, a list, a torch.Size, a NumPy array): a shape or an offset."""
    return [_int(f"{arg}[{i}]", d, lo) for i, d in enumerate(_seq(arg, v, "a sequence of integers"))]


def _shape(arg: str, v: Any) -> list[int]:
    """A shape: integers whose product (the element count) fits in 64 bits, as the library counts."""
    dims = _ints(arg, v)
    if math.prod(dims) > _MAX_U64:
        raise _bad(arg, str(tuple(dims)), "has more than 2**64 elements")
    return dims


def _items(arg: str, v: Any) -> list[tuple[Any, Any]]:
    """The (key, value) pairs of a mapping argument; ValueError naming it when it is not a mapping or
    reading it raises (an items() of its own)."""
    if not isinstance(v, Mapping):
        raise _bad(arg, f"{type(v).__name__} {_show(v)}", "must be a mapping", f"{arg} must be a mapping, got {type(v).__name__} {_show(v)}")
    try:
        return list(v.items())
    except Exception as e:
        raise _bad(arg, type(v).__name__, f"reading it raised {type(e).__name__}: {e}",
                   f"{arg}: reading the {type(v).__name__} raised {type(e).__name__}: {e}") from e


def _str_map(arg: str, v: Any, value: Any) -> dict[str, Any]:
    """A mapping with str keys, each value checked by `value(argument name, value)`."""
    if v is None:
        return {}
    return {_str(f"{arg} key {_show(k)}", k): value(f"{arg}[{k!r}]", x) for k, x in _items(arg, v)}


def _fspath(arg: str, v: Any) -> str:
    """A path argument (a str or an os.PathLike) as a str; ValueError naming it, also when its
    __fspath__ raises or returns bytes."""
    try:
        text = os.fspath(v)
    except Exception as e:
        raise _bad(arg, type(v).__name__, f"os.fspath raised {type(e).__name__}: {e}",
                   f"{arg}: os.fspath of the {type(v).__name__} raised {type(e).__name__}: {e}") from e
    if not isinstance(text, str):
        raise _bad(arg, type(text).__name__, "must be a path as str", f"{arg} must be a path as str, got {type(text).__name__}")
    return _str(arg, text)


def _mesh(mesh: Any) -> Optional[dict[str, int]]:
    if mesh is None:
        return None
    if not isinstance(mesh, Mapping):
        raise _bad("mesh", f"{type(mesh).__name__} {_show(mesh)}", "must be a mapping like {'tp': 2, 'fsdp': 2}",
                   f"mesh must be a mapping like {{'tp': 2, 'fsdp': 2}}, got {type(mesh).__name__} {_show(mesh)}")
    return _str_map("mesh", mesh, lambda a, x: _int(a, x, 1))


class _Progress:
    """A progress argument as one callable (done_bytes, total_bytes): the caller's function, or a tqdm bar
    made at the first report (when the total is known). finish() ends the reports at (total, total)
    whatever the work reported last (verify's missing tensors add no bytes); close() closes the bar."""

    def __init__(self, fn: Optional[Callable[[int, int], Any]] = None, bar: Optional[Callable[[int], Any]] = None):
        self._fn, self._make_bar, self._bar = fn, bar, None
        self.last: Optional[tuple[int, int]] = None

    def __call__(self, done: int, total: int) -> None:
        self.last = (done, total)
        if self._fn is not None:
            self._fn(done, total)
            return
        if self._bar is None:
            assert self._make_bar is not None
            self._bar = self._make_bar(total)
        self._bar.update(done - self._bar.n)

    def finish(self) -> None:
        if self.last is not None and self.last[0] != self.last[1]:
            self(self.last[1], self.last[1])
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _progress(v: Any, what: str) -> Optional[_Progress]:
    """A ``progress`` argument: None or False (no reports), True (a tqdm bar, described `what`), or a
    function f(done_bytes, total_bytes); ValueError naming it for anything else, or for True without tqdm,
    before any work."""
    if v is None or v is False:
        return None
    if v is True:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            raise _bad("progress", "True", "draws a tqdm bar, and tqdm is not installed",
                       "progress=True draws a tqdm bar, and tqdm is not installed: pip install tqdm, or pass "
                       "a function f(done_bytes, total_bytes)") from None
        return _Progress(bar=lambda total: tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=what))
    if not callable(v):
        raise _bad("progress", f"{type(v).__name__} {_show(v)}",
                   "must be None, True or a function f(done_bytes, total_bytes)",
                   f"progress must be None, True or a function f(done_bytes, total_bytes), got "
                   f"{type(v).__name__} {_show(v)}")
    return _Progress(fn=v)


def _reporting(report: Optional[_Progress], work: Callable[[Optional[_Progress]], Any]) -> Any:
    """work(report), then the report's last call (total, total); its bar closed also when work raises."""
    if report is None:
        return work(None)
    try:
        out = work(report)
        report.finish()
        return out
    finally:
        report.close()


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
            raise _bad("dtype", str(dtype), f"needs a copy of the {self.dtype} array (copy=False)",
                       f"a {self.dtype} array cannot become {dtype} without a copy")
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


def hdf5_available() -> bool:
    """Whether this build of layerinit reads HDF5 checkpoints. The pip wheel does not (safetensors only:
    Debian's libhdf5 would bring curl and OpenSSL into it); a build from source with libhdf5 does."""
    return bool(_core.has_hdf5_build)


def hf_spec(config: Any) -> Spec:
    """The spec of a Hugging Face model: its config (``model.config``, any object with
    ``to_json_string``), a config.json dict, or the path of a config.json or of the directory
    holding one. layerinit's C++ reader maps it (docs/spec.md); ValueError names the field, or the
    supported model_types."""
    if isinstance(config, (str, os.PathLike)):
        return _core.Spec.from_hf_config_path(_fspath("config", config))
    if isinstance(config, Mapping):
        return _core.Spec.from_hf_config(config)
    to_json = getattr(config, "to_json_string", None)
    if callable(to_json):
        return _core.Spec.from_hf_config(_str("config", to_json(use_diff=False)))
    raise _bad("config", type(config).__name__, "must be a transformers config, a config.json dict or path",
               f"config must be a transformers config, a config.json dict or path, got {type(config).__name__}")


def spec(model: ModelLike) -> Spec:
    """A model spec: a preset name, the path of a JSON spec file, a spec dict (docs/spec.md), a
    Hugging Face config.json dict (with ``model_type``) or directory (:func:`hf_spec`), or a Spec.

    Raises ValueError for an unknown preset (listing the valid ones) or a malformed spec.
    """
    if isinstance(model, _core.Spec):
        return model
    if isinstance(model, Mapping):
        return hf_spec(model) if "model_type" in model else _core.Spec.from_json(model)
    if isinstance(model, (str, os.PathLike)):
        text = _fspath("model", model)
        if os.path.isdir(text):
            return hf_spec(text)
        if text in _core.preset_names():
            return _core.Spec.preset(text)
        if text.endswith(".json") or os.sep in text:
            # The library's reader, as the CLI's --spec: a regular file of at most 16 MiB (a FIFO or
            # /dev/zero is refused at once), errors naming the OS's reason.
            return _core.Spec.from_json_file(text)
        return _core.Spec.preset(text)  # ValueError listing the presets
    raise _bad("model", type(model).__name__, "must be a preset name, a spec file path, a spec dict or a Spec",
               f"model must be a preset name, a spec file path, a spec dict or a Spec, got {type(model).__name__}")


def _fill(f: FillLike, arg: str = "fill") -> Fill:
    if isinstance(f, _core.Fill):
        return f
    if isinstance(f, str):
        return _core.Fill.parse(_str(arg, f), arg)
    raise _bad(arg, f"{type(f).__name__} {_show(f)}", "must be a string like 'normal(0, 0.02)' or a Fill",
               f"{arg} must be a string like 'normal(0, 0.02)' or a Fill, got {type(f).__name__} {_show(f)}")


def _fill_text(f: FillLike, arg: str) -> str:
    """A fill as the library reads options (init/options.hpp): its text, or a Fill's exact text."""
    if isinstance(f, _core.Fill):
        return f.text
    if isinstance(f, str):
        return _str(arg, f)
    raise _bad(arg, f"{type(f).__name__} {_show(f)}", "must be a string like 'normal(0, 0.02)' or a Fill",
               f"{arg} must be a string like 'normal(0, 0.02)' or a Fill, got {type(f).__name__} {_show(f)}")


def _overrides(arg: str, v: Any, value: Any) -> list[tuple[str, str]]:
    """A mapping of name globs as (glob, text) in its own order: the last match wins, as the CLI's
    repeated flags do."""
    return list(_str_map(arg, v, value).items())


def _describe(description: Mapping[str, Any], *, recipe: Optional[str] = None,
              overrides: Optional[Mapping[str, FillLike]] = None) -> tuple[Spec, list[_core.DescribedParameter]]:
    """(Spec, what each parameter became) of a model description (docs/spec.md, "Descriptions"): the
    one set of rules both adapters hand their framework's parameters to. With ``recipe``, ValueError
    listing the parameters whose fill it cannot tell from the description."""
    fills = _overrides("overrides", overrides, lambda a, f: _fill_text(f, a))
    return _core.describe(description, None if recipe is None else _str("recipe", recipe), fills)


def plan(
    model: ModelLike,
    *,
    dtype: Optional[DTypeLike] = None,
    seed: int = 0,
    recipe: str = "hf",
    layout: str = "per-layer",
    orientation: str = "out-in",
    experts: str = "stacked",
    overrides: Optional[Mapping[str, FillLike]] = None,
    dtype_overrides: Optional[Mapping[str, DTypeLike]] = None,
    strict: bool = False,
) -> Plan:
    """What :func:`build` would make, without memory: ``plan(...).tensors()`` lists (name, shape,
    dtype, kind, layer); ``plan(...).fill(name, array, offset)`` fills a piece of one tensor;
    ``plan(...).composite(...)`` describes a parameter made of several tensors.

    ``overrides`` maps name globs to fills (the CLI's ``--init-override``), ``dtype_overrides``
    name globs to dtypes (``--dtype-override``), each in the mapping's order: the last match wins. A
    glob that matches no tensor (a typo) is a warning, as the CLI's, or with ``strict=True`` a
    ValueError naming it. A plan holds memory independent of the number of layers: names are looked
    up by their layer index.
    """
    s = spec(model)
    p = _plan(s, dtype=dtype, seed=seed, recipe=recipe, layout=layout, orientation=orientation, experts=experts,
              overrides=overrides, dtype_overrides=dtype_overrides)
    _check_patterns(s, _overrides("overrides", overrides, _fill_text), _overrides("dtype_overrides", dtype_overrides, _dtype),
                    _bool("strict", strict))
    return p


def _plan(s: Spec, *, dtype: Optional[DTypeLike] = None, seed: int = 0, recipe: str = "hf", layout: str = "per-layer",
          orientation: str = "out-in", experts: str = "stacked", overrides: Optional[Mapping[str, FillLike]] = None,
          dtype_overrides: Optional[Mapping[str, DTypeLike]] = None) -> Plan:
    """plan() of a Spec without the check of its override globs (a caller that checks them once)."""
    seed = _int("seed", seed)
    fills = _overrides("overrides", overrides, lambda a, f: _fill_text(f, a))
    dtypes = _overrides("dtype_overrides", dtype_overrides, _dtype)
    d = None if dtype is None else _dtype("dtype", dtype)  # None: the model's (a Hugging Face config's dtype, else bf16)
    return _core.Plan(s, _str("recipe", recipe), fills, d, dtypes, seed,
                      _str("layout", layout), _str("orientation", orientation), _str("experts", experts))


def _check_patterns(s: Spec, fills: Sequence[tuple[str, str]], dtypes: Sequence[tuple[str, str]], strict: bool,
                    stacklevel: int = 3) -> None:
    """Each override glob that matches no tensor of `s` (a typo, most likely): a warning naming it, as the
    CLI's, or with `strict` a ValueError naming the first."""
    for arg, pairs in (("overrides", fills), ("dtype_overrides", dtypes)):
        for pattern in s._unmatched([k for k, _ in pairs]):
            what = f"{arg} pattern {pattern!r} matches no tensor of {s.name!r}"
            if strict:
                raise _bad(arg, f"pattern {pattern!r}", f"matches no tensor of {s.name!r} (strict=True)")
            warnings.warn(what, stacklevel=stacklevel)


def _target(array: Any) -> tuple[Any, Optional[str]]:
    """The array DLPack can export, and the dtype its elements' bits hold when it differs."""
    if array is None:
        raise _bad("array", "None", "must export DLPack (__dlpack__) or the buffer protocol",
                   "array must export DLPack (__dlpack__) or the buffer protocol, got None")
    if getattr(array, "requires_grad", False) and hasattr(array, "detach"):
        return array.detach(), None  # same storage; DLPack refuses tensors that require grad
    if type(array).__module__ == "numpy" and getattr(array.dtype, "name", "") == "bfloat16":
        return array.view("uint16"), "bf16"  # ml_dtypes' bfloat16: numpy cannot export it
    return array, None


def _plan_fill(self: Plan, name: str, array: Any, offset: Optional[Sequence[int]] = None,
               allow_strided: bool = False, bits_as: Optional[str] = None) -> None:
    """Fills ``array`` in place: the piece at ``offset`` of tensor ``name`` (a canonical name, or a
    stacked buffer's in the stacked layout), with the build's values. ``allow_strided`` accepts
    arrays whose last dimension is contiguous (a view into a larger tensor)."""
    target, as_bits = _target(array)
    off = [] if offset is None else _ints("offset", offset)
    _core.Plan._fill(self, _str("name", name), target, off, _bool("allow_strided", allow_strided),
                     as_bits if bits_as is None else _str("bits_as", bits_as))


def _plan_composite(
    self: Plan,
    names: Union[str, Sequence[str]],
    *,
    stack: Sequence[int] = (),
    first: Optional[Sequence[int]] = None,
    dim: int = 0,
    rows: Optional[Sequence[Optional[str]]] = None,
    groups: int = 1,
) -> Composite:
    """A parameter made of this plan's tensors, as a :class:`Composite`.

    - ``plan.composite(name)``: a name :meth:`tensors` lists: a tensor whole, or a stacked buffer
      (``[L, ...]``, fused experts ``[L, E, ...]``).
    - ``plan.composite([t0, t1, ...], stack=[L], first=[0], dim=0, rows=[...])``: name templates, where
      ``{k}`` is stack axis k's index (``first[k]`` + the position along it) and ``{{``/``}}`` are
      braces, concatenated along dimension ``dim`` of the tensors as stored, under leading stack axes
      of sizes ``stack``. ``rows`` gives each template a row permutation, ``None`` or
      ``"rope_interleave(HEAD_DIM)"`` (torchtitan's interleaved q/k layout). ``groups`` > 1 splits
      each tensor into that many equal slabs along ``dim`` and places slab 0 of each, then slab 1 of
      each, and so on.

    A JAX leaf stacked by ``filter_vmap`` is ``plan.composite(["blocks.{0}.attn.wq.weight"],
    stack=[L])``; torchtitan's fused wqkv, grouped by kv head, is ``plan.composite([q, k, v],
    rows=[rope, rope, None], groups=n_kv_heads)``.
    """
    if isinstance(names, str):
        if stack or first is not None or dim != 0 or rows is not None or groups != 1:
            names = [names]
        else:
            return _core.Plan._composite(self, _str("names", names))
    templates = [_str(f"names[{i}]", n) for i, n in enumerate(_seq("names", names, "a str or a sequence of str"))]
    sizes = _ints("stack", stack, 1)
    firsts = [0] * len(sizes) if first is None else _ints("first", first)
    if len(firsts) != len(sizes):
        raise _bad("first", f"has {len(firsts)} entries", f"for {len(sizes)} stack axes")
    perms: list[Optional[str]] = [None] * len(templates) if rows is None else _seq("rows", rows, "a sequence of "
                                                                                   "None or str")
    if len(perms) != len(templates):
        raise _bad("rows", f"has {len(perms)} entries", f"for {len(templates)} names")
    perms = [None if r is None else _str(f"rows[{i}]", r) for i, r in enumerate(perms)]
    return _core.Plan._assemble(self, templates, list(zip(sizes, firsts)), _int("dim", dim, 0, 63), perms,
                                _int("groups", groups, 1))


def _plan_fused_experts(self: Plan, name: str, shape: Sequence[int]) -> Optional[Composite]:
    """transformers 5's fused experts parameter ``...mlp.experts.gate_up_proj`` ``[E, 2F, H]`` (gate
    and up of each expert) or ``...mlp.experts.down_proj`` ``[E, H, F]`` as a :class:`Composite` of
    the plan's per-expert tensors; None for other names. ValueError when ``shape`` is not theirs."""
    return _core.Plan._fused_experts(self, _str("name", name), _shape("shape", shape))


def _plan_fill_of(self: Plan, name: str) -> Fill:
    """The fill of canonical tensor ``name`` (outside its fill regions, which :meth:`composite` carries);
    ValueError (with names close to it) when the plan has none."""
    return _core.Plan._fill_of(self, _str("name", name))


def _plan_logical_shape(self: Plan, name: str) -> list[int]:
    """The logical shape of canonical tensor ``name`` (``[out, in]`` for a linear weight in either orientation)."""
    return list(_core.Plan._logical_shape(self, _str("name", name)))


_core_tensor_name = _core.Composite.tensor_name


def _composite_tensor_name(self: Composite, part: int, index: Sequence[int] = ()) -> str:
    """The name of part ``part``'s tensor at stack position ``index`` (one entry per stack axis)."""
    p = _int("part", part, 0, len(self.parts) - 1)
    idx = _ints("index", index)
    if len(idx) != len(self.stack) or any(i >= size for i, (size, _) in zip(idx, self.stack)):
        raise _bad("index", str(tuple(idx)), f"is not a position of the stack axes {[size for size, _ in self.stack]}")
    return _core_tensor_name(self, p, idx)


Composite.tensor_name = _composite_tensor_name  # type: ignore[method-assign]
Plan.fill = _plan_fill  # type: ignore[method-assign]
Plan.fill_of = _plan_fill_of  # type: ignore[attr-defined]
Plan.logical_shape = _plan_logical_shape  # type: ignore[attr-defined]
Plan.composite = _plan_composite  # type: ignore[attr-defined]
Plan.fused_experts = _plan_fused_experts  # type: ignore[attr-defined]


def build(
    model: ModelLike,
    *,
    dtype: Optional[DTypeLike] = None,
    seed: int = 0,
    recipe: str = "hf",
    layout: str = "per-layer",
    orientation: str = "out-in",
    device: str = "cpu",
    mesh: Optional[Mapping[str, int]] = None,
    rank: Optional[int] = None,
    experts: str = "stacked",
    overrides: Optional[Mapping[str, FillLike]] = None,
    dtype_overrides: Optional[Mapping[str, DTypeLike]] = None,
    threads: int = 0,
    strict: bool = False,
    progress: ProgressLike = None,
) -> dict[str, Array]:
    """Builds a model's tensors and returns them by name, in file order.

    Each :class:`Array` owns its bytes in layerinit's tracked memory (:func:`memory_stats`) until it
    and every array taken from it (``torch.from_dlpack(a)``, ``numpy.asarray(a)``, ...) are gone.

    - ``model``: a preset name, a JSON spec path, a spec dict or a :class:`Spec`.
    - ``dtype``: ``"bf16"``, ``"fp16"`` or ``"fp32"``, or a framework's dtype (``torch.bfloat16``,
      ``np.float32``, ``jnp.bfloat16``, ml_dtypes' ``bfloat16``); None (the default): a Hugging Face config's
      ``dtype`` (else ``torch_dtype``; float32, float16, bfloat16), else ``"bf16"``, as the CLI
      without ``--dtype``; ValueError names the field when the config's is another. ``recipe``: a name of :func:`recipe_names`,
      with parameters as ``"mup:base_width=256"``; ``seed``: 0 .. 2**64 - 1.
    - ``layout``: ``"per-layer"`` (one array per tensor) or ``"stacked"`` (one ``[L, ...]`` array per
      layer parameter; MoE experts ``[L, E, ...]`` unless ``experts="per-expert"``).
    - ``orientation``: ``"out-in"`` (PyTorch, Equinox) or ``"in-out"`` (Flax: linear kernels ``[in, out]``).
    - ``device``: ``"cpu"``, ``"cuda"`` (``"cuda:0"``) or ``"cuda:N"`` (a CUDA build with a GPU); a
      device this process does not have is a ValueError before anything is allocated.
    - ``mesh`` and ``rank``: only rank ``rank``'s pieces of the mesh ``{"tp": T, "pp": P, "ep": E,
      "fsdp": F}`` (docs/sharding.md); each Array's ``global_shape`` and ``offset`` say where its
      piece sits.
    - ``threads``: host threads, 0 (the CPUs this process may use: affinity and cgroup quota) .. 4096.
    - ``overrides``, ``dtype_overrides``, ``strict``: as :func:`plan` takes them.
    - ``progress``: a function ``f(done_bytes, total_bytes)``, called on this thread with (0, total) before
      the first part, after each part (a layer, or the tensors before or after the layers) and last with
      (total, total); what it raises stops the build (its memory given back) and is raised. ``True``
      draws a tqdm bar (ValueError when tqdm is not installed). ``total_bytes`` is the bytes built: the
      model's, or rank ``rank``'s pieces.
    """
    meshes = _mesh(mesh)
    r = None if rank is None else _int("rank", rank)
    t = _int("threads", threads, 0, _MAX_THREADS)
    dev = _str("device", device)
    report = _progress(progress, "build")
    p = plan(model, dtype=dtype, seed=seed, recipe=recipe, layout=layout, orientation=orientation, experts=experts,
             overrides=overrides, dtype_overrides=dtype_overrides, strict=strict)
    return _reporting(report, lambda f: p.build(dev, meshes, r, t, f))


def fill_(
    array: Any,
    name: Union[str, Composite],
    fill: Optional[FillLike] = None,
    *,
    seed: int = 0,
    global_shape: Optional[Sequence[int]] = None,
    offset: Optional[Sequence[int]] = None,
    transposed: bool = False,
    dtype: Optional[DTypeLike] = None,
) -> Any:
    """Fills ``array`` in place with the values of tensor ``name`` and returns it.

    ``array`` is any writable, contiguous array that exports DLPack or the buffer protocol: a torch
    tensor (CPU or CUDA), a NumPy array (bfloat16 through ml_dtypes), a CuPy array. Its dtype
    (float32, float16, bfloat16) is the tensor's: values differ between dtypes. A 0-d array holds
    element 0; an empty array is left as it is.

    - ``fill``: the CLI's grammar, ``"normal(0, 0.02)"``, ``"trunc_normal(0, 0.02, -2, 2)"``,
      ``"trunc_normal_std(0, 0.02, -3, 3)"``, ``"uniform(-0.1, 0.1)"``, ``"constant(1)"``, or a
      :class:`Fill` (``recipe_fill`` gives a recipe's).
    - ``global_shape`` and ``offset``: the array is the piece at ``offset`` of a tensor of
      ``global_shape`` (default: the whole tensor), as DTensor or a JAX shard holds it.
    - ``transposed``: the array holds a 2-D tensor stored ``[in, out]`` (in-out orientation);
      ``global_shape`` is the stored shape.
    - ``dtype``: when given, the array's dtype must be this one (a str or a framework's dtype, as
      :func:`build` takes it).
    - ``name`` may be a :class:`Composite` instead (no ``fill``, ``global_shape`` or ``transposed``:
      it says them): the array is its piece at ``offset``.

    Raises ValueError naming the argument for a wrong type or value, a non-contiguous, read-only or
    immutable (JAX) array, a dtype other than float32/float16/bfloat16 or other than ``dtype``, a
    piece outside ``global_shape``, a bad fill.
    """
    target, bits_as = _target(array)
    seed = _int("seed", seed)
    off = None if offset is None else _ints("offset", offset)
    want = None if dtype is None else _dtype("dtype", dtype)
    if isinstance(name, _core.Composite):
        if fill is not None or global_shape is not None or transposed:
            raise _bad("fill", "", "comes from the Composite (and global_shape and transposed): leave them out",
                       "fill, global_shape and transposed come from the Composite: leave them out")
        if want is not None and _canonical_dtype(want) != name.dtype:
            raise _bad("dtype", str(want), f"is not the composite's {name.dtype}",
                       f"dtype mismatch: asked for {want}, the composite is {name.dtype}")
        _core.fill_composite(target, name, seed, [] if off is None else off, False, bits_as)
        return array
    if fill is None:
        raise _bad("fill", "None", "is required with a tensor name (a Composite carries its own)",
                   "fill is required with a tensor name (a Composite carries its own)")
    _core.fill(
        target,
        _str("name", name),
        _fill(fill),
        seed,
        None if global_shape is None else _shape("global_shape", global_shape),
        off,
        _bool("transposed", transposed),
        want,
        bits_as,
    )
    return array


def _canonical_dtype(name: str) -> str:
    """parse_dtype's spellings (dtypes/dtype.cpp) as the names layerinit prints."""
    return {**_DTYPE_NAMES, "f32": "fp32", "f16": "fp16", "half": "fp16"}.get(name, name)


def recipe_fill(model: ModelLike, name: str, *, recipe: str = "hf") -> Fill:
    """The fill ``recipe`` gives tensor ``name`` (canonical) of ``model``, outside its fill regions:
    ``fill_(a, name, recipe_fill(m, name), seed=s)`` puts in ``a`` what ``build(m, seed=s)[name]``
    holds for a tensor without regions (``fill_(a, plan(m).composite(name), seed=s)`` for any)."""
    return plan(model, recipe=recipe).fill_of(name)


def memory_stats(device: str = "cpu") -> dict[str, int]:
    """layerinit's tracked memory on ``device``: current_bytes, peak_bytes, total_bytes and the
    allocation counts (current_count, peak_count, total_count). Arrays count until they are freed."""
    return dict(_core.memory_stats(_str("device", device)))


def reset_peak(device: str = "cpu") -> None:
    """Resets ``memory_stats(device)["peak_bytes"]`` to the bytes in use now."""
    _core.reset_peak(_str("device", device))


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found: ``ok`` when every tensor of the model is there with the init's
    bits and nothing else is. ``tensors`` lists each tensor as a dict, the model's in its order, then
    the unexpected ones: name, status (``"equal"``, ``"differs"``, ``"missing"``, ``"unexpected"``),
    expected and stored ``{"shape", "dtype"}``, elements, differing, first_difference (index,
    coords, expected, stored and their bits), diagnosis (kind, text, and tensor, heads, seed,
    offset, index, dtype where they apply): the JSON ``layerinit verify --report json`` prints
    (docs/checkpoint.md). ``str(report)`` is the CLI's text: a line per tensor that is not equal,
    then the counts."""

    ok: bool
    equal: int
    differs: int
    missing: int
    unexpected: int
    bytes_read: int
    seconds: float
    tensors: list[dict[str, Any]] = field(repr=False)
    _document: dict[str, Any] = field(repr=False, compare=False)
    _text: str = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self._text

    def as_dict(self) -> dict[str, Any]:
        """The report as the JSON object: ok, the counts, bytes_read, seconds, tensors (a new copy)."""
        return copy.deepcopy(self._document)

    def tensor(self, name: str) -> dict[str, Any]:
        """The entry of tensor ``name``; KeyError when the report has none."""
        for t in self.tensors:
            if t["name"] == name:
                return t
        raise KeyError(name)


# Element types by their safetensors names: what a checkpoint of the same tensors would say.
_SAFETENSORS_DTYPES = {
    "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}


def _stored_tensors(source: Mapping[str, Any]) -> tuple[list[tuple[str, str, list[int], int]], list[Any], list[str]]:
    """The tensors of a dict source as (name, dtype, shape, element size), a function per tensor giving its
    bytes (a NumPy uint8 array, made only when the library asks for it: a CUDA tensor is copied to the
    host then), and the names that are another entry's memory (a tied parameter's second name)."""
    try:
        import numpy as np
    except ImportError as e:
        raise ValueError("verify of a dict of arrays needs numpy") from e
    tensors, getters, aliases = [], [], []
    seen: dict[Any, str] = {}
    for name, v in _items("source", source):
        arg = f"source[{_show(name)}]"
        name = _str(f"source key {_show(name)}", name)
        mod = type(v).__module__.split(".")[0]
        if mod == "torch":
            import torch

            if not isinstance(v, torch.Tensor):
                raise _bad(arg, type(v).__name__, "must be an array", f"{arg} must be an array, got {type(v).__name__}")
            if type(v).__name__ == "DTensor" or hasattr(v, "full_tensor"):
                raise _bad(arg, "", "is a DTensor: pass its full_tensor() (a collective: call it on every rank)")
            if v.layout != torch.strided or v.is_meta:
                raise _bad(arg, "", f"holds no dense values (layout {v.layout}, device {v.device})")
            dtype = str(v.dtype).removeprefix("torch.")
            shape, esize = list(v.shape), v.element_size()
            if v.numel():  # ties: one tensor under two names, as state_dict() gives them
                key = (v.device, v.data_ptr(), tuple(v.shape), v.stride(), v.dtype)
                if key in seen:
                    aliases.append(name)
                seen.setdefault(key, name)

            def get(t: Any = v) -> Any:
                t = t.detach().resolve_conj().resolve_neg()
                if t.device.type != "cpu":
                    t = t.to("cpu")
                return t.contiguous().reshape(-1).view(torch.uint8).numpy()
        else:
            if mod in ("jax", "jaxlib"):
                a = v  # copied to the host when the library asks for it
                dt, shape = np.dtype(v.dtype), list(v.shape)
            elif isinstance(v, np.ndarray):
                a, dt, shape = v, v.dtype, list(v.shape)
            elif isinstance(v, Array):
                if v.device != "cpu":
                    raise _bad(arg, "", f"is a layerinit.Array on {v.device}: take it with torch.from_dlpack")
                a = v._numpy_view()  # bf16 as uint16
                dt, shape = a.dtype, list(v.shape)
            else:
                raise _bad(arg, type(v).__name__, "must be a torch tensor, a NumPy or JAX array",
                           f"{arg} must be a torch tensor, a NumPy or JAX array, got {type(v).__name__}")
            if dt.kind == "O" or dt.fields is not None:
                raise _bad(arg, f"of dtype {dt}", "holds no numbers")
            dtype = dt.name
            if isinstance(v, Array):
                dtype = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[v.dtype]
            esize = dt.itemsize

            def get(a: Any = a) -> Any:
                h = np.asarray(a)
                if h.dtype.byteorder == ">":
                    h = h.astype(h.dtype.newbyteorder("<"))
                return np.ascontiguousarray(h).reshape(-1).view(np.uint8)
        tensors.append((name, _SAFETENSORS_DTYPES.get(dtype, dtype), shape, esize))
        getters.append(get)
    return tensors, getters, aliases


def verify(
    source: Union[str, "os.PathLike[str]", Mapping[str, Any]],
    model: Optional[ModelLike] = None,
    *,
    dtype: Optional[DTypeLike] = None,
    seed: Optional[int] = None,
    recipe: Optional[str] = None,
    layout: Optional[str] = None,
    orientation: Optional[str] = None,
    experts: Optional[str] = None,
    overrides: Optional[Mapping[str, FillLike]] = None,
    dtype_overrides: Optional[Mapping[str, DTypeLike]] = None,
    threads: int = 0,
    diagnose: bool = True,
    seed_guesses: Sequence[int] = (),
    progress: ProgressLike = None,
) -> VerifyReport:
    """Compares ``source`` with the init of ``model`` made with these options, tensor by tensor,
    and for each tensor that differs says what was done to it (``layerinit verify``, docs/checkpoint.md "Verify").

    - ``source``: a checkpoint's path (a safetensors file or directory, save_pretrained's included,
      an HDF5 file, a directory of ``emit --rank`` files), or a mapping of names to arrays: a
      ``state_dict`` (CPU or CUDA tensors; a CUDA tensor is copied to the host one at a time, when it
      is compared), NumPy arrays (bfloat16 through ml_dtypes), JAX arrays. A torch tensor that is
      another entry's memory (a tied parameter's second name) and that the model does not have is
      left out, as ``save_pretrained`` leaves it out. A DTensor is refused: pass its ``full_tensor()``.
    - ``model`` and the options as :func:`build` takes them. Each left None comes from the
      checkpoint's metadata when layerinit wrote it, else is build's default (the model's dtype,
      seed 0, recipe "hf", per-layer, out-in, stacked experts); one given replaces the metadata's.
    - ``threads``: host threads making the expected values (0: the CPUs this process may use). ``diagnose=False``: no
      search for what was done to a tensor that differs (its status, counts and first difference only).
      ``seed_guesses``: seeds the ``other_seed`` diagnosis tries besides 0..1023 and the metadata's
      (the CLI's ``--seed-guess``).
    - ``progress``: as :func:`build`'s, ``f(done_bytes, total_bytes)`` of the model's bytes compared:
      after each chunk (64 MiB) and each tensor, last with (total, total).

    Returns a :class:`VerifyReport`; a checkpoint that differs is a report, not an error. Raises
    ValueError for no model and no metadata naming one (``model``), a checkpoint or dict that is not
    of the model at all (fewer than half of its tensors there by name and size), a path that is not a
    checkpoint, and a bad argument (naming it); OSError when reading the checkpoint fails.
    """
    m = None if model is None else spec(model)
    args = dict(
        dtype=None if dtype is None else _dtype("dtype", dtype),
        seed=None if seed is None else _int("seed", seed),
        recipe=None if recipe is None else _str("recipe", recipe),
        layout=None if layout is None else _str("layout", layout),
        orientation=None if orientation is None else _str("orientation", orientation),
        experts=None if experts is None else _str("experts", experts),
        overrides=None if overrides is None else _overrides("overrides", overrides, lambda a, f: _fill_text(f, a)),
        dtype_overrides=None if dtype_overrides is None else _overrides("dtype_overrides", dtype_overrides, _dtype),
        threads=_int("threads", threads, 0, _MAX_THREADS),
        diagnose=_bool("diagnose", diagnose),
        seed_guesses=_ints("seed_guesses", seed_guesses),
    )
    report = _progress(progress, "verify")
    if isinstance(source, Mapping):
        tensors, getters, aliases = _stored_tensors(source)
        # A wrapped model's state_dict: its tensors under the names the model has without the wrappers.
        names = [_unwrapped(t[0]) for t in tensors]
        if names and all(n.startswith("module.") for n in names):  # DistributedDataParallel's
            names = [n[len("module."):] for n in names]
        renamed = dict(zip((t[0] for t in tensors), names))
        if len(set(names)) == len(names):
            tensors = [(renamed[t[0]], *t[1:]) for t in tensors]
            aliases = [renamed[a] for a in aliases]
        j, text = _reporting(report, lambda f: _core.verify_tensors(tensors, lambda k: getters[k](), aliases, m,
                                                                    progress=f, **args))
    elif isinstance(source, (str, os.PathLike)):
        path = _fspath("source", source)
        j, text = _reporting(report, lambda f: _core.verify_path(path, m, progress=f, **args))
    else:
        raise _bad("source", type(source).__name__, "must be a checkpoint's path or a mapping of names to arrays",
                   f"source must be a checkpoint's path or a mapping of names to arrays, got {type(source).__name__}")
    # j: the library's report document, a dict of its own; tensors a copy, apart from what as_dict() copies.
    return VerifyReport(j["ok"], j["equal"], j["differs"], j["missing"], j["unexpected"], j["bytes_read"], j["seconds"],
                        copy.deepcopy(j["tensors"]), j, text)
