// layerinit._core: the library as a Python extension (docs/python.md). The typed, documented API is
// python/layerinit/__init__.py; this module holds what needs C++: specs and plans, builds whose
// tensors become Arrays owning layerinit's tracked memory, and fills of other frameworks' arrays
// in place through DLPack.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <layerinit/config.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/checkpoint/verify.hpp>
#include <layerinit/checkpoint/verify_document.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/describe.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/options.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/recorded.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/memory/tracking.hpp>
#include <layerinit/init/box_fill.hpp>
#include <layerinit/shard/composite.hpp>
#include <layerinit/shard/composite_document.hpp>
#include <layerinit/shard/parallel.hpp>
#include <layerinit/shard/rank.hpp>
#include <layerinit/shard/tensor_index.hpp>
#include <layerinit/plan/memory_check.hpp>
#include <layerinit/init/json_documents.hpp>
#include <layerinit/plan/plan.hpp>

#include "json_value.hpp"
#if LAYERINIT_HAS_XLA
#include "xla_binding.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace layerinit::python {
namespace {

// DLPack device types (dlpack.h): what __dlpack_device__ returns and imported arrays carry.
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;

// A backend and the tracker every allocation of this process goes through on it: the host's, and one
// per CUDA device. Made on first use and never destroyed: Arrays may outlive the interpreter's module
// teardown, and each frees its bytes through this tracker.
struct Context {
  std::unique_ptr<backend> be;
  std::unique_ptr<tracking_resource> tracker;
  int device_type = kDLCPU;
  int device_id = 0;  // DLPack's device_id: the CUDA device index
  std::string name() const { return device_type == kDLCPU ? "cpu" : "cuda:" + std::to_string(device_id); }
};

Context& host_context() {
  static Context* c = [] {
    auto* ctx = new Context;
    ctx->be = make_host_backend(0);
    ctx->tracker = std::make_unique<tracking_resource>(ctx->be->memory());
    return ctx;
  }();
  return *c;
}

// The context of a CUDA device choose_device accepted.
Context& cuda_context(const DeviceChoice& device) {
  static std::mutex mu;
  static std::map<int, Context*> contexts;
  std::lock_guard lock(mu);
  Context*& c = contexts[device.cuda_device];
  if (c == nullptr) {
    auto be = make_backend(device);  // layerinit::error naming why when CUDA is unusable
    auto* ctx = new Context;
    ctx->be = std::move(be);
    ctx->tracker = std::make_unique<tracking_resource>(ctx->be->memory());
    ctx->device_type = kDLCUDA;
    ctx->device_id = device.cuda_device;
    c = ctx;
  }
  return *c;
}

// "cpu", "cuda" (cuda:0) or "cuda:N"; ValueError naming `device` for anything else or a device this
// process does not have, before anything is made.
Context& context_for(const std::string& device, std::string_view argument = "device") {
  if (device == "auto" || device == "host") bad_argument(argument, device, "is unknown (valid: cpu, cuda, cuda:N)");
  const DeviceChoice d = choose_device(device, argument);
  return d.kind == BackendKind::cuda ? cuda_context(d) : host_context();
}

// The context of memory on DLPack device (type, id): the host's for CPU (and pinned host) memory.
Context& context_at(int device_type, int device_id) {
  if (device_type != kDLCUDA && device_type != kDLCUDAManaged) return host_context();
  return context_for("cuda:" + std::to_string(device_id), "array's device");
}

nb::dlpack::dtype dl_dtype(DType t) {
  switch (t) {
    case DType::f32: return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 32, 1};
    case DType::f16: return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::bf16: return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  }
  LAYERINIT_FAIL("dl_dtype: unknown dtype");
}

// The layerinit dtype of an imported array; ValueError naming what it is otherwise.
DType dtype_of(const nb::dlpack::dtype& d) {
  if (d.lanes == 1 && d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && d.bits == 32) return DType::f32;
  if (d.lanes == 1 && d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && d.bits == 16) return DType::f16;
  if (d.lanes == 1 && d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) && d.bits == 16) return DType::bf16;
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string code = d.code < 7 ? codes[d.code] : "code " + std::to_string(d.code);
  bad_argument("array dtype", code + std::to_string(d.bits), "is not one layerinit fills (valid: float32, float16, bfloat16)");
}

std::string shape_text(const Shape& s) { return shape_string(s); }

// A str argument as UTF-8; ValueError naming `what` for another type or a str UTF-8 cannot encode
// (a lone surrogate).
std::string text_arg(nb::handle v, const std::string& what) {
  if (!nb::isinstance<nb::str>(v))
    bad_argument(what, "must be a str, got " + quote(nb::cast<std::string>(nb::str(v.type().attr("__name__")))));
  std::optional<std::string> text = python::utf8_of(v);
  if (!text) bad_argument(what, "is not valid text (a lone surrogate)");
  return *std::move(text);
}

// ---------------------------------------------------------------------------------------------
// Arrays: one tensor's memory, owned by the Python object; DLPack consumers keep the object alive.

struct Array {
  Tensor tensor;        // view.shape = the local shape; its Storage frees through the context's tracker
  Shape global_shape;   // the whole tensor as stored
  Shape offset;         // of this piece in global_shape (zeros when whole)
  Context* ctx = nullptr;

  nb::ndarray<nb::array_api> view(nb::handle owner) const {
    std::vector<std::size_t> shape(tensor.view.shape.begin(), tensor.view.shape.end());
    return nb::ndarray<nb::array_api>(tensor.view.data, shape.size(), shape.data(), owner, nullptr, dl_dtype(tensor.view.dtype),
                         ctx->device_type, ctx->device_id);
  }
};

std::vector<std::uint64_t> as_vector(const Shape& s) { return {s.begin(), s.end()}; }

// ---------------------------------------------------------------------------------------------
// Fills of memory layerinit does not own: boxes of tensors and composites into imported arrays.

struct Imported {
  Region region;  // strides empty when dense
  Shape shape;
  DType dtype = DType::f32;
  Context* ctx = nullptr;  // the memory's device: the host's, or the CUDA device the array is on
};

void run_jobs(const std::vector<FillJob>& jobs, Context& ctx) {
  if (jobs.empty()) return;
  nb::gil_scoped_release release;
  ctx.be->fill(jobs);
  ctx.be->synchronize();
}

// An imported DLPack array as a region to fill; ValueError for what cannot be filled in place.
// `bits_as`: the array's elements are this dtype's bits (a uint16 array holding bf16), for callers
// whose framework has no bfloat16 of its own.
Imported import_region(nb::handle obj, bool allow_strided, std::optional<DType> bits_as = std::nullopt) {
  const nb::handle type = obj.type();
  if (nb::hasattr(type, "__module__")) {
    const std::string mod = nb::cast<std::string>(nb::str(type.attr("__module__")));
    if (mod.rfind("jax", 0) == 0 || mod.rfind("jaxlib", 0) == 0)
      bad_argument("array", "is a JAX array: JAX arrays are immutable and cannot be filled in place (use layerinit.jax.build)");
  }
  nb::ndarray<> a;
  if (!nb::try_cast(obj, a, false)) {
    nb::ndarray<nb::ro> ro;
    if (nb::try_cast(obj, ro, false))
      bad_argument("array", "is read-only: layerinit.fill_ writes in place and needs a writable array");
    bad_argument("array", "must export DLPack (__dlpack__) or the buffer protocol, got " +
                              quote(nb::cast<std::string>(nb::str(type.attr("__name__")))));
  }
  Imported r;
  if (bits_as) {
    if (a.dtype().lanes != 1 || a.dtype().bits != 8 * dtype_size(*bits_as))
      bad_argument("array", "of " + std::to_string(a.dtype().bits) + "-bit elements cannot hold " + std::string(dtype_name(*bits_as)));
    r.dtype = *bits_as;
  } else {
    r.dtype = dtype_of(a.dtype());
  }
  const int device_type = a.device_type();
  if (device_type != kDLCPU && device_type != kDLCUDAHost && device_type != kDLCUDA && device_type != kDLCUDAManaged)
    bad_argument("array", "is on DLPack device type " + std::to_string(device_type) + ": layerinit fills CPU and CUDA memory");
  r.ctx = &context_at(device_type, a.device_id());  // a device this process does not have: ValueError here
  r.region.data = a.data();
  // A view at an odd byte offset (np.frombuffer(b, offset=1)): the fill writes whole elements.
  if (reinterpret_cast<std::uintptr_t>(a.data()) % dtype_size(r.dtype) != 0)
    bad_argument("array", "is not aligned to its " + std::to_string(dtype_size(r.dtype)) + "-byte elements");
  for (std::size_t d = 0; d < a.ndim(); ++d) r.shape.push_back(a.shape(d));
  if (a.stride_ptr() == nullptr || numel(r.shape) == 0) return r;  // dense, or nothing to write
  for (std::size_t d = 0; d < a.ndim(); ++d) {  // a dimension of extent 1 has no stride that matters
    if (a.stride(d) < 0 && a.shape(d) > 1) bad_argument("array", "has a negative stride");
    r.region.strides.push_back(a.shape(d) > 1 ? static_cast<std::uint64_t>(a.stride(d)) : 0);
  }
  if (dense_from(r.shape, r.region.strides) == 0) {
    r.region.strides.clear();
  } else if (!allow_strided) {
    bad_argument("array", "of shape " + shape_text(r.shape) +
                              " is not contiguous (row-major): fill a contiguous array, or .contiguous() and copy back");
  }
  return r;
}

