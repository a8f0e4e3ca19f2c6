// layerinit build: a model in memory, with per-tensor hashes, tracked peak and time.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <layerinit/core/bytes.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/plan/plan.hpp>
#include <layerinit/shard/rank.hpp>
#include <layerinit/stacking/stack.hpp>
#include "commands.hpp"
#include "report.hpp"
#include "trace.hpp"

namespace layerinit::cli {

namespace {

// The fields every `build --report json` ends with, then the report on stdout.
void print_build_report(nlohmann::ordered_json& out, const std::vector<TensorReport>& tensors, std::uint64_t total_bytes,
                        const MemoryStats& stats, double build_seconds, double hash_seconds) {
  out["tensors"] = tensors_json(tensors);
  out["total_bytes"] = total_bytes;
  out["peak_bytes"] = stats.peak_bytes;
  out["allocations"] = stats.total_count;
  out["wall_seconds"] = build_seconds;
  out["hash_seconds"] = hash_seconds;
  std::cout << out.dump(2) << "\n";
}

// build --rank R: only rank R's pieces (docs/sharding.md).
int build_rank_command(const ModelArgs& args, const ModelSpec& spec, const Recipe& recipe, const BuildOptions& opts,
                       const std::string& report, const std::string& trace_file, bool force) {
  const ParallelPlan plan = args.parallel_plan(spec);
  if (!args.rank)
    throw missing_rank(plan, "build needs --rank R, the rank to build");
  if (args.restack)
    throw bad_input("--layout", "restack", "does not apply to --rank (--layout stacked builds a rank's pieces stacked)",
                    "--layout restack does not apply to --rank (--layout stacked builds a rank's pieces stacked)");
  auto be = args.open_backend();
  tracking_resource tracker(be->memory(), tracking_resource::options{.live_list = !trace_file.empty()});
  const Builder builder(spec, recipe, opts, *be, tracker);
  const RankPlan rank(builder, plan, *args.rank);
  const RankMemoryPlan need = plan_rank(rank, TrainingSetup::mixed);
  check_memory(args, *be, {"this rank's pieces", need.weight_bytes, record_bytes(spec, opts.layout, opts.layout == Layout::stacked)});
  MemoryTrace trace(spec);
  if (!trace_file.empty()) trace.attach(tracker, trace_file, force);

  const auto t0 = std::chrono::steady_clock::now();
  const RankModel model = build_rank(rank);
  const double build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const MemoryStats stats = tracker.stats();

  std::vector<TensorReport> tensors;
  const auto t1 = std::chrono::steady_clock::now();
  if (report == "json") {
    for (const LocalTensor& lt : model.tensors) {
      const TensorView& v = lt.tensor.view;
      TensorReport t(v.name, v.shape, v.dtype);
      t.hash = hash_tensor(*be, v);
      t.global_shape = lt.global_shape;
      t.offset = lt.offset;
      if (lt.stacked) {
        // A stacked piece [n, ...] or [n, ne, ...]: a hash per layer (and expert) slice, as the
        // unsharded report gives.
        const std::uint64_t slices = v.shape[0] * lt.experts, slice = v.bytes() / slices;
        for (std::uint64_t k = 0; k < slices; ++k)
          t.layer_hashes.push_back(hash_bytes(*be, static_cast<const unsigned char*>(v.data) + k * slice, slice));
      }
      tensors.push_back(std::move(t));
    }
  }
  const double hash_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();

  begin_stdout();
  if (report == "json") {
    nlohmann::ordered_json out = report_header(spec, opts, recipe, args.layout_text(), *be);
    add_rank_json(out, plan, rank.rank());
    out["parameters"] = need.parameters;
    print_build_report(out, tensors, model.bytes(), stats, build_seconds, hash_seconds);
  } else {
    const ParallelPlan::Coords c = rank.coords();
    std::printf("%s: rank %llu of %llu (pp %llu, fsdp %llu, ep %llu, tp %llu): %llu parameters in %zu pieces, %s, layout %s, "
                "backend %s\n",
                spec.name.c_str(), (unsigned long long)rank.rank(), (unsigned long long)plan.ranks(), (unsigned long long)c.pp,
                (unsigned long long)c.fsdp, (unsigned long long)c.ep, (unsigned long long)c.tp, (unsigned long long)need.parameters,
                model.tensors.size(), std::string(dtype_name(opts.dtype)).c_str(), args.layout_text().c_str(), be->describe().c_str());
    std::printf("weights    %s\npeak       %s\ntime       %.3f s\n", format_bytes(model.bytes()).c_str(),
                format_bytes(stats.peak_bytes).c_str(), build_seconds);
  }
  check_stdout();
  trace.finish();
  return 0;
}

}  // namespace

int build_command(const ModelArgs& args, const std::string& report, const std::string& trace_file, bool force) {
  const ModelSpec spec = args.load_spec();
  const Recipe recipe = args.load_recipe();
  const BuildOptions opts = args.build_options(spec);
  args.check_overrides(spec, recipe, opts);
  if (args.sharded()) return build_rank_command(args, spec, recipe, opts, report, trace_file, force);
  auto be = args.open_backend();
  // A free carries only its pointer: the tracker's live list gives the trace its tensor and layer.
  tracking_resource tracker(be->memory(), tracking_resource::options{.live_list = !trace_file.empty()});
  Builder builder(spec, recipe, opts, *be, tracker);
  {
    const MemoryPlan p = make_memory_plan(builder);
    if (args.restack)
      check_memory(args, *be, {"weights plus the largest layer", p.peak_restack, record_bytes(spec, opts.layout, true)});
    else
      check_memory(args, *be, {"weights", opts.layout == Layout::stacked ? p.peak_stacked : p.peak_per_layer,
                               record_bytes(spec, opts.layout, opts.layout == Layout::stacked)});
  }
  MemoryTrace trace(spec);
  if (!trace_file.empty()) trace.attach(tracker, trace_file, force);  // after the refusals: it creates the file

  const auto t0 = std::chrono::steady_clock::now();
  Model model = builder.build();
  if (args.restack) model = stack(std::move(model), spec, *be, tracker, opts.experts);
  const double build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const MemoryStats stats = tracker.stats();

  // Hashes only for the JSON report (the text report prints none), timed apart from the build.
  std::vector<TensorReport> tensors;
  const auto t1 = std::chrono::steady_clock::now();
  if (report == "json") {
    const auto slices = model.layout == Layout::stacked ? unstack(model, spec) : std::vector<std::vector<TensorView>>{};
    const StackedLayout sl = stacked_layout(spec, model.experts);
    std::size_t stacked_index = 0;
    auto add = [&](const TensorView& v, bool is_stacked) {
      TensorReport t(v.name, v.shape, v.dtype);
      t.hash = hash_tensor(*be, v);
      if (is_stacked) {  // one hash per slice in buffer order: per layer, then per expert
        for (const auto& layer : slices)
          for (std::size_t j = 0; j < layer.size(); ++j)
            if (sl.buffer[j] == stacked_index) t.layer_hashes.push_back(hash_tensor(*be, layer[j]));
        ++stacked_index;
      }
      tensors.push_back(std::move(t));
    };
    for (const auto& t : model.pre) add(t.view, false);
    for (const auto& l : model.layers)
      for (const auto& t : l.tensors) add(t.view, false);
    for (const auto& t : model.stacked) add(t.view, true);
    for (const auto& t : model.post) add(t.view, false);
  }
  const double hash_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();

  begin_stdout();
  if (report == "json") {
    nlohmann::ordered_json out = report_header(spec, opts, recipe, args.layout_text(), *be);
    out["parameters"] = spec.parameter_count();
    out["buffers"] = spec.buffer_count();
    print_build_report(out, tensors, model.bytes(), stats, build_seconds, hash_seconds);
  } else {
    std::size_t count = 0;
    model.for_each([&](const TensorView&) { ++count; });
    std::printf("%s: %s in %zu tensors, %s, layout %s, backend %s\n", spec.name.c_str(),
                parameters_text(spec.parameter_count(), spec.buffer_count()).c_str(), count,
                std::string(dtype_name(opts.dtype)).c_str(), args.layout_text().c_str(), be->describe().c_str());
    std::printf("weights    %s\npeak       %s\ntime       %.3f s\n", format_bytes(model.bytes()).c_str(),
                format_bytes(stats.peak_bytes).c_str(), build_seconds);
  }
  check_stdout();
  trace.finish();
  return 0;
}

}  // namespace layerinit::cli
