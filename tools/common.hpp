// Shared pieces of the layerinit subcommands: model selection, build options, reports.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/emit.hpp"
#include "init/builder.hpp"
#include "init/presets.hpp"
#include "init/recipes.hpp"

namespace layerinit::cli {

// Bad input: reported as one line with exit code 2.
struct usage_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Flags every model-building subcommand takes.
struct ModelArgs {
  std::string preset;
  std::string spec_file;
  std::string dtype = "bf16";
  std::vector<std::string> dtype_overrides;  // PATTERN=DTYPE
  std::string recipe = "hf";
  std::vector<std::string> init_overrides;   // PATTERN=FILL
  std::uint64_t seed = 0;
  std::string layout = "per-layer";
  std::string orientation = "out-in";
  std::string backend = "auto";
  int threads = 0;
  bool strict = false;  // an override that matches no tensor is an error, not a warning

  void add_model_flags(CLI::App& app);           // --preset, --spec
  void add_build_flags(CLI::App& app, const std::string& layouts);  // dtype, recipe, seed, layout, ...
  void add_backend_flags(CLI::App& app);         // --backend, --threads

  ModelSpec load_spec() const;
  Recipe load_recipe() const;
  BuildOptions build_options() const;  // layout "restack" maps to per-layer
  // Each --init-override / --dtype-override pattern that matches no tensor of `spec`: a warning line
  // on stderr, or with --strict a usage_error naming the first.
  void check_overrides(const ModelSpec& spec, const Recipe& recipe, const BuildOptions& opts) const;
};

// Every integer option goes through these: decimal digits only (no sign, no 0x or octal prefix, no
// exponent, no spaces; leading zeros are decimal), within [min, max]. CLI11's own conversion read
// "010" as 8, "0x10" as 16 and "-1" or 2^64 as 2^64 - 1. Throws usage_error naming the option.
std::uint64_t parse_decimal(std::string_view text, std::string_view option, std::uint64_t min, std::uint64_t max);
CLI::Option* add_decimal_option(CLI::App& app, const std::string& name, std::uint64_t& target, std::uint64_t min,
                                std::uint64_t max, const std::string& help);
CLI::Option* add_decimal_option(CLI::App& app, const std::string& name, int& target, int min, int max,
                                const std::string& help);

// "fp32", a FillSpec from "normal(0,0.02)", "trunc_normal(0,0.02,-2,2)", "trunc_normal_std(0,0.02,-3,3)",
// "uniform(-0.1,0.1)", "constant(1)".
FillSpec parse_fill(const std::string& text);

nlohmann::ordered_json shape_json(const Shape& s);
std::string hex64(std::uint64_t h);

// The "tensors" array of a report: name, shape, dtype, bytes, fnv1a64 (and per-layer hashes).
nlohmann::ordered_json tensors_json(const std::vector<TensorReport>& tensors);

// The report fields build and emit share: model, dtype, seed, recipe, layout, orientation, backend.
nlohmann::ordered_json report_header(const ModelSpec& spec, const BuildOptions& opts, const Recipe& recipe,
                                     const std::string& layout, const backend& be);

int build_command(const ModelArgs& args, const std::string& report, const std::string& trace_file);

struct PlanArgs {
  bool json = false;
  std::string training = "mixed";
  std::uint64_t batch = 1;
  std::uint64_t seq = 2048;
  std::string gpu_mem;
};
int plan_command(const ModelArgs& args, const PlanArgs& plan);

struct EmitArgs {
  std::string format = "hdf5";
  std::string output;
  bool force = false;
  std::string report;
  std::string max_shard_size;
};
int emit_command(const ModelArgs& args, const EmitArgs& emit);

}  // namespace layerinit::cli
