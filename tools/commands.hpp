// The subcommands main() runs: build, plan and emit.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "args.hpp"

namespace layerinit::cli {

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
