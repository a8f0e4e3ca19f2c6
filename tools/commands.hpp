// The subcommands main() runs: build, plan, emit and verify.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "args.hpp"

namespace layerinit::cli {

int build_command(const ModelArgs& args, const std::string& report, const std::string& trace_file, bool force);

struct PlanArgs {
  std::string report;  // "json" (--report json, --json): JSON instead of tables
  bool record = false;  // --record: plan_record (plan/plan.hpp) instead of tables
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
struct VerifyArgs {
  std::string path;
  std::string report;
  bool all = false;          // every tensor in the text report, equal ones too
  bool no_diagnose = false;  // skip looking for what a difference is
  std::vector<std::uint64_t> seed_guesses;  // --seed-guess: seeds "other_seed" tries besides 0..1023
};
// `app` is verify's subcommand: which build flags were given (each one not given comes from the
// checkpoint's metadata, else emit's default). Returns 0 when every tensor is equal, else 1.
int verify_command(const ModelArgs& args, const VerifyArgs& verify, const CLI::App& app);

// SIGINT, SIGTERM and SIGHUP, handled from main's first step on, for every command (and unblocked,
// should the process have been started with them blocked; a SIGHUP ignored by nohup stays ignored).
// Until interrupt_later() nothing needs removing: a signal prints "layerinit: interrupted" (unless
// interrupts_quiet()) and exits 130 at once. After it, the signal only sets emit_cancel(): emit
// stops at its next part (and, under MPI, stops waiting for the other ranks) or before it
// publishes, removes its temporary, prints its own line and exits 130.
void install_interrupt_handlers();
void interrupts_quiet();  // an MPI rank other than 0: no line
// The process is about to print its error line and exit with its code: SIGINT, SIGTERM and SIGHUP
// are ignored from here on (a launcher's SIGTERM once another rank failed added "layerinit:
// interrupted" under the line and made the exit 130).
void interrupts_decided();
void interrupt_later();   // emit, before its first file
std::atomic<bool>& emit_cancel();

}  // namespace layerinit::cli
