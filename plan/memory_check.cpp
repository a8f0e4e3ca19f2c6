#include <layerinit/plan/memory_check.hpp>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include <layerinit/core/bytes.hpp>
#include <layerinit/memory/available.hpp>
#include <layerinit/plan/plan.hpp>

namespace layerinit {

std::uint64_t record_bytes(const ModelSpec& spec, Layout layout, bool slice_hashes) {
  // Measured with GNU time's max RSS over 80,000 one-element layers: build's tensors and reports take
  // about 1.5 KiB per tensor; emit (bench/cpu/many_tensors.py, 50k to 200k tensors, 2026-11-26)
  // 1.12 KiB per tensor to safetensors and 1.10 to HDF5, whose writer closes each dataset once
  // written (it held them open, 19.5 KiB each, before); a stacked tensor's report holds a hash per
  // layer slice. Rounded up to 2 KiB and 128 bytes.
  const std::uint64_t L = spec.num_layers, T = spec.layer.tensors.size(), outer = spec.pre.size() + spec.post.size();
  const std::uint64_t tensors = saturating_add(outer, layout == Layout::stacked ? T : saturating_mul(L, T));
  const std::uint64_t slices = slice_hashes ? saturating_mul(L, T) : 0;
  return saturating_add(saturating_mul(tensors, 2u << 10), saturating_mul(slices, 128));
}

MemoryNeed verify_memory_need(const Builder& b, std::uint64_t chunk_bytes) {
  const MemoryPlan p = make_memory_plan(b);
  return {"the compare's three chunks", saturating_mul(3, std::min(p.largest_tensor_bytes, chunk_bytes)),
          record_bytes(b.spec(), b.options().layout, true)};
}

void check_memory(backend& be, const MemoryNeed& need) {
  std::optional<AvailableMemory> device, host;
  if (const char* hook = std::getenv("LAYERINIT_TEST_AVAILABLE_MEMORY")) {
    std::uint64_t bytes = 0;
    try {
      bytes = parse_byte_size(hook);
    } catch (const std::invalid_argument&) {
      bad_argument("LAYERINIT_TEST_AVAILABLE_MEMORY", std::string_view(hook), "is not a byte size (e.g. 80GiB, 500MB, 1048576)");
    }
    device = host = AvailableMemory{bytes, "LAYERINIT_TEST_AVAILABLE_MEMORY, a test hook"};
  } else {
    device = be.available_memory();
    host = be.memory().kind() == MemoryKind::host ? device : available_host_memory();
  }
  auto refuse = [](const std::string& where, std::uint64_t total, const std::string& parts, const AvailableMemory& a) {
    throw memory_refused("not enough memory" + where + ": needs " + format_bytes(total) + " at its peak (" + parts + "), " +
                             format_bytes(a.bytes) + " available (" + a.source + ")",
                         total, a.bytes);
  };
  const std::string peak = need.peak_what + " " + format_bytes(need.peak);
  const std::string records = "tensor records " + format_bytes(need.records);
  if (be.memory().kind() == MemoryKind::host) {
    const std::uint64_t total = saturating_add(need.peak, need.records);
    if (host && total > host->bytes) refuse("", total, peak + " + " + records, *host);
  } else {
    if (device && need.peak > device->bytes) refuse(" on " + be.describe(), need.peak, peak, *device);
    if (host && need.records > host->bytes) refuse(" on the host", need.records, records, *host);
  }
  be.reserve(need.peak);
}

}  // namespace layerinit
