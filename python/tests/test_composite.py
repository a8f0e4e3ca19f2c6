"""Composite parameters from Python: stacked leaves, fused QKV with torchtitan's RoPE rows, transformers 5's
fused experts; any piece of one equals the same piece of the tensors built whole."""
import json

import numpy as np
import pytest
import torch

import layerinit


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def built(model, **kw):
    return {k: torch.from_dlpack(v) for k, v in layerinit.build(model, **kw).items()}


def test_a_stacked_buffer_and_a_stacked_leaf_are_the_stacked_build():
    stacked = built("llama-tiny", layout="stacked", recipe="torchtitan", seed=2)
    plan = layerinit.plan("llama-tiny", recipe="torchtitan", seed=2)
    name = "model.layers.mlp.down_proj.weight"
    leaf = plan.composite(["model.layers.{0}.mlp.down_proj.weight"], stack=[4])
    assert leaf == layerinit.plan("llama-tiny", layout="stacked", recipe="torchtitan", seed=2).composite(name)
    assert leaf.shape == tuple(stacked[name].shape) == (4, 64, 176)
    assert leaf.dtype == "bf16" and leaf.stack == [(4, 0)]
    assert leaf.tensor_name(0, [3]) == "model.layers.3.mlp.down_proj.weight"
    assert len(leaf.parts[0]["fill"]) == 4  # depth-scaled: a fill per layer
    assert layerinit.Composite.parse(leaf.text) == leaf
    x = torch.empty(4, 64, 176, dtype=torch.bfloat16)
    layerinit.fill_(x, leaf, seed=2)
    assert torch.equal(bits(x), bits(stacked[name]))
    # A piece crossing layers, as a shard of the leaf: rows 1..2 of layers 1..3, columns 100..175.
    piece = torch.empty(3, 2, 76, dtype=torch.bfloat16)
    layerinit.fill_(piece, leaf, seed=2, offset=(1, 1, 100))
    assert torch.equal(bits(piece), bits(stacked[name][1:4, 1:3, 100:]))


def test_a_leaf_with_its_layer_axis_at_dimension_1():
    """Flax linen's nn.scan(..., variable_axes={"params": 1}) (MaxText's param_scan_axis=1): a kernel
    [E, L, M] whose [:, l, :] is layer l's leaf [E, M], made alone; any piece, across layers too."""
    plan = layerinit.plan("llama-tiny", recipe="torchtitan", dtype="fp32", seed=2)
    t = "model.layers.{0}.mlp.down_proj.weight"  # [64, 176], depth-scaled: a fill per layer
    scanned = plan._leaf(t, [4], [64, 4, 176], "fp32", dims=[1])
    assert scanned.shape == (64, 4, 176) and scanned.stack == [(4, 0)] and scanned.stack_dims == [1]
    assert json.loads(scanned.text)["stack"] == [{"size": 4, "first": 0, "dim": 1}]
    assert layerinit.Composite.parse(scanned.text) == scanned
    assert scanned.tensor_name(0, [3]) == "model.layers.3.mlp.down_proj.weight"
    # The leading layout: the same call without dims, its text with no "dim".
    leading = plan._leaf(t, [4], [4, 64, 176], "fp32")
    assert leading.stack_dims == [0] and "dim" not in leading.text
    assert plan._leaf(t, [4], [4, 64, 176], "fp32", dims=[0]) == leading
    x = torch.empty(64, 4, 176)
    layerinit.fill_(x, scanned, seed=2)
    built = layerinit.build("llama-tiny", recipe="torchtitan", dtype="fp32", seed=2)
    for layer in range(4):
        name = t.format(layer)
        alone = torch.empty(64, 176)
        layerinit.fill_(alone, plan._leaf(name, [], [64, 176], "fp32"), seed=2)
        assert torch.equal(bits(x[:, layer, :]), bits(alone)), layer
        assert torch.equal(bits(alone), bits(torch.from_dlpack(built[name])))
    assert not torch.equal(x[:, 0], x[:, 1])
    # Pieces cutting through the layer dimension, as shards of the leaf.
    for offset, shape in (((10, 1, 50), (30, 2, 100)), ((0, 3, 0), (64, 1, 176)), ((63, 0, 175), (1, 4, 1))):
        piece = torch.empty(*shape)
        layerinit.fill_(piece, scanned, seed=2, offset=offset)
        want = x[tuple(slice(o, o + n) for o, n in zip(offset, shape))]
        assert torch.equal(bits(piece), bits(want)), offset
    for dims, shape, want in (([0, 1], [64, 4, 176], "dims has 2 entries for 1 stack sizes"),
                              ([3], [64, 4, 176], "stack axis 0 at dimension 3 is outside the 3 dimensions"),
                              ([2], [64, 4, 176], r"its tensors make \[64, 176, 4\]"),
                              ([1], [4, 64, 176], r"its tensors make \[64, 4, 176\]")):
        with pytest.raises(ValueError, match=want):
            plan._leaf(t, [4], shape, "fp32", dims=dims)
    moe = layerinit.plan("mixtral-tiny", dtype="fp32")
    with pytest.raises(ValueError, match="stack axes 0 and 1 both at dimension 1"):
        moe._leaf("model.layers.{0}.block_sparse_moe.experts.{1}.w1.weight", [2, 4], [128, 2, 4, 80], "fp32", dims=[1, 1])


