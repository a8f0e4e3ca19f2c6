// replay_init: a recorded init (the writes a framework's init code made) replayed into fills.
#include <cmath>
#include <stdexcept>

#include <gtest/gtest.h>

#include <layerinit/init/recorded.hpp>
#include <layerinit/init/spec_json.hpp>

#include "../init/json_documents.hpp"

using namespace layerinit;

namespace {

RecordedWrite rec(std::size_t t, std::string op, std::vector<double> args = {}, Shape off = {}, Shape ext = {}) {
  RecordedWrite w;
  w.tensor = t;
  w.op = std::move(op);
  w.args = std::move(args);
  w.offset = std::move(off);
  w.shape = std::move(ext);
  return w;
}

RecordedWrite copy(std::size_t to, std::size_t from, Shape off = {}, Shape ext = {}, Shape from_off = {}, Shape from_ext = {}) {
  RecordedWrite w = rec(to, "copy", {}, std::move(off), std::move(ext));
  w.from = from;
  w.from_offset = std::move(from_off);
  w.from_shape = std::move(from_ext);
  return w;
}

std::vector<ReplayedTensor> replay(std::vector<RecordedTensor> tensors, std::vector<RecordedWrite> writes) {
  return replay_init(RecordedInit{std::move(tensors), std::move(writes)});
}

}  // namespace

TEST(Recorded, LastWriteWinsAndAPaddingRowIsARegion) {
  // nn.Embedding(10, 4, padding_idx=3).reset_parameters(): normal_, then row 3 fill_(0).
  const auto r = replay({{"emb.weight", {10, 4}}},
                        {rec(0, "normal", {0, 1}), rec(0, "fill", {0}, {3, 0}, {1, 4})});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].refusal, "");
  EXPECT_EQ(r[0].fill, FillSpec::normal(0, 1));
  ASSERT_EQ(r[0].regions.size(), 1u);
  EXPECT_EQ(r[0].regions[0], (FillRegion{{3, 0}, {1, 4}, FillSpec::constant(0)}));
  // A later whole write wins everywhere.
  const auto again = replay({{"emb.weight", {10, 4}}},
                            {rec(0, "normal", {0, 1}), rec(0, "fill", {0}, {3, 0}, {1, 4}), rec(0, "uniform", {-1, 1})});
  EXPECT_EQ(again[0].fill, FillSpec::uniform(-1, 1));
  EXPECT_TRUE(again[0].regions.empty());
}

TEST(Recorded, TheFillOfMostElementsIsTheTensorsAndEqualPiecesMerge) {
  // Rows 0-1 zero, rows 2-9 normal: normal is the fill; the zero rows one region.
  const auto r = replay({{"w", {10, 4}}}, {rec(0, "fill", {0}), rec(0, "normal", {0, 0.02}, {2, 0}, {8, 4})});
  EXPECT_EQ(r[0].fill, FillSpec::normal(0, 0.02));
  ASSERT_EQ(r[0].regions.size(), 1u);
  EXPECT_EQ(r[0].regions[0], (FillRegion{{0, 0}, {2, 4}, FillSpec::constant(0)}));
  // A box written apart with the tensor's own fill again is no region.
  const auto same = replay({{"w", {10, 4}}}, {rec(0, "normal", {0, 1}), rec(0, "normal", {0, 1}, {3, 1}, {2, 2})});
  EXPECT_TRUE(same[0].regions.empty());
  EXPECT_EQ(same[0].fill, FillSpec::normal(0, 1));
}

TEST(Recorded, ElementwiseOpsTransformTheDistribution) {
  const auto r = replay({{"a", {8}}, {"b", {8}}, {"c", {8}}, {"d", {8}}},
                        {rec(0, "normal", {0, 1}), rec(0, "mul", {-0.5}), rec(0, "add", {2}),
                         rec(1, "uniform", {0, 1}), rec(1, "mul", {-2}), rec(1, "add", {1}),
                         rec(2, "fill", {3}), rec(2, "div", {2}), rec(2, "neg"), rec(2, "clamp", {-1, HUGE_VAL}),
                         rec(3, "trunc_normal", {0, 1, -2, 2}), rec(3, "mul", {0.1})});
  EXPECT_EQ(r[0].fill, FillSpec::normal(2, 0.5));
  EXPECT_EQ(r[1].fill, FillSpec::uniform(-1, 1));
  EXPECT_EQ(r[2].fill, FillSpec::constant(-1));
  EXPECT_EQ(r[3].fill, FillSpec::trunc_normal(0, 0.1, -0.2, 0.2));
}

