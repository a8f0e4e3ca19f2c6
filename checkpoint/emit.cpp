#include <layerinit/checkpoint/emit.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include <sys/stat.h>
#include <cerrno>
#include <cstdio>

#include <nlohmann/json.hpp>

#include <layerinit/backends/backend.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/checkpoint/detail.hpp>
#include "feed.hpp"
#include <layerinit/init/spec_json.hpp>

namespace layerinit {

namespace {
// The datasets of a walk step stored as planned: a tensor outside the layers, or the stacked layout's
// [L, ...] (or [L, E, ...]) buffers, written one slice per call. Empty for a per-layer run: its
// datasets are named by their layers.
std::vector<DatasetSpec> stored_as_planned(const PlanStep& s) {
  std::vector<DatasetSpec> out;
  if (s.kind != Part::Kind::layer)
    for (const auto& p : s.tensors) out.push_back({p.name, p.memory_shape, p.dtype, 0});
  for (const auto& buf : s.buffers) out.push_back({std::string(buf.name), buf.shape, buf.dtype, buf.slice_numel});
  return out;
}
}  // namespace

void for_each_dataset(const Builder& b, const DatasetVisitor& f) {
  const ModelSpec& spec = b.spec();
  b.walk({.mode = WalkMode::runs}, [&](const PlanStep& s) {
    if (s.kind == Part::Kind::layer && !s.layout) {
      // A run's layers are stored as its first: only their names differ.
      for (std::uint64_t i = s.layer; i < s.layer + s.count; ++i)
        for (std::size_t j = 0; j < s.tensors.size(); ++j)
          f({spec.canonical_name(i, spec.layer.tensors[j]), s.tensors[j].memory_shape, s.tensors[j].dtype, 0}, s.kind, i);
      return;
    }
    for (DatasetSpec& d : stored_as_planned(s)) f(std::move(d), s.kind, std::nullopt);
  });
}

std::vector<DatasetSpec> checkpoint_datasets(const Builder& b) {
  std::vector<DatasetSpec> out;
  for_each_dataset(b, [&](DatasetSpec d, Part::Kind, std::optional<std::uint64_t>) { out.push_back(std::move(d)); });
  return out;
}

namespace {

// Characters of the decimal numbers 0 .. n-1, saturating.
std::uint64_t index_digits(std::uint64_t n) {
  if (n == 0) return 0;
  std::uint64_t total = 1;  // "0"
  std::uint64_t lo = 1;     // first number with `d` digits
  for (std::uint64_t d = 1; lo < n; ++d) {
    const std::uint64_t hi = saturating_mul(lo, 10);
    const std::uint64_t k = std::min(hi, n) - lo;
    total = saturating_add(total, saturating_mul(k, d));
    lo = hi;
  }
  return total;
}

}  // namespace

std::uint64_t planned_checkpoint_bytes(const Builder& b, CheckpointFormat f, const CheckpointMetadata& meta,
                                       const WriterOptions& opts) {
  const ModelSpec& spec = b.spec();
  PlannedBytes p(f, meta, opts);
  b.walk({.mode = WalkMode::runs}, [&](const PlanStep& s) {
    for (const DatasetSpec& d : stored_as_planned(s)) p.add(d);
    if (s.kind != Part::Kind::layer || s.layout) return;
    // Layer i's names are prefix + (first_layer + i) + "." + rel: a run's index digits are counted once.
    const std::uint64_t from = spec.first_layer + s.layer;
    const std::uint64_t digits = index_digits(from + s.count) - index_digits(from);
    for (std::size_t j = 0; j < s.tensors.size(); ++j) {
      const std::uint64_t each = spec.layer_prefix.size() + 1 + spec.layer.tensors[j].name.size();
      p.add_run({"", s.tensors[j].memory_shape, s.tensors[j].dtype, 0}, s.count, saturating_add(saturating_mul(s.count, each), digits));
    }
  });
  return p.total();
}

CheckpointMetadata builder_metadata(const Builder& b, const CheckpointMetadata& given) {
  // Filled in where the caller left a field empty; a caller's value that contradicts the builder is
  // refused, since the file would misstate how it was made.
  const BuildOptions& bo = b.options();
  CheckpointMetadata meta = given;
  auto from_builder = [](std::string& field, const char* key, const std::string& truth, bool quote_truth) {
    if (field.empty()) field = truth;
    else if (field != truth)
      bad_argument("emit: metadata " + std::string(key), printable(field, 64),  // printable twice is printable once
                   "contradicts the builder's " + (quote_truth ? quote(truth) : std::string("spec")));
  };
  from_builder(meta.dtype, "dtype", std::string(dtype_name(bo.dtype)), true);
  from_builder(meta.seed, "seed", std::to_string(bo.seed), true);
  from_builder(meta.recipe, "recipe", b.recipe().name(), true);
  from_builder(meta.layout, "layout", std::string(layout_name(bo.layout)), true);
  from_builder(meta.orientation, "orientation", std::string(orientation_name(bo.orientation)), true);
  from_builder(meta.model_spec, "model_spec", spec_to_json(b.spec()), false);
  from_builder(meta.init_overrides, "init_overrides", b.recipe().overrides_text(), true);
  // What else decides the bytes, so that verify can make them again from the file alone.
  std::string dtypes;
  if (!bo.dtype_overrides.empty()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& o : bo.dtype_overrides) a.push_back({o.pattern, std::string(dtype_name(o.dtype))});
    dtypes = a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  from_builder(meta.dtype_overrides, "dtype_overrides", dtypes, true);
  const bool expert_buffers = bo.layout == Layout::stacked && num_experts(b.spec().layer) > 0;
  from_builder(meta.experts, "experts", expert_buffers ? std::string(expert_layout_name(bo.experts)) : std::string(), true);
  return meta;
}

bool hf_loadable(const BuildOptions& opts) {
  return opts.layout == Layout::per_layer && opts.orientation == Orientation::out_in;
}

std::optional<std::string> hf_config_for(const ModelSpec& spec, const BuildOptions& opts) {
  if (!hf_loadable(opts) || !has_config_json(spec)) return std::nullopt;
  return config_json(spec, opts.dtype);
}

namespace detail {
void check_emit(const Builder& b, backend& be, const EmitOptions& opts) {
  const BuildOptions& bo = b.options();
  if (!std::is_sorted(bo.layer_order.begin(), bo.layer_order.end()))
    bad_argument("layer_order", "must be ascending or empty: emit writes layers in order");
  LAYERINIT_EXPECTS(be.kind() != BackendKind::dry, "emit needs a backend that holds bytes (cpu or cuda)");
  if (!opts.writer.config_json.empty() && !hf_loadable(bo))
    bad_argument("emit", ": a Hugging Face config.json describes the per-layer, out-in layout; this checkpoint is " +
                             std::string(layout_name(bo.layout)) + ", " + std::string(orientation_name(bo.orientation)));
}
}  // namespace detail

EmitResult emit_checkpoint(const Builder& b, backend& be, const std::filesystem::path& target, const EmitOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelSpec& spec = b.spec();
  const BuildOptions& bo = b.options();
  detail::check_emit(b, be, opts);
  const bool stacked = bo.layout == Layout::stacked;
  const CheckpointMetadata meta = builder_metadata(b, opts.meta);
  // The target and the space are checked before anything that grows with the model (the dataset
  // list, the reports; 10^9 tiny layers would be hundreds of GB of lists for a checkpoint no disk
  // holds). A refused target throws checkpoint_refused, an environment failure (no space, EIO)
  // checkpoint_error; both propagate as they are.
  std::unique_ptr<CheckpointWriter> writer =
      open_checkpoint_writer(opts.format, target, planned_checkpoint_bytes(b, opts.format, meta, opts.writer),
                             [&] { return checkpoint_datasets(b); }, meta, opts.writer);
  const StackedLayout sl = stacked_layout(spec, bo.experts);
  detail::DatasetFeed feed(be, *writer, opts, spec.num_layers, t0);
  b.stream(
      [&](const Part& part) {
        feed.put_part(part.kind == Part::Kind::layer, part.tensors, [&](std::size_t j) -> detail::FeedSlot {
          if (part.kind == Part::Kind::layer && stacked) return {sl.buffers[sl.buffer[j]].name, sl.slice(j, part.layer)};
          return {part.tensors[j].name, std::nullopt};
        });
      },
      detail::cancellation(opts));
  EmitResult result;
  result.tensors = feed.reports();
  for (const auto& t : result.tensors) result.weight_bytes += t.bytes;
  writer->commit(detail::before_publish(opts, result, t0));
  return result;
}

TensorReport::TensorReport(std::string name_, Shape shape_, DType dtype_)
    : name(std::move(name_)), shape(std::move(shape_)), dtype(dtype_), bytes(numel(shape) * dtype_size(dtype)) {}

std::string rank_file_name(std::uint64_t rank, std::uint64_t ranks, std::string_view extension) {
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05llu-of-%05llu", static_cast<unsigned long long>(rank),
                static_cast<unsigned long long>(ranks));
  return name + std::string(extension);
}

