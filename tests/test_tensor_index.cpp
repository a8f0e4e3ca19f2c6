// The tensor index (shard/tensor_index.hpp): every name a plan lists is found in memory independent of
// the layer count, and its fill jobs write the bytes the build writes: stacked [L, ...] and fused
// [L, E, ...] buffers box by box, transformers 5's fused experts, a fused QKV.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <layerinit/init/presets.hpp>
#include <layerinit/shard/tensor_index.hpp>
#include <layerinit/stacking/stack.hpp>

#include "box_util.hpp"
#include "region_util.hpp"

using namespace layerinit;

namespace {

struct Env {
  std::unique_ptr<backend> be = make_host_backend(2);
};

BuildOptions options(Layout layout, ExpertLayout experts, Orientation o, DType t = DType::bf16) {
  BuildOptions opts;
  opts.dtype = t;
  opts.seed = 13;
  opts.layout = layout;
  opts.experts = experts;
  opts.orientation = o;
  return opts;
}

// Fills `box` of `name` through the index into a buffer (padded rows when `strided`) and compares
// each element with the same element of `whole` (the built tensor's bytes, shape `global`).
void expect_box(const TensorIndex& index, const backend& be_ref, const std::string& name, const Shape& global,
                const unsigned char* whole, DType t, const Box& box, bool strided) {
  auto& be = const_cast<backend&>(be_ref);
  const std::uint64_t es = dtype_size(t);
  const std::size_t n = global.size();
  Shape padded = box.shape;
  if (strided && n > 0) padded[n - 1] += 3;
  const Shape strides = dense_strides(padded);
  std::vector<unsigned char> buf(numel(padded) * es + 1, 0x77);
  std::vector<FillJob> jobs;
  index.fill_jobs(name, box, Region{buf.data(), strided ? strides : Shape{}}, t, jobs);
  if (!jobs.empty()) be.fill(jobs);
  const Shape gs = dense_strides(global), bs = strided ? strides : dense_strides(box.shape);
  for (std::uint64_t e = 0; e < box.numel(); ++e) {
    const auto [g, l] = layerinit::testing::box_element(box, e, gs, bs);
    ASSERT_EQ(std::memcmp(buf.data() + l * es, whole + g * es, es), 0)
        << name << " box at " << shape_string(box.offset) << " of " << shape_string(box.shape) << ", element " << e;
  }
  ASSERT_EQ(buf.back(), 0x77) << name << ": wrote past the region";
}

std::vector<Box> boxes_of(const Shape& g) {
  std::vector<Box> out{whole_box(g)};
  for (std::size_t d = 0; d < g.size(); ++d)
    for (std::uint64_t rank = 0; rank < 3; ++rank) out.push_back(split_box(whole_box(g), d, 3, rank));
  if (g.size() >= 2) {  // a piece split in two dimensions, crossing layer (and expert) boundaries
    Box b = split_box(split_box(whole_box(g), 0, 2, 1), g.size() - 1, 3, 1);
    out.push_back(b);
  }
  return out;
}

}  // namespace

