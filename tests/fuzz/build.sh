#!/bin/sh
# Builds the libFuzzer target for the JSON spec parser with ASan and UBSan (needs clang++).
#   tests/fuzz/build.sh BUILD_DIR [OUTPUT]
# BUILD_DIR is a configured CMake build of layerinit (its include/all/layerinit/ view holds every
# folder and the generated config.hpp; its cache the Philox include path). OUTPUT defaults to
# /tmp/fuzz_spec_json.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
out=${2:-/tmp/fuzz_spec_json}
philox=$(sed -n 's/^LAYERINIT_\(CURAND\|RANDOM123\)_INCLUDE:PATH=//p' "$build/CMakeCache.txt" | head -n 1)
${CXX:-clang++} -std=c++20 -O1 -g -ffp-contract=off -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined \
  -I"$build/include/all" ${philox:+-I"$philox"} -I/usr/include/eigen3 \
  "$root/tests/fuzz/fuzz_spec_json.cpp" "$root/init/spec_json.cpp" "$root/init/json_read.cpp" "$root/init/spec.cpp" \
  "$root/init/describe.cpp" "$root/init/recipes.cpp" \
  "$root/kernels/fill.cpp" "$root/kernels/quantile_tables.cpp" "$root/dtypes/dtype.cpp" "$root/core/shape.cpp" "$root/core/text.cpp" \
  "$root/core/errors.cpp" "$root/core/bytes.cpp" "$root/core/input_file.cpp" -o "$out"
echo "built $out"
