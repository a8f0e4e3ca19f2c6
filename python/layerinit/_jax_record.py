"""The model's own init in JAX, read from its code (docs/python.md, "The model's own init").

:func:`eval_shape` is ``jax.eval_shape`` (``nnx.eval_shape``, ``eqx.filter_eval_shape``) that also reads, from
the program the framework traces, how every output leaf is made: the draw of ``jax.random`` it comes from
(``normal``, ``uniform``, ``truncated_normal``: what every initializer of ``jax.nn.initializers``, Flax,
Haiku, Equinox and MaxText ends in) and the arithmetic on it, with the constants the initializer computed
(fans over the axes it was told, ``1 / sqrt(head_dim)``); a constant (``zeros``, ``ones``); or a value
computed without randomness (an NNX random stream's key and count). It also reads where a stacking
transform put each layer axis: ``jax.lax.scan`` (``nn.scan``, any ``variable_axes``) stacks its outputs on
axis 0, then the program moves that axis where the transform says; ``jax.vmap`` (``nnx.vmap``,
``eqx.filter_vmap``) draws with a batch of keys split for the layers. Nothing is guessed from a name or a
shape: what the program does not say (an orthogonal initializer, a value computed from the model's
inputs) is a refusal naming the leaf and the operation.

Each leaf of the returned tree is a :class:`Recorded`, a ``jax.ShapeDtypeStruct`` that carries what was
read; :func:`layerinit.jax.init` makes it.
"""
from __future__ import annotations

import functools
import itertools
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import jax
import numpy as np

__all__ = ["Recorded", "eval_shape"]

_LIMIT = 1 << 16  # constants computed here up to this many elements; larger ones only as one repeated value


class Recorded(jax.ShapeDtypeStruct):
    """An abstract leaf (a ``jax.ShapeDtypeStruct``) with how the model's code makes it.

    - ``fill``: the layerinit fill text of every element (``"trunc_normal_std(0, 0.125, -2, 2)"``), or None.
    - ``layers``: ``((dim, size, group), ...)``: the leaf's layer axes, where the stacking transform put
      them; leaves of one transform share a group.
    - ``why``: why it cannot be made (``fill`` None and no ``value``), naming the operation.
    - ``value``: for a value made without randomness (a key, a counter), a function returning it.
    """
    __slots__ = ("fill", "layers", "why", "value")

    def __init__(self, shape: Any, dtype: Any, *, sharding: Any = None, fill: Optional[str] = None,
                 layers: tuple = (), why: Optional[str] = None, value: Optional[Callable[[], Any]] = None) -> None:
        super().__init__(shape, dtype, sharding=sharding)
        for k, v in (("fill", fill), ("layers", layers), ("why", why), ("value", value)):
            object.__setattr__(self, k, v)


# ---------------------------------------------------------------------------------------------------
# Abstract values: what the interpreter knows of each variable of the program.

@dataclass(frozen=True)
class _Draw:
    """a * X + b, X drawn independently per element: "normal", "uniform" (on [lo, hi)) or "trunc"
    (standard normal cut to [lo, hi])."""
    dist: str
    lo: float
    hi: float
    a: float
    b: float
    layers: tuple  # one entry per dimension: the layer axis' group, or None


@dataclass(frozen=True)
class _Splat:
    """One value repeated."""
    value: float
    layers: tuple


@dataclass(frozen=True)
class _Const:
    """A small value known here."""
    value: np.ndarray


@dataclass(frozen=True)
class _Key:
    """A random key (array): its dimensions' layer groups (a split for the layers, vmapped over)."""
    layers: tuple


@dataclass(frozen=True)
class _Unknown:
    why: str
    data: bool = False  # computed without randomness (from the function's inputs or constants)


_INPUT = _Unknown("computed from the function's inputs", data=True)
_group_ids = itertools.count()

Value = Union[_Draw, _Splat, _Const, _Key, _Unknown]


def _scalar(v: Value) -> Optional[float]:
    """The one value of a constant that holds one value (a scalar, a splat), else None."""
    if isinstance(v, _Splat):
        return v.value
    if isinstance(v, _Const):
        x = np.asarray(v.value)
        if x.size and x.dtype.kind in "fiub" and np.all(x == x.flat[0]):
            return float(x.flat[0])
    return None