namespace {

// The rank's datasets in file order, each with its report (global shape and offset).
struct RankDatasets {
  std::vector<DatasetSpec> specs;
  std::vector<TensorReport> reports;
  void add(std::string name, Shape shape, DType t, std::uint64_t slab, Shape global, Shape offset) {
    TensorReport& r = reports.emplace_back(name, shape, t);
    r.global_shape = std::move(global);
    r.offset = std::move(offset);
    specs.push_back({std::move(name), std::move(shape), t, slab});
  }
};

RankDatasets rank_datasets(const RankPlan& r) {
  const ModelSpec& spec = r.builder().spec();
  RankDatasets d;
  auto add = [&](const std::string& name, const ShardTensor& s) {
    d.add(name, s.box.shape, s.tensor.dtype, 0, s.tensor.memory_shape, s.box.offset);
  };
  r.walk({.mode = WalkMode::runs}, [&](const RankStep& s) {
    if (s.kind != Part::Kind::layer) {
      for (const auto& piece : s.shards) add(piece.tensor.name, piece);
    } else if (s.stacked) {
      for (const StackedPiece& p : r.stacked()) d.add(p.name, p.box.shape, p.dtype, p.slice_numel(), p.global_shape, p.box.offset);
    } else {
      // A run's layers hold pieces of the same boxes: only their names differ.
      for (std::uint64_t i = s.layer; i < s.layer + s.count; ++i)
        for (std::size_t k = 0; k < s.shards.size(); ++k) add(spec.canonical_name(i, spec.layer.tensors[r.layer_tensors()[k]]), s.shards[k]);
    }
  });
  return d;
}

// The rank files of one mesh share a directory; another mesh's would be mixed with them by the
// reassembly glob (docs/sharding.md). Refuses (checkpoint_refused) when `dir` holds a rank file of
// another number of ranks, or of as many ranks on another mesh ("layerinit.mesh" in its metadata).
void check_one_mesh(const std::filesystem::path& dir, const std::string& own, std::uint64_t ranks, const ParallelDegrees& g) {
  const std::string mine = "(pp " + std::to_string(g.pp) + ", fsdp " + std::to_string(g.fsdp) + ", ep " + std::to_string(g.ep) +
                           ", tp " + std::to_string(g.tp) + ")";
  auto refuse = [&](const std::string& file, const std::string& theirs) {
    throw checkpoint_refused("checkpoint: " + dir.string() + " holds " + printable(file) + ", a rank file of another mesh" +
                             theirs + ", and this one is " + std::to_string(ranks) + " ranks " + mine +
                             ": write each mesh's rank files to a directory of its own");
  };
  const std::string same = "-of-" + rank_file_name(0, ranks).substr(std::string("rank-00000-of-").size());
  bool compared = false;  // one file of as many ranks speaks for the others
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == own || name.rfind("rank-", 0) != 0 || !name.ends_with(".safetensors") || name.find("-of-") == std::string::npos)
      continue;
    if (!name.ends_with(same)) refuse(name, "");
    if (compared) continue;
    compared = true;
    const auto meta = detail::safetensors_metadata(it->path());
    if (!meta || !meta->contains("layerinit.mesh") || !(*meta)["layerinit.mesh"].is_string()) continue;
    const auto m = nlohmann::json::parse((*meta)["layerinit.mesh"].get<std::string>(), nullptr, false);
    auto degree = [&](const char* k) { return m.is_object() && m.contains(k) && m[k].is_number_unsigned() ? m[k].get<std::uint64_t>() : 0; };
    if (degree("pp") != g.pp || degree("fsdp") != g.fsdp || degree("ep") != g.ep || degree("tp") != g.tp)
      refuse(name, " (pp " + std::to_string(degree("pp")) + ", fsdp " + std::to_string(degree("fsdp")) + ", ep " +
                       std::to_string(degree("ep")) + ", tp " + std::to_string(degree("tp")) + ")");
  }
}

