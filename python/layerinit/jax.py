"""JAX, Equinox and Flax NNX parameters made by XLA itself, filled in place by layerinit (docs/python.md).

- :func:`init` fills a model pytree (an abstract one from ``eqx.filter_eval_shape``,
  ``nnx.eval_shape`` or ``jax.eval_shape``, or real arrays) and returns the same pytree with new arrays.
- :func:`build` makes a preset's or a spec's tensors by name.

Each array is the output of one XLA FFI call (layerinit._core.xla): XLA allocates the buffer on its device
and layerinit's handler writes the values into it (the host fill on the CPU, the CUDA kernel on XLA's
stream on a GPU). Sharded arrays are made inside ``jax.shard_map``, so each device creates only its
own piece, and the global array is the same for every mesh and PartitionSpec. Works eagerly and inside
``jax.jit``; every array is in its final dtype from the start.
"""
from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from ._jax_record import Recorded, eval_shape
from . import (_DTYPES_VALID, DTypeLike, Fill, FillLike, ModelLike, Plan, Spec, _bool, _canonical_dtype, _core, _describe,
               _bad, _dtype, _listed, _refused, _dtype_object_name, _items, _seq, _show, _str, _str_map)
from . import plan as _layerinit_plan

__all__ = ["ROLES", "Recorded", "build", "eval_shape", "init", "plan", "spec_of"]

#: Roles a rule may give a leaf (docs/spec.md): recipes pick each tensor's fill by its role.
ROLES = tuple(_core.role_names())

ShardingLike = Union[Sharding, PartitionSpec, Mapping[str, Any], Callable[[str], Any], Any, None]

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# The FFI target the arrays are made with; the tests swap in "layerinit_fill_grid" (the CUDA handler's
# path over the host-simulated grid).
_TARGET = "layerinit_fill"
_registered = False


def _xla() -> Any:
    """layerinit._core.xla with its handlers registered with XLA (once)."""
    global _registered
    mod = getattr(_core, "xla", None)
    if mod is None:
        raise RuntimeError(
            "layerinit was installed without its XLA FFI handlers (layerinit._core.xla): no jaxlib was found when "
            "`pip install .` ran. Install jax first, then reinstall layerinit")
    if not _registered:
        # XLA takes a type only before the handlers that use it; registrations made before a backend
        # starts wait, and the backend then takes the handlers first: start every backend first.
        jax.devices()
        for name, registration, platform in mod.param_types():
            jax.ffi.register_ffi_type(name, registration, platform=platform)
        for name, capsule, platform in mod.targets():
            jax.ffi.register_ffi_target(name, capsule, platform=platform, api_version=1)
        _registered = True
    return mod


def _dtype_name(dtype: Any, what: str) -> str:
    """"fp32", "fp16" or "bf16" of a leaf's dtype; ValueError naming the leaf (`what`) for another."""
    name = _dtype_object_name(dtype) or str(dtype)
    if name not in _DTYPES:
        raise _refused(what, f"{what} is {name}: layerinit fills float32, float16 and bfloat16 arrays")
    return _DTYPES[name]


def _dtype_arg(dtype: Any) -> Optional[str]:
    """init's ``dtype`` argument as "fp32", "fp16" or "bf16" (layerinit._dtype: a str or any framework's
    dtype), None for None; ValueError naming it and the valid ones for another."""
    if dtype is None:
        return None
    name = _canonical_dtype(_dtype("dtype", dtype))
    if name not in _DTYPES.values():
        raise _refused("dtype", f"dtype {dtype!r} is unknown (valid: {_DTYPES_VALID})")
    return name


def _jnp_dtype(name: str) -> Any:
    return {"fp32": jax.numpy.float32, "fp16": jax.numpy.float16, "bf16": jax.numpy.bfloat16}[name]


# ---------------------------------------------------------------------------------------------------
# Filling arrays: one FFI call per array, inside shard_map when the array is sharded.

@dataclass
class _Array:
    """One array to make: its stored shape and dtype, its composite text (the handler's attribute), its
    sharding."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    param: str
    sharding: Optional[Sharding] = None
    local: tuple[int, ...] = ()
    table: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pieces: bool = False  # made piece by piece inside shard_map
    old: Any = None  # the array it replaces in place (init's donate=True), or None


# Each device's ordinal as XLA hands it to a handler (its execution context's DeviceOrdinal): learned
# from the probe handler, since it is not a documented property of a jax Device (a CPU device passes
# its global id, 2048 and up on a second process, where its local_hardware_id is 0).
_ORDINALS: dict[Any, int] = {}


def _learn_ordinals(devices: Any) -> None:
    todo = [d for d in devices if d not in _ORDINALS]
    for platform in sorted({d.platform for d in todo}):
        ds = [d for d in todo if d.platform == platform]
        mesh = jax.sharding.Mesh(np.array(ds), ("d",))
        call = jax.ffi.ffi_call("layerinit_ordinal", jax.ShapeDtypeStruct((1,), jax.numpy.int32),
                                vmap_method="sequential")
        probe = jax.shard_map(lambda: call(), mesh=mesh, in_specs=(), out_specs=PartitionSpec("d"), check_vma=False)
        # Compiled, then run: now, also while the caller's jit traces init (ensure_compile_time_eval
        # would run the body once, on one device).
        ordinals = np.asarray(jax.jit(probe).lower().compile()())
        _ORDINALS.update(zip(ds, (int(o) for o in ordinals)))


def _place(a: _Array) -> None:
    """Each device's piece of `a`: its local shape and the table of (device ordinal, offset) rows.

    Raises ValueError naming the array for a sharding that layerinit cannot fill piece by piece.
    """
    sh = a.sharding
    a.local = a.shape
    if sh is None or isinstance(sh, SingleDeviceSharding) or sh.is_fully_replicated:
        return
    if not isinstance(sh, NamedSharding):
        raise _refused("sharding", f"'{a.name}': sharding {type(sh).__name__} is not a NamedSharding: layerinit.jax fills the "
                                   "pieces of a NamedSharding (a mesh and a PartitionSpec) or arrays on one device")
    a.pieces = True
    try:
        a.local = tuple(sh.shard_shape(a.shape))
        pieces = sh.devices_indices_map(a.shape)
    except Exception as e:  # IndivisibleError, a spec longer than the shape, ...
        raise _refused("sharding", f"'{a.name}': {sh.spec} cannot split {a.shape}: {e}") from None
    rows = []
    me = jax.process_index()
    _learn_ordinals([d for d in pieces if d.process_index == me])
    for device, index in pieces.items():
        offset = []
        for d, n in enumerate(a.shape):
            s = index[d] if d < len(index) else slice(None)
            if not isinstance(s, slice) or s.step not in (None, 1):
                raise _refused("sharding", f"'{a.name}': the piece of {device} is {index}, not a box: layerinit fills boxes")
            start, stop, _ = s.indices(n)
            if stop - start != a.local[d]:
                raise _refused("sharding", f"'{a.name}': the piece of {device} is {index}, not of the shard shape {a.local}")
            offset.append(start)
        if device.process_index == me:
            rows.append([_ORDINALS[device], *offset])
    a.table = np.asarray(rows, np.int64).reshape(-1)


def _fill(a: _Array, seed: int, old: Any = None) -> jax.Array:
    """The traced FFI call that makes `a` (inside shard_map when it is sharded); with `old` (the array
    it replaces, donated), the output is that buffer."""
    call = jax.ffi.ffi_call(_TARGET, jax.ShapeDtypeStruct(a.local, _jnp_dtype(a.dtype)),
                            vmap_method="sequential",  # a batch of inits is the same init again
                            input_output_aliases={0: 0} if old is not None else None)
    # The u64 seed's bits as an i64: MLIR's integer attributes take at most 2^63 - 1 from Python.
    bits = np.int64(seed - 2**64 if seed >= 2**63 else seed)

    def make(*old_piece: jax.Array) -> jax.Array:
        return call(*(o.reshape(a.local) for o in old_piece), seed=bits, param=a.param, table=a.table)

    operands = () if old is None else (old,)
    if not a.pieces:
        return make(*operands)
    assert isinstance(a.sharding, NamedSharding)
    return jax.shard_map(make, mesh=a.sharding.mesh, in_specs=(a.sharding.spec,) * len(operands),
                         out_specs=a.sharding.spec, check_vma=False)(*operands)


def _tracing() -> bool:
    """Whether a caller's transformation (jit, shard_map, ...) is tracing us: a new array is then a tracer."""
    return isinstance(jax.numpy.zeros((), jax.numpy.int8), jax.core.Tracer)


