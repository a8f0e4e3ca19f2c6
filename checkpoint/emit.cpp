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
#include <layerinit/checkpoint/detail.hpp>
#include "feed.hpp"
#include <layerinit/init/spec_json.hpp>

namespace layerinit {

namespace {
// Stacked layout: one [L, ...] dataset per layer parameter (or [L, E, ...] per expert weight),
// written one slice per call.
void add_stacked_datasets(const Builder& b, const std::function<void(const DatasetSpec&)>& add) {
  const ModelSpec& spec = b.spec();
  if (spec.num_layers == 0) return;
  const auto first = b.plan_layer(0);
  const StackedLayout sl = stacked_layout(spec, b.options().experts);
  for (std::size_t k = 0; k < sl.buffers.size(); ++k) {
    const PlannedTensor& f = first[sl.buffers[k].first];
    add({sl.buffers[k].name, sl.shape(spec, k, f.memory_shape), f.dtype, f.numel()});
  }
}
}  // namespace

std::vector<DatasetSpec> checkpoint_datasets(const Builder& b) {
  const ModelSpec& spec = b.spec();
  std::vector<DatasetSpec> out;
  auto add = [&](const PlannedTensor& p) { out.push_back({p.name, p.memory_shape, p.dtype, 0}); };
  for (const auto& p : b.plan_pre()) add(p);
  if (b.options().layout == Layout::per_layer) {
    for (std::uint64_t i = 0; i < spec.num_layers; ++i)
      for (const auto& p : b.plan_layer(i)) add(p);
  } else {
    add_stacked_datasets(b, [&](const DatasetSpec& d) { out.push_back(d); });
  }
  for (const auto& p : b.plan_post()) add(p);
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
  auto add = [&](const PlannedTensor& t) { p.add({t.name, t.memory_shape, t.dtype, 0}); };
  for (const auto& t : b.plan_pre()) add(t);
  if (b.options().layout == Layout::stacked) {
    add_stacked_datasets(b, [&](const DatasetSpec& d) { p.add(d); });
  } else if (spec.num_layers > 0 && b.uniform_layers()) {
    // Layer i's names are prefix + i + "." + rel: the index digits of all layers are counted once.
    const std::uint64_t L = spec.num_layers, digits = index_digits(L);
    const auto first = b.plan_layer(0);
    for (std::size_t j = 0; j < first.size(); ++j) {
      const std::uint64_t each = spec.layer_prefix.size() + 1 + spec.layer.tensors[j].name.size();
      const std::uint64_t names = saturating_add(saturating_mul(L, each), digits);
      p.add_run({"", first[j].memory_shape, first[j].dtype, 0}, L, names);
    }
  } else {
    for (std::uint64_t i = 0; i < spec.num_layers; ++i)
      for (const auto& t : b.plan_layer(i)) add(t);
  }
  for (const auto& t : b.plan_post()) add(t);
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
      throw std::invalid_argument("emit: metadata " + std::string(key) + " '" + printable(field, 64) +
                                  "' contradicts the builder's " + (quote_truth ? "'" + printable(truth) + "'" : "spec"));
  };
  from_builder(meta.dtype, "dtype", std::string(dtype_name(bo.dtype)), true);
  from_builder(meta.seed, "seed", std::to_string(bo.seed), true);
  from_builder(meta.recipe, "recipe", b.recipe().name(), true);
  from_builder(meta.layout, "layout", std::string(layout_name(bo.layout)), true);
  from_builder(meta.orientation, "orientation", std::string(orientation_name(bo.orientation)), true);
  from_builder(meta.model_spec, "model_spec", spec_to_json(b.spec()), false);
  return meta;
}

