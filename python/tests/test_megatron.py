"""layerinit.torch.init_ on Megatron-core's own GPTModel (local layer spec, CPU initialization, gloo), no
spec and no map, recipe megatron (issue 39): every parameter gets the fill Megatron-core's config gives
it, agrees in distribution with Megatron-core's own construction-time init, and at tensor parallelism 2
each rank's shard is bitwise the slice of the tensor parallelism 1 model that Megatron's
_initialize_affine_weight_cpu gives that rank (partition_stride 2 of a gated linear unit's linear_fc1
included), with and without Megatron's tensor_model_parallel attributes and from the meta device. A
pipeline stage, an expert-parallel rank's experts and a config the recipe is not are refused, and the
advice each refusal gives works. python/tests/megatron_worker.py runs the ranks."""
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (scripts/python-test-env installs "
                                            "megatron-core==0.16.1 where the interpreter has a release of it)")

import layerinit  # noqa: E402
from test_distributed import run_ranks  # noqa: E402

WORKER = Path(__file__).with_name("megatron_worker.py")
SEEDS = "0-7"  # 8 models a side: 16,384 values in the smallest random tensor (the position embedding)
TP2_SEED = 3


def run(tmp, world, cases):
    """{case: rank -> what megatron_worker.py saved} of `cases` run on `world` gloo ranks."""
    outs = run_ranks([str(tmp), *cases], world, worker=WORKER)
    for rank, (code, out) in enumerate(outs):
        assert code == 0, f"rank {rank} of {world}: exit {code}:\n{out[-4000:]}"
    return {c: [torch.load(tmp / f"{c.replace(':', '_')}.rank-{r}.pt", weights_only=False) for r in range(world)]
            for c in cases}


@pytest.fixture(scope="module")
def tp1(tmp_path_factory):
    cases = [f"{kind}:{how}:{SEEDS}" for kind in ("gpt", "swiglu") for how in ("own", "ours")]
    cases += [f"{kind}:{how}:{TP2_SEED}" for kind in ("gpt", "swiglu") for how in ("made", "default")]
    got = run(tmp_path_factory.mktemp("megatron-tp1"), 1, cases)
    return {tuple(c.split(":")[:2]): v[0] for c, v in got.items()}


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    cases = [f"{kind}:{how}:{TP2_SEED}" for kind in ("gpt", "swiglu") for how in ("ours", "bare", "meta", "made")]
    got = run(tmp_path_factory.mktemp("megatron-tp2"), 2, cases + ["refusals"])
    return {tuple(c.split(":")[:2]) if c != "refusals" else c: v for c, v in got.items()}


def tensors(snapshot):
    return {n: t for n, t in snapshot.items() if isinstance(t, torch.Tensor)}


def bits(t):
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


# Megatron-core 0.16.1's fills for these models (transformer_config.py __post_init__: init_method
# normal(0, init_method_std), output_layer_init_method normal(0, init_method_std / sqrt(2 * num_layers))
# = normal(0, 0.02 / 2), embedding_init_method init_method; attention.py and mlp.py give linear_proj and
# linear_fc2 the output method; layers.py zeros every bias; LayerNorm and RMSNorm weights ones).
def megatron_fill(name):
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return "normal(0, 0.01)"
    if "layernorm" in name:
        return "constant(1)" if name.endswith("weight") else "constant(0)"
    if name.endswith(".bias"):
        return "constant(0)"
    return "normal(0, 0.02)"


@pytest.mark.parametrize("kind", ["gpt", "swiglu"])
def test_every_parameter_gets_megatrons_fill(kind, tp1):
    ours = tp1[(kind, "ours")][0]
    spec = ours["spec"]
    assert spec["hyper"]["initializer_range"] == 0.02 and spec["hyper"]["tie_word_embeddings"] == (kind == "swiglu")
    p = layerinit.plan(spec, recipe="megatron", dtype="fp32")
    names = list(tensors(ours))
    assert len(names) == (29 if kind == "gpt" else 14), names
    for name in names:
        assert p.fill_of(name) == layerinit.Fill.parse(megatron_fill(name)), (name, str(p.fill_of(name)))


def test_the_shared_embedding_stays_one_tensor(tp1):
    """share_embeddings_and_output_weights: the output layer has no weight of its own (gpt_model.py,
    skip_weight_param_allocation), the embedding is one Parameter, filled once."""
    ours = tp1[("swiglu", "ours")][0]
    assert not ours["output_layer_has_weight"] and ours["ties"] == ["embedding.word_embeddings.weight"]
    assert [t["name"] for t in ours["spec"]["pre"]] == ["embedding.word_embeddings.weight"]
    assert tp1[("gpt", "ours")][0]["output_layer_has_weight"]