def _make(arrays: Sequence[_Array], seed: int) -> list[jax.Array]:
    """Every array in one XLA program (or in the caller's, under jit): XLA allocates each output once,
    or reuses the donated array it replaces (`_Array.old`)."""
    xla = _xla()
    for a in arrays:
        _place(a)
    olds = [a.old for a in arrays]
    fn = lambda olds: [_fill(a, seed, old) for a, old in zip(arrays, olds)]  # noqa: E731
    shardings = [a.sharding for a in arrays]
    kwargs: dict[str, Any] = {"out_shardings": shardings} if any(s is not None for s in shardings) else {}
    if _tracing():
        return jax.jit(fn, **kwargs)(olds)  # part of the caller's program: XLA reuses what the caller donated
    donate = any(o is not None for o in olds)
    compiled = jax.jit(fn, donate_argnums=(0,) if donate else (), **kwargs).lower(olds).compile()
    return _interruptible(lambda: compiled(olds), xla)


def _interruptible(run: Callable[[], list[jax.Array]], xla: Any) -> list[jax.Array]:
    """`run()`, which blocks in XLA, made interruptible: on the main thread it runs on a helper thread
    while the main thread waits in short, interruptible steps; a KeyboardInterrupt cancels the fills
    (each handler call after it fails at once), waits for XLA to stop, frees every array made, and is
    raised again. Elsewhere (no signal reaches other threads) it runs directly."""
    if threading.current_thread() is not threading.main_thread():
        return run()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["out"] = run()
        except BaseException as e:  # noqa: BLE001 (re-raised on the main thread)
            box["err"] = e

    t = threading.Thread(target=work, name="layerinit-fill", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.05)
    except KeyboardInterrupt:
        xla.cancel_fills(True)
        try:
            t.join()
            for x in box.get("out") or []:
                x.delete()
        finally:
            xla.cancel_fills(False)
        raise
    if "err" in box:
        raise box["err"]
    return box["out"]


def _outside_shard_map(fn: str) -> None:
    """Refuses a call traced inside the caller's jax.shard_map (manual mesh axes): there each leaf is a
    device's piece, whose place in the whole tensor init cannot know."""
    manual = tuple(getattr(jax.sharding.get_abstract_mesh(), "manual_axes", ()) or ())
    if manual:
        raise _refused("tree",
            f"layerinit.jax.{fn} runs inside jax.shard_map (manual mesh axes {', '.join(map(repr, manual))}), where a "
            f"leaf's shape is one device's piece and not the tensor's: call layerinit.jax.{fn} outside shard_map with "
            "sharding=NamedSharding(mesh, spec) (each device still makes only its own piece) and pass the arrays in")


def _check_seed(seed: int) -> int:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= int(seed) < 2**64:
        raise _refused("seed", f"seed must be an integer in [0, 2**64), got {seed!r}")
    return int(seed)


# ---------------------------------------------------------------------------------------------------
# Shardings: from the argument, else from the leaf itself.

_NOT_TREE = object()


def _is_sharding(x: Any) -> bool:
    return x is None or isinstance(x, (Sharding, PartitionSpec))


def _sharding_for(sharding: ShardingLike, name: str, leaf: Any, mesh: Any, given: Any = _NOT_TREE) -> Optional[Sharding]:
    """The sharding of leaf `name`: its entry of a sharding pytree (`given`) or the argument's rule for
    its name, else the leaf's own (a ShapeDtypeStruct's or a jax.Array's)."""
    s = None
    if given is not _NOT_TREE:
        s = given
    elif isinstance(sharding, (Sharding, PartitionSpec)):
        s = sharding
    elif isinstance(sharding, Mapping):
        for pattern, value in sharding.items():
            if _core.name_matches(pattern, name):
                s = value
    elif callable(sharding):
        s = sharding(name)
    if s is None:
        s = getattr(leaf, "sharding", None)
    if isinstance(s, PartitionSpec):
        m = mesh if mesh is not None else jax.sharding.get_mesh()
        if m is None or getattr(m, "empty", False):
            raise _refused("sharding", f"'{name}': a PartitionSpec needs a mesh: pass mesh=... or call under jax.set_mesh(mesh)")
        s = NamedSharding(m, s)
    if s is not None and not isinstance(s, Sharding):
        raise _refused("sharding", f"'{name}': sharding must be a jax.sharding.Sharding or a PartitionSpec, got {type(s).__name__}")
    return s