EmitResult emit_checkpoint(const Builder& b, backend& be, const std::filesystem::path& target, const EmitOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelSpec& spec = b.spec();
  const auto& order = b.options().layer_order;
  if (!std::is_sorted(order.begin(), order.end()))
    throw std::invalid_argument("emit writes layers in order: layer_order must be ascending or empty");
  if (be.kind() == BackendKind::dry) throw std::invalid_argument("emit needs a backend that holds bytes (cpu or cuda)");
  const bool stacked = b.options().layout == Layout::stacked;

  // A Hugging Face config.json makes transformers load the directory as its model: only the
  // per-layer, out-in layout matches what it expects (stacked or transposed weights would load as
  // missing keys initialized anew, or a square weight silently transposed).
  const BuildOptions& bo = b.options();
  if (!opts.writer.config_json.empty() && (bo.layout != Layout::per_layer || bo.orientation != Orientation::out_in))
    throw std::invalid_argument("emit: a Hugging Face config.json describes the per-layer, out-in layout; this checkpoint is " +
                                std::string(layout_name(bo.layout)) + ", " + std::string(orientation_name(bo.orientation)));
  const CheckpointMetadata meta = builder_metadata(b, opts.meta);

  // Before anything that grows with the model (the dataset list, the reports; 10^9 tiny layers would
  // be hundreds of GB of lists for a checkpoint no disk holds): the checks the writer makes at open.
  // A refused target throws checkpoint_refused, an environment failure (no space, EIO)
  // checkpoint_error; both propagate as they are.
  detail::preflight(detail::normalize_target(target), opts.format == CheckpointFormat::safetensors,
                    opts.writer.overwrite, opts.writer.check_free_space,
                    planned_checkpoint_bytes(b, opts.format, meta, opts.writer),
                    opts.format == CheckpointFormat::hdf5 ? detail::hdf5_ownership : detail::safetensors_ownership);

  std::vector<DatasetSpec> datasets = checkpoint_datasets(b);
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < datasets.size(); ++k) index[datasets[k].name] = k;
  EmitResult result;
  for (const auto& d : datasets) {
    result.tensors.push_back({d.name, d.shape, d.dtype, numel(d.shape) * dtype_size(d.dtype), 0, {}, {}, {}, true});
    result.weight_bytes += result.tensors.back().bytes;
  }
  std::unique_ptr<CheckpointWriter> writer = open_checkpoint_writer(opts.format, target, datasets, meta, opts.writer);

  EmitProgress progress{0, spec.num_layers, 0, result.weight_bytes, 0};
  const StackedLayout sl = stacked_layout(spec, bo.experts);
  detail::DatasetFeed feed(be, *writer, datasets.size(), opts.staging_bytes, progress);

  b.stream([&](const Part& part) {
    if (opts.cancel && opts.cancel->load()) throw error("interrupted");
    for (std::size_t j = 0; j < part.tensors.size(); ++j) {
      const TensorView& v = part.tensors[j];
      if (part.kind == Part::Kind::layer && stacked) {
        const std::size_t k = index.at(sl.buffers[sl.buffer[j]].name);
        ContentHash own;
        feed.put(v, k, sl.slice(j, part.layer) * numel(v.shape), &own);
        result.tensors[k].layer_hashes.push_back(own.digest());
      } else {
        feed.put(v, index.at(v.name), 0, nullptr);
      }
    }
    if (part.kind == Part::Kind::layer) ++progress.layers_done;
    progress.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (opts.progress) opts.progress(progress);
  });
  if (opts.cancel && opts.cancel->load()) throw error("interrupted");
  for (std::size_t k = 0; k < datasets.size(); ++k) result.tensors[k].hash = feed.digest(k);
  // A master of a parallel HDF5 checkpoint being replaced: its rank directory goes after the rename.
  std::optional<std::string> old_ranks;
  if (opts.format == CheckpointFormat::hdf5 && opts.writer.overwrite)
    old_ranks = detail::hdf5_string_attribute(writer->target(), detail::kRankFilesAttribute);
  writer->commit();
  if (old_ranks) detail::remove_replaced_rank_dir(writer->target(), *old_ranks);
  result.file_bytes = detail::disk_bytes(writer->target());  // the normalized path: "out/" names the directory
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

std::string rank_file_name(std::uint64_t rank, std::uint64_t ranks) {
  char name[96];
  std::snprintf(name, sizeof name, "rank-%05llu-of-%05llu.safetensors", static_cast<unsigned long long>(rank),
                static_cast<unsigned long long>(ranks));
  return name;
}

