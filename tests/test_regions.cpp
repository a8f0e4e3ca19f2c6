// Fill regions (TensorSpec::regions): a box of a tensor with a fill of its own. Each path that fills
// gives what the contract says, bit for bit, against bytes made the long way (region_util.hpp: the
// tensor filled whole with each fill, the regions copied over in order): whole builds per layer and
// stacked, experts fused or not, both orientations, every dtype; streams; rank pieces; composites
// (transposed, row-permuted); verify's ranges and boxes; emits. Outside every region the bytes are the
// build without regions. The jobs of a fill are disjoint (they may run in any order). Bad regions
// are refused in one line naming the tensor and the region. (test_shard_build, test_tensor_index,
// test_emit_parallel and test_composite run their own paths over the same regions.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/checkpoint/verify.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/shard/composite.hpp>
#include <layerinit/shard/rank.hpp>
#include <layerinit/shard/tensor_index.hpp>
#include <layerinit/stacking/stack.hpp>

#include "box_util.hpp"
#include "region_util.hpp"
#include "test_util.hpp"

using namespace layerinit;
using layerinit::testing::reference_fill;
using layerinit::testing::with_regions;

namespace {

using Bytes = std::vector<unsigned char>;

constexpr std::uint64_t kSeed = 17;

Recipe recipe() {
  // An override replaces a tensor's own fill only: q_proj keeps its regions.
  Recipe r = make_recipe("hf");
  r.add_override("*.q_proj.weight", FillSpec::uniform(-0.1, 0.1));
  return r;
}

BuildOptions options(DType t, Layout layout = Layout::per_layer, Orientation o = Orientation::out_in,
                     ExpertLayout experts = ExpertLayout::stacked) {
  return BuildOptions{.dtype = t, .seed = kSeed, .layout = layout, .orientation = o, .experts = experts};
}

struct Expected {
  PlannedTensor tensor;
  Bytes bytes;  // memory order
};

// Every tensor the builder plans, by canonical name, with its bytes made the long way.
std::map<std::string, Expected> references(const Builder& b, backend& be) {
  std::map<std::string, Expected> out;
  auto add = [&](const std::vector<PlannedTensor>& ts) {
    for (const PlannedTensor& p : ts) out[p.name] = {p, reference_fill(p, kSeed, be)};
  };
  add(b.plan_pre());
  for (std::uint64_t i = 0; i < b.spec().num_layers; ++i) add(b.plan_layer(i));
  add(b.plan_post());
  return out;
}

Bytes bytes_of(const TensorView& v) {
  const auto* p = static_cast<const unsigned char*>(v.data);
  return Bytes(p, p + v.bytes());
}

// Every tensor of a built model (unstacked), by canonical name.
std::map<std::string, Bytes> built(const Model& m, const ModelSpec& spec) {
  std::map<std::string, Bytes> out;
  auto add = [&](const TensorView& v) { out[v.name] = bytes_of(v); };
  for (const auto& t : m.pre) add(t.view);
  for (const auto& l : m.layers)
    for (const auto& t : l.tensors) add(t.view);
  if (m.layout == Layout::stacked)
    for (const auto& layer : unstack(m, spec))
      for (const auto& v : layer) add(v);
  for (const auto& t : m.post) add(t.view);
  return out;
}

// The first element (row-major over memory) where two tensors' bytes differ, or -1.
long long first_difference(const Bytes& a, const Bytes& b, std::uint64_t es) {
  if (a.size() != b.size()) return -2;
  for (std::uint64_t i = 0; i * es < a.size(); ++i)
    if (std::memcmp(a.data() + i * es, b.data() + i * es, es) != 0) return static_cast<long long>(i);
  return -1;
}

std::vector<std::string> presets() { return {"llama-tiny", "mixtral-tiny", "gpt2-tiny", "deepseek-v3-tiny"}; }

}  // namespace

