"""layerinit.torch.init_: transformers models on the meta device equal `layerinit emit`, bitwise."""
import math
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

import layerinit  # noqa: E402
import layerinit.torch as lt  # noqa: E402
from hf_configs import config  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def meta_model(preset, dtype):
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(config(preset))
    return m.to(DTYPES[dtype])


def fused(ref, name):
    """transformers 5's fused expert tensor from the per-expert tensors of a checkpoint."""
    m = re.match(r"^(.*)\.mlp\.experts\.(gate_up_proj|down_proj)$", name)
    base, kind = m.group(1), m.group(2)
    E = sum(1 for k in ref if k.startswith(f"{base}.block_sparse_moe.experts.") and k.endswith(".w2.weight"))
    e = lambda i, w: ref[f"{base}.block_sparse_moe.experts.{i}.{w}.weight"]  # noqa: E731
    if kind == "down_proj":
        return torch.stack([e(i, "w2") for i in range(E)])
    return torch.stack([torch.cat([e(i, "w1"), e(i, "w3")]) for i in range(E)])


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16) if a.element_size() == 2 else
                                                                     a.view(torch.int32),
                                                                     b.view(torch.int16) if b.element_size() == 2 else
                                                                     b.view(torch.int32))


@pytest.mark.parametrize("preset", ["llama-tiny", "mixtral-tiny", "gpt2-tiny"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_meta_model_equals_emit(preset, dtype, emitted):
    model = meta_model(preset, dtype)
    assert all(p.is_meta for p in model.parameters())
    lt.init_(model, seed=21)
    ref = emitted(preset, "--seed", "21", "--dtype", dtype)
    sd = model.state_dict()
    used = set()
    for k, v in sd.items():
        if k in ref:
            assert same(v, ref[k]), k
            used.add(k)
        elif k.replace(".mlp.", ".block_sparse_moe.") in ref:
            assert same(v, ref[k.replace(".mlp.", ".block_sparse_moe.")]), k
            used.add(k.replace(".mlp.", ".block_sparse_moe."))
        elif k.endswith(("gate_up_proj", "down_proj")) and "experts" in k:
            assert same(v, fused(ref, k)), k
            used |= {r for r in ref if r.startswith(k.split(".mlp.")[0] + ".block_sparse_moe.experts.")}
        else:
            assert k == "lm_head.weight" and model.config.tie_word_embeddings, k
    assert used == set(ref)  # every emitted tensor is in the model


def test_tied_weights_filled_once_and_kept_tied():
    model = meta_model("gpt2-tiny", "bf16")
    lt.init_(model, seed=1)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()


def test_rotary_buffers_computed_like_transformers():
    model = meta_model("llama-tiny", "fp32")
    lt.init_(model)
    cpu = transformers.AutoModelForCausalLM.from_config(config("llama-tiny"))
    assert torch.equal(model.model.rotary_emb.inv_freq, cpu.model.rotary_emb.inv_freq)
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(logits).all()


class TitanBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = torch.nn.ModuleDict({w: torch.nn.Linear(64, o, bias=False) for w, o in
                                              (("wq", 64), ("wk", 32), ("wv", 32), ("wo", 64))})
        self.feed_forward = torch.nn.ModuleDict({"w1": torch.nn.Linear(64, 176, bias=False),
                                                 "w2": torch.nn.Linear(176, 64, bias=False),
                                                 "w3": torch.nn.Linear(64, 176, bias=False)})


def test_name_map_for_torchtitan_names():
    with torch.device("meta"):
        block = TitanBlock()
    hf = {"attention.wq": "self_attn.q_proj", "attention.wk": "self_attn.k_proj", "attention.wv": "self_attn.v_proj",
          "attention.wo": "self_attn.o_proj", "feed_forward.w1": "mlp.gate_proj", "feed_forward.w2": "mlp.down_proj",
          "feed_forward.w3": "mlp.up_proj"}
    lt.init_(block, spec="llama-tiny", recipe="torchtitan", seed=8,
             name_map=lambda n: "model.layers.2." + hf[n.rsplit(".", 1)[0]] + ".weight")
    ref = layerinit.build("llama-tiny", recipe="torchtitan", seed=8, dtype="fp32")
    for short, long in hf.items():
        got = block.get_submodule(short).weight
        assert same(got, torch.from_dlpack(ref[f"model.layers.2.{long}.weight"])), short


class FusedQkv(torch.nn.Module):
    """One layer's attention with q, k and v in one [(4 + 2 + 2) * 16, 64] weight, grouped by kv head."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(64, 128, bias=False)
        self.o = torch.nn.Linear(64, 64, bias=False)


def test_name_map_may_give_a_composite():
    qkv = [f"model.layers.1.self_attn.{p}_proj.weight" for p in "qkv"]
    ref = {k: torch.from_dlpack(v) for k, v in layerinit.build("llama-tiny", seed=4, dtype="bf16").items()}
    want = torch.cat([torch.cat([ref[n].view(2, -1, 64)[g] for n in qkv]) for g in range(2)])
    for entry in (lambda p: p.composite(qkv, groups=2),
                  layerinit.plan("llama-tiny", seed=4, dtype="bf16").composite(qkv, groups=2)):
        with torch.device("meta"):
            m = FusedQkv().to(torch.bfloat16)
        lt.init_(m, spec="llama-tiny", seed=4, name_map={"qkv.weight": entry, "o.weight": "model.layers.1.self_attn.o_proj.weight"})
        assert torch.equal(m.qkv.weight.view(torch.int16), want.view(torch.int16))
        assert torch.equal(m.o.weight, ref["model.layers.1.self_attn.o_proj.weight"])
    with torch.device("meta"):
        m = FusedQkv()
    # A Composite of another dtype, of another shape, or something else: refused before anything is made.
    bf16 = layerinit.plan("llama-tiny", dtype="bf16").composite(qkv)
    with pytest.raises(ValueError, match=r"parameter qkv.weight is fp32, its layerinit.Composite bf16"):
        lt.init_(m, spec="llama-tiny", name_map={"qkv.weight": bf16, "o.weight": None})
    with pytest.raises(ValueError, match=r"parameter qkv.weight of shape \(128, 64\): layerinit's "
                                         r"model.layers.1.self_attn.q_proj.weight is \[64, 64\]"):
        lt.init_(m, spec="llama-tiny", name_map={"qkv.weight": lambda p: p.composite(qkv[0]), "o.weight": None})
    with pytest.raises(ValueError, match=r"name_map\['qkv.weight'\] must be a canonical name, a layerinit.Composite"):
        lt.init_(m, spec="llama-tiny", name_map={"qkv.weight": 3, "o.weight": None})
    assert m.qkv.weight.is_meta


def test_plain_module_gets_its_roles():
    with torch.device("meta"):
        m = torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 16))
    lt.init_(m, recipe="pytorch-default", seed=2)
    bound = 1 / 32 ** 0.5
    w, b = m[2].weight, m[2].bias
    assert 0 < float(w.detach().abs().max()) <= bound and 0 < float(b.detach().abs().max()) <= bound
    assert torch.all(m[1].weight == 1) and torch.all(m[1].bias == 0)
    assert 0.9 < float(m[0].weight.detach().std()) < 1.1  # nn.Embedding: normal(0, 1)
    again = torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 16))
    lt.init_(again, recipe="pytorch-default", seed=2)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), again.parameters()))


def test_errors():
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config("llama-tiny"))
    with pytest.raises(ValueError, match="no layerinit tensor for 1 parameter"):
        lt.init_(model, name_map={"model.norm.weight": "model.final_norm.weight"})
    with pytest.raises(ValueError, match=r"parameter model.layers.0.mlp.up_proj.weight of shape \(176, 64\): "
                                         r"layerinit's transformer.wte.weight is \[512, 64\]"):
        lt.init_(model, spec="gpt2-tiny", name_map=lambda n: "transformer.wte.weight"
                 if n == "model.layers.0.mlp.up_proj.weight" else None)
    with pytest.raises(ValueError, match="recipe 'nope' is unknown"):
        lt.init_(model, recipe="nope")
    # A CUDA device torch does not have (no GPU here; on a GPU run, one past the node's): named, and
    # refused before to_empty would put the model there.
    missing = f"cuda:{torch.cuda.device_count()}"
    want = "torch sees no CUDA device" if torch.cuda.device_count() == 0 else "torch sees"
    with pytest.raises(ValueError, match=f"device '{missing}': {want}"):
        lt.init_(model, device=missing)
    assert all(p.is_meta for p in model.parameters())  # refused before materializing
    with pytest.raises(ValueError, match="no layerinit spec for Hugging Face model_type 'bert'"):
        lt.hf_spec(transformers.BertConfig())


class TitanStyleBlock(torch.nn.Module):
    def __init__(self, extra=None):
        super().__init__()
        self.attention = torch.nn.ModuleDict({w: torch.nn.Linear(32, 32, bias=False) for w in ("wq", "wk", "wv", "wo")})
        self.feed_forward = torch.nn.ModuleDict({"w1": torch.nn.Linear(32, 48, bias=False),
                                                 "w2": torch.nn.Linear(48, 32, bias=False),
                                                 "w3": torch.nn.Linear(32, 48, bias=False)})
        if extra:
            self.feed_forward[extra] = torch.nn.Linear(32, 32, bias=False)
        self.attention_norm = torch.nn.RMSNorm(32)


class TitanStyle(torch.nn.Module):
    """torchtitan's layout: layers in an nn.ModuleDict keyed "0".."3", the head named `output`."""

    def __init__(self, extra=None):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(100, 32)
        self.layers = torch.nn.ModuleDict({str(i): TitanStyleBlock(extra) for i in range(4)})
        self.norm = torch.nn.RMSNorm(32)
        self.output = torch.nn.Linear(32, 100, bias=False)


def test_module_spec_finds_layers_in_a_module_dict_and_roles_by_name():
    """torchtitan keeps its layers in an nn.ModuleDict: module_spec found no depth there and gave the
    head and the output projections the input rule (wo at 0.02 / sqrt(2) in every layer, the head
    at 0.02)."""
    with torch.device("meta"):
        m = TitanStyle()
    spec = lt.module_spec(m)
    assert (spec["layer"]["prefix"], spec["layer"].get("first", 0), spec["layer"]["count"]) == ("layers.", 0, 4)
    assert [t["name"] for t in spec["pre"]] == ["tok_embeddings.weight"]
    assert [(t["name"], t["role"]) for t in spec["post"]] == [("norm.weight", "norm_weight"), ("output.weight", "head_weight")]
    roles = {t["name"]: t["role"] for t in spec["layer"]["tensors"]}
    assert roles["attention.wo.weight"] == roles["feed_forward.w2.weight"] == "output_weight"
    assert roles["feed_forward.w3.weight"] == roles["attention.wq.weight"] == "linear_weight"
    p = layerinit.plan(spec, recipe="torchtitan", dtype="fp32")
    for i in (0, 3):
        depth = layerinit.Fill.parse(f"trunc_normal(0, {0.02 / math.sqrt(2 * (i + 1))!r}, -2, 2)")
        for w in ("attention.wo", "feed_forward.w2", "feed_forward.w3"):
            assert p.fill_of(f"layers.{i}.{w}.weight") == depth, (i, w)
        assert p.fill_of(f"layers.{i}.attention.wq.weight") == layerinit.Fill.parse("trunc_normal(0, 0.02, -2, 2)")
    assert p.fill_of("output.weight") == layerinit.Fill.parse(f"trunc_normal_std(0, {1 / math.sqrt(32)!r}, -3, 3)")
    lt.init_(m, recipe="torchtitan", seed=4)
    ref = layerinit.build(spec, recipe="torchtitan", seed=4, dtype="fp32")
    for name, prm in m.named_parameters():
        assert same(prm.detach(), torch.from_dlpack(ref[name])), name


def test_a_role_the_recipe_needs_and_the_names_do_not_tell_is_refused():
    with torch.device("meta"):
        m = TitanStyle(extra="proj")
    with pytest.raises(ValueError, match=r"recipe 'torchtitan' cannot tell the fill of 4 parameter\(s\): linear maps whose "
                                         r"names do not say input, output projection, head or router: "
                                         r"layers.0.feed_forward.proj.weight, layers.1.feed_forward.proj.weight"):
        lt.init_(m, recipe="torchtitan")
    assert all(p.is_meta for p in m.parameters())
    lt.init_(m, recipe="pytorch-default")  # every linear map the same rule: no role needed
    assert not any(p.is_meta for p in m.parameters())


def test_each_way_the_refusal_names_works():
    """Issue 39: the refusal said "tell it per name with a role or a fill (layerinit.jax: rules=;
    layerinit.torch: overrides= or spec=)", and a role given with overrides= failed with "fill
    'output_weight' cannot be parsed". Each way it names now works, and a role in overrides= says
    where a role goes."""
    with torch.device("meta"):
        m = TitanStyle(extra="proj")
    with pytest.raises(ValueError) as refusal:
        lt.init_(m, recipe="torchtitan")
    assert ("; tell it per name: a fill (layerinit.torch: overrides=, a name glob -> fill such as normal(0, 0.02); "
            "layerinit.jax: rules=, which also take a role), or a role in a spec (layerinit.torch: spec=, "
            "module_spec(module) with each tensor's \"role\" set), or name the maps") in str(refusal.value)
    # A fill per name.
    lt.init_(m, recipe="torchtitan", seed=2, overrides={"*.proj.weight": "normal(0, 0.01)"})
    proj = torch.cat([m.layers[str(i)].feed_forward.proj.weight.detach().flatten() for i in range(4)])
    assert abs(float(proj.std()) / 0.01 - 1) < 0.05  # 4096 values: the std's standard error is 1.1%
    # A role in the spec module_spec gives: proj an output projection, with wo's depth-scaled fill.
    spec = lt.module_spec(m)
    for t in spec["layer"]["tensors"]:
        if t["name"] == "feed_forward.proj.weight":
            t["role"] = "output_weight"
    lt.init_(m, recipe="torchtitan", seed=2, spec=spec)
    plan = layerinit.plan(spec, recipe="torchtitan", dtype="fp32")
    ref = layerinit.build(spec, recipe="torchtitan", seed=2, dtype="fp32")
    for i in range(4):
        name = f"layers.{i}.feed_forward.proj.weight"
        assert plan.fill_of(name) == plan.fill_of(f"layers.{i}.attention.wo.weight"), i
        assert same(m.get_parameter(name).detach(), torch.from_dlpack(ref[name])), name
    # A role given as an override.
    with pytest.raises(ValueError, match=r"^overrides\['\*.proj.weight'\]: fill 'output_weight' is a role, and an "
                                         r"override is a fill \(e.g. normal\(0,0.02\)\); a role is given in a spec "
                                         r"\(docs/spec.md: \"role\"; layerinit.torch: spec=\) or layerinit.jax's rules=$"):
        lt.init_(m, recipe="torchtitan", overrides={"*.proj.weight": "output_weight"})


def test_a_layer_the_recipe_needs_and_the_names_do_not_tell_is_refused():
    with torch.device("meta"):
        m = TitanStyle()
        m.extra = torch.nn.ModuleList([torch.nn.ModuleDict({"wo": torch.nn.Linear(32, 32, bias=False)})])
    with pytest.raises(ValueError, match=r"recipe 'torchtitan' cannot tell the fill of 1 parameter\(s\): numbered outside "
                                         r"the model's layers \(layers.\), so their layer is unknown: extra.0.wo.weight"):
        lt.init_(m, recipe="torchtitan")
    lt.init_(m, recipe="hf")


def test_a_parameter_no_rule_covers_is_refused_listing_them():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.gain = torch.nn.Parameter(torch.ones(4))
            self.shift = torch.nn.Parameter(torch.zeros(4))

    m = Scaled()
    with pytest.raises(ValueError, match=r"recipe 'hf' cannot tell the fill of 2 parameter\(s\): no rule for: "
                                         r"gain \(role other\), shift \(role other\); tell it per name"):
        lt.init_(m, recipe="hf")
    lt.init_(m, recipe="hf", overrides={"gain": "constant(2)", "shift": "constant(3)"})
    assert torch.all(m.gain == 2) and torch.all(m.shift == 3)
    # Under the module's own init its constructor alone sets them: no init code writes them.
    with pytest.raises(ValueError, match=r"gives 2 parameter\(s\) values no fill says: gain: never written by its "
                                         r"init code; shift: never written by its init code\. .* layerinit.torch.make"):
        lt.init_(m)
    assert torch.all(m.gain == 2) and torch.all(m.shift == 3)  # refused before anything was written
    made = lt.make(Scaled, seed=1)
    assert torch.all(made.gain == 1) and torch.all(made.shift == 0)


def test_dtypes_are_checked_before_anything_is_written():
    """Issue 19 item 6: an int32 parameter was refused after m[0].weight had been overwritten; a
    float64 layer on the meta device after to_empty, leaving the module half filled."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    m[1].weight = torch.nn.Parameter(torch.zeros(4, 4, dtype=torch.int32), requires_grad=False)
    before = m[0].weight.detach().clone()
    with pytest.raises(ValueError, match=r"1 parameter\(s\) of a dtype layerinit does not fill \(float32, float16, "
                                         r"bfloat16\): 1.weight \(torch.int32\)"):
        lt.init_(m, recipe="pytorch-default")
    assert torch.equal(m[0].weight, before)
    with torch.device("meta"):
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4).double())
    with pytest.raises(ValueError, match=r"1.weight \(torch.float64\), 1.bias \(torch.float64\)"):
        lt.init_(m, recipe="pytorch-default")
    assert all(p.is_meta for p in m.parameters())


def test_scalars_are_named_and_can_be_skipped():
    """Issue 19 item 8: a 0-d parameter raised "spec: pre[0].shape: ..." naming no parameter, and
    name_map={"scale": None} could not skip it; a module without parameters raised."""
    m = torch.nn.Module()
    m.lin = torch.nn.Linear(4, 4)
    m.scale = torch.nn.Parameter(torch.tensor(7.0))
    with pytest.raises(ValueError, match=r"1 parameter\(s\) are 0-d \(scalars\), which layerinit does not fill: scale; "
                                         r"skip them with name_map=\{'scale': None\}"):
        lt.init_(m, recipe="pytorch-default")
    assert lt.init_(m, recipe="pytorch-default", name_map={"scale": None}) is m
    assert float(m.scale.detach()) == 7.0 and float(m.lin.weight.detach().abs().max()) <= 0.5
    empty = torch.nn.ReLU()
    assert lt.init_(empty) is empty


def test_buffers_no_code_computes_are_named():
    class WithBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("table", torch.arange(4.0))

    with torch.device("meta"):
        m = WithBuffer()
    with pytest.warns(UserWarning, match=r"buffers left uninitialized after to_empty .*\['table'\]"):
        lt.init_(m, recipe="pytorch-default")


def test_a_second_init_with_an_override_differing_past_six_digits_prepares_again():
    """init_ keeps a module's plans while its arguments are the same: a Fill override was keyed by its
    6-digit text, so a second fill that differs past those digits reused the first's composites."""
    import numpy as np

    a, b = layerinit.Fill.parse("normal(0, 0.12345678)"), layerinit.Fill.parse("normal(0, 0.12345679)")
    assert str(a) == str(b) and a != b
    m = torch.nn.Linear(8, 8)
    lt.init_(m, recipe="pytorch-default", overrides={"weight": a})
    lt.init_(m, recipe="pytorch-default", overrides={"weight": b})
    want = layerinit.fill_(np.empty((8, 8), np.float32), "weight", b, seed=0)
    assert np.array_equal(m.weight.detach().numpy(), want)


# ---- Hostile use: every parameter checked before anything is written ----


def two_linears(device=None):
    with torch.device(device or "cpu"):
        return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))


