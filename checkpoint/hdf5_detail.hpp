// Internal to checkpoint/: what the HDF5 writer and reader share. Not installed as API.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <layerinit/checkpoint/writer.hpp>

namespace layerinit::detail {

// Silences HDF5's automatic error printing for one scope, restoring it afterwards.
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

inline herr_t collect_hdf5_error(unsigned, const H5E_error2_t* e, void* out) {
  if (e->desc) static_cast<std::vector<std::string>*>(out)->push_back(e->desc);
  return 0;
}

// The system's reason from HDF5's error stack ("error message = 'No space left on device'"), else
// the innermost description. Clears the stack. `system`, when given: whether a system call failed under HDF5 (its message names an errno), which
// is the environment's failure, not the file's.
inline std::string hdf5_reason(bool* system = nullptr) {
  std::vector<std::string> descs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_hdf5_error, &descs);
  H5Eclear2(H5E_DEFAULT);
  if (system)
    *system = std::any_of(descs.begin(), descs.end(), [](const std::string& d) { return d.find("errno = ") != std::string::npos; });
  for (const auto& d : descs) {
    auto p = d.find("error message = '");
    if (p != std::string::npos) {
      p += 17;
      return d.substr(p, d.find('\'', p) - p);
    }
  }
  return descs.empty() ? std::string("HDF5 error") : descs.back();
}

[[noreturn]] inline void hdf5_fail(const std::string& what, const std::filesystem::path& p) {
  throw checkpoint_error("checkpoint: " + what + " " + p.string() + ": " + hdf5_reason());
}

// An hid_t closed by its closer when it goes out of scope.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Hid& operator=(Hid&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  ~Hid() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  herr_t reset() {
    herr_t r = 0;
    if (id_ >= 0 && close_) r = close_(id_);
    id_ = H5I_INVALID_HID;
    return r;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

}  // namespace layerinit::detail