// The semantics, per element: inside a region the value its fill gives the element's own index,
// outside every region the build without regions; exact values where the fill is a constant.
TEST(Regions, InsideTheirFillOutsideTheTensorsAsWithoutRegions) {
  auto be = make_host_backend(2);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const ModelSpec plain = make_preset("llama-tiny"), spec = with_regions(plain);
    const Builder with(spec, recipe(), options(t), *be, be->memory());
    const Builder without(plain, recipe(), options(t), *be, be->memory());
    const auto got = built(with.build(), spec);
    const auto base = built(without.build(), plain);
    const auto want = references(with, *be);
    const std::uint64_t es = dtype_size(t);
    ASSERT_EQ(got.size(), want.size());
    int with_regions_seen = 0;
    for (const auto& [name, e] : want) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(got.count(name));
      EXPECT_EQ(first_difference(got.at(name), e.bytes, es), -1);
      // Outside the regions: the build without them. Inside: not it (a region's fill gives other values).
      const Shape& s = e.tensor.shape;
      std::uint64_t inside = 0, differ = 0;
      for (std::uint64_t i = 0; i < e.tensor.numel(); ++i) {
        bool in = false;
        for (const PlannedRegion& r : e.tensor.regions) {
          bool all = true;
          std::uint64_t rest = i;
          for (std::size_t d = s.size(); d-- > 0;) {
            const std::uint64_t x = rest % s[d];
            rest /= s[d];
            all = all && x >= r.region.offset[d] && x < r.region.offset[d] + r.region.shape[d];
          }
          in = in || all;
        }
        const bool same = std::memcmp(got.at(name).data() + i * es, base.at(name).data() + i * es, es) == 0;
        if (in) {
          ++inside;
          differ += !same;
        } else {
          ASSERT_TRUE(same) << "element " << i << " outside every region";
        }
      }
      if (!e.tensor.regions.empty()) {
        ++with_regions_seen;
        EXPECT_GT(differ, inside / 2) << inside << " elements inside the regions";
      }
    }
    EXPECT_GT(with_regions_seen, 10);
    // Exact values: the embedding's pad row (the last region) is zero; the constant band's rows hold
    // 0.25 but where the trunc_normal column (a later region) crosses them.
    const Bytes& emb = got.at("model.embed_tokens.weight");
    const std::uint64_t H = spec.pre[0].shape[1], V = spec.pre[0].shape[0];
    for (std::uint64_t c = 0; c < H; ++c)
      for (std::uint64_t k = 0; k < es; ++k) EXPECT_EQ(emb[(3 * H + c) * es + k], 0) << "pad row, column " << c;
    const std::uint64_t band = V / 4;
    const std::uint64_t quarter_bits = t == DType::f32 ? 0x3e800000u : t == DType::f16 ? 0x3400u : 0x3e80u;
    for (std::uint64_t c = 0; c < H; ++c) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, emb.data() + (band * H + c) * es, es);
      if (band == 3) continue;  // the pad row is later
      EXPECT_EQ(bits, quarter_bits) << "band row " << band << ", column " << c;
    }
    // The override of q_proj replaced its own fill, not its regions.
    const PlannedTensor q = with.plan_layer(0)[0];
    ASSERT_EQ(q.name, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(q.fill, FillSpec::uniform(-0.1, 0.1));
    EXPECT_EQ(q.regions.size(), 3u);
  }
}

