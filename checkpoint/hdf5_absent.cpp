// A layerinit built without HDF5 (LAYERINIT_HDF5=OFF, as the wheel is: Debian's libhdf5 brings curl,
// OpenSSL and Kerberos, which no wheel should carry): HDF5 files are recognized by their signature and
// refused, with the way to write or read them, before anything is created.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "detail.hpp"

namespace layerinit::detail {
namespace {

constexpr const char* kNoHdf5 =
    "needs HDF5, and this layerinit was built without it (LAYERINIT_HDF5=OFF, as the pip wheel is): write "
    "safetensors (--format safetensors), or build layerinit from source with libhdf5 (scripts/run)";

}  // namespace

void check_hdf5_options(const fs::path& target, const WriterOptions&) {
  bad_argument("checkpoint hdf5 output", target.string(), kNoHdf5);
}

std::unique_ptr<CheckpointWriter> open_hdf5(const fs::path& target, std::uint64_t, const DatasetSource&,
                                            const CheckpointMetadata&, const WriterOptions& opts) {
  check_hdf5_options(target, opts);
  return nullptr;  // not reached
}

void write_hdf5_virtual(const fs::path& path, const std::vector<DatasetSpec>&,
                        const std::vector<std::vector<VirtualSource>>&, const CheckpointMetadata&, const fs::path&) {
  check_hdf5_options(path, {});
}

void publish_hdf5(TempPath&, const fs::path& target, bool, std::string_view) { check_hdf5_options(target, {}); }

std::string hdf5_ownership(const fs::path&) { return "this layerinit was built without HDF5"; }

std::optional<std::string> hdf5_rank_files(const fs::path&) noexcept { return std::nullopt; }

// The HDF5 signature at byte 0, 512, 1024, 2048, ... (the superblock may follow a user block of a power
// of two >= 512 bytes: HDF5 file format specification, "Format Signature").
bool is_hdf5_file(const fs::path& p) noexcept {
  static constexpr std::array<unsigned char, 8> kSignature = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  bool found = false;
  std::array<unsigned char, 8> head{};
  for (off_t at = 0; !found && at >= 0 && at <= (off_t{1} << 40); at = at == 0 ? 512 : at * 2) {
    if (::pread(fd, head.data(), head.size(), at) != static_cast<ssize_t>(head.size())) break;
    found = std::memcmp(head.data(), kSignature.data(), head.size()) == 0;
  }
  ::close(fd);
  return found;
}

std::unique_ptr<CheckpointReader> open_hdf5_reader(const fs::path& p) {
  bad_argument("checkpoint", p.string(),
               "is an HDF5 file, and this layerinit was built without HDF5 (LAYERINIT_HDF5=OFF, as the pip wheel "
               "is): read it with a layerinit built from source with libhdf5 (scripts/run)");
}

}  // namespace layerinit::detail

namespace layerinit {

std::unique_ptr<CheckpointWriter> open_hdf5_writer(const std::filesystem::path& target, std::vector<DatasetSpec>,
                                                   const CheckpointMetadata&, const WriterOptions& opts) {
  detail::check_hdf5_options(target, opts);
  return nullptr;  // not reached
}

}  // namespace layerinit