def _sharding_arg(sharding: Any, pytree: bool) -> Any:
    """The sharding argument checked: a glob mapping's keys are str; for :func:`build` (no `pytree`)
    anything but a Sharding, a PartitionSpec, a mapping or a function is a ValueError naming it."""
    if sharding is None or isinstance(sharding, (Sharding, PartitionSpec)):
        return sharding
    if isinstance(sharding, Mapping) and all(_is_sharding(v) for _, v in _items("sharding", sharding)):
        return _str_map("sharding", sharding, lambda a, x: x)
    if not pytree and not isinstance(sharding, Mapping) and not callable(sharding):
        raise _refused("sharding", f"sharding must be a Sharding, a PartitionSpec, a mapping of name globs to them or a "
                                   f"function of the name, got {type(sharding).__name__} {_show(sharding)}")
    return sharding


def _mesh_arg(mesh: Any) -> Any:
    kinds = tuple(k for k in (getattr(jax.sharding, "Mesh", None), getattr(jax.sharding, "AbstractMesh", None)) if k)
    if mesh is not None and not isinstance(mesh, kinds):
        raise _refused("mesh", f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__} {_show(mesh)}")
    return mesh


def _sharding_leaves(sharding: ShardingLike, treedef: Any, count: int) -> list[Any]:
    """One entry per model leaf when `sharding` is a pytree of the model's structure (an Equinox module
    is one, though callable), else _NOT_TREE for each."""
    if (sharding is None or isinstance(sharding, (Sharding, PartitionSpec)) or
            (isinstance(sharding, Mapping) and all(_is_sharding(v) for v in sharding.values()))):
        return [_NOT_TREE] * count
    try:
        return treedef.flatten_up_to(sharding)
    except (ValueError, TypeError) as e:
        if callable(sharding):
            return [_NOT_TREE] * count
        raise _refused("sharding", "sharding must be a Sharding, a PartitionSpec, a mapping of name globs to them, a function "
                                   f"of the leaf name, or a pytree of the model's structure: {e}") from None


# ---------------------------------------------------------------------------------------------------
# Leaves of a model pytree: names, owners, roles, stacked axes.

@dataclass
class _Leaf:
    index: int                 # in the flattened tree
    parts: list[str]           # path components: the leaf's name joined with "."
    leaf: Any                  # ShapeDtypeStruct or array
    shape: tuple[int, ...]
    dtype: str
    module: Optional[str] = None  # the owning module's kind (init/describe.hpp): linear, embedding, norm
    fan_in: int = 0
    fan_out: int = 0
    expected: Optional[tuple[int, ...]] = None  # a slice's stored shape, as the owning module says
    storage: Optional[str] = None  # a 2-D weight's, as its module stores it: "out-in" or "in-out"
    owner: str = ""            # e.g. "eqx.nn.Linear(8, 16)"
    lead: list[tuple[int, int]] = field(default_factory=list)  # stacked axes: (prefix length, size)
    names: list[str] = field(default_factory=list)              # canonical names, one per slice
    template: str = ""         # the slices' name template: "{a}" where stacked axis a's index goes
    sharding: Optional[Sharding] = None
    seps: list[str] = field(default_factory=list)  # between parts: "." (Haiku: "/" inside a module path)
    rec: Any = None            # a Recorded leaf (layerinit.jax.eval_shape): how the model's code makes it
    dims: list[int] = field(default_factory=list)  # the dimension of each stacked axis (lead's order)
    cause: str = ""            # why its own init is not known (the refusal's reason)

    @property
    def stored(self) -> tuple[int, ...]:
        """The shape of one slice: the leaf's without its stacked axes."""
        return tuple(n for d, n in enumerate(self.shape) if d not in self.dims)

    @property
    def name(self) -> str:
        """The parts joined by their seps ("." where none is given)."""
        seps = ["", *self.seps, *["."] * len(self.parts)]
        return "".join(sep + part for sep, part in zip(seps, self.parts))


def _is_haiku_dict(x: Any) -> bool:
    """A Haiku params or state dict (hk.transform's init): {module path: {name: array}}."""
    return isinstance(x, Mapping) and all(
        isinstance(k, str) and isinstance(v, Mapping) and
        all(isinstance(n, str) and hasattr(a, "shape") and hasattr(a, "dtype") for n, a in v.items())
        for k, v in x.items())


def _haiku_tree(tree: Any) -> bool:
    """Whether `tree` is what a Haiku init returns: params, or (params, state) of transform_with_state."""
    if "haiku" not in sys.modules:
        return False
    if isinstance(tree, (tuple, list)):
        return len(tree) > 0 and all(_is_haiku_dict(t) for t in tree) and any(len(t) for t in tree)
    return _is_haiku_dict(tree) and len(tree) > 0


def _key_part(k: Any) -> str:
    tu = jax.tree_util
    if isinstance(k, tu.GetAttrKey):
        return k.name
    if isinstance(k, tu.SequenceKey):
        return str(k.idx)
    if isinstance(k, tu.DictKey):
        return str(k.key)
    if isinstance(k, tu.FlattenedIndexKey):
        return str(k.key)
    return str(k)


def _child(obj: Any, k: Any) -> Any:
    tu = jax.tree_util
    try:
        if isinstance(k, tu.GetAttrKey):
            return getattr(obj, k.name)
        if isinstance(k, tu.SequenceKey):
            return obj[k.idx]
        if isinstance(k, tu.DictKey):
            return obj[k.key]
    except Exception:
        pass
    return None