def test_a_strided_view_of_a_stacked_buffer():
    stacked = built("mixtral-tiny", layout="stacked", dtype="fp32", seed=1)
    name = "model.layers.block_sparse_moe.experts.w1.weight"  # [L, E, F, H]
    plan = layerinit.plan("mixtral-tiny", layout="stacked", dtype="fp32", seed=1)
    big = torch.zeros(2, 4, 128, 80)
    view = big[:, 1:3, 5:40, 3:67]  # strided: every dimension but the last
    plan.fill(name, view, (0, 1, 5, 0), allow_strided=True)
    assert torch.equal(view, stacked[name][:, 1:3, 5:40, :])
    assert torch.count_nonzero(big[:, :, :, :3]) == 0 and torch.count_nonzero(big[:, 0]) == 0


def test_tensors_and_whole_say_what_a_composite_holds():
    plan = layerinit.plan("llama-tiny")
    q = "model.layers.0.self_attn.q_proj.weight"
    assert plan.composite(q).whole and plan.composite(q).tensors() == [q]
    leaf = plan.composite(["model.layers.{0}.mlp.down_proj.weight"], stack=[4], first=[0])
    assert not leaf.whole
    assert leaf.tensors() == [f"model.layers.{l}.mlp.down_proj.weight" for l in range(4)]
    qkv = plan.composite([q, q.replace("q_proj", "k_proj")])
    assert not qkv.whole and qkv.tensors() == [q, q.replace("q_proj", "k_proj")]
    assert not plan.composite([q], rows=["rope_interleave(16)"]).whole
    assert not layerinit.plan("llama-tiny", orientation="in-out").composite(q).whole  # stored [in, out]


