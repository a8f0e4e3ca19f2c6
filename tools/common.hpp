// Shared pieces of the layerinit subcommands: model selection, build options, reports.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/shard/parallel.hpp>

namespace layerinit::cli {

// Bad input: reported as one line with exit code 2.
struct usage_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A spec file is JSON of a few KiB; larger ones (or /dev/zero) are refused before they are read whole.
inline constexpr std::size_t kMaxSpecFileBytes = 16u << 20;

// Flags every model-building subcommand takes.
struct ModelArgs {
  std::string preset;
  std::string spec_file;
  std::string hf_config;  // a Hugging Face config.json, or a directory holding one
  std::string dtype = "bf16";
  std::vector<std::string> dtype_overrides;  // PATTERN=DTYPE
  std::string recipe = "hf";
  std::vector<std::string> init_overrides;   // PATTERN=FILL
  std::uint64_t seed = 0;
  std::string layout = "per-layer";
  std::string orientation = "out-in";
  std::string experts = "stacked";  // stacked layout: MoE experts as [L, E, ...] or per expert
  std::string backend = "auto";
  int threads = 0;
  bool no_memory_check = false;
  bool strict = false;  // an override that matches no tensor is an error, not a warning
  ParallelDegrees parallel;           // --tp, --pp, --ep, --fsdp
  std::optional<std::uint64_t> rank;  // --rank

  void add_model_flags(CLI::App& app);           // --preset, --spec, --hf-config
  void add_build_flags(CLI::App& app, const std::string& layouts);  // dtype, recipe, seed, layout, ...
  void add_backend_flags(CLI::App& app);         // --backend, --threads, --no-memory-check
  void add_parallel_flags(CLI::App& app);        // --tp, --pp, --ep, --fsdp, --rank (docs/sharding.md)

  bool sharded() const;  // a degree above 1, or --rank
  // The mesh flags' plan for `spec` (bad degrees: usage_error); with --rank, a rank of that mesh.
  ParallelPlan parallel_plan(const ModelSpec& spec) const;

  ModelSpec load_spec() const;
  Recipe load_recipe() const;
  BuildOptions build_options() const;  // layout "restack" maps to per-layer
  // Each --init-override / --dtype-override pattern that matches no tensor of `spec`: a warning line
  // on stderr (unless !warn: the MPI ranks but rank 0), or with --strict a usage_error naming the first.
  void check_overrides(const ModelSpec& spec, const Recipe& recipe, const BuildOptions& opts, bool warn = true) const;
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

// "N parameters", and ", M buffer elements" when there are buffers (DeepSeek-V3's router biases).
std::string parameters_text(std::uint64_t parameters, std::uint64_t buffers);

nlohmann::ordered_json shape_json(const Shape& s);
// `s` for a JSON string: bytes that are not part of valid UTF-8 (a path may hold any byte but '\0')
// become the four characters \xNN, so dump() cannot throw and the bytes stay recoverable.
std::string escape_non_utf8(const std::string& s);
std::string hex64(std::uint64_t h);

// The "tensors" array of a report: name, shape, dtype, bytes, xxh3_64 (and per-layer hashes); a
// rank's piece has global_shape, offset and local_shape instead of shape.
nlohmann::ordered_json tensors_json(const std::vector<TensorReport>& tensors);
// The fields of a rank's report: "parallel" {"pp", "fsdp", "ep", "tp"}, "ranks", "rank", "coords",
// "layers" [first, count].
void add_rank_json(nlohmann::ordered_json& out, const ParallelPlan& plan, std::uint64_t rank);

// The report fields build and emit share: model, dtype, seed, recipe, layout, orientation, backend.
nlohmann::ordered_json report_header(const ModelSpec& spec, const BuildOptions& opts, const Recipe& recipe,
                                     const std::string& layout, const backend& be);

// What a build or emit will hold at its worst moment, for the memory preflight.
struct MemoryNeed {
  std::string peak_what;     // "weights", "the largest part", ...
  std::uint64_t peak = 0;    // the plan's peak, on the backend's memory
  std::uint64_t records = 0; // host memory besides the tensors that grows with their count (estimate)
};

// Host bytes of the lists, reports and writer state that grow with the number of tensors (see
// tools/common.cpp for the measurements). `hdf5_datasets`: emit to HDF5, which holds every dataset open.
std::uint64_t record_bytes(const ModelSpec& spec, const std::string& layout, bool hdf5_datasets);

// Before anything is allocated: throws usage_error (exit 2) naming both numbers when `need` exceeds
// what this process may use (backend::available_memory; on a GPU the records are checked against
// the host's), unless --no-memory-check. The environment variable LAYERINIT_TEST_AVAILABLE_MEMORY,
// a test hook, replaces the available bytes ("512MiB").
void check_memory(const ModelArgs& args, backend& be, const MemoryNeed& need);

// Reports and tables go to stdout. begin_stdout() before writing one, check_stdout() after: it throws
// std::runtime_error "cannot write to standard output: <reason>" (exit 1) when any of it was lost to a
// full disk, a closed pipe or another write error, so a lost report never passes as success.
void begin_stdout();
void check_stdout();

int build_command(const ModelArgs& args, const std::string& report, const std::string& trace_file, bool force);

struct PlanArgs {
  bool json = false;
  bool per_layer = false;  // a subtotal row per layer instead of one per run of identical layers
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
class MpiJob;
// format_given: --format was on the command line (emit --rank asks for it by name). job: the MPI job
// this process is a rank of (emit_parallel), or null; only rank 0 prints the report.
int emit_command(const ModelArgs& args, const EmitArgs& emit, bool format_given, MpiJob* job = nullptr);
// Set by emit's SIGINT, SIGTERM and SIGHUP handlers: stop at the next part (and, under MPI, stop
// waiting for the other ranks).
std::atomic<bool>& emit_cancel();

}  // namespace layerinit::cli
