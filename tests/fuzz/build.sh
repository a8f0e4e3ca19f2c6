#!/bin/sh
# Builds the libFuzzer targets with ASan and UBSan (needs clang++): fuzz_spec_json (the JSON spec
# parser) and fuzz_checkpoint (the safetensors and HDF5 checkpoint readers).
#   tests/fuzz/build.sh BUILD_DIR [OUTPUT_DIR]
# BUILD_DIR is a configured CMake build of layerinit (its include/all/layerinit/ view holds every
# folder and the generated config.hpp; its cache the Philox include path). OUTPUT_DIR defaults to
# /tmp; the objects go to OUTPUT_DIR/fuzz-objects, compiled side by side (through ccache when it is
# installed).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
out=${2:-/tmp}
philox=$(sed -n 's/^LAYERINIT_\(CURAND\|RANDOM123\)_INCLUDE:PATH=//p' "$build/CMakeCache.txt" | head -n 1)
hdf5_cflags=$(pkg-config --cflags hdf5)
hdf5_libs=$(pkg-config --libs hdf5)
objects="$out/fuzz-objects"
mkdir -p "$objects"
launcher=$(command -v ccache || true)
flags="-std=c++20 -O1 -g -ffp-contract=off -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
core="core/errors.cpp core/bytes.cpp core/shape.cpp core/text.cpp core/input_file.cpp dtypes/dtype.cpp init/json_read.cpp"
# The recipes ask the family records (init/family_record.hpp) for their quirks: the records come along.
spec="$core tests/fuzz/fuzz_spec_json.cpp init/spec_json.cpp init/spec.cpp init/describe.cpp init/recipes.cpp kernels/fill.cpp
      kernels/quantile_tables.cpp init/hf_spec.cpp init/families.cpp init/families_common.cpp $(cd "$root" && echo init/families/*.cpp)"
checkpoint="$core tests/fuzz/fuzz_checkpoint.cpp checkpoint/reader.cpp checkpoint/reader_hdf5.cpp checkpoint/writer.cpp
            checkpoint/hdf5_writer.cpp checkpoint/hdf5_layout.cpp checkpoint/safetensors_writer.cpp"
object() { echo "$objects/$(echo "$1" | tr / _).o"; }
# Each source once, as many at a time as there are cores.
printf '%s\n' $spec $checkpoint | sort -u | xargs -P "$(nproc)" -I{} sh -c '
  '"${launcher:+$launcher }"'${CXX:-clang++} '"$flags"' -I"$1/include/all" ${2:+-I"$2"} -I/usr/include/eigen3 '"$hdf5_cflags"' \
    -c "$3/{}" -o "$4/$(echo {} | tr / _).o"' _ "$build" "$philox" "$root" "$objects"
# The list of init/families/*.cpp's records, which the configure step generates into the build.
${launcher:+$launcher }${CXX:-clang++} $flags -I"$build/include/all" -c "$build/init/family_files.cpp" -o "$objects/family_files.o"
link() {
  name=$1
  shift
  objs=""
  for s in "$@"; do objs="$objs $(object "$s")"; done
  [ "$name" != fuzz_spec_json ] || objs="$objs $objects/family_files.o"
  ${CXX:-clang++} $flags $objs -o "$out/$name" $hdf5_libs
  echo "built $out/$name"
}
link fuzz_spec_json $spec
link fuzz_checkpoint $checkpoint
