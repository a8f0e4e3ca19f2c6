#include "args.hpp"
#include "mpi.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <limits>
#include <utility>

#include <layerinit/core/text.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/spec_json.hpp>

namespace layerinit::cli {

std::uint64_t parse_decimal(std::string_view text, std::string_view option, std::uint64_t min, std::uint64_t max) {
  auto refuse = [&](const char* why) {
    const std::string range = min == 1 ? "a positive integer (decimal, at most " + std::to_string(max) + ")"
                                       : "a decimal integer from " + std::to_string(min) + " to " + std::to_string(max);
    throw bad_input(std::string(option), "'" + std::string(text) + "'", "must be " + range + why,
                    std::string(option) + " must be " + range + ", got '" + std::string(text) + "'" + why);
  };
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) refuse("");
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (ec == std::errc::result_out_of_range || v < min || v > max) refuse(": out of range");
  if (ec != std::errc() || end != text.data() + text.size()) refuse("");
  return v;
}

CLI::Option* add_decimal_option(CLI::App& app, const std::string& name, std::uint64_t& target, std::uint64_t min,
                                std::uint64_t max, const std::string& help) {
  // The option takes the text; parse_decimal's bad_input leaves app.parse() as exit code 2.
  return app
      .add_option_function<std::string>(
          name, [&target, name, min, max](const std::string& s) { target = parse_decimal(s, name, min, max); }, help)
      ->type_name("UINT")
      ->default_str(std::to_string(target));
}

CLI::Option* add_decimal_option(CLI::App& app, const std::string& name, int& target, int min, int max,
                                const std::string& help) {
  if (min < 0 || max < min) throw std::logic_error("add_decimal_option: bad range for " + name);
  return app
      .add_option_function<std::string>(
          name,
          [&target, name, min, max](const std::string& s) {
            target = static_cast<int>(parse_decimal(s, name, static_cast<std::uint64_t>(min), static_cast<std::uint64_t>(max)));
          },
          help)
      ->type_name("UINT")
      ->default_str(std::to_string(target));
}

void add_report_flags(CLI::App& app, std::string& report, const std::string& help) {
  // Checked as it is read (a bad_input leaves app.parse() as exit code 2), so a typo fails before work.
  app.add_option_function<std::string>(
         "--report",
         [&report](const std::string& s) {
           if (s != "json")
             throw bad_input("--report", quote(s), "unknown report format (valid: json)",
                             "--report: unknown report format '" + printable(s) + "' (valid: json)");
           report = s;
         },
         help + " (--report json; also --json)")
      ->type_name("FORMAT");
  // plan spelled it --json, build, emit and verify --report json: each spelling works everywhere.
  app.add_flag_callback("--json", [&report] { report = "json"; }, "The same as --report json");
}

void ModelArgs::add_quiet_flag(CLI::App& app) {
  app.add_flag("-q,--quiet", quiet, "No progress, warnings or notes on stderr; errors are still one line");
}

void ModelArgs::add_progress_flags(CLI::App& app) {
  app.add_option_function<std::string>(
         "--progress",
         [this](const std::string& s) {
           if (s != "auto" && s != "always" && s != "never")
             throw bad_input("--progress", quote(s), "must be auto, always or never",
                             "--progress must be auto, always or never, got '" + printable(s) + "'");
           progress = s;
         },
         "Progress on stderr: auto (a bar on a terminal, else a plain line every few seconds, for batch logs), "
         "always (a bar on a terminal, else a line at every 10%), never")
      ->type_name("WHEN")
      ->default_str("auto");
  add_quiet_flag(app);
}

ProgressMode ModelArgs::progress_mode() const {
  if (quiet && !progress.empty() && progress != "never")
    bad_argument("--quiet", "and --progress " + progress + " contradict each other: give one");
  if (quiet || progress == "never") return ProgressMode::never;
  return progress == "always" ? ProgressMode::always : ProgressMode::automatic;
}

