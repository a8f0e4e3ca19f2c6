// A simulated node of CUDA devices for a test's scope (backends/backend.hpp,
// LAYERINIT_TEST_SIMULATED_CUDA_DEVICES): its backends' memory says "device" but is host memory, so
// the code paths that read device memory through a host staging buffer (hash_bytes, read_on_host,
// emit) and that pick a device run on a machine without a GPU. The record starts empty and is cleared
// again at the end.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <layerinit/backends/backend.hpp>

namespace layerinit::testing {

class SimulatedNode {
 public:
  explicit SimulatedNode(int devices) {
    ::setenv("LAYERINIT_TEST_SIMULATED_CUDA_DEVICES", std::to_string(devices).c_str(), 1);
    (void)take_simulated_device_events();
  }
  ~SimulatedNode() {
    ::unsetenv("LAYERINIT_TEST_SIMULATED_CUDA_DEVICES");
    (void)take_simulated_device_events();
  }
  SimulatedNode(const SimulatedNode&) = delete;
  SimulatedNode& operator=(const SimulatedNode&) = delete;

  // The recorded events since the last call (and clears them).
  static std::vector<SimulatedDeviceEvent> events() { return take_simulated_device_events(); }
  // The sizes of the copies to the host since the last call, in order (and clears the record).
  static std::vector<std::uint64_t> copies() {
    std::vector<std::uint64_t> out;
    for (const SimulatedDeviceEvent& e : events())
      if (e.what == SimulatedDeviceEvent::What::copy_to_host) out.push_back(e.bytes);
    return out;
  }
};

}  // namespace layerinit::testing