// A box's offset: zeros when none is given, else one entry per dimension of the array.
Shape offset_arg(const std::vector<std::uint64_t>& offset, const Imported& r) {
  Shape off(offset.begin(), offset.end());
  if (off.empty()) off = Shape(r.shape.size(), 0);
  if (off.size() != r.shape.size())
    bad_argument("offset", "has " + std::to_string(off.size()) + " dimensions, the array " + std::to_string(r.shape.size()));
  return off;
}

// The jobs filling `array`, the piece at `offset` of composite `c`; returns the context of the array's
// device. ValueError for an array that cannot be filled or is not the composite's dtype.
Context& composite_jobs(nb::handle array, const Composite& c, std::uint64_t seed, const std::vector<std::uint64_t>& offset,
                   bool allow_strided, const std::optional<std::string>& bits_as, std::vector<FillJob>& jobs) {
  const Imported r = import_region(array, allow_strided, bits_as ? std::optional<DType>(parse_dtype(*bits_as)) : std::nullopt);
  if (r.dtype != c.dtype)
    bad_argument("array", std::string(": the composite is ") + std::string(dtype_name(c.dtype)) + " but the array is " +
                              std::string(dtype_name(r.dtype)));
  composite_fill_jobs(c, Box{offset_arg(offset, r), r.shape}, r.region, seed, jobs);
  return *r.ctx;
}

// ---------------------------------------------------------------------------------------------
// Specs and plans.

struct Spec {
  ModelSpec spec;
};

// (name glob, text) in the order of the Python mapping's items: the last match wins, as on the CLI.
using TextPairs = std::vector<std::pair<std::string, std::string>>;
// A fill region as Python gives it: (offset, shape, Fill).
using RegionTuple = std::tuple<std::vector<std::uint64_t>, std::vector<std::uint64_t>, FillSpec>;

class Plan {
 public:
  // The arguments of layerinit.plan as text (fills as Fill.text), read by the library as the CLI's
  // flags are (init/options.hpp).
  // dtype nullopt: the spec's default_dtype (its Hugging Face config's dtype, else bf16), as the CLI
  // without --dtype.
  Plan(const Spec& s, const std::string& recipe, const TextPairs& overrides, const std::optional<std::string>& dtype,
       const TextPairs& dtype_overrides, std::uint64_t seed, const std::string& layout, const std::string& orientation,
       const std::string& experts)
      : spec_(s.spec) {
    const OptionsText text{dtype, dtype_overrides, recipe, overrides, seed, layout, orientation, experts};
    recipe_ = checked_recipe(text, OptionNames::python);
    opts_ = checked_build_options(text, OptionNames::python, s.spec);
    spec_.validate();
    builder_.emplace(spec_, recipe_, opts_, *host_context().be, *host_context().tracker);
    index_.emplace(*builder_);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  const Builder& builder() const { return *builder_; }
  const TensorIndex& index() const { return *index_; }

  // name -> (memory shape, dtype, kind, layer or None)
  nb::list tensors() const {
    if (const std::uint64_t n = index_->tensor_count(); n > max_listed_tensors)
      bad_argument("plan of", spec_.name, ": " + std::to_string(n) + " tensors are too many to list (at most " +
                                              std::to_string(max_listed_tensors) + "); look tensors up by name");
    nb::list out;
    // The checkpoint's datasets (one walk of the plan): a stacked buffer is a layer part without a layer.
    for_each_dataset(*builder_, [&](DatasetSpec d, Part::Kind kind, std::optional<std::uint64_t> layer) {
      const char* what = kind == Part::Kind::pre ? "pre" : kind == Part::Kind::post ? "post" : layer ? "layer" : "stacked";
      if (layer) *layer += spec_.first_layer;
      out.append(nb::make_tuple(d.name, as_vector(d.shape), std::string(dtype_name(d.dtype)), what, layer));
    });
    return out;
  }

  // The composite of a JAX leaf: the tensors named by template `name` ("{k}": stack axis k's index) at
  // every position of `stack`, axis k at dimension dims[k] of the leaf (no dims: the leading ones;
  // Flax linen's nn.scan with variable_axes={"params": 1} puts the layer axis at 1), made in the
  // leaf's `dtype` whatever the plan's (values depend on the dtype only through the fills, prepared
  // per call). std::invalid_argument unless dims has one entry per axis, at distinct dimensions of
  // the leaf, the tensors make an array of `shape` and every fill suits the dtype.
  Composite leaf(const std::string& name, const std::vector<std::uint64_t>& stack, const std::vector<std::uint64_t>& shape,
                 const std::string& dtype, const std::optional<std::vector<std::size_t>>& dims, const std::string& leaf_name) const {
    const std::string leaf = leaf_name.empty() ? "the leaf" : "leaf " + quote(leaf_name);
    if (dims && dims->size() != stack.size())
      bad_argument("dims", "has " + std::to_string(dims->size()) + " entries for " + std::to_string(stack.size()) +
                               " stack sizes: one dimension per stack axis");
    std::vector<StackAxis> axes;
    for (std::size_t k = 0; k < stack.size(); ++k)
      axes.push_back({stack[k], 0, dims ? std::optional<std::size_t>((*dims)[k]) : std::nullopt});
    const std::string templates[] = {name};
    Composite c = index_->assemble(templates, axes, 0, {}, 1, leaf);
    c.dtype = parse_dtype(dtype);
    for (auto& part : c.parts) part.dtype = c.dtype;
    if (const Shape want(shape.begin(), shape.end()); c.shape != want)
      bad_argument(leaf, "is " + shape_string(want) + " but its tensors make " + shape_string(c.shape));
    c.validate();
    return c;
  }

  // The planned tensor of a canonical (not stacked) name, in any layout: its fill and logical shape.
  PlannedTensor planned(const std::string& name) const {
    if (auto p = index_->planned(name)) return *std::move(p);
    index_->refuse_unknown(name);
  }

  const ModelSpec& spec() const { return spec_; }
  const BuildOptions& options() const { return opts_; }
  const Recipe& recipe() const { return recipe_; }

 private:
  ModelSpec spec_;
  Recipe recipe_;
  BuildOptions opts_;
  std::optional<Builder> builder_;
  std::optional<TensorIndex> index_;
};

// Moves a built tensor into a Python Array.
nb::object make_array(Tensor&& t, Shape global, Shape offset, Context& ctx) {
  auto* a = new Array{std::move(t), std::move(global), std::move(offset), &ctx};
  if (a->global_shape.empty() && !a->tensor.view.shape.empty()) a->global_shape = a->tensor.view.shape;
  if (a->offset.empty()) a->offset = Shape(a->global_shape.size(), 0);
  return nb::cast(a, nb::rv_policy::take_ownership);
}

// A Python progress callback f(done_bytes, total_bytes) of a build (layerinit.build's `progress`):
// parts[k] is the bytes of the k-th part the build fills, in its order, so each after_part call adds
// the next. Called on the building thread, which takes the GIL for it; what f raises stops the build.
struct BuildProgress {
  nb::object fn;  // None: no reports
  std::vector<std::uint64_t> parts;
  std::size_t next = 0;
  std::uint64_t done = 0, total = 0;

