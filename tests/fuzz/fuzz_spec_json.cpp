// libFuzzer target for the JSON spec parser: any input either parses (and then round-trips) or
// throws spec_error. Not part of the default build (it needs clang); build and run with
//   tests/fuzz/build.sh <configured cmake build dir> /tmp && mkdir -p /tmp/corpus &&
//   /tmp/fuzz_spec_json -max_total_time=60 /tmp/corpus tests/fuzz/corpus   (new inputs go to /tmp/corpus)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <layerinit/init/spec_json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const layerinit::ModelSpec m = layerinit::spec_from_json(text);
    if (!(layerinit::spec_from_json(layerinit::spec_to_json(m)) == m)) std::abort();  // round trip broken
  } catch (const layerinit::spec_error&) {
  }
  return 0;  // any other exception escapes and libFuzzer reports it as a crash
}