def _owner_info(owner: Any, attr: str) -> Optional[tuple[str, tuple[int, ...], Optional[str], int, int, str]]:
    """(module kind, stored shape, storage, fan_in, fan_out, description) of parameter `attr` of a module
    whose framework says what it is: Equinox's Linear, Embedding, LayerNorm, RMSNorm, GroupNorm and
    Flax NNX's Linear, Embed, LayerNorm, RMSNorm, GroupNorm. None for anything else."""
    eqx = sys.modules.get("equinox")
    if eqx is not None and isinstance(owner, eqx.Module):
        nn = eqx.nn
        if isinstance(owner, nn.Linear):
            fi = 1 if owner.in_features == "scalar" else int(owner.in_features)
            fo = 1 if owner.out_features == "scalar" else int(owner.out_features)
            desc = f"eqx.nn.Linear({owner.in_features}, {owner.out_features})"
            if attr == "weight":
                return "linear", (fo, fi), "out-in", fi, fo, desc
            if attr == "bias":
                return "linear", (fo,), None, fi, fo, desc
        elif isinstance(owner, nn.Embedding) and attr == "weight":
            return ("embedding", (int(owner.num_embeddings), int(owner.embedding_size)), None, 0, 0,
                    f"eqx.nn.Embedding({owner.num_embeddings}, {owner.embedding_size})")
        elif isinstance(owner, (nn.LayerNorm, nn.RMSNorm)) and attr in ("weight", "bias"):
            shape = (owner.shape,) if isinstance(owner.shape, int) else tuple(owner.shape)
            return ("norm", shape, None, 0, 0,
                    f"eqx.nn.{type(owner).__name__}({shape})")
        elif isinstance(owner, nn.GroupNorm) and attr in ("weight", "bias"):
            return ("norm", (int(owner.channels),), None, 0, 0,
                    f"eqx.nn.GroupNorm(channels={owner.channels})")
        return None
    flax = sys.modules.get("flax.nnx")
    if flax is not None and isinstance(owner, flax.Module):
        if isinstance(owner, flax.Linear):
            fi, fo = int(owner.in_features), int(owner.out_features)
            desc = f"nnx.Linear({fi}, {fo})"
            if attr == "kernel":
                return "linear", (fi, fo), "in-out", fi, fo, desc
            if attr == "bias":
                return "linear", (fo,), None, fi, fo, desc
        elif isinstance(owner, flax.Embed) and attr == "embedding":
            return ("embedding", (int(owner.num_embeddings), int(owner.features)), None, 0, 0,
                    f"nnx.Embed({owner.num_embeddings}, {owner.features})")
        elif isinstance(owner, (flax.LayerNorm, flax.RMSNorm, flax.GroupNorm)) and attr in ("scale", "bias"):
            # GroupNorm keeps its groups and their size, not the feature count
            n = int(owner.num_features) if hasattr(owner, "num_features") else int(owner.num_groups * owner.group_size)
            return ("norm", (n,), None, 0, 0,
                    f"nnx.{type(owner).__name__}({n})")
    return None


def _is_rng_state(var: Any) -> bool:
    flax = sys.modules.get("flax.nnx")
    return flax is not None and isinstance(var, flax.RngState)


def _flatten(tree: Any) -> tuple[list[tuple[Any, Any]], Any]:
    """jax.tree_util.tree_flatten_with_path of a tree known to be finite: a cyclic tree, or one deeper
    than Python's recursion limit, is a ValueError naming `tree`. JAX's own flattening raised a
    SystemError over a RecursionError on those, and on a dict that holds itself it killed the
    interpreter (exit 1): the tree is walked first, one level per call, without recursion."""
    limit = sys.getrecursionlimit()
    refusal = ValueError(f"tree is cyclic or nested deeper than Python's recursion limit ({limit}): a model pytree "
                         "must be a finite tree")
    on_path: list[int] = []  # ids of the nodes from the root to the one being looked at
    todo = [(tree, 0)]
    while todo:
        node, depth = todo.pop()
        del on_path[depth:]
        if depth > limit or id(node) in on_path:
            raise refusal
        first = [True]

        def root_only(x: Any) -> bool:  # the node's children as leaves: one level
            if first[0]:
                first[0] = False
                return False
            return True

        children, treedef = jax.tree_util.tree_flatten(node, is_leaf=root_only)
        if jax.tree_util.treedef_is_leaf(treedef):
            continue
        on_path.append(id(node))
        todo.extend((c, depth + 1) for c in children)
    try:
        return jax.tree_util.tree_flatten_with_path(tree)
    except (RecursionError, SystemError) as e:
        if not isinstance(e, RecursionError) and not isinstance(e.__cause__ or e.__context__, RecursionError):
            raise
        raise refusal from None


def _leaves(tree: Any, dtype: Optional[str], haiku: bool = False) -> tuple[list[Any], Any, list[_Leaf], list[_Leaf]]:
    """The flattened tree, its structure, its float array leaves with names and owners, and its
    integer leaves (made only as constants). A Haiku leaf is named "module/path.name", without the
    index of (params, state)."""
    flat, treedef = _flatten(tree)
    out: list[_Leaf] = []
    integers: list[_Leaf] = []
    flax = sys.modules.get("flax.nnx")
    meta = sys.modules.get("flax.core.meta")
    for i, (path, leaf) in enumerate(flat):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            continue  # Python numbers, strings, functions: kept as they are
        parts = [_key_part(k) for k in path]
        seps: list[str] = []
        owner, attr = None, ""
        stream = False
        if haiku:
            modules = parts[-2].split("/")
            parts, seps = [*modules, parts[-1]], ["/"] * (len(modules) - 1) + ["."]
        else:
            objs = [tree]  # the nodes above the leaf (not the leaf: an NNX Variable's .value warns)
            for k in path[:-1]:
                objs.append(_child(objs[-1], k) if objs[-1] is not None else None)
            objs.append(leaf)
            owner, attr = (objs[-2], parts[-1]) if len(path) >= 1 else (None, "")
            if flax is not None and len(path) >= 2 and isinstance(objs[-2], flax.Variable) and parts[-1] == "value":
                stream = _is_rng_state(objs[-2])  # an NNX random stream's key or count: state, made as data
                parts = parts[:-1]
                owner, attr = objs[-3], parts[-1]
            elif meta is not None and len(path) >= 2 and isinstance(objs[-2], meta.AxisMetadata) and parts[-1] == "value":
                parts = parts[:-1]  # a box (nn.LogicallyPartitioned, nn.Partitioned) is metadata: the leaf is its value
                owner, attr = objs[-3], parts[-1]
        lf = _Leaf(i, parts, leaf, tuple(int(n) for n in leaf.shape), "", seps=seps,
                   rec=leaf if isinstance(leaf, Recorded) else None)
        if stream:
            lf.module = "stream"
            integers.append(lf)
            continue
        name = lf.name or "<root>"
        if lf.rec is not None and lf.rec.value is not None and not jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating):
            integers.append(lf)  # made as the model's code computes it (a key, a counter)
            continue
        if jax.numpy.issubdtype(leaf.dtype, jax.numpy.integer):
            integers.append(lf)  # a counter, a step: a rule's constant or Haiku's, else refused (_integers)
            continue
        if dtype is None:
            lf.dtype = _dtype_name(leaf.dtype, f"leaf '{name}'")
        else:
            if not jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating):
                _dtype_name(leaf.dtype, f"leaf '{name}'")  # names the leaf's dtype
            lf.dtype = dtype
        info = _owner_info(owner, attr) if owner is not None else None
        if info is not None:
            lf.module, lf.expected, lf.storage, lf.fan_in, lf.fan_out, lf.owner = info
        out.append(lf)
    return [leaf for _, leaf in flat], treedef, out, integers