TEST(Recorded, TorchsOldTruncNormalSequenceIsATruncatedNormal) {
  // timm's / torch < 2.x trunc_normal_: uniform_(2l - 1, 2u - 1), erfinv_, mul_(std sqrt 2), add_(mean),
  // clamp_(a, b), with l = Phi((a - mean) / std), u = Phi((b - mean) / std).
  const double mean = 0.1, sd = 0.02, a = 0.06, b = 0.16;
  auto phi = [](double x) { return (1 + std::erf(x / std::sqrt(2.0))) / 2; };
  const double l = phi((a - mean) / sd), u = phi((b - mean) / sd);
  const auto r = replay({{"w", {4, 4}}},
                        {rec(0, "uniform", {2 * l - 1, 2 * u - 1}), rec(0, "erfinv"), rec(0, "mul", {sd * std::sqrt(2.0)}),
                         rec(0, "add", {mean}), rec(0, "clamp", {a, b})});
  EXPECT_EQ(r[0].refusal, "");
  ASSERT_TRUE(r[0].fill);
  EXPECT_EQ(r[0].fill->kind, FillKind::trunc_normal);
  EXPECT_DOUBLE_EQ(r[0].fill->mean, mean);
  EXPECT_NEAR(r[0].fill->std, sd, 1e-17);
  EXPECT_EQ(r[0].fill->a, a);  // the clamp's own bounds, exactly
  EXPECT_EQ(r[0].fill->b, b);
  // Without the clamp, or with other bounds, no fill says it.
  const auto open = replay({{"w", {4}}}, {rec(0, "uniform", {-0.9, 0.9}), rec(0, "erfinv")});
  EXPECT_NE(open[0].refusal.find("erfinv_"), std::string::npos) << open[0].refusal;
  const auto inner = replay({{"w", {4}}}, {rec(0, "uniform", {-0.9, 0.9}), rec(0, "erfinv"), rec(0, "clamp", {-0.5, 0.5})});
  EXPECT_NE(inner[0].refusal.find("clamp"), std::string::npos) << inner[0].refusal;
}

TEST(Recorded, ClampOfANormalIsRefused) {
  const auto r = replay({{"w", {4}}}, {rec(0, "normal", {0, 1}), rec(0, "clamp", {-2, 2})});
  EXPECT_FALSE(r[0].fill);
  EXPECT_NE(r[0].refusal.find("piles values"), std::string::npos) << r[0].refusal;
}

TEST(Recorded, OpsWithNoFillAndUnwrittenBoxesAreRefusedWithWhere) {
  RecordedWrite ortho = rec(0, "orthogonal", {1.0});
  ortho.where = "model.py:12 in reset_parameters";
  const auto r = replay({{"q", {4, 4}}, {"k", {4, 4}}, {"v", {4, 4}}},
                        {rec(0, "normal", {0, 1}), ortho, rec(1, "normal", {0, 1}, {0, 0}, {2, 4})});
  EXPECT_EQ(r[0].refusal, "nn.init.orthogonal_: a QR decomposition of a random matrix, whose elements depend on each other "
                          "(model.py:12 in reset_parameters)");
  EXPECT_EQ(r[1].refusal, "never written by its init code in [2:4, 0:4]");
  EXPECT_EQ(r[2].refusal, "never written by its init code");
  const auto other = replay({{"w", {3}}}, {rec(0, "index_put")});
  EXPECT_EQ(other[0].refusal, "index_put: no fill gives its values");
}

TEST(Recorded, ATemporaryCopiedInKeepsItsDistribution) {
  // Megatron's CPU init: master = empty([6, 4]); normal_(master); this rank's rows 3..5 via split and
  // cat into the parameter.
  const auto r = replay({{"", {6, 4}}, {"", {3, 4}}, {"linear.weight", {3, 4}}},
                        {rec(0, "normal", {0, 0.02}), copy(1, 0, {0, 0}, {3, 4}, {3, 0}, {3, 4}), copy(2, 1)});
  EXPECT_EQ(r[2].refusal, "");
  EXPECT_EQ(r[2].fill, FillSpec::normal(0, 0.02));
  // nn.Parameter(torch.ones(d)) made from a temporary reshaped: still one fill.
  const auto flat = replay({{"", {8}}, {"scale", {2, 4}}}, {rec(0, "fill", {1}), copy(1, 0, {}, {}, {}, {})});
  EXPECT_EQ(flat[1].fill, FillSpec::constant(1));
}