std::string shards_json(const RankDatasets& d) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& t : d.reports)
    detail::append_member(j, t.name, {{"global_shape", t.global_shape}, {"offset", t.offset}});
  return j.dump();
}

}  // namespace

EmitResult emit_rank(const RankPlan& r, backend& be, const std::filesystem::path& dir, const EmitOptions& opts) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  const Builder& b = r.builder();
  if (opts.format != CheckpointFormat::safetensors)
    bad_argument("emit", ": a rank's file is safetensors (per-rank HDF5 files are not written)");
  if (opts.writer.max_shard_size != 0 || !opts.writer.config_json.empty())
    bad_argument("emit", ": a rank's file has no shards and no config.json");
  LAYERINIT_EXPECTS(be.kind() != BackendKind::dry, "emit needs a backend that holds bytes (cpu or cuda)");
  const bool stacked = b.options().layout == Layout::stacked;
  CheckpointMetadata meta = builder_metadata(b, opts.meta);
  for (const char* key : {"layerinit.shards", "layerinit.mesh"})
    if (meta.extra.count(key)) bad_argument("emit: metadata key", key, "is the rank's own");

  RankDatasets d = rank_datasets(r);
  meta.extra["layerinit.shards"] = shards_json(d);
  const ParallelDegrees& g = r.plan().degrees();
  meta.extra["layerinit.mesh"] = nlohmann::ordered_json{{"pp", g.pp}, {"fsdp", g.fsdp}, {"ep", g.ep}, {"tp", g.tp}, {"rank", r.rank()}}.dump();
  EmitResult result;
  for (const auto& t : d.reports) result.weight_bytes += t.bytes;

  // The directory all ranks share: made here when missing (another rank may make it first).
  const fs::path target_dir = detail::normalize_target(dir);
  bool made_dir = false;
  if (::mkdir(target_dir.c_str(), 0777) == 0) made_dir = true;  // the umask decides the mode
  else if (errno != EEXIST) detail::fail_at("cannot create output directory", target_dir, errno);
  else if (!fs::is_directory(target_dir)) detail::refuse("cannot use output directory", target_dir, ENOTDIR);
  try {
    check_one_mesh(target_dir, rank_file_name(r.rank(), r.plan().ranks()), r.plan().ranks(), g);
    std::unique_ptr<CheckpointWriter> writer =
        open_safetensors_file_writer(target_dir / rank_file_name(r.rank(), r.plan().ranks()), d.specs, meta, opts.writer);
    detail::DatasetFeed feed(be, *writer, opts, r.layers().size, t0);
    stream_rank(
        r,
        [&](const RankPart& part) {
          feed.put_part(part.kind == Part::Kind::layer, part.tensors, [&](std::size_t j) -> detail::FeedSlot {
            if (part.kind != Part::Kind::layer || !stacked) return {part.tensors[j].name, std::nullopt};
            // Slice (layer, expert) of the rank's [n, ...] or [n, ne, ...] piece.
            return {r.stacked()[r.stacked_piece(j)].name, r.stacked_slice(j, part.layer)};
          });
        },
        detail::cancellation(opts));
    for (std::size_t k = 0; k < d.reports.size(); ++k) {
      d.reports[k].hash = feed.digest(k);
      d.reports[k].layer_hashes = feed.slice_hashes(k);
    }
    result.tensors = std::move(d.reports);
    writer->commit(detail::before_publish(opts, result, t0));
  } catch (...) {
    if (made_dir) ::rmdir(target_dir.c_str());  // only if still empty: other ranks may be writing there
    throw;
  }
  return result;
}

}  // namespace layerinit