// Whole builds in every layout, orientation and expert layout, and streams, equal the reference.
TEST(Regions, EveryLayoutOrientationAndStreamIsTheReference) {
  auto be = make_host_backend(2);
  int compared = 0;
  for (const std::string& preset : presets())
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      for (Layout layout : {Layout::per_layer, Layout::stacked})
        for (Orientation o : {Orientation::out_in, Orientation::in_out})
          for (ExpertLayout experts : {ExpertLayout::stacked, ExpertLayout::per_expert}) {
            if (experts == ExpertLayout::per_expert && layout == Layout::per_layer) continue;
            SCOPED_TRACE(preset + " " + std::string(dtype_name(t)) + " " + std::string(layout_name(layout)) + " " +
                         std::string(orientation_name(o)) + " experts " + std::string(expert_layout_name(experts)));
            const ModelSpec spec = with_regions(make_preset(preset));
            const Builder b(spec, recipe(), options(t, layout, o, experts), *be, be->memory());
            const auto want = references(b, *be);
            const auto got = built(b.build(), spec);
            ASSERT_EQ(got.size(), want.size());
            for (const auto& [name, e] : want) {
              ASSERT_TRUE(got.count(name)) << name;
              ASSERT_EQ(first_difference(got.at(name), e.bytes, dtype_size(t)), -1) << name;
              ++compared;
            }
            if (layout == Layout::stacked) continue;  // a stream's parts are per tensor in either layout
            std::size_t streamed = 0;
            b.stream([&](const Part& p) {
              for (const TensorView& v : p.tensors) {
                ASSERT_EQ(first_difference(bytes_of(v), want.at(v.name).bytes, dtype_size(t)), -1) << v.name;
                ++streamed;
              }
            });
            EXPECT_EQ(streamed, want.size());
          }
  EXPECT_GT(compared, 1000);
}

// A rank's pieces (tp, fsdp, ep and pp boxes, stacked or not, transposed or not) are the reference's boxes.
TEST(Regions, RankPiecesAreBoxesOfTheReference) {
  auto be = make_host_backend(2);
  struct Case {
    std::string preset;
    ParallelDegrees d;
  };
  const std::vector<Case> cases = {{"llama-tiny", {.tp = 2, .fsdp = 3}}, {"llama-tiny", {.tp = 2, .pp = 2}},
                                   {"mixtral-tiny", {.tp = 2, .ep = 2}}, {"mixtral-tiny", {.ep = 4, .fsdp = 2}},
                                   {"gpt2-tiny", {.tp = 2, .fsdp = 2}}};
  int pieces = 0;
  for (const Case& c : cases)
    for (DType t : {DType::f32, DType::bf16})
      for (Layout layout : {Layout::per_layer, Layout::stacked})
        for (Orientation o : {Orientation::out_in, Orientation::in_out}) {
          const ModelSpec spec = with_regions(make_preset(c.preset));
          const ParallelPlan plan(spec, c.d);
          SCOPED_TRACE(c.preset + " " + plan.describe() + " " + std::string(dtype_name(t)) + " " +
                       std::string(layout_name(layout)) + " " + std::string(orientation_name(o)));
          const Builder b(spec, recipe(), options(t, layout, o), *be, be->memory());
          const auto want = references(b, *be);
          const std::uint64_t es = dtype_size(t);
          for (std::uint64_t r = 0; r < plan.ranks(); ++r)
            stream_rank(RankPlan(b, plan, r), [&](const RankPart& p) {
              for (std::size_t k = 0; k < p.tensors.size(); ++k) {
                const ShardTensor& s = p.shards[k];
                const Bytes& whole = want.at(s.tensor.name).bytes;
                const auto* local = static_cast<const unsigned char*>(p.tensors[k].data);
                const Shape gs = dense_strides(s.tensor.memory_shape), ls = dense_strides(s.box.shape);
                for (std::uint64_t e = 0; e < s.box.numel(); ++e) {
                  const auto [g, l] = layerinit::testing::box_element(s.box, e, gs, ls);
                  ASSERT_EQ(std::memcmp(local + l * es, whole.data() + g * es, es), 0)
                      << s.tensor.name << " rank " << r << " box at " << shape_string(s.box.offset) << " element " << e;
                }
                ++pieces;
              }
            });
        }
  EXPECT_GT(pieces, 500);
}

