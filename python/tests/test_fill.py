"""layerinit.fill_: other frameworks' arrays filled in place with the build's values; bad arrays refused."""
import ml_dtypes
import numpy as np
import pytest
import torch

import layerinit

NAME = "model.layers.1.mlp.up_proj.weight"  # llama-tiny: [176, 64]
TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_torch_tensor_equals_build(dtype):
    ref = torch.from_dlpack(layerinit.build("llama-tiny", dtype=dtype, seed=9)[NAME])
    x = torch.empty(176, 64, dtype=TORCH[dtype])
    out = layerinit.fill_(x, NAME, layerinit.recipe_fill("llama-tiny", NAME), seed=9)
    assert out is x
    assert torch.equal(bits(x), bits(ref))


def test_fill_text_grammar_and_numpy():
    ref = torch.from_dlpack(layerinit.build("llama-tiny", dtype="fp32", seed=4)[NAME]).numpy()
    a = np.zeros((176, 64), np.float32)
    layerinit.fill_(a, NAME, "normal(0, 0.02)", seed=4)
    assert np.array_equal(a.view(np.uint32), ref.view(np.uint32))
    b = np.zeros((176, 64), ml_dtypes.bfloat16)
    layerinit.fill_(b, NAME, "normal(0, 0.02)", seed=4)
    ref16 = np.asarray(layerinit.build("llama-tiny", seed=4)[NAME])
    assert np.array_equal(b.view(np.uint16), ref16.view(np.uint16))


@pytest.mark.parametrize("offset, shape", [((0, 0), (88, 64)), ((88, 0), (88, 64)), ((0, 32), (176, 32)),
                                           ((13, 5), (7, 50)), ((175, 63), (1, 1))])
def test_pieces_equal_slices_of_the_whole(offset, shape):
    whole = torch.empty(176, 64, dtype=torch.bfloat16)
    layerinit.fill_(whole, NAME, "trunc_normal(0, 0.02, -0.03, 0.03)", seed=1)
    piece = torch.empty(*shape, dtype=torch.bfloat16)
    layerinit.fill_(piece, NAME, "trunc_normal(0, 0.02, -0.03, 0.03)", seed=1, global_shape=(176, 64), offset=offset)
    assert torch.equal(bits(piece), bits(whole[offset[0]:offset[0] + shape[0], offset[1]:offset[1] + shape[1]]))
    assert float(whole.float().abs().max()) <= 0.03


def test_transposed_equals_in_out_build():
    ref = np.asarray(layerinit.build("llama-tiny", orientation="in-out", seed=6)[NAME])  # [64, 176]
    x = torch.empty(64, 176, dtype=torch.bfloat16)
    layerinit.fill_(x, NAME, "normal(0, 0.02)", seed=6, transposed=True)
    assert np.array_equal(x.view(torch.int16).numpy().view(np.uint16), ref.view(np.uint16))


def test_requires_grad_parameter_is_filled():
    p = torch.nn.Parameter(torch.zeros(4, 4))
    layerinit.fill_(p, "w", "constant(0.5)")
    assert torch.all(p.detach() == 0.5)


@pytest.mark.parametrize(
    "make, kwargs, message",
    [
        (lambda: torch.empty(64, 176).t(), {}, "not contiguous"),
        (lambda: torch.empty(176, 128)[:, ::2], {}, "not contiguous"),
        (lambda: np.zeros((4, 4), np.float32).view(np.float32)[::2], {}, "not contiguous"),
        (lambda: _readonly(), {}, "read-only"),
        (lambda: np.frombuffer(bytearray(40), np.float32, count=8, offset=1), {}, "not aligned to its 4-byte elements"),
        (lambda: np.zeros((4, 4), np.float64), {}, "float64"),
        (lambda: torch.zeros(4, 4, dtype=torch.int32), {}, "int32"),
        (lambda: torch.zeros(4, 4), {"dtype": "bf16"}, "does not match the array's fp32"),
        (lambda: _jax_array(), {}, "immutable"),
        (lambda: torch.zeros(4, 4), {"global_shape": (4, 4), "offset": (1, 0)}, "outside"),
        (lambda: torch.zeros(4, 4), {"global_shape": (4,)}, "one entry per dimension"),
        (lambda: torch.zeros(4, 4), {"fill": "gaussian(0, 1)"}, "gaussian"),
        (lambda: torch.zeros(4, 4), {"fill": "normal(0, -1)"}, "std"),
        (lambda: [1.0, 2.0], {}, "must export DLPack"),
    ],
)
def test_bad_arrays_raise_value_error(make, kwargs, message):
    fill = kwargs.pop("fill", "normal(0, 0.02)")
    with pytest.raises(ValueError, match=message):
        layerinit.fill_(make(), "w", fill, **kwargs)


def _readonly():
    a = np.zeros((4, 4), np.float32)
    a.flags.writeable = False
    return a


def _jax_array():
    import jax.numpy as jnp

    return jnp.zeros((4, 4), jnp.float32)


def test_fill_objects():
    f = layerinit.Fill.parse("uniform(-0.5, 0.5)")
    assert f.kind == "uniform" and str(f) == "uniform(-0.5, 0.5)"
    # str() is for people (6 digits, trunc_normal_std shown in std units); .text reads back exactly.
    for text in ("normal(0.1, 0.12345678912345678)", "trunc_normal_std(0, 0.02, -3, 3)", "constant(5e-324)"):
        g = layerinit.Fill.parse(text)
        assert layerinit.Fill.parse(g.text) == g
    assert layerinit.Fill.parse("normal(0.1, 0.12345678912345678)").text == "normal(0.1,0.12345678912345678)"
    assert layerinit.recipe_fill("llama-tiny", "model.norm.weight") == layerinit.Fill.parse("constant(1)")
    with pytest.raises(ValueError, match="is not in llama-tiny"):
        layerinit.recipe_fill("llama-tiny", "model.nope.weight")
