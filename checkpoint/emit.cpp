#include <layerinit/checkpoint/emit.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include <layerinit/kernels/philox.hpp>

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

  std::vector<DatasetSpec> datasets = checkpoint_datasets(b);
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < datasets.size(); ++k) index[datasets[k].name] = k;
  EmitResult result;
  for (const auto& d : datasets) {
    result.tensors.push_back({d.name, d.shape, d.dtype, numel(d.shape) * dtype_size(d.dtype), rng::fnv1a64_init, {}});
    result.weight_bytes += result.tensors.back().bytes;
  }
  // Before any work: a refused target throws checkpoint_refused, an environment failure (no space,
  // EIO) checkpoint_error; both propagate as they are.
  std::unique_ptr<CheckpointWriter> writer = open_checkpoint_writer(opts.format, target, datasets, opts.meta, opts.writer);

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
  result.file_bytes = disk_bytes(writer->target());  // the normalized path: "out/" names the directory
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace layerinit
