// Composite parameters (shard/composite.hpp): every box of a stacked, concatenated, transposed or
// row-permuted parameter holds, bit for bit, the elements of its canonical tensors filled whole, on the
// host backend and through the CUDA kernel's simulated grid, dense and strided, its stack axes at any
// dimensions; the text form round-trips; bad descriptions are refused in one line.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <layerinit/core/errors.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/kernels/fill_grid.hpp>
#include <layerinit/init/box_fill.hpp>
#include <layerinit/shard/composite.hpp>

#include "box_util.hpp"
#include "region_util.hpp"

using namespace layerinit;

namespace {

PlannedTensor tensor(std::string name, Shape logical, DType t, FillSpec fill, bool transposed = false) {
  return layerinit::testing::planned_tensor(std::move(name), std::move(logical), t, fill, transposed);
}

using Bytes = std::vector<unsigned char>;

// Tensor p filled whole, as the unsharded build fills it: its regions made apart from the jobs under
// test (region_util.hpp).
Bytes whole(const PlannedTensor& p, std::uint64_t seed) {
  auto be = make_host_backend(1);
  return layerinit::testing::reference_fill(p, seed, *be);
}

Shape row_major(const Shape& s) { return dense_strides(s); }

// The whole composite, element by element from its tensors filled whole: an independent reading of
// the description (source box, placement, permutation), not the job code under test.
Bytes expected(const Composite& c, std::uint64_t seed) {
  const std::uint64_t es = dtype_size(c.dtype);
  Bytes out(numel(c.shape) * es, 0);
  const Shape gs = row_major(c.shape);
  const std::size_t K = c.stack.size(), n = c.shape.size(), ns = n - K;
  // The strides of the slice's dimensions: those no stack axis sits at, in order.
  Shape slice_strides;
  for (std::size_t d = 0; d < n; ++d) {
    bool stack_dim = false;
    for (std::size_t k = 0; k < K; ++k) stack_dim = stack_dim || c.stack_dim(k) == d;
    if (!stack_dim) slice_strides.push_back(gs[d]);
  }
  for (std::uint64_t flat = 0; flat < c.slices(); ++flat) {
    Shape pos(K);
    for (std::uint64_t f = flat, k = K; k-- > 0;) {
      pos[k] = f % c.stack[k].size;
      f /= c.stack[k].size;
    }
    for (std::size_t p = 0; p < c.parts.size(); ++p) {
      const CompositePart& part = c.parts[p];
      const PlannedTensor t = c.tensor(p, pos);
      const Bytes w = whole(t, seed);
      const Shape stored = part.stored_shape(), ss = row_major(stored);
      const std::size_t r = stored.size();
      for (std::uint64_t e = 0; e < numel(part.source.shape); ++e) {
        Shape x(r);  // within the source box
        for (std::uint64_t f = e, d = r; d-- > 0;) {
          x[d] = f % part.source.shape[d];
          f /= part.source.shape[d];
        }
        std::uint64_t src = 0, dst = 0;
        for (std::size_t d = 0; d < r; ++d) {
          std::uint64_t row = part.source.offset[d] + x[d];
          if (d == 0) row = part.rows.source_row(row);
          src += row * ss[d];
        }
        for (std::size_t k = 0; k < K; ++k) dst += pos[k] * gs[c.stack_dim(k)];
        for (std::size_t d = 0; d < ns; ++d) {
          const std::uint64_t within = d < ns - r ? 0 : x[d - (ns - r)];
          dst += (part.at[d] + within) * slice_strides[d];
        }
        std::memcpy(out.data() + dst * es, w.data() + src * es, es);
      }
    }
  }
  return out;
}

enum class Runner { host, grid };

void run(const std::vector<FillJob>& jobs, Runner how) {
  if (jobs.empty()) return;
  if (how == Runner::host) {
    auto be = make_host_backend(2);
    be->fill(jobs);
  } else {
    grid::fill_grid_simulated(jobs, 3, 32);
  }
}

// Fills `box` into a region padded by `pad` elements in every dimension but the last (0: dense) and
// checks every element against `want` (the whole composite) and that no padding byte changed.
void check_box(const Composite& c, const Bytes& want, const Box& box, std::uint64_t pad, Runner how, std::uint64_t seed) {
  const std::uint64_t es = dtype_size(c.dtype);
  const std::size_t n = box.shape.size();
  Shape padded = box.shape;
  for (std::size_t d = 0; d + 1 < n; ++d) padded[d] += pad;
  if (n > 0 && pad > 0) padded[n - 1] += pad;  // rows wider than the box: row stride > extent
  const Shape strides = row_major(padded);
  Bytes buf(numel(padded) * es + es, 0x5a);
  std::vector<FillJob> jobs;
  composite_fill_jobs(c, box, Region{buf.data(), pad ? strides : Shape{}}, seed, jobs);
  run(jobs, how);
  const Shape gs = row_major(c.shape), bs = pad ? strides : row_major(box.shape);
  std::vector<bool> written(buf.size() / es, false);
  for (std::uint64_t e = 0; e < box.numel(); ++e) {
    const auto [g, l] = layerinit::testing::box_element(box, e, gs, bs);
    written[l] = true;
    ASSERT_EQ(std::memcmp(buf.data() + l * es, want.data() + g * es, es), 0)
        << "box at " << shape_string(box.offset) << " of " << shape_string(box.shape) << ", element " << e << ", pad " << pad;
  }
  for (std::uint64_t l = 0; l < written.size(); ++l)
    if (!written[l])
      for (std::uint64_t b = 0; b < es; ++b)
        ASSERT_EQ(buf[l * es + b], 0x5a) << "wrote outside box at " << shape_string(box.offset) << " of " << shape_string(box.shape);
}

// Every box of a grid of offsets and extents (uneven ones included), then random ones, both runners,
// dense and strided regions.
void check_all_boxes(const Composite& c, std::uint64_t seed, int random_boxes = 60) {
  c.validate();
  const Bytes want = expected(c, seed);
  const std::size_t n = c.shape.size();
  std::mt19937_64 rng(n * 7919 + c.parts.size());
  std::vector<Box> boxes{whole_box(c.shape)};
  for (int i = 0; i < random_boxes; ++i) {
    Box b{Shape(n), Shape(n)};
    for (std::size_t d = 0; d < n; ++d) {
      b.offset[d] = rng() % (c.shape[d] + 1);
      b.shape[d] = rng() % (c.shape[d] - b.offset[d] + 1);
      if (b.shape[d] == 0 && rng() % 4 != 0) b.shape[d] = c.shape[d] - b.offset[d];  // few empty boxes
    }
    boxes.push_back(b);
  }
  // The pieces DTensor's Shard(d) gives over 3 ranks in each dimension (uneven: trailing ones smaller).
  for (std::size_t d = 0; d < n; ++d)
    for (std::uint64_t rank = 0; rank < 3; ++rank) boxes.push_back(split_box(whole_box(c.shape), d, 3, rank));
  for (const Box& b : boxes)
    for (Runner how : {Runner::host, Runner::grid})
      for (std::uint64_t pad : {0, 2}) {
        SCOPED_TRACE(how == Runner::host ? "host" : "grid");
        check_box(c, want, b, pad, how, seed);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

const FillSpec kNormal = FillSpec::normal(0, 0.02);

}  // namespace

// torchtitan's Llama3StateDictAdapter._reverse_permute (from_hf): w.view(H, 2, hd / 2, D)
// .transpose(1, 2).reshape(H * hd, D): output row (h, i, j) = h * hd + 2 i + j is input row (h, j, i)
// = h * hd + j * hd / 2 + i.
TEST(Composite, RopeInterleaveIsTorchtitansReversePermute) {
  for (std::uint64_t hd : {2, 4, 8, 128})
    for (std::uint64_t heads : {1, 3}) {
      const RowPermutation p = RowPermutation::rope_interleave(hd);
      std::vector<bool> hit(heads * hd, false);
      for (std::uint64_t h = 0; h < heads; ++h)
        for (std::uint64_t i = 0; i < hd / 2; ++i)
          for (std::uint64_t j = 0; j < 2; ++j) {
            const std::uint64_t out = h * hd + 2 * i + j, in = h * hd + j * (hd / 2) + i;
            EXPECT_EQ(p.source_row(out), in) << "hd " << hd << ", row " << out;
            hit[in] = true;
          }
      for (bool b : hit) EXPECT_TRUE(b);  // a permutation
    }
  EXPECT_EQ(RowPermutation{}.source_row(17), 17u);
  EXPECT_EQ(parse_row_permutation("rope_interleave(64)"), RowPermutation::rope_interleave(64));
  EXPECT_EQ(parse_row_permutation("none"), RowPermutation{});
  EXPECT_EQ(RowPermutation::rope_interleave(64).describe(), "rope_interleave(64)");
  for (const char* bad : {"rope_interleave()", "rope_interleave(-2)", "rope_interleave(x)", "interleave(4)", ""})
    EXPECT_THROW(parse_row_permutation(bad), std::invalid_argument) << bad;
}

// tensors() lists what a composite holds, once each; whole() is one tensor as stored, nothing more.
TEST(Composite, TensorsAndWholeSayWhatItHolds) {
  const PlannedTensor q = tensor("q", {4, 2}, DType::f32, FillSpec::constant(1));
  const PlannedTensor k = tensor("k", {2, 2}, DType::f32, FillSpec::constant(1));
  EXPECT_TRUE(whole_tensor(q).whole());
  EXPECT_EQ(whole_tensor(q).tensor_names(), std::vector<std::string>{"q"});
  const PlannedTensor qk[] = {q, k}, qq[] = {q, q};
  EXPECT_FALSE(concatenate(qk, 0).whole());
  EXPECT_EQ(concatenate(qk, 0).tensor_names(), (std::vector<std::string>{"q", "k"}));
  EXPECT_EQ(concatenate(qq, 1).tensor_names(), std::vector<std::string>{"q"});
  EXPECT_FALSE(whole_tensor(tensor("w", {4, 2}, DType::f32, FillSpec::constant(1), /*transposed=*/true)).whole());
  const RowPermutation rope[] = {RowPermutation::rope_interleave(2)};
  EXPECT_FALSE(concatenate(std::span(qk, 1), 0, rope).whole());
  CompositePart layer = whole_part(q, {0, 0});
  layer.name = "layers.{0}.q";
  layer.fills = {FillRun{3, FillSpec::constant(1)}};
  const Composite stacked = concatenate({layer}, 0, {StackAxis{3, 1}});
  EXPECT_FALSE(stacked.whole());
  EXPECT_EQ(stacked.tensor_names(), (std::vector<std::string>{"layers.1.q", "layers.2.q", "layers.3.q"}));
  Composite box = whole_tensor(q);
  box.parts[0].source = Box{{2, 0}, {2, 2}};  // rows 2..3 of q
  box.shape = {2, 2};
  EXPECT_FALSE(box.whole());
}

TEST(Composite, NameTemplatesWriteEachAxisIndex) {
  const std::vector<std::uint64_t> idx{3, 17};
  EXPECT_EQ(expand_template("model.layers.{0}.mlp.experts.{1}.w1.weight", idx), "model.layers.3.mlp.experts.17.w1.weight");
  EXPECT_EQ(expand_template("a{{b}}.{1}.{0}", idx), "a{b}.17.3");
  EXPECT_EQ(escape_template("x{y}"), "x{{y}}");
  EXPECT_EQ(expand_template(escape_template("odd{0}name}"), idx), "odd{0}name}");
  for (const char* bad : {"a{2}", "a{", "a}b", "a{x}", "a{}"}) EXPECT_THROW(expand_template(bad, idx), std::invalid_argument) << bad;
}

TEST(Composite, BoxFillJobsFillTheOneElementOfA0DTensor) {
  const PlannedTensor p = tensor("scale", {}, DType::f32, FillSpec::constant(3.5));
  float v = 7.f;
  std::vector<FillJob> jobs;
  box_fill_jobs(p, Box{}, &v, 1, jobs);
  ASSERT_EQ(jobs.size(), 1u);
  run(jobs, Runner::host);
  EXPECT_EQ(v, 3.5f);
  const Composite c = whole_tensor(tensor("scale", {}, DType::bf16, kNormal));
  check_all_boxes(c, 9);
}

// A tensor of zero elements (DeepseekV3MoE's shared experts at n_shared_experts 0, [0, 64]) is a
// composite too, of parts of zero elements, and its fill writes nothing.
TEST(Composite, ZeroElementTensorsAreCompositesWithNothingToFill) {
  const Composite c = whole_tensor(tensor("w", {0, 64}, DType::bf16, FillSpec::constant(0.0)));
  EXPECT_EQ(c.shape, (Shape{0, 64}));
  EXPECT_EQ(composite_from_text(composite_to_text(c)).shape, (Shape{0, 64}));
  const Composite two = concatenate(std::vector{tensor("a", {0, 64}, DType::bf16, kNormal), tensor("b", {0, 64}, DType::bf16, kNormal)}, 0);
  EXPECT_EQ(two.shape, (Shape{0, 64}));
  std::vector<FillJob> jobs;
  float sentinel = 7.f;
  box_fill_jobs(tensor("w", {0, 64}, DType::f32, FillSpec::constant(1.0)), whole_box({0, 64}), &sentinel, 4, jobs);
  run(jobs, Runner::host);
  EXPECT_EQ(sentinel, 7.f);
}

TEST(Composite, RegionJobsBreakRunsOnlyWhereTheStridesDo) {
  const PlannedTensor p = tensor("w", {6, 5, 8}, DType::bf16, kNormal);
  std::vector<std::uint16_t> buf(1000);
  auto count = [&](const Box& b, Shape strides) {
    std::vector<FillJob> jobs;
    region_fill_jobs(p, b, Region{buf.data(), std::move(strides)}, 3, jobs);
    return jobs.size();
  };
  const Box all = whole_box(p.memory_shape);
  EXPECT_EQ(count(all, {}), 1u);
  EXPECT_EQ(count(all, {40, 8, 1}), 1u);   // dense strides
  EXPECT_EQ(count(all, {50, 8, 1}), 1u);   // a gap after each [5, 8] block: one job, its runs 50 apart at dst
  EXPECT_EQ(count(all, {60, 12, 1}), 6u);  // rows 12 apart: one job per index of dim 0, its runs the rows
  EXPECT_EQ(count(all, {400, 80, 1}), 6u); // a slice of a stack [6, 5, 10, 8] at axis 2: one job per index of dim 0
  EXPECT_EQ(count(Box{{0, 1, 0}, {6, 3, 8}}, {50, 8, 1}), 1u);  // rows 1..3 of each block: runs of 24
  EXPECT_EQ(count(Box{{0, 0, 2}, {6, 5, 4}}, {50, 8, 1}), 6u);  // a partial last dimension: one job per block, not per row
  // A box of columns 2..5 (row-parallel) written densely is one job of 30 runs.
  EXPECT_EQ(count(Box{{0, 0, 2}, {6, 5, 4}}, {}), 1u);
  // Extents of 1 never break density, whatever their stride.
  EXPECT_EQ(count(Box{{2, 0, 0}, {1, 5, 8}}, {999, 8, 1}), 1u);
  EXPECT_EQ(count(all, {80, 16, 2}), 30u);  // last dimension strided: one job per row, its runs single elements
  EXPECT_THROW(count(all, {8, 1}), layerinit::logic_error);      // stride count: misuse
  EXPECT_THROW(count(Box{{0, 0, 4}, {6, 5, 5}}, {}), std::invalid_argument);  // outside
}

// filter_vmap / nnx.vmap stacking and the stacked layout's [L, E, ...] buffers: one tensor per stack
// position, named from a template, each with its own fill (depth-scaled recipes).
TEST(Composite, StackedLayersAndExpertsHoldEachPositionsTensor) {
  Composite c;
  c.dtype = DType::bf16;
  c.stack = {{3, 2}, {2, 0}};  // layers 2..4 (a model whose first layer is 2), experts 0..1
  CompositePart part = whole_part(tensor("x", {5, 12}, DType::bf16, kNormal), {0, 0});
  part.name = "model.layers.{0}.mlp.experts.{1}.up_proj.weight";
  part.fills = {{2, FillSpec::normal(0, 0.5)}, {3, FillSpec::trunc_normal(0, 1, -1, 1.5)}, {1, FillSpec::uniform(-1, 2)}};
  c.parts = {part};
  c.shape = {3, 2, 5, 12};
  const PlannedTensor t = c.tensor(0, std::vector<std::uint64_t>{1, 1});
  EXPECT_EQ(t.name, "model.layers.3.mlp.experts.1.up_proj.weight");
  EXPECT_EQ(t.fill, FillSpec::trunc_normal(0, 1, -1, 1.5));  // position 3: the second run
  check_all_boxes(c, 11);
  // The whole [L, E, ...] buffer: one job per position.
  std::vector<std::uint16_t> buf(numel(c.shape));
  std::vector<FillJob> jobs;
  composite_fill_jobs(c, whole_box(c.shape), Region{buf.data(), {}}, 11, jobs);
  EXPECT_EQ(jobs.size(), 6u);
}

// transformers 5's fused experts: gate_up_proj [E, 2F, H] is cat(gate, up) of each expert along 1,
// down_proj [E, H, F] each expert's down; a stacked JAX leaf of them adds [L] in front.
TEST(Composite, FusedGateUpExpertsCrossPartBoundaries) {
  const std::uint64_t E = 3, F = 5, H = 9;
  for (DType t : {DType::bf16, DType::f32}) {
    Composite c;
    c.dtype = t;
    c.stack = {{2, 0}, {E, 0}};
    c.shape = {2, E, 2 * F, H};
    CompositePart gate = whole_part(tensor("g", {F, H}, t, kNormal), {0, 0});
    gate.name = "model.layers.{0}.mlp.experts.{1}.gate_proj.weight";
    gate.fills = {{2 * E, kNormal}};
    CompositePart up = gate;
    up.name = "model.layers.{0}.mlp.experts.{1}.up_proj.weight";
    up.at = {F, 0};
    up.fills = {{E, FillSpec::normal(0, 0.1)}, {E, FillSpec::normal(0, 0.2)}};
    c.parts = {gate, up};
    SCOPED_TRACE(std::string(dtype_name(t)));
    check_all_boxes(c, 5);
  }
}

// Flax NNX / JAX kernels are [in, out]: a fused gate-up kernel [D, 2F] is [gate^T | up^T], the parts
// concatenated along dimension 1 of their stored (transposed) shapes.
TEST(Composite, TransposedPartsConcatenatedAlongColumns) {
  const std::uint64_t D = 7, F = 6;
  const PlannedTensor parts[] = {tensor("model.layers.0.mlp.gate_proj.weight", {F, D}, DType::f16, kNormal, true),
                                 tensor("model.layers.0.mlp.up_proj.weight", {F, D}, DType::f16, FillSpec::uniform(-1, 1), true)};
  const Composite c = concatenate(parts, 1);
  EXPECT_EQ(c.shape, (Shape{D, 2 * F}));
  EXPECT_EQ(c.parts[1].at, (Shape{0, F}));
  check_all_boxes(c, 4);
}

// torchtitan's llama3 fused wqkv: [q; k; v] along dimension 0, q and k rows in the interleaved RoPE
// layout (from_hf's _reverse_permute), v as it is.
TEST(Composite, FusedQkvWithInterleavedRopeRows) {
  const std::uint64_t heads = 4, kv = 2, hd = 4, D = 11;
  for (DType t : {DType::bf16, DType::f32}) {
    const PlannedTensor qkv[] = {tensor("model.layers.1.self_attn.q_proj.weight", {heads * hd, D}, t, kNormal),
                                 tensor("model.layers.1.self_attn.k_proj.weight", {kv * hd, D}, t, FillSpec::normal(0, 0.5)),
                                 tensor("model.layers.1.self_attn.v_proj.weight", {kv * hd, D}, t, FillSpec::uniform(-1, 1))};
    const RowPermutation rows[] = {RowPermutation::rope_interleave(hd), RowPermutation::rope_interleave(hd), {}};
    const Composite c = concatenate(qkv, 0, rows);
    EXPECT_EQ(c.shape, (Shape{(heads + 2 * kv) * hd, D}));
    SCOPED_TRACE(std::string(dtype_name(t)));
    check_all_boxes(c, 21, 100);
    // Whole and dense: q and k are one job per pair of rows (rows 2i, 2i + 1 are source rows i and
    // i + hd / 2), v one job.
    std::vector<unsigned char> buf(numel(c.shape) * dtype_size(t));
    std::vector<FillJob> jobs;
    composite_fill_jobs(c, whole_box(c.shape), Region{buf.data(), {}}, 21, jobs);
    EXPECT_EQ(jobs.size(), (heads * hd + kv * hd) / 2 + 1);
    EXPECT_EQ(jobs[0].runs, 2u);
    EXPECT_EQ(jobs[0].stride, hd / 2 * D);
  }
}

// Regions travel with their tensor's elements wherever a part puts them: stacked positions with runs
// of fills, transposed parts side by side, rows in torchtitan's interleaved RoPE order (a permuted
// part with regions is filled row by row), on the host and on the CUDA kernel's simulated grid.
TEST(Composite, RegionsMoveWithTheirElements) {
  const std::vector<FillRegion> regions = {{{1, 2}, {3, 5}, FillSpec::uniform(-1, 1)},
                                           {{2, 0}, {1, 8}, FillSpec::constant(0)},
                                           {{0, 6}, {5, 1}, FillSpec::trunc_normal(0.5, 0.2, 0.2, 0.9)}};
  {
    Composite c;
    c.dtype = DType::bf16;
    c.stack = {{3, 2}, {2, 0}};
    CompositePart part = whole_part(tensor("x", {5, 12}, DType::bf16, kNormal), {0, 0});
    part.name = "model.layers.{0}.mlp.experts.{1}.up_proj.weight";
    part.fills = {{2, FillSpec::normal(0, 0.5)}, {3, FillSpec::trunc_normal(0, 1, -1, 1.5)}, {1, FillSpec::uniform(-1, 2)}};
    part.regions = regions;
    c.parts = {part};
    c.shape = {3, 2, 5, 12};
    EXPECT_EQ(c.tensor(0, std::vector<std::uint64_t>{2, 1}).regions.size(), 3u);
    SCOPED_TRACE("stacked");
    check_all_boxes(c, 11);
  }
  {
    PlannedTensor g = tensor("gate", {6, 9}, DType::f16, kNormal, true), u = tensor("up", {6, 9}, DType::f16, kNormal, true);
    for (const FillRegion& r : regions) g.regions.push_back({r, std::nullopt});
    const PlannedTensor parts[] = {g, u};
    const Composite c = concatenate(parts, 1);
    EXPECT_EQ(c.parts[0].regions, regions);
    EXPECT_TRUE(c.parts[1].regions.empty());
    SCOPED_TRACE("transposed");
    check_all_boxes(c, 4);
  }
  for (DType t : {DType::bf16, DType::f32}) {
    const std::uint64_t hd = 4, D = 11;
    PlannedTensor q = tensor("q", {4 * hd, D}, t, kNormal), k = tensor("k", {2 * hd, D}, t, FillSpec::normal(0, 0.5));
    for (const FillRegion& r : regions) q.regions.push_back({r, std::nullopt});
    k.regions.push_back({{{5, 3}, {2, 8}, FillSpec::constant(2)}, std::nullopt});
    const PlannedTensor qk[] = {q, k};
    const RowPermutation rows[] = {RowPermutation::rope_interleave(hd), RowPermutation::rope_interleave(hd)};
    const Composite c = concatenate(qk, 0, rows);
    EXPECT_EQ(composite_from_text(composite_to_text(c)), c);
    SCOPED_TRACE("rope " + std::string(dtype_name(t)));
    check_all_boxes(c, 21, 100);
  }
}

// torchtitan's GQA-grouped wqkv ([n_kv, heads_per_kv + 2, hd, D]: each kv group's q heads, then its k
// head, then its v head): parts that are boxes of their tensors, some row-permuted.
TEST(Composite, GroupedQkvPartsAreBoxesOfTheirTensors) {
  const std::uint64_t kv = 2, per = 3, hd = 4, D = 6;
  const PlannedTensor q = tensor("q", {kv * per * hd, D}, DType::bf16, kNormal);
  const PlannedTensor k = tensor("k", {kv * hd, D}, DType::bf16, FillSpec::normal(1, 0.5));
  const PlannedTensor v = tensor("v", {kv * hd, D}, DType::bf16, FillSpec::uniform(-1, 1));
  Composite c;
  c.dtype = DType::bf16;
  c.shape = {kv * (per + 2) * hd, D};
  for (std::uint64_t g = 0; g < kv; ++g) {
    const std::uint64_t base = g * (per + 2) * hd;
    CompositePart pq = whole_part(q, {base, 0}, RowPermutation::rope_interleave(hd));
    pq.source = Box{{g * per * hd, 0}, {per * hd, D}};
    CompositePart pk = whole_part(k, {base + per * hd, 0}, RowPermutation::rope_interleave(hd));
    pk.source = Box{{g * hd, 0}, {hd, D}};
    CompositePart pv = whole_part(v, {base + (per + 1) * hd, 0});
    pv.source = Box{{g * hd, 0}, {hd, D}};
    c.parts.insert(c.parts.end(), {pq, pk, pv});
  }
  check_all_boxes(c, 8, 100);
  // concatenate in kv groups says the same: slab g of q, of k, of v, for each g in turn.
  const PlannedTensor qkv[] = {q, k, v};
  std::vector<CompositePart> parts;
  for (const PlannedTensor& t : qkv)
    parts.push_back(whole_part(t, {}, &t == &qkv[2] ? RowPermutation{} : RowPermutation::rope_interleave(hd)));
  EXPECT_EQ(concatenate(parts, 0, {}, kv), c);
  EXPECT_EQ(concatenate(parts, 0, {}, 1), concatenate(qkv, 0, std::vector{parts[0].rows, parts[1].rows, parts[2].rows}));
  EXPECT_THROW(concatenate(parts, 0, {}, 3), std::invalid_argument);  // 8 rows of k in 3 groups
  EXPECT_THROW(concatenate(parts, 0, {}, 0), std::invalid_argument);
}

// torchtitan's fused w13 [2, F, D] (gate, up = w13.unbind(0)) stacked by a vmap: parts of rank 2 in a
// slice of rank 3 sit in its last dimensions.
TEST(Composite, PartsOfLowerRankSitInTheLastDimensions) {
  const std::uint64_t F = 5, D = 6;
  Composite c;
  c.dtype = DType::bf16;
  c.stack = {{3, 0}};
  c.shape = {3, 2, F, D};
  CompositePart gate = whole_part(tensor("g", {F, D}, DType::bf16, kNormal), {0, 0, 0});
  gate.name = "layers.{0}.feed_forward.w1.weight";
  gate.fills = {{3, kNormal}};
  CompositePart up = gate;
  up.name = "layers.{0}.feed_forward.w3.weight";
  up.at = {1, 0, 0};
  c.parts = {gate, up};
  check_all_boxes(c, 2);
}

// Flax linen's nn.scan(..., variable_axes={"params": 1}) (MaxText's param_scan_axis=1): a kernel
// [embed, L, mlp] whose [:, l, :] is layer l's [embed, mlp]. Filled whole or by boxes, boxes cutting
// through the layer dimension included, every element is its layer's tensor's, filled whole on its own.
TEST(Composite, LayerAxisAtDimension1HoldsEachLayersTensor) {
  const std::uint64_t E = 3, L = 4, M = 5;
  for (DType t : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Composite c;
    c.dtype = t;
    c.stack = {{L, 2, 1}};  // layers 2..5 (a model whose first layer is 2), at dimension 1
    c.shape = {E, L, M};
    CompositePart part = whole_part(tensor("x", {E, M}, t, kNormal), {0, 0});
    part.name = "layers.{0}.mlp.wi.kernel";
    part.fills = {{1, FillSpec::normal(0, 0.5)}, {2, kNormal}, {1, FillSpec::uniform(-1, 2)}};
    part.regions = {{{1, 1}, {1, 3}, FillSpec::constant(0.25)}};
    c.parts = {part};
    c.validate();
    EXPECT_FALSE(c.leading());
    EXPECT_EQ(c.stack_dim(0), 1u);
    EXPECT_EQ(c.slice_shape(), (Shape{E, M}));
    EXPECT_EQ(c.slices(), L);
    EXPECT_EQ(c.tensor(0, std::vector<std::uint64_t>{2}).name, "layers.4.mlp.wi.kernel");
    std::vector<Bytes> layer;  // each layer's tensor filled whole, on its own
    for (std::uint64_t l = 0; l < L; ++l) layer.push_back(whole(c.tensor(0, std::vector<std::uint64_t>{l}), 7));
    ASSERT_NE(layer[0], layer[1]);
    const std::uint64_t es = dtype_size(t);
    const std::vector<Box> boxes = {whole_box(c.shape),     Box{{0, 1, 0}, {E, 2, M}}, Box{{1, 0, 2}, {2, L, 3}},
                                    Box{{0, 3, 0}, {E, 1, M}}, Box{{2, 1, 4}, {1, 3, 1}}, Box{{0, 0, 0}, {E, L, 1}},
                                    Box{{1, 2, 0}, {1, 1, M}}};
    for (const Box& b : boxes)
      for (Runner how : {Runner::host, Runner::grid}) {
        Bytes buf(b.numel() * es, 0x5a);
        std::vector<FillJob> jobs;
        composite_fill_jobs(c, b, Region{buf.data(), {}}, 7, jobs);
        run(jobs, how);
        for (std::uint64_t e = 0; e < b.numel(); ++e) {
          const std::uint64_t i = b.offset[0] + e / (b.shape[1] * b.shape[2]), l = b.offset[1] + e / b.shape[2] % b.shape[1],
                              m = b.offset[2] + e % b.shape[2];
          ASSERT_EQ(std::memcmp(buf.data() + e * es, layer[l].data() + (i * M + m) * es, es), 0)
              << (how == Runner::host ? "host" : "grid") << ", box at " << shape_string(b.offset) << " of "
              << shape_string(b.shape) << ": element [" << i << ", " << l << ", " << m << "]";
        }
      }
    check_all_boxes(c, 7);  // random boxes, each dimension's shards, strided regions
  }
  // The whole kernel, dense and without regions: one job per layer, its E rows L * M apart at dst.
  Composite c;
  c.stack = {{L, 0, 1}};
  c.shape = {E, L, M};
  CompositePart part = whole_part(tensor("x", {E, M}, DType::f32, kNormal), {0, 0});
  part.name = "layers.{0}.w";
  part.fills = {{L, kNormal}};
  c.parts = {part};
  std::vector<float> buf(E * L * M);
  std::vector<FillJob> jobs;
  composite_fill_jobs(c, whole_box(c.shape), Region{buf.data(), {}}, 1, jobs);
  ASSERT_EQ(jobs.size(), L);
  for (std::uint64_t l = 0; l < L; ++l) {
    EXPECT_EQ(jobs[l].runs, E);
    EXPECT_EQ(jobs[l].dst_stride, L * M);
    EXPECT_EQ(jobs[l].dst, buf.data() + l * M);
  }
}

// Any distinct dimensions: two axes apart, axes in another order than their dimensions, an axis in
// the last dimension (the slice's last dimension strided), under transposed, concatenated and
// row-permuted parts.
TEST(Composite, StackAxesSitAtAnyDistinctDimensions) {
  auto stacked = [](std::vector<StackAxis> stack, Shape shape, const PlannedTensor& t) {
    Composite c;
    c.dtype = t.dtype;
    c.stack = std::move(stack);
    c.shape = std::move(shape);
    CompositePart part = whole_part(t, Shape(t.memory_shape.size(), 0));
    part.name = c.stack.size() == 1 ? "layers.{0}.w" : "layers.{0}.experts.{1}.w";
    part.fills = {{1, FillSpec::normal(0, 0.5)}, {c.slices() - 1, FillSpec::uniform(-1, 2)}};
    c.parts = {part};
    return c;
  };
  const PlannedTensor x = tensor("x", {3, 4}, DType::bf16, kNormal);
  {
    SCOPED_TRACE("dims 0 and 2");
    const Composite c = stacked({{2, 0}, {3, 0, 2}}, {2, 3, 3, 4}, x);
    EXPECT_EQ(c.slice_shape(), (Shape{3, 4}));
    check_all_boxes(c, 3);
  }
  {
    SCOPED_TRACE("axis 0 at dim 2, axis 1 at dim 0");
    check_all_boxes(stacked({{2, 1, 2}, {3, 0, 0}}, {3, 3, 2, 4}, x), 3);
  }
  {
    SCOPED_TRACE("the last dimension");
    const Composite c = stacked({{2, 0, 2}}, {3, 4, 2}, x);
    check_all_boxes(c, 3);
    check_all_boxes(stacked({{2, 0, 2}}, {4, 3, 2}, tensor("x", {3, 4}, DType::f32, kNormal, true)), 3);
  }
  {
    // A scanned fused gate-up kernel [D, L, 2F]: [gate^T | up^T] of each layer, concatenated under an
    // axis at dimension 1.
    SCOPED_TRACE("concatenated, transposed");
    const std::uint64_t D = 7, F = 6, L = 3;
    std::vector<CompositePart> parts;
    for (const char* kind : {"gate", "up"}) {
      CompositePart p = whole_part(tensor(kind, {F, D}, DType::f16, kNormal, true), {});
      p.name = std::string("layers.{0}.mlp.") + kind;
      p.fills = {{L, kind[0] == 'g' ? kNormal : FillSpec::uniform(-1, 1)}};
      parts.push_back(p);
    }
    const Composite c = concatenate(parts, 1, {{L, 0, 1}});
    EXPECT_EQ(c.shape, (Shape{D, L, 2 * F}));
    EXPECT_EQ(c.parts[1].at, (Shape{0, F}));
    check_all_boxes(c, 4);
  }
  {
    // torchtitan's fused wqkv rows, a layer axis at dimension 1: [(H + 2 K) hd, L, D].
    SCOPED_TRACE("row-permuted");
    const std::uint64_t hd = 4, D = 5, L = 2;
    std::vector<CompositePart> parts;
    for (const auto& [kind, rows] : {std::pair{"q", 4 * hd}, std::pair{"k", 2 * hd}}) {
      CompositePart p = whole_part(tensor(kind, {rows, D}, DType::f32, kNormal), {}, RowPermutation::rope_interleave(hd));
      p.name = std::string("layers.{0}.") + kind;
      p.fills = {{L, kNormal}};
      parts.push_back(p);
    }
    const Composite c = concatenate(parts, 0, {{L, 0, 1}});
    EXPECT_EQ(c.shape, (Shape{6 * hd, L, D}));
    check_all_boxes(c, 21, 100);
  }
}

// The text of a composite in the leading layout is as it was before axes had a dimension; off it,
// each axis not at its leading dimension says where it is.
TEST(Composite, TextCarriesADimOnlyOffTheLeadingLayout) {
  Composite leading;
  leading.stack = {{4, 0}};
  leading.shape = {4, 3, 5};
  CompositePart part = whole_part(tensor("x", {3, 5}, DType::f32, kNormal), {0, 0});
  part.name = "layers.{0}.w";
  part.fills = {{4, kNormal}};
  leading.parts = {part};
  leading.validate();
  const std::string text = composite_to_text(leading);
  EXPECT_EQ(text,
            "{\"layerinit_composite\":1,\"dtype\":\"fp32\",\"shape\":[4,3,5],\"stack\":[{\"size\":4,\"first\":0}],\"parts\":"
            "[{\"name\":\"layers.{0}.w\",\"shape\":[3,5],\"at\":[0,0],\"fill\":\"normal(0,0.02)\"}]}");
  EXPECT_TRUE(leading.leading());
  EXPECT_EQ(composite_from_text(text).stack[0].dim, std::nullopt);
  Composite explicit_leading = leading;
  explicit_leading.stack[0].dim = 0;  // the same layout said outright
  EXPECT_EQ(explicit_leading, leading);
  EXPECT_EQ(composite_to_text(explicit_leading), text);

  Composite scanned = leading;
  scanned.stack[0].dim = 1;
  scanned.shape = {3, 4, 5};
  EXPECT_NE(scanned, leading);
  const std::string st = composite_to_text(scanned);
  EXPECT_NE(st.find("\"stack\":[{\"size\":4,\"first\":0,\"dim\":1}]"), std::string::npos) << st;
  EXPECT_EQ(composite_from_text(st), scanned);
  EXPECT_EQ(composite_from_text(st).stack[0].dim, 1u);
  EXPECT_EQ(composite_to_text(composite_from_text(st)), st);

  Composite two = leading;
  two.stack = {{2, 0}, {3, 1, 2}};
  two.shape = {2, 3, 3, 5};
  two.parts[0].name = "layers.{0}.experts.{1}.w";
  two.parts[0].fills = {{6, kNormal}};
  const std::string tt = composite_to_text(two);
  EXPECT_NE(tt.find("\"stack\":[{\"size\":2,\"first\":0},{\"size\":3,\"first\":1,\"dim\":2}]"), std::string::npos) << tt;
  EXPECT_EQ(composite_from_text(tt), two);
  Composite swapped = two;
  swapped.stack = {{2, 0, 2}, {3, 1, 0}};
  swapped.shape = {3, 3, 2, 5};
  const std::string sw = composite_to_text(swapped);
  EXPECT_NE(sw.find("\"stack\":[{\"size\":2,\"first\":0,\"dim\":2},{\"size\":3,\"first\":1,\"dim\":0}]"), std::string::npos) << sw;
  EXPECT_EQ(composite_from_text(sw), swapped);
}

// Axes at one dimension, outside the shape, or whose size is not the shape's there: one line each,
// from validate(), the text and concatenate.
TEST(Composite, StackAxesAtABadDimensionAreRefused) {
  Composite c;
  c.stack = {{4, 0, 1}};
  c.shape = {3, 4, 5};
  CompositePart part = whole_part(tensor("x", {3, 5}, DType::f32, kNormal), {0, 0});
  part.name = "layers.{0}.w";
  part.fills = {{4, kNormal}};
  c.parts = {part};
  ASSERT_NO_THROW(c.validate());
  auto error_of = [](const Composite& bad) -> std::string {
    try {
      bad.validate();
    } catch (const spec_error& e) {
      EXPECT_EQ(e.source(), "composite");
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return e.what();
    }
    return "accepted";
  };
  Composite bad = c;
  bad.stack[0].dim = 3;
  EXPECT_EQ(error_of(bad), "composite: stack axis 0 at dimension 3 is outside shape [3, 4, 5]");
  bad.stack[0].dim = 2;
  EXPECT_EQ(error_of(bad), "composite: stack axis 0 has 4 positions but shape [3, 4, 5] says 5 at dimension 2");
  bad = c;
  bad.stack = {{4, 0, 1}, {3, 0, 1}};
  bad.shape = {3, 4, 5, 2};
  EXPECT_EQ(error_of(bad), "composite: stack axes 0 and 1 both at dimension 1");
  bad.stack = {{3, 0}, {4, 0, 0}};  // axis 0 at its leading dimension 0
  EXPECT_EQ(error_of(bad), "composite: stack axes 0 and 1 both at dimension 0");

  const std::string text = composite_to_text(c);
  auto text_error = [&](const std::string& from, const std::string& to) -> std::string {
    std::string t = text;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    try {
      composite_from_text(t);
    } catch (const spec_error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(text_error("\"dim\":1", "\"dim\":-1"), "composite: stack[0].dim: must be a non-negative integer");
  EXPECT_EQ(text_error("\"dim\":1", "\"dim\":7"), "composite: stack axis 0 at dimension 7 is outside shape [3, 4, 5]");
  EXPECT_EQ(text_error("\"dim\":1", "\"dim\":1,\"dim\":1"), "composite: stack[0].dim: duplicate key");
  EXPECT_EQ(text_error("\"dim\":1", "\"dim\":1,\"axis\":1"), "composite: stack[0].axis: unknown key (valid: size, first, dim)");
  EXPECT_EQ(text_error(",\"dim\":1", ""), "composite: stack axis 0 has 4 positions but shape [3, 4, 5] says 3");

  try {
    concatenate(std::vector{part}, 0, {{4, 0, 3}});
    ADD_FAILURE() << "accepted a stack axis past the shape";
  } catch (const spec_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "composite: stack axis 0 at dimension 3 is outside the 3 dimensions of a slice [3, 5] under 1 stack axis");
  }
}

TEST(Composite, TextRoundTripsAndItsSizeDoesNotGrowWithTheStack) {
  auto make = [](std::uint64_t L) {
    Composite c;
    c.dtype = DType::bf16;
    c.stack = {{L, 1}};
    c.shape = {L, 24, 16};
    const PlannedTensor q = tensor("q", {16, 16}, DType::bf16, FillSpec::trunc_normal_std(0, 0.02, -3, 3));
    CompositePart pq = whole_part(q, {0, 0}, RowPermutation::rope_interleave(8));
    pq.name = "model.layers.{0}.self_attn.q_proj.weight";
    pq.fills = {{L, q.fill}};
    CompositePart pk = whole_part(tensor("k", {16, 8}, DType::bf16, FillSpec::normal(0, 0.1), true), {16, 0});
    pk.name = "model.layers.{0}.self_attn.k_{{x}}.weight";
    pk.fills = {{L, FillSpec::normal(0, 0.02 / std::sqrt(2.0 * 3.0))}};
    c.parts = {pq, pk};
    c.validate();
    return c;
  };
  const Composite small = make(4), huge = make(1ull << 40);
  const std::string text = composite_to_text(small);
  EXPECT_EQ(composite_from_text(text), small);
  EXPECT_EQ(composite_to_text(composite_from_text(text)), text);
  EXPECT_EQ(composite_to_text(huge).size(), text.size() + 2 * 12);  // "4" -> "1099511627776" in shape and stack
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_NE(text.find("\"layerinit_composite\":1"), std::string::npos);
  EXPECT_NE(text.find("\"rows\":\"rope_interleave(8)\""), std::string::npos);
  EXPECT_NE(text.find("\"transposed\":true"), std::string::npos);
  // A depth-scaled fill prints exactly: 0.02 / sqrt(6) needs 17 digits.
  EXPECT_NE(text.find("normal(0,0.008164965809277261)"), std::string::npos) << text;

  // Runs of fills, and k placed as two boxes of its rows.
  Composite runs = small;
  runs.parts[0].fills = {{1, FillSpec::constant(-0.0)}, {3, FillSpec::uniform(1e-30, 0.1)}};
  runs.parts[1].source = Box{{0, 0}, {4, 16}};
  runs.parts.push_back(runs.parts[1]);
  runs.parts[2].source = Box{{4, 0}, {4, 16}};
  runs.parts[2].at = {20, 0};
  runs.validate();
  const std::string rt = composite_to_text(runs);
  EXPECT_EQ(composite_from_text(rt), runs);
  EXPECT_NE(rt.find("\"fill\":[[1,\"constant(-0)\"],[3,\"uniform(1e-30,0.1)\"]]"), std::string::npos) << rt;
  EXPECT_NE(rt.find("\"from\":[4,0],\"size\":[4,16]"), std::string::npos) << rt;

  // Regions, in the part's tensor's logical coordinates, each fill exactly.
  Composite regions = small;
  regions.parts[1].regions = {{{3, 0}, {1, 8}, FillSpec::constant(0)}, {{0, 0}, {2, 2}, FillSpec::normal(0.5, 0.123456789)}};
  regions.validate();
  const std::string rg = composite_to_text(regions);
  EXPECT_EQ(composite_from_text(rg), regions);
  EXPECT_NE(rg.find("\"regions\":[{\"offset\":[3,0],\"shape\":[1,8],\"fill\":\"constant(0)\"},{\"offset\":[0,0],"
                    "\"shape\":[2,2],\"fill\":\"normal(0.5,0.123456789)\"}]"),
            std::string::npos)
      << rg;
}

TEST(Composite, BadDescriptionsAreOneLineErrors) {
  const std::string good = composite_to_text(concatenate(
      std::vector{tensor("a", {2, 3}, DType::f32, kNormal), tensor("b", {4, 3}, DType::f32, kNormal)}, 0));
  ASSERT_EQ(good,
            "{\"layerinit_composite\":1,\"dtype\":\"fp32\",\"shape\":[6,3],\"parts\":[{\"name\":\"a\",\"shape\":[2,3],\"at\":[0,0],"
            "\"fill\":\"normal(0,0.02)\"},{\"name\":\"b\",\"shape\":[4,3],\"at\":[2,0],\"fill\":\"normal(0,0.02)\"}]}");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "malformed JSON"},
      {"[]", "must be a JSON object"},
      {with("\"layerinit_composite\":1", "\"layerinit_composite\":2"), "version 2 (this layerinit reads version 1)"},
      {with("\"dtype\":\"fp32\"", "\"dtype\":\"int8\""), "dtype 'int8' is unknown"},
      {with("\"shape\":[6,3]", "\"shape\":[7,3]"), "cover 18 of the 21 elements"},
      {with("\"shape\":[6,3]", "\"shape\":[6,-3]"), "shape[1]: must be a non-negative integer"},
      {with("\"shape\":[6,3]", "\"shape\":[6,3.0]"), "must be a non-negative integer"},
      {with("\"shape\":[6,3]", "\"shape\":[6,1e999]"), "at line 1, column 52: number overflow parsing '1e999'"},
      {with("\"at\":[2,0]", "\"at\":[1,0]"), "part 1 ('b') overlaps part 0 ('a')"},
      {with("\"at\":[2,0]", "\"at\":[3,0]"), "leaves the slice"},
      {with("\"at\":[2,0]", "\"at\":[2]"), "'at' [2] needs one entry per slice dimension"},
      {with("\"name\":\"b\"", "\"name\":\"b{0}\""), "{0} names no stack axis (0 axes)"},
      {with("\"name\":\"b\"", "\"name\":\"b}\""), "a lone '}'"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":\"normal(0,-1)\"}]"), "part 1 ('b'): fill 'normal(0, -1)' is invalid: std must be positive"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":\"gauss(0,1)\"}]"), "fill 'gauss' is unknown"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":[[2,\"normal(0,1)\"]]}]"), "fills for more than the stack's 1 positions"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":\"normal(0,0.02)\",\"rows\":\"rope_interleave(3)\"}]"),
       "the head size must be even"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":\"normal(0,0.02)\",\"rows\":\"rope_interleave(8)\"}]"),
       "4 rows are not whole heads of 8"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":\"normal(0,0.02)\",\"rows\":\"swap\"}]"), "row permutation 'swap' is unknown"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":\"normal(0,0.02)\",\"from\":[1,0]}]"), "lies outside the stored [4, 3]"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":\"normal(0,0.02)\",\"colour\":1}]"), "parts[1].colour: unknown key"},
      {with("\"fill\":\"normal(0,0.02)\"}]", "\"fill\":\"normal(0,0.02)\",\"fill\":\"normal(0,1)\"}]"), "parts[1].fill: duplicate key"},
      {with("\"parts\":[", "\"stack\":[{\"size\":2}],\"parts\":["), "stack axis 0 has 2 positions but shape [6, 3] says 6"},
      {with("\"parts\":[", "\"parts\":[[[[[[[[[[]]]]]]]]]],\"x\":["), "deeper than 8 levels"},
      {"{\"layerinit_composite\":1,\"dtype\":\"fp32\",\"shape\":[2],\"parts\":[]}", "no parts"},
  };
  for (const auto& [text, want] : cases) {
    try {
      composite_from_text(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const spec_error& e) {  // any other type escapes and fails the test
      const std::string msg = e.what();
      EXPECT_EQ(e.source(), "composite") << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << msg << "\n  wanted: " << want;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_EQ(msg.rfind("composite: ", 0), 0u) << msg;
    }
  }
  // In C++: a transposed part cannot be row-permuted, dtypes agree, every axis is named.
  Composite c = concatenate(std::vector{tensor("a", {4, 3}, DType::f32, kNormal, true)}, 0);
  c.parts[0].rows = RowPermutation::rope_interleave(2);
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.parts[0].rows = {};
  c.parts[0].dtype = DType::bf16;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.parts[0].dtype = DType::f32;
  c.stack = {{2, 0}};
  c.shape.insert(c.shape.begin(), 2);
  c.parts[0].fills = {{2, kNormal}};
  EXPECT_THROW(c.validate(), std::invalid_argument);  // the name has no {0}
  c.parts[0].name = "a.{0}";
  EXPECT_NO_THROW(c.validate());
  EXPECT_THROW(concatenate(std::vector{tensor("a", {4, 3}, DType::f32, kNormal), tensor("b", {4, 2}, DType::f32, kNormal)}, 0),
               std::invalid_argument);
  std::vector<FillJob> jobs;
  EXPECT_THROW(composite_fill_jobs(c, Box{{0, 0, 0}, {3, 3, 4}}, Region{}, 0, jobs), std::invalid_argument);
}