def _ndim(var: Any) -> int:
    return len(getattr(var.aval, "shape", ()))


def _shape(var: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in getattr(var.aval, "shape", ()))


def _is_key(var: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(var.aval, "dtype", np.float32), jax.dtypes.prng_key)


def _layers_of(v: Value) -> Optional[tuple]:
    return v.layers if isinstance(v, (_Draw, _Splat, _Key)) else None


def _with_layers(v: Value, layers: tuple) -> Value:
    if isinstance(v, _Draw):
        return _Draw(v.dist, v.lo, v.hi, v.a, v.b, layers)
    if isinstance(v, _Splat):
        return _Splat(v.value, layers)
    if isinstance(v, _Key):
        return _Key(layers)
    return v


def _plain(n: int) -> tuple:
    return (None,) * n


# ---------------------------------------------------------------------------------------------------
# Layout: where each input dimension goes (its layer group follows it).

def _moved(prim: str, params: dict, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
           layers: tuple) -> Optional[tuple]:
    """The output's layer groups after a layout primitive, or None where a layer axis does not survive
    as one dimension (merged, cut, repeated)."""
    if prim == "transpose":
        return tuple(layers[p] for p in params["permutation"])
    if prim == "squeeze":
        drop = {d % len(in_shape) for d in params["dimensions"]}
        return tuple(g for d, g in enumerate(layers) if d not in drop)
    if prim == "broadcast_in_dim":
        out: list = [None] * len(out_shape)
        for d, od in enumerate(params["broadcast_dimensions"]):
            if in_shape[d] != out_shape[od] and layers[d] is not None:
                return None
            out[od] = layers[d]
        return tuple(out)
    if prim == "reshape":
        if all(g is None for g in layers):
            return _plain(len(out_shape))
        # A layer axis survives where the dimensions before it have the product of some prefix of the
        # new shape and the next new dimension has its size.
        out = [None] * len(out_shape)
        for d, g in enumerate(layers):
            if g is None:
                continue
            before = int(np.prod(in_shape[:d], dtype=np.int64))
            for od in range(len(out_shape)):
                if int(np.prod(out_shape[:od], dtype=np.int64)) == before and out_shape[od] == in_shape[d]:
                    after_in = int(np.prod(in_shape[d + 1:], dtype=np.int64))
                    after_out = int(np.prod(out_shape[od + 1:], dtype=np.int64))
                    if after_in == after_out:
                        out[od] = g
                        break
            else:
                return None
        return tuple(out)
    if prim in ("slice", "dynamic_slice"):
        if any(g is not None and in_shape[d] != out_shape[d] for d, g in enumerate(layers)):
            return None
        return layers
    return None


_LAYOUT = {"transpose", "squeeze", "broadcast_in_dim", "reshape", "slice", "dynamic_slice"}
_IDENTITY = {"convert_element_type", "stop_gradient", "copy", "copy_p", "sharding_constraint", "pvary",
             "reduce_precision", "mesh_cast", "reshard", "device_put", "optimization_barrier", "name",
             "random_clone", "random_wrap", "random_unwrap", "with_sharding_constraint"}
# jax.random's functions, as jitted functions of these names (jax/_src/random.py): their operands after
# the key are the distribution's bounds.
_DRAWS = {"_normal": "normal", "_uniform": "uniform", "_truncated_normal": "trunc"}
_AFFINE = {"mul", "div", "add", "sub", "neg"}


def _inner(params: dict) -> Any:
    """The jaxpr a call-like primitive runs (jit, custom_jvp_call, remat, closed_call), or None."""
    for k in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        j = params.get(k)
        if j is not None and hasattr(j, "eqns") or hasattr(getattr(j, "jaxpr", None), "eqns"):
            return j
    return None


