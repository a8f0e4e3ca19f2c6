// --trace FILE.csv: bytes in use after every allocation and free, with time and layer.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <layerinit/init/spec.hpp>
#include <layerinit/memory/tracking.hpp>

namespace layerinit::detail {
class TempPath;
}

namespace layerinit::cli {

class MemoryTrace {
 public:
  explicit MemoryTrace(const ModelSpec& spec);
  ~MemoryTrace();
  // Checks the path as emit checks -o (an existing file only with `force`, and only a trace
  // layerinit wrote), creates the temporary beside it, then records events in memory (the listener
  // runs under the tracker's lock: no I/O there). Throws bad_input on a refused path.
  void attach(tracking_resource& tracker, std::string path, bool force);
  // Writes the CSV (seconds,event,bytes,current_bytes,layer,tensor) into the temporary and renames
  // it onto the path. Throws on I/O errors; until then, and on any failure, the path is untouched
  // and the temporary is removed when the trace is destroyed.
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
  std::string path_;              // as given, for messages
  std::filesystem::path target_;  // absolute
  bool force_ = false;
  std::unique_ptr<detail::TempPath> tmp_;
  std::vector<Row> rows_;
  tracking_resource* tracker_ = nullptr;
};

}  // namespace layerinit::cli
