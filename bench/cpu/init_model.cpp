// One model initialization per process, so wall time and peak RSS can be measured from outside
// (/usr/bin/time -v). Modes:
//   nothing                 the process baseline: library loaded, backend made, nothing built
//   stacked | per-layer     Builder::build() in that layout
//   streamed                Builder::stream(): each part made, handed to a sink, freed
//   all-fp32-then-cast | fp32-then-cast-per-layer | list-then-stack   run_naive() (init/naive.hpp)
//   memset                  the floor: the model's weight bytes allocated from the same backend and
//                           first touched by std::memset, split evenly over the backend's thread count
//                           (page faults and zeroing included, as in a build of fresh memory)
// --trace FILE writes bytes in use over time with the columns of `layerinit build --trace`:
//   seconds,event,bytes,current_bytes,layer,tensor
// --write-spec FILE writes the model's JSON spec (for `layerinit build --spec`) and exits.
// Models: llama-3.2-1b (built here: hidden 2048, intermediate 8192, 16 layers, 32 heads, 8 kv heads,
// vocab 128256, tied embeddings, 1,235,814,400 parameters) or any preset name.
// Prints one line: mode,model,parameters,weights_bytes,tracked_peak_bytes,seconds
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <layerinit/init/builder.hpp>
#include "naive.hpp"
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/memory/tracking.hpp>

using namespace layerinit;

namespace {

ModelSpec model_spec(const std::string& name) {
  if (name != "llama-3.2-1b") return make_preset(name);
  Hyper h;
  h.vocab_size = 128256;
  h.hidden_size = 2048;
  h.intermediate_size = 8192;
  h.num_heads = 32;
  h.num_kv_heads = 8;
  h.max_position_embeddings = 131072;
  h.norm_eps = 1e-5;
  h.rope_theta = 500000.0;
  h.initializer_range = 0.02;
  h.tie_word_embeddings = true;
  return llama_spec("llama-3.2-1b", h, 16);
}

struct Row {
  double seconds;
  MemoryEvent::Kind kind;
  std::size_t bytes, current;
  std::string tensor;
};

long long layer_of(const std::string& name, const std::string& prefix) {
  const auto l = split_layer_name(prefix, name);
  return l ? static_cast<long long>(l->layer) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "stacked", model = "llama-3.2-1b", trace, spec_out, dtype = "bf16";
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "init_model: %s needs a value\n", k.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (k == "--mode") mode = val();
    else if (k == "--model") model = val();
    else if (k == "--threads") threads = std::atoi(val().c_str());
    else if (k == "--trace") trace = val();
    else if (k == "--write-spec") spec_out = val();
    else if (k == "--dtype") dtype = val();
    else {
      std::fprintf(stderr, "usage: init_model [--mode M] [--model llama-3.2-1b|PRESET] [--threads N] "
                           "[--dtype bf16|fp16|fp32] [--trace FILE.csv] [--write-spec FILE.json]\n");
      return 2;
    }
  }
  try {
    const ModelSpec spec = model_spec(model);
    if (!spec_out.empty()) {
      std::ofstream(spec_out) << spec_to_json(spec) << "\n";
      return 0;
    }
    auto be = make_host_backend(threads);
    tracking_resource tracker(be->memory());
    std::vector<Row> rows;
    if (!trace.empty()) {
      rows.reserve(1 << 14);
      tracker.set_listener([&](const MemoryEvent& e) {
        rows.push_back({e.seconds, e.kind, e.bytes, e.current_bytes, e.tag ? e.tag->label : std::string()});
      });
    }
    BuildOptions opts;
    opts.dtype = dtype == "fp32" ? DType::f32 : dtype == "fp16" ? DType::f16 : DType::bf16;
    opts.layout = mode == "stacked" ? Layout::stacked : Layout::per_layer;
    const Recipe recipe = make_recipe("hf");
    Builder builder(spec, recipe, opts, *be, tracker);

    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t bytes = 0;
    Model m;  // kept alive until the trace is taken, like `layerinit build --trace`
    if (mode == "nothing") {
    } else if (mode == "memset") {
      bytes = spec.parameter_count() * dtype_size(opts.dtype);
      void* p = tracker.allocate(bytes);
      const unsigned n = threads > 0 ? static_cast<unsigned>(threads) : std::thread::hardware_concurrency();
      std::vector<std::thread> pool;
      const std::uint64_t per = (bytes / n + 4095) / 4096 * 4096;  // whole pages per thread
      for (unsigned t = 0; t < n; ++t) {
        const std::uint64_t b = std::min<std::uint64_t>(bytes, t * per), e = std::min<std::uint64_t>(bytes, b + per);
        pool.emplace_back([=] { std::memset(static_cast<char*>(p) + b, 0, e - b); });
      }
      for (auto& th : pool) th.join();
      be->synchronize();
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s,%s,%llu,%llu,%zu,%.4f\n", mode.c_str(), spec.name.c_str(),
                  static_cast<unsigned long long>(spec.parameter_count()), static_cast<unsigned long long>(bytes),
                  tracker.stats().peak_bytes, sec);
      tracker.deallocate(p, bytes);
      return 0;
    } else if (mode == "stacked" || mode == "per-layer") {
      m = builder.build();
      bytes = m.bytes();
    } else if (mode == "streamed") {
      builder.stream([&](const Part& p) { bytes += p.bytes(); });
    } else {
      bool found = false;
      for (NaiveStrategy s : all_naive_strategies)
        if (naive_name(s) == mode) {
          m = run_naive(s, builder, *be, tracker);
          bytes = m.bytes();
          found = true;
        }
      if (!found) {
        std::fprintf(stderr, "init_model: unknown mode '%s' (valid: nothing, memset, stacked, per-layer, streamed, "
                             "all-fp32-then-cast, fp32-then-cast-per-layer, list-then-stack)\n", mode.c_str());
        return 2;
      }
    }
    be->synchronize();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tracker.set_listener({});
    std::printf("%s,%s,%llu,%llu,%zu,%.4f\n", mode.c_str(), spec.name.c_str(),
                static_cast<unsigned long long>(spec.parameter_count()), static_cast<unsigned long long>(bytes),
                tracker.stats().peak_bytes, sec);
    if (!trace.empty()) {
      std::ofstream out(trace);
      out << "seconds,event,bytes,current_bytes,layer,tensor\n";
      static const char* kinds[] = {"allocate", "deallocate", "commit", "release"};
      for (const Row& r : rows)
        out << r.seconds << ',' << kinds[static_cast<int>(r.kind)] << ',' << r.bytes << ',' << r.current << ','
            << layer_of(r.tensor, spec.layer_prefix) << ',' << r.tensor << '\n';
      if (!out.flush()) { std::fprintf(stderr, "init_model: cannot write %s\n", trace.c_str()); return 1; }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