# ---------------------------------------------------------------------------------------------------
# Small constants computed here with numpy: a primitive bound on concrete values is compiled by XLA once per
# primitive, shape and dtype (tens of milliseconds each, most of the reading's time). These give XLA's bits:
# layout is exact, and +, -, *, / and sqrt are rounded by IEEE 754 in both, except on subnormal numbers (XLA's
# CPU flushes them to zero) and non-finite ones, which go to XLA, as does every other primitive and dtype.
# XLA's CPU, wherever jax's default device is: on an H200 XLA's float32 / was up to 2 ulp and sqrt 1 ulp from
# IEEE 754 (2026-11-30, docs/benchmarks.md), and a σ read on the GPU would have drawn other values.

def _np_broadcast(x: np.ndarray, shape: tuple, broadcast_dimensions: tuple, sharding: Any = None) -> Any:
    if sharding is not None:
        return None
    lifted = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        lifted[d] = x.shape[i]
    return np.broadcast_to(x.reshape(lifted), shape)


def _np_convert(x: np.ndarray, new_dtype: Any, weak_type: bool, sharding: Any = None) -> Any:
    to, kind = np.dtype(new_dtype), x.dtype.kind
    if sharding is not None or not (to.kind == "f" and kind in "fbiu" or to.kind in "iu" and kind in "biu"):
        return None
    r = x.astype(to)
    # a conversion from an integer is kept only where it keeps the value (XLA's and numpy's overflows may differ)
    return r if kind == "f" or np.array_equal(r.astype(x.dtype), x) else None


_FOLD: dict[str, Callable[..., Any]] = {
    "add": lambda x, y: np.add(x, y),
    "sub": lambda x, y: np.subtract(x, y),
    "mul": lambda x, y, out_dtype=None: np.multiply(x, y) if out_dtype is None else None,
    "neg": lambda x: np.negative(x) if x.dtype.kind != "u" else None,
    "div": lambda x, y: np.divide(x, y) if x.dtype.kind == "f" else None,  # integers: XLA truncates
    "sqrt": lambda x, accuracy=None: np.sqrt(x) if x.dtype.kind == "f" and accuracy is None else None,
    "broadcast_in_dim": _np_broadcast,
    "convert_element_type": _np_convert,
    "reshape": lambda x, new_sizes, dimensions=None, sharding=None:
        x.reshape(new_sizes) if dimensions is None and sharding is None else None,
    "squeeze": lambda x, dimensions: np.squeeze(x, tuple(dimensions)),
    "transpose": lambda x, permutation: np.transpose(x, permutation),
}
_FOLD_DTYPES = {np.dtype(t) for t in ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                      "uint32", "uint64", "bool")}


def _exact(x: np.ndarray) -> bool:
    """Whether XLA reads `x` as numpy does: a dtype both compute alike, floats finite and not subnormal."""
    if x.dtype not in _FOLD_DTYPES:
        return False
    if x.dtype.kind != "f":
        return True
    return bool(np.isfinite(x).all() and not ((x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny)).any())


def _fold(prim: str, params: dict, xs: list[np.ndarray], outs: list[Any]) -> Optional[list[np.ndarray]]:
    """What binding `prim` on `xs` gives, computed with numpy; None where that might differ from XLA."""
    f = _FOLD.get(prim)
    if f is None or len(outs) != 1 or not all(_exact(x) for x in xs) or len({x.dtype for x in xs}) > 1:
        return None
    try:
        with np.errstate(all="ignore"):  # integers wrap around, as in XLA
            r = f(*xs, **params)
    except TypeError:  # a parameter this does not know
        return None
    if r is None:
        return None
    r = np.asarray(r)
    out = outs[0].aval
    if r.shape != tuple(out.shape) or r.dtype != np.dtype(out.dtype) or not _exact(r):
        return None
    return [r]


@functools.cache
def _host() -> Any:
    """XLA's CPU device, or None (the default device) where jax runs without one (JAX_PLATFORMS=cuda)."""
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:
        return None


def _bind(eqn: Any, xs: list[Any]) -> list[np.ndarray]:
    """`eqn`'s primitive on the concrete values `xs` (numpy arrays or scalars), as XLA's CPU computes it."""
    xs = [np.asarray(x) for x in xs]
    xs = [x.astype(jax.dtypes.canonicalize_dtype(x.dtype)) for x in xs]  # what jax.numpy.asarray gives
    vals = _fold(eqn.primitive.name, eqn.params, xs, eqn.outvars)
    if vals is not None:
        return vals
    with jax.default_device(_host()):
        vals = eqn.primitive.bind(*[jax.numpy.asarray(x) for x in xs], **eqn.params)
    return [np.asarray(v) for v in (vals if eqn.primitive.multiple_results else [vals])]