def _constant(fill: Optional[Fill]) -> Optional[float]:
    """The value of a constant fill ("constant(-3)"), else None."""
    return float(fill.text[len("constant("):-1]) if fill is not None and fill.kind == "constant" else None


def _integers(integers: list[_Leaf], ruled: dict[int, float], haiku: bool) -> dict[int, Any]:
    """The value of each integer (or key) leaf, by leaf index: an int, or a function of (seed, sharding)
    making it. The constant the rules give it (`ruled`, apply_rules), else what the model's code
    computes (a Recorded leaf's value: an NNX stream's key and count), else the one its framework always
    gives it (the library's framework_fill: a Haiku BatchNorm's moving-average counters 0; an NNX
    stream's count 0 and a key from the seed). Raises ValueError naming any other: its value is no
    distribution's to draw."""
    out: dict[int, Any] = {}
    for lf in integers:
        value: Any = None
        if lf.index in ruled:
            value = int(ruled[lf.index])
        elif lf.rec is not None and lf.rec.value is not None:
            value = (lambda f: lambda seed, sh: _placed(f(), sh))(lf.rec.value)
        elif lf.module == "stream" and _is_key(lf):
            value = (lambda n, shape: lambda seed, sh: _placed(_stream_key(seed, n, shape), sh))(lf.name, lf.shape)
        elif lf.module == "stream":
            value = 0
        else:
            known = _constant(_core.framework_fill(lf.name, "haiku" if haiku else "generic"))
            value = None if known is None else int(known)
        if value is None:
            why = f" ({lf.rec.why})" if lf.rec is not None and lf.rec.why else ""
            raise _refused("tree", f"leaf '{lf.name}' is {jax.numpy.dtype(lf.leaf.dtype).name}{why}: layerinit fills float32, "
                                   f"float16 and bfloat16 arrays, and makes an integer leaf only as a rule's constant "
                                   f"(rules={{{lf.name!r}: \"constant(0)\"}})")
        out[lf.index] = value
    return out


def _is_key(lf: _Leaf) -> bool:
    return bool(jax.dtypes.issubdtype(lf.leaf.dtype, jax.dtypes.prng_key))


def _placed(x: Any, sharding: Optional[Sharding]) -> Any:
    return jax.device_put(x, sharding) if sharding is not None and not _tracing() else x


def _stream_key(seed: int, name: str, shape: tuple[int, ...]) -> Any:
    """An NNX random stream's key where no recording says how the model made it: from the seed, as
    nnx.Rngs(seed) starts a stream, folded with the stream's name so that two streams differ."""
    import zlib

    key = jax.random.fold_in(jax.random.key(seed % 2**32), zlib.crc32(name.encode()))
    return jax.random.split(key, shape) if shape else key


def _stacking(leaves: list[_Leaf], stacked: Optional[list[str]], haiku: bool = False) -> None:
    """Sets each leaf's stacked axes, dims and slice names as the library decides them (leaf_slices,
    init/describe.hpp): under the `stacked` path prefixes, else where the model's recorded transforms
    put them, else from the modules (filter_vmap, nnx.vmap, an unnamed hk.layer_stack)."""
    given = [(lf.parts, lf.seps, list(lf.shape), None if lf.expected is None else list(lf.expected), lf.owner,
              list(lf.rec.layers) if lf.rec is not None else [],
              lf.rec is not None and (lf.rec.fill or "").startswith("constant(")) for lf in leaves]
    for lf, (lead, dims, _, names, template) in zip(leaves, _core.leaf_slices(given, stacked, "haiku" if haiku else "generic")):
        lf.lead, lf.dims, lf.names, lf.template = [tuple(x) for x in lead], list(dims), list(names), template


# ---------------------------------------------------------------------------------------------------
# Rules, and the layerinit spec of the tree.

@dataclass
class _Rule:
    pattern: str
    role: Optional[str] = None
    fill: Optional[Fill] = None
    fan_in: Optional[int] = None
    fan_out: Optional[int] = None
    orientation: Optional[str] = None


def _rules(rules: Optional[Mapping[str, Any]]) -> list[_Rule]:
    from . import _fill

    out = []
    for pattern, value in _str_map("rules", rules, lambda a, x: x).items():
        r = _Rule(pattern)
        where = f"rules[{pattern!r}]"
        if isinstance(value, str):  # a role's name or a fill's text: the library tells which
            value = _core.role_or_fill(value, where)
        spec_ = dict(_items(where, value)) if isinstance(value, Mapping) else {
            "role" if isinstance(value, str) else "fill": value}
        unknown = set(spec_) - {"role", "fill", "fan_in", "fan_out", "orientation"}
        if unknown:
            raise _refused("rules", f"rule '{pattern}': unknown key {sorted(unknown)[0]!r} (valid: role, fill, fan_in, fan_out, "
                                    "orientation)")
        if "role" in spec_:
            if spec_["role"] not in ROLES:
                raise _refused("rules", f"rule '{pattern}': unknown role {spec_['role']!r} (valid: {', '.join(ROLES)})")
            r.role = spec_["role"]
        if "fill" in spec_:
            r.fill = _fill(spec_["fill"], f"{where}['fill']")  # the Fill itself: its text form rounds to 6 digits
        for k in ("fan_in", "fan_out"):
            if k in spec_:
                if not isinstance(spec_[k], int) or spec_[k] < 0:
                    raise _refused("rules", f"rule '{pattern}': {k} must be a non-negative integer")
                setattr(r, k, spec_[k])
        if "orientation" in spec_:
            if spec_["orientation"] not in ("out-in", "in-out"):
                raise _refused("rules", f"rule '{pattern}': orientation must be 'out-in' or 'in-out'")
            r.orientation = spec_["orientation"]
        out.append(r)
    return out


# ---------------------------------------------------------------------------------------------------
# The public functions.

@dataclass
class _Model:
    flat: list[Any]
    treedef: Any
    leaves: list[_Leaf]
    spec: Optional[Spec]                  # None: no float leaf
    described: dict[str, _core.DescribedParameter]  # what each slice became, by canonical name
    integers: list[_Leaf]
    constants: dict[int, Any]             # each integer or key leaf's value (or its maker), by leaf index
    recipe: str = "hf"                    # the recipe the plan is made with (every own fill explicit)


