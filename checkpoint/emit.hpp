// Emit: build a model part by part and stream it into a checkpoint, memory bounded by one part.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <layerinit/checkpoint/writer.hpp>
#include <layerinit/init/builder.hpp>

namespace layerinit {

// The datasets a build writes, in file order: per-layer layout one per tensor (Hugging Face names),
// stacked layout one [L, ...] dataset per layer parameter with one slab per layer.
std::vector<DatasetSpec> checkpoint_datasets(const Builder& b);

// planned_bytes(f, checkpoint_datasets(b), meta, opts) without the list: O(tensors of one layer) for
// uniform layers (Builder::uniform_layers), O(1) memory always. The free space check of emit asks
// this before anything grows with the model.
std::uint64_t planned_checkpoint_bytes(const Builder& b, CheckpointFormat f, const CheckpointMetadata& meta,
                                       const WriterOptions& opts);

struct EmitProgress {
  std::uint64_t layers_done = 0, layers_total = 0;
  std::uint64_t bytes_done = 0, bytes_total = 0;
  double seconds = 0;
};

struct EmitOptions {
  CheckpointFormat format = CheckpointFormat::hdf5;
  // writer.config_json only for the per-layer, out-in layout (the one transformers loads): else
  // emit_checkpoint throws std::invalid_argument.
  WriterOptions writer;
  // dtype, seed, recipe, layout, orientation and model_spec are the builder's: left empty they are
  // filled in; a value that differs from the builder's is refused (std::invalid_argument).
  CheckpointMetadata meta;
  std::function<void(const EmitProgress&)> progress;  // after each part
  const std::atomic<bool>* cancel = nullptr;          // set (e.g. by a signal handler) to stop
  std::uint64_t staging_bytes = 64ull << 20;          // host buffer for device-resident parts
};

// What `build --report json` reports for a tensor: XXH3-64 of its raw bytes (content_hash), and for a
// stacked tensor also of each layer slice.
struct TensorReport {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  std::uint64_t bytes = 0;
  std::uint64_t hash = 0;
  std::vector<std::uint64_t> layer_hashes;  // stacked only
};

struct EmitResult {
  std::vector<TensorReport> tensors;
  std::uint64_t weight_bytes = 0;
  std::uint64_t file_bytes = 0;  // on disk after commit (all files of a safetensors directory)
  double seconds = 0;
};

// Checks the target and the free space first (planned_checkpoint_bytes: before the dataset list and
// anything else that grows with the model), then opens the writer (so a bad path, an existing target
// or too little space fail before any work: checkpoint_refused for a target that may not be written,
// checkpoint_error for an environment failure), streams every part, commits. On any exception or
// cancellation the target keeps what it held and temporary files are removed. Cancellation throws
// layerinit::error("interrupted").
EmitResult emit_checkpoint(const Builder& b, backend& be, const std::filesystem::path& target, const EmitOptions& opts);

}  // namespace layerinit