@pytest.mark.parametrize("layout, why", [
    (lambda: torch.zeros(4, 4).t(), r"1.weight is not contiguous in its last dimension \(strides \(1, 4\)\)"),
    (lambda: torch.zeros(1, 4).expand(4, 4), r"1.weight is expanded \(strides \(0, 1\)\): its elements share memory"),
    (lambda: torch.zeros(8).as_strided((4, 4), (1, 1)), r"1.weight overlaps itself \(strides \(1, 1\) of shape \(4, 4\)\)"),
], ids=["transposed", "expanded", "overlapping"])
def test_a_later_parameter_of_a_layout_not_filled_in_place_is_refused_before_anything_is_written(layout, why):
    """An expanded parameter was filled (its rows overwriting each other) and a transposed one refused
    by the library without its name; the check now names it before 0.weight is touched."""
    m = two_linears()
    m[1].weight = torch.nn.Parameter(layout())
    before = m[0].weight.detach().clone()
    with pytest.raises(ValueError, match=r"^1 parameter\(s\) layerinit cannot fill in place: " + why):
        lt.init_(m, recipe="pytorch-default")
    assert same(m[0].weight.detach(), before)


@pytest.fixture
def one_rank_mesh():
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.device_mesh import DeviceMesh

    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield DeviceMesh("cpu", [0])
    finally:
        dist.destroy_process_group()