// Composites: a tensor whole (transposed in in-out), transposed parts concatenated along columns, q and
// k in torchtitan's interleaved RoPE rows (a region moves with its rows), dense and strided boxes.
TEST(Regions, CompositesOfTransposedAndPermutedPartsAreTheReference) {
  auto be = make_host_backend(2);
  const ModelSpec spec = with_regions(make_preset("llama-tiny"));
  for (Orientation o : {Orientation::out_in, Orientation::in_out})
    for (DType t : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(orientation_name(o)) + " " + std::string(dtype_name(t)));
      const Builder b(spec, recipe(), options(t, Layout::per_layer, o), *be, be->memory());
      const TensorIndex index(b);
      const auto want = references(b, *be);
      const std::uint64_t es = dtype_size(t);
      const std::string q = "model.layers.1.self_attn.q_proj.weight", k = "model.layers.1.self_attn.k_proj.weight",
                        v = "model.layers.1.self_attn.v_proj.weight";
      // [q; k; v] as stored: along rows (dimension 0) out-in, along columns (dimension 1) in-out.
      const std::size_t dim = o == Orientation::in_out ? 1 : 0;
      const std::uint64_t hd = spec.hyper.head_dim ? spec.hyper.head_dim : spec.hyper.hidden_size / spec.hyper.num_heads;
      std::vector<RowPermutation> rows;
      if (o == Orientation::out_in) rows = {RowPermutation::rope_interleave(hd), RowPermutation::rope_interleave(hd), {}};
      const std::string names[] = {q, k, v};
      const Composite c = index.assemble(names, {}, dim, rows);
      ASSERT_EQ(composite_from_text(composite_to_text(c)), c);
      ASSERT_EQ(c.parts[0].regions.size(), 3u);
      // Expected: element by element from the reference of each part's tensor.
      const Shape cs = dense_strides(c.shape);
      Bytes expect(numel(c.shape) * es);
      for (std::size_t p = 0; p < 3; ++p) {
        const Expected& e = want.at(names[p]);
        const Shape& m = e.tensor.memory_shape;
        for (std::uint64_t r = 0; r < m[0]; ++r)
          for (std::uint64_t col = 0; col < m[1]; ++col) {
            const std::uint64_t src = c.parts[p].rows.source_row(r) * m[1] + col;
            const std::uint64_t dst = (c.parts[p].at[0] + r) * cs[0] + c.parts[p].at[1] + col;
            std::memcpy(expect.data() + dst * es, e.bytes.data() + src * es, es);
          }
      }
      std::mt19937_64 rng(5);
      std::vector<Box> boxes{whole_box(c.shape)};
      for (int i = 0; i < 40; ++i) {
        Box bx{{rng() % c.shape[0], rng() % c.shape[1]}, {0, 0}};
        bx.shape = {1 + rng() % (c.shape[0] - bx.offset[0]), 1 + rng() % (c.shape[1] - bx.offset[1])};
        boxes.push_back(bx);
      }
      for (const Box& bx : boxes)
        for (bool strided : {false, true}) {
          const Shape padded{bx.shape[0], bx.shape[1] + (strided ? 5 : 0)};
          const Shape strides = dense_strides(padded);
          Bytes buf(numel(padded) * es + 1, 0x5a);
          std::vector<FillJob> jobs;
          composite_fill_jobs(c, bx, Region{buf.data(), strided ? strides : Shape{}}, kSeed, jobs);
          be->fill(jobs);
          const Shape ls = strided ? strides : dense_strides(bx.shape);
          for (std::uint64_t e = 0; e < bx.numel(); ++e) {
            const auto [g, l] = layerinit::testing::box_element(bx, e, cs, ls);
            ASSERT_EQ(std::memcmp(buf.data() + l * es, expect.data() + g * es, es), 0)
                << "box at " << shape_string(bx.offset) << " of " << shape_string(bx.shape) << " element " << e;
          }
          ASSERT_EQ(buf.back(), 0x5a);
        }
      // One canonical tensor as a composite (whole_part copies its regions).
      const Composite one = index.composite(q);
      ASSERT_EQ(one.parts[0].regions, spec.layer.tensors[0].regions);
      Bytes out(want.at(q).bytes.size());
      std::vector<FillJob> jobs;
      composite_fill_jobs(one, whole_box(one.shape), Region{out.data(), {}}, kSeed, jobs);
      be->fill(jobs);
      EXPECT_EQ(first_difference(out, want.at(q).bytes, es), -1);
    }
}

