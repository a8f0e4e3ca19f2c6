// layerinit plan: what a model will need, before anything is allocated.
#include <cstdio>
#include <iostream>
#include <optional>

#include <layerinit/core/bytes.hpp>
#include <layerinit/plan/plan.hpp>
#include <layerinit/shard/rank.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/core/errors.hpp>
#include "commands.hpp"
#include "report.hpp"

namespace layerinit::cli {

namespace {

std::string range_text(std::uint64_t first, std::uint64_t count) {
  if (count == 0) return "-";
  return count == 1 ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(first + count - 1);
}

// The per-rank numbers of a parallel plan (docs/sharding.md), one row per run of consecutive ranks with
// the same numbers and stage.
struct ParallelReport {
  std::vector<RankMemoryPlan> ranks;
  RankBalance balance;
};

bool same_row(const RankMemoryPlan& a, const RankMemoryPlan& b) {
  return a.coords.pp == b.coords.pp && a.layers == b.layers && a.tensors == b.tensors && a.parameters == b.parameters &&
         a.weight_bytes == b.weight_bytes && a.peak_streamed == b.peak_streamed;
}

// rank R's pieces: name, global shape, offset, local shape, dtype, bytes; layers as in the whole plan.
void print_rank_pieces(const RankPlan& r, bool per_layer) {
  const ParallelPlan::Coords c = r.coords();
  std::printf("rank %llu (pp %llu, fsdp %llu, ep %llu, tp %llu), layers %s\n", (unsigned long long)r.rank(),
              (unsigned long long)c.pp, (unsigned long long)c.fsdp, (unsigned long long)c.ep, (unsigned long long)c.tp,
              range_text(r.layers().offset, r.layers().size).c_str());
  std::printf("%-52s %-16s %-12s %-16s %-5s %12s\n", "tensor", "global shape", "offset", "local shape", "dtype", "bytes");
  auto row = [](const ShardTensor& s) {
    std::printf("%-52s %-16s %-12s %-16s %-5s %12llu\n", s.tensor.name.c_str(), shape_string(s.tensor.memory_shape).c_str(),
                shape_string(s.box.offset).c_str(), shape_string(s.box.shape).c_str(), std::string(dtype_name(s.tensor.dtype)).c_str(),
                (unsigned long long)s.bytes());
  };
  auto subtotal = [](const std::string& what, std::uint64_t bytes) {
    std::printf("%-52s %-16s %-12s %-16s %-5s %12llu  %s\n", ("  " + what).c_str(), "", "", "", "", (unsigned long long)bytes,
                format_bytes_short(bytes).c_str());
  };
  // Each layer's subtotal with --per-layer, else a run of layers stored alike as one row: the walk's
  // steps, the first layer's pieces listed.
  const Range L = r.layers();
  r.walk({.mode = per_layer ? WalkMode::parts : WalkMode::runs, .whole_ends = true}, [&](const RankStep& s) {
    if (s.kind != Part::Kind::layer) {
      for (const auto& piece : s.shards) row(piece);
      return;
    }
    if (s.layer == L.offset)
      for (const auto& piece : s.shards) row(piece);
    std::uint64_t bytes = 0;
    for (const auto& piece : s.shards) bytes += piece.bytes();
    subtotal((s.count == 1 ? "layer " : "layers ") + range_text(s.layer, s.count) + (s.count == 1 ? " subtotal" : ", each"), bytes);
  });
  std::printf("\n");
}

void print_parallel(const ParallelReport& rep, TrainingSetup setup) {
  std::printf("%-14s %5s  %-11s %14s %11s %11s %11s %11s\n", "ranks", "stage", "layers", "parameters", "weights", "build peak",
              "emit peak", "training");
  for (std::size_t k = 0; k < rep.ranks.size();) {
    std::size_t e = k + 1;
    while (e < rep.ranks.size() && same_row(rep.ranks[k], rep.ranks[e])) ++e;
    const RankMemoryPlan& r = rep.ranks[k];
    std::printf("%-14s %5llu  %-11s %14llu %11s %11s %11s %11s\n", range_text(r.rank, e - k).c_str(), (unsigned long long)r.coords.pp,
                range_text(r.layers.offset, r.layers.size).c_str(), (unsigned long long)r.parameters,
                format_bytes_short(r.weight_bytes).c_str(), format_bytes_short(r.weight_bytes).c_str(),
                format_bytes_short(r.peak_streamed).c_str(), format_bytes_short(r.states.states()).c_str());
    k = e;
  }
  const RankMemoryPlan& big = rep.ranks[rep.balance.largest_rank];
  std::printf("\nlargest rank %llu: weights %s, emit peak %s, training states %s; imbalance %.3f (largest / mean weights)\n",
              (unsigned long long)big.rank, format_bytes_short(big.weight_bytes).c_str(), format_bytes_short(big.peak_streamed).c_str(),
              format_bytes_short(big.states.states()).c_str(), rep.balance.imbalance);
  std::printf("build peak = the rank's pieces (per-layer or stacked); emit peak = its largest part; training = %s-precision "
              "Adam states sharded like the weights (FSDP / ZeRO-3), no activations\n",
              std::string(training_setup_name(setup)).c_str());
}

nlohmann::ordered_json parallel_json(const ParallelPlan& plan, const ParallelReport& rep, const std::optional<RankPlan>& rank) {
  const ParallelDegrees& d = plan.degrees();
  nlohmann::ordered_json per_rank = nlohmann::ordered_json::array();
  for (const auto& r : rep.ranks)
    per_rank.push_back({{"rank", r.rank},
                        {"coords", {{"pp", r.coords.pp}, {"fsdp", r.coords.fsdp}, {"ep", r.coords.ep}, {"tp", r.coords.tp}}},
                        {"layers", {r.layers.offset, r.layers.size}},
                        {"tensors", r.tensors},
                        {"parameters", r.parameters},
                        {"weights", r.weight_bytes},
                        {"build_peak", r.weight_bytes},
                        {"emit_peak", r.peak_streamed},
                        {"training_states", r.states.states()}});
  nlohmann::ordered_json out{{"pp", d.pp}, {"fsdp", d.fsdp}, {"ep", d.ep}, {"tp", d.tp}, {"ranks", plan.ranks()},
                             {"per_rank", per_rank}, {"largest_rank", rep.balance.largest_rank},
                             {"imbalance", rep.balance.imbalance}};
  if (rank) {
    nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
    auto add = [&](const ShardTensor& s, std::optional<std::uint64_t> layer) {
      nlohmann::ordered_json j{{"name", s.tensor.name}, {"global_shape", shape_json(s.tensor.memory_shape)},
                               {"offset", shape_json(s.box.offset)}, {"local_shape", shape_json(s.box.shape)},
                               {"dtype", dtype_name(s.tensor.dtype)}, {"bytes", s.bytes()}};
      if (layer) j["layer"] = *layer;
      pieces.push_back(std::move(j));
    };
    rank->walk({.whole_ends = true}, [&](const RankStep& s) {
      for (const auto& piece : s.shards) add(piece, s.kind == Part::Kind::layer ? std::optional(s.layer) : std::nullopt);
    });
    out["rank"] = rank->rank();
    out["rank_tensors"] = pieces;
  }
  return out;
}

}  // namespace


// What plan prints, computed before any of it is.
struct PlanFacts {
  const ModelSpec& spec;
  const BuildOptions& opts;
  const Builder& b;
  const MemoryPlan& p;
  TrainingSetup setup;
  std::optional<std::uint64_t> gpu_mem;
  const std::optional<ParallelPlan>& parallel;
  const std::optional<RankPlan>& rank;
  const ParallelReport& prep;
  std::uint64_t disk_hdf5, disk_st;
  const TrainingEstimate& te;
};

// plan --json: the whole plan as one document.
int print_plan_json(const PlanFacts& facts, const PlanArgs& pa) {
  const auto& [spec, opts, b, p, setup, gpu_mem, parallel, rank, prep, disk_hdf5, disk_st, te] = facts;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  auto add = [&](const PlannedTensor& t, std::optional<std::uint64_t> layer) {
    nlohmann::ordered_json j{{"name", t.name}, {"shape", shape_json(t.memory_shape)}, {"dtype", dtype_name(t.dtype)},
                             {"bytes", t.bytes()}, {"fill", t.fill.text()}};  // exact: it reads back
    if (layer) j["layer"] = *layer;
    tensors.push_back(std::move(j));
  };
  b.walk({.whole_ends = true}, [&](const PlanStep& s) {
    for (const auto& t : s.tensors)
      add(t, s.kind == Part::Kind::layer ? std::optional(spec.first_layer + s.layer) : std::nullopt);
  });
  nlohmann::ordered_json layer_bytes = nlohmann::ordered_json::array();
  for (const auto& r : p.layer_runs)
    for (std::uint64_t k = 0; k < r.count; ++k) layer_bytes.push_back(r.bytes);
  nlohmann::ordered_json naive;
  for (NaiveStrategy n : all_naive_strategies) naive[std::string(naive_name(n))] = p.peak_naive[static_cast<int>(n)];
  nlohmann::ordered_json training{{"precision", training_setup_name(setup)}, {"batch", pa.batch}, {"seq", pa.seq},
                                  {"weights", te.weights}, {"gradients", te.gradients}, {"optimizer", te.optimizer},
                                  {"master_weights", te.master}, {"states", te.states()}};
  nlohmann::ordered_json acts;
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    const int k = static_cast<int>(r);
    nlohmann::ordered_json a;
    a["per_layer"] = te.activation_per_layer[k] ? nlohmann::ordered_json(*te.activation_per_layer[k]) : nlohmann::ordered_json();
    a["total"] = te.activation_total[k] ? nlohmann::ordered_json(*te.activation_total[k]) : nlohmann::ordered_json();
    if (gpu_mem) a["largest_batch"] = largest_batch(spec, setup, pa.seq, r, *gpu_mem);
    acts[std::string(recompute_name(r))] = a;
  }
  training["activations"] = acts;
  if (gpu_mem) training["gpu_memory"] = *gpu_mem;
  nlohmann::ordered_json out{{"model", spec.name},
                             {"family", spec.family},
                             {"parameters", p.parameters},
                             {"buffers", p.buffer_elements},
                             {"layers", spec.total_layers()},
                             {"first_layer", spec.first_layer},
                             {"dtype", dtype_name(opts.dtype)},
                             {"layout", layout_name(opts.layout)},
                             {"tensors", tensors},
                             {"layer_bytes", layer_bytes},
                             {"totals", {{"weights", p.weight_bytes}, {"fp32", p.bytes_fp32}, {"fp16", p.bytes_fp16}, {"bf16", p.bytes_bf16}}},
                             {"largest_layer_bytes", p.largest_layer_bytes},
                             {"largest_tensor", {{"name", p.largest_tensor}, {"bytes", p.largest_tensor_bytes}}},
                             {"peaks", {{"stacked", p.peak_stacked}, {"per-layer", p.peak_per_layer}, {"restack", p.peak_restack},
                                        {"streamed", p.peak_streamed}}},
                             {"naive_peaks", naive},
                             {"disk", {{"hdf5", disk_hdf5}, {"safetensors", disk_st}}},
                             {"training", training}};
  if (parallel) out["parallel"] = parallel_json(*parallel, prep, rank);
  std::cout << out.dump(2) << "\n";
  check_stdout();
  return 0;
}

