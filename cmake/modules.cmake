# The library is one folder per layer, each an OBJECT library linked into the one installed
# layerinit::layerinit. Layers, bottom to top (docs/design.md draws the same picture):
#
#   core -> dtypes -> kernels ----> backends -> init -> stacking
#                  \-> memory --/                \-> shard -> plan
#                                                        \-> checkpoint
#
# A layer sees only the headers of
# itself and the layers it names in DEPS: each target gets an include view
# build/include/<folder>/layerinit/ holding symbolic links to exactly those folders, so
# `#include <layerinit/checkpoint/writer.hpp>` from kernels/ fails to compile. LAYERINIT_CHECK_HEADERS
# compiles every public header on its own against its layer's view, which catches an upward include
# in a header that no source of its own layer includes.

set_property(GLOBAL PROPERTY LAYERINIT_MODULES "")

# layerinit_module(<folder> SOURCES ... [CUDA_SOURCES ...] [DEPS <folder> ...] [PRIVATE_HEADERS ...])
function(layerinit_module folder)
  cmake_parse_arguments(M "" "" "SOURCES;CUDA_SOURCES;DEPS;PRIVATE_HEADERS" ${ARGN})
  set(target layerinit_${folder})
  add_library(${target} OBJECT ${M_SOURCES})
  if(LAYERINIT_HAS_CUDA AND M_CUDA_SOURCES)
    target_sources(${target} PRIVATE ${M_CUDA_SOURCES})
  endif()

  # The folders this layer may include: itself and, transitively, its DEPS.
  set(visible ${folder})
  foreach(dep IN LISTS M_DEPS)
    get_property(dep_visible GLOBAL PROPERTY LAYERINIT_VISIBLE_${dep})
    if(NOT dep_visible)
      message(FATAL_ERROR "layerinit_module(${folder}): DEPS names '${dep}', which is not defined yet")
    endif()
    list(APPEND visible ${dep_visible})
  endforeach()
  list(REMOVE_DUPLICATES visible)
  set_property(GLOBAL PROPERTY LAYERINIT_VISIBLE_${folder} ${visible})
  set_property(GLOBAL APPEND PROPERTY LAYERINIT_MODULES ${folder})
  layerinit_include_view(${folder} "${visible}")

  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include/${folder}>)
  foreach(dep IN LISTS M_DEPS)
    target_link_libraries(${target} PUBLIC layerinit_${dep})
  endforeach()
  layerinit_private_flags(${target})
  # Hidden by default: liblayerinit.so exports what the public headers mark LAYERINIT_API
  # (core/api.hpp), nothing of detail:: or of a private header.
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
                                             VISIBILITY_INLINES_HIDDEN ON)

  # Public headers: installed, and checked one by one; together exactly what layerinit.hpp reaches
  # (cmake/test_consumer.cmake checks it). Private ones (used by the layer's own sources, the layers
  # above in the build tree, and the tests) are neither.
  file(GLOB headers RELATIVE ${PROJECT_SOURCE_DIR}/${folder} CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.hpp)
  foreach(h IN LISTS M_PRIVATE_HEADERS)
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${folder}/${h})
      message(FATAL_ERROR "layerinit_module(${folder}): no header ${h}")
    endif()
  endforeach()
  list(REMOVE_ITEM headers ${M_PRIVATE_HEADERS})
  if(headers)
    install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/layerinit/${folder})
  endif()
  if(LAYERINIT_CHECK_HEADERS AND headers)
    set(checks "")
    foreach(h IN LISTS headers)
      string(MAKE_C_IDENTIFIER ${h} id)
      set(check ${PROJECT_BINARY_DIR}/header_check/${folder}/${id}.cpp)
      # Twice: the second include must be a no-op (#pragma once).
      file(CONFIGURE OUTPUT ${check} CONTENT "#include <layerinit/${folder}/${h}>\n#include <layerinit/${folder}/${h}>\n")
      list(APPEND checks ${check})
    endforeach()
    add_library(${target}_header_check OBJECT ${checks})
    target_link_libraries(${target}_header_check PRIVATE ${target})
    layerinit_private_flags(${target}_header_check)
  endif()
endfunction()

# build/include/<view>/layerinit/<folder> -> the source folder, for each visible folder, plus the
# generated config.hpp.
function(layerinit_include_view view visible)
  set(dir ${PROJECT_BINARY_DIR}/include/${view}/layerinit)
  file(REMOVE_RECURSE ${PROJECT_BINARY_DIR}/include/${view})
  file(MAKE_DIRECTORY ${dir})
  foreach(f IN LISTS visible)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${f} ${dir}/${f} SYMBOLIC)
  endforeach()
  file(CREATE_LINK ${PROJECT_BINARY_DIR}/generated/layerinit/config.hpp ${dir}/config.hpp SYMBOLIC)
endfunction()

# Values must be bitwise identical on CPU and GPU: no contraction of a*b+c into fma unless the source
# says fmaf, and never fast-math. These flags are PRIVATE so they never leak into consumers.
# -fno-math-errno and -fno-trapping-math change no computed value (they drop errno writes and let the
# compiler evaluate both sides of a select, which the host fill loops need to vectorize); nothing
# else from the fast-math family is used.
function(layerinit_private_flags target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off -fno-math-errno -fno-trapping-math -Wall -Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${LAYERINIT_NATIVE}>>:-march=native>
    $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false -prec-div=true -prec-sqrt=true>)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_SEPARABLE_COMPILATION OFF)
endfunction()