TEST(Recorded, OneRandomTemporaryCopiedTwiceIsRefusedBothTimes) {
  const auto r = replay({{"", {4, 4}}, {"a", {4, 4}}, {"b", {4, 4}}}, {rec(0, "normal", {0, 1}), copy(1, 0), copy(2, 0)});
  EXPECT_NE(r[1].refusal.find("the same random values as 'b'"), std::string::npos) << r[1].refusal;
  EXPECT_NE(r[2].refusal.find("the same random values as 'a'"), std::string::npos) << r[2].refusal;
  // Disjoint halves of one draw are fine.
  const auto halves = replay({{"", {4, 4}}, {"c", {2, 4}}, {"d", {2, 4}}},
                             {rec(0, "normal", {0, 1}), copy(1, 0, {}, {}, {0, 0}, {2, 4}), copy(2, 0, {}, {}, {2, 0}, {2, 4})});
  EXPECT_EQ(halves[1].refusal, "");
  EXPECT_EQ(halves[2].refusal, "");
  // Reshaped into a parameter, then split by a padding row: its pieces are still one draw each.
  const auto padded = replay({{"", {12}}, {"emb", {3, 4}}},
                             {rec(0, "normal", {0, 1}), copy(1, 0), rec(1, "fill", {0}, {1, 0}, {1, 4})});
  EXPECT_EQ(padded[1].refusal, "");
  EXPECT_EQ(padded[1].regions.size(), 1u);
}

TEST(Recorded, ACopyOfAParameterIsATie) {
  const auto r = replay({{"embed.weight", {8, 4}}, {"lm_head.weight", {8, 4}}, {"half", {4, 4}}},
                        {rec(0, "normal", {0, 0.02}), copy(1, 0), copy(2, 0, {}, {}, {0, 0}, {4, 4})});
  EXPECT_EQ(r[1].copy_of, 0u);
  EXPECT_FALSE(r[1].fill);
  EXPECT_NE(r[2].refusal.find("part of 'embed.weight' copied"), std::string::npos) << r[2].refusal;
  // Copied, then the source written again: the copy holds the old values.
  const auto stale = replay({{"a", {4}}, {"b", {4}}}, {rec(0, "normal", {0, 1}), copy(1, 0), rec(0, "normal", {0, 2})});
  EXPECT_NE(stale[1].refusal.find("written again after it was copied"), std::string::npos) << stale[1].refusal;
  // Nemotron-H's out_proj: kaiming_uniform_, then p.copy_(p / sqrt(L)): its own values scaled, no tie.
  const auto scaled = replay({{"out_proj.weight", {4, 4}}, {"", {4, 4}}},
                             {rec(0, "uniform", {-1, 1}), copy(1, 0), rec(1, "div", {2}), copy(0, 1)});
  EXPECT_EQ(scaled[0].refusal, "");
  EXPECT_EQ(scaled[0].fill, FillSpec::uniform(-0.5, 0.5));
  // A constant copied is that constant, no tie.
  const auto ones = replay({{"a", {4}}, {"b", {4}}}, {rec(0, "fill", {1}), copy(1, 0)});
  EXPECT_EQ(ones[1].fill, FillSpec::constant(1));
  EXPECT_FALSE(ones[1].copy_of);
}

TEST(Recorded, BroadcastCopies) {
  const auto r = replay({{"", {1}}, {"", {1, 4}}, {"a", {3, 4}}, {"b", {3, 4}}},
                        {rec(0, "fill", {2}), rec(1, "normal", {0, 1}), copy(2, 0, {}, {}, {}, {}),
                         copy(3, 1, {}, {}, {}, {})});
  EXPECT_EQ(r[2].fill, FillSpec::constant(2));
  EXPECT_NE(r[3].refusal.find("repeats them"), std::string::npos) << r[3].refusal;
}

TEST(Recorded, EmptyTensorsAreZeros) {
  const auto r = replay({{"e", {0, 4}}}, {});
  EXPECT_EQ(r[0].fill, FillSpec::constant(0));
}

TEST(Recorded, MalformedInputIsAnError) {
  EXPECT_THROW(replay({{"a", {4}}}, {rec(1, "fill", {0})}), std::invalid_argument);
  EXPECT_THROW(replay({{"a", {4}}}, {rec(0, "fill", {0}, {3}, {2})}), std::invalid_argument);
  EXPECT_THROW(replay({{"a", {4}}}, {rec(0, "normal", {0})}), std::invalid_argument);
  EXPECT_THROW(replay({{"a", {4}}, {"b", {3}}}, {copy(1, 0)}), std::invalid_argument);
  EXPECT_THROW(replay({{"a", {4}}}, {rec(0, "fill", {NAN})}), std::invalid_argument);
}