// plan's tables: the tensors with a row per run of alike layers (or per layer), the peaks, the disk and
// the training estimate; with mesh flags, the ranks instead.
int print_plan_table(const PlanFacts& facts, const PlanArgs& pa) {
  const auto& [spec, opts, b, p, setup, gpu_mem, parallel, rank, prep, disk_hdf5, disk_st, te] = facts;
  const std::string before = spec.first_layer ? " (" + std::to_string(spec.first_layer) + " before the repeated block)" : "";
  std::printf("%s (%s): %s, %llu layers%s, %s, %s layout\n\n", spec.name.c_str(), spec.family.c_str(),
              parameters_text(p.parameters, p.buffer_elements).c_str(), (unsigned long long)spec.total_layers(), before.c_str(),
              std::string(dtype_name(opts.dtype)).c_str(), std::string(layout_name(opts.layout)).c_str());
  if (parallel) {
    std::printf("parallel: %s; rank = ((pp * %llu + fsdp) * %llu + ep) * %llu + tp (docs/sharding.md)\n",
                parallel->describe().c_str(), (unsigned long long)parallel->degrees().fsdp,
                (unsigned long long)parallel->degrees().ep, (unsigned long long)parallel->degrees().tp);
    std::printf("whole model: weights %s, training states %s (%s)\n\n", format_bytes_short(p.weight_bytes).c_str(),
                format_bytes_short(te.states()).c_str(), std::string(training_setup_name(setup)).c_str());
    if (rank) print_rank_pieces(*rank, pa.per_layer);
    print_parallel(prep, setup);
    check_stdout();
    return 0;
  }
  std::printf("%-52s %-20s %-5s %14s\n", "tensor", "shape", "dtype", "bytes");
  auto row = [](const PlannedTensor& t) {
    std::printf("%-52s %-20s %-5s %14llu\n", t.name.c_str(), shape_string(t.memory_shape).c_str(),
                std::string(dtype_name(t.dtype)).c_str(), (unsigned long long)t.bytes());
  };
  // Identical layers are one row ("layers 0-79, each 1.59 GiB") unless --per-layer.
  auto subtotal = [](const std::string& what, std::uint64_t bytes) {
    std::printf("%-52s %-20s %-5s %14llu  %s\n", ("  " + what).c_str(), "", "", (unsigned long long)bytes,
                format_bytes_short(bytes).c_str());
  };
  // Rows name the model's layer numbers: the block's layer i is layer first_layer + i.
  const std::uint64_t f = spec.first_layer;
  // The tensors before the layers, layer 0's (then its subtotals from the plan's runs), those after.
  b.walk({.mode = WalkMode::runs, .whole_ends = true, .count = 1}, [&](const PlanStep& s) {
    for (const auto& t : s.tensors) row(t);
    if (s.kind != Part::Kind::layer) return;
    for (const auto& r : p.layer_runs) {
      if (pa.per_layer) {
        for (std::uint64_t i = r.first; i < r.first + r.count; ++i) subtotal("layer " + std::to_string(f + i) + " subtotal", r.bytes);
      } else if (r.count == 1) {
        subtotal("layer " + std::to_string(f + r.first) + " subtotal", r.bytes);
      } else {
        subtotal("layers " + std::to_string(f + r.first) + "-" + std::to_string(f + r.first + r.count - 1) + ", each", r.bytes);
      }
    }
  });
  std::printf("\nweights %s   (fp32 %s, fp16 %s, bf16 %s)\n", format_bytes_short(p.weight_bytes).c_str(), format_bytes_short(p.bytes_fp32).c_str(),
              format_bytes_short(p.bytes_fp16).c_str(), format_bytes_short(p.bytes_bf16).c_str());
  std::printf("largest layer %s, largest tensor %s (%s)\n\n", format_bytes_short(p.largest_layer_bytes).c_str(), p.largest_tensor.c_str(),
              format_bytes_short(p.largest_tensor_bytes).c_str());
  std::printf("predicted peak memory (bytes in use at the worst moment)\n");
  std::printf("  layerinit stacked              %14llu  %s\n", (unsigned long long)p.peak_stacked, format_bytes_short(p.peak_stacked).c_str());
  std::printf("  layerinit per-layer            %14llu  %s\n", (unsigned long long)p.peak_per_layer, format_bytes_short(p.peak_per_layer).c_str());
  std::printf("  layerinit restack              %14llu  %s\n", (unsigned long long)p.peak_restack, format_bytes_short(p.peak_restack).c_str());
  std::printf("  layerinit streamed (emit)      %14llu  %s\n", (unsigned long long)p.peak_streamed, format_bytes_short(p.peak_streamed).c_str());
  for (NaiveStrategy n : all_naive_strategies)
    std::printf("  naive %-24s %14llu  %s\n", std::string(naive_name(n)).c_str(), (unsigned long long)p.peak_naive[static_cast<int>(n)],
                format_bytes_short(p.peak_naive[static_cast<int>(n)]).c_str());
  std::printf("\nsize on disk (at most)\n  hdf5         %s\n  safetensors  %s\n\n", format_bytes_short(disk_hdf5).c_str(), format_bytes_short(disk_st).c_str());
  std::printf("training, %s precision with Adam (docs/plan.md)\n", std::string(training_setup_name(setup)).c_str());
  std::printf("  weights %s, gradients %s, optimizer %s, master weights %s: states %s\n", format_bytes_short(te.weights).c_str(),
              format_bytes_short(te.gradients).c_str(), format_bytes_short(te.optimizer).c_str(), format_bytes_short(te.master).c_str(), format_bytes_short(te.states()).c_str());
  if (!te.activation_per_layer[0]) {
    std::printf("  activations: no formula for this model (no attention heads)\n");
  } else {
    std::printf("  activations at batch %llu, sequence %llu (Korthikanti et al. 2022):\n", (unsigned long long)pa.batch,
                (unsigned long long)pa.seq);
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
      const int k = static_cast<int>(r);
      std::printf("    %-10s recompute: %s per layer, %s in all", std::string(recompute_name(r)).c_str(),
                  format_bytes_short(*te.activation_per_layer[k]).c_str(), format_bytes_short(*te.activation_total[k]).c_str());
      if (gpu_mem) std::printf(", largest batch in %s: %llu", format_bytes_short(*gpu_mem).c_str(), (unsigned long long)largest_batch(spec, setup, pa.seq, r, *gpu_mem));
      std::printf("\n");
    }
  }
  check_stdout();
  return 0;
}