// The jobs of one fill are disjoint and cover the box once, so any order gives the same bytes; a
// tensor without regions keeps its one job; ranges of memory (verify's) are the reference's.
TEST(Regions, JobsAreDisjointAndRangesAreTheReference) {
  auto be = make_host_backend(1);
  const ModelSpec spec = with_regions(make_preset("llama-tiny"));
  for (Orientation o : {Orientation::out_in, Orientation::in_out}) {
    const Builder b(spec, recipe(), options(DType::bf16, Layout::per_layer, o), *be, be->memory());
    const auto want = references(b, *be);
    std::mt19937_64 rng(9);
    for (const auto& [name, e] : want) {
      SCOPED_TRACE(name);
      const PlannedTensor& p = e.tensor;
      const std::uint64_t es = dtype_size(p.dtype), n = p.numel();
      const TensorFill f = tensor_fill(p, kSeed);
      Bytes out(n * es);
      std::vector<FillJob> jobs;
      tensor_fill_jobs(p, out.data(), kSeed, jobs);
      if (p.regions.empty()) {  // the one job of the tensor, as before regions
        ASSERT_EQ(jobs.size(), 1u);
        const FillJob one = fill_job_for(p, out.data(), kSeed);
        EXPECT_EQ(std::memcmp(&jobs[0], &one, sizeof one), 0);
        continue;
      }
      // Coverage: each run of each job (dst_pitch apart) is its own stretch of the tensor's bytes, the
      // stretches tile it.
      std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
      for (const FillJob& j : jobs)
        for (std::uint64_t r = 0; r < j.runs; ++r)
          spans.push_back({static_cast<std::uint64_t>(static_cast<unsigned char*>(j.dst) - out.data()) + r * dst_pitch(j) * es,
                           (j.end - j.begin) * es});
      std::sort(spans.begin(), spans.end());
      std::uint64_t at = 0;
      for (const auto& [start, size] : spans) {
        ASSERT_EQ(start, at) << "a gap or an overlap";
        at += size;
      }
      ASSERT_EQ(at, n * es);
      // In reverse order, one job at a time.
      std::reverse(jobs.begin(), jobs.end());
      for (const FillJob& j : jobs) be->fill(std::span(&j, 1));
      ASSERT_EQ(first_difference(out, e.bytes, es), -1);
      // Ranges of memory, as verify reads them: partial rows, whole rows, crossing regions.
      for (int i = 0; i < 30; ++i) {
        const std::uint64_t first = rng() % n, count = 1 + rng() % (n - first);
        Bytes r(count * es);
        jobs.clear();
        range_fill_jobs(p, f, first, count, r.data(), jobs);
        be->fill(jobs);
        ASSERT_EQ(std::memcmp(r.data(), e.bytes.data() + first * es, count * es), 0) << "range " << first << " + " << count;
      }
    }
  }
}

