// --trace FILE.csv: bytes in use after every allocation and free, with time and layer.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <layerinit/init/spec.hpp>
#include <layerinit/memory/tracking.hpp>

namespace layerinit::cli {

class MemoryTrace {
 public:
  explicit MemoryTrace(const ModelSpec& spec) : prefix_(spec.layer_prefix) {}
  // Records events in memory (the listener runs under the tracker's lock: no I/O there).
  void attach(tracking_resource& tracker, std::string path);
  // Writes the CSV: seconds,event,bytes,current_bytes,layer,tensor. Throws on I/O errors.
  void finish();

 private:
  struct Row {
    double seconds;
    MemoryEvent::Kind kind;
    std::size_t bytes, current;
    long long layer;
    std::string tensor;
  };
  std::string prefix_;
  std::string path_;
  std::vector<Row> rows_;
  tracking_resource* tracker_ = nullptr;
};

}  // namespace layerinit::cli