TEST(Recorded, FromJson) {
  const RecordedInit r = recorded_init_from_json(R"({"tensors": [{"name": "w", "shape": [3, 2]}, {"shape": [3, 2]}],
    "writes": [{"tensor": 1, "op": "uniform", "args": [-1, 1]},
               {"tensor": 0, "op": "copy", "from": 1},
               {"tensor": 0, "op": "clamp", "args": [null, 0.5], "offset": [0, 0], "shape": [1, 2], "where": "m.py:3"}]})");
  ASSERT_EQ(r.tensors.size(), 2u);
  EXPECT_EQ(r.tensors[1].name, "");
  ASSERT_EQ(r.writes.size(), 3u);
  EXPECT_EQ(r.writes[2].args[0], -HUGE_VAL);
  EXPECT_EQ(r.writes[2].args[1], 0.5);
  EXPECT_EQ(r.writes[2].where, "m.py:3");
  const auto out = replay_init(r);
  EXPECT_NE(out[0].refusal.find("clamp (m.py:3) inside a uniform's range"), std::string::npos) << out[0].refusal;
  EXPECT_THROW(recorded_init_from_json(R"({"tensors": [], "extra": 1})"), spec_error);
  EXPECT_THROW(recorded_init_from_json(R"({"tensors": [{"shape": [2], "name": ""}]})"), spec_error);
  // The document itself (the Python binding's dict, no text between) reads the same.
  const RecordedInit d = recorded_init_from_document(nlohmann::json::parse(R"({"tensors": [{"name": "w", "shape": [3, 2]}],
    "writes": [{"tensor": 0, "op": "uniform", "args": [-1, 1], "where": "m.py:3"}]})"));
  ASSERT_EQ(d.writes.size(), 1u);
  EXPECT_EQ(d.writes[0].args, (std::vector<double>{-1, 1}));
  EXPECT_EQ(d.writes[0].where, "m.py:3");
  EXPECT_THROW(recorded_init_from_document(nlohmann::json{{"tensors", nlohmann::json::array()}, {"extra", 1}}), spec_error);
}

TEST(Recorded, SpecWithInitsKeepsTheBlockWhenEveryLayerAgrees) {
  const ModelSpec base = spec_from_json(R"({"name": "m", "pre": [{"name": "embed.weight", "shape": [10, 4], "role": "embedding"}],
    "layer": {"prefix": "blocks.", "count": 2, "tensors": [{"name": "w.weight", "shape": [4, 4], "role": "linear_weight"}]},
    "post": [{"name": "head.weight", "shape": [10, 4], "role": "head_weight"}]})");
  const TensorInit pad{FillSpec::normal(0, 1), {{{3, 0}, {1, 4}, FillSpec::constant(0)}}};
  const TensorInit w{FillSpec::normal(0, 0.02), {}};
  const ModelSpec s = spec_with_inits(base, {{"embed.weight", pad}, {"blocks.0.w.weight", w}, {"blocks.1.w.weight", w}});
  EXPECT_EQ(s.num_layers, 2u);
  EXPECT_EQ(s.pre[0].init, pad.fill);
  EXPECT_EQ(s.pre[0].regions, pad.regions);
  EXPECT_EQ(s.layer.tensors[0].init, w.fill);
  EXPECT_FALSE(s.post[0].init);  // not named: its recipe decides
  // Layers that differ (torchtitan's depth-scaled std) are listed one by one, same names and shapes.
  const ModelSpec u = spec_with_inits(base, {{"blocks.0.w.weight", w}, {"blocks.1.w.weight", TensorInit{FillSpec::normal(0, 0.01), {}}}});
  EXPECT_EQ(u.num_layers, 0u);
  ASSERT_EQ(u.pre.size(), 3u);
  EXPECT_EQ(u.pre[1].name, "blocks.0.w.weight");
  EXPECT_EQ(u.pre[2].name, "blocks.1.w.weight");
  EXPECT_EQ(u.pre[2].init, FillSpec::normal(0, 0.01));
  EXPECT_EQ(u.pre[2].shape, (Shape{4, 4}));
  EXPECT_EQ(u.post[0].name, "head.weight");
  // One layer named, the other not: listed one by one too, the other keeps the recipe's fill.
  const ModelSpec one = spec_with_inits(base, {{"blocks.1.w.weight", w}});
  EXPECT_EQ(one.num_layers, 0u);
  EXPECT_FALSE(one.pre[1].init);
  EXPECT_EQ(one.pre[2].init, w.fill);
  EXPECT_THROW(spec_with_inits(base, {{"blocks.2.w.weight", w}}), std::invalid_argument);
}

