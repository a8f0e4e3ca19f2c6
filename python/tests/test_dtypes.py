"""Every dtype argument takes a str or a framework's dtype object (torch, NumPy, ml_dtypes, JAX), through
one normalizer (layerinit._dtype); anything else is a ValueError naming the argument and the valid dtypes."""
import subprocess
import sys

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

import layerinit
import layerinit.jax as ljax

NAME = "model.layers.1.mlp.up_proj.weight"  # llama-tiny: [176, 64]
KINDS = {
    "bf16": [torch.bfloat16, ml_dtypes.bfloat16, np.dtype(ml_dtypes.bfloat16), jnp.bfloat16, jnp.dtype("bfloat16")],
    "fp16": [torch.float16, torch.half, np.float16, np.dtype("float16"), jnp.float16],
    "fp32": [torch.float32, np.float32, np.dtype("float32"), jnp.float32, jnp.dtype("float32")],
}
CASES = [(want, d) for want, ds in KINDS.items() for d in ds]
VALID = "'bf16', 'fp16', 'fp32', or a torch, NumPy, ml_dtypes or JAX bfloat16, float16 or float32"


@pytest.mark.parametrize("want, d", CASES, ids=repr)
def test_plan_and_dtype_overrides_take_dtype_objects(want, d):
    assert {t[2] for t in layerinit.plan("llama-tiny", dtype=d).tensors()} == {want}
    other = "fp32" if want != "fp32" else "bf16"
    tensors = layerinit.plan("llama-tiny", dtype=other, dtype_overrides={"*norm*": d}).tensors()
    assert {t[2] for t in tensors if "norm" in t[0]} == {want}
    assert {t[2] for t in tensors if "norm" not in t[0]} == {other}


@pytest.mark.parametrize("d", [torch.bfloat16, np.float32, jnp.float16], ids=repr)
def test_build_equals_the_str_dtype(d):
    name = layerinit._dtype_object_name(d)
    a = np.asarray(layerinit.build("llama-tiny", dtype=d, seed=3)[NAME]).view(np.uint8)
    b = np.asarray(layerinit.build("llama-tiny", dtype=name, seed=3)[NAME]).view(np.uint8)
    assert np.array_equal(a, b)


def test_fill_takes_dtype_objects():
    x = torch.empty(176, 64, dtype=torch.bfloat16)
    layerinit.fill_(x, NAME, "normal(0, 0.02)", seed=2, dtype=torch.bfloat16)
    ref = torch.from_dlpack(layerinit.build("llama-tiny", seed=2)[NAME])
    assert torch.equal(x.view(torch.int16), ref.view(torch.int16))
    with pytest.raises(ValueError, match=r"^dtype 'fp16' does not match the array's bf16$"):
        layerinit.fill_(x, NAME, "normal(0, 0.02)", dtype=np.float16)
    c = layerinit.plan("llama-tiny", dtype="bf16").composite(NAME)
    with pytest.raises(ValueError, match=r"^dtype mismatch: asked for fp32, the composite is bf16$"):
        layerinit.fill_(x, c, dtype=jnp.float32)
    layerinit.fill_(x, c, seed=2, dtype=jnp.bfloat16)
    assert torch.equal(x.view(torch.int16), ref.view(torch.int16))


def test_verify_takes_dtype_objects():
    sd = {k: torch.from_dlpack(v) for k, v in layerinit.build("llama-tiny", dtype="fp16", seed=1).items()}
    assert layerinit.verify(sd, "llama-tiny", dtype=torch.float16, seed=1).ok
    r = layerinit.verify(sd, "llama-tiny", dtype=np.float16, seed=1, dtype_overrides={"*norm*": jnp.float32},
                         diagnose=False)
    assert not r.ok and r.tensor("model.norm.weight")["expected"]["dtype"] == "fp32"


@pytest.mark.parametrize("d", [torch.bfloat16, ml_dtypes.bfloat16, "bfloat16", "bf16"], ids=repr)
def test_jax_init_and_build_take_dtype_objects(d):
    tree = {"w": jnp.zeros((4, 4), jnp.float32)}
    out = ljax.init(tree, rules={"w": "normal(0, 0.02)"}, dtype=d)
    assert out["w"].dtype == jnp.bfloat16
    assert ljax.build("llama-tiny", dtype=d)[NAME].dtype == jnp.bfloat16


@pytest.mark.parametrize("bad, why", [
    (np.float64, "is float64, which layerinit does not make"),
    (torch.int8, "is int8, which layerinit does not make"),
    (jnp.int32, "is int32, which layerinit does not make"),
    (np.dtype("complex64"), "is complex64, which layerinit does not make"),
    (float, "must be .*; got type <class 'float'>"),
    (16, "must be .*; got int 16"),
    (np.zeros(2, np.float32), "must be .*; got ndarray array"),
], ids=repr)
def test_other_dtypes_are_refused_naming_the_argument(bad, why):
    valid = VALID.replace("(", r"\(").replace(")", r"\)")
    pattern = why if "must be" in why else why + r" \(valid: " + valid + r"\)$"
    with pytest.raises(ValueError, match="^dtype " + pattern):
        layerinit.plan("llama-tiny", dtype=bad)
    with pytest.raises(ValueError, match="^dtype " + pattern):
        layerinit.build("llama-tiny", dtype=bad)
    with pytest.raises(ValueError, match="^dtype " + pattern):
        layerinit.fill_(np.zeros(4, np.float32), "w", "constant(1)", dtype=bad)
    with pytest.raises(ValueError, match="^dtype " + pattern):
        layerinit.verify({}, "llama-tiny", dtype=bad)
    with pytest.raises(ValueError, match=r"^dtype_overrides\['\*norm\*'\] " + pattern):
        layerinit.plan("llama-tiny", dtype_overrides={"*norm*": bad})
    with pytest.raises(ValueError, match="^dtype " + pattern):
        ljax.init({"w": jnp.zeros((4, 4))}, rules={"w": "normal(0, 0.02)"}, dtype=bad)
    with pytest.raises(ValueError, match="^dtype " + pattern):
        ljax.build("llama-tiny", dtype=bad)


def test_unknown_str_dtypes_are_the_librarys_refusal():
    with pytest.raises(ValueError, match=r"^dtype: dtype 'fp8' is unknown \(valid: fp32, fp16, bf16\)$"):
        layerinit.build("llama-tiny", dtype="fp8")
    with pytest.raises(ValueError, match=r"^dtype 'fp8' is unknown \(valid: 'bf16', "):
        ljax.init({"w": jnp.zeros((4, 4))}, rules={"w": "normal(0, 0.02)"}, dtype="fp8")


def test_numpy_dtypes_need_no_torch_or_jax():
    # A dtype object is recognized by its type's module: naming one imports no framework.
    code = ("import sys, numpy as np, layerinit\n"
            "assert {t[2] for t in layerinit.plan('llama-tiny', dtype=np.float16).tensors()} == {'fp16'}\n"
            "print(sorted(m for m in ('torch', 'jax') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[]\n"
