"""layerinit.torch.init_ on torchtitan's own models (llama3 debugmodel, tiny qwen3, qwen3 MoE and
deepseek_v3 flavours of torchtitan's builders), no spec and no map: on the meta device it equals
`layerinit emit --recipe torchtitan` loaded through torchtitan's own state-dict adapter, bitwise, on
one process and on 2 ranks (FSDP2, DTensor tensor-parallel placements, torchtitan's own
parallelize on its spmd_types backend); its fills are the ones torchtitan's param_init sets, and
agree in distribution with torchtitan's own init_states."""
import functools
import itertools
import json
import math
import re
import subprocess
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchtitan", reason="torchtitan is not installed (scripts/python-test-env installs it)")

import layerinit  # noqa: E402
import layerinit.torch as lt  # noqa: E402
from titan_models import FLAVORS, load_hf, meta_model  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def bits(t):
    return t.detach().view(torch.int16 if t.element_size() == 2 else torch.int32)


@pytest.fixture(scope="module")
def titan_emit(cli, tmp_path_factory):
    """titan_emit(flavor, dtype, seed) -> the directory `layerinit emit --spec <torchtitan_spec>
    --recipe torchtitan` writes, cached."""
    cache = {}

    def get(flavor, dtype, seed):
        key = (flavor, dtype, seed)
        if key not in cache:
            d = tmp_path_factory.mktemp("titan")
            spec = d / "spec.json"
            spec.write_text(json.dumps(lt.torchtitan_spec(meta_model(flavor))))
            r = subprocess.run([cli, "emit", "--spec", str(spec), "--recipe", "torchtitan", "--seed", str(seed),
                                "--dtype", dtype, "--backend", "cpu", "--format", "safetensors", "-o", str(d / "ck")],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            cache[key] = d / "ck"
        return cache[key]

    return get


def loaded(flavor, dtype, directory):
    """A torchtitan model holding the checkpoint at `directory`, loaded as torchtitan loads it."""
    model = meta_model(flavor, DTYPES[dtype])
    model.to_empty(device="cpu")
    model.init_states()  # torchtitan's flow: initialize (its buffers), then load the checkpoint
    missing, unexpected = load_hf(model, directory)
    # The only state the checkpoint does not hold: qwen3 MoE's load-balancing bias (its adapter maps none).
    assert not unexpected and all(k.endswith("moe.expert_bias_E") for k in missing), (missing, unexpected)
    return model


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_meta_model_equals_emit_loaded_by_torchtitan(flavor, dtype, titan_emit):
    model = meta_model(flavor, DTYPES[dtype])
    lt.init_(model, recipe="torchtitan", seed=5)
    ref = loaded(flavor, dtype, titan_emit(flavor, dtype, 5))
    want = dict(ref.named_parameters())
    got = dict(model.named_parameters())
    assert got.keys() == want.keys()
    for name, p in got.items():
        assert p.dtype == DTYPES[dtype] and torch.equal(bits(p), bits(want[name])), name
    if model.config.enable_weight_tying:
        assert model.lm_head.weight is model.tok_embeddings.weight
    # Buffers: the RoPE caches computed by torchtitan's own code, the router bias zero.
    for name, b in ref.named_buffers():
        if not name.endswith("tokens_per_expert_E"):
            assert torch.equal(dict(model.named_buffers())[name], b), name


def test_each_parameter_is_one_composite_of_one_fill_call(monkeypatch):
    """A fused wqkv in interleaved RoPE rows, stacked experts: each parameter is one Composite, and
    init_ fills them all in one call (rows were filled one call each before: 100,000s of calls for
    llama3 8B; then one call per parameter)."""
    calls = []
    fill = layerinit._core.fill_composites
    monkeypatch.setattr(layerinit._core, "fill_composites", lambda *a: calls.append(a[1]) or fill(*a))
    for flavor in ("llama3-debugmodel", "deepseek-v3-tiny"):
        calls.clear()
        model = meta_model(flavor, torch.float32)
        lt.init_(model, recipe="torchtitan", seed=5)
        filled = [n for n, p in model.named_parameters() if p.numel()]
        filled += [n for n, _ in model.named_buffers() if n in lt._titan(model)[1]]  # the router bias
        assert len(calls) == 1 and len(calls[0]) == len(filled), flavor
        assert all(isinstance(c, layerinit.Composite) for c in calls[0])


def test_init_again_reuses_the_plan_and_writes_the_same_bits(monkeypatch):
    """A second init_ of the same model with the same arguments makes no spec, plan or composite
    again (the MoE's 64 x 3 x 2 experts included) and writes the same bits; a different seed or
    recipe prepares anew."""
    model = meta_model("qwen3-moe-tiny", torch.bfloat16)
    lt.init_(model, recipe="torchtitan", seed=5)
    first = {n: bits(p).clone() for n, p in model.named_parameters()}
    made = []
    prepare = lt._prepare
    monkeypatch.setattr(lt, "_prepare", lambda *a: made.append(a[1:3]) or prepare(*a))
    for p in model.parameters():
        p.data.zero_()
    lt.init_(model, recipe="torchtitan", seed=5)
    assert made == []
    assert all(torch.equal(bits(p), first[n]) for n, p in model.named_parameters())
    lt.init_(model, recipe="torchtitan", seed=6)
    lt.init_(model, recipe="hf", seed=6)
    assert made == [("torchtitan", 6), ("hf", 6)]
    assert not torch.equal(bits(model.lm_head.weight), first["lm_head.weight"])
    lt.init_(model, recipe="torchtitan", seed=5, name_map={})  # a name_map: prepared every call
    assert len(made) == 3
    assert all(torch.equal(bits(p), first[n]) for n, p in model.named_parameters())


def test_init_again_after_a_dtype_change_prepares_anew():
    model = meta_model("qwen3-tiny", torch.float32)
    lt.init_(model, recipe="torchtitan", seed=5)
    model.to(torch.bfloat16)
    lt.init_(model, recipe="torchtitan", seed=5)
    ref = meta_model("qwen3-tiny", torch.bfloat16)
    lt.init_(ref, recipe="torchtitan", seed=5)
    want = dict(ref.named_parameters())
    assert all(p.dtype == torch.bfloat16 and torch.equal(bits(p), bits(want[n])) for n, p in model.named_parameters())


# What torchtitan's own code says each parameter gets (the param_init each package's __init__.py sets),
# as the layerinit fills that are exactly that rule: the recipe's fill must be one of them.
def titan_fills(fn):
    from torchtitan.models.common.param_init import skip_param_init

    if fn is torch.nn.init.ones_:
        return [layerinit.Fill.parse("constant(1)")]
    if fn is torch.nn.init.zeros_:
        return [layerinit.Fill.parse("constant(0)")]
    if fn is skip_param_init:
        return None
    if isinstance(fn, functools.partial):
        kw = fn.keywords
        m, s = kw.get("mean", 0.0), kw.get("std", 1.0)
        if fn.func is torch.nn.init.normal_:
            return [layerinit.Fill.parse(f"normal({m!r}, {s!r})")]
        if fn.func is torch.nn.init.trunc_normal_:
            a, b = kw.get("a", -2.0), kw.get("b", 2.0)
            out = [layerinit.Fill.parse(f"trunc_normal({m!r}, {s!r}, {a!r}, {b!r})")]
            out += [layerinit.Fill.parse(f"trunc_normal_std({m!r}, {s!r}, {-k}, {k})") for k in (2, 3)
                    if a == m - k * s and b == m + k * s]  # bounds written in units of std
            return out
    closure = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    if "base_init" in closure:  # the fused wqkv: q, k and v each drawn by the base init
        return titan_fills(closure["base_init"])
    raise AssertionError(f"unknown torchtitan init {fn}")


@pytest.mark.parametrize("flavor", FLAVORS)
def test_recipe_is_torchtitans_param_init(flavor):
    model = meta_model(flavor)
    spec, makers = lt._titan(model)
    p = layerinit.plan(spec, recipe="torchtitan", dtype="fp32")
    modules = dict(model.named_modules())
    checked = 0
    for name, _ in model.named_parameters():
        owner, _, attr = name.rpartition(".")
        fn = modules[owner]._param_init[attr]
        if titan_fills(fn) is None:  # the tied embedding: lm_head's init
            fn = model.lm_head._param_init["weight"]
        want = titan_fills(fn)
        c = makers[name](p)
        for part in range(len(c.parts)):
            for index in itertools.product(*(range(size) for size, _ in c.stack)):
                tensor = c.tensor_name(part, list(index))
                assert p.fill_of(tensor) in want, (name, tensor, str(p.fill_of(tensor)), [str(f) for f in want])
                checked += 1
    assert checked >= len(list(model.parameters()))


# torchtitan's own init_states and layerinit agree in distribution per tensor: a two-sample KS test
# at a false-alarm rate of 1e-4 per tensor (critical value c = sqrt(-ln(1e-4 / 2) / 2) = 2.302,
# D > c sqrt((n + m) / (n m))), fixed seeds; constants equal exactly.
@pytest.mark.parametrize("flavor", ["llama3-debugmodel", "qwen3-moe-tiny", "deepseek-v3-tiny"])
def test_same_distribution_as_torchtitans_init_states(flavor):
    torch.manual_seed(0)
    ours = meta_model(flavor)
    lt.init_(ours, recipe="torchtitan", seed=3)
    theirs = meta_model(flavor)
    theirs.to_empty(device="cpu")
    theirs.init_states()
    c = math.sqrt(-math.log(1e-4 / 2) / 2)
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        x, y = a.detach().flatten().double(), b.detach().flatten().double()
        if torch.all(y == y[0]):
            assert torch.equal(x, y), name
            continue
        xs, ys = torch.sort(x).values, torch.sort(y).values
        grid = torch.cat([xs, ys])
        d = (torch.searchsorted(xs, grid, right=True) / len(xs) - torch.searchsorted(ys, grid, right=True) / len(ys))
        n, m = len(xs), len(ys)
        assert float(d.abs().max()) <= c * math.sqrt((n + m) / (n * m)), name


def test_the_silent_case_is_right():
    """The case that was silently wrong: torchtitan's debugmodel, no spec, no map."""
    model = meta_model("llama3-debugmodel")
    lt.init_(model, recipe="torchtitan", seed=0)
    assert abs(float(model.lm_head.weight.detach().std()) - 256 ** -0.5 * 0.986) < 0.002  # trunc at 3 std: 0.986 std
    for i in (0, 5):
        wo = model.layers[str(i)].attention.wo.weight.detach()
        assert abs(float(wo.std()) / (0.02 / math.sqrt(2 * (i + 1))) - 1) < 0.02, i


def test_unknown_torchtitan_family_is_refused():
    gpt_oss = pytest.importorskip("torchtitan.models.gpt_oss")
    with torch.device("meta"):
        model = gpt_oss.model_registry("debugmodel").model.build()
    with pytest.raises(ValueError, match=r"torchtitan model \w+ \(gpt_oss\) has no layerinit mapping"):
        lt.init_(model, recipe="torchtitan")


WORKER = Path(__file__).with_name("titan_worker.py")


def test_fsdp2_and_tensor_parallel_on_two_ranks_equal_emit_loaded_by_torchtitan(titan_emit, tmp_path):
    from test_distributed import run_ranks

    flavors = ["llama3-debugmodel", "qwen3-moe-tiny", "deepseek-v3-tiny"]
    refs = {}
    for flavor in flavors:
        model = loaded(flavor, "bf16", titan_emit(flavor, "bf16", 9))
        refs[flavor] = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.save(refs, tmp_path / "refs.pt")
    outs = run_ranks([str(tmp_path / "refs.pt"), *flavors], 2, worker=WORKER)
    for rank, (code, out) in enumerate(outs):
        assert code == 0, f"rank {rank} exit {code}:\n{out[-3000:]}"
        for flavor in flavors:
            for mode in ("fsdp2", "tp", "titan-tp"):
                assert re.search(rf"rank {rank}: {flavor} \({mode}\): \d+ tensors equal", out), out[-2000:]
            assert f"rank {rank}: {flavor}: local shards without a PartitionSpec refused" in out, out[-2000:]


def test_a_buffer_torchtitans_code_leaves_is_named():
    from torchtitan.protocols.module import Module

    class Counter(Module):  # torchtitan's base _init_self_buffers computes nothing
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("seen", torch.zeros(4))

    with torch.device("meta"):
        m = Counter()
    with pytest.warns(UserWarning, match=r"buffers left uninitialized after to_empty .*\['seen'\]"):
        lt.init_(m, recipe="pytorch-default")


@pytest.mark.parametrize("flavor", ["llama3-debugmodel", "llama3-tiny-tied"])
def test_llama3_spec_is_the_llama_familys(flavor):
    """One model, one set of values: torchtitan_spec of a llama3 model plans the same tensors, shapes
    and fills as layerinit's llama family of the same numbers (as a Hugging Face config gives them)."""
    model = meta_model(flavor)
    spec = lt.torchtitan_spec(model)
    h = spec["hyper"]
    family = layerinit.hf_spec(dict(
        model_type="llama", vocab_size=h["vocab_size"], hidden_size=h["hidden_size"],
        intermediate_size=h["intermediate_size"], num_attention_heads=h["num_heads"],
        num_key_value_heads=h.get("num_kv_heads") or None, head_dim=h.get("head_dim") or None, num_hidden_layers=len(model.layers),
        tie_word_embeddings=h.get("tie_word_embeddings", False)))
    ours = layerinit.plan(spec, recipe="torchtitan", dtype="fp32")
    theirs = layerinit.plan(family, recipe="torchtitan", dtype="fp32")
    assert sorted(t[:2] for t in ours.tensors()) == sorted(t[:2] for t in theirs.tensors())
    for name, *_ in ours.tensors():
        assert ours.fill_of(name) == theirs.fill_of(name), name


def test_wrapped_layers_keep_their_tensors():
    """torchtitan wraps layers for activation checkpointing and torch.compile: the parameter names
    gain _checkpoint_wrapped_module / _orig_mod; the values do not change."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    plain = meta_model("qwen3-tiny")
    lt.init_(plain, recipe="torchtitan", seed=2)
    wrapped = meta_model("qwen3-tiny")
    wrapped.layers["0"] = checkpoint_wrapper(wrapped.layers["0"])
    wrapped.layers["1"] = torch.compile(wrapped.layers["1"])
    assert any("_checkpoint_wrapped_module" in n for n, _ in wrapped.named_parameters())
    lt.init_(wrapped, recipe="torchtitan", seed=2)
    got = {k.replace("_orig_mod.", ""): v for k, v in wrapped.state_dict().items() if "rope" not in k}
    want = {k: v for k, v in plain.state_dict().items() if "rope" not in k}
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_name_map_extends_torchtitans_mapping():
    """init_(model, name_map={}) dropped torchtitan's mapping (the parameters were looked up under their
    torchtitan names: 31 of 32 differed from emit); name_map now extends it: a name it leaves out keeps
    the tensor layerinit infers, None skips a parameter, a name maps it elsewhere."""
    want = meta_model("llama3-debugmodel")
    lt.init_(want, recipe="torchtitan", seed=4)
    for name_map in ({}, lambda n: n):
        got = meta_model("llama3-debugmodel")
        lt.init_(got, recipe="torchtitan", seed=4, name_map=name_map)
        assert all(torch.equal(a, b) for a, b in zip(got.state_dict().values(), want.state_dict().values()))
    got = meta_model("llama3-debugmodel")
    with torch.no_grad():
        got.to_empty(device="cpu")
        got.norm.weight.fill_(7)
    lt.init_(got, recipe="torchtitan", seed=4,
             name_map={"norm.weight": None, "layers.1.attention_norm.weight": "model.layers.0.input_layernorm.weight"})
    assert torch.all(got.norm.weight == 7)  # skipped
    for n, p in got.named_parameters():
        if n != "norm.weight":
            assert torch.equal(p, want.get_parameter(n)), n


@pytest.mark.parametrize("flavor", FLAVORS)
def test_own_init_is_the_torchtitan_recipe_bitwise(flavor):
    """init_ without a recipe records torchtitan's own init_states (its param_init: trunc_normal_ with
    depth-scaled stds, the fused wqkv drawn as q, k and v apart and concatenated per kv head, ties):
    every parameter equals init_(recipe="torchtitan"), which equals `layerinit emit` (above), bitwise."""
    own, recipe = meta_model(flavor), meta_model(flavor)
    lt.init_(own, seed=5)
    lt.init_(recipe, recipe="torchtitan", seed=5)
    want = dict(recipe.named_parameters())
    for n, p in own.named_parameters():
        assert torch.equal(bits(p), bits(want[n])), n