def _model(tree: Any, rules: Optional[Mapping[str, Any]], stacked: Union[str, Sequence[str], None], dtype: Any,
           hyper: Optional[Mapping[str, Any]], strict: bool, recipe: Optional[str] = None, refuse: bool = True) -> _Model:
    """The tree's leaves, the layerinit spec of its canonical tensors and what each slice became,
    every check done. The leaves' description (their modules, rules, slices) goes to the library,
    which decides roles, layers and orientation by the rules every adapter shares (Haiku's names
    included, for a Haiku tree); with `recipe`, it refuses what that recipe needs and the description
    does not tell."""
    if stacked is not None:
        stacked = [_str(f"stacked[{i}]", p) for i, p in enumerate(
            [stacked] if isinstance(stacked, str) else _seq("stacked", stacked, "a path prefix or a sequence of them"))]
    hyper = _str_map("hyper", hyper, lambda a, x: x)  # the values: the library's, as the description's
    strict = _bool("strict", strict)
    haiku = _haiku_tree(tree)
    flat, treedef, leaves, integers = _leaves(tree, _dtype_arg(dtype), haiku)
    _stacking(leaves, stacked, haiku)
    rs = _rules(rules)
    # What the rules give each leaf and slice is the library's (apply_rules): no rule gives a key.
    ints = [lf for lf in integers if not _is_key(lf)]
    made = [lf for lf in leaves if 0 not in lf.shape]
    outcome, unused = _core.apply_rules(
        [(r.pattern, r.role, r.fill, r.fan_in, r.fan_out, r.orientation) for r in rs],
        [(lf.name, lf.shape, lf.shape, [], None, jax.numpy.dtype(lf.leaf.dtype).name) for lf in ints] +
        [(lf.name, lf.shape, lf.stored, lf.names, lf.storage, "") for lf in made])
    constants = _integers(integers, {lf.index: c for lf, (_, _, c) in zip(ints, outcome) if c is not None}, haiku)
    own = recipe is None
    # The model's own init: each leaf's recorded fill (layerinit.jax.eval_shape); an Equinox module's
    # parameters by its type (recipe "equinox": their init is fixed by the type).
    typed = own and any(lf.owner.startswith("eqx.") for lf in leaves)
    params = []
    unknown: list[_Leaf] = []
    for lf, (storage, slices, _) in zip(made, outcome[len(ints):]):
        fill = None
        if own and not lf.owner.startswith("eqx."):
            if lf.rec is not None:
                fill, lf.cause = lf.rec.fill, lf.rec.why or ""
            else:
                lf.cause = "no recording of the model's code says how it is made"
        covered = True
        for cname, (role, rule_fill, fan_in, fan_out) in zip(lf.names, slices):
            p: dict[str, Any] = {"name": cname, "shape": list(lf.stored or (1,))}
            if lf.module is not None:
                p["module"] = lf.module
            if lf.fan_in or lf.fan_out:
                p.update(fan_in=lf.fan_in, fan_out=lf.fan_out)
            if storage is not None:
                p["storage"] = storage
            if fill is not None or rule_fill is not None:
                p["init"] = fill if rule_fill is None else rule_fill.text  # exact (Fill.text round-trips)
            if role is not None:
                p["role"] = role
            if fan_in is not None:
                p["fan_in"] = fan_in
            if fan_out is not None:
                p["fan_out"] = fan_out
            covered = covered and "init" in p
            params.append(p)
        if own and not covered and not lf.owner.startswith("eqx."):
            unknown.append(lf)
    for pattern in unused:
        msg = f"rule '{pattern}' matches no leaf (leaves: {_listed([lf.name for lf in leaves], 8)})"
        if strict:
            raise _refused("rules", msg)
        warnings.warn(msg, stacklevel=3)
    if unknown and refuse:
        raise _refused("tree", _refusal(unknown, tree))
    if not params:
        return _Model(flat, treedef, leaves, None, {}, integers, constants)
    description = {"name": "jax-tree", "hyper": dict(hyper or {}), "parameters": params}
    if haiku:
        description["naming"] = "haiku"
    effective = ("equinox" if typed else None) if own else recipe
    s, described = _describe(description, recipe=effective)
    return _Model(flat, treedef, leaves, s, {d.name: d for d in described}, integers, constants,
                  effective or "hf")


def _refusal(unknown: list[_Leaf], tree: Any) -> str:
    """One message: each leaf whose own init is not known, why, and what would tell it."""
    recorded = any(isinstance(x, Recorded) for x in jax.tree_util.tree_leaves(tree))
    lines = [f"  {lf.name} {list(lf.shape)}: {lf.cause}" for lf in unknown[:12]]
    if len(unknown) > 12:
        lines.append(f"  and {len(unknown) - 12} more")
    advice = ("give each a fill with rules={name: \"normal(0, 0.02)\"} or name a recipe (recipe=\"flax\", ...)"
              if recorded else
              "make the tree with layerinit.jax.eval_shape(model.init, ...) (or nnx.eval_shape's function) instead of "
              "jax.eval_shape, so that each parameter's initializer is read from the model's code; or give rules "
              "with fills, or name a recipe (recipe=\"flax\", ...)")
    return (f"the model's own init is not known for {len(unknown)} leaves:\n" + "\n".join(lines) + f"\n{advice}")


def spec_of(
    tree: Any,
    *,
    rules: Optional[Mapping[str, Any]] = None,
    stacked: Union[str, Sequence[str], None] = None,
    hyper: Optional[Mapping[str, Any]] = None,
    strict: bool = False,
) -> Any:
    """The layerinit :class:`~layerinit.Spec` of a model pytree, as :func:`init` reads it: one tensor per
    leaf (per slice of a stacked leaf) with its canonical name, logical shape, role and fans, the model's
    own fills (a tree of :func:`eval_shape`) and rule fills as explicit inits. ``layerinit plan --spec``
    and ``layerinit emit --spec`` of its JSON (``.to_json()``, with the recipe :func:`init` was given for
    the tensors without an explicit init) plan and write the values :func:`init` makes. Arguments as
    :func:`init`'s."""
    s = _model(tree, rules, stacked, None, hyper, strict, refuse=False).spec
    if s is None:
        raise _refused("tree", "the tree has no float array leaf")
    return s


