// The command line's arguments: the flags every model command shares, integers as decimals, and
// bad input as the library's bad_input (core/errors.hpp: one line, exit 2).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/backends/backend.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/options.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/plan/memory_check.hpp>
#include <layerinit/shard/parallel.hpp>

namespace layerinit::cli {

// The line of a sharded build or emit without --rank: "--tp, --pp, --ep and --fsdp describe a mesh of N
// ranks: <what> (0-N-1)", as a bad_input of --rank.
bad_input missing_rank(const ParallelPlan& plan, const std::string& what);

// --progress: where a long command (emit, verify) shows how far it is, on stderr.
//   automatic: a bar redrawn in place on a terminal; elsewhere (a batch job's log) a plain line at most
//              every few seconds, each at least 10% further, so a short run prints nothing;
//   always:    the bar on a terminal; elsewhere a plain line at every 10%, however short the run;
//   never:     nothing.
enum class ProgressMode { automatic, always, never };

// Flags every model-building subcommand takes.
struct ModelArgs {
  std::string preset;
  std::string spec_file;
  std::string hf_config;  // a Hugging Face config.json, or a directory holding one
  std::string dtype;  // --dtype; empty: the model's (default_dtype: its config.json's, else bf16)
  std::vector<std::string> dtype_overrides;  // PATTERN=DTYPE
  std::string recipe = "hf";
  std::vector<std::string> init_overrides;   // PATTERN=FILL
  std::uint64_t seed = 0;
  std::string layout = "per-layer";  // --layout as the library reads it (restack: per-layer)
  bool restack = false;              // build --layout restack: per-layer, then stacked in place
  std::string orientation = "out-in";
  std::string experts = "stacked";  // stacked layout: MoE experts as [L, E, ...] or per expert
  std::string backend = "auto";
  int threads = 0;
  bool no_memory_check = false;
  bool strict = false;  // an override that matches no tensor is an error, not a warning
  ParallelDegrees parallel;           // --tp, --pp, --ep, --fsdp
  std::optional<std::uint64_t> rank;  // --rank
  bool quiet = false;                 // --quiet: no progress, no warnings or notes; errors as ever
  std::string progress;               // --progress as given (checked then); empty: not given

  void add_quiet_flag(CLI::App& app);     // --quiet (plan, build: no progress there, warnings only)
  void add_progress_flags(CLI::App& app); // --progress and --quiet (emit, verify)
  // --progress, never under --quiet; --quiet with --progress auto or always is a bad_input.
  ProgressMode progress_mode() const;

  void add_model_flags(CLI::App& app);                      // --preset, --spec, --hf-config
  void add_build_flags(CLI::App& app, bool allow_restack);  // dtype, recipe, seed, layout, ...
  void add_backend_flags(CLI::App& app);                    // --backend (--device), --threads, --no-memory-check
  // The backend --backend names (under a launcher, auto and cuda: the node-local rank's GPU).
  std::unique_ptr<layerinit::backend> open_backend() const;
  void add_parallel_flags(CLI::App& app);                   // --tp, --pp, --ep, --fsdp, --rank (docs/sharding.md)

  // --layout as given: "per-layer", "stacked" or "restack".
  std::string layout_text() const;
  bool sharded() const;  // a degree above 1, or --rank
  // The mesh flags' plan for `spec` (bad degrees: bad_input); with --rank, a rank of that mesh.
  ParallelPlan parallel_plan(const ModelSpec& spec) const;

  ModelSpec load_spec() const;
  // The build flags as the library reads them (OptionsText): each PATTERN=VALUE override split at
  // its last '=' (neither a dtype nor a fill has one), or a bad_input naming the flag.
  OptionsText options_text() const;
  Recipe load_recipe() const;          // checked_recipe: --recipe and --init-override
  // checked_build_options for `spec` (without --dtype, the model's dtype); restack builds per-layer.
  BuildOptions build_options(const ModelSpec& spec) const;
  // Each --init-override / --dtype-override pattern that matches no tensor of `spec`: a warning line
  // on stderr (unless !warn: the MPI ranks but rank 0), or with --strict a bad_input naming the first.
  void check_overrides(const ModelSpec& spec, const Recipe& recipe, const BuildOptions& opts, bool warn = true) const;
};

// --report FORMAT (json, the one format) and its alias --json, on every subcommand that reports:
// `report` becomes "json". Another format is a bad_input naming the valid one.
void add_report_flags(CLI::App& app, std::string& report, const std::string& help);

// Every integer option goes through these: decimal digits only (no sign, no 0x or octal prefix, no
// exponent, no spaces; leading zeros are decimal), within [min, max]. CLI11's own conversion read
// "010" as 8, "0x10" as 16 and "-1" or 2^64 as 2^64 - 1. Throws bad_input naming the option.
std::uint64_t parse_decimal(std::string_view text, std::string_view option, std::uint64_t min, std::uint64_t max);
CLI::Option* add_decimal_option(CLI::App& app, const std::string& name, std::uint64_t& target, std::uint64_t min,
                                std::uint64_t max, const std::string& help);
CLI::Option* add_decimal_option(CLI::App& app, const std::string& name, int& target, int min, int max,
                                const std::string& help);

// The library's memory preflight (check_memory), unless --no-memory-check (the peak is reserved
// either way); a refusal is a bad_input (exit 2) that names the flag.
void check_memory(const ModelArgs& args, backend& be, const MemoryNeed& need);

}  // namespace layerinit::cli
