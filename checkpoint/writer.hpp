// Checkpoint writers: stream a model's parameters, slab by slab, into HDF5 or safetensors files that
// appear atomically at the target path (docs/checkpoint.md).
//
// Use:
//   auto w = open_checkpoint_writer(CheckpointFormat::hdf5, "out.h5", datasets, meta, opts);
//   for (each layer) w->write(dataset_index, first_element, host_bytes, n_elements);
//   w->commit();   // fsync + rename: only now does the target path change
// Destroying a writer that was not committed removes its temporary file or directory; the target
// path keeps whatever it held before (the old checkpoint, or nothing).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/core/shape.hpp>
#include <layerinit/core/errors.hpp>

namespace layerinit {

// Any failure to create, write or publish a checkpoint. what() is one line naming the path and the
// system's reason: "checkpoint: cannot write /data/out.h5: No space left on device".
class LAYERINIT_API checkpoint_error : public error {
 public:
  using error::error;
};

// The target may not be written as asked, found before any work: it exists and overwrite is off,
// overwrite is on but it is not something layerinit wrote (docs/checkpoint.md), or its directory
// does not exist. The CLI reports it as bad input (exit 2); every other checkpoint_error is an I/O
// or environment failure (exit 1).
class LAYERINIT_API checkpoint_refused : public checkpoint_error {
 public:
  using checkpoint_error::checkpoint_error;
};

enum class CheckpointFormat : std::uint8_t { hdf5, safetensors };
LAYERINIT_API std::string_view format_name(CheckpointFormat f);           // "hdf5", "safetensors"
LAYERINIT_API CheckpointFormat parse_checkpoint_format(std::string_view s);  // throws bad_input listing both

// One dataset (HDF5) or tensor (safetensors), declared before any data is written.
struct DatasetSpec {
  std::string name;   // Hugging Face name ("model.layers.3.mlp.up_proj.weight"); no '/', unique
  Shape shape;        // row-major; rank >= 1, every dimension > 0
  DType dtype = DType::bf16;
  // Elements per write() call the caller intends (0: the whole tensor, or no promise). In stacked
  // layout this is numel / L (one layer slice). HDF5 chunks are cut so that they never cross a slab
  // boundary; it must be the product of a suffix of `shape` (or 0).
  std::uint64_t slab_elements = 0;
};

// Root attributes (HDF5) and __metadata__ entries (safetensors), all strings. Empty fields are
// still written, so a reader can rely on every key being present.
struct CheckpointMetadata {
  std::string format_version = "1";  // of layerinit's on-disk layout (docs/checkpoint.md)
  std::string library_version;       // empty: this build's LAYERINIT_VERSION
  std::string dtype;                 // "bf16"
  std::string seed;
  std::string recipe;
  std::string layout;                // "per-layer" or "stacked"
  std::string orientation;           // "out-in" or "in-out"
  std::string model_spec;            // the model spec as JSON
  std::string init_overrides;        // Recipe::overrides_text(); the key is written only when not empty
  // [["PATTERN","DTYPE"], ...] of the build's dtype overrides, in order; written only when not empty
  std::string dtype_overrides;
  // "stacked" or "per-expert": how a stacked layout holds MoE experts; written only when not empty
  // (emit: a stacked layout of a model with experts)
  std::string experts;
  std::map<std::string, std::string> extra;  // more keys; may not shadow the ones above
};

struct WriterOptions {
  bool overwrite = false;            // --force: replace an existing target
  bool check_free_space = true;      // statvfs against planned_bytes() before any work
  // safetensors: start a new shard when the next tensor would push a shard's data past this many
  // bytes (0: never shard). A tensor larger than the limit gets a shard of its own.
  std::uint64_t max_shard_size = 0;
  // safetensors: written as config.json beside the weights when not empty (checkpoint/hf_config.hpp).
  std::string config_json;
  // HDF5: upper bound on a chunk's bytes (HDF5's own limit is 4 GiB). Also the most a single
  // dataset's staging buffer holds, needed only when a write ends inside a chunk.
  std::uint64_t max_chunk_bytes = 64ull << 20;
};

class LAYERINIT_API CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  CheckpointWriter() = default;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Appends n_elements elements of dataset `dataset` (index into the declared list), starting at
  // row-major element first_element, from host memory holding them as little-endian raw values of
  // the dataset's dtype. Each dataset's writes must be contiguous and in order (first_element equals
  // the elements written so far); writes to different datasets may interleave. A misuse
  // throws layerinit::logic_error, an I/O failure checkpoint_error (after which the writer
  // is aborted and every further call throws).
  virtual void write(std::size_t dataset, std::uint64_t first_element, const void* bytes,
                     std::uint64_t n_elements) = 0;
  void write(std::string_view name, std::uint64_t first_element, const void* bytes, std::uint64_t n_elements);

  // Runs when every byte is written and synced, just before the rename, with the staged path (the
  // temporary file or directory that becomes the target): what must succeed for the checkpoint to
  // be published (emit's report). A throw aborts the writer like any failure.
  using BeforePublish = std::function<void(const std::filesystem::path& staged)>;
  // Checks every dataset is complete, flushes, fsyncs, runs before_publish, and renames into place.
  // Throws on failure, leaving the target as it was.
  virtual void commit(const BeforePublish& before_publish = {}) = 0;
  // Removes the temporary files; the target keeps what it held. Idempotent; commit() after it throws.
  virtual void abort() noexcept = 0;

  virtual const std::vector<DatasetSpec>& datasets() const = 0;
  virtual const std::filesystem::path& target() const = 0;
  std::size_t index_of(std::string_view name) const;  // an unknown name is misuse: layerinit::logic_error
};

