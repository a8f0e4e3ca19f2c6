#include <layerinit/checkpoint/emit.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <span>
#include <stdexcept>
#include <vector>

#include <layerinit/backends/backend.hpp>

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

  std::vector<DatasetSpec> datasets = checkpoint_datasets(b);
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < datasets.size(); ++k) index[datasets[k].name] = k;
  EmitResult result;
  for (const auto& d : datasets) {
    result.tensors.push_back({d.name, d.shape, d.dtype, numel(d.shape) * dtype_size(d.dtype), 0, {}});
    result.weight_bytes += result.tensors.back().bytes;
  }
  // A target that cannot be opened (unwritable, exists without overwrite, too little space) is an
  // argument problem found before any work: invalid_argument, so the CLI exits with 2.
  std::unique_ptr<CheckpointWriter> writer;
  try {
    writer = open_checkpoint_writer(opts.format, target, datasets, opts.meta, opts.writer);
  } catch (const checkpoint_error& e) {
    throw std::invalid_argument(e.what());
  }

  std::vector<unsigned char> staging;
  const bool device = be.memory().kind() != MemoryKind::host;
  if (device) staging.resize(std::max<std::uint64_t>(opts.staging_bytes, 8));  // at least one element of any dtype
  EmitProgress progress{0, spec.num_layers, 0, result.weight_bytes, 0};
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
        const std::size_t k = index.at(stacked_name(spec, spec.layer.tensors[j]));
        ContentHash own;
        put(v, k, part.layer * numel(v.shape), &own);
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
  result.file_bytes = disk_bytes(target);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace layerinit