class _Interpreter:
    def run(self, jaxpr: Any, consts: list, args: list[Value]) -> list[Value]:
        env: dict = {}

        def read(v: Any) -> Value:
            if hasattr(v, "val"):  # a Literal
                return _Const(np.asarray(v.val))
            return env[v]

        for var, c in zip(jaxpr.constvars, consts):
            env[var] = self._const(c, var)
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            try:
                outs = self.eqn(eqn, ins)
            except Exception as e:  # noqa: BLE001 (an operation this reading does not know: its outputs unknown)
                outs = [_Unknown(f"{eqn.primitive.name} ({type(e).__name__}: {e})")] * len(eqn.outvars)
            for var, o in zip(eqn.outvars, outs):
                env[var] = o
        return [read(v) for v in jaxpr.outvars]

    def _const(self, c: Any, var: Any) -> Value:
        if _is_key(var):
            return _Key(_plain(_ndim(var)))
        x = np.asarray(c) if not isinstance(c, jax.core.Tracer) else None
        if x is None:
            return _INPUT
        if x.size <= _LIMIT:
            return _Const(x)
        s = _scalar(_Const(x))
        return _Splat(s, _plain(x.ndim)) if s is not None else _Unknown("a large constant array", data=True)

    def eqn(self, eqn: Any, ins: list[Value]) -> list[Value]:
        prim = eqn.primitive.name
        params = eqn.params
        outs = eqn.outvars
        # A call: one of jax.random's draws, else the program it runs.
        inner = _inner(params)
        if inner is not None and prim not in ("scan", "while", "cond"):
            name = str(params.get("name", ""))
            if name in _DRAWS:
                return [self.draw(_DRAWS[name], eqn, ins)]
            closed = inner if hasattr(inner, "jaxpr") else None
            j = closed.jaxpr if closed is not None else inner
            consts = list(closed.consts) if closed is not None else []
            if len(j.invars) == len(ins):
                return self.run(j, consts, ins)
            return [_Unknown(f"{prim} (a call of another arity)")] * len(outs)
        if prim == "scan":
            return self.scan(eqn, ins)
        # Everything known: computed here (small values).
        if all(isinstance(v, _Const) for v in ins) and all(_size(o) <= _LIMIT for o in outs) and \
                not any(_is_key(o) for o in outs) and not prim.startswith("random"):
            return [_Const(v) for v in _bind(eqn, [v.value for v in ins])]
        if any(_is_key(o) for o in outs):
            return [self.key(prim, params, eqn, ins, o) for o in outs]
        if any(isinstance(v, _Unknown) for v in ins):
            bad = next(v for v in ins if isinstance(v, _Unknown))
            return [bad] * len(outs)
        if prim in _IDENTITY and len(ins) == len(outs):
            return list(ins)
        if prim in _IDENTITY and ins:
            return [ins[0]]
        if prim in _LAYOUT:
            v = ins[0]
            in_shape, out_shape = _shape(eqn.invars[0]), _shape(outs[0])
            if isinstance(v, _Const):
                s = _scalar(v)
                if s is None:
                    return [_Unknown(f"{prim} of a large constant", data=True)]
                return [_Splat(s, _plain(len(out_shape)))]
            layers = _moved(prim, params, in_shape, out_shape, _layers_of(v))
            if layers is None:
                what = "one draw repeated" if prim == "broadcast_in_dim" else f"{prim} through a layer axis"
                return [_Unknown(f"{prim} ({what})")]
            return [_with_layers(v, layers)]
        if prim == "concatenate":
            return [self.concatenate(eqn, ins)]
        if prim in _AFFINE or prim in ("max", "min", "pow", "sqrt", "rsqrt", "exp", "log", "abs", "sign",
                                       "integer_pow", "square", "tanh", "logistic", "erf", "erf_inv", "floor",
                                       "ceil", "round", "select_n", "clamp"):
            return [self.arith(prim, params, eqn, ins)]
        return [_Unknown(prim)] * len(outs)

    def key(self, prim: str, params: dict, eqn: Any, ins: list[Value], out: Any) -> Value:
        """A key: its layer groups. A split with a new leading shape starts a group (the keys a vmap
        hands its layers); layout moves groups as for values."""
        first = ins[0] if ins else _Unknown(prim)
        base = first.layers if isinstance(first, _Key) else _plain(_ndim(eqn.invars[0]) if eqn.invars else 0)
        n = _ndim(out)
        if prim == "random_split":
            new = tuple(next(_group_ids) for _ in params["shape"])
            return _Key(base + new)
        if prim in _LAYOUT and eqn.invars:
            moved = _moved(prim, params, _shape(eqn.invars[0]), _shape(out), base)
            return _Key(moved if moved is not None else _plain(n))
        if len(base) == n:
            return _Key(base)
        return _Key(_plain(n))

    def draw(self, dist: str, eqn: Any, ins: list[Value]) -> Value:
        key = ins[0]
        n = _ndim(eqn.outvars[0])
        lead = key.layers if isinstance(key, _Key) else _plain(_ndim(eqn.invars[0]))
        layers = tuple(lead) + _plain(n - len(lead))
        if dist == "normal":
            return _Draw("normal", 0.0, 0.0, 1.0, 0.0, layers)
        lo, hi = (_scalar(v) for v in ins[1:3])
        if lo is None or hi is None:
            return _Unknown(f"jax.random's {dist} with bounds that are not one number")
        if dist == "uniform":
            dt = eqn.outvars[0].aval.dtype
            lo, hi = float(np.asarray(lo, dt)), float(np.asarray(hi, dt))  # converted as jax.random does
        return _Draw(dist, lo, hi, 1.0, 0.0, layers)

    def arith(self, prim: str, params: dict, eqn: Any, ins: list[Value]) -> Value:
        draws = [v for v in ins if isinstance(v, _Draw)]
        splats = [v for v in ins if isinstance(v, _Splat)]
        if not draws:
            if all(_scalar(v) is not None for v in ins):
                # one value: computed on scalars in the output's dtype, then repeated
                r, = _bind(eqn, [np.asarray(_scalar(v), eqn.invars[i].aval.dtype) for i, v in enumerate(ins)])
                layers = next((s.layers for s in splats), None) or _plain(_ndim(eqn.outvars[0]))
                if len(layers) != _ndim(eqn.outvars[0]):
                    layers = _plain(_ndim(eqn.outvars[0]))
                return _Splat(float(np.asarray(r)), layers)
            return _Unknown(f"{prim} of computed values", data=True)
        if len(draws) > 1 or prim not in _AFFINE:
            return _Unknown(f"{prim} of a random draw" + (" with another" if len(draws) > 1 else ""))
        d = draws[0]
        if prim == "neg":
            return _Draw(d.dist, d.lo, d.hi, -d.a, -d.b, d.layers)
        other = ins[1] if ins[0] is d else ins[0]
        c = _scalar(other)
        if c is None:
            return _Unknown(f"{prim} of a random draw by an array of several values")
        layers = d.layers if len(d.layers) == _ndim(eqn.outvars[0]) else None
        if layers is None:
            return _Unknown(f"{prim} broadcasting a random draw")
        if prim == "mul":
            return _Draw(d.dist, d.lo, d.hi, d.a * c, d.b * c, layers)
        if prim == "div":
            if ins[0] is not d:
                return _Unknown("div by a random draw")
            return _Draw(d.dist, d.lo, d.hi, d.a / c, d.b / c, layers)
        if prim == "add":
            return _Draw(d.dist, d.lo, d.hi, d.a, d.b + c, layers)
        # sub
        if ins[0] is d:
            return _Draw(d.dist, d.lo, d.hi, d.a, d.b - c, layers)
        return _Draw(d.dist, d.lo, d.hi, -d.a, c - d.b, layers)

    def concatenate(self, eqn: Any, ins: list[Value]) -> Value:
        dim = eqn.params["dimension"]
        first = ins[0]
        if isinstance(first, (_Draw, _Splat)) and all(
                type(v) is type(first) and _with_layers(v, ()) == _with_layers(first, ()) for v in ins):
            if all(v.layers == first.layers for v in ins) and first.layers[dim] is None:
                return first
        if any(isinstance(v, _Unknown) for v in ins):
            return next(v for v in ins if isinstance(v, _Unknown))
        return _Unknown("concatenate of different initializations")

    def scan(self, eqn: Any, ins: list[Value]) -> list[Value]:
        p = eqn.params
        if "num_consts" in p:
            nc, ncarry = p["num_consts"], p["num_carry"]
        else:  # jax >= 0.11: the operands' groups (consts, carry, xs) as a FlatTree; forwarded outputs are not outputs
            consts, carry, _ = (list(g) for g in p["ft_in"].update(list(range(len(ins)))).unpack())
            nc, ncarry = len(consts), len(carry)
        length = int(p["length"])
        closed = p["jaxpr"]
        body_in: list[Value] = list(ins[:nc + ncarry])
        for var, v in zip(eqn.invars[nc + ncarry:], ins[nc + ncarry:]):
            if isinstance(v, (_Draw, _Splat, _Key)):
                body_in.append(_with_layers(v, v.layers[1:]))
            elif isinstance(v, _Const):
                s = _scalar(v)
                body_in.append(_Splat(s, _plain(_ndim(var) - 1)) if s is not None else
                               _Unknown("a value that differs from layer to layer", data=True))
            else:
                body_in.append(v)
        body_out = self.run(closed.jaxpr, list(closed.consts), body_in)
        group = next(_group_ids)
        out: list[Value] = []
        for i, v in enumerate(body_out):
            if i < ncarry:
                out.append(v if isinstance(v, _Unknown) else _Unknown("a scan's carried value", data=True))
            elif isinstance(v, (_Draw, _Splat, _Key)):
                out.append(_with_layers(v, (group,) + tuple(v.layers)))
            elif isinstance(v, _Const) and _scalar(v) is not None:
                out.append(_Splat(_scalar(v), (group,) + _plain(np.ndim(v.value))))
            elif isinstance(v, _Const):
                out.append(_Unknown("a value that differs from layer to layer", data=True))
            else:
                out.append(v)
        return out


