# The XLA FFI fill handlers (python/src/xla_*.cpp, docs/python.md "JAX") as a static library, compiled
# against the XLA FFI headers in xla_ffi_include (a jaxlib's jax.ffi.include_dir()). The
# Python package links it into layerinit._core (its submodule xla); the main build compiles it alone when scripts/test passes
# the headers, so the CUDA handler is compiled wherever nvcc is (the package is built host-only on
# machines without a GPU).
add_library(layerinit_xla_handlers STATIC ${CMAKE_CURRENT_LIST_DIR}/src/xla_piece.cpp
                                          ${CMAKE_CURRENT_LIST_DIR}/src/xla_handlers.cpp)
if(LAYERINIT_HAS_CUDA)
  target_sources(layerinit_xla_handlers PRIVATE ${CMAKE_CURRENT_LIST_DIR}/src/xla_handlers_cuda.cpp)
endif()
# SYSTEM: jaxlib's headers are not ours to fix (they warn under -Wreturn-type).
target_include_directories(layerinit_xla_handlers SYSTEM PUBLIC ${xla_ffi_include})
target_include_directories(layerinit_xla_handlers PUBLIC ${PROJECT_BINARY_DIR}/include/all ${CMAKE_CURRENT_LIST_DIR}/src)
get_property(layerinit_modules GLOBAL PROPERTY LAYERINIT_MODULES)
foreach(m IN LISTS layerinit_modules)
  target_link_libraries(layerinit_xla_handlers PUBLIC layerinit_${m})
endforeach()
layerinit_private_flags(layerinit_xla_handlers)
