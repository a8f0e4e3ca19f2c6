#include "trace.hpp"

#include <fstream>
#include <stdexcept>

namespace layerinit::cli {

void MemoryTrace::attach(tracking_resource& tracker, std::string path) {
  path_ = std::move(path);
  tracker_ = &tracker;
  // Fail on an unwritable path before building anything.
  { std::ofstream probe(path_, std::ios::app); if (!probe) throw std::invalid_argument("cannot write trace file '" + path_ + "'"); }
  tracker.set_listener([this](const MemoryEvent& e) {
    Row r{e.seconds, e.kind, e.bytes, e.current_bytes, -1, e.tag ? e.tag->label : std::string()};
    // Layer index from the canonical name: "<prefix><i>.<rest>".
    if (r.tensor.rfind(prefix_, 0) == 0) {
      std::size_t k = prefix_.size();
      long long idx = 0;
      bool digits = false;
      while (k < r.tensor.size() && r.tensor[k] >= '0' && r.tensor[k] <= '9') idx = idx * 10 + (r.tensor[k++] - '0'), digits = true;
      if (digits) r.layer = idx;
    }
    rows_.push_back(std::move(r));
  });
}

void MemoryTrace::finish() {
  if (!tracker_) return;
  tracker_->set_listener({});
  std::ofstream out(path_, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write trace file '" + path_ + "'");
  out << "seconds,event,bytes,current_bytes,layer,tensor\n";
  static const char* kinds[] = {"allocate", "deallocate", "commit", "release"};
  for (const Row& r : rows_)
    out << r.seconds << ',' << kinds[static_cast<int>(r.kind)] << ',' << r.bytes << ',' << r.current << ','
        << r.layer << ',' << r.tensor << '\n';
  if (!out.flush()) throw std::runtime_error("error writing trace file '" + path_ + "'");
  tracker_ = nullptr;
}

}  // namespace layerinit::cli
