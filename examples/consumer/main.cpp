// Builds llama-tiny in bf16 through the installed package and checks a value-contract fact:
// the same seed gives the same bytes as a second build. The umbrella header is the only include the
// library needs (no CUDA toolkit or Random123 headers).
#include <layerinit/layerinit.hpp>

#include <cstdio>

int main() {
  using namespace layerinit;
  auto be = make_backend("cpu", 1);
  tracking_resource memory(be->memory());
  const ModelSpec spec = make_preset("llama-tiny");
  BuildOptions opts;
  opts.seed = 5;
  const Model a = Builder(spec, make_recipe("hf"), opts, *be, memory).build();
  const Model b = Builder(spec, make_recipe("hf"), opts, *be, memory).build();
  const std::uint64_t ha = hash_tensor(*be, a.layers[1].tensors[2].view);
  const std::uint64_t hb = hash_tensor(*be, b.layers[1].tensors[2].view);
  std::printf("layerinit %s: %llu parameters, %s xxh3_64 %016llx\n", LAYERINIT_VERSION,
              (unsigned long long)spec.parameter_count(), a.layers[1].tensors[2].view.name.c_str(), (unsigned long long)ha);
  return ha == hb && memory.stats().peak_bytes == a.bytes() + b.bytes() ? 0 : 1;
}