// verify: whole tensors read in chunks that cross rows and regions, a stacked build's buffers, rank
// pieces (boxes) are equal; the build without regions differs inside them.
TEST(Regions, VerifyMakesTheRegionsAgain) {
  auto be = make_host_backend(2);
  struct Held {
    StoredTensor s;
    Bytes bytes;
  };
  auto verify = [&](const Builder& b, const std::vector<Held>& held, std::uint64_t chunk, bool diagnose = true) {
    std::vector<StoredTensor> stored;
    for (const Held& h : held) stored.push_back(h.s);
    auto reader = callback_reader("test", stored, {}, [&](std::size_t k, std::uint64_t first, std::uint64_t n, void* out) {
      const std::uint64_t es = dtype_size(*held[k].s.dtype);
      std::memcpy(out, held[k].bytes.data() + first * es, n * es);
    });
    VerifyOptions opts;
    opts.chunk_bytes = chunk;
    opts.diagnose = diagnose;
    return verify_checkpoint(b, *reader, opts);
  };
  auto whole = [](const Model& m) {
    std::vector<Held> out;
    m.for_each([&](const TensorView& v) {
      StoredTensor s;
      s.name = v.name;
      s.shape = v.shape;
      s.dtype = v.dtype;
      s.dtype_text = std::string(dtype_name(v.dtype));
      out.push_back({s, bytes_of(v)});
    });
    return out;
  };
  const ModelSpec plain = make_preset("mixtral-tiny"), spec = with_regions(plain);
  for (Layout layout : {Layout::per_layer, Layout::stacked})
    for (Orientation o : {Orientation::out_in, Orientation::in_out}) {
      SCOPED_TRACE(std::string(layout_name(layout)) + " " + std::string(orientation_name(o)));
      const Builder b(spec, recipe(), options(DType::bf16, layout, o), *be, be->memory());
      for (std::uint64_t chunk : {202ull, 64ull << 20}) {  // 101 elements: chunks cross rows and regions
        const VerifyReport r = verify(b, whole(b.build()), chunk);
        EXPECT_TRUE(r.ok()) << "chunk " << chunk << ": " << r.differs << " differ";
      }
      const Builder without(plain, recipe(), options(DType::bf16, layout, o), *be, be->memory());
      const VerifyReport r = verify(b, whole(without.build()), 1000, /*diagnose=*/false);
      EXPECT_FALSE(r.ok());
      for (const TensorCheck& c : r.tensors) {
        if (c.status == CheckStatus::equal) continue;
        ASSERT_TRUE(c.first_difference) << c.name;
        EXPECT_LT(c.differing, c.elements) << c.name << ": only the regions differ";
      }
      EXPECT_GT(r.differs, 10u);
    }
  // Rank pieces as rank files hold them: each a box of its tensor.
  const ParallelPlan plan(spec, {.tp = 2, .ep = 2});
  const Builder b(spec, recipe(), options(DType::f32, Layout::per_layer, Orientation::in_out), *be, be->memory());
  std::vector<Held> pieces;
  for (std::uint64_t r = 0; r < plan.ranks(); ++r)
    stream_rank(RankPlan(b, plan, r), [&](const RankPart& p) {
      for (std::size_t k = 0; k < p.tensors.size(); ++k) {
        // A replicated piece is held by several ranks: once is enough.
        if (std::any_of(pieces.begin(), pieces.end(), [&](const Held& h) {
              return h.s.name == p.shards[k].tensor.name && h.s.offset == p.shards[k].box.offset;
            }))
          continue;
        StoredTensor s;
        s.name = p.shards[k].tensor.name;
        s.shape = p.shards[k].box.shape;
        s.dtype = DType::f32;
        s.dtype_text = "F32";
        s.global_shape = p.shards[k].tensor.memory_shape;
        s.offset = p.shards[k].box.offset;
        pieces.push_back({s, bytes_of(p.tensors[k])});
      }
    });
  const VerifyReport r = verify(b, pieces, 1000);
  EXPECT_TRUE(r.ok()) << r.differs << " differ, " << r.missing << " missing";
  EXPECT_GT(r.equal, 20u);
}