void ModelArgs::add_model_flags(CLI::App& app) {
  auto* p = app.add_option("--preset", preset, "Named model (" + [] {
                             std::string s;
                             for (const auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
                             return s;
                           }() + ")");
  auto* s = app.add_option("--spec", spec_file, "JSON model spec file (docs/spec.md)");
  auto* h = app.add_option("--hf-config", hf_config,
                           "Hugging Face config.json, or a directory holding one (model_type: " + [] {
                             std::string s;
                             for (const auto& n : hf_model_types()) s += (s.empty() ? "" : ", ") + n;
                             return s;
                           }() + "); emit writes it beside safetensors weights");
  p->excludes(s)->excludes(h);
  s->excludes(p)->excludes(h);
  h->excludes(p)->excludes(s);
}

void ModelArgs::add_build_flags(CLI::App& app, bool allow_restack) {
  app.add_option("--dtype", dtype,
                 "Element type: fp32, fp16, bf16 (default: a Hugging Face config's dtype, float32/float16/bfloat16, else bf16)");
  app.add_option("--dtype-override", dtype_overrides,
                 "PATTERN=DTYPE: dtype of tensors whose canonical name matches the glob, e.g. '*norm*=fp32' (repeatable)");
  app.add_option("--recipe", recipe, "Init recipe, NAME or NAME:KEY=VALUE,... (" + [] {
                   std::string s;
                   for (const auto& n : recipe_names()) s += (s.empty() ? "" : ", ") + n;
                   return s;
                 }() + ")")->capture_default_str();
  app.add_option("--init-override", init_overrides,
                 "PATTERN=FILL: fill of matching tensors, e.g. '*.o_proj.weight=normal(0,0.01)'; fills: normal(m,s), "
                 "trunc_normal(m,s,a,b), trunc_normal_std(m,s,a,b), uniform(lo,hi), constant(v) (repeatable)");
  add_decimal_option(app, "--seed", seed, 0, std::numeric_limits<std::uint64_t>::max(),
                     "Seed: values are a pure function of (seed, tensor name, element index)");
  app.add_flag("--strict", strict, "An --init-override or --dtype-override that matches no tensor is an error");
  const std::string layouts = allow_restack ? "per-layer, stacked, restack" : "per-layer, stacked";
  app.add_option_function<std::string>(
         "--layout",
         [this, allow_restack](const std::string& s) {
           restack = allow_restack && s == "restack";
           layout = restack ? "per-layer" : s;  // read with the other build flags (build_options)
           if (!allow_restack || restack) return;
           // restack is the CLI's own word: a layout the library refuses, build's refusal also names it.
           try {
             (void)parse_layout(s);
           } catch (const bad_input& e) {
             throw bad_input("--layout", e.value(), e.problem() + "; build also takes restack",
                             "--layout: " + std::string(e.what()) + "; build also takes restack");
           }
         },
         "Memory layout: " + layouts + (allow_restack ? " (per-layer, then stack in place)" : ""))
      ->type_name("TEXT")
      ->default_str("per-layer");
  app.add_option("--orientation", orientation, "Linear weights as [out, in] (out-in, PyTorch/HF) or [in, out] (in-out, JAX/Flax)")
      ->capture_default_str();
  app.add_option("--experts", experts,
                 "Stacked layout: MoE experts as one [L, E, out, in] buffer per expert weight (stacked) or one [L, out, in] "
                 "buffer per expert (per-expert)")
      ->capture_default_str();
}

void ModelArgs::add_backend_flags(CLI::App& app) {
  app.add_option("--backend,--device", backend,
                 "auto (a GPU when one is usable), cpu, cuda or cuda:N; under mpirun, srun or torchrun, auto and cuda "
                 "are the node-local rank's GPU (local rank modulo the node's GPUs)")
      ->capture_default_str();
  // More threads than any host has cores would only cost stacks: 4096 bounds the request.
  add_decimal_option(app, "--threads", threads, 0, 4096,
                     "Host threads (0 = the CPUs this process may use: its affinity mask and cgroup CPU quota)");
  app.add_flag("--no-memory-check", no_memory_check,
               "Allocate even when the predicted peak exceeds the memory this process may use (cgroup limit, "
               "MemAvailable, free GPU memory)");
}

std::unique_ptr<layerinit::backend> ModelArgs::open_backend() const {
  std::string name = backend;
  if (name == "auto" || name == "cuda")
    if (const auto local = launcher_local_rank(); local && (name == "cuda" || cuda_probe(0).usable))
      if (const int n = cuda_device_count(); n > 0) name = "cuda:" + std::to_string(*local % static_cast<std::uint64_t>(n));
  return make_backend(name, threads);
}

void ModelArgs::add_parallel_flags(CLI::App& app) {
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  add_decimal_option(app, "--tp", parallel.tp, 1, max, "Tensor-parallel degree (docs/sharding.md)");
  add_decimal_option(app, "--pp", parallel.pp, 1, max, "Pipeline-parallel stages");
  add_decimal_option(app, "--ep", parallel.ep, 1, max, "Expert-parallel degree");
  add_decimal_option(app, "--fsdp", parallel.fsdp, 1, max, "FSDP degree (Shard(0) of every tensor)");
  app.add_option_function<std::string>(
         "--rank", [this](const std::string& s) { rank = parse_decimal(s, "--rank", 0, max); },
         "This rank's pieces only (0 .. tp*pp*ep*fsdp - 1; tp fastest, pp slowest)")
      ->type_name("UINT");
}

bad_input missing_rank(const ParallelPlan& plan, const std::string& what) {
  const std::string problem = "is required: a mesh of " + std::to_string(plan.ranks()) + " ranks";
  return bad_input("--rank", "", problem,
                   "--tp, --pp, --ep and --fsdp describe a mesh of " + std::to_string(plan.ranks()) + " ranks: " + what +
                       " (0-" + std::to_string(plan.ranks() - 1) + ")");
}

std::string ModelArgs::layout_text() const { return restack ? "restack" : layout; }

bool ModelArgs::sharded() const { return rank || parallel != ParallelDegrees{}; }

ParallelPlan ModelArgs::parallel_plan(const ModelSpec& spec) const {
  return ParallelPlan::checked(spec, parallel, rank, "--");
}

namespace {
// "org/name" as the Hub spells a repository id (letters, digits, '-', '_', '.'; neither part starting
// with '.'): what a user passes to --hf-config having seen it on a model page.
bool looks_like_hub_id(const std::string& s) {
  const std::size_t slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size() || s.find('/', slash + 1) != std::string::npos)
    return false;
  if (s[0] == '.' || s[slash + 1] == '.' || s.ends_with(".json")) return false;
  return s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./") == std::string::npos;
}
}  // namespace

