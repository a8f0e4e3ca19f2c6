// Checkpoint readers: the tensors of a checkpoint on disk, read back element range by element range,
// whoever wrote it (layerinit's writers, transformers' save_pretrained, a converter). What `verify`
// reads (checkpoint/verify.hpp).
//
// Use:
//   auto r = open_checkpoint_reader("out/");            // a safetensors file or directory, an HDF5 file,
//   for (std::size_t k = 0; k < r->tensors().size(); ++k)   // or a directory of emit --rank files
//     r->read(k, first, n, buffer);                     // raw little-endian elements [first, first + n)
// A reader's calls are not to be made concurrently (it keeps files and an HDF5 dataset open between
// reads, and HDF5 is not thread-safe): one reader per thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/checkpoint/writer.hpp>
#include <layerinit/core/api.hpp>
#include <layerinit/core/shape.hpp>
#include <layerinit/dtypes/dtype.hpp>

namespace layerinit {

// A path that is not a checkpoint this reader understands, or a file that breaks its format's rules
// (a truncated file, a header whose offsets leave the data, an index naming a missing shard): bad
// input (the CLI's exit 2). what() is one line naming the file and the rule.
class LAYERINIT_API checkpoint_invalid : public checkpoint_refused {
 public:
  using checkpoint_refused::checkpoint_refused;
};

// One tensor as the checkpoint stores it.
struct LAYERINIT_API StoredTensor {
  std::string name;            // HDF5: a dataset in a group is "group/name"
  Shape shape;                 // as stored, row-major (a rank's piece: its own shape); [] for a 0-d tensor
  std::optional<DType> dtype;  // nullopt: a dtype layerinit does not make (F64, I64, F8_E4M3, ...)
  // As the file names it: safetensors "BF16", "F64"; HDF5 layerinit's names for its dtypes ("bf16",
  // "fp16", "fp32": IEEE f32, a 2-byte float of 8 exponent bits, of 5), else "f64", "i32", "u8", ...
  // from the HDF5 type ("compound", "string", ...: no element size).
  std::string dtype_text;
  std::string file;            // the file that holds it, relative to the checkpoint path ("" for a single file)
  // A rank's piece (a directory of emit --rank files): the whole tensor's shape and where the piece
  // sits in it, from the file's "layerinit.shards". Empty for a whole tensor.
  Shape global_shape, offset;
  std::uint64_t bytes() const;  // numel(shape) * its element size (dtype_text's; 0 when unknown)
};

class LAYERINIT_API CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  CheckpointReader() = default;
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  // "safetensors", "hdf5" or "rank files".
  virtual std::string_view format() const = 0;
  // The tensors in file order: safetensors by data_offsets (header order among equal offsets),
  // shards in the order of their file names, rank files in rank order; HDF5 by name (the order HDF5
  // keeps; layerinit's files track no creation order). Names are unique except in rank files, where
  // each piece of a tensor has its name.
  virtual const std::vector<StoredTensor>& tensors() const = 0;
  // The checkpoint's string metadata: safetensors __metadata__ (of the first file; "format" "pt"
  // included), HDF5 root string attributes. layerinit's keys are CheckpointMetadata's
  // (docs/checkpoint.md); empty when the writer left none. Rank files: without each rank's own keys,
  // layerinit.shards and layerinit.mesh (its "rank" differs from file to file); every file's other
  // keys must equal the first's, and its mesh degrees too, or open_checkpoint_reader refuses them.
  virtual const std::map<std::string, std::string>& metadata() const = 0;
  // Copies elements [first, first + n) of tensors()[k], row-major, as raw little-endian values of its
  // stored dtype, to `out` (n * element size bytes). A range outside the tensor or a tensor of
  // unknown element size is misuse (layerinit::logic_error); a read that fails is checkpoint_error
  // naming the file, a file found broken checkpoint_invalid.
  virtual void read(std::size_t k, std::uint64_t first, std::uint64_t n, void* out) = 0;
};

// safetensors' names of layerinit's dtypes ("BF16", "F16", "F32"), both ways: the writer writes
// them, the reader and the Python package's verify read them (nullopt: a dtype layerinit does not make).
LAYERINIT_API std::string_view safetensors_dtype_name(DType t);
LAYERINIT_API std::optional<DType> dtype_from_safetensors_name(std::string_view s);

// Opens `path`:
// - a .safetensors file;
// - a directory holding model.safetensors, or model.safetensors.index.json and the shards it names
//   (a Hugging Face checkpoint, layerinit's emit, save_pretrained), config.json ignored;
// - a directory of emit --rank files, rank-RRRRR-of-NNNNN.safetensors (all of one mesh: one N, one
//   layerinit.mesh; a missing rank is no error here, its pieces are simply absent);
// - an HDF5 file (layerinit's, or a parallel emit's master over its rank directory: HDF5 reads the
//   virtual datasets; a master whose layerinit.rank_files directory is gone is checkpoint_invalid,
//   since HDF5 would read zeros for it).
// A directory's model.safetensors.index.json comes first, then model.safetensors, then rank files;
// other files (config.json, ...) are ignored, and a directory of both a model and rank files is refused.
// A file that is not HDF5 is read as safetensors when named .safetensors or when its header looks
// like one.
// Everything about the layout is checked here, before any tensor is read: headers parse, offsets tile
// the data and stay inside the file, an index names only shards that exist and tensors they hold.
// safetensors is held to its own reader's rules (safetensors' Metadata::validate): a header of at most
// 100,000,000 bytes, each tensor's bytes exactly its shape's (for a dtype of known size), the tensors
// tiling the data with no overlap, no gap and nothing after the last. An index's weight_map must
// match its shards exactly: a tensor a shard holds that the index does not put there (unnamed, or
// named in another shard) is refused, so is a name it puts in a shard that does not hold it. An HDF5
// file's `dtype` attribute (bf16, fp16, fp32) must match its type; a virtual dataset's every source
// file must exist.
// Throws checkpoint_invalid for what is not such a checkpoint (naming the path and why: "checkpoint:
// <file>: <rule>", a path that does not exist "checkpoint: cannot open <path>: No such file or
// directory"), checkpoint_error for an I/O failure, bad_input for an empty path.
LAYERINIT_API std::unique_ptr<CheckpointReader> open_checkpoint_reader(const std::filesystem::path& path);

}  // namespace layerinit
