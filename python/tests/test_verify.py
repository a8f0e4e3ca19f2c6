"""layerinit.verify: a state_dict or a dict of arrays (and a checkpoint's path) against the init it
claims, the report `layerinit verify --report json` gives. Each diagnosis comes from applying its
transformation to a real built tensor: transformers' and torchtitan's RoPE permutations, a fused qkv
or gate_up, stacked layers, a rename, a swap, a tie kept, a cast, another seed. transformers'
save_pretrained and torchtitan's to_hf of models filled by layerinit.torch.init_ verify."""
import json
import subprocess

import numpy as np
import pytest
import torch

import layerinit
from titan_models import FLAVORS

PRESET = "llama-tiny"  # 4 layers, hidden 64, 4 heads and 2 kv heads of 16, intermediate 176, vocab 512
Q = "model.layers.0.self_attn.q_proj.weight"  # [64, 64]
K = "model.layers.0.self_attn.k_proj.weight"  # [32, 64]
V = "model.layers.0.self_attn.v_proj.weight"  # [32, 64]
GATE = "model.layers.0.mlp.gate_proj.weight"  # [176, 64]
UP = "model.layers.0.mlp.up_proj.weight"
EMBED = "model.embed_tokens.weight"  # [512, 64]


def state_dict(dtype="bf16", seed=0, preset=PRESET):
    """The preset's tensors as torch tensors over layerinit's memory (torch.from_dlpack, no copy)."""
    return {k: torch.from_dlpack(v) for k, v in layerinit.build(preset, dtype=dtype, seed=seed).items()}


def verify(sd, **kw):
    return layerinit.verify(sd, PRESET, **{"dtype": "bf16", **kw})


def diagnosis(report, name):
    return report.tensor(name)["diagnosis"]


