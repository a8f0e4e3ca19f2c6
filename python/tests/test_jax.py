"""layerinit.jax.build: arrays made by XLA and filled by layerinit's FFI handler, the same global arrays
for every mesh and PartitionSpec (8 host devices: conftest sets XLA_FLAGS)."""
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax = pytest.importorskip("jax")
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import layerinit  # noqa: E402
import layerinit.jax as ljax  # noqa: E402


@pytest.fixture(scope="module")
def devices():
    d = jax.devices()
    if len(d) < 8:
        pytest.skip(f"jax has {len(d)} devices: set XLA_FLAGS=--xla_force_host_platform_device_count=8 before importing it")
    return d


def as_bits(x):
    a = np.asarray(x)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_meshes_and_specs_give_identical_arrays(devices, dtype):
    ref = {k: as_bits(v) for k, v in layerinit.build("llama-tiny", dtype=dtype, orientation="in-out", seed=3).items()}
    meshes = [Mesh(np.array(devices).reshape(8), ("x",)), Mesh(np.array(devices).reshape(2, 4), ("dp", "tp")),
              Mesh(np.array(devices).reshape(4, 2), ("dp", "tp"))]
    specs = [P(), P(0), P(None, 1), P(1, 0), P((0, 1))]
    runs = 0
    for mesh in meshes:
        axes = mesh.axis_names
        for spec in specs:
            def sharding(name, spec=spec, mesh=mesh, axes=axes):
                parts = [None if e is None else (tuple(axes[i] for i in e if i < len(axes)) if isinstance(e, tuple)
                                                 else axes[e] if e < len(axes) else None) for e in spec]
                return NamedSharding(mesh, P(*parts[:ref[name].ndim]))

            arrays = ljax.build("llama-tiny", dtype=dtype, seed=3, sharding=sharding)
            assert list(arrays) == list(ref)
            for k, a in arrays.items():
                assert a.sharding == sharding(k)
                assert np.array_equal(as_bits(a), ref[k]), (mesh, spec, k)
            runs += 1
    assert runs == len(meshes) * len(specs)


def test_each_device_fills_only_its_shards(devices):
    xla = ljax._xla()
    mesh = Mesh(np.array(devices).reshape(2, 4), ("dp", "tp"))
    xla.record_writes(True)
    try:
        arrays = ljax.build("gpt2-tiny", sharding=lambda n: NamedSharding(mesh, P("dp", "tp") if n.endswith("wte.weight")
                                                                           else P()))
        jax.block_until_ready(arrays)  # dispatch is asynchronous: every device's call has run
        writes = xla.take_writes()
    finally:
        xla.record_writes(False)
    a = arrays["transformer.wte.weight"]
    assert a.shape == (512, 64)
    # 8 pieces of [256, 16], each written by the handler straight into the device's own buffer.
    pieces = {(s.data.unsafe_buffer_pointer(), s.data.nbytes) for s in a.addressable_shards}
    assert {(p, n) for name, p, n in writes if name == "transformer.wte.weight"} == pieces
    assert {s.data.shape for s in a.addressable_shards} == {(256, 16)} and len(pieces) == 8
    # Every replicated array once per device: 8 writes of the whole.
    h = arrays["transformer.h.0.attn.c_attn.weight"]
    assert sum(1 for name, _, n in writes if name == "transformer.h.0.attn.c_attn.weight" and n == h.nbytes) == 8


def test_stacked_and_out_in(devices):
    mesh = Mesh(np.array(devices).reshape(8), ("x",))
    ref = {k: as_bits(v) for k, v in layerinit.build("mixtral-tiny", layout="stacked", seed=5).items()}
    arrays = ljax.build("mixtral-tiny", layout="stacked", orientation="out-in", seed=5,
                        sharding=NamedSharding(mesh, P()))
    for k in ref:
        assert np.array_equal(as_bits(arrays[k]), ref[k]), k
    assert arrays["model.layers.block_sparse_moe.experts.w1.weight"].shape == (2, 4, 128, 64)


def test_bad_input():
    with pytest.raises(ValueError, match="preset 'nope' is unknown"):
        ljax.build("nope")
    with pytest.raises(ValueError, match="recipe 'nope' is unknown"):
        ljax.build("llama-tiny", recipe="nope")
    with pytest.raises(ValueError, match=r"'model.embed_tokens.weight': a PartitionSpec needs a mesh"):
        ljax.build("llama-tiny", sharding=P("x"))
