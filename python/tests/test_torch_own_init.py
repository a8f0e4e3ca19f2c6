"""layerinit.torch.init_ without a recipe: the model's own init, read from its code (issue 39).

Each model's values are compared with the model's own init in PyTorch: constants exactly, random
tensors by a two-sample Kolmogorov-Smirnov test against the framework's own values, pooled over a few
seeds on both sides, at a false-alarm rate of ALPHA per test (Bonferroni over its tensors)."""
import math
import warnings

import pytest
import torch

scipy_stats = pytest.importorskip("scipy.stats")

import layerinit  # noqa: E402
import layerinit.torch as lt  # noqa: E402

ALPHA = 1e-4
SEEDS = (0, 1, 2)


def values(model, buffers=False):
    items = list(model.named_parameters()) + (list(model.named_buffers()) if buffers else [])
    return {n: t.detach().float().reshape(-1).clone() for n, t in items}


def pooled(make_model, seeds=SEEDS):
    """{name: values of every seed} of the models make_model(seed) returns."""
    out: dict = {}
    for s in seeds:
        for n, v in values(make_model(s)).items():
            out.setdefault(n, []).append(v)
    return {n: torch.cat(v) for n, v in out.items()}


def same_distribution(ours, theirs, alpha=ALPHA):
    """Failures as text: constants not equal, random tensors whose KS p-value is below alpha over the
    number of random tensors (Bonferroni)."""
    assert ours.keys() == theirs.keys(), set(ours) ^ set(theirs)
    randoms = [n for n in theirs if theirs[n].numel() > 1 and bool((theirs[n] != theirs[n][0]).any())]
    bad = []
    for n in theirs:
        if n not in randoms:
            if not torch.equal(ours[n], theirs[n]):
                bad.append(f"{n}: constant {theirs[n][:3].tolist()} vs ours {ours[n][:3].tolist()}")
            continue
        p = scipy_stats.ks_2samp(ours[n].numpy(), theirs[n].numpy()).pvalue
        if p < alpha / len(randoms):
            bad.append(f"{n}: KS p {p:.3g} (std {ours[n].std():.4g} vs {theirs[n].std():.4g})")
    return bad


# ---- torch.nn ----


