"""``jax.Array`` objects made shard by shard with layerinit's values (docs/python.md).

:func:`build` makes each array with ``jax.make_array_from_callback``: every device's shard is
filled on its own, straight from (seed, tensor name, element index), so no device ever holds more
than its shards and the global array is the same for every mesh and PartitionSpec.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

import jax
import numpy as np

from . import FillLike, ModelLike, plan

__all__ = ["build"]

ShardingLike = Union["jax.sharding.Sharding", Callable[[str], "jax.sharding.Sharding"], None]


def _np_dtype(dtype: str) -> Any:
    if dtype == "fp32":
        return np.float32
    if dtype == "fp16":
        return np.float16
    import ml_dtypes  # a dependency of jax

    return ml_dtypes.bfloat16


def _box(index: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(offset, shape) of a shard from the tuple of slices make_array_from_callback passes."""
    offset, size = [], []
    for d, n in enumerate(shape):
        s = index[d] if d < len(index) else slice(None)
        start, stop, step = s.indices(n)
        if step != 1:
            raise ValueError(f"shard index {index} has a step: layerinit fills boxes")
        offset.append(start)
        size.append(max(stop - start, 0))
    return offset, size


def build(
    model: ModelLike,
    *,
    dtype: str = "bf16",
    seed: int = 0,
    recipe: str = "hf",
    sharding: ShardingLike = None,
    orientation: str = "in-out",
    layout: str = "per-layer",
    experts: str = "stacked",
    overrides: Optional[Mapping[str, FillLike]] = None,
) -> dict[str, jax.Array]:
    """Builds a model's tensors as ``jax.Array`` objects, by name, in file order.

    - ``sharding``: one ``jax.sharding.Sharding`` for every array, a function name -> Sharding, or
      None (the first device). Each device fills only its addressable shards.
    - ``orientation``: ``"in-out"`` by default, as Flax and Equinox store linear weights
      (``[in, out]``); ``"out-in"`` for PyTorch's ``[out, in]``. Values never depend on it: an
      element keeps its value wherever it is stored.
    - ``layout``: ``"per-layer"``, or ``"stacked"`` for ``[L, ...]`` arrays that ``jax.lax.scan``
      runs over (MoE experts ``[L, E, ...]``).
    - ``dtype``, ``seed``, ``recipe``, ``overrides``: as :func:`layerinit.build`.
    """
    p = plan(model, dtype=dtype, seed=seed, recipe=recipe, layout=layout, orientation=orientation, experts=experts,
             overrides=overrides)
    default = jax.sharding.SingleDeviceSharding(jax.devices()[0]) if sharding is None else None
    out: dict[str, jax.Array] = {}
    for name, shape, tdtype, _kind, _layer in p.tensors():
        sh = default if sharding is None else (sharding(name) if callable(sharding) else sharding)
        np_dtype = _np_dtype(tdtype)
        bits = "bf16" if tdtype == "bf16" else None  # a uint16 buffer holds the bf16 bits
        gshape = tuple(shape)

        def shard(index: tuple[Any, ...], name: str = name, gshape: tuple[int, ...] = gshape,
                  np_dtype: Any = np_dtype, bits: Optional[str] = bits) -> np.ndarray:
            offset, size = _box(index, gshape)
            buf = np.empty(size, dtype=np.uint16 if bits else np_dtype)
            if buf.size:
                p.fill(name, buf, offset, False, bits)
            return buf.view(np_dtype) if bits else buf

        out[name] = jax.make_array_from_callback(gshape, sh, shard)
    return out
