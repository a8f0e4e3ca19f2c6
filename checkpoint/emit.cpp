#include "checkpoint/emit.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include "init/spec_json.hpp"
#include "kernels/philox.hpp"
#include "stacking/stack.hpp"

namespace layerinit {

std::vector<DatasetSpec> checkpoint_datasets(const Builder& b) {
  const ModelSpec& spec = b.spec();
  std::vector<DatasetSpec> out;
  auto add = [&](const PlannedTensor& p) { out.push_back({p.name, p.memory_shape, p.dtype, 0}); };
  for (const auto& p : b.plan_pre()) add(p);
  if (b.options().layout == Layout::per_layer) {
    for (std::uint64_t i = 0; i < spec.num_layers; ++i)
      for (const auto& p : b.plan_layer(i)) add(p);
  } else if (spec.num_layers > 0) {
    const auto first = b.plan_layer(0);
    for (std::size_t j = 0; j < first.size(); ++j)
      out.push_back({stacked_name(spec, spec.layer.tensors[j]), stacked_shape(spec, first[j].memory_shape), first[j].dtype,
                     first[j].numel()});
  }
  for (const auto& p : b.plan_post()) add(p);
  return out;
}

namespace {

std::uint64_t disk_bytes(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(target)) return fs::file_size(target);
  std::uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(target))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

}  // namespace

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
  // The file's metadata is the builder's: filled in where the caller left a field empty; a caller's
  // value that contradicts the builder is refused, since the file would misstate how it was made.
  CheckpointMetadata meta = opts.meta;
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
  from_builder(meta.model_spec, "model_spec", spec_to_json(spec), false);

  std::vector<DatasetSpec> datasets = checkpoint_datasets(b);
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < datasets.size(); ++k) index[datasets[k].name] = k;
  EmitResult result;
  for (const auto& d : datasets) {
    result.tensors.push_back({d.name, d.shape, d.dtype, numel(d.shape) * dtype_size(d.dtype), rng::fnv1a64_init, {}});
    result.weight_bytes += result.tensors.back().bytes;
  }
  // A target that cannot be opened (unwritable, exists without overwrite, too little space) is an
  // argument problem found before any work: invalid_argument, so the CLI exits with 2.
  std::unique_ptr<CheckpointWriter> writer;
  try {
    writer = open_checkpoint_writer(opts.format, target, datasets, meta, opts.writer);
  } catch (const checkpoint_error& e) {
    throw std::invalid_argument(e.what());
  }

  std::vector<unsigned char> staging;
  const bool device = be.memory().kind() != MemoryKind::host;
  if (device) staging.resize(std::max<std::uint64_t>(opts.staging_bytes, 1));
  EmitProgress progress{0, spec.num_layers, 0, result.weight_bytes, 0};

  // Writes one tensor view (in host or device memory) into dataset k at element `first`, hashing the
  // bytes as they pass; returns the FNV-1a 64 of the view alone.
  auto put = [&](const TensorView& v, std::size_t k, std::uint64_t first) {
    const std::uint64_t esize = dtype_size(v.dtype);
    std::uint64_t own = rng::fnv1a64_init;
    auto pass = [&](const void* host, std::uint64_t elem_offset, std::uint64_t n) {
      const std::uint64_t nbytes = n * esize;
      own = rng::fnv1a64(host, nbytes, own);
      result.tensors[k].hash = rng::fnv1a64(host, nbytes, result.tensors[k].hash);
      writer->write(k, first + elem_offset, host, n);
      progress.bytes_done += nbytes;
    };
    const std::uint64_t n = numel(v.shape);
    if (!device) {
      pass(v.data, 0, n);
    } else {
      const std::uint64_t per = std::max<std::uint64_t>(staging.size() / esize, 1);
      for (std::uint64_t off = 0; off < n; off += per) {
        const std::uint64_t m = std::min(per, n - off);
        be.copy_to_host(staging.data(), static_cast<const unsigned char*>(v.data) + off * esize, m * esize);
        pass(staging.data(), off, m);
      }
    }
    return own;
  };

  b.stream([&](const Part& part) {
    if (opts.cancel && opts.cancel->load()) throw error("interrupted");
    for (std::size_t j = 0; j < part.tensors.size(); ++j) {
      const TensorView& v = part.tensors[j];
      if (part.kind == Part::Kind::layer && stacked) {
        const std::size_t k = index.at(stacked_name(spec, spec.layer.tensors[j]));
        result.tensors[k].layer_hashes.push_back(put(v, k, part.layer * numel(v.shape)));
      } else {
        put(v, index.at(v.name), 0);
      }
    }
    if (part.kind == Part::Kind::layer) ++progress.layers_done;
    progress.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (opts.progress) opts.progress(progress);
  });
  if (opts.cancel && opts.cancel->load()) throw error("interrupted");
  writer->commit();
  result.file_bytes = disk_bytes(target);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace layerinit
