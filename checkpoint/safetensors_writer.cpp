// The safetensors writer: a directory with model.safetensors (or shards and their index) and
// config.json, built in a temporary directory beside the target and renamed into place; or one
// .safetensors file (a rank's file), built in a temporary file beside it. Data goes from the
// caller's memory to the file with pwrite at offsets fixed by the header: no staging.
#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include <layerinit/checkpoint/reader.hpp>
#include <layerinit/core/errors.hpp>

#include "detail.hpp"

namespace layerinit {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoint writers assume a little-endian host");

namespace fs = std::filesystem;

// Whether a .safetensors file's header carries the __metadata__ keys every layerinit file has.
bool written_by_layerinit(const fs::path& p) {
  const auto m = detail::safetensors_metadata(p);
  return m && m->contains("format_version") && (*m)["format_version"].is_string() && m->contains("library_version") &&
         (*m)["library_version"].is_string();
}

// --force replaces a directory only if it holds nothing but what this writer writes: .safetensors
// files with layerinit's __metadata__, model.safetensors.index.json and config.json (or nothing), and
// the staging marker a writer killed just after publishing left (TempPath::publish).
std::string safetensors_ownership_impl(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!fs::is_regular_file(it->symlink_status(ec))) return "it holds " + name + ", which is not a file layerinit writes";
    if (name == "config.json" || name == "model.safetensors.index.json" || name == detail::kStagingMarker) continue;
    if (!name.ends_with(".safetensors")) return "it holds " + name + ", which layerinit does not write";
    if (!written_by_layerinit(it->path()))
      return "it holds " + name + ", which layerinit did not write (no format_version and library_version in its __metadata__)";
  }
  if (ec) detail::fail("cannot read", dir, ec.value());
  return {};
}

// --force replaces a single file only if it is a .safetensors file layerinit wrote.
std::string safetensors_file_ownership(const fs::path& p) {
  if (written_by_layerinit(p)) return {};
  return "it is not a safetensors file layerinit wrote (no format_version and library_version in its __metadata__)";
}

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the format's limit (safetensors' MAX_HEADER_SIZE)

struct Shard {
  std::string file;                 // "model.safetensors" or "model-00001-of-00003.safetensors"
  std::vector<std::size_t> tensors;
  std::uint64_t data_start = 0;     // 8 + header length
  std::uint64_t data_bytes = 0;
  int fd = -1;
};

class SafetensorsWriter final : public detail::WriterBase {
 public:
  // single_file: `target` is the one .safetensors file (no shards, index or config.json).
  SafetensorsWriter(fs::path target, std::uint64_t planned, const detail::DatasetSource& datasets,
                    const CheckpointMetadata& meta, const WriterOptions& opts, bool single_file)
      : WriterBase(std::move(target), opts,
                   {!single_file, single_file ? detail::OwnershipCheck(safetensors_file_ownership)
                                              : detail::OwnershipCheck(safetensors_ownership_impl)}),
        single_file_(single_file) {
    if (single_file_ && (opts_.max_shard_size != 0 || !opts_.config_json.empty()))
      bad_argument("checkpoint", ": a single safetensors file has no shards and no config.json");
    admit(planned, datasets);
    plan(meta);  // header too large etc. before touching the disk
    create_temp([&] {
      for (auto& s : shards_) {
        // A single file is the temporary itself (already created, mode set by the umask).
        const fs::path p = single_file_ ? temp_path() : temp_path() / s.file;
        s.fd = single_file_ ? ::open(p.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC)
                            : ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // the umask decides
        if (s.fd < 0) detail::fail("cannot create", shown(s), errno);
        detail::full_pwrite(s.fd, headers_[&s - shards_.data()].data(), s.data_start, 0, shown(s));
      }
      headers_.clear();
    });
  }
  ~SafetensorsWriter() override { abort(); }

 private:
  void write_elements(std::size_t i, std::uint64_t first, const void* bytes, std::uint64_t n) override {
    const Shard& s = shards_[shard_of_[i]];
    const std::uint64_t es = dtype_size(d_[i].dtype);
    detail::full_pwrite(s.fd, bytes, n * es, s.data_start + offset_[i] + first * es, shown(s));
  }