# Per random tensor, its values over 8 seeds a side against Megatron-core's own over 8 torch seeds:
# means within z standard errors, log std ratio within z of its standard error (sqrt(1/(2(n-1)) +
# 1/(2(m-1))) for normal values), and a two-sample KS test, each at a false-alarm rate of 1e-4
# (z = 3.891, c = sqrt(-ln(1e-4 / 2) / 2) = 2.302: D > c sqrt((n + m) / (n m))); fixed seeds. Constants
# equal exactly, seed by seed.
Z = 3.891
C = math.sqrt(-math.log(1e-4 / 2) / 2)


def statistics(x, y):
    """(mean z, std z, KS D / its critical value) of samples x (ours) and y (theirs)."""
    n, m = len(x), len(y)
    mean_z = abs(float(x.mean() - y.mean())) / math.sqrt(float(x.var()) / n + float(y.var()) / m)
    std_z = abs(math.log(float(x.std() / y.std()))) / math.sqrt(1 / (2 * (n - 1)) + 1 / (2 * (m - 1)))
    xs, ys = torch.sort(x).values, torch.sort(y).values
    grid = torch.cat([xs, ys])
    d = torch.searchsorted(xs, grid, right=True) / n - torch.searchsorted(ys, grid, right=True) / m
    return mean_z, std_z, float(d.abs().max()) / (C * math.sqrt((n + m) / (n * m)))


def samples(runs, name, scale=1.0):
    return torch.cat([r[name].double().flatten() * scale for r in runs.values()])


@pytest.mark.parametrize("kind", ["gpt", "swiglu"])
def test_same_distribution_as_megatrons_own_init(kind, tp1):
    ours, theirs = tp1[(kind, "ours")], tp1[(kind, "own")]
    random, worst = 0, [0.0, 0.0, 0.0]
    for name in tensors(theirs[0]):
        y = samples(theirs, name)
        if all(torch.all(r[name] == r[name].flatten()[0]) for r in theirs.values()):  # a constant: exact
            for s in theirs:
                assert torch.equal(bits(ours[s][name]), bits(theirs[s][name])), (name, s)
            continue
        random += 1
        stats = statistics(samples(ours, name), y)
        assert stats[0] <= Z and stats[1] <= Z and stats[2] <= 1, (name, stats)
        worst = [max(w, v) for w, v in zip(worst, stats)]
        # The control: the same values 10% wider are caught by the std test.
        assert statistics(samples(ours, name, 1.1), y)[1] > Z, name
    assert random == (11 if kind == "gpt" else 9)
    print(f"{kind}: {random} random tensors, worst mean z {worst[0]:.2f}, std z {worst[1]:.2f}, KS D / critical "
          f"{worst[2]:.2f} (bounds {Z}, {Z}, 1)")


@pytest.mark.parametrize("kind", ["gpt", "swiglu"])
def test_megatrons_own_init_recorded_is_its_config_bitwise(kind, tp1):
    """make(lambda: GPTModel(...)) records Megatron-core's construction (init_method on each master
    weight, output_layer_init_method on linear_proj and linear_fc2, the embeddings re-drawn, norms and
    biases) and fills what it read: every parameter equals recipe megatron's, which reads the config,
    bitwise; so does init_ with no recipe of a model Megatron-core already built. Ties are kept."""
    want = tensors(tp1[(kind, "ours")][TP2_SEED])
    for how in ("made", "default"):
        got = tp1[(kind, how)][TP2_SEED]
        assert tensors(got).keys() == want.keys(), how
        for name, t in want.items():
            assert torch.equal(bits(got[name]), bits(t)), (how, name)
        assert got["ties"] == tp1[(kind, "ours")][TP2_SEED]["ties"], how