// Every stacked buffer, box by box (layers and experts split, inner dimensions uneven), equals the
// stacked build's bytes: depth-scaled fills (torchtitan) differ per layer, first_layer (DeepSeek-V3's
// dense layers) moves the names, in-out transposes the slices, regions cut the boxes.
TEST(TensorIndex, StackedBuffersFillAsTheStackedBuild) {
  Env env;
  for (const char* preset : {"llama-tiny", "mixtral-tiny", "deepseek-v3-tiny"})
    for (bool regions : {false, true})
    for (ExpertLayout experts : {ExpertLayout::stacked, ExpertLayout::per_expert})
      for (Orientation o : {Orientation::out_in, Orientation::in_out}) {
        SCOPED_TRACE(std::string(preset) + (regions ? " with regions" : "") + ", experts " +
                     std::string(expert_layout_name(experts)) + ", " + std::string(orientation_name(o)));
        // Regions (region_util.hpp) cut the boxes' jobs; test_regions checks the build against them.
        const ModelSpec spec = regions ? layerinit::testing::with_regions(make_preset(preset)) : make_preset(preset);
        const Builder b(spec, make_recipe("torchtitan"), options(Layout::stacked, experts, o), *env.be, env.be->memory());
        const TensorIndex index(b);
        const Model m = b.build();
        ASSERT_EQ(m.stacked.size(), index.stacked_layout().buffers.size());
        EXPECT_EQ(index.tensor_count(), spec.pre.size() + m.stacked.size() + spec.post.size());
        for (const Tensor& t : m.stacked) {
          const auto* whole = static_cast<const unsigned char*>(t.view.data);
          for (const Box& box : boxes_of(t.view.shape))
            for (bool strided : {false, true}) {
              expect_box(index, *env.be, t.view.name, t.view.shape, whole, t.view.dtype, box, strided);
              if (HasFatalFailure()) return;
            }
          const Composite c = index.composite(t.view.name);
          EXPECT_EQ(c.shape, t.view.shape);
          EXPECT_EQ(c.stack[0].first, spec.first_layer);
        }
        // A canonical layer name in the stacked layout is its slice.
        const auto views = unstack(m, spec);
        const TensorView& v = views.back().back();
        for (const Box& box : boxes_of(v.shape))
          expect_box(index, *env.be, v.name, v.shape, static_cast<const unsigned char*>(v.data), v.dtype, box, false);
        for (const Tensor& t : m.pre)
          expect_box(index, *env.be, t.view.name, t.view.shape, static_cast<const unsigned char*>(t.view.data), t.view.dtype,
                     whole_box(t.view.shape), true);
      }
}

// A name is read with its layer index: a spec of 2^40 layers is looked up, and one layer of its
// stacked buffers filled, without planning the others.
TEST(TensorIndex, LookupIsIndependentOfTheLayerCount) {
  Env env;
  ModelSpec spec = make_preset("llama-tiny");
  spec.num_layers = std::uint64_t{1} << 40;
  for (Layout layout : {Layout::per_layer, Layout::stacked}) {
    const Builder b(spec, make_recipe("hf"), options(layout, ExpertLayout::stacked, Orientation::out_in), *env.be, env.be->memory());
    const TensorIndex index(b);
    const auto p = index.planned("model.layers.1099511627775.self_attn.q_proj.weight");
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->shape, (Shape{64, 64}));
    EXPECT_FALSE(index.planned("model.layers.1099511627776.self_attn.q_proj.weight").has_value());
    EXPECT_FALSE(index.planned("model.layers.01.self_attn.q_proj.weight").has_value());
    EXPECT_FALSE(index.planned("model.layers.3.self_attn.x_proj.weight").has_value());
    EXPECT_TRUE(index.planned("lm_head.weight").has_value());
    if (layout == Layout::per_layer) {
      EXPECT_EQ(index.tensor_count(), spec.pre.size() + spec.post.size() + (std::uint64_t{1} << 40) * spec.layer.tensors.size());
    } else {
      // One layer's slice of [2^40, 64, 64]: one layer planned, one job.
      std::vector<std::uint16_t> buf(64 * 64);
      std::vector<FillJob> jobs;
      index.fill_jobs("model.layers.self_attn.q_proj.weight", Box{{(std::uint64_t{1} << 40) - 1, 0, 0}, {1, 64, 64}},
                      Region{buf.data(), {}}, DType::bf16, jobs);
      ASSERT_EQ(jobs.size(), 1u);
      std::vector<std::uint16_t> want(64 * 64);
      std::vector<FillJob> direct;
      box_fill_jobs(*p, whole_box(p->memory_shape), want.data(), 13, direct);
      env.be->fill(jobs);
      env.be->fill(direct);
      EXPECT_EQ(buf, want);
    }
    const std::string miss = index.not_found("model.layers.0.self_attn.qq_proj.weight");
    EXPECT_EQ(miss.find("tensor 'model.layers.0.self_attn.qq_proj.weight' is not in llama-tiny (tensors such as "), 0u) << miss;
    EXPECT_THROW(index.composite("nope"), std::invalid_argument);
    try {
      index.refuse_unknown("model.layers.0.self_attn.qq_proj.weight");
      ADD_FAILURE() << "refuse_unknown returned";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), miss);  // the same line, as a ValueError in Python
    }
  }
}

