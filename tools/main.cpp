// layerinit: build, plan, emit and verify model parameters layer by layer.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <layerinit/init/spec_json.hpp>
#include <layerinit/config.hpp>
#include <layerinit/core/errors.hpp>
#include "commands.hpp"
#include "report.hpp"
#include "mpi.hpp"

namespace {
// Under an MPI launcher every process parses the same command line: only rank 0 prints what fails
// before the processes talk (the same error on every rank), the others exit with the same code.
bool g_quiet = false;

// One line on stderr and the exit code: 2 for bad input or a refused output path, 1 for anything else
// (an environment or I/O failure). Messages echo user text (names, paths, CLI11's flag names):
// printable() keeps them one line, without terminal escapes.
[[noreturn]] void fail(int code, const char* what, const char* suffix = "") {
  // Decided first: a launcher's SIGTERM while the line is written or the process exits (MPI's
  // finalization) must neither cut the line nor add "layerinit: interrupted" under it
  // (CliMpi.BadInputIsOneLineExitTwo, now and then: the other rank failed first, mpirun stopped this one).
  layerinit::cli::interrupts_decided();
  if (!g_quiet) std::fprintf(stderr, "layerinit: error: %s%s\n", layerinit::printable(what).c_str(), suffix);
  std::exit(code);
}

// The exit code and line of a command's exception (CLI11's parse errors aside).
std::pair<int, std::string> classify(const std::exception_ptr& e) {
  using namespace layerinit;
  try {
    std::rethrow_exception(e);
  } catch (const bad_input& x) {  // the library's and the command line's, spec_error among them
    return {2, x.what()};
  } catch (const std::overflow_error& x) {
    return {2, x.what()};
  } catch (const checkpoint_refused& x) {  // an output path that may not be written: bad input
    return {2, x.what()};
  } catch (const out_of_memory& x) {
    return {1, x.what()};
  } catch (const std::bad_alloc&) {  // a list or report past the memory check: the same kind of line
    return {1, "out of memory on host: an allocation outside the tracked tensors failed (std::bad_alloc)"};
  } catch (const std::exception& x) {
    return {1, x.what()};
  } catch (...) {
    return {1, "unknown error"};
  }
}

// emit as one rank of an MPI job. The ranks agree on the outcome: success, or the lowest failed
// rank, whose line rank 0 prints once ("layerinit: error: rank 2 of 4: ...") and whose exit code
// every rank exits with. A rank interrupted (the launcher's SIGTERM after a peer died) leaves at once
// with 130, having removed what it could: its peers may be gone, so it waits for no one.
int emit_under_mpi(int& argc, char**& argv, const layerinit::cli::ModelArgs& args, const layerinit::cli::EmitArgs& ea,
                   bool format_given) {
  using namespace layerinit;
  using namespace layerinit::cli;
  std::unique_ptr<MpiJob> job;
  try {
    job = MpiJob::start(argc, argv, &emit_cancel());
  } catch (const std::exception& e) {
    fail(1, e.what());
  }
  const std::uint64_t none = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t vote = none;  // the lowest rank known to have failed
  int code = 0;
  std::string line;
  try {
    emit_command(args, ea, format_given, job.get());
  } catch (const rank_failed& e) {
    vote = e.rank();
  } catch (...) {
    vote = job->rank();
    std::tie(code, line) = classify(std::current_exception());
  }
  if (emit_cancel().load()) std::_Exit(130);  // the interrupted line is emit_command's
  try {
    const std::uint64_t first = job->min(vote);
    if (first == none) {
      job->finish();
      return 0;
    }
    const std::string packet = job->broadcast(first == job->rank() ? std::to_string(code) + "\n" + line : std::string(), first);
    const std::size_t nl = packet.find('\n');
    code = std::atoi(packet.substr(0, nl).c_str());
    // Decided: every rank now prints (rank 0) and exits with `code`. The first to exit non-zero makes
    // mpirun SIGTERM the others grace seconds later, a loaded machine's rank maybe still leaving:
    // ignored, or it would add "layerinit: interrupted" under the line and exit 130.
    interrupts_decided();
    if (job->rank() == 0)
      std::fprintf(stderr, "layerinit: error: rank %llu of %llu: %s\n", static_cast<unsigned long long>(first),
                   static_cast<unsigned long long>(job->size()), printable(packet.substr(nl + 1)).c_str());
  } catch (...) {
    std::_Exit(emit_cancel().load() ? 130 : 1);
  }
  job->finish();
  // A test hook: the launcher's SIGTERM reaches this rank as it leaves, as when a peer exited first
  // (mpirun stops the others grace seconds after a non-zero exit; on a loaded machine they may be there).
  if (const char* k = std::getenv("LAYERINIT_TEST_TERM_RANK"); k && std::to_string(job->rank()) == k)
    std::raise(SIGTERM);
  return code == 0 ? 1 : code;
}

// Every command's result is on stdout. A closed stdout is refused before any work: a file the
// command opens would otherwise take fd 1 and receive the report.
void check_stdout_open() {
  const int flags = ::fcntl(STDOUT_FILENO, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY)
    fail(1, "cannot write to standard output: ", std::strerror(flags < 0 ? errno : EBADF));
}

// Help and version text: a failed write is exit 1 like a lost report (the commands check their own).
int help_written(int rc) {
  try {
    layerinit::cli::check_stdout();
  } catch (const std::exception& e) {
    fail(1, e.what());
  }
  return rc;
}

// The subcommands and their flags, bound to the variables main reads after parsing.
using layerinit::cli::EmitArgs;
using layerinit::cli::ModelArgs;
using layerinit::cli::PlanArgs;
using layerinit::cli::VerifyArgs;
using layerinit::cli::add_decimal_option;
using layerinit::cli::add_report_flags;
using layerinit::cli::parse_decimal;

CLI::App* add_build(CLI::App& app, ModelArgs& build_args, std::string& build_report, std::string& build_trace, bool& build_force) {
  auto* build = app.add_subcommand("build", "Build a model in memory and report its tensors, hashes, peak memory and time");
  build_args.add_model_flags(*build);
  build_args.add_build_flags(*build, true);
  build_args.add_backend_flags(*build);
  build_args.add_parallel_flags(*build);
  add_report_flags(*build, build_report, "Print a machine-readable report");
  build_args.add_quiet_flag(*build);
  build->add_option("--trace", build_trace, "Write bytes in use after each allocation and free to a CSV file");
  build->add_flag("--force", build_force, "Replace an existing --trace file (only a trace layerinit wrote)");
  return build;
}

CLI::App* add_plan(CLI::App& app, ModelArgs& plan_args, PlanArgs& plan_opts) {
  auto* plan = app.add_subcommand("plan", "Predict memory (build peaks, naive strategies, disk, training) without allocating");
  plan_args.add_model_flags(*plan);
  plan_args.add_build_flags(*plan, false);
  plan_args.add_parallel_flags(*plan);
  add_report_flags(*plan, plan_opts.report, "Print JSON instead of tables");
  plan_args.add_quiet_flag(*plan);
  plan->add_flag("--record", plan_opts.record,
                 "Print the plan's record instead: a line per tensor, the bytes every face of layerinit plans for this "
                 "model (docs/design.md)");
  plan->add_flag("--per-layer", plan_opts.per_layer, "A subtotal row per layer (default: one per run of identical layers)");
  plan->add_option("--precision", plan_opts.training, "Training setup for the estimate: mixed, fp32, pure-bf16")->capture_default_str();
  add_decimal_option(*plan, "--batch", plan_opts.batch, 1, std::numeric_limits<std::uint64_t>::max(),
                     "Batch size for activation memory");
  add_decimal_option(*plan, "--seq", plan_opts.seq, 1, std::numeric_limits<std::uint64_t>::max(),
                     "Sequence length for activation memory");
  plan->add_option("--gpu-mem", plan_opts.gpu_mem, "GPU memory (e.g. 80GiB): also print the largest batch that fits");
  return plan;
}

// emit_format: its --format option (emit reads whether it was given).
CLI::App* add_emit(CLI::App& app, ModelArgs& emit_args, EmitArgs& emit_opts, CLI::Option*& emit_format) {
  auto* emit = app.add_subcommand("emit", "Build layer by layer and stream into an HDF5 file or a safetensors directory");
  emit_args.add_model_flags(*emit);
  emit_args.add_build_flags(*emit, false);
  emit_args.add_backend_flags(*emit);
  emit_args.add_parallel_flags(*emit);
  emit_format = emit->add_option("--format", emit_opts.format,
                                       "hdf5 (a file) or safetensors (a directory with config.json; with --rank, "
                                       "the rank's file in it)")->capture_default_str();
  emit->add_option("-o,--output", emit_opts.output, "Target path; written to a temporary file beside it, then renamed");
  emit->add_flag("--force", emit_opts.force, "Replace an existing target");
  add_report_flags(*emit, emit_opts.report, "Print a machine-readable report (hashes equal build's)");
  emit_args.add_progress_flags(*emit);
  emit->add_option("--max-shard-size", emit_opts.max_shard_size, "safetensors: shard above this size (e.g. 5GB)");
  return emit;
}

CLI::App* add_verify(CLI::App& app, ModelArgs& verify_args, VerifyArgs& verify_opts) {
  auto* verify = app.add_subcommand("verify", "Check that a checkpoint holds the init it claims, tensor by tensor, streamed "
                                              "(exit 0: every tensor equal, 1: something differs or is missing)");
  verify->add_option("path", verify_opts.path,
                     "A safetensors file or directory (sharded, with its index), an HDF5 file, or a directory of emit --rank "
                     "files")->required();
  verify_args.add_model_flags(*verify);
  verify_args.add_build_flags(*verify, false);
  // The values are made again on the host, beside the file's: --threads, but no --backend.
  add_decimal_option(*verify, "--threads", verify_args.threads, 0, 4096,
                     "Host threads (0 = the CPUs this process may use: its affinity mask and cgroup CPU quota)");
  verify->add_flag("--no-memory-check", verify_args.no_memory_check,
                   "Go ahead even when the model's tensor records and the compare's buffers exceed the memory this "
                   "process may use");
  add_report_flags(*verify, verify_opts.report, "Print a machine-readable report");
  verify_args.add_progress_flags(*verify);
  verify->add_flag("--all", verify_opts.all, "List every tensor, the equal ones too (text report)");
  verify->add_flag("--no-diagnose", verify_opts.no_diagnose,
                   "Do not look for the transformation behind a difference (transposed, permuted, another seed, ...)");
  verify->add_option_function<std::vector<std::string>>(
            "--seed-guess",
            [&verify_opts](const std::vector<std::string>& v) {
              for (const auto& s : v)
                verify_opts.seed_guesses.push_back(parse_decimal(s, "--seed-guess", 0, std::numeric_limits<std::uint64_t>::max()));
            },
            "A seed the file may have been made with, tried besides 0..1023 when values differ (repeatable)")
      ->type_name("UINT");
  return verify;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace layerinit;
  using namespace layerinit::cli;
  // Under a launcher only rank 0 speaks (the environment says which rank this is, no MPI call): known
  // before the handlers, or the launcher's SIGTERM to the other ranks could print a line of theirs.
  const std::optional<Launch> launch = mpi_launch();
  const bool mpi_job = launch && launch->size != 1;  // size 0: a PMIx launcher, size known after MPI_Init
  g_quiet = mpi_job && launch->rank != 0;
  if (g_quiet) interrupts_quiet();
  // First, before any work: every interruption is exit 130 and one line, never a silent death.
  install_interrupt_handlers();
  // Past `ulimit -f` the default SIGXFSZ kills the process mid-write, leaving the temporary behind;
  // ignored, the write fails with EFBIG and takes the normal cleanup path (one line, exit 1).
  std::signal(SIGXFSZ, SIG_IGN);
  // Likewise a report into a pipe whose reader has gone (`| true`): EPIPE, one line and exit 1, the
  // temporary removed, instead of a silent death by SIGPIPE (141) with the temporary left behind.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"layerinit " LAYERINIT_VERSION ": model parameters created layer by layer, directly in fp16/bf16, "
               "with values that depend only on (seed, tensor name, element index)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("layerinit ") + LAYERINIT_VERSION);

  ModelArgs build_args;
  std::string build_report, build_trace;
  bool build_force = false;
  auto* build = add_build(app, build_args, build_report, build_trace, build_force);

  ModelArgs plan_args;
  PlanArgs plan_opts;
  auto* plan = add_plan(app, plan_args, plan_opts);

  ModelArgs emit_args;
  EmitArgs emit_opts;
  CLI::Option* emit_format = nullptr;
  auto* emit = add_emit(app, emit_args, emit_opts, emit_format);

  ModelArgs verify_args;
  VerifyArgs verify_opts;
  auto* verify = add_verify(app, verify_args, verify_opts);

  check_stdout_open();
  // CLI11 answers a word that is no command with "A subcommand is required": name it and the commands.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == argv[1];
    }
    if (!known) fail(2, ("unknown command '" + std::string(argv[1]) + "' (commands: " + names + "; see --help)").c_str());
  }
  try {
    app.parse(argc, argv);
    if (*build) return build_command(build_args, build_report, build_trace, build_force);
    if (*plan) return plan_command(plan_args, plan_opts);
    if (*emit && mpi_job) {
      if (!mpi_built())
        throw layerinit::bad_input("mpirun", "", "this layerinit was built without MPI",
                                   "started by an MPI launcher" +
                                       (launch->size ? " with " + std::to_string(launch->size) + " processes" : std::string()) +
                                       ", but this layerinit was built without MPI (LAYERINIT_MPI=OFF, or CMake found none): "
                                       "run one process, or rebuild with MPI");
      return emit_under_mpi(argc, argv, emit_args, emit_opts, emit_format->count() > 0);
    }
    if (*emit) return emit_command(emit_args, emit_opts, emit_format->count() > 0);
    if (*verify) return verify_command(verify_args, verify_opts, *verify);
  } catch (const CLI::CallForHelp& e) {
    begin_stdout();
    return help_written(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    begin_stdout();
    return help_written(app.exit(e));
  } catch (const CLI::Success& e) {
    begin_stdout();
    return help_written(app.exit(e));
  } catch (const CLI::ParseError& e) {
    fail(2, e.what(), " (see --help)");
  } catch (...) {
    const auto [code, line] = classify(std::current_exception());
    fail(code, line.c_str());
  }
  return 0;
}