ModelSpec ModelArgs::load_spec() const {
  if (preset.empty() && spec_file.empty() && hf_config.empty())
    throw bad_input("--preset", "", "a model is required: --preset or --spec, or --hf-config",
                    "a model is required: --preset or --spec, or --hf-config");
  if (!preset.empty()) return make_preset(preset);
  if (!hf_config.empty()) {
    if (struct stat st{}; ::stat(hf_config.c_str(), &st) != 0 && errno == ENOENT && looks_like_hub_id(hf_config))
    {
      const std::string problem = "no such file; it looks like a Hugging Face Hub id: download its config.json first (hf download " +
                                  printable(hf_config) + " config.json --local-dir DIR, or huggingface-cli download " +
                                  printable(hf_config) + " config.json --local-dir DIR) and pass DIR/config.json";
      throw bad_input("--hf-config", printable(hf_config), problem, "--hf-config " + printable(hf_config) + ": " + problem);
    }
    return load_hf_config(hf_config);
  }
  return load_spec_file(spec_file);
}

namespace {
std::pair<std::string, std::string> split_assignment(const std::string& s, const char* flag, const char* value) {
  const auto eq = s.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw bad_input(flag, quote(s), std::string("expects PATTERN=") + value,
                    std::string(flag) + " expects PATTERN=" + value + ", got '" + printable(s) + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}
}  // namespace

OptionsText ModelArgs::options_text() const {
  OptionsText t;
  if (!dtype.empty()) t.dtype = dtype;
  for (const auto& s : dtype_overrides) t.dtype_overrides.push_back(split_assignment(s, "--dtype-override", "DTYPE"));
  t.recipe = recipe;
  for (const auto& s : init_overrides) t.init_overrides.push_back(split_assignment(s, "--init-override", "FILL"));
  t.seed = seed;
  t.layout = layout;
  t.orientation = orientation;
  t.experts = experts;
  return t;
}

Recipe ModelArgs::load_recipe() const { return checked_recipe(options_text(), OptionNames::cli); }

BuildOptions ModelArgs::build_options(const ModelSpec& spec) const {
  return checked_build_options(options_text(), OptionNames::cli, spec);
}


void ModelArgs::check_overrides(const ModelSpec& spec, const Recipe& recipe, const BuildOptions& opts, bool warn) const {
  auto check = [&](const char* flag, const std::string& pattern) {
    if (matches_some_tensor(spec, pattern)) return;
    const std::string what = std::string(flag) + " pattern '" + printable(pattern) + "' matches no tensor of " + printable(spec.name);
    if (strict) throw bad_input(flag, quote(pattern), "matches no tensor of " + quote(spec.name) + " (--strict)", what + " (--strict)");
    if (warn && !quiet) std::fprintf(stderr, "layerinit: warning: %s\n", what.c_str());
  };
  for (const auto& [pattern, fill] : recipe.overrides()) check("--init-override", pattern);
  for (const auto& o : opts.dtype_overrides) check("--dtype-override", o.pattern);
}

void check_memory(const ModelArgs& args, backend& be, const MemoryNeed& need) {
  if (args.no_memory_check) return be.reserve(need.peak);
  try {
    layerinit::check_memory(be, need);
  } catch (const memory_refused& e) {
    throw bad_input("memory", "", std::string(e.what()) + "; --no-memory-check to go ahead anyway",
                    std::string(e.what()) + "; --no-memory-check to go ahead anyway");
  }
}

}  // namespace layerinit::cli
