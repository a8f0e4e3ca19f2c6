// mistral-7b stacked in bf16 (14.5 GB), layer by layer with progress, and the measured peak.
// Usage: mistral_7b [--backend auto|cpu|cuda]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <layerinit/layerinit.hpp>

int main(int argc, char** argv) {
  using namespace layerinit;
  const std::string backend_name = argc == 3 && std::strcmp(argv[1], "--backend") == 0 ? argv[2] : "auto";
  try {
    auto be = make_backend(backend_name);
    tracking_resource memory(be->memory());
    const ModelSpec spec = make_preset("mistral-7b");
    BuildOptions opts;
    opts.dtype = DType::bf16;
    opts.layout = Layout::stacked;
    const auto t0 = std::chrono::steady_clock::now();
    std::printf("mistral-7b: %llu parameters on %s\n", (unsigned long long)spec.parameter_count(), be->describe().c_str());
    const Model model = Builder(spec, make_recipe("hf"), opts, *be, memory).build([&](std::uint64_t layer) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("layer %2llu/%llu  %7.2f s  in use %s\n", (unsigned long long)layer + 1, (unsigned long long)spec.num_layers, s,
                  format_bytes(memory.stats().current_bytes).c_str());
      std::fflush(stdout);
    });
    std::printf("weights %s\npeak    %s\n", format_bytes(model.bytes()).c_str(), format_bytes(memory.stats().peak_bytes).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mistral_7b: %s\n", e.what());
    return 1;
  }
  return 0;
}
