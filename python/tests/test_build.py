"""layerinit.build: the CLI's tensors, bytes and hashes; zero-copy hand-over; tracked memory; errors."""
import gc
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import xxhash

import layerinit


def raw(a):
    """The bytes of an Array, through numpy (bf16 as its bits)."""
    return np.asarray(a).view(np.uint8).tobytes()


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_build_equals_cli_report(report, dtype):
    rep = report("llama-tiny", "--dtype", dtype, "--seed", "7")
    arrays = layerinit.build("llama-tiny", dtype=dtype, seed=7)
    assert list(arrays) == [t["name"] for t in rep["tensors"]]
    for t in rep["tensors"]:
        a = arrays[t["name"]]
        assert list(a.shape) == t["shape"] and a.dtype == t["dtype"] and a.nbytes == t["bytes"]
        assert xxhash.xxh3_64_hexdigest(raw(a)) == t["xxh3_64"], t["name"]


def test_stacked_in_out_equals_cli_report(report):
    rep = report("mixtral-tiny", "--layout", "stacked", "--orientation", "in-out", "--seed", "3")
    arrays = layerinit.build("mixtral-tiny", layout="stacked", orientation="in-out", seed=3)
    assert list(arrays) == [t["name"] for t in rep["tensors"]]
    stacked = 0
    for t in rep["tensors"]:
        a = arrays[t["name"]]
        assert list(a.shape) == t["shape"]
        assert xxhash.xxh3_64_hexdigest(raw(a)) == t["xxh3_64"], t["name"]
        stacked += "layers" in t
    assert stacked > 0


def test_build_equals_emitted_bytes(emitted):
    arrays = layerinit.build("gpt2-tiny", seed=11)
    ref = emitted("gpt2-tiny", "--seed", "11", "--dtype", "bf16")
    assert set(ref) == set(arrays)
    for name, t in ref.items():
        assert torch.equal(torch.from_dlpack(arrays[name]).view(torch.int16), t.view(torch.int16)), name


def test_zero_copy_and_memory_returns_to_zero():
    gc.collect()
    before = layerinit.memory_stats()["current_bytes"]
    arrays = layerinit.build("llama-tiny", dtype="fp32")
    total = sum(a.nbytes for a in arrays.values())
    stats = layerinit.memory_stats()
    assert stats["current_bytes"] == before + total
    assert stats["peak_bytes"] >= before + total
    a = arrays["model.layers.1.mlp.down_proj.weight"]
    t = torch.from_dlpack(a)
    n = np.asarray(a)
    assert t.data_ptr() == a.data_ptr and n.ctypes.data == a.data_ptr and np.from_dlpack(a).ctypes.data == a.data_ptr
    import jax.numpy as jnp

    assert jnp.from_dlpack(a).unsafe_buffer_pointer() == a.data_ptr
    t[0, 0] = 123.0  # the same memory: the Array sees it
    assert np.asarray(a)[0, 0] == 123.0
    keep = a.nbytes
    del arrays, a, n
    gc.collect()
    # The torch tensor still holds its Array: exactly its bytes stay in use.
    assert layerinit.memory_stats()["current_bytes"] == before + keep
    del t
    gc.collect()
    assert layerinit.memory_stats()["current_bytes"] == before


def test_bf16_array_protocols():
    a = layerinit.build("llama-tiny")["model.layers.0.self_attn.q_proj.weight"]
    assert a.__dlpack_device__() == (1, 0)
    t = torch.from_dlpack(a)
    assert t.dtype == torch.bfloat16 and tuple(t.shape) == a.shape == (64, 64)
    import ml_dtypes

    n = np.asarray(a)
    assert n.dtype == ml_dtypes.bfloat16
    assert np.array_equal(n.view(np.uint16), t.view(torch.int16).numpy().view(np.uint16))
    # hf: normal(0, 0.02); the bf16 quantile nodes stop at 4.325 std.
    assert float(np.abs(n.astype(np.float32)).max()) <= 0.02 * 4.33
    assert "model.layers.0.self_attn.q_proj.weight" in repr(a)


def test_sharded_build_equals_cli_and_unsharded(report):
    whole = {k: np.asarray(v).view(np.uint16) for k, v in layerinit.build("llama-tiny", seed=2).items()}
    for rank in range(4):
        rep = report("llama-tiny", "--seed", "2", "--tp", "2", "--fsdp", "2", "--rank", str(rank))
        pieces = layerinit.build("llama-tiny", seed=2, mesh={"tp": 2, "fsdp": 2}, rank=rank)
        assert list(pieces) == [t["name"] for t in rep["tensors"]]
        for t in rep["tensors"]:
            a = pieces[t["name"]]
            assert list(a.global_shape) == t["global_shape"] and list(a.offset) == t["offset"]
            assert list(a.shape) == t["local_shape"]
            assert xxhash.xxh3_64_hexdigest(raw(a)) == t["xxh3_64"]
            box = tuple(slice(o, o + s) for o, s in zip(a.offset, a.shape))
            assert np.array_equal(np.asarray(a).view(np.uint16), whole[t["name"]][box])


def test_spec_dict_and_file(tmp_path):
    spec = json.loads(layerinit.spec("llama-tiny").to_json())
    spec["name"] = "mine"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(spec))
    a = layerinit.build(spec, seed=1)["model.norm.weight"]
    b = layerinit.build(str(path), seed=1)["model.norm.weight"]
    c = layerinit.build("llama-tiny", seed=1)["model.norm.weight"]
    assert raw(a) == raw(b) == raw(c)
    assert np.all(np.asarray(c).astype(np.float32) == 1.0)


