// Emit: build a model part by part and stream it into a checkpoint, memory bounded by one part.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/checkpoint/writer.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/shard/rank.hpp>

namespace layerinit {

// The datasets a build writes, in file order: per-layer layout one per tensor (Hugging Face names),
// stacked layout one [L, ...] dataset per layer parameter with one slab per layer.
LAYERINIT_API std::vector<DatasetSpec> checkpoint_datasets(const Builder& b);
// The same datasets one at a time (Builder::walk), each with where it comes from: the kind of its
// part and, per-layer layout, its layer (0-based in the repeated block; nothing for the stacked
// buffers and the tensors outside the layers).
using DatasetVisitor = std::function<void(DatasetSpec, Part::Kind, std::optional<std::uint64_t> layer)>;
LAYERINIT_API void for_each_dataset(const Builder& b, const DatasetVisitor& f);

// planned_bytes(f, checkpoint_datasets(b), meta, opts) without the list: O(tensors of one layer) for
// uniform layers (Builder::uniform_layers), O(1) memory always. The free space check of emit asks
// this before anything grows with the model.
LAYERINIT_API std::uint64_t planned_checkpoint_bytes(const Builder& b, CheckpointFormat f, const CheckpointMetadata& meta,
                                                     const WriterOptions& opts);

struct EmitProgress {
  std::uint64_t layers_done = 0, layers_total = 0;
  std::uint64_t bytes_done = 0, bytes_total = 0;
  double seconds = 0;
};

// A Hugging Face config.json makes transformers load a directory as its model: only the per-layer,
// out-in layout matches what it expects (stacked or transposed weights would load as missing keys
// initialized anew, or a square weight silently transposed).
LAYERINIT_API bool hf_loadable(const BuildOptions& opts);
// The config.json an emit to safetensors writes beside the weights: config_json of the spec's family
// when hf_loadable(opts); nothing for other layouts and for families without one (MLPs, custom specs).
LAYERINIT_API std::optional<std::string> hf_config_for(const ModelSpec& spec, const BuildOptions& opts);

struct EmitResult;

struct EmitOptions {
  CheckpointFormat format = CheckpointFormat::hdf5;
  // writer.config_json only when hf_loadable(the builder's options): else emit_checkpoint throws
  // bad_input.
  WriterOptions writer;
  // dtype, seed, recipe, layout, orientation and model_spec are the builder's: left empty they are
  // filled in; a value that differs from the builder's is refused (bad_input).
  CheckpointMetadata meta;
  std::function<void(const EmitProgress&)> progress;  // after each part
  const std::atomic<bool>* cancel = nullptr;          // set (e.g. by a signal handler) to stop
  // emit_checkpoint and emit_rank: runs once every byte is written and synced, just before the rename
  // that publishes, with the result as returned (file_bytes: the staged files'). What the caller
  // promised besides the checkpoint goes here (the CLI's report): a throw, or a cancel set by then,
  // stops the emit with the temporary removed and the target as it was. emit_parallel with more than
  // one process does not take it (misuse: rank 0 publishes while the others wait).
  std::function<void(const EmitResult&)> before_publish;
  std::uint64_t staging_bytes = 64ull << 20;          // host buffer for device-resident parts
};

// What `build --report json` reports for a tensor: XXH3-64 of its raw bytes (content_hash), and for a
// stacked tensor also of each layer slice.
struct LAYERINIT_API TensorReport {
  TensorReport() = default;
  // A whole tensor of `shape` and `dtype`, its bytes counted, nothing hashed yet.
  TensorReport(std::string name, Shape shape, DType dtype);
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  std::uint64_t bytes = 0;
  std::uint64_t hash = 0;
  std::vector<std::uint64_t> layer_hashes;  // stacked only
  // A rank's piece (emit_rank, build --rank): the whole tensor's shape as stored and where the piece
  // (shape) sits in it. Empty for whole tensors.
  Shape global_shape, offset;
  // false when no one process saw all of the tensor's bytes (an HDF5 stacked dataset split among the
  // ranks of emit_parallel): `hash` is not known, layer_hashes are.
  bool hashed = true;
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
LAYERINIT_API EmitResult emit_checkpoint(const Builder& b, backend& be, const std::filesystem::path& target, const EmitOptions& opts);

// `given` with the builder's dtype, seed, recipe, layout, orientation and model_spec filled in where
// empty; a given value that contradicts the builder throws bad_input.
LAYERINIT_API CheckpointMetadata builder_metadata(const Builder& b, const CheckpointMetadata& given);

// A rank's file name: "rank-00003-of-00008.safetensors", the rank counted from 0 and the number of
// ranks, each with at least 5 digits, then the extension.
LAYERINIT_API std::string rank_file_name(std::uint64_t rank, std::uint64_t ranks, std::string_view extension = ".safetensors");

// Streams rank r's pieces (stream_rank: tracked peak = its largest part) into one safetensors file,
// dir / rank_file_name(r, ranks), written atomically (open_safetensors_file_writer); `dir` is created
// when missing (its parent must exist), so ranks started together share it. Each piece is stored
// under its global name with its local shape; stacked layout: one [n, ...] piece per held layer
// parameter. The __metadata__ holds the builder's metadata plus (docs/sharding.md)
//   "layerinit.shards": JSON {name: {"global_shape": [...], "offset": [...]}} for every piece,
//   "layerinit.mesh":   JSON {"pp": P, "fsdp": F, "ep": E, "tp": T, "rank": r}.
// opts.format must be safetensors, without max_shard_size or config_json (bad_input).
// The result's tensors carry global_shape and offset. Failures leave no temporary behind, as
// emit_checkpoint's do.
LAYERINIT_API EmitResult emit_rank(const RankPlan& r, backend& be, const std::filesystem::path& dir, const EmitOptions& opts);

}  // namespace layerinit