TEST(TensorIndex, AStackedBufferNeedsOneDtypeInTheLayersItFills) {
  Env env;
  const ModelSpec spec = make_preset("llama-tiny");
  BuildOptions o = options(Layout::stacked, ExpertLayout::stacked, Orientation::out_in);
  o.dtype_overrides.push_back({"model.layers.2.*", DType::f32});
  const Builder b(spec, make_recipe("hf"), o, *env.be, env.be->memory());
  const TensorIndex index(b);
  std::vector<std::uint16_t> buf(4 * 64 * 64);
  std::vector<FillJob> jobs;
  const std::string name = "model.layers.self_attn.q_proj.weight";
  try {
    index.fill_jobs(name, Box{{0, 0, 0}, {4, 64, 64}}, Region{buf.data(), {}}, DType::bf16, jobs);
    ADD_FAILURE() << "mixed dtypes accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "stacked tensor 'model.layers.self_attn.q_proj.weight' needs one dtype: 'model.layers.0.self_attn.q_proj.weight' "
                 "is bf16, 'model.layers.2.self_attn.q_proj.weight' fp32");
  }
  EXPECT_NO_THROW(index.fill_jobs(name, Box{{0, 0, 0}, {2, 64, 64}}, Region{buf.data(), {}}, DType::bf16, jobs));
  EXPECT_THROW(index.fill_jobs(name, Box{{0, 0, 0}, {2, 64, 64}}, Region{buf.data(), {}}, DType::f16, jobs), std::invalid_argument);
  EXPECT_THROW(index.fill_jobs(name, Box{{0, 0, 0}, {2, 64, 65}}, Region{buf.data(), {}}, DType::bf16, jobs), std::invalid_argument);
}

// transformers 5 keeps each MoE layer's experts in two parameters: gate_up_proj [E, 2F, H] (gate and up
// of each expert along dimension 1) and down_proj [E, H, F].
TEST(TensorIndex, HuggingFaceFusedExpertsAreTheirExpertsTensors) {
  Env env;
  struct Case {
    const char* preset;
    const char *gate, *up, *down;  // the spec's expert tensors, relative to the layer
  };
  for (const Case& k : {Case{"mixtral-tiny", "block_sparse_moe.experts.{}.w1.weight",
                             "block_sparse_moe.experts.{}.w3.weight", "block_sparse_moe.experts.{}.w2.weight"},
                        Case{"deepseek-v3-tiny", "mlp.experts.{}.gate_proj.weight",
                             "mlp.experts.{}.up_proj.weight", "mlp.experts.{}.down_proj.weight"}}) {
    SCOPED_TRACE(k.preset);
    const ModelSpec spec = make_preset(k.preset);
    const Builder b(spec, make_recipe("hf"), options(Layout::per_layer, ExpertLayout::stacked, Orientation::out_in, DType::f32),
                    *env.be, env.be->memory());
    const TensorIndex index(b);
    const Model m = b.build();
    std::map<std::string, const TensorView*> built;
    for (const auto& l : m.layers)
      for (const auto& t : l.tensors) built[t.view.name] = &t.view;
    auto tensor_of = [&](const char* pattern, std::uint64_t e) {
      std::string rel = pattern;
      rel.replace(rel.find("{}"), 2, std::to_string(e));
      return built.at("model.layers.1." + rel);
    };
    const std::uint64_t E = spec.hyper.num_experts;
    const TensorView* g0 = tensor_of(k.gate, 0);
    const std::uint64_t F = g0->shape[0], H = g0->shape[1];
    // gate_up_proj, expected by concatenation of the built tensors.
    std::vector<float> want;
    for (std::uint64_t e = 0; e < E; ++e)
      for (const char* part : {k.gate, k.up}) {
        const auto* v = tensor_of(part, e);
        const auto* f = static_cast<const float*>(v->data);
        want.insert(want.end(), f, f + F * H);
      }
    const std::string base = "model.layers.1.mlp.experts.";  // transformers 5's name of layer 1's experts
    const auto gu = index.hf_fused_experts(base + "gate_up_proj", {E, 2 * F, H});
    ASSERT_TRUE(gu.has_value());
    std::vector<float> got(want.size());
    std::vector<FillJob> jobs;
    composite_fill_jobs(*gu, whole_box(gu->shape), Region{got.data(), {}}, 13, jobs);
    env.be->fill(jobs);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
    // down_proj.
    want.clear();
    for (std::uint64_t e = 0; e < E; ++e) {
      const auto* v = tensor_of(k.down, e);
      const auto* f = static_cast<const float*>(v->data);
      want.insert(want.end(), f, f + numel(v->shape));
    }
    const auto dn = index.hf_fused_experts(base + "down_proj", {E, H, F});
    ASSERT_TRUE(dn.has_value());
    got.assign(want.size(), 0.f);
    jobs.clear();
    composite_fill_jobs(*dn, whole_box(dn->shape), Region{got.data(), {}}, 13, jobs);
    env.be->fill(jobs);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);

    EXPECT_THROW(index.hf_fused_experts(base + "gate_up_proj", {E, F, H}), std::invalid_argument);
    EXPECT_FALSE(index.hf_fused_experts(base + "gate_proj", {E, F, H}).has_value());
    EXPECT_FALSE(index.hf_fused_experts("model.layers.0.mlp.gate_up_proj", {E, 2 * F, H}).has_value());
  }
}