@pytest.mark.parametrize("model", ["llama-tiny", "mixtral-tiny"])
def test_a_spec_crosses_as_a_dict_without_json_text(model):
    """Spec.to_dict is the JSON spec (to_json) as Python values, keys in its order, and a dict reads
    back as the same spec: the package hands dicts to the library as documents, no text between."""
    s = layerinit.spec(model)
    d = s.to_dict()
    assert d == json.loads(s.to_json()) and list(d) == list(json.loads(s.to_json()))
    assert layerinit.spec(d).to_json() == s.to_json() == layerinit._core.Spec.from_json(s.to_json()).to_json()
    d["layer"]["tensors"][0]["fan_in"] = 2**64 - 1  # as JSON text reads it: the library's u64 maximum
    assert layerinit.spec(d).to_dict()["layer"]["tensors"][0]["fan_in"] == 2**64 - 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(model="llama-huge"), "preset 'llama-huge' is unknown"),
        (dict(model="llama-tiny", recipe="nope"), "recipe 'nope' is unknown"),
        (dict(model="llama-tiny", dtype="fp8"), "fp8"),
        (dict(model="llama-tiny", layout="diagonal"), "diagonal"),
        (dict(model="llama-tiny", device="tpu"), "device 'tpu' is unknown"),
        (dict(model="llama-tiny", mesh={"tp": 2}), "needs rank"),
        (dict(model="llama-tiny", mesh={"tp": 2}, rank=2), "outside the mesh"),
        (dict(model="llama-tiny", mesh={"xp": 2}, rank=0), "mesh dimension 'xp' is unknown"),
        (dict(model="llama-tiny", mesh={"tp": 3}, rank=0), "tp"),
        (dict(model="llama-tiny", seed=-1), "seed"),
        (dict(model={"name": "x", "pre": [{"name": "a", "shape": [-1]}]}), "shape\\[0\\]: must be a non-negative integer"),
        (dict(model="/nonexistent/spec.json"), "spec file '/nonexistent/spec.json' cannot be read: No such file"),
    ],
)
def test_bad_input_raises_value_error(kwargs, message):
    model = kwargs.pop("model")
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        layerinit.build(model, **kwargs)


def test_a_zero_dimension_is_a_tensor_of_zero_elements():
    # As torch makes them (DeepseekV3MoE's shared experts at n_shared_experts 0): no values, any recipe.
    for recipe in ("hf", "pytorch-default", "flax"):
        a = layerinit.build({"name": "x", "pre": [{"name": "a", "shape": [4, 0], "role": "linear_weight"}]}, recipe=recipe)["a"]
        assert np.asarray(a).shape == (4, 0) and torch.from_dlpack(a).shape == (4, 0)


def test_overrides_apply_in_the_mappings_order():
    # The last match wins, as with the CLI's repeated --init-override and --dtype-override flags.
    norm = "model.norm.weight"

    def plan(fills, dtypes):
        return layerinit.plan("llama-tiny", overrides=fills, dtype_overrides=dtypes)

    a = plan({"*": "constant(1)", norm: "constant(2)"}, {"*": "fp32", norm: "fp16"})
    b = plan({norm: "constant(2)", "*": "constant(1)"}, {norm: "fp16", "*": "fp32"})
    assert a.fill_of(norm).text == "constant(2)" and b.fill_of(norm).text == "constant(1)"
    dtypes = lambda p: {t[0]: t[2] for t in p.tensors()}  # noqa: E731
    assert dtypes(a)[norm] == "fp16" and dtypes(b)[norm] == "fp32"


def test_out_of_memory_is_memory_error():
    spec = {"name": "big", "pre": [{"name": "w", "shape": [1 << 20, 1 << 20], "role": "other",
                                    "init": {"constant": {"value": 0}}}]}
    with pytest.raises(MemoryError, match="bytes"):
        layerinit.build(spec)
    gc.collect()


def test_cuda_without_gpu_is_clear():
    if layerinit.cuda_available():
        pytest.skip("a GPU is present: python/tests/test_cuda.py runs instead")
    with pytest.raises((ValueError, RuntimeError), match="CUDA|cuda|GPU"):
        layerinit.build("llama-tiny", device="cuda")


def test_version_and_names():
    assert layerinit.__version__.count(".") == 2
    assert "llama-tiny" in layerinit.preset_names() and "hf" in layerinit.recipe_names()
    assert set(layerinit.memory_stats()) == {"current_bytes", "peak_bytes", "total_bytes", "current_count",
                                             "peak_count", "total_count"}


def test_the_extension_exports_its_init_alone():
    """layerinit._core exports PyInit__core and nothing else (python/src/_core.map). Built with a
    toolchain that links libstdc++ statically (the GPU machine's /opt/gcc), the module exported
    libstdc++'s iostream and locale code, and jax's ml_dtypes then crashed in std::ostream << double."""
    import layerinit._core

    if not sys.platform.startswith("linux") or not shutil.which("nm"):
        pytest.skip("needs Linux and binutils' nm")
    out = subprocess.run(["nm", "-D", "--defined-only", layerinit._core.__file__], capture_output=True, text=True,
                         check=True).stdout
    assert [line.split()[-1] for line in out.splitlines()] == ["PyInit__core"]