def plan(
    tree: Any,
    *,
    seed: int = 0,
    recipe: Optional[str] = None,
    rules: Optional[Mapping[str, Any]] = None,
    stacked: Union[str, Sequence[str], None] = None,
    dtype: Optional[DTypeLike] = None,
    hyper: Optional[Mapping[str, Any]] = None,
    strict: bool = False,
) -> Plan:
    """The plan :func:`init` fills the leaves of ``tree`` from, nothing built: a :class:`layerinit.Plan`
    (its tensors, their fills, and ``record()``, the bytes every face of layerinit gives for the model:
    ``layerinit plan --record --spec`` of :func:`spec_of`'s JSON with the same recipe, dtype and seed).
    ``dtype``: the plan's, default the leaves' own when they share one. Arguments as :func:`init`'s; a tree
    whose 2-D weights are stored some ``[in, out]`` and some ``[out, in]`` has a plan per storage and is
    refused."""
    seed = _check_seed(seed)
    m = _model(tree, rules, stacked, dtype, hyper, strict, recipe)
    made = [lf for lf in m.leaves if 0 not in lf.shape]
    if m.spec is None or not made:
        raise _bad("tree", "", "has no float array leaf")
    dtypes = sorted({lf.dtype for lf in made})
    if len(dtypes) != 1:
        raise _bad("dtype", "None", f"leaves the plan's dtype to the leaves, which are {', '.join(dtypes)}: name one")
    storages = {m.described[lf.names[0]].stored_in_out for lf in made}
    if len(storages) != 1:
        raise _bad("tree", "", "stores some 2-D weights [in, out] and others [out, in]: init fills each from the plan of its "
                   "storage, and there is no one plan to give")
    return _layerinit_plan(m.spec, dtype=dtypes[0], seed=seed, recipe=m.recipe,
                           orientation="in-out" if storages.pop() else "out-in")


def init(
    tree: Any,
    *,
    seed: int = 0,
    recipe: Optional[str] = None,
    rules: Optional[Mapping[str, Any]] = None,
    stacked: Union[str, Sequence[str], None] = None,
    dtype: Optional[DTypeLike] = None,
    sharding: ShardingLike = None,
    mesh: Optional[jax.sharding.Mesh] = None,
    hyper: Optional[Mapping[str, Any]] = None,
    strict: bool = False,
    donate: bool = False,
) -> Any:
    """Returns `tree` with every float array leaf made and filled by layerinit, on its device(s).

    - ``tree``: a model pytree whose array leaves are ``jax.ShapeDtypeStruct`` (``eqx.filter_eval_shape``,
      ``nnx.eval_shape``, ``jax.eval_shape`` of a Flax or DM-Haiku ``init``) or arrays to re-initialize. Each leaf's
      name is its path, ``blocks.attn.wq.weight`` (NNX without the Variable's ``.value``), which is its
      tensor name in layerinit's value contract: ``layerinit emit`` of :func:`spec_of` writes the same bytes.
      Other leaves (Python numbers, NNX random streams) are returned as they are. A Haiku params dict
      (or ``(params, state)``) has leaves ``module/path.param`` (``mlp/~/linear_0.w``), read by Haiku's
      names (docs/python.md, "DM-Haiku"); an integer leaf is made only as a rule's integer constant
      (``"constant(0)"``), or as the 0 Haiku starts BatchNorm's moving-average counters at.
    - Roles (what a recipe fills a tensor with) come from the owning module: Equinox ``nn.Linear`` (weight
      ``[out, in]``), ``nn.Embedding``, ``nn.LayerNorm``/``nn.RMSNorm``/``nn.GroupNorm``; Flax NNX ``Linear``
      (kernel ``[in, out]``), ``Embed``, ``LayerNorm``/``RMSNorm``/``GroupNorm``. Every leaf's shape is checked
      against its module's before anything is built.
    - ``rules``: path glob -> a role (:data:`ROLES`), a fill (``"normal(0, 0.02)"``), or a dict with
      ``role``, ``fill``, ``fan_in``, ``fan_out``, ``orientation`` (``"in-out"`` for a 2-D weight stored
      ``[in, out]``). A glob (the library's fnmatch, as ``overrides=``: a backslash escapes) matches a
      leaf's name or a slice's canonical name; the last matching rule wins. Rules override what modules
      say; a leaf that neither covers is an error listing the leaves. A rule that matches nothing warns
      (raises with ``strict=True``).
    - ``stacked``: path prefix(es) whose leaves carry a leading layer axis; by default found from the
      modules (``eqx.filter_vmap``, ``nnx.vmap``). Slice ``l`` of ``blocks.attn.wq.weight`` is the tensor
      ``blocks.{l}.attn.wq.weight``, as if the blocks were a Python list; an unnamed ``hk.layer_stack``
      (its ``__layer_stack_*`` module) is found too, a named one is given (``stacked="layers"``).
    - ``recipe``: a name of :func:`layerinit.recipe_names` (``"equinox"``, ``"flax"``, ``"haiku"``, ``"torchtitan"``, ...);
      ``hyper``: spec numbers recipes read (``initializer_range``, ``hidden_size``; docs/spec.md).
    - ``dtype``: every leaf's dtype (``"bf16"``, ``jnp.bfloat16``, ...); default: each leaf's own.
    - ``sharding``: a Sharding or PartitionSpec for every leaf, a mapping of name globs to them, a function
      of the name, or a pytree of the model's structure; default: each leaf's own (``ShapeDtypeStruct(...,
      sharding=)``, an array's). A PartitionSpec needs ``mesh`` (or ``jax.set_mesh``). Each device makes
      only its pieces.

    - ``donate``: re-initialize the tree's arrays in place: each new array is written into the buffer
      of the array it replaces (same shape, dtype and sharding, else a ValueError naming the leaf), so
      the peak stays at the weights, and the old arrays are deleted, as ``jax.jit(donate_argnums=...)``
      does. Under the caller's ``jax.jit``, XLA reuses the buffers the caller donates.

    Works eagerly and under ``jax.jit``, not inside ``jax.shard_map`` (a ValueError says what to call).
    Eagerly, Ctrl-C stops it after the array being filled and frees what was made. Raises ValueError
    naming the leaf (an integer or complex leaf, a shape its module does not store, a leaf without a
    role, a sharding whose pieces are not boxes, a deleted array) or the recipe before anything is built.
    """
    seed = _check_seed(seed)
    donate = _bool("donate", donate)
    _outside_shard_map("init")
    sharding, mesh = _sharding_arg(sharding, True), _mesh_arg(mesh)
    m = _model(tree, rules, stacked, dtype, hyper, strict, recipe)
    flat, treedef, leaves, s, described = m.flat, m.treedef, m.leaves, m.spec, m.described
    given = _sharding_leaves(sharding, treedef, len(flat))
    for lf in m.integers:
        lf.sharding = _sharding_for(sharding, lf.name, lf.leaf, mesh, given[lf.index])
    for lf in leaves:
        if isinstance(lf.leaf, jax.Array) and not isinstance(lf.leaf, jax.core.Tracer) and lf.leaf.is_deleted():
            raise _refused("tree", f"leaf '{lf.name}' is a deleted array (donated to a jitted call or .delete()d): pass the "
                                   "tree of shapes (jax.eval_shape, eqx.filter_eval_shape, nnx.eval_shape) or live arrays")
        lf.sharding = _sharding_for(sharding, lf.name, lf.leaf, mesh, given[lf.index])
    olds = _donated(leaves) if donate else {}
    arrays = []
    plans: dict[str, Plan] = {}
    for lf in leaves:
        if 0 in lf.shape or s is None:
            continue
        # Each leaf from the plan of its storage: in-out stores every transposable tensor [in, out].
        orientation = "in-out" if described[lf.names[0]].stored_in_out else "out-in"
        if orientation not in plans:
            plans[orientation] = _layerinit_plan(s, dtype="fp32", recipe=m.recipe, orientation=orientation)  # each leaf its own dtype
        stored = lf.shape if lf.shape else (1,)
        param = plans[orientation]._leaf(lf.template, [size for _, size in lf.lead], list(stored), lf.dtype,
                                         dims=lf.dims, leaf=lf.name).text
        arrays.append(_Array(lf.name, stored, lf.dtype, param, lf.sharding, old=olds.get(lf.index)))
    made = iter(_make(arrays, seed) if arrays else [])
    out = list(flat)
    for lf in m.integers:
        c = m.constants[lf.index]
        out[lf.index] = c(seed, lf.sharding) if callable(c) else jax.numpy.full(lf.shape, c, lf.leaf.dtype,
                                                                               device=lf.sharding)
    for lf in leaves:
        if 0 in lf.shape:
            out[lf.index] = jax.numpy.zeros(lf.shape, _jnp_dtype(lf.dtype), device=lf.sharding)
        else:
            a = next(made)
            out[lf.index] = a.reshape(()) if not lf.shape else a
    # Those no output reused (zero-size, integer): every donated array is consumed.
    for old in [*olds.values(), *(lf.leaf for lf in m.integers if donate and isinstance(lf.leaf, jax.Array))]:
        if not isinstance(old, jax.core.Tracer) and not old.is_deleted():
            old.delete()
    return jax.tree_util.tree_unflatten(treedef, out)