int plan_command(const ModelArgs& args, const PlanArgs& pa) {
  const ModelSpec spec = args.load_spec();
  const Recipe recipe = args.load_recipe();
  const BuildOptions opts = args.build_options(spec);
  args.check_overrides(spec, recipe, opts);
  const TrainingSetup setup = parse_training_setup(pa.training);
  const std::optional<std::uint64_t> gpu_mem = pa.gpu_mem.empty() ? std::nullopt : std::optional(parse_byte_size(pa.gpu_mem));
  // The table has a row per layer, --json an entry per tensor: a spec of 10^9 layers would print for
  // hours (and --json build its whole tree in memory first). Refused before anything is computed.
  constexpr std::uint64_t max_rows = 1u << 20;
  if (pa.record || pa.report == "json") {
    const char* flag = pa.record ? "plan --record:" : "plan --json:";
    if (const std::uint64_t n = listed_tensor_count(spec); n > max_rows)
      bad_argument(flag, n, "tensors are too many to list (at most " + std::to_string(max_rows) + ")");
    if (pa.record && (pa.report == "json" || args.sharded()))
      bad_argument("--record", "is the whole model's plan in a text of its own: leave out --json and the mesh flags");
  } else if (pa.per_layer && spec.num_layers > max_rows) {
    bad_argument("plan --per-layer:", spec.num_layers, "layers are too many to list (at most " + std::to_string(max_rows) + ")");
  }

  // Plans need no memory: the dry backend only hands out address space, and nothing is built here.
  auto be = make_dry_backend();
  const Builder b(spec, recipe, opts, *be, be->memory());
  if (pa.record) {
    begin_stdout();
    std::cout << plan_record(b);
    check_stdout();
    return 0;
  }
  const MemoryPlan p = make_memory_plan(b);
  // With mesh flags: the numbers of every rank (docs/sharding.md), a row per run of alike ranks.
  std::optional<ParallelPlan> parallel;
  std::optional<RankPlan> rank;
  ParallelReport prep;
  if (args.sharded()) {
    parallel.emplace(args.parallel_plan(spec));
    if (parallel->ranks() > max_rows)
      bad_argument("plan:", parallel->ranks(), "ranks are too many to list (at most " + std::to_string(max_rows) + ")");
    if (args.rank) rank.emplace(b, *parallel, *args.rank);
    prep.ranks = plan_ranks(b, *parallel, setup);
    prep.balance = rank_balance(prep.ranks);
  }
  CheckpointMetadata meta;
  meta.model_spec = spec_to_json(spec);
  const std::uint64_t disk_hdf5 = planned_checkpoint_bytes(b, CheckpointFormat::hdf5, meta, {});
  const std::uint64_t disk_st = planned_checkpoint_bytes(b, CheckpointFormat::safetensors, meta, {});
  const TrainingEstimate te = estimate_training(spec, setup, pa.batch, pa.seq);

  begin_stdout();
  const PlanFacts facts{spec, opts, b, p, setup, gpu_mem, parallel, rank, prep, disk_hdf5, disk_st, te};
  return pa.report == "json" ? print_plan_json(facts, pa) : print_plan_table(facts, pa);
}

}  // namespace layerinit::cli
