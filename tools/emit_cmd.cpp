// layerinit emit: build layer by layer and stream into an HDF5 file or a safetensors directory.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <layerinit/core/bytes.hpp>
#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/plan/plan.hpp>
#include <layerinit/shard/rank.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/core/errors.hpp>
#include "common.hpp"

namespace layerinit::cli {

namespace {

std::atomic<bool> g_cancel{false};
extern "C" void on_signal(int) { g_cancel.store(true); }

// A progress line on a terminal, redrawn in place: layers, bytes, rate, ETA.
void draw(const EmitProgress& p) {
  const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
  const double rate = p.seconds > 0 ? static_cast<double>(p.bytes_done) / p.seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate : 0.0;
  const int width = 30, filled = static_cast<int>(frac * width);
  std::fprintf(stderr, "\r[%.*s%*s] layers %llu/%llu  %.2f/%.2f GiB  %.0f MiB/s  ETA %.0f s ", filled,
               "##############################", width - filled, "", (unsigned long long)p.layers_done,
               (unsigned long long)p.layers_total, static_cast<double>(p.bytes_done) / (1u << 30),
               static_cast<double>(p.bytes_total) / (1u << 30), rate / (1u << 20), eta);
  std::fflush(stderr);
}

}  // namespace

int emit_command(const ModelArgs& args, const EmitArgs& ea, bool format_given) {
  if (!ea.report.empty() && ea.report != "json") throw usage_error("unknown report format '" + ea.report + "' (valid: json)");
  if (args.layout != "per-layer" && args.layout != "stacked")
    throw usage_error("unknown layout '" + args.layout + "' (valid: per-layer, stacked)");
  if (ea.output.empty()) throw usage_error("-o PATH is required");
  const CheckpointFormat format = parse_checkpoint_format(ea.format);
  const ModelSpec spec = args.load_spec();
  const Recipe recipe = args.load_recipe();
  const BuildOptions opts = args.build_options();
  args.check_overrides(spec, recipe, opts);

  std::optional<ParallelPlan> plan;
  if (args.sharded()) {
    plan.emplace(args.parallel_plan(spec));
    if (!args.rank)
      throw usage_error("--tp, --pp, --ep and --fsdp describe a mesh of " + std::to_string(plan->ranks()) +
                        " ranks: emit needs --rank R, the rank to write (0-" + std::to_string(plan->ranks() - 1) + ")");
    if (!format_given || format != CheckpointFormat::safetensors)
      throw usage_error("emit --rank writes one safetensors file per rank: give --format safetensors");
    if (!ea.max_shard_size.empty()) throw usage_error("--max-shard-size does not apply to --rank (a rank is one file)");
  }

  EmitOptions eo;
  eo.format = format;
  eo.writer.overwrite = ea.force;
  if (!ea.max_shard_size.empty()) {
    if (format != CheckpointFormat::safetensors) throw usage_error("--max-shard-size applies to --format safetensors");
    eo.writer.max_shard_size = parse_byte_size(ea.max_shard_size);
    if (eo.writer.max_shard_size == 0) throw usage_error("--max-shard-size must be positive");
  }
  // transformers loads the per-layer, out-in layout only: a config.json beside stacked or transposed
  // weights would have it load them as missing keys and initialize those anew.
  if (!plan && format == CheckpointFormat::safetensors && opts.layout == Layout::per_layer &&
      opts.orientation == Orientation::out_in) {
    try {
      eo.writer.config_json = config_json(spec, opts.dtype);
    } catch (const std::invalid_argument&) {
      // MLPs and custom specs have no Hugging Face config: weights only.
    }
  }
  // The file's metadata (dtype, seed, recipe, layout, orientation, model spec) is the builder's:
  // emit_checkpoint fills it in.
  eo.cancel = &g_cancel;
  const bool tty = isatty(STDERR_FILENO);
  if (tty) eo.progress = draw;

  // Ctrl-C or a polite kill: stop at the next part, remove the temporary file, leave the target as it was.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);

  auto be = make_backend(args.backend, args.threads);
  tracking_resource tracker(be->memory());
  const Builder builder(spec, recipe, opts, *be, tracker);
  std::optional<RankPlan> rank;
  if (plan) {
    rank.emplace(builder, *plan, *args.rank);
    check_memory(args, *be, {"this rank's largest part", plan_rank(*rank, TrainingSetup::mixed).peak_streamed,
                             record_bytes(spec, args.layout, false)});
  } else {
    check_memory(args, *be, {"the largest part", make_memory_plan(builder).peak_streamed,
                             record_bytes(spec, args.layout, format == CheckpointFormat::hdf5)});
  }
  // What the report and messages name: the rank's file, or the checkpoint.
  const std::string written =
      rank ? (std::filesystem::path(ea.output) / rank_file_name(rank->rank(), plan->ranks())).string() : ea.output;
  EmitResult r;
  try {
    r = rank ? emit_rank(*rank, *be, ea.output, eo) : emit_checkpoint(builder, *be, ea.output, eo);
  } catch (...) {
    if (tty) std::fprintf(stderr, "\n");
    if (g_cancel.load()) {
      std::fprintf(stderr, "layerinit: interrupted; %s was left as it was\n", printable(written).c_str());
      std::exit(130);  // tools/ only: the library never exits
    }
    throw;
  }
  if (tty) std::fprintf(stderr, "\n");

  begin_stdout();
  if (ea.report == "json") {
    nlohmann::ordered_json out = report_header(spec, opts, recipe, args.layout, *be);
    if (rank) add_rank_json(out, *plan, rank->rank());
    out["format"] = format_name(format);
    out["output"] = escape_non_utf8(written);
    out["parameters"] = rank ? plan_rank(*rank, TrainingSetup::mixed).parameters : spec.parameter_count();
    out["tensors"] = tensors_json(r.tensors);
    out["total_bytes"] = r.weight_bytes;
    out["peak_bytes"] = tracker.stats().peak_bytes;
    out["file_bytes"] = r.file_bytes;
    out["wall_seconds"] = r.seconds;
    // The checkpoint is published by now: replace (never throw on) any other invalid UTF-8.
    std::cout << out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::printf("%s: wrote %s (%s on disk) in %.2f s; peak %s\n", printable(written).c_str(), format_bytes(r.weight_bytes).c_str(),
                format_bytes(r.file_bytes).c_str(), r.seconds, format_bytes(tracker.stats().peak_bytes).c_str());
  }
  check_stdout();
  return 0;
}

}  // namespace layerinit::cli
