// layerinit emit: build layer by layer and stream into an HDF5 file or a safetensors directory.
#include <atomic>
#include <cstdlib>
#include <exception>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <layerinit/core/bytes.hpp>
#include <layerinit/plan/plan.hpp>
#include <layerinit/shard/rank.hpp>
#include <layerinit/checkpoint/parallel.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/core/errors.hpp>
#include "commands.hpp"
#include "report.hpp"
#include "mpi.hpp"

namespace layerinit::cli {

// The options of the checkpoint's writer: its format, --force, --max-shard-size, and a Hugging Face
// config.json beside safetensors weights of a whole model (`note`: say when it declares another dtype).
EmitOptions emit_options(const EmitArgs& ea, CheckpointFormat format, bool rank, const ModelSpec& spec,
                         const BuildOptions& opts, bool note) {
  EmitOptions eo;
  eo.format = format;
  eo.writer.overwrite = ea.force;
  if (!ea.max_shard_size.empty()) {
    if (format != CheckpointFormat::safetensors) bad_argument("--max-shard-size", "applies to --format safetensors");
    eo.writer.max_shard_size = parse_byte_size(ea.max_shard_size);
    if (eo.writer.max_shard_size == 0) bad_argument("--max-shard-size", "must be positive");
  }
  if (!rank && format == CheckpointFormat::safetensors)
    if (auto config = hf_config_for(spec, opts)) {
      // --dtype other than the config's: config.json says the file's dtype, and the user hears of it.
      if (!spec.hf_config.empty() && *config != spec.hf_config && note)
        std::fprintf(stderr, "layerinit: note: the config declares another dtype than --dtype %s; the config.json written "
                     "beside the weights declares theirs\n", std::string(dtype_name(opts.dtype)).c_str());
      eo.writer.config_json = std::move(*config);
    }
  return eo;
}

// What emit's report names.
struct EmitReport {
  const ModelArgs& args;
  const EmitArgs& ea;
  const ModelSpec& spec;
  const BuildOptions& opts;
  const Recipe& recipe;
  CheckpointFormat format;
  const backend& be;
  const std::optional<ParallelPlan>& plan;
  const std::optional<RankPlan>& rank;
  const MpiJob* job;
  const std::string& written;
};

// emit's report on stdout (--report json, or a line); check_stdout throws when any of it was lost.
void report_emit(const EmitReport& e, const EmitResult& r, std::uint64_t peak, std::uint64_t peak_rank) {
  const auto& [args, ea, spec, opts, recipe, format, be, plan, rank, job, written] = e;
  begin_stdout();
  if (ea.report == "json") {
    nlohmann::ordered_json out = report_header(spec, opts, recipe, args.layout_text(), be);
    if (rank) add_rank_json(out, *plan, rank->rank());
    if (job) out["processes"] = job->size();
    out["format"] = format_name(format);
    out["output"] = escape_non_utf8(written);
    out["parameters"] = rank ? plan_rank(*rank, TrainingSetup::mixed).parameters : spec.parameter_count();
    if (!rank) out["buffers"] = spec.buffer_count();
    out["tensors"] = tensors_json(r.tensors);
    out["total_bytes"] = r.weight_bytes;
    out["peak_bytes"] = peak;
    if (job) out["peak_rank"] = peak_rank;
    out["file_bytes"] = r.file_bytes;
    out["wall_seconds"] = r.seconds;
    // Replace (never throw on) any other invalid UTF-8: the report is all that is left to do.
    std::cout << out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else if (job) {
    std::printf("%s: wrote %s (%s on disk) with %llu processes in %.2f s; peak %s (rank %llu, the largest)\n",
                printable(written).c_str(),
                format_bytes(r.weight_bytes).c_str(), format_bytes(r.file_bytes).c_str(),
                static_cast<unsigned long long>(job->size()), r.seconds, format_bytes(peak).c_str(),
                static_cast<unsigned long long>(peak_rank));
  } else {
    std::printf("%s: wrote %s (%s on disk) in %.2f s; peak %s\n", printable(written).c_str(),
                format_bytes(r.weight_bytes).c_str(), format_bytes(r.file_bytes).c_str(), r.seconds,
                format_bytes(peak).c_str());
  }
  check_stdout();
}

int emit_command(const ModelArgs& args, const EmitArgs& ea, bool format_given, MpiJob* job) {
  // Under MPI every rank does the work below, and a failure on any of them (a bad flag is the same
  // everywhere, the memory check is not) is agreed on before the parallel emit starts.
  std::exception_ptr early;
  std::optional<ModelSpec> spec;
  std::optional<Recipe> recipe;
  BuildOptions opts;
  CheckpointFormat format = CheckpointFormat::hdf5;
  std::optional<ParallelPlan> plan;
  EmitOptions eo;
  std::unique_ptr<backend> be;
  std::optional<tracking_resource> tracker;
  std::optional<Builder> builder;
  std::optional<RankPlan> rank;
  const bool speaks = !job || job->rank() == 0;  // rank 0 alone prints progress, notes and warnings
  std::optional<Progress> progress;
  try {
    progress.emplace("emit", "layers", args.progress_mode(), speaks);
    if (ea.output.empty()) bad_argument("-o", "PATH is required");
    format = parse_checkpoint_format(ea.format);
    spec.emplace(args.load_spec());
    recipe.emplace(args.load_recipe());
    opts = args.build_options(*spec);
    args.check_overrides(*spec, *recipe, opts, speaks);

    if (args.sharded()) {
      if (job)
        throw bad_input("--rank", "", "writes one rank's file: run it without mpirun",
                        "under mpirun, emit splits the checkpoint's files among the processes; --tp, --pp, --ep, "
                        "--fsdp and --rank write one rank's file: run them without mpirun");
      plan.emplace(args.parallel_plan(*spec));
      if (!args.rank)
        throw missing_rank(*plan, "emit needs --rank R, the rank to write");
      if (!format_given || format != CheckpointFormat::safetensors)
        throw bad_input("--format", "", "emit --rank writes one safetensors file per rank: give --format safetensors",
                        "emit --rank writes one safetensors file per rank: give --format safetensors");
      if (!ea.max_shard_size.empty()) bad_argument("--max-shard-size", "does not apply to --rank (a rank is one file)");
    }

    eo = emit_options(ea, format, plan.has_value(), *spec, opts, speaks && !args.quiet);
    // The file's metadata (dtype, seed, recipe, layout, orientation, model spec) is the builder's:
    // emit_checkpoint fills it in.
    eo.cancel = &emit_cancel();
    if (progress->shown())
      eo.progress = [&progress](const EmitProgress& p) {
        progress->update(p.layers_done, p.layers_total, p.bytes_done, p.bytes_total, p.seconds);
      };

    be = args.open_backend();
    tracker.emplace(be->memory());
    builder.emplace(*spec, *recipe, opts, *be, *tracker);
    if (plan) {
      rank.emplace(*builder, *plan, *args.rank);
      check_memory(args, *be, {"this rank's largest part", plan_rank(*rank, TrainingSetup::mixed).peak_streamed,
                               record_bytes(*spec, opts.layout, opts.layout == Layout::stacked)});
    } else {
      // Under MPI a rank holds at most the largest part too (its share is streamed the same way).
      check_memory(args, *be, {"the largest part", make_memory_plan(*builder).peak_streamed,
                               record_bytes(*spec, opts.layout, opts.layout == Layout::stacked)});
    }
    // A test hook: this MPI rank dies by SIGKILL after its first part, as a rank lost mid-run.
    if (const char* k = std::getenv("LAYERINIT_TEST_KILL_RANK"); job && k && std::to_string(job->rank()) == k)
      eo.progress = [](const EmitProgress&) { std::raise(SIGKILL); };
  } catch (...) {
    if (!job) throw;
    early = std::current_exception();
  }
  if (job) {
    if (const auto first = job->first_failure(!early)) {
      if (*first == job->rank() && early) std::rethrow_exception(early);
      throw rank_failed(*first, job->size());
    }
  }

  // What the report and messages name: the rank's file, or the checkpoint.
  const std::string written =
      rank ? (std::filesystem::path(ea.output) / rank_file_name(rank->rank(), plan->ranks())).string() : ea.output;
  // The progress bar's line, ended before anything else is printed.
  auto end_line = [&] { progress->end(); };
  // The report, on stdout; check_stdout throws when any of it was lost.
  auto report = [&](const EmitResult& r, std::uint64_t peak, std::uint64_t peak_rank) {
    end_line();
    report_emit({args, ea, *spec, opts, *recipe, format, *be, plan, rank, job, written}, r, peak, peak_rank);
  };
  // One process: the report is written, and its write checked, before the checkpoint is renamed into
  // place, so a report that cannot be written publishes nothing (exit 1, the target as it was). Under
  // MPI rank 0 reports the job's peak, known only once every rank is done: after publishing.
  if (!job) eo.before_publish = [&](const EmitResult& r) { report(r, tracker->stats().peak_bytes, 0); };
  // From here on a signal stops the emit at its next part (or before it publishes), which removes the
  // temporary; until here nothing was written, and a signal ended the process at once.
  interrupt_later();
  EmitResult r;
  try {
    r = rank ? emit_rank(*rank, *be, ea.output, eo)
        : job ? emit_parallel(*builder, *be, ea.output, eo, *job)
              : emit_checkpoint(*builder, *be, ea.output, eo);
  } catch (...) {
    end_line();
    if (emit_cancel().load()) {
      if (!job || job->rank() == 0)
        std::fprintf(stderr, "layerinit: interrupted; %s was left as it was\n", printable(written).c_str());
      std::_Exit(130);  // tools/ only: the library never exits; no MPI_Finalize with peers gone
    }
    throw;
  }
  if (!job) return 0;  // reported before publishing
  end_line();
  // The job's peak is its largest rank's (a rank may write nothing: one file goes to one rank).
  std::uint64_t peak = tracker->stats().peak_bytes, peak_rank = 0;
  const std::vector<std::string> peaks = job->gather(std::to_string(peak), 0);
  for (std::size_t k = 0; k < peaks.size(); ++k)
    if (const std::uint64_t p = std::stoull(peaks[k]); p > peak || k == 0) peak = p, peak_rank = k;
  if (job->rank() != 0) return 0;  // rank 0 reports the checkpoint
  report(r, peak, peak_rank);
  return 0;
}

}  // namespace layerinit::cli