  void finish() override {
    for (auto& s : shards_) {
      if (::fsync(s.fd) != 0) detail::fail("cannot sync", shown(s), errno);
      if (::close(s.fd) != 0) {
        s.fd = -1;
        detail::fail("cannot write", shown(s), errno);
      }
      s.fd = -1;
    }
    if (shards_.size() > 1) {
      std::vector<SafetensorsShard> listed;
      for (const auto& sh : shards_) listed.push_back({sh.file, sh.tensors, sh.data_bytes});
      detail::write_small_file(temp_path() / "model.safetensors.index.json", safetensors_index_json(listed, d_),
                               target_ / "model.safetensors.index.json");
    }
    if (!opts_.config_json.empty())
      detail::write_small_file(temp_path() / "config.json", opts_.config_json, target_ / "config.json");
  }

  void release() noexcept override {
    for (auto& s : shards_)
      if (s.fd >= 0) {
        ::close(s.fd);
        s.fd = -1;
      }
  }

  // Assigns tensors to shards in declaration order and builds each shard's header.
  void plan(const CheckpointMetadata& meta) {
    shard_of_.resize(d_.size());
    offset_.resize(d_.size());
    for (auto& planned : safetensors_shards(d_, opts_.max_shard_size)) {
      Shard& s = shards_.emplace_back();
      s.file = std::move(planned.file);
      s.tensors = std::move(planned.datasets);
      for (auto i : s.tensors) {
        shard_of_[i] = shards_.size() - 1;
        offset_[i] = s.data_bytes;
        s.data_bytes += numel(d_[i].shape) * dtype_size(d_[i].dtype);
      }
    }
    if (single_file_ && shards_.empty()) shards_.emplace_back();  // a rank may hold no tensor: a header alone
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      Shard& s = shards_[k];
      if (single_file_) s.file = target_.filename().string();
      nlohmann::ordered_json md;
      md["format"] = "pt";
      for (const auto& [key, v] : detail::metadata_pairs(meta)) md[key] = v;
      auto entry = [&](std::size_t t) {
        const std::uint64_t bytes = numel(d_[t].shape) * dtype_size(d_[t].dtype);
        return nlohmann::ordered_json{
            {"dtype", std::string(safetensors_dtype_name(d_[t].dtype))}, {"shape", d_[t].shape}, {"data_offsets", {offset_[t], offset_[t] + bytes}}};
      };
      // The header's size, entry by entry, before the header is built: {"__metadata__":{...},"name":{...},...}
      // (compact, as dump() writes it), so a header past the limit never takes its size in memory.
      std::uint64_t size = 2 + nlohmann::json("__metadata__").dump().size() + 1 + md.dump().size();
      for (auto t : s.tensors) size += 1 + nlohmann::json(d_[t].name).dump().size() + 1 + entry(t).dump().size();
      if (size > kMaxHeaderBytes)
        throw checkpoint_error("checkpoint: " + shown(s).string() + ": safetensors header of " + std::to_string(size) +
                               " bytes (" + std::to_string(s.tensors.size()) + " tensors) exceeds the format's " +
                               std::to_string(kMaxHeaderBytes));
      nlohmann::ordered_json h;
      h["__metadata__"] = std::move(md);
      for (auto t : s.tensors) detail::append_member(h, d_[t].name, entry(t));
      std::string json = h.dump();
      json.append((8 - json.size() % 8) % 8, ' ');
      LAYERINIT_EXPECTS(json.size() - size < 8, "safetensors header size computed before it was built");
      if (json.size() > kMaxHeaderBytes)  // the padding
        throw checkpoint_error("checkpoint: " + shown(s).string() + ": safetensors header of " + std::to_string(json.size()) +
                               " bytes (" + std::to_string(s.tensors.size()) + " tensors) exceeds the format's " +
                               std::to_string(kMaxHeaderBytes));
      std::string header(8, '\0');
      std::uint64_t len = json.size();
      for (int b = 0; b < 8; ++b) header[b] = static_cast<char>((len >> (8 * b)) & 0xff);
      header += json;
      s.data_start = header.size();
      headers_.push_back(std::move(header));
    }
  }

  // The path a shard's file will have, for messages.
  fs::path shown(const Shard& s) const { return single_file_ ? target_ : target_ / s.file; }

  bool single_file_;
  std::vector<Shard> shards_;
  std::vector<std::string> headers_;      // until written at open
  std::vector<std::size_t> shard_of_;     // per tensor
  std::vector<std::uint64_t> offset_;     // per tensor, within its shard's data
};

}  // namespace

std::vector<SafetensorsShard> safetensors_shards(const std::vector<DatasetSpec>& d, std::uint64_t max_shard_size) {
  std::vector<SafetensorsShard> shards;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const std::uint64_t bytes = numel(d[i].shape) * dtype_size(d[i].dtype);
    if (shards.empty() ||
        (max_shard_size && shards.back().data_bytes > 0 && shards.back().data_bytes + bytes > max_shard_size))
      shards.emplace_back();
    shards.back().datasets.push_back(i);
    shards.back().data_bytes += bytes;
  }
  const std::size_t n = shards.size();
  for (std::size_t k = 0; k < n; ++k) {
    if (n == 1) {
      shards[k].file = "model.safetensors";
    } else {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
      shards[k].file = name;
    }
  }
  return shards;
}