@pytest.mark.parametrize("how", ["ours", "bare", "meta", "made"])
@pytest.mark.parametrize("kind", ["gpt", "swiglu"])
def test_tensor_parallel_shards_are_slices_of_the_whole(kind, how, tp1, tp2):
    """At tp 2, rank r holds chunks r, r + 2, ... of the tp 1 tensor cut into 2 * partition_stride
    chunks along partition_dim (_initialize_affine_weight_cpu), bitwise: ours (built with
    perform_initialization, so with tensor_model_parallel attributes), bare (without: the split read
    from the module), meta (to_empty, then the attributes put back) and made (Megatron's own init of
    this rank's slice recorded by make())."""
    whole = tp1[(kind, "ours")][TP2_SEED]
    ranks = [r[TP2_SEED] for r in tp2[(kind, how)]]
    split = 0
    for name, full in tensors(whole).items():
        shards = [r[name] for r in ranks]
        assert all(s.dtype == full.dtype for s in shards), name
        if shards[0].shape == full.shape:  # replicated: norms, row-parallel biases, position embeddings
            assert all(torch.equal(bits(s), bits(full)) for s in shards), name
            continue
        dim = next(d for d in range(full.dim()) if shards[0].shape[d] != full.shape[d])
        stride = 2 if kind == "swiglu" and name.endswith("linear_fc1.weight") else 1
        chunks = torch.chunk(full, 2 * stride, dim=dim)
        for r, s in enumerate(shards):
            assert torch.equal(bits(s), bits(torch.cat(chunks[r::2], dim=dim))), (name, r)
        if not torch.all(full == 0):
            assert not torch.equal(shards[0], shards[1]), name  # issue 39: both ranks held the same units
            split += 1
        if how in ("ours", "made") or name.endswith(".bias"):  # Megatron marks a weight only when it initializes it
            assert ranks[0]["attrs"][name] == {"tensor_model_parallel": True, "partition_dim": dim,
                                               "partition_stride": stride}, name
    assert split == (10 if kind == "gpt" else 9)  # the embedding, the output layer, 4 maps a layer


def test_a_pipeline_stage_is_refused_and_its_advice_works(tp2):
    for rank, out in enumerate(tp2["refusals"]):
        assert out["pp"].startswith(f"Megatron-core's decoder holds 1 of its config's 2 layers (a pipeline stage: "
                                    f"layer_number - 1 = {rank}) and names them from 0;"), out["pp"]
        assert "pass spec= (module_spec of the model at pipeline parallelism 1) and name_map=" in out["pp"]
        assert out["pp_advice"] == [], out["pp_advice"]  # each stage then holds the whole model's layers
    assert ("decoder.layers.0.mlp.linear_fc1.weight", "decoder.layers.1.mlp.linear_fc1.weight") in \
        tp2["refusals"][1]["pp_names"]


def test_an_expert_parallel_ranks_experts_are_refused_and_the_advice_works(tp2):
    for out in tp2["refusals"]:
        assert out["ep"].startswith("16 parameter(s) are experts only this expert-parallel rank holds "
                                    "(Megatron-core's allreduce=False), named by their index among this rank's "
                                    "experts, not the model's: decoder.layers.0.mlp.experts.local_experts.0."), out["ep"]
        assert out["ep_advice"] == [], out["ep_advice"]
    assert ("decoder.layers.1.mlp.experts.local_experts.1.linear_fc2.weight",
            "decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight") in tp2["refusals"][1]["ep_names"]


def test_a_config_the_recipe_is_not_is_refused_and_its_overrides_work(tp2):
    """embedding_init_method_std=0.5: Megatron-core draws the embeddings with it, not with
    init_method_std; the refusal names them with the config's fill, and those overrides give it."""
    for out in tp2["refusals"]:
        assert out["embedding_std"].startswith(
            "recipe 'megatron' is Megatron-core's default init, and this model's TransformerConfig draws 2 "
            "parameter(s) otherwise: embedding.word_embeddings.weight (config.embedding_init_method: normal(0, 0.5); "
            "the recipe's normal(0, 0.02)), embedding.position_embeddings.weight"), out["embedding_std"]
        assert out["advice"] == {"embedding.word_embeddings.weight": "normal(0, 0.5)",
                                 "embedding.position_embeddings.weight": "normal(0, 0.5)"}
        # 64 x 64 values a rank: the std's standard error is 0.5 / sqrt(2 * 4096) = 0.0055.
        assert abs(out["advice_std"] - 0.5) < Z * 0.0056, out["advice_std"]
    # An init method of the config's own: named, not read, no fill suggested.
    own = tp2["refusals"][0]["own_init_method"]
    assert own.startswith("recipe 'megatron' is Megatron-core's default init, and this model's TransformerConfig "
                          "draws 7 parameter(s) otherwise: embedding.word_embeddings.weight (config.embedding_init_method: "
                          "<function xavier_uniform_"), own
    assert "decoder.layers.0.self_attention.linear_qkv.weight (config.init_method: <function xavier_uniform_" in own
    assert own.endswith("give them the config's fills with overrides= (a name glob -> fill)"), own
