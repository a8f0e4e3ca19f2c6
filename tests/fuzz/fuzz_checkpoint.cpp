// libFuzzer target for the checkpoint readers (checkpoint/reader.hpp): any bytes, written as one
// file, are either read (every tensor of at most 1 MiB, whole) or refused as checkpoint_invalid or
// checkpoint_error; a file with HDF5's signature goes to the HDF5 reader (and its probe process),
// any other to the safetensors reader. Not part of the default build (it needs clang); built and run
// by scripts/test with tests/fuzz/build.sh, seeded with an emitted safetensors and HDF5 file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <layerinit/checkpoint/reader.hpp>

namespace {

// One file per fuzzing process, in the temporary directory, removed at exit.
const std::filesystem::path& input_path() {
  static const std::filesystem::path p = [] {
    auto path = std::filesystem::temp_directory_path() / ("layerinit-fuzz-checkpoint-" + std::to_string(::getpid()) + ".safetensors");
    std::atexit([] { std::filesystem::remove(input_path()); });
    return path;
  }();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path& p = input_path();
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) std::abort();
  try {
    const auto r = layerinit::open_checkpoint_reader(p);
    for (std::size_t k = 0; k < r->tensors().size(); ++k) {
      const std::uint64_t bytes = r->tensors()[k].bytes();
      if (bytes == 0 || bytes > (1u << 20)) continue;  // verify compares a shape before reading it
      std::vector<unsigned char> out(bytes);
      r->read(k, 0, layerinit::numel(r->tensors()[k].shape), out.data());
    }
  } catch (const layerinit::checkpoint_error&) {  // checkpoint_invalid is one
  }
  return 0;  // any other exception escapes and libFuzzer reports it as a crash
}