// Emit writes the regions, per layer (safetensors, out-in; HDF5, in-out) and stacked; each file
// verifies equal.
TEST(Regions, EmitWritesThemAndVerifySaysEqual) {
  auto be = make_host_backend(2);
  const ModelSpec spec = with_regions(make_preset("llama-tiny"));
  struct Case {
    CheckpointFormat format;
    Layout layout;
    Orientation o;
  };
  for (const Case& c : {Case{CheckpointFormat::safetensors, Layout::per_layer, Orientation::out_in},
                        Case{CheckpointFormat::hdf5, Layout::per_layer, Orientation::in_out},
                        Case{CheckpointFormat::safetensors, Layout::stacked, Orientation::in_out},
                        Case{CheckpointFormat::hdf5, Layout::stacked, Orientation::out_in}}) {
    SCOPED_TRACE(std::string(layout_name(c.layout)) + " " + std::string(orientation_name(c.o)));
    layerinit::testing::TempDir dir;
    const Builder b(spec, recipe(), options(DType::f16, c.layout, c.o), *be, be->memory());
    EmitOptions eo;
    eo.format = c.format;
    const auto target = dir / (c.format == CheckpointFormat::hdf5 ? "m.h5" : "m");
    emit_checkpoint(b, *be, target, eo);
    auto reader = open_checkpoint_reader(target);
    if (c.layout == Layout::per_layer) {
      const auto want = references(b, *be);
      ASSERT_EQ(reader->tensors().size(), want.size());
      for (std::size_t k = 0; k < reader->tensors().size(); ++k) {
        const StoredTensor& s = reader->tensors()[k];
        Bytes got(numel(s.shape) * 2);
        reader->read(k, 0, numel(s.shape), got.data());
        EXPECT_EQ(first_difference(got, want.at(s.name).bytes, 2), -1) << s.name;
      }
    }
    const VerifyReport r = verify_checkpoint(b, *reader);
    EXPECT_TRUE(r.ok()) << r.differs << " differ";
  }
}

