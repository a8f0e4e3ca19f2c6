"""The recorder behind ``layerinit.torch``'s own-init path: a model's init code run on meta tensors,
every write it makes into a tensor seen and handed to the library (init/recorded.hpp), which decides
what each parameter holds.

What is seen, and how:

- every ATen op, through a ``TorchDispatchMode``: in-place random and arithmetic ops (``normal_``,
  ``uniform_``, ``fill_``, ``mul_``, ``erfinv_``, ``clamp_``, ...), ``copy_``, ops with an ``out=``
  (``torch.cat(..., out=)``, ``torch.eye(..., out=)``), and the tensors ops make: factories
  (``empty``, ``zeros``, ``randn``), casts and clones, ``cat``/``stack``. Below ``torch.nn.init``
  and any wrapper of it (transformers' guarded init functions), so kaiming and xavier arrive as
  the ``uniform_``/``normal_`` with the bound torch computed;
- the ``torch.nn.init`` functions that do nothing on a meta tensor (``trunc_normal_``:
  "sampling is a no-op"; ``orthogonal_``, ``sparse_``, ``dirac_``), by swapping their code for the
  time of the recording: every reference to them (``from torch.nn.init import ...``,
  transformers' ``TORCH_INIT_FUNCTIONS``) is the same function object.

A write goes into a box of its tensor: the view it writes through, read from its storage offset and
strides against the tensor that owns the storage (a parameter, or a temporary the code made).
"""
from __future__ import annotations

import math
import os
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _core

aten = torch.ops.aten

# Ops that fill, read as the library's vocabulary (init/recorded.hpp).
_RANDOM = {aten.normal_.default: "normal", aten.uniform_.default: "uniform"}
_INPLACE_SCALAR = {
    aten.mul_.Scalar: "mul", aten.mul_.Tensor: "mul", aten.div_.Scalar: "div", aten.div_.Tensor: "div",
    aten.add_.Scalar: "add", aten.add_.Tensor: "add", aten.sub_.Scalar: "sub", aten.sub_.Tensor: "sub",
}
_OUT_OF_PLACE_SCALAR = {
    aten.mul.Scalar: "mul", aten.mul.Tensor: "mul", aten.div.Scalar: "div", aten.div.Tensor: "div",
    aten.add.Scalar: "add", aten.add.Tensor: "add", aten.sub.Scalar: "sub", aten.sub.Tensor: "sub",
}
_CONSTANT_FACTORIES = {
    aten.zeros.default: 0.0, aten.zeros_like.default: 0.0, aten.new_zeros.default: 0.0,
    aten.ones.default: 1.0, aten.ones_like.default: 1.0, aten.new_ones.default: 1.0,
}
_RANDOM_FACTORIES = {aten.randn.default: ("normal", [0.0, 1.0]), aten.randn_like.default: ("normal", [0.0, 1.0]),
                     aten.rand.default: ("uniform", [0.0, 1.0]), aten.rand_like.default: ("uniform", [0.0, 1.0])}
_EMPTY = {aten.empty.memory_format, aten.empty_like.default, aten.new_empty.default, aten.empty_strided.default,
          aten.new_empty_strided.default}
_COPIES = {aten._to_copy.default, aten.clone.default, aten.to_dense.default}

# The recorded ops that draw random numbers (an aten op's are _RANDOM_MAKERS): what they write, and what
# is made from it, is no data.
_RANDOM_OPS = {"normal", "uniform", "trunc_normal", "orthogonal", "sparse"}
# Ops (all their overloads) that draw random numbers.
_RANDOM_MAKERS = {aten.randn, aten.randn_like, aten.rand, aten.rand_like, aten.randint, aten.randint_like, aten.randperm,
                  aten.multinomial, aten.bernoulli, aten.bernoulli_, aten.normal, aten.normal_, aten.uniform_,
                  aten.poisson, aten.random_, aten.exponential_, aten.geometric_, aten.cauchy_, aten.log_normal_}

_LOCK = threading.Lock()
_ACTIVE: Optional["Recorder"] = None
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _where() -> str:
    """The innermost frame of the model's own code (outside torch and layerinit): "file.py:12 in f"."""
    f = sys._getframe(2)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not path.startswith((_TORCH, _HERE)) and not f.f_code.co_filename.startswith("<"):
            return f"{os.path.basename(path)}:{f.f_lineno} in {f.f_code.co_name}"
        f = f.f_back
    return ""