def _size(var: Any) -> int:
    return int(np.prod(_shape(var), dtype=np.int64))


def _fill(v: Value) -> Optional[str]:
    """The layerinit fill text of every element of `v`, or None."""
    if isinstance(v, _Splat) or (isinstance(v, _Const) and _scalar(v) is not None):
        return f"constant({_scalar(v)!r})"
    if not isinstance(v, _Draw):
        return None
    a, b = v.a, v.b
    if a == 0:
        return f"constant({b!r})"
    if v.dist == "normal":
        return f"normal({b!r}, {abs(a)!r})"
    if v.dist == "uniform":
        lo, hi = sorted((a * v.lo + b, a * v.hi + b))
        return f"uniform({lo!r}, {hi!r})"
    lo, hi = (v.lo, v.hi) if a > 0 else (-v.hi, -v.lo)
    return f"trunc_normal_std({b!r}, {abs(a)!r}, {lo!r}, {hi!r})"


def _dce(jaxpr: Any) -> Any:
    """The program without what no output depends on (the forward pass of a Flax or Haiku init)."""
    try:
        from jax._src.interpreters import partial_eval as pe

        return pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))[0]
    except Exception:  # noqa: BLE001 (a jax without it: the whole program is read)
        return jaxpr


def _evaluator(closed: Any, index: int, args: list) -> Callable[[], Any]:
    """A function computing output `index` of the program from the call's arguments (a value made
    without randomness: an NNX stream's key and count)."""
    def value() -> Any:
        from jax._src.interpreters import partial_eval as pe

        j = closed.jaxpr
        used = [i == index for i in range(len(j.outvars))]
        small, used_in = pe.dce_jaxpr(j, used, instantiate=True)
        ins = [a for a, u in zip(args, used_in) if u]
        return jax.core.eval_jaxpr(small, closed.consts, *ins)[0]
    return value