TEST(Recorded, ValuesComputedFromDataAreTheAdaptersData) {
  // Whisper's sinusoidal positions: computed on the CPU, copied into the parameter (a data write of
  // the adapter's data 7), and copied on into a second parameter whole.
  const auto r = replay({{"pos", {4, 2}}, {"pos2", {4, 2}}, {"part", {4, 2}}, {"scaled", {4, 2}}},
                        {rec(0, "data", {7}), copy(1, 0), rec(2, "data", {3}, {0, 0}, {2, 2}), rec(2, "fill", {0}, {2, 0}, {2, 2}),
                         rec(3, "data", {1}), rec(3, "mul", {2})});
  EXPECT_EQ(r[0].data, 7u);
  EXPECT_FALSE(r[0].fill);
  EXPECT_EQ(r[1].data, 7u);
  EXPECT_FALSE(r[1].copy_of);
  EXPECT_NE(r[2].refusal.find("part of values computed from data"), std::string::npos) << r[2].refusal;
  EXPECT_NE(r[3].refusal.find("of values computed from data"), std::string::npos) << r[3].refusal;
  EXPECT_THROW(replay({{"a", {2}}}, {rec(0, "data", {-1})}), std::invalid_argument);
}

TEST(Recorded, AReshapingCopyMapsEachRunOfTheSource) {
  // torchtitan's fused wqkv: q [4, 2] and k [2, 2] drawn apart, concatenated as [2, 3, 2] (per kv head:
  // 2 q rows, 1 k row), viewed as [6, 2] and copied into the parameter.
  const auto r = replay({{"", {4, 2}}, {"", {2, 2}}, {"", {2, 3, 2}}, {"wqkv", {6, 2}}},
                        {rec(0, "normal", {0, 0.02}), rec(1, "normal", {0, 0.02}),
                         copy(2, 0, {0, 0, 0}, {2, 2, 2}, {}, {}), copy(2, 1, {0, 2, 0}, {2, 1, 2}, {}, {}), copy(3, 2)});
  EXPECT_EQ(r[3].refusal, "");
  EXPECT_EQ(r[3].fill, FillSpec::normal(0, 0.02));
  // Pieces of other fills: each lands on its rows.
  const auto two = replay({{"", {2, 3, 2}}, {"w", {6, 2}}},
                          {rec(0, "normal", {0, 1}), rec(0, "fill", {0}, {0, 2, 0}, {2, 1, 2}), copy(1, 0)});
  EXPECT_EQ(two[1].refusal, "");
  EXPECT_EQ(two[1].fill, FillSpec::normal(0, 1));
  ASSERT_EQ(two[1].regions.size(), 2u);
  EXPECT_EQ(two[1].regions[0], (FillRegion{{2, 0}, {1, 2}, FillSpec::constant(0)}));
  EXPECT_EQ(two[1].regions[1], (FillRegion{{5, 0}, {1, 2}, FillSpec::constant(0)}));
  // A column of the source lands element by element: (r, 1) is flat 2 r + 1 of [3, 2], of [2, 3] at
  // (1, 0), (0, 1), (1, 2).
  const auto col = replay({{"", {3, 2}}, {"w", {2, 3}}}, {rec(0, "normal", {0, 1}), rec(0, "fill", {0}, {0, 1}, {3, 1}), copy(1, 0)});
  ASSERT_EQ(col[1].regions.size(), 3u) << col[1].refusal;
  EXPECT_EQ(col[1].regions[0], (FillRegion{{0, 1}, {1, 1}, FillSpec::constant(0)}));
  EXPECT_EQ(col[1].regions[1], (FillRegion{{1, 0}, {1, 1}, FillSpec::constant(0)}));
  EXPECT_EQ(col[1].regions[2], (FillRegion{{1, 2}, {1, 1}, FillSpec::constant(0)}));
  // One of a tall matrix would be thousands of boxes: refused.
  const auto tall = replay({{"", {5000, 2}}, {"w", {2, 5000}}},
                           {rec(0, "normal", {0, 1}), rec(0, "fill", {0}, {0, 1}, {5000, 1}), copy(1, 0)});
  EXPECT_NE(tall[1].refusal.find("reshapes values of several fills"), std::string::npos) << tall[1].refusal;
}