// torchtitan's fused wqkv of layer 1 from the spec's q, k and v, q and k in the interleaved RoPE layout:
// equal to torchtitan's from_hf of the per-tensor build (_reverse_permute, then torch.cat).
TEST(TensorIndex, FusedQkvIsTorchtitansFromHfOfTheBuild) {
  Env env;
  const ModelSpec spec = make_preset("llama-tiny");
  const Builder b(spec, make_recipe("torchtitan"), options(Layout::per_layer, ExpertLayout::stacked, Orientation::out_in), *env.be,
                  env.be->memory());
  const TensorIndex index(b);
  const Model m = b.build();
  const std::uint64_t hd = spec.hyper.hidden_size / spec.hyper.num_heads, D = spec.hyper.hidden_size;
  std::vector<PlannedTensor> qkv;
  std::vector<std::uint16_t> want;
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    const std::string name = "model.layers.1.self_attn." + std::string(proj) + ".weight";
    qkv.push_back(*index.planned(name));
    const TensorView* v = nullptr;
    for (const auto& t : m.layers[1].tensors)
      if (t.view.name == name) v = &t.view;
    ASSERT_NE(v, nullptr);
    const auto* w = static_cast<const std::uint16_t*>(v->data);
    const std::uint64_t rows = v->shape[0];
    for (std::uint64_t r = 0; r < rows; ++r) {
      // _reverse_permute: view(heads, 2, hd / 2, D).transpose(1, 2): row (h, i, j) <- (h, j, i).
      std::uint64_t src = r;
      if (std::string(proj) != "v_proj") {
        const std::uint64_t h = r / hd, i = r % hd / 2, j = r % 2;
        src = h * hd + j * (hd / 2) + i;
      }
      want.insert(want.end(), w + src * D, w + (src + 1) * D);
    }
  }
  const RowPermutation rows[] = {RowPermutation::rope_interleave(hd), RowPermutation::rope_interleave(hd), {}};
  const Composite c = concatenate(qkv, 0, rows);
  std::vector<std::uint16_t> got(want.size());
  std::vector<FillJob> jobs;
  composite_fill_jobs(c, whole_box(c.shape), Region{got.data(), {}}, 13, jobs);
  env.be->fill(jobs);
  EXPECT_EQ(got, want);
}

