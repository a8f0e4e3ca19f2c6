// The XLA FFI fill handlers (docs/python.md, "JAX"): each writes one device's piece of a parameter
// straight into the output buffer XLA allocated for it. Registered from Python with
// jax.ffi.register_ffi_target (api_version 1, the typed FFI) through layerinit._core.xla's capsules.
//
// Attributes, the same on every device: `seed` (i64: the u64 seed's bits, since an MLIR integer
// attribute from Python takes at most 2^63 - 1), `param` (the parameter's composite text,
// shard/composite.hpp, parsed once per instance of the program by the instantiate stage: the text is
// the attribute, not a handle into this process, so a program from JAX's persistent compilation cache
// still says what it fills) and `table` (i64[]: per device of this process, its ordinal and its piece's
// offset). The device's ordinal comes from XLA's execution context, so one SPMD program inside
// jax.shard_map serves every device and no operand has to be read back from device memory. Which
// number XLA passes as the ordinal is not documented (a CPU device passes its global id, 2048 and up
// on a second process), so layerinit.jax learns it per device with the `layerinit_ordinal` probe.
// An optional operand is the array being re-initialized, aliased to the output (donation): it is
// overwritten, never read.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xla/ffi/api/ffi.h>

#include <layerinit/backends/backend.hpp>
#include <layerinit/config.hpp>

#include "xla_piece.hpp"

// The fill targets' instantiate stage: parses `param` into the ParamState their calls read.
XLA_FFI_DECLARE_HANDLER_SYMBOL(LayerinitParamHost);
XLA_FFI_DECLARE_HANDLER_SYMBOL(LayerinitFillHost);  // platform "cpu": the host fill, all cores
// platform "cpu": the CUDA handler's path with the kernel's grid simulated on the host
// (kernels/fill_grid.hpp), so the tests run the CUDA handler's logic without a GPU.
XLA_FFI_DECLARE_HANDLER_SYMBOL(LayerinitFillGrid);
XLA_FFI_DECLARE_HANDLER_SYMBOL(LayerinitOrdinalHost);  // the probe: writes the ordinal into an s32[1]
#if LAYERINIT_HAS_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(LayerinitParamCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(LayerinitFillCuda);  // platform "CUDA": enqueued on XLA's stream
XLA_FFI_DECLARE_HANDLER_SYMBOL(LayerinitOrdinalCuda);
#endif

namespace layerinit::jax {

namespace ffi = ::xla::ffi;

// One fill call site's parameter, parsed at instantiation: a registered FFI type (its deleter is
// param_state_info's), one per platform, since each XLA (jaxlib's, a GPU plugin's) numbers its own.
enum class Platform { host, cuda };
template <Platform P>
struct ParamState {
  static ffi::TypeId id;  // XLA sets it when layerinit.jax registers the type
  Composite composite;
};
template <Platform P>
ffi::TypeId ParamState<P>::id = {};
template <Platform P>
inline const ffi::TypeInfo param_state_info = ffi::MakeTypeInfo<ParamState<P>>();

// The instantiate stage: the `param` attribute parsed (an InvalidArgument error for a malformed one).
template <Platform P>
ffi::ErrorOr<std::unique_ptr<ParamState<P>>> instantiate_param(std::int64_t, std::string_view param,
                                                               ffi::Span<const std::int64_t>) {
  try {
    return std::make_unique<ParamState<P>>(ParamState<P>{parse_param(param)});
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(std::string("layerinit: ") + e.what());
  }
}

// Its bindings: every attribute (an FFI binding takes all of a call's attributes or none).
inline auto instantiate_binding() {
  return ffi::Ffi::BindInstantiate()
      .Attr<std::int64_t>("seed")
      .Attr<std::string_view>("param")
      .Attr<ffi::Span<const std::int64_t>>("table");
}

// Fills this call's jobs (xla_piece.hpp's piece_jobs) through backend::fill of `device()`'s backend,
// which returns without waiting where the backend's queue is XLA's stream; a C++ exception becomes
// the error XLA raises in Python (an XlaRuntimeError with the message).
template <Platform P, class Device>
ffi::Error fill_piece(std::int32_t ordinal, const ParamState<P>* param, std::int64_t seed_bits,
                      ffi::Span<const std::int64_t> table, ffi::AnyBuffer out, Device&& device) {
  if (fills_cancelled()) return ffi::Error(ffi::ErrorCode::kCancelled, "layerinit: interrupted");
  try {
    PieceCall c;
    c.param = &param->composite;
    c.seed = static_cast<std::uint64_t>(seed_bits);
    c.table = std::span<const std::int64_t>(table.begin(), table.size());
    c.ordinal = ordinal;
    const auto dims = out.dimensions();
    c.dims = std::span<const std::int64_t>(dims.begin(), dims.size());
    switch (out.element_type()) {
      case ffi::DataType::F32: c.dtype = DType::f32; break;
      case ffi::DataType::F16: c.dtype = DType::f16; break;
      case ffi::DataType::BF16: c.dtype = DType::bf16; break;
      default: return ffi::Error::InvalidArgument("layerinit fills float32, float16 and bfloat16 outputs only");
    }
    c.dst = out.untyped_data();
    const std::vector<FillJob> jobs = piece_jobs(c);
    if (!jobs.empty()) device()->fill(jobs);
    after_fill();
    return ffi::Error::Success();
  } catch (const std::invalid_argument& e) {
    return ffi::Error::InvalidArgument(std::string("layerinit: ") + e.what());
  } catch (const std::exception& e) {  // a CUDA error, memory
    return ffi::Error::Internal(std::string("layerinit: ") + e.what());
  }
}

// The execute stage's bindings after its context (the device): the parameter parsed at instantiation,
// then what XLA passes, by name (`param` again: an FFI binding takes all of a call's attributes or none).
template <Platform P, class Binding>
auto fill_binding(Binding&& b) {
  return std::move(b)
      .template Ctx<ffi::State<ParamState<P>>>()
      .template OptionalArg<ffi::AnyBuffer>()  // the donated array the output aliases; not read
      .template Attr<std::int64_t>("seed")
      .template Attr<std::string_view>("param")
      .template Attr<ffi::Span<const std::int64_t>>("table")
      .template Ret<ffi::AnyBuffer>();
}

}  // namespace layerinit::jax