def _same_sharding(x: jax.Array, sharding: Sharding) -> bool:
    try:
        return bool(x.sharding.is_equivalent_to(sharding, x.ndim))
    except Exception:  # a sharding that does not fit the array's rank is not its own
        return False


def _donated(leaves: list[_Leaf]) -> dict[int, Any]:
    """The arrays donate=True writes the new ones into, by leaf index: each must be a live array of the
    shape, dtype and sharding its replacement has, held by one leaf only."""
    out: dict[int, Any] = {}
    seen: dict[int, str] = {}
    for lf in leaves:
        x = lf.leaf
        if not isinstance(x, jax.Array):
            continue  # a ShapeDtypeStruct: nothing to reuse
        if id(x) in seen:
            raise _refused("donate", f"donate=True: leaves '{seen[id(x)]}' and '{lf.name}' are one array, which can be "
                                     "reused for one of them only")
        seen[id(x)] = lf.name
        made = jax.numpy.dtype(_jnp_dtype(lf.dtype))
        if x.dtype != made:
            raise _refused("donate", f"donate=True: leaf '{lf.name}' is {x.dtype.name} but is made {made.name}, so its buffer "
                                     "cannot be reused: leave dtype at the leaf's own, or init without donate")
        if not isinstance(x, jax.core.Tracer) and lf.sharding is not None and not _same_sharding(x, lf.sharding):
            raise _refused("donate", f"donate=True: leaf '{lf.name}' lies on {x.sharding} but is made on {lf.sharding}, so its "
                                     "buffer cannot be reused: leave its sharding, or init without donate")
        out[lf.index] = x
    return out


def build(
    model: ModelLike,
    *,
    dtype: Optional[DTypeLike] = None,
    seed: int = 0,
    recipe: str = "hf",
    sharding: ShardingLike = None,
    mesh: Optional[jax.sharding.Mesh] = None,
    orientation: str = "in-out",
    layout: str = "per-layer",
    experts: str = "stacked",
    overrides: Optional[Mapping[str, FillLike]] = None,
) -> dict[str, jax.Array]:
    """Builds a model's tensors as ``jax.Array`` objects, by name, in file order, made and filled by XLA
    on their devices (see :func:`init`): no host copy, no second copy of any tensor.

    - ``sharding``: one Sharding (or PartitionSpec with ``mesh``) for every array, a mapping of name globs
      to them, a function name -> Sharding, or None (the default device).
    - ``orientation``: ``"in-out"`` by default (linear weights ``[in, out]``, as Flax NNX stores them);
      ``"out-in"`` for ``[out, in]`` (PyTorch, Equinox). Values never depend on it: an element keeps its
      value wherever it is stored.
    - ``layout``: ``"per-layer"``, or ``"stacked"`` for ``[L, ...]`` arrays that ``jax.lax.scan`` runs
      over (MoE experts ``[L, E, ...]``, or ``[L, ...]`` per expert with ``experts="per-expert"``).
    - ``dtype``, ``seed``, ``recipe``, ``overrides``: as :func:`layerinit.build` (``dtype=None``: the
      model's, a Hugging Face config's ``dtype``/``torch_dtype``, else bf16).
    """
    seed = _check_seed(seed)
    _outside_shard_map("build")
    sharding, mesh = _sharding_arg(sharding, False), _mesh_arg(mesh)
    p = _layerinit_plan(model, dtype=dtype, recipe=recipe, layout=layout, orientation=orientation, experts=experts,
              overrides=overrides)
    arrays = []
    for name, shape, tdtype, _, _ in p.tensors():  # file order; a stacked buffer [L, ...] as one array
        arrays.append(_Array(name, tuple(shape), tdtype, p.composite(name).text,
                             _sharding_for(sharding, name, None, mesh, _NOT_TREE)))
    return dict(zip((a.name for a in arrays), _make(arrays, seed)))
