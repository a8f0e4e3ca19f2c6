// The textbook case: a 2 -> 1024 x 10 -> 1 MLP (10.5M parameters, 42 MB in fp32) whose framework
// reserved 11 GB. Built in bf16, one layer at a time, with its peak measured.
#include <cstdio>

#include <layerinit/layerinit.hpp>

int main() {
  using namespace layerinit;
  // [readme-example]
  auto be = make_backend("auto");                    // CUDA when a GPU is usable, else all CPU cores
  tracking_resource memory(be->memory());            // every byte counted
  BuildOptions opts;
  opts.dtype = DType::bf16;                          // written directly in bf16: no fp32 buffer exists
  opts.layout = Layout::stacked;                     // each layer parameter in one [L, ...] buffer
  opts.seed = 42;
  const ModelSpec spec = make_preset("mlp-deep");
  const Model model = Builder(spec, make_recipe("pytorch-default"), opts, *be, memory).build();
  std::printf("%llu parameters, %llu bytes, peak %llu bytes\n", (unsigned long long)spec.parameter_count(),
              (unsigned long long)model.bytes(), (unsigned long long)memory.stats().peak_bytes);
  // [readme-example]
  return memory.stats().peak_bytes == model.bytes() ? 0 : 1;
}
