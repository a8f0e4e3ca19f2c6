// Verify: is a checkpoint the init it claims? Every element is a pure function of (seed, tensor name,
// index, dtype), so the expected values are made again, chunk by chunk, beside the file's, and
// nothing but a chunk of each is held (docs/checkpoint.md, "Verify").
//
// Use:
//   auto r = open_checkpoint_reader("out/");
//   const auto claim = claim_from_metadata(r->metadata());         // what a layerinit file says it is
//   Builder b(claim->spec, checked_recipe(claim->options, ...), checked_build_options(...), be, mr);
//   VerifyReport report = verify_checkpoint(b, *r, {});
//   report.ok();   // every tensor equal, none missing or unexpected
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <layerinit/checkpoint/reader.hpp>
#include <layerinit/core/api.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/options.hpp>

namespace layerinit {

enum class CheckStatus : std::uint8_t {
  equal,       // every element's bits are the init's (for rank files: and the pieces cover the tensor)
  differs,     // stored with another shape, dtype or values
  missing,     // the model has it, the checkpoint does not (or its rank files leave elements uncovered)
  unexpected,  // the checkpoint has it, the model does not
};
LAYERINIT_API std::string_view check_status_name(CheckStatus s);  // "equal", "differs", "missing", "unexpected"

// What a differing (or missing, or unexpected) tensor is, when a known transformation of the
// expected values gives exactly the stored ones. `kind` is one of:
//   "transposed"        the last two dimensions swapped (a kernel stored [in, out], or a square one)
//   "rope_permute"      rows permuted per head as Meta-to-Hugging-Face conversion does (transformers'
//                       convert_llama_weights_to_hf permute, torchtitan's to_hf), `heads` heads
//   "rope_unpermute"    the inverse: Hugging Face rows put back in Meta's interleaved order
//                       (torchtitan's from_hf reverse permute)
//   "rows_permuted"     rows of the last dimension permuted by no known rule
//   "slice"             a missing tensor found inside an unexpected one (a fused qkv or gate_up, a
//                       stacked [L, ...] or [L, E, ...] tensor) at `offset` (its first element)
//   "renamed"           an unexpected tensor holds a missing one's values exactly
//   "other_tensor"      holds another expected tensor's values (swapped, or tied to it)
//   "converted"         stored in another dtype, holding the expected values exactly (widened)
//   "rounded"           the expected values rounded to the stored dtype
//   "other_dtype"       the init made at another dtype (`dtype`), then cast to the stored one
//   "other_seed"        the init of another seed (`seed`)
//   "reshaped"          the expected bytes in another shape
//   "zeros", "constant" every element 0 (or one value)
//   "none"              no known transformation gives the stored values
struct Diagnosis {
  std::string kind;
  std::string text;  // one sentence for people: "rows permuted per head as Meta-to-HF conversion (32 heads)"
  std::string tensor;                  // other_tensor, slice, renamed: the other tensor's name
  std::optional<std::uint64_t> heads;  // rope_permute, rope_unpermute
  std::optional<std::uint64_t> seed;   // other_seed
  std::optional<std::uint64_t> offset; // slice: element offset in the unexpected tensor
  Shape index;                         // slice: the index of the leading dimensions it is, when it is one ([3] of [L, ...])
  std::optional<DType> dtype;          // other_dtype
};

// The first element that differs, by row-major index in the stored tensor, with both values.
struct ElementDifference {
  std::uint64_t index = 0;
  Shape coords;
  std::uint64_t expected_bits = 0, stored_bits = 0;
  double expected = 0, stored = 0;  // as numbers (bf16/fp16 widened exactly)
};

struct TensorCheck {
  std::string name;
  CheckStatus status = CheckStatus::equal;
  Shape expected_shape, stored_shape;      // empty when missing (expected) or unexpected (stored)
  std::string expected_dtype, stored_dtype;  // "bf16", ...; a stored dtype layerinit does not make as the file names it ("F64")
  std::string file;                        // where it is stored ("" single file; a rank file's name for pieces)
  std::uint64_t pieces = 0;                // rank files: the pieces read for it
  std::uint64_t elements = 0;              // elements compared
  std::uint64_t differing = 0;             // of them, those whose bits differ
  std::uint64_t uncovered = 0;             // rank files: elements no piece holds
  std::optional<ElementDifference> first_difference;
  std::optional<Diagnosis> diagnosis;      // differs, missing (found elsewhere), unexpected (what it holds)
};

struct VerifyReport {
  std::vector<TensorCheck> tensors;  // the model's in file order, then the unexpected in the file's order
  std::uint64_t equal = 0, differs = 0, missing = 0, unexpected = 0;
  std::uint64_t bytes_read = 0;
  double seconds = 0;
  bool ok() const { return differs == 0 && missing == 0 && unexpected == 0; }
};

struct VerifyProgress {
  std::uint64_t bytes_done = 0, bytes_total = 0;
  std::uint64_t tensors_done = 0, tensors_total = 0;
  double seconds = 0;
};

struct VerifyOptions {
  std::function<void(const VerifyProgress&)> progress;  // after each chunk
  const std::atomic<bool>* cancel = nullptr;            // set (a signal handler) to stop: throws layerinit::error("interrupted")
  std::uint64_t chunk_bytes = 64ull << 20;              // of each side, per read
  bool diagnose = true;                                 // look for the transformation behind each difference
  // Seeds "other_seed" tries besides 0..1023, a few favourites and the checkpoint metadata's seed
  // (the user's guesses).
  std::vector<std::uint64_t> seeds;
  // Bytes a tensor's diagnosis may take (it holds the stored and the expected tensor whole, and a
  // copy beside them); one that needs more is skipped, its check saying so. Default: what
  // available_host_memory says when the diagnosis begins.
  std::optional<std::uint64_t> diagnosis_memory;
};

// Tensors that are not in a file as a checkpoint: a state_dict the Python package hands over, a test's
// arrays. read(k, first, n, out) copies elements [first, first + n) of tensors[k] as read() does
// (the range is checked before it is called). Names must be unique.
using TensorReadFn = std::function<void(std::size_t k, std::uint64_t first, std::uint64_t n, void* out)>;
LAYERINIT_API std::unique_ptr<CheckpointReader> callback_reader(std::string format, std::vector<StoredTensor> tensors,
                                                                std::map<std::string, std::string> metadata, TensorReadFn read);

// Compares every tensor of `r` with what `b` makes (b's spec, recipe, options and seed; its backend
// fills on the host: a backend whose memory is not host memory is misuse). Memory: three chunks
// (stored, the next stored, expected) of at most opts.chunk_bytes, plus, for each tensor that differs and is diagnosed, that tensor twice (stored
// and expected) and its row hashes. A stored tensor of a dtype layerinit does not make is read only to
// be diagnosed. Throws what the reader throws; the checkpoint is never written.
LAYERINIT_API VerifyReport verify_checkpoint(const Builder& b, CheckpointReader& r, const VerifyOptions& opts = {});

// What a checkpoint layerinit wrote says it is: the model spec and the options it was made with
// (dtype, seed, recipe with init_overrides, dtype_overrides, layout, orientation, experts), from the
// metadata keys emit writes (docs/checkpoint.md). nullopt when the metadata has no model_spec (not
// layerinit's). A model_spec or init_overrides that does not parse is checkpoint_invalid naming the key.
struct CheckpointClaim {
  ModelSpec spec;
  OptionsText options;
};
LAYERINIT_API std::optional<CheckpointClaim> claim_from_metadata(const std::map<std::string, std::string>& meta);

// The options a caller was given, each nullopt when it was not (the CLI's flags, layerinit.verify's
// arguments left None).
struct GivenOptions {
  std::optional<std::string> dtype, recipe, layout, orientation, experts;
  std::optional<std::uint64_t> seed;
  std::optional<std::vector<std::pair<std::string, std::string>>> init_overrides, dtype_overrides;
};
// What verify compares with: each option given, else the claim's (a checkpoint layerinit wrote), else
// OptionsText's default (emit's and build's).
LAYERINIT_API OptionsText claimed_options(const std::optional<CheckpointClaim>& claim, const GivenOptions& given);

// Refuses (bad_input, one line) a checkpoint that is not of `spec` at all, before any
// tensor is compared: its metadata names another model spec, or fewer than half of the model's
// tensors are there under their names with their element counts. `shown` names the checkpoint.
LAYERINIT_API void check_same_model(const ModelSpec& spec, const Builder& b, const CheckpointReader& r, std::string_view shown);

// The report as JSON: {"ok", "equal", "differs", "missing", "unexpected", "bytes_read", "seconds",
// "tensors": [{"name", "status", "expected": {"shape", "dtype"}, "stored": {"shape", "dtype", "file"},
// "elements", "differing", "first_difference": {"index", "coords", "expected", "stored",
// "expected_bits", "stored_bits"}, "diagnosis": {"kind", "text", ...}}]}. Both the CLI's --report json
// and layerinit.verify give it.
LAYERINIT_API std::string verify_report_json(const VerifyReport& report, int indent = 2);
// The report for people: one line per tensor that is not equal (all of them with `all`), then
// "N tensors: E equal, D differ, M missing, U unexpected". Lines end in '\n'; names are printable().
//   differs     model.layers.0.self_attn.q_proj.weight [64, 64] bf16: 4032 of 4096 elements differ, first
//               [0, 1]: 0.0123 stored, 0.0456 expected; rows permuted per head as ... (4 heads of 16 rows)
LAYERINIT_API std::string verify_report_text(const VerifyReport& report, bool all = false);

}  // namespace layerinit