// Bytes the checkpoint will take on disk (data plus a bound on headers/metadata): what the free
// space check asks for.
LAYERINIT_API std::uint64_t planned_bytes(CheckpointFormat f, const std::vector<DatasetSpec>& datasets,
                                          const CheckpointMetadata& meta, const WriterOptions& opts);

// planned_bytes added up one dataset, or one run of alike datasets, at a time: the datasets of 10^9
// identical layers are counted without a list of them. Saturates at 2^64 - 1 (no space has that).
class LAYERINIT_API PlannedBytes {
 public:
  PlannedBytes(CheckpointFormat f, const CheckpointMetadata& meta, const WriterOptions& opts);
  void add(const DatasetSpec& d) { add_run(d, 1, d.name.size()); }
  // `count` datasets with the shape, dtype and slab_elements of `each`, whose names have
  // `name_bytes` characters in all (each.name is not used).
  void add_run(const DatasetSpec& each, std::uint64_t count, std::uint64_t name_bytes);
  std::uint64_t total() const;

 private:
  CheckpointFormat f_;
  std::uint64_t max_chunk_bytes_, max_shard_size_, config_bytes_, meta_bytes_ = 0;
  std::uint64_t data_ = 0, per_dataset_ = 0, datasets_ = 0;
};

// Before any work, the checks opening a writer of format f makes of `target`: it may be written (absent,
// or with opts.overwrite something layerinit wrote: docs/checkpoint.md), its directory exists, and
// (opts.check_free_space) there is room for `planned` bytes. Throws checkpoint_refused for a target
// that may not be written, checkpoint_error for an environment failure.
LAYERINIT_API void check_checkpoint_target(CheckpointFormat f, const std::filesystem::path& target, const WriterOptions& opts,
                                           std::uint64_t planned);

// Throws checkpoint_error when the filesystem holding `where` (a file or directory; the nearest
// existing ancestor is asked) has fewer than `bytes` bytes available to this user:
// "checkpoint: not enough space for /data/out.h5: needs 13.49 GiB (...), 2.00 GiB (...) available".
LAYERINIT_API void check_free_space(const std::filesystem::path& where, std::uint64_t bytes);

// Creates the temporary file/directory beside `target` at once, so an unwritable path, an existing
// target without overwrite, or too little space fail here, before any work.
// HDF5: `target` is the file. safetensors: `target` is a directory that receives model.safetensors
// (or model-0000k-of-0000n.safetensors shards and model.safetensors.index.json) and config.json.
LAYERINIT_API std::unique_ptr<CheckpointWriter> open_hdf5_writer(const std::filesystem::path& target,
                                                                 std::vector<DatasetSpec> datasets,
                                                                 const CheckpointMetadata& meta, const WriterOptions& opts);
LAYERINIT_API std::unique_ptr<CheckpointWriter> open_safetensors_writer(const std::filesystem::path& target,
                                                                        std::vector<DatasetSpec> datasets,
                                                                        const CheckpointMetadata& meta,
                                                                        const WriterOptions& opts);
// One .safetensors file at `file` (its name must end in .safetensors), written to a temporary file
// beside it and renamed into place; no shards, no index, no config.json (a max_shard_size or
// config_json is refused with bad_input). --force (overwrite) replaces only a
// .safetensors file whose __metadata__ has format_version and library_version. emit_rank writes
// each rank's file with it.
LAYERINIT_API std::unique_ptr<CheckpointWriter> open_safetensors_file_writer(const std::filesystem::path& file,
                                                                             std::vector<DatasetSpec> datasets,
                                                                             const CheckpointMetadata& meta, const WriterOptions& opts);
// A safetensors checkpoint's files: tensors go to shards in declaration order; a new shard starts
// when the next tensor would push the current shard's data past max_shard_size bytes (0: never), a
// larger tensor gets a shard of its own. One shard is "model.safetensors", more are
// "model-0000k-of-0000n.safetensors". The writer and the parallel emit (checkpoint/parallel.hpp) both
// cut a checkpoint with this, so a shard written alone is the same file.
struct SafetensorsShard {
  std::string file;
  std::vector<std::size_t> datasets;  // indices into the declared list, in order
  std::uint64_t data_bytes = 0;
};
LAYERINIT_API std::vector<SafetensorsShard> safetensors_shards(const std::vector<DatasetSpec>& datasets, std::uint64_t max_shard_size);
// model.safetensors.index.json of those shards: {"metadata": {"total_size": N}, "weight_map": {...}}.
LAYERINIT_API std::string safetensors_index_json(const std::vector<SafetensorsShard>& shards, const std::vector<DatasetSpec>& datasets);

LAYERINIT_API std::unique_ptr<CheckpointWriter> open_checkpoint_writer(CheckpointFormat f, const std::filesystem::path& target,
                                                                       std::vector<DatasetSpec> datasets,
                                                                       const CheckpointMetadata& meta, const WriterOptions& opts);
// The same for a caller whose dataset list grows with the model (emit): the target and the space for
// `planned` bytes (planned_bytes of the list, counted without it) are checked first, and only then
// does `datasets` make the list.
LAYERINIT_API std::unique_ptr<CheckpointWriter> open_checkpoint_writer(CheckpointFormat f, const std::filesystem::path& target,
                                                                       std::uint64_t planned,
                                                                       const std::function<std::vector<DatasetSpec>()>& datasets,
                                                                       const CheckpointMetadata& meta, const WriterOptions& opts);

}  // namespace layerinit
