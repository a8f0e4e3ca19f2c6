#include "trace.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <layerinit/checkpoint/detail.hpp>  // in-tree only: not installed

namespace layerinit::cli {

namespace {
const char kHeader[] = "seconds,event,bytes,current_bytes,layer,tensor";

// A regular file whose first line is our header: what --force may replace.
bool is_trace(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string line;
  return std::getline(in, line) && line == kHeader;
}
}  // namespace

MemoryTrace::MemoryTrace(const ModelSpec& spec) : prefix_(spec.layer_prefix) {}
MemoryTrace::~MemoryTrace() = default;

void MemoryTrace::attach(tracking_resource& tracker, std::string path, bool force) {
  path_ = std::move(path);
  force_ = force;
  // All refusals come before building anything, as for emit's -o (docs/checkpoint.md).
  target_ = detail::normalize_target(path_);
  struct stat st {};
  if (::lstat(target_.c_str(), &st) == 0) {
    if (!force_)
      throw bad_input("--trace", path_, "exists (use --force)", "refusing to overwrite existing " + path_ + " (use --force)");
    if (!S_ISREG(st.st_mode) || !is_trace(target_))
      throw bad_input("--trace", path_, "is not a trace layerinit wrote (--force replaces only what layerinit wrote)",
                      "refusing to replace " + path_ +
                          " (--force replaces only what layerinit wrote): it is not a trace layerinit wrote");
  }
  const std::filesystem::path dir = target_.parent_path();
  int err = 0;
  if (::stat(dir.c_str(), &st) != 0) err = errno;
  else if (!S_ISDIR(st.st_mode)) err = ENOTDIR;
  else if (::access(dir.c_str(), W_OK | X_OK) != 0) err = errno;
  if (err != 0) {
    const std::string what = "cannot write trace file '" + path_ + "': " + std::strerror(err);
    // A directory that is not there is a wrong path (exit 2); EACCES, EROFS, EIO are the environment's (exit 1).
    if (err == ENOENT || err == ENOTDIR || err == ELOOP || err == ENAMETOOLONG)
      throw bad_input("--trace", path_, std::strerror(err), what);
    throw std::runtime_error(what);
  }
  detail::remove_stale_staging(target_);  // what a killed build left, as emit does
  tmp_ = std::make_unique<detail::TempPath>(target_, false);
  tracker_ = &tracker;
  tracker.set_listener([this](const MemoryEvent& e) {
    Row r{e.seconds, e.kind, e.bytes, e.current_bytes, -1, e.tag ? e.tag->label : std::string()};
    if (const auto l = split_layer_name(prefix_, r.tensor)) r.layer = static_cast<long long>(l->layer);
    rows_.push_back(std::move(r));
  });
}

void MemoryTrace::finish() {
  if (!tracker_) return;
  tracker_->set_listener({});
  std::ofstream out(tmp_->path(), std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write trace file '" + path_ + "'");
  out << kHeader << '\n';
  static const char* kinds[] = {"allocate", "deallocate", "commit", "release"};
  for (const Row& r : rows_)
    out << r.seconds << ',' << kinds[static_cast<int>(r.kind)] << ',' << r.bytes << ',' << r.current << ','
        << r.layer << ',' << r.tensor << '\n';
  out.close();
  if (!out) throw std::runtime_error("error writing trace file '" + path_ + "'");
  tmp_->publish(target_, force_);  // fsync, then rename (without --force: never onto a file that appeared)
  tracker_ = nullptr;
}

}  // namespace layerinit::cli
