#include <layerinit/checkpoint/emit.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <vector>

#include <layerinit/backends/backend.hpp>
#include <layerinit/checkpoint/detail.hpp>
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

namespace {

// Runs after the commit, so it never throws: a failure here must not report a published checkpoint
// as failed (0 when the size cannot be read).
std::uint64_t disk_bytes(const std::filesystem::path& target) noexcept {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(target, ec)) {
    const std::uint64_t n = fs::file_size(target, ec);
    return ec ? 0 : n;
  }
  std::uint64_t n = 0;
  for (fs::recursive_directory_iterator it(target, ec), end; !ec && it != end; it.increment(ec)) {
    const std::uint64_t size = it->is_regular_file(ec) ? it->file_size(ec) : 0;
    if (!ec) n += size;
  }
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
    result.tensors.push_back({d.name, d.shape, d.dtype, numel(d.shape) * dtype_size(d.dtype), 0, {}});
    result.weight_bytes += result.tensors.back().bytes;
  }
  std::unique_ptr<CheckpointWriter> writer = open_checkpoint_writer(opts.format, target, datasets, meta, opts.writer);

  std::vector<unsigned char> staging;
  const bool device = be.memory().kind() != MemoryKind::host;
  if (device) staging.resize(std::max<std::uint64_t>(opts.staging_bytes, 8));  // at least one element of any dtype
  EmitProgress progress{0, spec.num_layers, 0, result.weight_bytes, 0};
  const StackedLayout sl = stacked_layout(spec, bo.experts);
  // Each dataset's running hash: a stacked dataset receives its layer slices in order.
  std::vector<ContentHash> dataset_hash(datasets.size());

  // Writes one tensor view (in host or device memory) into dataset k at element `first`, hashing the
  // bytes as they pass into the dataset's hash and, when given, the view's own.
  auto put = [&](const TensorView& v, std::size_t k, std::uint64_t first, ContentHash* own) {
    const std::uint64_t esize = dtype_size(v.dtype);
    // Device memory comes through staging in pieces of whole elements: the writer takes element counts.
    const std::span<unsigned char> pieces(staging.data(), staging.size() / esize * esize);
    read_on_host(be, v.data, v.bytes(), pieces, [&](const void* host, std::uint64_t offset, std::uint64_t nbytes) {
      dataset_hash[k].update(host, nbytes);
      if (own) own->update(host, nbytes);
      writer->write(k, first + offset / esize, host, nbytes / esize);
      progress.bytes_done += nbytes;
    });
  };

  b.stream([&](const Part& part) {
    if (opts.cancel && opts.cancel->load()) throw error("interrupted");
    for (std::size_t j = 0; j < part.tensors.size(); ++j) {
      const TensorView& v = part.tensors[j];
      if (part.kind == Part::Kind::layer && stacked) {
        const std::size_t k = index.at(sl.buffers[sl.buffer[j]].name);
        ContentHash own;
        put(v, k, sl.slice(j, part.layer) * numel(v.shape), &own);
        result.tensors[k].layer_hashes.push_back(own.digest());
      } else {
        put(v, index.at(v.name), 0, nullptr);
      }
    }
    if (part.kind == Part::Kind::layer) ++progress.layers_done;
    progress.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (opts.progress) opts.progress(progress);
  });
  if (opts.cancel && opts.cancel->load()) throw error("interrupted");
  for (std::size_t k = 0; k < datasets.size(); ++k) result.tensors[k].hash = dataset_hash[k].digest();
  writer->commit();
  result.file_bytes = disk_bytes(writer->target());  // the normalized path: "out/" names the directory
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace layerinit