def _record(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """jax.eval_shape(fun, *args, **kwargs) whose leaves are :class:`Recorded`."""
    traced = jax.jit(fun).trace(*args, **kwargs)
    closed = traced.jaxpr
    flat_args = jax.tree_util.tree_leaves((args, kwargs))
    j = _dce(closed.jaxpr)
    ins: list[Value] = [_Key(_plain(_ndim(v))) if _is_key(v) else _INPUT for v in j.invars]
    values = _Interpreter().run(j, list(closed.consts), ins)
    infos, treedef = jax.tree_util.tree_flatten(traced.out_info)
    concrete = all(not isinstance(a, jax.core.Tracer) and hasattr(a, "shape") for a in flat_args)
    out = []
    for i, (info, v) in enumerate(zip(infos, values)):
        layers = _layers_of(v)
        kw: dict[str, Any] = {"layers": () if layers is None else tuple(
            (d, int(info.shape[d]), g) for d, g in enumerate(layers) if g is not None)}
        floating = jax.numpy.issubdtype(info.dtype, jax.numpy.floating)
        text = _fill(v) if floating else None
        made_here = isinstance(v, (_Key, _Const, _Splat)) or getattr(v, "data", False)
        if text is not None:
            kw["fill"] = text
        elif not floating and made_here and concrete:
            kw["value"] = _evaluator(closed, i, flat_args)
        elif not floating and made_here:
            kw["why"] = "a value computed from abstract arguments (pass concrete ones: a key, example inputs)"
        else:
            kw["why"] = v.why if isinstance(v, _Unknown) else "not a random draw nor a constant"
        out.append(Recorded(info.shape, info.dtype, sharding=getattr(info, "sharding", None), **kw))
    return jax.tree_util.tree_unflatten(treedef, out)


class _NotArrays(Exception):
    """Raised inside the trace where the output needs nnx.eval_shape (`nnx`) or eqx.filter_eval_shape."""

    def __init__(self, nnx: bool) -> None:
        super().__init__()
        self.nnx = nnx


def eval_shape(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``jax.eval_shape(fun, *args, **kwargs)`` whose leaves say how the model's code makes them.

    ``fun`` is what makes the model: a Flax linen ``model.init`` (boxed or not, ``nn.scan`` blocks), a
    DM-Haiku ``t.init``, a function returning a Flax NNX module (as ``nnx.eval_shape`` takes) or an
    Equinox module (as ``eqx.filter_eval_shape``). Nothing is computed: the program is traced once, as
    ``jax.eval_shape`` does; an output holding an NNX module, or leaves that are not arrays where Equinox is
    imported, is traced twice (the first trace finds that, the second is that framework's ``eval_shape``).
    :func:`layerinit.jax.init` of the result makes every leaf as that code does.
    """
    nnx = sys.modules.get("flax.nnx")
    eqx = sys.modules.get("equinox")
    if nnx is None and eqx is None:
        return _record(fun, *args, **kwargs)

    # The output is looked at inside the one trace, which stops where it is not arrays only: a second trace
    # only for the outputs that need it (a linen or MaxText init is traced once).
    @functools.wraps(fun)
    def arrays_only(*a: Any, **k: Any) -> Any:
        out = fun(*a, **k)
        if nnx is not None and any(isinstance(x, nnx.Module) for x in jax.tree_util.tree_leaves(
                out, is_leaf=lambda x: isinstance(x, nnx.Module))):
            raise _NotArrays(nnx=True)
        if eqx is not None and any(not isinstance(x, (jax.Array, np.ndarray, jax.core.Tracer))
                                   for x in jax.tree_util.tree_leaves(out)):
            raise _NotArrays(nnx=False)
        return out

    try:
        return _record(arrays_only, *args, **kwargs)
    except _NotArrays as e:
        own_nnx = e.nnx
    real = jax.eval_shape

    def patched(f: Callable[..., Any], *a: Any, **k: Any) -> Any:
        return _record(f, *a, **k)

    jax.eval_shape = patched
    try:
        if own_nnx:
            return nnx.eval_shape(fun, *args, **kwargs)
        return eqx.filter_eval_shape(fun, *args, **kwargs)
    finally:
        jax.eval_shape = real