  void start() {
    for (std::uint64_t b : parts) total += b;
    if (!fn.is_none()) fn(0, total);  // the GIL held: before the build releases it
  }
  void after_part() {
    if (fn.is_none()) return;
    if (next < parts.size()) done += parts[next++];
    fn(done, total);
  }
};

nb::dict build(const Plan& plan, const std::string& device, const std::optional<std::map<std::string, std::uint64_t>>& mesh,
               std::optional<std::uint64_t> rank, int threads, nb::object progress) {
  Context& ctx = context_for(device);
  std::unique_ptr<backend> own;  // a host backend with a thread count of its own, on the same tracker
  backend* be = ctx.be.get();
  if (threads > 0 && ctx.device_type == kDLCPU) {
    own = make_host_backend(threads);
    be = own.get();
  }
  // Ctrl-C between parts: the build (GIL released) takes the GIL back after each part to let Python
  // run its signal handlers; KeyboardInterrupt unwinds the build, and what it made is freed.
  BuildOptions opts = plan.options();
  BuildProgress report{std::move(progress), {}, 0, 0, 0};
  opts.after_part = [&report] {
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    report.after_part();
  };
  const Builder builder(plan.spec(), plan.recipe(), opts, *be, *ctx.tracker);
  // The CLI's memory preflight, before anything is allocated (MemoryError naming both numbers).
  const std::uint64_t records = record_bytes(plan.spec(), opts.layout, false);
  nb::dict out;
  if (mesh || rank) {
    std::vector<std::pair<std::string, std::uint64_t>> named;
    if (mesh) named.assign(mesh->begin(), mesh->end());
    // The mesh's own errors name the argument; the rank's (checked second) name the rank.
    const ParallelDegrees degrees = [&] {
      try {
        return ParallelPlan::checked(plan.spec(), parallel_degrees(named), std::nullopt, "").degrees();
      } catch (const std::invalid_argument& e) {
        bad_argument("mesh", std::string(": ") + e.what());
      }
    }();
    const ParallelPlan pp = ParallelPlan::checked(plan.spec(), degrees, rank, "");
    if (!rank)
      bad_argument("rank", "is needed: build on mesh " + pp.describe() + " needs rank=R, the rank to build (0-" +
                               std::to_string(pp.ranks() - 1) + ")");
    const RankPlan rp(builder, pp, *rank);
    check_memory(*be, {"this rank's pieces", plan_rank(rp, TrainingSetup::mixed).weight_bytes, records});
    if (!report.fn.is_none()) {
      // build_rank's walk: a part per step, but none for a stage's stacked layers holding nothing of the rank's.
      rp.walk({.whole_ends = true}, [&](const RankStep& s) {
        if (s.stacked && s.shards.empty()) return;
        std::uint64_t b = 0;
        for (const ShardTensor& t : s.shards) b += t.bytes();
        report.parts.push_back(b);
      });
    }
    report.start();
    RankModel m;
    {
      nb::gil_scoped_release release;
      m = build_rank(rp);  // written when it returns
    }
    for (auto& lt : m.tensors) {
      const std::string name = lt.tensor.view.name;
      out[name.c_str()] = make_array(std::move(lt.tensor), lt.global_shape, lt.offset, ctx);
    }
    return out;
  }
  const MemoryPlan need = make_memory_plan(builder);
  check_memory(*be, {"weights", opts.layout == Layout::stacked ? need.peak_stacked : need.peak_per_layer, records});
  if (!report.fn.is_none()) {
    // Builder::build's walk: a part per step (a layer, or the tensors before or after the layers).
    builder.walk({.whole_ends = true, .layer_order = true}, [&](const PlanStep& s) {
      std::uint64_t b = 0;
      for (const PlannedTensor& t : s.tensors) b += t.bytes();
      report.parts.push_back(b);
    });
  }
  report.start();
  Model m;
  {
    nb::gil_scoped_release release;
    m = builder.build();  // written when it returns
  }
  auto put = [&](std::vector<Tensor>& ts) {
    for (auto& t : ts) {
      const std::string name = t.view.name;
      out[name.c_str()] = make_array(std::move(t), {}, {}, ctx);
    }
  };
  put(m.pre);
  for (auto& l : m.layers) put(l.tensors);
  put(m.stacked);
  put(m.post);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Verify: a checkpoint, or tensors Python holds, compared with the init they claim (checkpoint/verify.hpp).

// A tensor Python hands over: name, dtype as safetensors names it ("BF16", "F64"), shape, element size.
using PyStored = std::tuple<std::string, std::string, std::vector<std::uint64_t>, std::uint64_t>;

// The bytes of the tensors Python holds, one tensor at a time: get(k) returns an object of the buffer
// protocol holding tensor k's raw bytes, C-contiguous (layerinit.verify makes it when asked: a CUDA
// tensor is copied to the host only then). verify reads a tensor's chunks in order, then the next
// tensor's, so the last one is kept (its buffer held) until another is asked for.
class PyTensorBytes {
 public:
  // Tensor k is get(index[k]), named names[k], of bytes[k] bytes.
  PyTensorBytes(nb::object get, std::vector<std::size_t> index, std::vector<std::string> names, std::vector<std::uint64_t> bytes)
      : get_(std::move(get)), index_(std::move(index)), names_(std::move(names)), bytes_(std::move(bytes)) {}
  PyTensorBytes(const PyTensorBytes&) = delete;
  PyTensorBytes& operator=(const PyTensorBytes&) = delete;
  ~PyTensorBytes() { release(); }  // the GIL held: made and destroyed where the binding holds it

  // Bytes [first, first + n) of tensor k. Called with the GIL released, from verify's reading thread
  // or its own; takes the GIL to ask Python for a tensor's bytes.
  void read(std::size_t k, std::uint64_t first, std::uint64_t n, void* out) {
    std::lock_guard lock(mu_);
    if (!held_ || k != k_) {
      nb::gil_scoped_acquire gil;
      release();
      nb::object obj = get_(index_[k]);
      if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_ND | PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        bad_argument("source[" + quote(names_[k], 80) + "]", "gave no C-contiguous buffer of its bytes (a " +
                                                                 nb::cast<std::string>(nb::str(obj.type().attr("__name__"))) + ")");
      }
      held_ = true;
      k_ = k;
      if (static_cast<std::uint64_t>(view_.len) != bytes_[k])
        bad_argument("source[" + quote(names_[k], 80) + "]", "gave " + std::to_string(view_.len) + " bytes for a tensor of " +
                                                                 std::to_string(bytes_[k]));
    }
    std::memcpy(out, static_cast<const unsigned char*>(view_.buf) + first, n);
  }

 private:
  void release() {
    if (held_) PyBuffer_Release(&view_);
    held_ = false;
  }
  nb::object get_;
  std::vector<std::size_t> index_;
  std::vector<std::string> names_;
  std::vector<std::uint64_t> bytes_;
  std::mutex mu_;
  Py_buffer view_{};
  bool held_ = false;
  std::size_t k_ = 0;
};

// The options of layerinit.verify: each None comes from the checkpoint's metadata when layerinit wrote
// it, else build's default (claimed_options, as the CLI's verify).
struct VerifyArgs {
  GivenOptions given;
  std::vector<std::uint64_t> seed_guesses;  // seeds "other_seed" tries besides its own (the CLI's --seed-guess)
};

// (report JSON, report text) of a checkpoint whose metadata is `meta` against `model` (else the model
// `meta` names): reader(builder) gives the checkpoint once the model and options are known.
// `shown` names the source in check_same_model's refusal (quoted there), `said` in this one's ("checkpoint
// 'out/'", "the state dict").
// `progress`: None, or f(bytes_done, bytes_total) after each chunk and tensor compared (VerifyOptions::progress).
std::pair<nb::object, std::string> verify_with(const std::map<std::string, std::string>& meta, const std::string& shown,
                                                const std::string& said, const std::function<CheckpointReader&(const Builder&)>& reader,
                                                const std::optional<Spec>& model, const VerifyArgs& a, int threads, bool diagnose,
                                                const nb::object& progress) {
  const std::optional<CheckpointClaim> claim = claim_from_metadata(meta);
  if (!model && !claim)
    bad_argument("model", "is needed: " + said + " has no layerinit metadata (model_spec) to say which model it holds; give the "
                          "model and the options it was made with");
  const ModelSpec spec = model ? model->spec : claim->spec;
  const OptionsText text = claimed_options(claim, a.given);
  const Recipe recipe = checked_recipe(text, OptionNames::python);
  const BuildOptions opts = checked_build_options(text, OptionNames::python, spec);
  spec.validate();
  // The values are made on the host, beside the stored ones: a host backend, on the host tracker.
  std::unique_ptr<backend> be = make_host_backend(threads);
  const Builder builder(spec, recipe, opts, *be, *host_context().tracker);
  VerifyOptions vo;
  // Before any tensor of the model is looked at (a state dict's reader walks them), as the CLI's verify.
  check_memory(*be, verify_memory_need(builder, vo.chunk_bytes));
  CheckpointReader& r = reader(builder);
  check_same_model(spec, builder, r, shown);
  vo.diagnose = diagnose;
  vo.seeds = a.seed_guesses;
  // Ctrl-C between chunks: KeyboardInterrupt, as build's; then the caller's progress, whose exception
  // stops the verify the same way.
  vo.progress = [&progress](const VerifyProgress& p) {
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    if (!progress.is_none()) progress(p.bytes_done, p.bytes_total);
  };
  VerifyReport report;
  {
    nb::gil_scoped_release release;
    report = verify_checkpoint(builder, r, vo);
  }
  return {python::python_of(verify_report_document(report)), verify_report_text(report)};
}

// Tensors Python holds; `aliases` name those that are another entry's memory (a tied parameter's
// second name in a state_dict): each the model does not have is left out, as save_pretrained and
// safetensors leave a tie's second name out of the file.
std::pair<nb::object, std::string> verify_tensors(const std::vector<PyStored>& tensors, nb::object get,
                                                   const std::vector<std::string>& aliases, const std::optional<Spec>& model,
                                                   const VerifyArgs& a, int threads, bool diagnose, const nb::object& progress) {
  std::unique_ptr<CheckpointReader> r;
  std::optional<PyTensorBytes> source;
  auto reader = [&](const Builder& b) -> CheckpointReader& {
    std::set<std::string, std::less<>> expected, alias(aliases.begin(), aliases.end());
    for_each_dataset(b, [&](DatasetSpec d, Part::Kind, std::optional<std::uint64_t>) { expected.insert(d.name); });
    std::vector<StoredTensor> stored;
    std::vector<std::string> names;
    std::vector<std::uint64_t> bytes, esizes;
    for (const auto& [name, dtype, shape, esize] : tensors) {
      if (alias.count(name) && !expected.count(name)) continue;
      StoredTensor& s = stored.emplace_back();
      s.name = name;
      s.shape = Shape(shape.begin(), shape.end());
      s.dtype_text = dtype;
      s.dtype = dtype_from_safetensors_name(dtype);
      names.push_back(name);
      bytes.push_back(numel(s.shape) * esize);
      esizes.push_back(esize);
    }
    // get(k) is asked by the index in `tensors`: keep each kept tensor's.
    std::vector<std::size_t> index;
    for (std::size_t k = 0; k < tensors.size(); ++k)
      if (!alias.count(std::get<0>(tensors[k])) || expected.count(std::get<0>(tensors[k]))) index.push_back(k);
    source.emplace(get, std::move(index), std::move(names), std::move(bytes));
    r = callback_reader("state dict", std::move(stored), {},
                        [&source, esizes = std::move(esizes)](std::size_t k, std::uint64_t first, std::uint64_t n, void* out) {
                          source->read(k, first * esizes[k], n * esizes[k], out);
                        });
    return *r;
  };
  return verify_with({}, "the state dict", "the state dict", reader, model, a, threads, diagnose, progress);
}

// A checkpoint on disk (checkpoint/reader.hpp: safetensors, HDF5, emit --rank files).
std::pair<nb::object, std::string> verify_path(const std::string& path, const std::optional<Spec>& model, const VerifyArgs& a,
                                                int threads, bool diagnose, const nb::object& progress) {
  const std::unique_ptr<CheckpointReader> r = open_checkpoint_reader(path);
  return verify_with(r->metadata(), path, "checkpoint " + quote(path, 200), [&](const Builder&) -> CheckpointReader& { return *r; },
                     model, a, threads, diagnose, progress);
}

nb::dict stats_dict(const MemoryStats& s) {
  nb::dict d;
  d["current_bytes"] = s.current_bytes;
  d["peak_bytes"] = s.peak_bytes;
  d["total_bytes"] = s.total_bytes;
  d["current_count"] = s.current_count;
  d["peak_count"] = s.peak_count;
  d["total_count"] = s.total_count;
  return d;
}

std::string dtype_of_array(const Array& a) { return std::string(dtype_name(a.tensor.view.dtype)); }

// ---------------------------------------------------------------------------------------------
// Errors: each C++ type has its Python type, carrying what the C++ object carries, so Python code
// reads attributes instead of editing messages: one arm per kind of failure. The types below are
// made once and live as long as the process.

struct ErrorTypes {
  PyObject* bad_input = nullptr;      // bad_input: ValueError with argument, value, problem
  PyObject* spec = nullptr;           // spec_error: BadInputError with source, reason too
  PyObject* out_of_memory = nullptr;  // out_of_memory: MemoryError with requested, in_use
  PyObject* refused = nullptr;        // memory_refused: MemoryError with needed, available
  PyObject* cuda = nullptr;           // cuda_error: RuntimeError with call
};
ErrorTypes error_types;

PyObject* add_error_type(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  PyObject* type = PyErr_NewExceptionWithDoc(("layerinit." + std::string(name)).c_str(), doc, base, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

void raise_typed(PyObject* type, const char* what, std::initializer_list<std::pair<const char*, nb::object>> attrs) {
  nb::object e = nb::handle(type)(nb::str(what));
  for (const auto& [name, value] : attrs) nb::setattr(e, name, value);
  PyErr_SetObject(type, e.ptr());
}

void translate_errors(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const bad_input& e) {
    const nb::str argument(e.argument().c_str()), value(e.value().c_str()), problem(e.problem().c_str());
    if (dynamic_cast<const spec_error*>(&e))  // its source and reason are its argument and problem
      raise_typed(error_types.spec, e.what(), {{"argument", argument}, {"value", value}, {"problem", problem},
                                               {"source", argument}, {"reason", problem}});
    else
      raise_typed(error_types.bad_input, e.what(), {{"argument", argument}, {"value", value}, {"problem", problem}});
  } catch (const out_of_memory& e) {
    raise_typed(error_types.out_of_memory, e.what(), {{"requested", nb::int_(e.requested())}, {"in_use", nb::int_(e.in_use())}});
  } catch (const memory_refused& e) {
    raise_typed(error_types.refused, e.what(), {{"needed", nb::int_(e.needed())}, {"available", nb::int_(e.available())}});
  } catch (const cuda_error& e) {
    raise_typed(error_types.cuda, e.what(), {{"call", nb::str(e.call().c_str())}});
  } catch (const checkpoint_refused& e) {
    // A path that is not a checkpoint, or one broken or not of the model (verify): bad input.
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const checkpoint_error& e) {
    PyErr_SetString(PyExc_OSError, e.what());  // reading a checkpoint failed
  } catch (const std::out_of_range& e) {
    // The library's out-of-range and overflow errors are bad input too (a part index, a shape of
    // 2^80 elements): ValueError as every other, not nanobind's IndexError and OverflowError.
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::overflow_error& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  }
}

// The error types (see translate_errors above).
void define_errors(nb::module_& m) {
  using namespace layerinit;
  error_types.bad_input = add_error_type(m, "BadInputError", PyExc_ValueError,
                                         "Bad input the library refused: argument (what was given), value (as the "
                                         "message shows it; '' when none) and problem, apart.");
  error_types.spec = add_error_type(m, "SpecError", error_types.bad_input,
                                    "A malformed or invalid spec, config.json or composite: source ('spec', "
                                    "'config.json' or 'composite') and reason (the message without the source) apart.");
  error_types.out_of_memory = add_error_type(m, "OutOfMemoryError", PyExc_MemoryError,
                                             "An allocation could not be satisfied: requested and in_use, in bytes.");
  error_types.refused = add_error_type(m, "MemoryRefusedError", PyExc_MemoryError,
                                       "A build refused before anything is allocated: needed and available, in bytes.");
  error_types.cuda = add_error_type(m, "CudaError", PyExc_RuntimeError, "A CUDA call failed: call, the call's text.");
  nb::register_exception_translator(&translate_errors);
}

// Devices, and the names of presets and recipes.
void define_devices(nb::module_& m) {
  using namespace layerinit;
  m.def("cuda_available", [] { const CudaProbe p = cuda_probe(); return std::make_pair(p.usable, p.usable ? p.device_name : p.why); },
        "(usable, device name or why not)");
  m.def("cuda_device_count", &cuda_device_count, "The CUDA devices this process sees (0 when CUDA is unusable).");
  m.def("_simulated_device_events", [] {
    nb::list out;
    for (const SimulatedDeviceEvent& e : take_simulated_device_events()) {
      static constexpr const char* names[] = {"reserve", "allocate", "fill", "copy_to_host", "synchronize"};
      const char* what = names[static_cast<int>(e.what)];
      out.append(nb::make_tuple(e.device, what, e.bytes));
    }
    return out;
  }, "[(device, 'reserve' | 'allocate' | 'fill' | 'copy_to_host' | 'synchronize', bytes)] recorded on a simulated node since the last call "
     "(LAYERINIT_TEST_SIMULATED_CUDA_DEVICES; backends/backend.hpp), in order; clears the record.");
  m.def("preset_names", &preset_names);
  m.def("recipe_names", &recipe_names);
}

// Fills, specs, descriptions and names.
void define_specs(nb::module_& m) {
  using namespace layerinit;
  nb::class_<FillSpec>(m, "Fill", "A fill as the CLI writes it: normal(0, 0.02), trunc_normal(0, 0.02, -2, 2), ...")
      .def_static("parse", [](nb::handle text, const std::string& argument) {
        const std::string t = text_arg(text, "Fill.parse: text (a fill like 'normal(0, 0.02)')");
        try {
          FillSpec f = parse_fill(t);
          validate_fill(f);
          return f;
        } catch (const bad_input& e) {  // the caller's name for the text: "rules['*.w']['fill'] 'x' cannot be parsed"
          if (argument == e.argument() || std::string_view(e.what()).substr(0, e.argument().size()) != e.argument()) throw;
          throw bad_input(argument, e.value(), e.problem(), argument + std::string(e.what()).substr(e.argument().size()));
        }
      }, "text"_a.none(), "argument"_a = "fill", "Parses the CLI's grammar; ValueError naming `argument` and the problem.")
      .def_prop_ro("kind", [](const FillSpec& f) { return std::string(fill_kind_name(f.kind)); })
      .def("__repr__", [](const FillSpec& f) { return "Fill(" + f.describe() + ")"; })
      .def("__str__", &FillSpec::describe)
      .def_prop_ro("text", &FillSpec::text, "Exactly, in parse()'s grammar (shortest round-trip decimals): Fill.parse(f.text) == f.")
      // Any other object compares unequal (`fill in ("a", "b")` asks), as Python's own types do.
      .def("__eq__", [](const FillSpec& a, nb::handle b) { return nb::isinstance<FillSpec>(b) && a == nb::cast<const FillSpec&>(b); });

  nb::class_<Spec>(m, "Spec", "A model spec: a preset or a JSON spec (docs/spec.md).")
      .def_static("preset", [](const std::string& name) { return Spec{make_preset(name)}; }, "name"_a)
      .def_static("from_json", [](nb::handle v) {
        return Spec{nb::isinstance<nb::str>(v) ? spec_from_json(text_arg(v, "model")) : spec_from_document(python::json_of(v, "model"))};
      }, "model"_a, "A JSON spec: its text, or the dict itself (no text between).")
      .def_static("from_json_file", [](const std::string& path) { return Spec{load_spec_file(path)}; }, "path"_a,
                  "The spec file at `path`, read as the CLI's --spec reads it (a regular file, at most 16 MiB).")
      .def_static("from_hf_config", [](nb::handle v, const std::string& name) {
        // A dict's config.json (the spec keeps it to write) is as transformers writes one: keys sorted, indent 2.
        return Spec{spec_from_hf_config(nb::isinstance<nb::str>(v) ? text_arg(v, "config")
                                                                   : python::json_of(v, "config").dump(2) + "\n", name)};
      }, "config"_a, "name"_a = "", "A Hugging Face config.json's spec (its text, or its dict); ValueError naming the field.")
      .def_static("from_hf_config_path", [](const std::string& path) { return Spec{load_hf_config(path)}; }, "path"_a,
                  "The spec of the config.json at `path`, or in the directory `path`.")
      .def("to_json", [](const Spec& s) { return spec_to_json(s.spec); })
      .def("to_dict", [](const Spec& s) { return python::python_of(spec_document(s.spec)); },
           "The JSON spec as a dict (Spec.from_json(s.to_dict()) == s), made without JSON text.")
      .def("_unmatched", [](const Spec& s, const std::vector<std::string>& patterns) {
        std::vector<std::string> out;
        for (const auto& p : patterns)
          if (!matches_some_tensor(s.spec, p)) out.push_back(p);
        return out;
      }, "patterns"_a, "The globs that match no tensor name of this spec (init/options.hpp matches_some_tensor).")
      .def("_with_inits", [](const Spec& s, const std::map<std::string, std::pair<FillSpec, std::vector<RegionTuple>>>& inits) {
        std::map<std::string, TensorInit, std::less<>> in;
        for (const auto& [name, init] : inits) {
          TensorInit t{init.first, {}};
          for (const auto& [off, shape, fill] : init.second) t.regions.push_back({Shape(off.begin(), off.end()), Shape(shape.begin(), shape.end()), fill});
          in.emplace(name, std::move(t));
        }
        return Spec{spec_with_inits(s.spec, in)};
      }, "inits"_a, "This spec with `inits` (canonical name -> (Fill, [(offset, shape, Fill)])) as the named tensors' "
                    "init and regions (init/recorded.hpp spec_with_inits: a block whose layers differ is listed layer by layer).")
      .def_prop_ro("name", [](const Spec& s) { return s.spec.name; })
      .def_prop_ro("family", [](const Spec& s) { return s.spec.family; })
      .def_prop_ro("num_layers", [](const Spec& s) { return s.spec.num_layers; })
      .def_prop_ro("parameter_count", [](const Spec& s) { return s.spec.parameter_count(); })
      .def_prop_ro("buffer_count", [](const Spec& s) { return s.spec.buffer_count(); })
      .def_prop_ro("tie_word_embeddings", [](const Spec& s) { return s.spec.hyper.tie_word_embeddings; });
}

// Model descriptions, recorded inits and the names and rules the adapters ask about.
void define_descriptions(nb::module_& m) {
  using namespace layerinit;
  nb::class_<DescribedParameter>(m, "DescribedParameter", "What describe decided for one parameter (init/describe.hpp).")
      .def_ro("name", &DescribedParameter::name, "The parameter's own name.")
      .def_ro("tensor", &DescribedParameter::tensor, "Its canonical tensor's (the group's first name for a tied one).")
      .def_prop_ro("role", [](const DescribedParameter& p) { return std::string(role_name(p.role)); })
      .def_ro("role_known", &DescribedParameter::role_known, "False: a linear map whose names do not tell its role.")
      .def_ro("layer", &DescribedParameter::layer, "Its layer in the spec's layers, or None.")
      .def_prop_ro("logical", [](const DescribedParameter& p) { return as_vector(p.logical); }, "[out, in] for a map weight.")
      .def_ro("fan_in", &DescribedParameter::fan_in)
      .def_ro("fan_out", &DescribedParameter::fan_out)
      .def_ro("transposable", &DescribedParameter::transposable)
      .def_ro("stored_in_out", &DescribedParameter::stored_in_out, "A 2-D map weight stored [in, out].");

  m.def("describe", [](nb::handle description, const std::optional<std::string>& recipe, const TextPairs& overrides) {
    std::optional<Recipe> r;
    if (recipe) {
      OptionsText options;
      options.recipe = *recipe;
      options.init_overrides = overrides;
      r = checked_recipe(options, OptionNames::python);
    }
    DescribedModel dm = describe(description_from_document(python::json_of(description, "description")), r ? &*r : nullptr);
    nb::list params;
    for (auto& p : dm.parameters) params.append(nb::cast(std::move(p)));
    return nb::make_tuple(Spec{std::move(dm.spec)}, params);
  }, "description"_a, "recipe"_a.none() = nb::none(), "overrides"_a = TextPairs{},
  "(Spec, [what each parameter became]) of a model description (a dict of the JSON form, init/describe.hpp); with `recipe`, "
  "ValueError listing the parameters whose fill it cannot tell.");

  m.def("replay_init", [](nb::handle recording) {
    nb::list out;
    for (const ReplayedTensor& t : replay_init(recorded_init_from_document(python::json_of(recording, "recording")))) {
      nb::dict e;
      e["fill"] = t.fill ? nb::cast(*t.fill) : nb::none();
      nb::list regions;
      for (const FillRegion& r : t.regions) regions.append(nb::make_tuple(as_vector(r.offset), as_vector(r.shape), r.fill));
      e["regions"] = regions;
      e["copy_of"] = t.copy_of ? nb::cast(*t.copy_of) : nb::none();
      e["data"] = t.data ? nb::cast(*t.data) : nb::none();
      e["refusal"] = t.refusal;
      out.append(e);
    }
    return out;
  }, "recording"_a, "What each tensor of a recorded init (a dict of its JSON form, init/recorded.hpp) holds at the end: [{fill (a Fill or "
               "None), regions [(offset, shape, Fill)], copy_of (a tensor index or None), data (a data index or None), refusal "
               "(why no fill: '' when one does)}].");

  m.def("role_names", &role_names, "Every tensor role's name (init/spec.hpp), as specs and rules name them.");
  m.def("role_or_fill", [](const std::string& text, const std::string& argument) -> nb::object {
    auto v = parse_role_or_fill(text, argument);
    if (const auto* r = std::get_if<TensorRole>(&v)) return nb::str(std::string(role_name(*r)).c_str());
    return nb::cast(std::get<FillSpec>(v));
  }, "text"_a, "argument"_a, "A rule's text as the role it names (a str) or the Fill it is; ValueError naming `argument`.");

  m.def("hf_model_types", &hf_model_types, "The Hugging Face model_types spec_from_hf_config reads (init/hf_spec.hpp).");
  m.def("hf_module_names", [](const std::string& model_type) { return hf_module_names(model_type); }, "model_type"_a,
        "[(transformers module name, tensor name)] where a family's module names its parameter otherwise than its "
        "checkpoints (GPT-NeoX's lm_head, embed_out).");

  m.def("torchtitan_family", [](const std::string& package, bool moe) -> std::optional<std::tuple<std::string, bool>> {
    if (auto f = torchtitan_family(package, moe)) return std::tuple(f->model_type, f->rope_interleaved);
    return std::nullopt;
  }, "package"_a, "moe"_a, "(model_type, rope_interleaved) of the family torchtitan's model package loads "
     "(init/hf_spec.hpp), or None.");
  m.def("torchtitan_spec", [](nb::handle description, const std::string& package, const std::string& adapter,
                              const std::vector<std::pair<std::string, std::string>>& to_hf, bool rope_interleaved,
                              std::uint64_t heads, std::uint64_t kv_heads, std::uint64_t width,
                              const std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t>>& fused_qkv,
                              const std::vector<DescribedParameter>& parameters,
                              const std::vector<std::pair<std::string, Shape>>& buffers) {
    TorchtitanModel t{package, adapter, to_hf, rope_interleaved, heads, kv_heads, width, {}, parameters, buffers};
    for (const auto& [module, head_dim, heads_per_kv] : fused_qkv) t.fused_qkv.push_back({module, head_dim, heads_per_kv});
    ModelDescription d = description_from_document(python::json_of(description, "description"));
    nb::list parts;
    for (TorchtitanPart& p : torchtitan_parameters(t, d))
      parts.append(nb::make_tuple(p.name, p.templates, p.whole, p.rows, p.stack, p.groups));
    return nb::make_tuple(Spec{describe(d).spec}, parts);
  }, "description"_a, "package"_a, "adapter"_a, "to_hf"_a, "rope_interleaved"_a, "heads"_a, "kv_heads"_a, "width"_a,
  "fused_qkv"_a, "parameters"_a, "buffers"_a,
  "(Spec, [(parameter, templates, whole, rows, stack, groups)]) of a torchtitan model in the Hugging Face names its "
  "adapter loads (init/describe.hpp torchtitan_parameters); `description` gives the spec's name, family and hyper, "
  "fused_qkv is [(FusedQKVLinear's name, head_dim, heads_per_kv)], buffers [(name, shape)].");
  m.def("torchtitan_packages", &torchtitan_packages, "The torchtitan model packages the family records name.");

  m.def("name_matches", [](const std::string& pattern, const std::string& name) { return name_matches(pattern, name); },
        "pattern"_a, "name"_a, "Whether the glob matches the name as --init-override matches tensor names (core/text.hpp).");

  m.def("framework_fill", [](const std::string& name, const std::string& naming) {
    return framework_fill(name, parse_naming(naming));
  }, "name"_a, "naming"_a, "The Fill a framework always gives a leaf of this name (init/describe.hpp), or None.");
}

// What the JAX adapter hands over of a model tree: its leaves' stacked axes, and its rules.
void define_jax_trees(nb::module_& m) {
  using namespace layerinit;
  using LeafTuple = std::tuple<std::vector<std::string>, std::vector<std::string>, Shape, std::optional<Shape>, std::string,
                               std::vector<std::tuple<std::size_t, std::uint64_t, std::uint64_t>>, bool>;
  m.def("leaf_slices", [](const std::vector<LeafTuple>& given, const std::optional<std::vector<std::string>>& stacked,
                          const std::string& naming) {
    std::vector<FrameworkLeaf> leaves;
    for (const auto& [parts, seps, shape, expected, owner, recorded, constant] : given) {
      FrameworkLeaf lf{parts, seps, shape, expected, owner, {}, constant};
      for (const auto& [dim, size, group] : recorded) lf.recorded.push_back({dim, size, group});
      leaves.push_back(std::move(lf));
    }
    nb::list out;
    for (LeafSlices& s : leaf_slices(leaves, stacked, parse_naming(naming)))
      out.append(nb::make_tuple(s.lead, s.dims, as_vector(s.stored), s.names, s.name_template));
    return out;
  }, "leaves"_a, "stacked"_a.none(), "naming"_a,
  "Each leaf's (stacked axes [(path prefix length, size)], their dims, a slice's shape, slice names, name template) "
  "(init/describe.hpp leaf_slices); a leaf is (parts, seps, shape, expected shape or None, owner, recorded axes "
  "[(dim, size, group)], recorded constant).");

  using RuleTuple = std::tuple<std::string, std::optional<std::string>, std::optional<FillSpec>, std::optional<std::uint64_t>,
                               std::optional<std::uint64_t>, std::optional<std::string>>;
  using RuledTuple = std::tuple<std::string, Shape, Shape, std::vector<std::string>, std::optional<std::string>, std::string>;
  m.def("apply_rules", [](const std::vector<RuleTuple>& given, const std::vector<RuledTuple>& ruled) {
    auto storage_of = [](const std::optional<std::string>& s) {  // the orientation option's words
      if (!s) return WeightStorage::unknown;
      return parse_orientation(*s) == Orientation::in_out ? WeightStorage::in_out : WeightStorage::out_in;
    };
    std::vector<LeafRule> rules;
    for (const auto& [pattern, role, fill, fan_in, fan_out, storage] : given)
      rules.push_back({pattern, role ? std::optional(parse_role(*role)) : std::nullopt, fill, fan_in, fan_out, storage_of(storage)});
    std::vector<RuledLeaf> leaves;
    for (const auto& [name, shape, slice, slices, storage, integer] : ruled)
      leaves.push_back({name, shape, slice, slices, storage_of(storage), integer});
    RulesOutcome o = apply_rules(rules, leaves);
    nb::list out;
    for (const RuledLeafOutcome& lf : o.leaves) {
      nb::list slices;
      for (const auto& s : lf.slices)
        slices.append(nb::make_tuple(s.role ? std::optional(std::string(role_name(*s.role))) : std::nullopt, s.fill, s.fan_in,
                                     s.fan_out));
      std::optional<std::string> storage;
      if (lf.storage != WeightStorage::unknown)
        storage = orientation_name(lf.storage == WeightStorage::in_out ? Orientation::in_out : Orientation::out_in);
      out.append(nb::make_tuple(storage, slices, lf.constant));
    }
    return nb::make_tuple(out, o.unused);
  }, "rules"_a, "leaves"_a,
  "(per leaf (storage or None, per slice (role, Fill, fan_in, fan_out), integer constant), unused patterns) of the JAX "
  "adapter's rules (init/describe.hpp apply_rules); a rule is (pattern, role, Fill, fan_in, fan_out, orientation), a leaf "
  "(name, shape, slice shape, slice names, its module's orientation, integer dtype or '').");
}

// Plans, and fills into arrays.
void define_plans(nb::module_& m) {
  using namespace layerinit;
  nb::class_<Plan>(m, "Plan", "What a build makes: every tensor's name, shape, dtype and fill, without memory.")
      .def(nb::init<const Spec&, const std::string&, const TextPairs&, const std::optional<std::string>&, const TextPairs&,
                    std::uint64_t, const std::string&, const std::string&, const std::string&>(),
           "spec"_a, "recipe"_a, "overrides"_a, "dtype"_a.none(), "dtype_overrides"_a, "seed"_a, "layout"_a, "orientation"_a,
           "experts"_a)
      .def("tensors", &Plan::tensors, "[(name, memory shape, dtype, kind, layer)] in file order")
      .def("record", [](const Plan& p) {
        if (const std::uint64_t n = listed_tensor_count(p.builder().spec()); n > max_listed_tensors)
          bad_argument("plan of", p.builder().spec().name, ": " + std::to_string(n) + " tensors are too many to record (at most " +
                                                             std::to_string(max_listed_tensors) + ")");
        return plan_record(p.builder());
      }, "The plan's record (plan/plan.hpp plan_record): a line per tensor, the same bytes from every face.")
      .def("_fill_of", [](const Plan& p, const std::string& name) { return p.planned(name).fill; }, "name"_a)
      .def("_logical_shape", [](const Plan& p, const std::string& name) { return as_vector(p.planned(name).shape); }, "name"_a)
      .def("_fill", [](const Plan& p, const std::string& name, nb::handle array, const std::vector<std::uint64_t>& offset,
                      bool allow_strided, const std::optional<std::string>& bits_as) {
        const Imported r = import_region(array, allow_strided, bits_as ? std::optional<DType>(parse_dtype(*bits_as)) : std::nullopt);
        std::vector<FillJob> jobs;
        p.index().fill_jobs(name, Box{offset_arg(offset, r), r.shape}, r.region, r.dtype, jobs);
        run_jobs(jobs, *r.ctx);
      }, "name"_a, "array"_a, "offset"_a, "allow_strided"_a = false, "bits_as"_a = nb::none(),
      "Fills `array`, the piece at `offset` of tensor `name`, in place with the build's values.")
      .def("_composite", [](const Plan& p, const std::string& name) { return p.index().composite(name); }, "name"_a,
           "A listed name (a canonical tensor, or a stacked buffer) as a Composite.")
      .def("_assemble", [](const Plan& p, const std::vector<std::string>& templates,
                          const std::vector<std::pair<std::uint64_t, std::uint64_t>>& stack, std::size_t dim,
                          const std::vector<std::optional<std::string>>& rows, std::uint64_t groups) {
        std::vector<StackAxis> axes;
        for (const auto& [size, first] : stack) axes.push_back({size, first});
        std::vector<RowPermutation> perms;
        for (const auto& r : rows) perms.push_back(r ? parse_row_permutation(*r) : RowPermutation{});
        return p.index().assemble(templates, axes, dim, perms, groups);
      }, "templates"_a, "stack"_a, "dim"_a, "rows"_a, "groups"_a,
      "Tensors named by templates over stack axes [(size, first)], concatenated along `dim` in `groups`, as a Composite.")
      .def("_leaf", &Plan::leaf, "name"_a, "stack"_a, "shape"_a, "dtype"_a, "dims"_a = nb::none(), "leaf"_a = "",
           "A JAX leaf of the tensors named by a template over stack axes, in the leaf's dtype, as a Composite: stack "
           "axis k at dimension dims[k] of the leaf (None: the leading dimensions); errors name the leaf by `leaf`.")
      .def("_fused_experts", [](const Plan& p, const std::string& name, const std::vector<std::uint64_t>& shape) {
        return p.index().hf_fused_experts(name, Shape(shape.begin(), shape.end()));
      }, "name"_a, "shape"_a, "transformers 5's fused experts parameter as a Composite, or None for other names.")
      .def("build", &build, "device"_a, "mesh"_a.none(), "rank"_a.none(), "threads"_a = 0, "progress"_a = nb::none(),
           "The plan's tensors as Arrays; progress(done_bytes, total_bytes) before the first part and after each.");

  m.def("fill", [](nb::handle array, const std::string& name, const FillSpec& fill, std::uint64_t seed,
                   const std::optional<std::vector<std::uint64_t>>& global_shape,
                   const std::optional<std::vector<std::uint64_t>>& offset, bool transposed,
                   const std::optional<std::string>& dtype, const std::optional<std::string>& bits_as) {
    const Imported r = import_region(array, false, bits_as ? std::optional<DType>(parse_dtype(*bits_as)) : std::nullopt);
    if (dtype && parse_dtype(*dtype) != r.dtype)
      bad_argument("dtype", *dtype, "does not match the array's " + std::string(dtype_name(r.dtype)));
    PlannedTensor p;
    p.name = name;
    p.dtype = r.dtype;
    p.fill = fill;
    p.memory_shape = global_shape ? Shape(global_shape->begin(), global_shape->end()) : r.shape;
    const Shape off = offset ? Shape(offset->begin(), offset->end()) : Shape(r.shape.size(), 0);
    if (p.memory_shape.size() != r.shape.size() || off.size() != r.shape.size())
      bad_argument("array", "of shape " + shape_text(r.shape) + ": global_shape " + shape_text(p.memory_shape) + " and offset " +
                                shape_text(off) + " need one entry per dimension");
    p.transposed = transposed;
    p.shape = p.memory_shape;
    if (transposed) {
      if (p.shape.size() != 2) bad_argument("transposed", "=True needs a 2-D tensor");
      std::swap(p.shape[0], p.shape[1]);
    }
    validate_fill(fill);
    std::vector<FillJob> jobs;
    region_fill_jobs(p, Box{off, r.shape}, r.region, seed, jobs);
    run_jobs(jobs, *r.ctx);
  }, "array"_a, "name"_a, "fill"_a, "seed"_a, "global_shape"_a.none(), "offset"_a.none(), "transposed"_a,
     "dtype"_a.none(), "bits_as"_a = nb::none());

  m.def("fill_composite", [](nb::handle array, const Composite& c, std::uint64_t seed, const std::vector<std::uint64_t>& offset,
                             bool allow_strided, const std::optional<std::string>& bits_as) {
    std::vector<FillJob> jobs;
    run_jobs(jobs, composite_jobs(array, c, seed, offset, allow_strided, bits_as, jobs));
  }, "array"_a, "composite"_a, "seed"_a, "offset"_a, "allow_strided"_a = false, "bits_as"_a = nb::none(),
  "Fills `array`, the piece at `offset` of composite `composite`, in place.");

  m.def("fill_composites", [](const std::vector<nb::handle>& arrays, const std::vector<const Composite*>& composites,
                              std::uint64_t seed, const std::vector<std::vector<std::uint64_t>>& offsets, bool allow_strided) {
    if (composites.size() != arrays.size() || offsets.size() != arrays.size())
      bad_argument("arrays, composites and offsets", "are " + std::to_string(arrays.size()) + ", " + std::to_string(composites.size()) +
                                                        " and " + std::to_string(offsets.size()) + ": one each per array");
    // Every array checked and its jobs made before anything is written; then one run per device (the
    // host's over one pool of threads for all the arrays), in the order the devices first appear.
    std::vector<std::pair<Context*, std::vector<FillJob>>> per_device;
    for (std::size_t i = 0; i < arrays.size(); ++i) {
      if (composites[i] == nullptr) bad_argument("composites[" + std::to_string(i) + "]", "is None");
      std::vector<FillJob> jobs;
      Context* ctx = &composite_jobs(arrays[i], *composites[i], seed, offsets[i], allow_strided, std::nullopt, jobs);
      auto it = std::find_if(per_device.begin(), per_device.end(), [ctx](const auto& d) { return d.first == ctx; });
      if (it == per_device.end()) it = per_device.insert(per_device.end(), {ctx, {}});
      it->second.insert(it->second.end(), jobs.begin(), jobs.end());
    }
    for (const auto& [ctx, jobs] : per_device) run_jobs(jobs, *ctx);
  }, "arrays"_a, "composites"_a, "seed"_a, "offsets"_a, "allow_strided"_a = false,
  "Fills each array in place, the piece at offsets[i] of composites[i], all in one call: what fill_composite does for each.");

  m.def("check_megatron_config", [](const std::vector<std::tuple<std::string, std::optional<double>, std::string>>& methods,
                                    bool zero_centered_gamma, const std::vector<DescribedParameter>& described,
                                    const Plan& fills, const std::vector<std::string>& overrides) {
    MegatronConfig c{{}, zero_centered_gamma};
    for (const auto& [field, sigma, shown] : methods) c.methods.push_back({field, sigma, shown});
    check_megatron_config(c, described, [&fills](const std::string& n) { return fills.planned(n).fill; }, overrides);
  }, "methods"_a, "zero_centered_gamma"_a, "described"_a, "fills"_a, "overrides"_a,
  "ValueError (argument recipe) listing the parameters a Megatron-core TransformerConfig draws otherwise than recipe "
  "megatron's `fills` (init/describe.hpp check_megatron_config); methods [(field, σ or None, as the config shows it)].");
}

// Composite parameters and the arrays layerinit allocates.
void define_composites_and_arrays(nb::module_& m) {
  using namespace layerinit;
  nb::class_<Composite>(m, "Composite",
                        "A parameter made of canonical tensors: stacked along axes at any dimensions (leading by default), "
                        "concatenated, each part a box of its tensor, rows optionally permuted (docs/python.md).")
      .def_static("parse", [](nb::handle text) { return composite_from_text(text_arg(text, "Composite.parse: text"));
      }, "text"_a.none(), "The composite of composite_to_text's versioned JSON; ValueError naming the problem.")
      .def_prop_ro("text", &composite_to_text, "Compact, versioned JSON: parse(c.text) == c.")
      .def_prop_ro("parts", [](const Composite& c) { return python::python_of(composite_document(c)["parts"]); },
                   "The parts as the text lists them: name (template), shape, at, fill, and transposed, rows, from, size, "
                   "regions where they are not the default (a new list each time).")
      .def_prop_ro("shape", [](const Composite& c) { return nb::tuple(nb::cast(as_vector(c.shape))); })
      .def_prop_ro("dtype", [](const Composite& c) { return std::string(dtype_name(c.dtype)); })
      .def_prop_ro("stack", [](const Composite& c) {
        nb::list out;
        for (const StackAxis& a : c.stack) out.append(nb::make_tuple(a.size, a.first));
        return out;
      }, "[(size, first)] of the stack axes")
      .def_prop_ro("stack_dims", [](const Composite& c) {
        std::vector<std::size_t> out;
        for (std::size_t k = 0; k < c.stack.size(); ++k) out.push_back(c.stack_dim(k));
        return out;
      }, "[dimension of shape] where each stack axis sits ([0, 1, ...] in the leading layout)")
      .def("tensor_name", [](const Composite& c, std::size_t part, const std::vector<std::uint64_t>& index) {
        return c.tensor(part, index).name;
      }, "part"_a, "index"_a, "The name of part `part`'s tensor at stack position `index`.")
      .def("tensors", &Composite::tensor_names, "The canonical tensors its parts stand for over the stack, in order, each once.")
      .def_prop_ro("whole", &Composite::whole, "One tensor whole and as stored (one part, no stack, no transposition, "
                                               "permutation or box).")
      .def("__eq__", [](const Composite& a, nb::handle b) { return nb::isinstance<Composite>(b) && a == nb::cast<const Composite&>(b); })
      .def("__repr__", [](const Composite& c) {
        return "layerinit.Composite(" + shape_text(c.shape) + ", " + std::string(dtype_name(c.dtype)) + ", " +
               std::to_string(c.parts.size()) + (c.parts.size() == 1 ? " part" : " parts") +
               (c.stack.empty() ? "" : ", " + std::to_string(c.stack.size()) + " stack axes") + ")";
      });

  nb::class_<Array>(m, "Array",
                    "A tensor built by layerinit: its memory is layerinit's, tracked, and freed when the Array and every "
                    "array made from it through DLPack are gone. torch.from_dlpack, jax.numpy.from_dlpack and "
                    "numpy.from_dlpack (CPU) take it without a copy.")
      .def_prop_ro("name", [](const Array& a) { return a.tensor.view.name; })
      .def_prop_ro("shape", [](const Array& a) { return nb::tuple(nb::cast(as_vector(a.tensor.view.shape))); })
      .def_prop_ro("global_shape", [](const Array& a) { return nb::tuple(nb::cast(as_vector(a.global_shape))); })
      .def_prop_ro("offset", [](const Array& a) { return nb::tuple(nb::cast(as_vector(a.offset))); })
      .def_prop_ro("dtype", &dtype_of_array)
      .def_prop_ro("nbytes", [](const Array& a) { return a.tensor.view.bytes(); })
      .def_prop_ro("data_ptr", [](const Array& a) { return reinterpret_cast<std::uintptr_t>(a.tensor.view.data); })
      .def_prop_ro("device", [](const Array& a) { return a.ctx->name(); })
      .def("__dlpack_device__", [](const Array& a) { return std::make_tuple(a.ctx->device_type, a.ctx->device_id); })
      .def("__dlpack__", [](nb::handle self, nb::kwargs kwargs) {
        const Array& a = nb::cast<const Array&>(self);
        nb::object nd = nb::cast(a.view(self));
        return nd.attr("__dlpack__")(**kwargs);
      }, "DLPack capsule of this array (versioned when the consumer asks max_version >= (1, 0)).")
      .def("_numpy_view", [](nb::handle self) {
        const Array& a = nb::cast<const Array&>(self);
        if (a.ctx->device_type != kDLCPU) bad_argument("__array__", "needs a CPU array: this one is on " + a.ctx->name());
        std::vector<std::size_t> shape(a.tensor.view.shape.begin(), a.tensor.view.shape.end());
        nb::dlpack::dtype t = dl_dtype(a.tensor.view.dtype);
        if (a.tensor.view.dtype == DType::bf16) t = {static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt), 16, 1};
        return nb::ndarray<nb::numpy>(a.tensor.view.data, shape.size(), shape.data(), self, nullptr, t);
      }, "numpy view of the bytes (bf16 as uint16)")
      .def("__repr__", [](const Array& a) {
        std::string s = "layerinit.Array(" + a.tensor.view.name + ", " + shape_text(a.tensor.view.shape) + ", " +
                        std::string(dtype_name(a.tensor.view.dtype));
        if (a.global_shape != a.tensor.view.shape) s += ", piece at " + shape_text(a.offset) + " of " + shape_text(a.global_shape);
        return s + ", " + a.ctx->name() + ")";
      });
}

// Where a framework's local shard sits in its tensor (shard/mesh.hpp), as torch.py's _Place:
// (global shape, [(offset in the local tensor, offset in the tensor, shape)]).
nb::tuple place_tuple(const layerinit::ShardPlace& p) {
  nb::list boxes;
  for (const auto& [local, global] : p.boxes)
    boxes.append(nb::make_tuple(nb::tuple(nb::cast(as_vector(local.offset))), nb::tuple(nb::cast(as_vector(global.offset))),
                                nb::tuple(nb::cast(as_vector(global.shape)))));
  return nb::make_tuple(nb::tuple(nb::cast(as_vector(p.global))), nb::tuple(boxes));
}

void define_shard_places(nb::module_& m) {
  using namespace layerinit;
  m.def("chunked_shard", [](const Shape& local, const std::vector<std::tuple<std::size_t, std::uint64_t, std::uint64_t>>& splits) {
    std::vector<AxisSplit> s;
    for (const auto& [dim, parts, index] : splits) s.push_back({dim, parts, index});
    return place_tuple(chunked_shard(local, s));
  }, "local"_a, "splits"_a, "(global shape, [(local offset, offset, shape)]) of a shard split by [(dim, parts, index)] in turn, "
  "as torch.chunk splits (shard/mesh.hpp chunked_shard).");
  m.def("strided_shard", [](const Shape& local, std::int64_t dim, std::int64_t stride, std::uint64_t rank, std::uint64_t size) {
    return place_tuple(strided_shard(local, dim, stride, rank, size));
  }, "local"_a, "dim"_a, "stride"_a, "rank"_a, "size"_a, "(global shape, [(local offset, offset, shape)]) of a Megatron-core "
  "shard on rank `rank` of `size` split along `dim` with `stride` (shard/mesh.hpp strided_shard).");
}

// Verification and the memory statistics.
void define_verify_and_memory(nb::module_& m) {
  using namespace layerinit;
  m.def("verify_tensors", [](const std::vector<PyStored>& tensors, nb::object get, const std::vector<std::string>& aliases,
                             const std::optional<Spec>& model,
                             const std::optional<std::string>& dtype, std::optional<std::uint64_t> seed,
                             const std::optional<std::string>& recipe, const std::optional<std::string>& layout,
                             const std::optional<std::string>& orientation, const std::optional<std::string>& experts,
                             const std::optional<TextPairs>& overrides, const std::optional<TextPairs>& dtype_overrides,
                             int threads, bool diagnose, const std::vector<std::uint64_t>& seed_guesses, nb::object progress) {
    return verify_tensors(tensors, std::move(get), aliases, model,
                          {{dtype, recipe, layout, orientation, experts, seed, overrides, dtype_overrides}, seed_guesses}, threads, diagnose,
                          progress);
  }, "tensors"_a, "get"_a, "aliases"_a, "model"_a.none(), "dtype"_a.none(), "seed"_a.none(), "recipe"_a.none(), "layout"_a.none(),
  "orientation"_a.none(), "experts"_a.none(), "overrides"_a.none(), "dtype_overrides"_a.none(), "threads"_a = 0,
  "diagnose"_a = true, "seed_guesses"_a = std::vector<std::uint64_t>{}, "progress"_a = nb::none(),
  "(report dict, report text) of tensors [(name, safetensors dtype, shape, element size)] whose bytes get(k) gives "
  "(a C-contiguous buffer), against `model` and the options (None: build's default).");

  m.def("verify_path", [](const std::string& path, const std::optional<Spec>& model, const std::optional<std::string>& dtype,
                          std::optional<std::uint64_t> seed, const std::optional<std::string>& recipe,
                          const std::optional<std::string>& layout, const std::optional<std::string>& orientation,
                          const std::optional<std::string>& experts, const std::optional<TextPairs>& overrides,
                          const std::optional<TextPairs>& dtype_overrides, int threads, bool diagnose,
                          const std::vector<std::uint64_t>& seed_guesses, nb::object progress) {
    return verify_path(path, model, {{dtype, recipe, layout, orientation, experts, seed, overrides, dtype_overrides}, seed_guesses},
                       threads, diagnose, progress);
  }, "path"_a, "model"_a.none(), "dtype"_a.none(), "seed"_a.none(), "recipe"_a.none(), "layout"_a.none(),
  "orientation"_a.none(), "experts"_a.none(), "overrides"_a.none(), "dtype_overrides"_a.none(), "threads"_a = 0,
  "diagnose"_a = true, "seed_guesses"_a = std::vector<std::uint64_t>{}, "progress"_a = nb::none(),
  "(report dict, report text) of the checkpoint at `path` against `model` (None: the one its metadata names) and the "
  "options (None: its metadata's, else build's default).");

  m.def("memory_stats", [](const std::string& device) { return stats_dict(context_for(device).tracker->stats()); },
        "device"_a = "cpu");
  m.def("reset_peak", [](const std::string& device) { context_for(device).tracker->reset_peak(); }, "device"_a = "cpu");
}

}  // namespace
}  // namespace layerinit::python
NB_MODULE(_core, m) {
  using namespace layerinit;
  using namespace layerinit::python;
  m.doc() = "layerinit's C++ core; use the layerinit package's functions (docs/python.md)";
  m.attr("__version__") = LAYERINIT_PYTHON_VERSION;
  m.attr("has_cuda_build") = bool(LAYERINIT_HAS_CUDA);
  m.attr("has_hdf5_build") = bool(LAYERINIT_HAS_HDF5);
#if LAYERINIT_HAS_XLA
  nb::module_ xla = m.def_submodule("xla");
  layerinit::jax::define_xla(xla);
#endif
  define_errors(m);
  define_devices(m);
  define_specs(m);
  define_descriptions(m);
  define_jax_trees(m);
  define_plans(m);
  define_composites_and_arrays(m);
  define_shard_places(m);
  define_verify_and_memory(m);
}