std::string safetensors_index_json(const std::vector<SafetensorsShard>& shards, const std::vector<DatasetSpec>& d) {
  nlohmann::ordered_json index;
  std::uint64_t total = 0;
  for (const auto& s : shards) total += s.data_bytes;
  index["metadata"]["total_size"] = total;
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (const auto& s : shards)
    for (auto t : s.datasets) detail::append_member(map, d.at(t).name, s.file);
  index["weight_map"] = std::move(map);
  return index.dump(2) + "\n";
}

namespace detail {
std::unique_ptr<CheckpointWriter> open_safetensors(const fs::path& target, bool single_file, std::uint64_t planned,
                                                   const DatasetSource& datasets, const CheckpointMetadata& meta,
                                                   const WriterOptions& opts) {
  const fs::path t = normalize_target(target);
  if (single_file && t.extension() != ".safetensors")
    bad_argument("checkpoint safetensors file", t.string(), "must have a name that ends in .safetensors");
  return std::make_unique<SafetensorsWriter>(t, planned, datasets, meta, opts, single_file);
}
}  // namespace detail

std::unique_ptr<CheckpointWriter> open_safetensors_writer(const std::filesystem::path& target,
                                                          std::vector<DatasetSpec> datasets,
                                                          const CheckpointMetadata& meta,
                                                          const WriterOptions& opts) {
  detail::validate_datasets(datasets, CheckpointFormat::safetensors);
  const std::uint64_t planned = planned_bytes(CheckpointFormat::safetensors, datasets, meta, opts);
  return detail::open_safetensors(target, false, planned, [&] { return std::move(datasets); }, meta, opts);
}

std::unique_ptr<CheckpointWriter> open_safetensors_file_writer(const std::filesystem::path& file,
                                                               std::vector<DatasetSpec> datasets,
                                                               const CheckpointMetadata& meta, const WriterOptions& opts) {
  detail::validate_datasets(datasets, CheckpointFormat::safetensors);
  const std::uint64_t planned = planned_bytes(CheckpointFormat::safetensors, datasets, meta, opts);
  return detail::open_safetensors(file, true, planned, [&] { return std::move(datasets); }, meta, opts);
}

namespace detail {

// The data, and a header entry: the name twice (header and index), offsets and the shape.
PlannedRun safetensors_planned_run(const DatasetSpec& d, std::uint64_t count, std::uint64_t name_bytes) {
  return {saturating_mul(count, numel(d.shape) * dtype_size(d.dtype)),
          saturating_add(saturating_mul(count, 64 + 24 * d.shape.size()), saturating_mul(2, name_bytes))};
}

// Per shard a header (metadata), then the index and config.
std::uint64_t safetensors_planned_fixed(std::uint64_t meta_bytes, std::uint64_t datasets, std::uint64_t max_shard_size,
                                        std::uint64_t config_bytes) {
  const std::uint64_t shards = max_shard_size ? datasets : 1;  // an upper bound
  return saturating_add(saturating_mul(shards, meta_bytes + 4096), config_bytes + 4096);
}

std::string safetensors_ownership(const fs::path& dir) { return safetensors_ownership_impl(dir); }

std::optional<nlohmann::json> safetensors_metadata(const fs::path& p) noexcept {
  try {
    std::ifstream in(p, std::ios::binary);
    unsigned char len[8];
    if (!in.read(reinterpret_cast<char*>(len), 8)) return std::nullopt;
    std::uint64_t n = 0;
    for (int b = 7; b >= 0; --b) n = (n << 8) | len[b];
    std::error_code ec;
    const std::uint64_t size = fs::file_size(p, ec);
    if (ec || n > size - 8 || n > kMaxHeaderBytes) return std::nullopt;  // the format's own limit on a header
    std::string header(static_cast<std::size_t>(n), '\0');
    if (!in.read(header.data(), static_cast<std::streamsize>(n))) return std::nullopt;
    auto j = nlohmann::json::parse(header, nullptr, false);
    if (!j.is_object() || !j.contains("__metadata__") || !j["__metadata__"].is_object()) return std::nullopt;
    return std::move(j["__metadata__"]);
  } catch (...) {
    return std::nullopt;
  }
}
}  // namespace detail

}  // namespace layerinit