namespace {

// The rank's datasets in file order, each with its report (global shape and offset).
struct RankDatasets {
  std::vector<DatasetSpec> specs;
  std::vector<TensorReport> reports;
  std::map<std::string, std::size_t> index;
  void add(std::string name, Shape shape, DType t, std::uint64_t slab, Shape global, Shape offset) {
    index[name] = specs.size();
    reports.push_back({name, shape, t, numel(shape) * dtype_size(t), 0, {}, std::move(global), std::move(offset), true});
    specs.push_back({std::move(name), std::move(shape), t, slab});
  }
};

RankDatasets rank_datasets(const RankPlan& r) {
  const Builder& b = r.builder();
  RankDatasets d;
  auto add = [&](const ShardTensor& s) {
    d.add(s.tensor.name, s.box.shape, s.tensor.dtype, 0, s.tensor.memory_shape, s.box.offset);
  };
  for (const auto& s : r.pre()) add(s);
  const Range L = r.layers();
  if (b.options().layout == Layout::per_layer) {
    for (std::uint64_t i = L.offset; i < L.offset + L.size; ++i)
      for (const auto& s : r.layer(i)) add(s);
  } else {
    for (const StackedPiece& p : r.stacked()) d.add(p.name, p.box.shape, p.dtype, p.slice_numel(), p.global_shape, p.box.offset);
  }
  for (const auto& s : r.post()) add(s);
  return d;
}

std::string shards_json(const RankDatasets& d) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& t : d.reports) j[t.name] = {{"global_shape", t.global_shape}, {"offset", t.offset}};
  return j.dump();
}

}  // namespace

EmitResult emit_rank(const RankPlan& r, backend& be, const std::filesystem::path& dir, const EmitOptions& opts) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  const Builder& b = r.builder();
  if (opts.format != CheckpointFormat::safetensors)
    throw std::invalid_argument("emit: a rank's file is safetensors (per-rank HDF5 files are not written)");
  if (opts.writer.max_shard_size != 0 || !opts.writer.config_json.empty())
    throw std::invalid_argument("emit: a rank's file has no shards and no config.json");
  if (be.kind() == BackendKind::dry) throw std::invalid_argument("emit needs a backend that holds bytes (cpu or cuda)");
  const bool stacked = b.options().layout == Layout::stacked;
  CheckpointMetadata meta = builder_metadata(b, opts.meta);
  for (const char* key : {"layerinit.shards", "layerinit.mesh"})
    if (meta.extra.count(key)) throw std::invalid_argument(std::string("emit: metadata key ") + key + " is the rank's own");

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
  else if (errno != EEXIST) detail::refuse("cannot create output directory", target_dir, errno);
  else if (!fs::is_directory(target_dir)) detail::refuse("cannot use output directory", target_dir, ENOTDIR);
  try {
    std::unique_ptr<CheckpointWriter> writer =
        open_safetensors_file_writer(target_dir / rank_file_name(r.rank(), r.plan().ranks()), d.specs, meta, opts.writer);
    EmitProgress progress{0, r.layers().size, 0, result.weight_bytes, 0};
    detail::DatasetFeed feed(be, *writer, d.specs.size(), opts.staging_bytes, progress);
    stream_rank(r, [&](const RankPart& part) {
      if (opts.cancel && opts.cancel->load()) throw error("interrupted");
      for (std::size_t j = 0; j < part.tensors.size(); ++j) {
        const TensorView& v = part.tensors[j];
        if (part.kind == Part::Kind::layer && stacked) {
          // Slice (layer, expert) of the rank's [n, ...] or [n, ne, ...] piece.
          const StackedPiece& p = r.stacked()[r.stacked_piece(j)];
          const std::size_t k = d.index.at(p.name);
          const std::uint64_t slice = (part.layer - r.layers().offset) * p.experts + r.expert_slice(j);
          ContentHash own;
          feed.put(v, k, slice * numel(v.shape), &own);
          auto& hashes = d.reports[k].layer_hashes;
          if (hashes.empty()) hashes.resize(r.layers().size * p.experts);
          hashes[slice] = own.digest();
        } else {
          feed.put(v, d.index.at(v.name), 0, nullptr);
        }
      }
      if (part.kind == Part::Kind::layer) ++progress.layers_done;
      progress.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (opts.progress) opts.progress(progress);
    });
    if (opts.cancel && opts.cancel->load()) throw error("interrupted");
    for (std::size_t k = 0; k < d.reports.size(); ++k) d.reports[k].hash = feed.digest(k);
    writer->commit();
    result.file_bytes = detail::disk_bytes(writer->target());
  } catch (...) {
    if (made_dir) ::rmdir(target_dir.c_str());  // only if still empty: other ranks may be writing there
    throw;
  }
  result.tensors = std::move(d.reports);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace layerinit