def test_a_partial_dtensor_is_refused_before_the_module_is_materialized(one_rank_mesh):
    """A Partial DTensor on the meta device was refused after to_empty had given every parameter
    new, uninitialized memory."""
    from torch.distributed.tensor import DTensor, Partial

    m = two_linears("meta")
    m[1].weight = torch.nn.Parameter(DTensor.from_local(torch.zeros(4, 4, device="meta"), one_rank_mesh, [Partial()]))
    with pytest.raises(ValueError, match=r"^1 parameter\(s\) layerinit cannot fill in place: 1.weight: DTensor placement "
                                         r"P\(sum\) is not filled in place \(Shard and Replicate are\)$"):
        lt.init_(m, recipe="pytorch-default")
    assert all(p.is_meta for p in m.parameters())


def test_a_deepspeed_zero3_partition_is_refused_and_a_gathered_parameter_filled():
    """DeepSpeed ZeRO-3 keeps a rank's partition in ds_tensor and leaves the parameter's data empty
    (deepspeed/runtime/zero/partition_parameters.py: free_param, _convert_to_deepspeed_param's ds_id
    and ds_shape; DeepSpeed is not installed here, so the parameter is made as it leaves it): init_
    refuses it, naming it, rather than filling nothing; gathered (its data of ds_shape), it is filled."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    for p in m.parameters():
        p.ds_id, p.ds_shape = id(p), list(p.shape)
    gathered = [p.detach().clone() for p in m.parameters()]
    m[1].weight.data = torch.empty(0)  # partitioned: this rank's elements are in ds_tensor
    with pytest.raises(ValueError, match=r"^1 parameter\(s\) are DeepSpeed ZeRO-3 partitions \(ds_id\): 1.weight \(0,\) "
                                         r"of \(4,\); call init_ inside deepspeed.zero.GatheredParameters"):
        lt.init_(m, recipe="pytorch-default")
    assert torch.equal(m[0].weight, gathered[0])
    m[1].weight.data = torch.zeros(4)  # gathered
    lt.init_(m, recipe="pytorch-default")
    assert torch.all(m[1].weight == 1) and not torch.equal(m[0].weight, gathered[0])


def test_parameters_sharing_memory_with_different_values_are_refused_naming_both():
    """Two Parameters over one storage held one tensor's values; a tie (one Parameter) is filled once."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False))
    storage = torch.zeros(4, 8)
    m[0].weight = torch.nn.Parameter(storage[:, :4])
    m[1].weight = torch.nn.Parameter(storage[:, 2:6])  # columns 2, 3 are 0.weight's too
    with pytest.raises(ValueError, match=r"^parameters 0.weight and 1.weight share memory but hold different tensors"):
        lt.init_(m, recipe="pytorch-default")
    assert torch.all(storage == 0)
    m[1].weight = torch.nn.Parameter(torch.zeros(4, 8)[:, 4:])
    lt.init_(m, recipe="pytorch-default")  # a storage of its own
    m[1].weight = m[0].weight  # tied: one Parameter, filled once
    lt.init_(m, recipe="pytorch-default")
    assert m[1].weight is m[0].weight