def hf_permute(w, n_heads, dim1, dim2):
    """transformers' convert_llama_weights_to_hf.py permute (Meta's rows to Hugging Face's), exactly:
    the script is not in transformers' wheel, torchtitan's adapter keeps an exact copy."""
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def hf_unpermute(w, n_heads, dim1, dim2):
    """torchtitan's llama3 state-dict adapter _reverse_permute (Hugging Face's rows to Meta's), exactly."""
    return w.view(n_heads, 2, dim1 // n_heads // 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def titan_adapter():
    """torchtitan's own llama3 adapter class (its _permute and _reverse_permute), or None."""
    try:
        from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter
    except ImportError:
        return None
    return Llama3StateDictAdapter


def test_its_own_tensors_verify_from_torch_numpy_and_layerinit_arrays():
    arrays = layerinit.build(PRESET, dtype="bf16", seed=3)
    for source in ({k: torch.from_dlpack(v) for k, v in arrays.items()},
                   {k: np.asarray(v) for k, v in arrays.items()},  # bf16 through ml_dtypes
                   arrays):
        r = verify(source, seed=3)
        assert r.ok and (r.equal, r.differs, r.missing, r.unexpected) == (39, 0, 0, 0), str(r)
        assert r.bytes_read == sum(a.nbytes for a in arrays.values())
        assert str(r) == "39 tensors: 39 equal, 0 differ, 0 missing, 0 unexpected\n"
        assert all(t["status"] == "equal" for t in r.tensors)
    fp32 = layerinit.build(PRESET, dtype="fp32")
    assert verify({k: np.asarray(v) for k, v in fp32.items()}, dtype="fp32").ok


def test_jax_arrays_verify():
    jnp = pytest.importorskip("jax.numpy")
    sd = {k: jnp.asarray(np.asarray(v)) for k, v in layerinit.build(PRESET, dtype="bf16").items()}
    assert verify(sd).ok


def test_one_element_changed_is_found_with_its_index_and_values():
    sd = state_dict()
    before = sd[Q][1, 2].item()
    changed = sd[Q].clone()
    changed[1, 2] += 1
    r = verify(dict(sd, **{Q: changed}))
    assert not r.ok and (r.equal, r.differs) == (38, 1)
    t = r.tensor(Q)
    bits = lambda x: "0x%04x" % (x.view(torch.int16).item() & 0xFFFF)  # noqa: E731
    assert t["status"] == "differs" and t["elements"] == 4096 and t["differing"] == 1
    assert t["expected"] == {"shape": [64, 64], "dtype": "bf16"}
    assert t["stored"] == {"shape": [64, 64], "dtype": "bf16", "file": ""}
    assert t["first_difference"] == {"index": 66, "coords": [1, 2], "expected": before, "stored": changed[1, 2].item(),
                                      "expected_bits": bits(sd[Q][1, 2]), "stored_bits": bits(changed[1, 2])}
    assert t["diagnosis"] == {"kind": "none", "text": "no known transformation gives the stored values"}
    # The text says how many values differ.
    assert str(r).splitlines()[0].startswith(
        f"differs    {Q} [64, 64] bf16: 1 of 4096 elements differ, first [1, 2]: ")
    # as_dict is the JSON object, a new copy each time.
    d = r.as_dict()
    assert d["ok"] is False and d["tensors"] == r.tensors and d["bytes_read"] == r.bytes_read
    d["tensors"].clear()
    assert len(r.as_dict()["tensors"]) == 39


def test_a_cuda_tensor_is_compared_from_a_host_copy():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    sd = {k: t.to("cuda") for k, t in state_dict().items()}
    assert verify(sd).ok
    sd[Q] = sd[Q].flip(0)
    assert diagnosis(verify(sd), Q)["kind"] == "rows_permuted"


def test_transposed():
    sd = state_dict()
    sd[GATE] = sd[GATE].T.contiguous()  # a kernel stored [in, out]
    r = verify(sd)
    assert r.tensor(GATE)["stored"]["shape"] == [64, 176]
    assert diagnosis(r, GATE) == {"kind": "transposed",
                                  "text": "the expected values transposed: stored [64, 176] where [176, 64] was expected"}


@pytest.mark.parametrize("source", ["replica", "torchtitan"])
def test_rope_permute_and_unpermute(source):
    if source == "torchtitan":
        adapter = titan_adapter()
        if adapter is None:
            pytest.skip("torchtitan is not installed")
        permute = lambda w, h, a, b: adapter._permute(None, w, h, a, b)  # noqa: E731
        unpermute = lambda w, h, a, b: adapter._reverse_permute(None, w, h, a, b)  # noqa: E731
    else:
        permute, unpermute = hf_permute, hf_unpermute
    sd = state_dict()
    for fn, kind in ((permute, "rope_permute"), (unpermute, "rope_unpermute")):
        r = verify(dict(sd, **{Q: fn(sd[Q], 4, 64, 64), K: fn(sd[K], 2, 32, 64)}))
        assert (r.differs, r.equal) == (2, 37)
        assert diagnosis(r, Q)["kind"] == kind and diagnosis(r, Q)["heads"] == 4
        assert diagnosis(r, K)["kind"] == kind and diagnosis(r, K)["heads"] == 2
        assert diagnosis(r, K)["text"].endswith(", 2 heads of 16 rows")


def test_rows_permuted_reshaped_zeros_constant_and_noise():
    sd = state_dict()
    torch.manual_seed(0)
    r = verify(dict(sd, **{Q: sd[Q].flip(0), K: sd[K].reshape(64, 32), V: torch.zeros_like(sd[V]),
                           GATE: torch.full_like(sd[GATE], 0.5), UP: torch.randn(176, 64).to(torch.bfloat16)}))
    assert diagnosis(r, Q) == {"kind": "rows_permuted",
                               "text": "the expected rows in another order, by no known rule (stored row 0 is expected row 63)"}
    assert diagnosis(r, K) == {"kind": "reshaped", "text": "the expected values in another shape: [64, 32] where [32, 64] "
                                                           "was expected"}
    assert diagnosis(r, V) == {"kind": "zeros", "text": "every element is 0"}
    assert diagnosis(r, GATE) == {"kind": "constant", "text": "every element is 0.5"}
    assert diagnosis(r, UP) == {"kind": "none", "text": "no known transformation gives the stored values"}


def test_fused_qkv_and_gate_up_are_slices():
    sd = state_dict()
    qkv, gate_up = "model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"
    sd[qkv] = torch.cat([sd.pop(Q), sd.pop(K), sd.pop(V)])
    sd[gate_up] = torch.cat([sd.pop(GATE), sd.pop(UP)])
    r = verify(sd)
    assert (r.equal, r.missing, r.unexpected, r.differs) == (34, 5, 2, 0)
    for name, fused, offset, rows in ((Q, qkv, 0, "0:64"), (K, qkv, 64 * 64, "64:96"), (V, qkv, 96 * 64, "96:128"),
                                      (GATE, gate_up, 0, "0:176"), (UP, gate_up, 176 * 64, "176:352")):
        assert r.tensor(name)["status"] == "missing"
        assert diagnosis(r, name) == {"kind": "slice", "text": f"found in {fused} at [{rows}] (fused or stacked into it)",
                                      "tensor": fused, "offset": offset}
    assert r.tensor(qkv)["status"] == "unexpected"
    assert diagnosis(r, qkv) == {"kind": "slice", "tensor": Q, "text": f"holds missing tensors: {Q} at [0:64]; {K} at [64:96]; "
                                                                       f"{V} at [96:128]"}
    assert diagnosis(r, gate_up)["kind"] == "slice"


def test_stacked_layers_are_slices_with_their_index():
    sd = state_dict()
    stacked = "model.layers.self_attn.q_proj.weight"
    sd[stacked] = torch.stack([sd.pop(f"model.layers.{i}.self_attn.q_proj.weight") for i in range(4)])
    r = verify(sd)
    assert (r.missing, r.unexpected) == (4, 1)
    for i in range(4):
        assert diagnosis(r, f"model.layers.{i}.self_attn.q_proj.weight") == {
            "kind": "slice", "text": f"found in {stacked} at [{i}] (fused or stacked into it)", "tensor": stacked,
            "offset": i * 64 * 64, "index": [i]}
    assert r.tensor(stacked)["stored"]["shape"] == [4, 64, 64]


def test_renamed():
    sd = state_dict()
    sd["model.layers.0.self_attn.q.weight"] = sd.pop(Q)
    r = verify(sd)
    assert diagnosis(r, Q) == {"kind": "renamed", "text": "its values are stored as model.layers.0.self_attn.q.weight "
                                                          "(renamed)", "tensor": "model.layers.0.self_attn.q.weight"}
    assert diagnosis(r, "model.layers.0.self_attn.q.weight") == {
        "kind": "renamed", "text": f"holds the values of {Q}, which is missing (renamed)", "tensor": Q}


def test_other_tensor_swapped_or_tied():
    sd = state_dict()
    q1 = Q.replace(".0.", ".1.")
    r = verify(dict(sd, **{Q: sd[q1], q1: sd[Q], "lm_head.weight": sd[EMBED].clone()}))
    assert diagnosis(r, Q) == {"kind": "other_tensor", "tensor": q1,
                               "text": f"holds the values of {q1} (swapped with it, or tied to it)"}
    assert diagnosis(r, q1)["tensor"] == Q
    # An untied model's head holding the embedding: a tie a converter made.
    assert diagnosis(r, "lm_head.weight") == {"kind": "other_tensor", "tensor": EMBED,
                                              "text": f"holds the values of {EMBED} (swapped with it, or tied to it)"}


def test_converted_rounded_and_other_dtype():
    bf16, fp32 = state_dict("bf16"), state_dict("fp32")
    # bf16 values widened to fp32: each exactly; a norm's ones too (a constant init is converted, not "every element is 1").
    norm = "model.layers.0.input_layernorm.weight"
    r = verify(dict(bf16, **{Q: bf16[Q].float(), norm: bf16[norm].float()}))
    assert diagnosis(r, Q) == {"kind": "converted", "text": "the expected bf16 values exactly, stored as fp32"}
    assert diagnosis(r, norm) == {"kind": "converted", "text": "the expected bf16 values exactly, stored as fp32"}
    # Ones where the init is not a constant: a constant, whatever the dtype.
    r = verify(dict(bf16, **{Q: torch.ones(64, 64), norm: torch.zeros(64)}))
    assert diagnosis(r, Q) == {"kind": "constant", "text": "every element is 1"}
    assert diagnosis(r, norm) == {"kind": "zeros", "text": "every element is 0"}
    # fp32 values rounded to bf16, checked as fp32.
    d = diagnosis(verify(dict(fp32, **{Q: fp32[Q].to(torch.bfloat16)}), dtype="fp32"), Q)
    assert d == {"kind": "rounded", "text": "the expected fp32 values rounded to bf16"}
    # The fp32 init cast to bf16, checked as bf16: layerinit's bf16 values are their own, not fp32's rounded.
    r = verify({k: t.to(torch.bfloat16) for k, t in fp32.items()})
    assert diagnosis(r, Q) == {"kind": "other_dtype", "text": "the init made in fp32, then cast to bf16", "dtype": "fp32"}
    # The bf16 init where fp32 is expected.
    d = diagnosis(verify(dict(fp32, **{Q: bf16[Q]}), dtype="fp32"), Q)
    assert d == {"kind": "other_dtype", "text": "the init made in bf16 (the stored dtype), not fp32", "dtype": "bf16"}


def test_other_seed():
    r = verify(state_dict(seed=7), seed=0)
    assert not r.ok and r.differs == 30 and r.equal == 9  # the norms are constant(1) whatever the seed
    assert diagnosis(r, Q) == {"kind": "other_seed", "text": "the init of seed 7, not 0", "seed": 7}
    assert all(t["diagnosis"]["seed"] == 7 for t in r.tensors if t["status"] == "differs")
    # A seed outside 0..1023 is found when guessed.
    far = state_dict(seed=5000)
    assert diagnosis(verify(far), Q)["kind"] == "none"
    assert diagnosis(verify(far, seed_guesses=[9, 5000]), Q) == {"kind": "other_seed", "text": "the init of seed 5000, not 0",
                                                                "seed": 5000}


def test_diagnose_false_leaves_the_differences_undiagnosed():
    sd = state_dict()
    r = verify(dict(sd, **{Q: sd[Q].flip(0)}), diagnose=False)
    assert r.tensor(Q)["status"] == "differs" and "diagnosis" not in r.tensor(Q)


def test_a_tied_parameter_in_a_state_dict_is_one_tensor():
    """gemma-2-tiny ties its head: state_dict() names the embedding twice (lm_head.weight), as
    save_pretrained does not; verify leaves the second name out, as the model has no such tensor."""
    emb = "model.embed_tokens.weight"
    sd = state_dict(preset="gemma-2-tiny")
    assert "lm_head.weight" not in sd and layerinit.spec("gemma-2-tiny").tie_word_embeddings
    tied = dict(sd, **{"lm_head.weight": sd[emb]})
    assert layerinit.verify(tied, "gemma-2-tiny", dtype="bf16").ok
    # A copy is not a tie: it is stored twice, and said to be.
    r = layerinit.verify(dict(sd, **{"lm_head.weight": sd[emb].clone()}), "gemma-2-tiny", dtype="bf16")
    assert r.unexpected == 1 and diagnosis(r, "lm_head.weight")["kind"] == "other_tensor"


def test_errors_name_the_argument():
    sd = state_dict()
    with pytest.raises(ValueError, match=r"^model is needed: the state dict has no layerinit metadata \(model_spec\)"):
        layerinit.verify(sd)
    with pytest.raises(ValueError, match=r"^verify: checkpoint 'the state dict' is not of model 'gpt2-tiny' \(per-layer, "
                                         r"out-in\): 0 of \d+ of its tensors are there"):
        layerinit.verify(sd, "gpt2-tiny")
    with pytest.raises(ValueError, match=r"^source must be a checkpoint's path or a mapping"):
        layerinit.verify(42, PRESET)
    with pytest.raises(ValueError, match=r"^source\['x'\] must be a torch tensor, a NumPy or JAX array, got list"):
        layerinit.verify({"x": [1.0]}, PRESET)
    class ItemsRaise(dict):
        def items(self):
            raise KeyError("no items")

    with pytest.raises(ValueError, match=r"^source: reading the ItemsRaise raised KeyError"):
        layerinit.verify(ItemsRaise(), PRESET)
    with pytest.raises(ValueError, match=r"^overrides must be a mapping"):
        layerinit.verify(sd, PRESET, overrides=5)
    with pytest.raises(ValueError, match=r"^threads must be in \[0, 4096\]"):
        layerinit.verify(sd, PRESET, threads=5000)
    with pytest.raises(ValueError, match=r"^seed_guesses\[0\] must be an integer"):
        layerinit.verify(sd, PRESET, seed_guesses=["1"])
    with pytest.raises(ValueError, match=r"^diagnose must be True or False"):
        layerinit.verify(sd, PRESET, diagnose=1)
    with pytest.raises(ValueError, match=r"^source\['x'\] of dtype object holds no numbers"):
        layerinit.verify({"x": np.array([None])}, PRESET)
    with pytest.raises(ValueError, match=r"^source key 5 must be a str, got int 5"):
        layerinit.verify({5: sd[Q]}, PRESET)
    with pytest.raises(ValueError, match=r"^source\['x'\] holds no dense values"):
        layerinit.verify({"x": torch.empty(3, device="meta")}, PRESET)
    with pytest.raises(ValueError, match=r"^seed must be an integer"):
        layerinit.verify(sd, PRESET, seed="0")
    with pytest.raises(ValueError, match=r"^dtype: dtype 'fp9' is unknown"):
        layerinit.verify(sd, PRESET, dtype="fp9")
    with pytest.raises(ValueError, match=r"^layout"):
        layerinit.verify(sd, PRESET, layout="diagonal")
    # A buffer of another size than the shape says: named, not read past.
    from layerinit import _core

    tensors = [(k, "BF16", list(t.shape), 2) for k, t in sd.items()]
    with pytest.raises(ValueError, match=rf"^source\['{EMBED}'\] gave 4 bytes for a tensor of 65536$"):
        _core.verify_tensors(tensors, lambda k: b"abcd", [], layerinit.spec(PRESET), "bf16", None, None, None, None, None,
                             None, None)


def test_a_model_too_large_to_hold_is_refused_before_it_is_walked():
    # 2^40 layers: a MemoryError with the bytes, before any layer is looked at (verify walked them all).
    huge = {"name": "huge", "layer": {"count": 1 << 40, "tensors": [{"name": "w", "shape": [2], "role": "norm_weight"}]}}
    with pytest.raises(MemoryError, match=r"^not enough memory: needs 2176\.00 TiB .*tensor records 2176\.00 TiB") as e:
        layerinit.verify(state_dict(), huge)
    assert e.value.needed == 2392537302040576 + 3 * 4  # the records, and three chunks of the largest tensor ([2] bf16)


def test_an_exception_of_the_source_reaches_the_caller():
    class Boom(Exception):
        pass

    from layerinit import _core

    sd = state_dict()
    tensors = [(k, "BF16", list(t.shape), 2) for k, t in sd.items()]

    def get(k):
        raise Boom(k)

    with pytest.raises(Boom):
        _core.verify_tensors(tensors, get, [], layerinit.spec(PRESET), "bf16", None, None, None, None, None, None, None)


def test_a_dtensor_is_refused_naming_what_to_pass():
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Replicate

    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        sd = state_dict()
        sd[Q] = DTensor.from_local(sd[Q], DeviceMesh("cpu", [0]), [Replicate()])
        with pytest.raises(ValueError, match=rf"^source\['{Q}'\] is a DTensor: pass its full_tensor\(\)"):
            verify(sd)
    finally:
        dist.destroy_process_group()


def test_ctrl_c_while_verifying_raises_keyboard_interrupt():
    import os
    import signal

    from layerinit import _core

    sd = state_dict()
    names = list(sd)
    tensors = [(k, "BF16", list(t.shape), 2) for k, t in sd.items()]

    def get(k):
        if k == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return sd[names[k]].view(torch.int16).numpy()

    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _core.verify_tensors(tensors, get, [], layerinit.spec(PRESET), "bf16", None, None, None, None, None, None,
                                 None, threads=1)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert verify(sd, threads=1).ok  # and the next one runs


# --- transformers and torchtitan ---------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_transformers_model_filled_by_init_verifies(family, tmp_path):
    transformers = pytest.importorskip("transformers")
    import layerinit.torch as lt
    from hf_configs import config, config_dict

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config(family)).to(torch.float32)
    lt.init_(model, seed=9)
    r = layerinit.verify(model.state_dict(), config_dict(family), seed=9, dtype="fp32")
    assert r.ok, str(r)
    # The spec's tensors, the tied head (gemma2) not among them.
    names = [n for n, *_ in layerinit.plan(config_dict(family), dtype="fp32").tensors()]
    assert [t["name"] for t in r.tensors] == names
    assert ("lm_head.weight" in names) == (not model.config.tie_word_embeddings)
    # Another seed's model: every random tensor said to be seed 9's.
    r = layerinit.verify(model.state_dict(), config_dict(family), seed=10, dtype="fp32")
    assert not r.ok and {t["diagnosis"]["seed"] for t in r.tensors if t["status"] == "differs"} == {9}


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torchtitan_to_hf_of_a_model_filled_by_init_verifies(flavor, dtype):
    """torchtitan's own adapter output (fused wqkv split, RoPE rows permuted back, stacked experts
    split, a tie) of its models filled by init_ is the init."""
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (scripts/python-test-env installs it)")
    import layerinit.torch as lt
    from titan_models import adapter, meta_model

    model = meta_model(flavor, {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
    lt.init_(model, recipe="torchtitan", seed=5)
    spec = lt.torchtitan_spec(model)
    hf = adapter(model).to_hf(model.state_dict())
    r = layerinit.verify(hf, spec, recipe="torchtitan", seed=5, dtype=dtype)
    if flavor == "deepseek-v3-tiny" and dtype == "bf16":
        # torchtitan keeps the router's correction bias (zeros) in fp32: said so, and verified as fp32.
        bias = [t for t in r.tensors if t["status"] != "equal"]
        assert [t["name"] for t in bias] == [f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in (1, 2)]
        assert all(t["diagnosis"] == {"kind": "converted", "text": "the expected bf16 values exactly, stored as fp32"}
                   for t in bias)
        r = layerinit.verify(hf, spec, recipe="torchtitan", seed=5, dtype=dtype,
                             dtype_overrides={"*e_score_correction_bias": "fp32"})
    assert r.ok and r.equal == len(layerinit.plan(spec).tensors()), str(r)


def test_torchtitan_native_names_are_refused_and_its_rope_rows_found():
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (scripts/python-test-env installs it)")
    import layerinit.torch as lt
    from titan_models import adapter, meta_model

    model = meta_model("llama3-debugmodel", torch.float32)
    lt.init_(model, recipe="torchtitan", seed=5)
    spec = lt.torchtitan_spec(model)
    hf = adapter(model).to_hf(model.state_dict())
    # Its own state dict, not converted: not the Hugging Face names the spec has, refused as not the model.
    with pytest.raises(ValueError, match=r"^verify: checkpoint 'the state dict' is not of model "
                                         r"'torchtitan-llama3' \(per-layer, out-in\): 1 of 57 of its tensors are there"):
        layerinit.verify(model.state_dict(), spec, recipe="torchtitan", seed=5, dtype="fp32")
    # to_hf with one wq left in torchtitan's interleaved RoPE rows: said to be the reverse permutation.
    q = "model.layers.0.self_attn.q_proj.weight"
    n_heads = model.config.layers[0].attention.n_heads
    dim = hf[q].shape[0]
    wrong = dict(hf, **{q: hf_unpermute(hf[q], n_heads, dim, hf[q].shape[1])})
    d = diagnosis(layerinit.verify(wrong, spec, recipe="torchtitan", seed=5, dtype="fp32"), q)
    assert d["kind"] == "rope_unpermute" and d["heads"] == n_heads



# --- checkpoints on disk ---------------------------------------------------------------------------


def test_an_emitted_checkpoint_verifies_with_the_options_its_metadata_says(cli, tmp_path):
    from conftest import run_cli

    out = tmp_path / "out"
    run_cli(cli, "emit", "--preset", PRESET, "--backend", "cpu", "--format", "safetensors", "--dtype", "fp32", "--seed", "4",
            "-o", str(out))
    r = layerinit.verify(out)  # model, dtype and seed from the metadata
    assert r.ok and r.equal == 39, str(r)
    assert r.bytes_read == sum(a.nbytes for a in layerinit.build(PRESET, dtype="fp32").values())
    assert layerinit.verify(str(out), PRESET, dtype="fp32", seed=4).ok
    # An option given wins over the metadata's: seed 0 is not what was made, and the metadata's seed is found.
    r = layerinit.verify(out, seed=0)
    assert not r.ok and diagnosis(r, Q) == {"kind": "other_seed", "text": "the init of seed 4, not 0", "seed": 4}
    # The CLI's --report json and layerinit.verify give the library's one report document: every field
    # the same but the time taken, in the same order.
    cli_report = json.loads(subprocess.run([cli, "verify", str(out), "--seed", "0", "--report", "json"],
                                           capture_output=True, text=True).stdout)
    ours = r.as_dict()
    assert list(ours) == [k for k in cli_report if k in ours] and len(ours) == 8
    assert {k: v for k, v in ours.items() if k != "seconds"} == {k: cli_report[k] for k in ours if k != "seconds"}
    assert ours["tensors"][0] is not r.tensors[0]
    # A directory of emit --rank files: each tensor's pieces cover it; one rank's file gone leaves half uncovered.
    ranks = tmp_path / "ranks"
    for rank in ("0", "1"):
        run_cli(cli, "emit", "--preset", PRESET, "--backend", "cpu", "--format", "safetensors", "--tp", "2", "--rank", rank,
                "--seed", "4", "-o", str(ranks))
    r = layerinit.verify(ranks)
    assert r.ok and r.tensor(Q)["stored"]["pieces"] == 2, str(r)
    (ranks / "rank-00001-of-00002.safetensors").unlink()
    r = layerinit.verify(ranks)
    assert (r.missing, r.equal) == (30, 9) and r.tensor(Q)["uncovered"] == 64 * 64 // 2
    h5 = tmp_path / "out.h5"
    run_cli(cli, "emit", "--preset", PRESET, "--backend", "cpu", "--format", "hdf5", "--seed", "4", "-o", str(h5))
    if layerinit.hdf5_available():
        assert layerinit.verify(h5).ok
    else:  # the wheel (scripts/wheel): the file is recognized and refused, saying how to read it
        with pytest.raises(ValueError, match=r"is an HDF5 file, and this layerinit was built without HDF5 .*from source"):
            layerinit.verify(h5)


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2", "mixtral"])
def test_save_pretrained_of_a_model_filled_by_init_verifies(family, tmp_path, cli):
    """The Hugging Face checkpoint with its config.json as the model (--hf-config): the config's dtype
    is the init's; gemma2's and gpt2's tied heads are not in the file, nor in the spec; gpt2's Conv1D
    weights are stored [in, out]; transformers 5 saves Mixtral's fused experts one tensor each."""
    transformers = pytest.importorskip("transformers")
    import layerinit.torch as lt
    from hf_configs import config

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config(family)).to(torch.float32)
    lt.init_(model, seed=9)
    model.save_pretrained(tmp_path)
    r = layerinit.verify(tmp_path, tmp_path, seed=9)
    assert r.ok, str(r)
    # The command line, as the issue asks: --hf-config names the model.
    out = subprocess.run([cli, "verify", str(tmp_path), "--hf-config", str(tmp_path), "--seed", "9"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-2] == f"{len(r.tensors)} tensors: {len(r.tensors)} equal, 0 differ, 0 missing, 0 unexpected"
    assert all(t["expected"]["dtype"] == "fp32" for t in r.tensors)
    # save_pretrained writes no layerinit metadata: the model must be given.
    with pytest.raises(ValueError, match=rf"^model is needed: checkpoint '{tmp_path}' has no layerinit metadata"):
        layerinit.verify(tmp_path)


def test_a_path_that_is_not_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path / "none")):
        layerinit.verify(tmp_path / "none", PRESET)
    (tmp_path / "x.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises(ValueError):
        layerinit.verify(tmp_path / "x.safetensors", PRESET)
    with pytest.raises(ValueError, match=r"^source must be a checkpoint's path or a mapping of names to arrays, got bytes"):
        layerinit.verify(b"out", PRESET)