// The text is read by the spec's reader (init/json_read.hpp) with the format's own nesting limit, 8:
// deeper text and a repeated key are refused as the spec refuses them, one line naming the problem
// and where; the spec keeps its 64 levels.
TEST(Composite, TextNestedTooDeepOrWithARepeatedKeyIsRefusedAsTheSpecIs) {
  auto error_of = [](auto read, const std::string& text) -> std::string {
    try {
      read(text);
    } catch (const spec_error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return e.what();
    }
    return "accepted";
  };
  const auto composite = [](const std::string& t) { composite_from_text(t); };
  const auto spec = [](const std::string& t) { spec_from_json(t); };
  const std::string head = "{\"layerinit_composite\":1,\"dtype\":\"fp32\",\"shape\":[2],\"parts\":[],\"x\":";
  // 8 levels (the object and 7 arrays) pass the depth check, and the unknown key is what is wrong.
  EXPECT_EQ(error_of(composite, head + std::string(7, '[') + std::string(7, ']') + "}"),
            "composite: x: unknown key (valid: layerinit_composite, dtype, shape, stack, parts)");
  // A 9th is refused before parsing, at its bracket.
  EXPECT_EQ(error_of(composite, head + std::string(8, '[') + std::string(8, ']') + "}"),
            "composite: malformed JSON at line 1, column " + std::to_string(head.size() + 8) +
                ": nesting deeper than 8 levels");
  EXPECT_EQ(error_of(composite, "{\"layerinit_composite\":1,\"layerinit_composite\":1}"),
            "composite: layerinit_composite: duplicate key");
  EXPECT_EQ(error_of(composite, "{\"layerinit_composite\":1,\"dtype\":\"fp32\",\"shape\":[2],\"stack\":[{\"size\":2,"
                                "\"size\":2}],\"parts\":[]}"),
            "composite: stack[0].size: duplicate key");
  EXPECT_EQ(error_of(spec, std::string(64, '[') + std::string(64, ']')), "spec: top level: must be an object");
  EXPECT_EQ(error_of(spec, std::string(65, '[') + std::string(65, ']')),
            "spec: malformed JSON at line 1, column 65: nesting deeper than 64 levels");
}

TEST(Composite, TextOfAnotherVersionIsRefusedBeforeItsKeys) {
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"{\"layerinit_composite\":2,\"dtype\":\"fp32\",\"shape\":[1],\"parts\":[],\"new\":1}",
            "composite: layerinit_composite: version 2 (this layerinit reads version 1)"},
           {"{\"dtype\":\"fp32\"}", "composite: top level: missing key 'layerinit_composite'"},
           {"{\"layerinit_composite\":1,\"shape\":[1],\"parts\":[]}", "composite: top level: missing key 'dtype'"},
           {"{\"layerinit_composite\":1,\"dtype\":\"fp32\",\"shape\":[1],\"parts\":[],\"new\":1}",
            "composite: new: unknown key (valid: layerinit_composite, dtype, shape, stack, parts)"}}) {
    try {
      composite_from_text(text);
      ADD_FAILURE() << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
}