def test_rows_of_one_storage_apart_are_filled():
    """Parameters made from disjoint rows of one tensor hold different tensors without overlapping."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False))
    storage = torch.zeros(8, 4)
    m[0].weight, m[1].weight = torch.nn.Parameter(storage[:4]), torch.nn.Parameter(storage[4:])
    lt.init_(m, recipe="pytorch-default", seed=3)
    ref = two_linears()
    lt.init_(ref, recipe="pytorch-default", seed=3)
    assert same(storage[:4], ref[0].weight.detach()) and same(storage[4:], ref[1].weight.detach())


def test_meta_memory_init_leaves_unfilled_is_reset_or_named():
    """BatchNorm's running statistics on the meta device were left as to_empty's garbage
    (num_batches_tracked 1.4e14) with a warning; a parameter skipped with name_map None held
    uninitialized memory without a word."""
    with torch.device("meta"):
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left uninitialized: no warning
        lt.init_(m, recipe="pytorch-default")
    fresh = torch.nn.BatchNorm1d(4)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(getattr(m[1], name), getattr(fresh, name)), name
    m = two_linears("meta")
    with pytest.warns(UserWarning, match=r"^parameters skipped with name_map \(None\) hold uninitialized memory after "
                                         r"to_empty: \['1.bias', '1.weight'\]; set them yourself$"):
        lt.init_(m, recipe="pytorch-default", name_map={"1.weight": None, "1.bias": None})
    m = two_linears("meta")
    with pytest.warns(UserWarning, match=r"\['0.bias', '0.weight', '1.bias', '1.weight'\]"):  # nothing left to fill
        lt.init_(m, recipe="pytorch-default", name_map=lambda n: None)


def test_an_integer_parameter_no_rule_covers_gets_the_dtype_message():
    """An int32 parameter the module does not describe (role other) was refused with "no rule for"."""
    class WithTable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.table = torch.nn.Parameter(torch.zeros(4, dtype=torch.int32), requires_grad=False)

    with pytest.raises(ValueError, match=r"^1 parameter\(s\) of a dtype layerinit does not fill \(float32, float16, "
                                         r"bfloat16\): table \(torch.int32\); skip them with name_map= \(None\)$"):
        lt.init_(WithTable())