def test_fused_qkv_with_torchtitans_rope_rows():
    ref = built("llama-tiny", seed=8)
    plan = layerinit.plan("llama-tiny", seed=8)
    hd = 16  # hidden 64, 4 heads
    rope = f"rope_interleave({hd})"
    names = [f"model.layers.2.self_attn.{p}_proj.weight" for p in "qkv"]
    qkv = plan.composite(names, rows=[rope, rope, None])
    assert qkv.shape == (64 + 32 + 32, 64)

    def reverse_permute(w, heads):  # torchtitan's Llama3StateDictAdapter._reverse_permute
        return w.view(heads, 2, w.shape[0] // heads // 2, w.shape[1]).transpose(1, 2).reshape(w.shape)

    want = torch.cat([reverse_permute(ref[names[0]], 4), reverse_permute(ref[names[1]], 2), ref[names[2]]])
    x = torch.empty(128, 64, dtype=torch.bfloat16)
    layerinit.fill_(x, qkv, seed=8)
    assert torch.equal(bits(x), bits(want))
    # Column-parallel shards (rows split over 3 ranks, uneven) of it.
    for lo, hi in ((0, 43), (43, 86), (86, 128)):
        piece = torch.empty(hi - lo, 64, dtype=torch.bfloat16)
        layerinit.fill_(piece, qkv, seed=8, offset=(lo, 0))
        assert torch.equal(bits(piece), bits(want[lo:hi]))


def test_kv_grouped_qkv_is_groups_of_slabs():
    """torchtitan's FusedQKVLinear keeps, for each kv head, its q heads, its k head and its v head:
    groups=n_kv places slab g of q, k and v in turn."""
    ref = built("llama-tiny", seed=8)
    plan = layerinit.plan("llama-tiny", seed=8)
    hd, kv = 16, 2  # 4 heads of 16, 2 kv heads
    rope = f"rope_interleave({hd})"
    names = [f"model.layers.1.self_attn.{p}_proj.weight" for p in "qkv"]
    qkv = plan.composite(names, rows=[rope, rope, None], groups=kv)

    def reverse_permute(w, heads):
        return w.view(heads, 2, w.shape[0] // heads // 2, w.shape[1]).transpose(1, 2).reshape(w.shape)

    q, k, v = reverse_permute(ref[names[0]], 4), reverse_permute(ref[names[1]], 2), ref[names[2]]
    want = torch.cat([torch.cat([q.view(kv, -1, 64)[g], k.view(kv, -1, 64)[g], v.view(kv, -1, 64)[g]]) for g in range(kv)])
    x = torch.empty(128, 64, dtype=torch.bfloat16)
    layerinit.fill_(x, qkv, seed=8)
    assert torch.equal(bits(x), bits(want))
    assert len(qkv.parts) == 3 * kv and qkv.parts[1]["at"] == [32, 0] and qkv.parts[3]["from"] == [32, 0]
    # The parts are the text's, made from the library's document (no text parsed), a new list each time.
    assert qkv.parts == json.loads(qkv.text)["parts"] and "rows" in qkv.parts[0] and "rows" not in qkv.parts[2]
    qkv.parts.clear()
    assert len(qkv.parts) == 3 * kv
    assert plan.composite(names, rows=[rope, rope, None], groups=1) == plan.composite(names, rows=[rope, rope, None])
    with pytest.raises(ValueError, match="does not split into 3 groups"):
        plan.composite(names, groups=3)
    with pytest.raises(ValueError, match="groups must be in"):
        plan.composite(names, groups=0)


def test_transformers_5_fused_experts():
    ref = built("mixtral-tiny", dtype="fp32", seed=4)
    plan = layerinit.plan("mixtral-tiny", dtype="fp32", seed=4)
    gu = plan.fused_experts("model.layers.1.mlp.experts.gate_up_proj", (4, 256, 64))
    down = plan.fused_experts("model.layers.1.mlp.experts.down_proj", (4, 64, 128))
    assert plan.fused_experts("model.layers.1.mlp.gate_proj", (4, 256, 64)) is None
    e = "model.layers.1.block_sparse_moe.experts.{}.{}.weight"
    want = torch.stack([torch.cat([ref[e.format(i, "w1")], ref[e.format(i, "w3")]]) for i in range(4)])
    x = torch.empty(4, 256, 64)
    layerinit.fill_(x, gu, seed=4)
    assert torch.equal(x, want)
    y = torch.empty(4, 64, 128)
    layerinit.fill_(y, down, seed=4)
    assert torch.equal(y, torch.stack([ref[e.format(i, "w2")] for i in range(4)]))
    with pytest.raises(ValueError, match=r"make \[4, 256, 64\]"):
        plan.fused_experts("model.layers.1.mlp.experts.gate_up_proj", (4, 128, 64))


def test_text_form_and_its_errors():
    plan = layerinit.plan("llama-tiny", dtype="fp32")
    c = plan.composite("model.norm.weight")
    d = json.loads(c.text)
    assert d == {"layerinit_composite": 1, "dtype": "fp32", "shape": [64],
                 "parts": [{"name": "model.norm.weight", "shape": [64], "at": [0], "fill": "constant(1)"}]}
    assert repr(c) == "layerinit.Composite([64], fp32, 1 part)"
    d["layerinit_composite"] = 2
    for bad, want in ((json.dumps(d), "version 2"), ("{", "malformed JSON"), (5, "text must be a str")):
        with pytest.raises(ValueError, match=want) as e:
            layerinit.Composite.parse(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="is not in llama-tiny"):
        plan.composite(["model.layers.{0}.self_attn.q_proj.weight"], stack=[5])
    with pytest.raises(ValueError, match="row permutation 'swap' is unknown"):
        plan.composite(["model.norm.weight"], rows=["swap"])
    with pytest.raises(ValueError, match="rows has 2 entries for 1 names"):
        plan.composite(["model.norm.weight"], rows=[None, None])
    with pytest.raises(ValueError, match="the composite is fp32 but the array is bf16"):
        layerinit.fill_(torch.empty(64, dtype=torch.bfloat16), c)
    with pytest.raises(ValueError, match="fill, global_shape and transposed come from the Composite"):
        layerinit.fill_(torch.empty(64), c, "constant(1)")
    with pytest.raises(ValueError, match="lies outside"):
        layerinit.fill_(torch.empty(64), c, offset=(1,))


def test_fill_composites_fills_every_array_in_one_call_as_fill_composite_does():
    stacked = built("llama-tiny", layout="stacked", recipe="torchtitan", seed=2)
    plan = layerinit.plan("llama-tiny", recipe="torchtitan", seed=2)
    name = "model.layers.mlp.down_proj.weight"
    leaf = plan.composite(["model.layers.{0}.mlp.down_proj.weight"], stack=[4])
    embed = plan.composite("model.embed_tokens.weight")
    whole = torch.empty(4, 64, 176, dtype=torch.bfloat16)
    piece = torch.empty(3, 2, 76, dtype=torch.bfloat16)
    big = torch.zeros(300, 80, dtype=torch.bfloat16)
    view = big[10:20, 8:72]  # strided
    layerinit._core.fill_composites([whole, piece, view], [leaf, leaf, embed], 2, [[], [1, 1, 100], [4, 0]], True)
    assert torch.equal(bits(whole), bits(stacked[name]))
    assert torch.equal(bits(piece), bits(stacked[name][1:4, 1:3, 100:]))
    ref = torch.empty(10, 64, dtype=torch.bfloat16)
    layerinit.fill_(ref, embed, seed=2, offset=(4, 0))
    assert torch.equal(bits(view), bits(ref)) and torch.equal(bits(view), bits(stacked["model.embed_tokens.weight"][4:14]))
    assert torch.count_nonzero(big[:10]) == 0 and torch.count_nonzero(big[:, :8]) == 0
    layerinit._core.fill_composites([], [], 2, [])  # nothing to fill


def test_fill_composites_checks_every_array_before_writing():
    plan = layerinit.plan("llama-tiny", seed=2)
    embed = plan.composite("model.embed_tokens.weight")  # bf16, [256, 64]
    first = torch.zeros(256, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="the composite is bf16 but the array is fp32"):
        layerinit._core.fill_composites([first, torch.zeros(256, 64)], [embed, embed], 2, [[], []])
    with pytest.raises(ValueError, match="not contiguous"):
        layerinit._core.fill_composites([first, torch.zeros(256, 128, dtype=torch.bfloat16)[:, :64]], [embed, embed], 2,
                                        [[], []])
    assert torch.count_nonzero(first) == 0
    with pytest.raises(ValueError, match="arrays, composites and offsets are 2, 1 and 2: one each per array"):
        layerinit._core.fill_composites([first, first], [embed], 2, [[], []])