// Refusals, one line naming the tensor and the region: outside the shape, another rank, a fill that is
// invalid, one the tensor's dtype cannot hold (at plan time, as the tensor's own fill), a composite's
// region, a stack whose positions have other regions.
TEST(Regions, BadRegionsAreRefusedNamingTensorAndRegion) {
  auto refusal = [](auto f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto spec_with = [](FillRegion r) {
    ModelSpec m;
    m.name = "m";
    TensorSpec e;
    e.name = "e";
    e.shape = {10, 4};
    e.role = TensorRole::embedding;
    e.regions = {{{0, 0}, {1, 4}, FillSpec::constant(0)}, r};
    m.pre.push_back(e);
    return m;
  };
  EXPECT_EQ(refusal([&] { spec_with({{9, 0}, {2, 4}, FillSpec::constant(0)}).validate(); }),
            "model 'm': pre tensor 0 'e': region 1 at [9, 0] of [2, 4] lies outside [10, 4]");
  EXPECT_EQ(refusal([&] { spec_with({{9}, {1}, FillSpec::constant(0)}).validate(); }),
            "model 'm': pre tensor 0 'e': region 1 at [9] of [1] has rank 1 for a tensor of rank 2 [10, 4]");
  EXPECT_EQ(refusal([&] { spec_with({{0, 0}, {1, 1}, FillSpec::uniform(1, 0)}).validate(); }),
            "model 'm': pre tensor 0 'e': region 1 at [0, 0] of [1, 1]: fill 'uniform(1, 0)' is invalid: lo must be below hi");
  // Valid in fp32, not in bf16: refused when planned, before anything is made.
  auto be = make_host_backend(1);
  const ModelSpec narrow = spec_with({{2, 0}, {1, 4}, FillSpec::normal(1, 1e-5)});
  EXPECT_NO_THROW(Builder(narrow, make_recipe("hf"), options(DType::f32), *be, be->memory()).plan_pre());
  EXPECT_EQ(refusal([&] { Builder(narrow, make_recipe("hf"), options(DType::bf16), *be, be->memory()).build(); }),
            "tensor 'e': region 1 at [2, 0] of [1, 4]: fill 'normal(1, 1e-05)' is invalid: every value rounds to 1 in bf16 (too "
            "narrow for the dtype; write constant(1) for a constant)");
  // A tensor planned by hand is checked when its jobs are made.
  PlannedTensor p = layerinit::testing::planned_tensor("w", {4, 6}, DType::f32, FillSpec::normal(0, 1), true);
  p.regions.push_back({{{0, 5}, {1, 2}, FillSpec::constant(1)}, std::nullopt});
  EXPECT_EQ(refusal([&] { (void)tensor_fill(p, 0); }), "tensor 'w': region 0 at [0, 5] of [1, 2] lies outside [4, 6]");
  // A composite's part.
  PlannedTensor ok = p;
  ok.regions = {{{{0, 1}, {2, 2}, FillSpec::constant(1)}, std::nullopt}};
  Composite c = whole_tensor(ok);
  EXPECT_EQ(c.parts[0].regions, std::vector<FillRegion>{ok.regions[0].region});
  c.parts[0].regions[0].offset = {3, 0};
  EXPECT_EQ(refusal([&] { c.validate(); }), "composite: part 0 ('w'): region 0 at [3, 0] of [2, 2] lies outside [4, 6]");
  c.parts[0].regions[0] = {{0, 0}, {1, 1}, FillSpec::normal(1, 1e-5)};
  c.dtype = c.parts[0].dtype = DType::f16;
  EXPECT_EQ(refusal([&] { c.validate(); }),
            "composite: part 0 ('w'): region 0 at [0, 0] of [1, 1]: fill 'normal(1, 1e-05)' is invalid: every value rounds to 1 "
            "in fp16 (too narrow for the dtype; write constant(1) for a constant)");
  EXPECT_EQ(refusal([&] {
              (void)composite_from_text(R"j({"layerinit_composite": 1, "dtype": "fp32", "shape": [4], "parts": [{"name": "v",
                  "shape": [4], "at": [0], "fill": "constant(0)", "regions": [{"offset": [1], "shape": [1], "fil": "constant(1)"}]}]})j");
            }),
            "composite: parts[0].regions[0].fil: unknown key (valid: offset, shape, fill)");
  // One stacked array holds the tensors of one list of regions: experts that differ are refused.
  ModelSpec moe = make_preset("mixtral-tiny");
  const auto one = std::find_if(moe.layer.tensors.begin(), moe.layer.tensors.end(), [&](const TensorSpec& t) {
    const auto e = split_expert_name(moe.layer, t.name);
    return e && e->layer == 1;
  });
  ASSERT_NE(one, moe.layer.tensors.end());
  one->regions = {{{0, 0}, {1, 1}, FillSpec::constant(0)}};  // expert 1's, not expert 0's
  const Builder b(moe, make_recipe("hf"), options(DType::f32, Layout::stacked), *be, be->memory());
  const TensorIndex index(b);
  const auto e = split_expert_name(moe.layer, one->name);
  const std::string buffer = moe.layer_prefix + moe.layer.expert_prefix + std::string(e->relative);
  EXPECT_NE(refusal([&] { (void)index.composite(buffer); }).find("has other regions than its position 0"), std::string::npos)
      << refusal([&] { (void)index.composite(buffer); });
}

// A region's fill is a fill like any: the spec JSON holds it exactly (and the composite text).
TEST(Regions, JsonSpecsRoundTripTheirRegions) {
  for (const std::string& preset : presets()) {
    const ModelSpec s = with_regions(make_preset(preset));
    EXPECT_EQ(spec_from_json(spec_to_json(s)), s) << preset;
  }
  const ModelSpec s = with_regions(make_preset("llama-tiny"));
  const std::string text = spec_to_json(s);
  EXPECT_NE(text.find(R"("regions": [)"), std::string::npos);
  EXPECT_NE(text.find(R"("init": {
            "constant": {
              "value": 0.25)"),
            std::string::npos);
}