def _scalar(v: Any) -> Optional[float]:
    """A scalar argument's value: a Python number, or a 0-d tensor whose value can be read."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_meta:
        return float(v.item())
    return None


class _Root:
    """A storage the recording knows: its tensor (kept alive, so the storage is not reused) as a
    contiguous shape, and its index in the recording."""

    __slots__ = ("index", "tensor", "shape", "strides", "base")

    def __init__(self, index: int, t: torch.Tensor):
        self.index = index
        self.tensor = t
        contiguous = t.is_contiguous() and t.numel() * t.element_size() == t.untyped_storage().nbytes()
        if contiguous or t.numel() == 0:
            self.shape = list(t.shape)
            self.base = t.storage_offset()
        else:  # a storage seen through a view first: its elements as one dimension
            self.shape = [t.untyped_storage().nbytes() // t.element_size()]
            self.base = 0
        self.strides = [1] * len(self.shape)
        for d in range(len(self.shape) - 2, -1, -1):
            self.strides[d] = self.strides[d + 1] * self.shape[d + 1]


class Recorder(TorchDispatchMode):
    """Records what the code run under it writes (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: dict[int, _Root] = {}
        self.order: list[_Root] = []
        self.writes: list[dict[str, Any]] = []
        # Where a root's values come from, when not only from the recorded code's own computing: random
        # numbers it drew (and what it made of them), or a tensor made outside the recording (torch.from_numpy
        # of NumPy's random numbers, a tensor made before). The others hold exact data the adapter can copy.
        self.random: set[int] = set()
        self.outside: set[int] = set()
        self.data: list[torch.Tensor] = []  # what a data write writes, by index

    # ---- tensors and boxes ----

    def root(self, t: torch.Tensor, made: bool = False) -> _Root:
        """The root of t's storage, known from now on; `made`: by the recorded code (an op it ran, a
        stand-in), else its values came from outside the recording."""
        k = _key(t)
        r = self.roots.get(k)
        if r is None:
            r = _Root(len(self.order), t)
            self.roots[k] = r
            self.order.append(r)
            if not made and not t.is_meta:
                self.outside.add(r.index)
        return r

    def box(self, t: torch.Tensor) -> Optional[tuple[_Root, list[int], list[int], bool]]:
        """(root, offset, shape, in order) of the elements `t` views in its root, when they are a box
        (in order: its dimensions follow the root's); None for a view that is not a box."""
        r = self.root(t)
        if t.dtype != r.tensor.dtype:
            return None
        n = len(r.shape)
        if t.numel() == 0:
            return r, [0] * n, [0] * n, True
        rem = t.storage_offset() - r.base
        if rem < 0:
            return None
        offset = []
        for d in range(n):
            offset.append(rem // r.strides[d])
            rem -= offset[-1] * r.strides[d]
        shape, used, order = [1] * n, set(), []
        for size, stride in zip(t.shape, t.stride()):
            if size == 1:
                continue
            j = next((j for j in range(n) if r.strides[j] == stride and r.shape[j] > 1 and j not in used), None)
            if j is None:
                return self.run(t, r)
            used.add(j)
            order.append(j)
            shape[j] = size
        if any(o + s > dim for o, s, dim in zip(offset, shape, r.shape)):
            return self.run(t, r)
        return r, offset, shape, order == sorted(order)

    @staticmethod
    def run(t: torch.Tensor, r: _Root) -> Optional[tuple[_Root, list[int], list[int], bool]]:
        """A contiguous view of another shape (q.view(kv, heads, hd, dim)): its elements are a run of
        the root's row-major order, a box when the run is whole slabs of one dimension."""
        if not t.is_contiguous():
            return None
        start, count = t.storage_offset() - r.base, t.numel()
        for j in range(len(r.shape)):
            if count % r.strides[j] or start % r.strides[j]:
                continue
            first, m = (start // r.strides[j]) % r.shape[j], count // r.strides[j]
            if first + m > r.shape[j]:
                continue
            offset = [(start // r.strides[d]) % r.shape[d] for d in range(j)] + [first] + [0] * (len(r.shape) - j - 1)
            return r, offset, [1] * j + [m] + r.shape[j + 1:], True
        return None

    def add(self, t: torch.Tensor, op: str, args: list[Optional[float]] = (), **extra: Any) -> None:
        """A write of `op` into the box `t` views (the whole of its root, marked as an op with no fill,
        when the view is not a box)."""
        b = self.box(t)
        args = list(args)
        if op == "clamp":  # an absent bound, or an infinite one, is null
            args = [None if a is None or math.isinf(a) else a for a in args]
        elif any(a is None for a in args):  # a value on the meta device, or not a number
            op, args = f"{op} with an argument layerinit cannot read", []
        elif any(not math.isfinite(a) for a in args):  # fill_(-inf): no fill holds it
            op, args = f"{op} with a value that is not finite ({', '.join(map(str, args))})", []
        w: dict[str, Any] = {"op": op, "args": args, "where": _where()}
        if b is None:
            r = self.root(t)
            w.update(tensor=r.index, op=f"a write through a view that is not a box ({op})", args=[])
        else:
            r, off, shape, _ = b
            w.update(tensor=r.index, offset=off, shape=shape)
        w.update(extra)
        self.writes.append(w)
        if op in _RANDOM_OPS:
            self.random.add(w["tensor"])

    def derive(self, t: torch.Tensor, inputs: list[torch.Tensor], random: bool = False) -> None:
        """t's values come from `inputs` (and random numbers): its root takes their origins."""
        i = self.root(t).index
        for x in inputs:
            j = self.root(x).index
            if j != i:
                random |= j in self.random
                if j in self.outside:
                    self.outside.add(i)
        if random:
            self.random.add(i)

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """dst's elements from src's, in row-major order of the two views (broadcast src as copy_ does).
        From a real tensor the code computed without random numbers (Whisper's sinusoids): a data
        write of its values, exactly."""
        bd, bs = self.box(dst), self.box(src)
        self.derive(dst, [src])
        if self.root(src).index in self.outside:
            return self.add(dst, "copy_ of values made outside the recorded code (data it read, NumPy's random numbers)")
        if not src.is_meta and self.root(src).index not in self.random and bd is not None and bd[3] and src.dtype != torch.bool:
            self.data.append(src.detach().expand(dst.shape).clone())
            self.add(dst, "data", [float(len(self.data) - 1)])
            return
        if bd is not None and bs is not None and bd[3] and bs[3]:
            self.add(dst, "copy", [], **{"from": bs[0].index, "from_offset": bs[1], "from_shape": bs[2]})
        else:
            self.add(dst, "copy through a transposed or strided view")

    # ---- the ops ----

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ to keep torch.compile out of it, which imports
        # torch._dynamo (1.4 s here) at the first op; init code run on meta tensors is never compiled.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _RANDOM and args[0].is_meta:
            out = args[0]  # a meta tensor has no values to draw (torch's meta normal_ goes through its refs)
        else:
            out = func(*args, **kwargs)
        try:
            self.seen(func, args, kwargs, out)
        except Exception as e:  # a recorder bug must not pass as a fill: the op becomes one with no fill
            for t in _written(func, args, kwargs):
                self.add(t, f"{func} (the recorder failed: {type(e).__name__}: {e})")
        return out

    def seen(self, func, args, kwargs, out) -> None:
        written = _written(func, args, kwargs)
        if written:
            self.wrote(func, args, kwargs, written)
            return
        outs = [o for o in (out if isinstance(out, (list, tuple)) else (out,)) if isinstance(o, torch.Tensor)]
        inputs = [a for a in _tensors(args, kwargs)]
        keys = {_key(a) for a in inputs if _keyable(a)}
        for o in outs:
            if not _keyable(o) or _key(o) in keys or _key(o) in self.roots:
                continue  # a view of an input, or a storage already known: nothing made
            self.made(func, args, kwargs, o)

    def wrote(self, func, args, kwargs, written: list[torch.Tensor]) -> None:
        """An op that writes into its arguments (in place, or out=)."""
        t = written[0]
        a = _bound(func, args, kwargs)
        if func in _RANDOM:
            names = ("mean", "std") if func is aten.normal_.default else ("from", "to")
            self.add(t, _RANDOM[func], [_scalar(a[k]) for k in names])
        elif func in (aten.fill_.Scalar, aten.fill_.Tensor):
            self.add(t, "fill", [_scalar(a["value"])])
        elif func is aten.zero_.default:
            self.add(t, "fill", [0.0])
        elif func in _INPLACE_SCALAR:
            self.inplace(t, _INPLACE_SCALAR[func], a)
        elif func in (aten.neg_.default, aten.erfinv_.default):
            self.add(t, "neg" if func is aten.neg_.default else "erfinv")
        elif func in (aten.clamp_.default, aten.clamp_min_.default, aten.clamp_max_.default):
            self.clamped(t, a)
        elif func is aten.copy_.default:
            src = a["src"]
            if not src.is_meta and _key(src) not in self.roots and src.numel() == 1 and _scalar(src) is not None:
                self.add(t, "fill", [_scalar(src)])  # a Python number as a tensor
            else:  # a tensor made outside the recording is known from here as such (copy refuses it)
                self.copy(t, src)
        elif func is aten.cat.out:
            self.concatenated(t, a["tensors"], a["dim"])
        else:
            inputs = [x for x in _tensors(args, kwargs) if _keyable(x)]
            for w in written:
                self.add(w, _op_name(func))
                self.derive(w, inputs, func.overloadpacket in _RANDOM_MAKERS)

    def clamped(self, t: torch.Tensor, a: dict[str, Any]) -> None:
        lo, hi = a.get("min"), a.get("max")
        vals = [None if x is None else _scalar(x) for x in (lo, hi)]
        if any(v is None and x is not None for v, x in zip(vals, (lo, hi))):
            self.add(t, "clamp_ by a tensor")
        else:
            self.add(t, "clamp", vals)

    def inplace(self, t: torch.Tensor, op: str, a: dict[str, Any]) -> None:
        c = _scalar(a["other"])
        alpha = _scalar(a.get("alpha", 1))
        if c is None or alpha is None or a.get("rounding_mode") is not None:
            self.add(t, f"{op}_ by a tensor")
        elif op in ("add", "sub"):
            self.add(t, "add", [c * alpha if op == "add" else -c * alpha])
        else:
            self.add(t, op, [c])

    def made(self, func, args, kwargs, o: torch.Tensor) -> None:
        """A tensor an op made: how its values came to be, as writes into it."""
        self.root(o, made=True)
        self.derive(o, [x for x in _tensors(args, kwargs) if _keyable(x)], func.overloadpacket in _RANDOM_MAKERS)
        a = _bound(func, args, kwargs)
        if func in _EMPTY:
            return
        if func in _CONSTANT_FACTORIES:
            self.add(o, "fill", [_CONSTANT_FACTORIES[func]])
        elif func in (aten.full.default, aten.full_like.default, aten.new_full.default):
            self.add(o, "fill", [_scalar(a["fill_value"])])
        elif func is aten.scalar_tensor.default:
            self.add(o, "fill", [_scalar(a["s"])])
        elif func in _RANDOM_FACTORIES:
            op, values = _RANDOM_FACTORIES[func]
            self.add(o, op, values)
        elif func in _COPIES:
            self.copy(o, a["self"])
        elif func is aten.copy.default:
            self.copy(o, a["src"])
        elif func is aten.cat.default:
            self.concatenated(o, a["tensors"], a["dim"])
        elif func is aten.stack.default:
            for i, x in enumerate(a["tensors"]):
                self.copy(o.select(a["dim"], i), x)
        elif func in _OUT_OF_PLACE_SCALAR and isinstance(a.get("self"), torch.Tensor) and _scalar(a["other"]) is not None:
            self.copy(o, a["self"])
            self.inplace(o, _OUT_OF_PLACE_SCALAR[func], a)
        elif func in (aten.neg.default, aten.erfinv.default):
            self.copy(o, a["self"])
            self.add(o, "neg" if func is aten.neg.default else "erfinv")
        elif func in (aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default):
            self.copy(o, a["self"])
            self.clamped(o, a)
        elif func is aten.constant_pad_nd.default:  # nn.functional.pad: the input inside, `value` around it
            pad, x = list(a["pad"]), a["self"]
            value = _scalar(a.get("value", 0))
            if value is None:
                return self.add(o, "torch.constant_pad_nd by a tensor")
            if any(pad):
                self.add(o, "fill", [value])
            inside, src = o, x
            for i in range(len(pad) // 2):
                d = o.dim() - 1 - i
                lo, hi = pad[2 * i], pad[2 * i + 1]
                inside = inside.narrow(d, max(lo, 0), o.shape[d] - max(lo, 0) - max(hi, 0))
                src = src.narrow(d, max(-lo, 0), x.shape[d] - max(-lo, 0) - max(-hi, 0))  # a negative pad crops
            self.copy(inside, src)
        else:
            self.add(o, f"torch.{_op_name(func)} of other values")

    def concatenated(self, o: torch.Tensor, parts: list[torch.Tensor], dim: int) -> None:
        dim = dim % o.dim() if o.dim() else 0
        at = 0
        for x in parts:
            if x.numel() == 0 and x.dim() == 1:  # cat's legacy empty input
                continue
            n = x.shape[dim]
            self.copy(o.narrow(dim, at, n), x)
            at += n

    # ---- the result ----

    def replay(self, names: dict[int, str]) -> list[dict[str, Any]]:
        """What each root holds at the end (the library's replay), roots named by `names` (root index
        -> the parameter's name)."""
        tensors = [{"shape": r.shape, **({"name": names[r.index]} if r.index in names else {})} for r in self.order]
        return _core.replay_init({"tensors": tensors, "writes": self.writes})


def _keyable(t: Any) -> bool:
    if not isinstance(t, torch.Tensor):
        return False
    try:
        t.untyped_storage()
        return True
    except Exception:  # a tensor subclass without storage (DTensor outside dispatch, FakeTensor)
        return False


def _tensors(args: Any, kwargs: dict[str, Any]) -> Iterator[torch.Tensor]:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, torch.Tensor))


def _bound(func, args, kwargs) -> dict[str, Any]:
    """The op's arguments by their schema names, defaults filled in (dispatch leaves them out)."""
    out: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an op writes into (its schema's mutable arguments)."""
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        v = kwargs[arg.name] if arg.name in kwargs else (args[i] if i < len(args) else None)
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += [x for x in v if isinstance(x, torch.Tensor)]
    return out


def _op_name(func) -> str:
    name = func._schema.name.split("::")[-1]
    return name[:-1] if name.endswith("_") else name


# ---- torch.nn.init functions that do nothing on a meta tensor ----


def _intercept(op: str, tensor: Any, args: list[float], call: Callable[[], Any]) -> Any:
    """Records `op` on `tensor` when a recording is running and the tensor is one it can record (a
    meta tensor, or a storage it knows); else `call()`, the function as it was."""
    rec = _ACTIVE
    if rec is None or not isinstance(tensor, torch.Tensor) or not (tensor.is_meta or _key(tensor) in rec.roots):
        return call()
    rec.add(tensor, op, args)
    return tensor


def _trunc_normal_stub(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):  # noqa: ANN001
    m = __import__("sys").modules["layerinit._torch_record"]
    return m._intercept("trunc_normal", tensor, [float(mean), float(std), float(a), float(b)],
                        lambda: m._ORIGINALS["trunc_normal_"](tensor, mean, std, a, b, generator))


def _orthogonal_stub(tensor, gain=1, generator=None):  # noqa: ANN001
    m = __import__("sys").modules["layerinit._torch_record"]
    return m._intercept("orthogonal", tensor, [float(gain)],
                        lambda: m._ORIGINALS["orthogonal_"](tensor, gain, generator))


def _sparse_stub(tensor, sparsity, std=0.01, generator=None):  # noqa: ANN001
    m = __import__("sys").modules["layerinit._torch_record"]
    return m._intercept("sparse", tensor, [float(sparsity), float(std)],
                        lambda: m._ORIGINALS["sparse_"](tensor, sparsity, std, generator))


def _dirac_stub(tensor, groups=1):  # noqa: ANN001
    m = __import__("sys").modules["layerinit._torch_record"]
    return m._intercept("dirac", tensor, [float(groups)], lambda: m._ORIGINALS["dirac_"](tensor, groups))


_STUBS = {"trunc_normal_": _trunc_normal_stub, "orthogonal_": _orthogonal_stub, "sparse_": _sparse_stub,
          "dirac_": _dirac_stub}
# Each function as it was (a copy with its own code object), for calls on tensors not recorded.
_ORIGINALS: dict[str, Callable[..., Any]] = {}
for _name in _STUBS:
    _fn = getattr(torch.nn.init, _name)
    _ORIGINALS[_name] = types.FunctionType(_fn.__code__, _fn.__globals__, _name, _fn.__defaults__, _fn.__closure__)
    _ORIGINALS[_name].__kwdefaults__ = _fn.__kwdefaults__


@contextmanager
def _swapped() -> Iterator[None]:
    fns = {n: getattr(torch.nn.init, n) for n in _STUBS}
    codes = {n: f.__code__ for n, f in fns.items()}
    try:
        for n, f in fns.items():
            f.__code__ = _STUBS[n].__code__
        yield
    finally:
        for n, f in fns.items():
            f.__code__ = codes[n]


@contextmanager
def recording() -> Iterator[Recorder]:
    """Records the code run inside it (one recording at a time in a process)."""
    global _ACTIVE
    with _LOCK:
        rec = Recorder()
        _ACTIVE = rec
        try:
            with _swapped(), torch.no_grad(), rec:
                yield rec
        finally:
            _ACTIVE = None
