// Model code declaring its own layer type in C++: a gated MLP block with a LayerNorm, repeated 4
// times, between an embedding and a head. The recipe fills what the spec leaves open; one tensor
// carries its own rule.
#include <cstdio>

#include <layerinit/layerinit.hpp>

int main() {
  using namespace layerinit;
  const std::uint64_t d = 256, f = 1024, vocab = 1000;
  ModelSpec spec;
  spec.name = "gated-mlp";
  spec.family = "custom";
  spec.layer_prefix = "blocks.";
  spec.num_layers = 4;
  spec.pre = {{"embed.weight", {vocab, d}, TensorRole::embedding, 0, 0, false, {}}};
  spec.layer.tensors = {
      {"norm.weight", {d}, TensorRole::norm_weight, 0, 0, false, {}},
      {"norm.bias", {d}, TensorRole::norm_bias, 0, 0, false, {}},
      {"gate.weight", {f, d}, TensorRole::linear_weight, d, f, true, {}},  // [out, in]
      {"up.weight", {f, d}, TensorRole::linear_weight, d, f, true, {}},
      {"down.weight", {d, f}, TensorRole::output_weight, f, d, true, FillSpec::trunc_normal_std(0, 0.01, -3, 3)},
  };
  spec.post = {{"head.weight", {vocab, d}, TensorRole::head_weight, d, vocab, true, {}}};

  auto be = make_backend("cpu");
  tracking_resource memory(be->memory());
  BuildOptions opts;
  opts.dtype = DType::bf16;
  opts.dtype_overrides = {{"*norm*", DType::f32}};  // norms in fp32
  opts.layout = Layout::stacked;
  const Builder builder(spec, make_recipe("xavier-uniform"), opts, *be, memory);
  for (const auto& p : builder.plan_layer(0))
    std::printf("%-28s %-12s %-5s %s\n", p.name.c_str(), shape_string(p.shape).c_str(), std::string(dtype_name(p.dtype)).c_str(),
                p.fill.describe().c_str());
  const Model model = builder.build();
  std::printf("%llu parameters, %llu bytes, peak %llu bytes\n", (unsigned long long)spec.parameter_count(),
              (unsigned long long)model.bytes(), (unsigned long long)memory.stats().peak_bytes);
  return memory.stats().peak_bytes == model.bytes() ? 0 : 1;
}