// A JAX leaf stacked by filter_vmap ([L, ...], slice l the tensor of layer l) is one template on one
// axis, and equals the stacked layout's buffer; a stacked fused QKV adds templates, its layer axis
// leading or at dimension 1; a name the plan does not have is refused with suggestions.
TEST(TensorIndex, AssembleStacksAndConcatenatesTemplates) {
  Env env;
  const ModelSpec spec = make_preset("llama-tiny");
  const Builder stacked(spec, make_recipe("torchtitan"), options(Layout::stacked, ExpertLayout::stacked, Orientation::in_out),
                        *env.be, env.be->memory());
  const Builder per_layer(spec, make_recipe("torchtitan"), options(Layout::per_layer, ExpertLayout::stacked, Orientation::in_out),
                          *env.be, env.be->memory());
  const TensorIndex si(stacked), pi(per_layer);
  const std::uint64_t L = spec.num_layers;
  const std::vector<StackAxis> layers{{L, 0}};
  const Composite leaf = pi.assemble(std::vector<std::string>{"model.layers.{0}.mlp.down_proj.weight"}, layers);
  EXPECT_EQ(leaf, si.composite("model.layers.mlp.down_proj.weight"));
  EXPECT_EQ(leaf.parts[0].fills.size(), L);  // depth-scaled: one fill per layer
  EXPECT_TRUE(leaf.parts[0].transposed);

  // [L, q + k + v rows, D] out-in with q and k interleaved: slice l is layer l's fused wqkv.
  const Builder out_in(spec, make_recipe("hf"), options(Layout::per_layer, ExpertLayout::stacked, Orientation::out_in), *env.be,
                       env.be->memory());
  const TensorIndex oi(out_in);
  const std::uint64_t hd = spec.hyper.hidden_size / spec.hyper.num_heads;
  const RowPermutation rope = RowPermutation::rope_interleave(hd);
  const std::vector<std::string> qkv{"model.layers.{0}.self_attn.q_proj.weight", "model.layers.{0}.self_attn.k_proj.weight",
                                     "model.layers.{0}.self_attn.v_proj.weight"};
  const Composite all = oi.assemble(qkv, layers, 0, std::vector<RowPermutation>{rope, rope, {}});
  const Composite one = oi.assemble(std::vector<std::string>{"model.layers.2.self_attn.q_proj.weight",
                                                             "model.layers.2.self_attn.k_proj.weight",
                                                             "model.layers.2.self_attn.v_proj.weight"},
                                    {}, 0, std::vector<RowPermutation>{rope, rope, {}});
  ASSERT_EQ(all.shape, (Shape{L, one.shape[0], one.shape[1]}));
  std::vector<std::uint16_t> a(numel(one.shape)), b(numel(one.shape));
  std::vector<FillJob> jobs;
  composite_fill_jobs(all, Box{{2, 0, 0}, {1, one.shape[0], one.shape[1]}}, Region{a.data(), {}}, 5, jobs);
  composite_fill_jobs(one, whole_box(one.shape), Region{b.data(), {}}, 5, jobs);
  env.be->fill(jobs);
  EXPECT_EQ(a, b);
  // The layer axis at dimension 1 (Flax linen's nn.scan with variable_axes={"params": 1}): [rows, L, D]
  // whose [:, 2, :] is layer 2's fused wqkv.
  const Composite scanned = oi.assemble(qkv, std::vector<StackAxis>{{L, 0, 1}}, 0, std::vector<RowPermutation>{rope, rope, {}});
  ASSERT_EQ(scanned.shape, (Shape{one.shape[0], L, one.shape[1]}));
  std::vector<std::uint16_t> c(numel(one.shape));
  jobs.clear();
  composite_fill_jobs(scanned, Box{{0, 2, 0}, {one.shape[0], 1, one.shape[1]}}, Region{c.data(), {}}, 5, jobs);
  env.be->fill(jobs);
  EXPECT_EQ(c, b);

  try {
    oi.assemble(std::vector<std::string>{"model.layers.{0}.self_attn.q_proj.weight"}, std::vector<StackAxis>{{L + 1, 0}});
    ADD_FAILURE() << "a layer past the spec accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find("tensor 'model.layers.4.self_attn.q_proj.weight' is not in llama-tiny"), 0u) << e.what();
  }
  EXPECT_THROW(oi.assemble(qkv, layers, 1), std::invalid_argument);  // rows differ: no concatenation along 1
  EXPECT_THROW(oi.assemble(std::vector<std::string>{"model.layers.1.mlp.up_proj.weight"}, layers), std::invalid_argument);
}