class Zoo(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(300, 32, padding_idx=5)
        self.lin = torch.nn.Linear(32, 64)
        self.mha = torch.nn.MultiheadAttention(32, 4)
        self.conv1 = torch.nn.Conv1d(4, 8, 3)
        self.conv2 = torch.nn.Conv2d(3, 8, 3)
        self.lstm = torch.nn.LSTM(8, 16)
        self.gru = torch.nn.GRU(8, 16, bias=False)
        self.bn = torch.nn.BatchNorm1d(8)
        self.ln = torch.nn.LayerNorm(32)
        self.enc = torch.nn.TransformerEncoderLayer(32, 4, 64)


def torch_own(cls):
    def make(seed):
        torch.manual_seed(seed)
        return cls()
    return make


def ours_meta(cls, **kw):
    def make(seed):
        with torch.device("meta"):
            m = cls()
        return lt.init_(m, seed=seed, **kw)
    return make


def test_torch_nn_modules_get_pytorchs_own_init_with_no_arguments():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nn.TransformerEncoderLayer's nested-tensor note
        bad = same_distribution(pooled(ours_meta(Zoo)), pooled(torch_own(Zoo)))
        m = ours_meta(Zoo)(7)
    assert not bad, bad
    assert torch.all(m.emb.weight[5] == 0)  # nn.Embedding's padding row
    assert torch.all(m.mha.out_proj.bias == 0) and torch.all(m.mha.in_proj_bias == 0)  # _reset_parameters
    bound = 1 / math.sqrt(32)  # kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert m.lin.weight.abs().max() <= bound and m.lin.weight.abs().max() > 0.9 * bound
    # Buffers: BatchNorm's running statistics as a new module holds them.
    assert torch.all(m.bn.running_mean == 0) and torch.all(m.bn.running_var == 1) and m.bn.num_batches_tracked == 0


def test_the_comparison_can_fail():
    """The controls: a 10% wider normal, and a normal for a uniform, are both caught."""
    theirs = pooled(torch_own(Zoo))
    ours = {n: v.clone() for n, v in theirs.items()}
    g = torch.Generator().manual_seed(3)
    ours["emb.weight"] = torch.randn(ours["emb.weight"].shape, generator=g) * 1.1
    ours["lin.weight"] = torch.randn(ours["lin.weight"].shape, generator=g) * theirs["lin.weight"].std()
    bad = same_distribution(ours, theirs)
    assert [b.split(":")[0] for b in bad] == ["emb.weight", "lin.weight"], bad


def test_values_are_layerinits_and_repeat():
    a, b = ours_meta(Zoo)(3), ours_meta(Zoo)(3)
    for (n, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(x, y), n
    c = ours_meta(Zoo)(4)
    assert not torch.equal(a.lin.weight, c.lin.weight)


class Ortho(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.rnn = torch.nn.Linear(8, 8)
        self.scale = torch.nn.Parameter(torch.ones(8))  # its constructor alone sets it

    def reset_parameters(self):
        torch.nn.init.orthogonal_(self.rnn.weight)


def test_what_no_fill_says_is_refused_in_one_error_before_anything_is_written():
    m = Ortho()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    with pytest.raises(ValueError) as e:
        lt.init_(m)
    msg = str(e.value)
    assert "gives 2 parameter(s) values no fill says" in msg
    assert ("rnn.weight: nn.init.orthogonal_: a QR decomposition of a random matrix, whose elements depend on each "
            "other (test_torch_own_init.py:") in msg
    assert "scale: never written by its init code" in msg
    assert "\n" not in msg
    for n, p in m.named_parameters():
        assert torch.equal(p, before[n]), n
    # What would tell it: an override per name.
    lt.init_(m, overrides={"rnn.weight": "normal(0, 0.02)", "scale": "constant(1)"})
    assert torch.all(m.scale == 1)
    assert abs(float(m.rnn.weight.std()) - 0.02) < 0.01
    bound = 1 / math.sqrt(8)
    assert m.lin.weight.abs().max() <= bound  # Linear.reset_parameters still read


def test_an_override_glob_that_matches_nothing_warns_or_with_strict_is_an_error():
    m = torch.nn.Linear(4, 4)
    with pytest.warns(UserWarning, match=r"overrides pattern 'wieght' matches no tensor"):
        lt.init_(m, overrides={"wieght": "constant(0)"})
    with pytest.raises(ValueError, match=r"overrides pattern 'wieght' matches no tensor of 'Linear' \(strict=True\)"):
        lt.init_(m, overrides={"wieght": "constant(0)"}, strict=True)
    with pytest.warns(UserWarning, match=r"dtype_overrides pattern '\*nrom\*' matches no tensor"):
        layerinit.plan("llama-tiny", dtype_overrides={"*nrom*": "fp32"})
    with pytest.raises(ValueError, match=r"overrides pattern 'x' matches no tensor of 'llama-tiny'"):
        layerinit.build("llama-tiny", overrides={"x": "constant(0)"}, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layerinit.plan("llama-tiny", overrides={"*norm*": "constant(1)"})  # matches: no warning


class OldTruncNormal(torch.nn.Module):
    """A truncated normal written out as timm and torch < 1.x did: uniform, erfinv, mul, add, clamp."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.empty(256, 64))
        self.reset_parameters()

    def reset_parameters(self):
        mean, std, a, b = 0.0, 0.02, -0.04, 0.04
        cdf = lambda x: (1 + math.erf(x / math.sqrt(2))) / 2  # noqa: E731
        with torch.no_grad():
            self.w.uniform_(2 * cdf((a - mean) / std) - 1, 2 * cdf((b - mean) / std) - 1)
            self.w.erfinv_()
            self.w.mul_(std * math.sqrt(2.0))
            self.w.add_(mean)
            self.w.clamp_(min=a, max=b)


def test_torchs_old_trunc_normal_sequence_is_a_truncated_normal():
    bad = same_distribution(pooled(ours_meta(OldTruncNormal)), pooled(torch_own(OldTruncNormal)))
    assert not bad, bad
    m = ours_meta(OldTruncNormal)(1)
    assert m.w.abs().max() <= 0.04
    # The same module under torch's own trunc_normal_ gives the same fill.
    want = torch.nn.Module()
    want.w = torch.nn.Parameter(torch.empty(256, 64, device="meta"))
    want.reset_parameters = lambda: torch.nn.init.trunc_normal_(want.w, 0.0, 0.02, -0.04, 0.04)
    lt.init_(want, seed=1)
    assert torch.equal(want.w, m.w)


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 16)
        self.head = torch.nn.Linear(16, 64, bias=False)
        self.copy = torch.nn.Linear(16, 64, bias=False)
        self.head.weight = self.emb.weight

    def reset_parameters(self):
        with torch.no_grad():
            self.copy.weight.copy_(self.emb.weight)  # a tie made by copy_


def test_ties_kept_and_a_copy_holds_the_same_values():
    m = ours_meta(Tied)(2)
    assert m.head.weight is m.emb.weight
    assert torch.equal(m.copy.weight, m.emb.weight)
    # The head (a Linear, initialized after the embedding, children first) wins: the tied tensor is uniform.
    assert m.emb.weight.abs().max() <= 1 / math.sqrt(16)


class GPT(torch.nn.Module):
    """nanoGPT: its init runs in its constructor alone (apply(_init_weights), c_proj rescaled)."""

    def __init__(self, n_layer=2, d=32, vocab=128):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.h = torch.nn.ModuleList(torch.nn.ModuleDict({"c_fc": torch.nn.Linear(d, 4 * d), "c_proj": torch.nn.Linear(4 * d, d)})
                                     for _ in range(n_layer))
        self.ln_f = torch.nn.LayerNorm(d)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, m):
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.Embedding):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)


def test_make_records_the_constructor():
    bad = same_distribution(pooled(lambda s: lt.make(GPT, seed=s)), pooled(torch_own(GPT)))
    assert not bad, bad
    m = lt.make(GPT, seed=5)
    assert m.wte.weight is m.lm_head.weight and m.lm_head.weight.device.type == "cpu"
    spec = {t[0]: t for t in layerinit.plan(lt.module_spec(m, recipe="hf"), dtype="fp32").tensors()}
    assert "h.1.c_proj.weight" in spec
    with pytest.raises(ValueError, match="build must be a function"):
        lt.make(GPT())
    with pytest.raises(ValueError, match="build\\(\\) must return a torch.nn.Module"):
        lt.make(lambda: 3)


def test_wrapping_never_changes_a_value_and_verify_reads_the_wrapped_state_dict():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    def model(wrap):
        with torch.device("meta"):
            m = GPT(n_layer=3)
        if wrap:
            m.h[0] = checkpoint_wrapper(m.h[0])
            m.h[1] = torch.compile(m.h[1])
        return m

    plain, wrapped = lt.init_(model(False), seed=3), lt.init_(model(True), seed=3)
    names = {n: n.replace("_checkpoint_wrapped_module.", "").replace("_orig_mod.", "") for n, _ in wrapped.named_parameters()}
    assert any("_orig_mod" in n for n in names) and any("_checkpoint_wrapped_module" in n for n in names)
    got = {names[n]: p for n, p in wrapped.named_parameters()}
    for n, p in plain.named_parameters():
        assert torch.equal(got[n], p), n
    # The same model under a recipe, verified from the wrapped model's state_dict.
    lt.init_(wrapped, recipe="pytorch-default", seed=4)
    spec = lt.module_spec(plain, recipe="pytorch-default")
    report = layerinit.verify(wrapped.state_dict(), spec, recipe="pytorch-default", seed=4, dtype="fp32")
    assert report.ok, report


# ---- transformers: each family's own _init_weights ----

transformers = pytest.importorskip("transformers")
from hf_configs import config, families  # noqa: E402

T = transformers
# Families layerinit has no spec of, tiny: their tensors under their own names.
OTHER_FAMILIES = {
    "t5": lambda: (T.T5ForConditionalGeneration, T.T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                                            num_heads=4, decoder_start_token_id=0)),
    "bert": lambda: (T.BertForMaskedLM, T.BertConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                     intermediate_size=128, max_position_embeddings=64)),
    "vit": lambda: (T.ViTModel, T.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=128)),
    "whisper": lambda: (T.WhisperForConditionalGeneration, T.WhisperConfig(
        vocab_size=256, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32, max_target_positions=32,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=3)),
    "gpt_neox": lambda: (T.GPTNeoXForCausalLM, T.GPTNeoXConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                                               num_attention_heads=4, intermediate_size=128)),
    "starcoder2": lambda: (T.Starcoder2ForCausalLM, T.Starcoder2Config(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                                                       num_attention_heads=4, num_key_value_heads=2,
                                                                       intermediate_size=128, initializer_range=0.018)),
}


def hf_model(family):
    if family in OTHER_FAMILIES:
        cls, cfg = OTHER_FAMILIES[family]()
        return lambda: cls(cfg)
    return lambda: T.AutoModelForCausalLM.from_config(config(family))


@pytest.mark.parametrize("family", [*OTHER_FAMILIES, *families()])
def test_transformers_family_gets_its_own_init(family):
    """Every parameter has the distribution transformers' own init gives it (its _init_weights with the
    config's initializer_range and the family's factors; padding rows zero), T5's and BERT's among them."""
    make = hf_model(family)

    def theirs(seed):
        torch.manual_seed(seed)
        return make()

    def ours(seed):
        with torch.device("meta"):
            m = make()
        return lt.init_(m, seed=seed)

    bad = same_distribution(pooled(ours), pooled(theirs))
    assert not bad, bad
    m = ours(0)
    pad = getattr(m.config, "pad_token_id", None)
    emb = m.get_input_embeddings()
    if pad is not None and getattr(emb, "padding_idx", None) is not None:
        assert torch.all(emb.weight[pad] == 0) and emb.weight.abs().sum() > 0
    if family == "whisper":  # sinusoidal positions: computed by its code, not drawn
        assert torch.equal(m.model.encoder.embed_positions.weight, theirs(0).model.encoder.embed_positions.weight)


def test_t5s_init_is_its_own_not_the_generic_one():
    """The issue's numbers: T5's embedding is normal(0, factor 1.0), its q normal(0, (d_model d_kv)^-1/2)."""
    with torch.device("meta"):
        m = hf_model("t5")()
    lt.init_(m, seed=0)
    assert abs(float(m.shared.weight.std()) - 1.0) < 0.05
    q = m.encoder.block[0].layer[0].SelfAttention.q.weight
    assert abs(float(q.std()) / (64 * 16) ** -0.5 - 1) < 0.1


class FromNumpy(torch.nn.Module):
    """Random numbers drawn outside torch, and a table computed by torch without any."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.empty(8, 4))
        self.pos = torch.nn.Parameter(torch.empty(8, 4), requires_grad=False)

    def reset_parameters(self):
        import numpy as np

        with torch.no_grad():
            self.w.copy_(torch.from_numpy(np.random.default_rng(0).standard_normal((8, 4))).float() * 0.02)
            angle = torch.arange(8.0)[:, None] / 10000 ** (torch.arange(4.0) / 4)
            self.pos.copy_(torch.sin(angle))


def test_values_from_outside_torch_are_refused_and_computed_ones_copied():
    m = FromNumpy()
    with pytest.raises(ValueError, match=r"gives 1 parameter\(s\) values no fill says: w: copy_ of values made outside the "
                                         r"recorded code \(data it read, NumPy's random numbers\)"):
        lt.init_(m)
    lt.init_(m, overrides={"w": "normal(0, 0.02)"})
    want = torch.sin(torch.arange(8.0)[:, None] / 10000 ** (torch.arange(4.0) / 4))
    assert torch.equal(m.pos, want)  # computed without random numbers: the code's own values


def test_module_spec_refuses_every_group_at_once():
    """nn.TransformerEncoder under a recipe that needs roles: the fused in_proj (no rule) and the
    linear1/linear2 maps (roles unknown) in one error, not one group after the other is fixed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 4, 32), 2)
    with pytest.raises(ValueError) as e:
        lt.module_spec(enc, recipe="torchtitan")
    msg = str(e.value)
    assert "cannot tell the fill of 8 parameter(s)" in msg
    assert "layers.1.self_attn.in_proj_weight" in msg and "layers.1.linear2.weight" in msg


class Scaled(torch.nn.Module):
    """Nemotron-H's out_proj: kaiming_uniform_, then p.copy_(p / sqrt(n)); and a bias of -inf."""

    def __init__(self):
        super().__init__()
        self.out_proj = torch.nn.Linear(64, 64, bias=False)
        self.mask = torch.nn.Parameter(torch.empty(4))

    def reset_parameters(self):
        p = self.out_proj.weight
        torch.nn.init.kaiming_uniform_(p, a=math.sqrt(5))
        with torch.no_grad():
            p.copy_(p / math.sqrt(4))
            self.mask.fill_(float("-inf"))


def test_a_parameter_scaled_through_a_temporary_and_a_value_no_fill_holds():
    with pytest.raises(ValueError, match=r"gives 1 parameter\(s\) values no fill says: mask: fill with a value that is not "
                                         r"finite \(-inf\)"):
        lt.init_(Scaled())
    m = lt.init_(Scaled(), overrides={"mask": "constant(0)"})
    bound = 1 / math.sqrt(64) / 2  # kaiming's U(-1/sqrt(fan_in), 1/sqrt(fan_in)), halved
    w = m.out_proj.weight.detach()
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
