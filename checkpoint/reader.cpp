// The checkpoint readers' entry point and the safetensors reader (one file, a directory with an
// index and its shards, a directory of emit --rank files). The HDF5 reader is reader_hdf5.cpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include <layerinit/checkpoint/reader.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/core/input_file.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/json_read.hpp>
#include <layerinit/init/spec_json.hpp>

#include "detail.hpp"

namespace layerinit {

static_assert(std::endian::native == std::endian::little, "checkpoint readers assume a little-endian host");

namespace fs = std::filesystem;

std::string_view safetensors_dtype_name(DType t) { return t == DType::bf16 ? "BF16" : t == DType::f16 ? "F16" : "F32"; }

std::optional<DType> dtype_from_safetensors_name(std::string_view s) {
  for (const DType t : all_dtypes)
    if (s == safetensors_dtype_name(t)) return t;
  return std::nullopt;
}

std::uint64_t StoredTensor::bytes() const {
  const std::uint64_t es = detail::element_size(dtype_text);
  return es == 0 ? 0 : saturating_mul(numel(shape), es);
}

namespace detail {

void invalid(const fs::path& file, const std::string& rule) {
  throw checkpoint_invalid("checkpoint: " + printable(file.string()) + ": " + rule);
}

void open_failed(const std::string& what, const fs::path& path, int err) {
  if (err == ENOENT || err == ENOTDIR || err == ELOOP || err == ENAMETOOLONG)
    throw checkpoint_invalid("checkpoint: " + what + " " + printable(path.string()) + ": " + std::strerror(err));
  fail(what, path, err);
}

std::uint64_t element_size(std::string_view t) {
  // safetensors' names (the format's Dtype enum), then the HDF5 reader's: layerinit's dtype names
  // and f/i/u with the bits of an HDF5 float or integer type.
  static const std::pair<std::string_view, std::uint64_t> known[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I16", 2},  {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},    {"F32", 4},     {"C64", 8},     {"F64", 8},  {"I64", 8},
      {"U64", 8},  {"bf16", 2}, {"fp16", 2}, {"fp32", 4}};
  for (const auto& [name, size] : known)
    if (t == name) return size;
  if (t.size() >= 2 && (t[0] == 'f' || t[0] == 'i' || t[0] == 'u')) {
    std::uint64_t bits = 0;
    for (char c : t.substr(1)) {
      if (c < '0' || c > '9' || bits > 1'000'000) return 0;
      bits = bits * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (t[1] != '0' && bits % 8 == 0) return bits / 8;
  }
  return 0;
}

}  // namespace detail

namespace {

using detail::invalid;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the format's limit (safetensors' MAX_HEADER_SIZE)

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A regular file, opened for reading. O_NONBLOCK: a FIFO in a checkpoint's directory (a shard, the
// index, model.safetensors) would wait for a writer forever; opened without waiting, it is refused.
Fd open_file(const fs::path& p) {
  Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) detail::open_failed("cannot open", p, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) detail::fail("cannot read", p, errno);
  if (!S_ISREG(st.st_mode)) invalid(p, "is not a regular file");
  const int flags = ::fcntl(fd.get(), F_GETFL);  // blocking reads again
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) detail::fail("cannot read", p, errno);
  return fd;
}

// Reads n bytes at `offset`; false at the end of the file before n bytes.
bool full_pread(int fd, void* out, std::uint64_t n, std::uint64_t offset, const fs::path& shown) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30)), static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      detail::fail("cannot read", shown, errno);
    }
    if (r == 0) return false;
    p += r;
    n -= static_cast<std::uint64_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
  return true;
}

std::string text(std::uint64_t v) { return std::to_string(v); }

// One entry of a safetensors header.
struct Entry {
  std::string name, dtype;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // data_offsets, within the data
};

struct Header {
  std::uint64_t data_start = 0;  // 8 + the header's length
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;  // by data_offsets (header order among equal offsets)
};

// A header nests three levels ({"t": {"shape": [...]}}, "__metadata__" two), an index two or three
// ({"weight_map": {...}, "metadata": {...}}): deeper is refused before anything is built (a
// __metadata__ value nested 100,000 deep overflowed the stack).
constexpr std::size_t kMaxHeaderDepth = 3, kMaxIndexDepth = 8;

// `raw` parsed by the rules the spec reader keeps (init/json_read.hpp): nesting past max_depth and
// repeated keys refused (a tensor listed twice was kept once, silently), in time linear in its size
// (an ordered_json header was quadratic in its entries: 40,000 took 9.7 s).
nlohmann::json parse_json(const fs::path& p, const std::string& what, std::string_view raw, std::size_t max_depth) {
  try {
    return JsonReader(what, max_depth).parse(raw);
  } catch (const spec_error& e) {
    invalid(p, e.what());
  }
}

bool unsigned_array(const nlohmann::json& j) {
  if (!j.is_array()) return false;
  for (const auto& v : j)
    if (!v.is_number_unsigned()) return false;
  return true;
}

// The first 8 + length bytes of a .safetensors file, checked against the format's rules (those of
// safetensors' own reader: the header a JSON object of at most 100,000,000 bytes, every entry with
// dtype, shape and data_offsets, each tensor's bytes its shape's, the tensors tiling the data exactly:
// no overlap, no gap, no byte after the last).
Header read_header(const fs::path& p) {
  Fd fd = open_file(p);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) detail::fail("cannot read", p, errno);
  if (!S_ISREG(st.st_mode)) invalid(p, "is not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  unsigned char len8[8];
  if (size < 8 || !full_pread(fd.get(), len8, 8, 0, p))
    invalid(p, "holds " + text(size) + " bytes, fewer than the 8 of the safetensors header length (a truncated file?)");
  std::uint64_t len = 0;
  for (int b = 7; b >= 0; --b) len = (len << 8) | len8[b];
  if (len > kMaxHeaderBytes)
    invalid(p, "safetensors header length " + text(len) + " exceeds the format's " + text(kMaxHeaderBytes) + " bytes");
  if (len > size - 8)
    invalid(p, "safetensors header of " + text(len) + " bytes runs past the end of the file (" + text(size) +
                   " bytes; a truncated file?)");
  std::string raw(static_cast<std::size_t>(len), '\0');
  if (!full_pread(fd.get(), raw.data(), len, 8, p)) invalid(p, "is shorter than its size (changed while read?)");
  const auto h = parse_json(p, "safetensors header", raw, kMaxHeaderDepth);
  if (!h.is_object()) invalid(p, "safetensors header is not a JSON object");
  Header out;
  out.data_start = 8 + len;
  const std::uint64_t data = size - out.data_start;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) invalid(p, "__metadata__ is not a JSON object");
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) invalid(p, "__metadata__ " + quote(k) + " is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string tn = "tensor " + quote(name);
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !unsigned_array(e["shape"]) || !e.contains("data_offsets") || !unsigned_array(e["data_offsets"]) ||
        e["data_offsets"].size() != 2)
      invalid(p, tn + ": its entry needs dtype (a string), shape (unsigned integers) and data_offsets (two unsigned integers)");
    Entry t;
    t.name = name;
    t.dtype = e["dtype"].get<std::string>();
    t.shape = e["shape"].get<Shape>();
    t.begin = e["data_offsets"][0].get<std::uint64_t>();
    t.end = e["data_offsets"][1].get<std::uint64_t>();
    const std::string offsets = "data_offsets [" + text(t.begin) + ", " + text(t.end) + "]";
    if (t.begin > t.end) invalid(p, tn + ": " + offsets + " end before they begin");
    if (t.end > data)
      invalid(p, tn + ": " + offsets + " run past the data's " + text(data) + " bytes (a truncated file?)");
    if (const std::uint64_t es = detail::element_size(t.dtype)) {
      std::uint64_t n = 1;
      bool overflow = false;
      for (auto d : t.shape) overflow |= __builtin_mul_overflow(n, d, &n);
      overflow |= __builtin_mul_overflow(n, es, &n);
      if (overflow || n != t.end - t.begin)
        invalid(p, tn + ": " + offsets + " hold " + text(t.end - t.begin) + " bytes, but shape " + shape_string(t.shape) +
                       " of " + printable(t.dtype) + " takes " + (overflow ? std::string("more than 2^64") : text(n)));
    }
    out.entries.push_back(std::move(t));
  }
  std::stable_sort(out.entries.begin(), out.entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& t : out.entries) {
    if (t.begin < at)
      invalid(p, "tensor " + quote(t.name) + " (data_offsets [" + text(t.begin) + ", " + text(t.end) + "]) overlaps tensor " +
                     quote(prev->name) + " ([" + text(prev->begin) + ", " + text(prev->end) + "])");
    if (t.begin > at)
      invalid(p, "bytes [" + text(at) + ", " + text(t.begin) + ") of the data belong to no tensor (before tensor " +
                     quote(t.name) + ")");
    at = t.end;
    prev = &t;
  }
  if (at != data)
    invalid(p, "bytes [" + text(at) + ", " + text(data) + ") of the data, after the last tensor, belong to no tensor");
  return out;
}

// Whether a file not named .safetensors looks like one: a header length the file holds and a JSON
// object after it.
bool looks_like_safetensors(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  unsigned char b[9];
  if (!in.read(reinterpret_cast<char*>(b), 9)) return false;
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | b[i];
  std::error_code ec;
  const std::uint64_t size = fs::file_size(p, ec);
  return !ec && len <= kMaxHeaderBytes && len <= size - 8 && b[8] == '{';
}

// A few files open at once, the most recently read first: a checkpoint of 1000 shards needs no
// 1000 descriptors.
class FdCache {
 public:
  int get(std::size_t file, const fs::path& p) {
    for (std::size_t i = 0; i < open_.size(); ++i)
      if (open_[i].first == file) {
        std::rotate(open_.begin(), open_.begin() + static_cast<std::ptrdiff_t>(i), open_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        return open_.front().second.get();
      }
    Fd fd = open_file(p);
    if (open_.size() == kMax) open_.pop_back();
    open_.insert(open_.begin(), {file, std::move(fd)});
    return open_.front().second.get();
  }

 private:
  static constexpr std::size_t kMax = 8;
  std::vector<std::pair<std::size_t, Fd>> open_;
};

class SafetensorsReader final : public CheckpointReader {
 public:
  explicit SafetensorsReader(std::string_view format) : format_(format) {}

  std::string_view format() const override { return format_; }
  const std::vector<StoredTensor>& tensors() const override { return tensors_; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }

  void read(std::size_t k, std::uint64_t first, std::uint64_t n, void* out) override {
    LAYERINIT_EXPECTS(k < tensors_.size(), "checkpoint read: tensor index out of range");
    const StoredTensor& t = tensors_[k];
    const std::uint64_t es = detail::element_size(t.dtype_text);
    LAYERINIT_EXPECTS(es > 0, "checkpoint read: tensor " + quote(t.name) + " has dtype " + quote(t.dtype_text) +
                                  ", of no known element size");
    const std::uint64_t count = numel(t.shape);
    LAYERINIT_EXPECTS(first <= count && n <= count - first, "checkpoint read: elements [" + text(first) + ", +" + text(n) +
                                                                 ") leave tensor " + quote(t.name) + " of " + text(count));
    if (n == 0) return;
    const File& f = files_[file_of_[k]];
    const int fd = fds_.get(file_of_[k], f.path);
    if (!full_pread(fd, out, n * es, f.data_start + begin_[k] + first * es, f.path))
      invalid(f.path, "ends inside tensor " + quote(t.name) + " (cut since it was opened?)");
  }

  // Adds a file's tensors in data order; `rel` is StoredTensor::file.
  std::size_t add_file(const fs::path& p, const std::string& rel, Header h) {
    const std::size_t fi = files_.size();
    files_.push_back({p, h.data_start});
    for (Entry& e : h.entries) {
      StoredTensor t;
      t.name = std::move(e.name);
      t.shape = std::move(e.shape);
      t.dtype_text = e.dtype;
      t.dtype = dtype_from_safetensors_name(e.dtype);
      t.file = rel;
      tensors_.push_back(std::move(t));
      file_of_.push_back(fi);
      begin_.push_back(e.begin);
    }
    return fi;
  }
  std::vector<StoredTensor>& mutable_tensors() { return tensors_; }
  std::map<std::string, std::string> metadata_;

 private:
  struct File {
    fs::path path;
    std::uint64_t data_start = 0;
  };
  std::string format_;
  std::vector<File> files_;
  std::vector<StoredTensor> tensors_;
  std::vector<std::size_t> file_of_;
  std::vector<std::uint64_t> begin_;  // within the file's data
  FdCache fds_;
};

std::unique_ptr<CheckpointReader> open_single(const fs::path& file, const std::string& rel) {
  Header h = read_header(file);
  auto r = std::make_unique<SafetensorsReader>("safetensors");
  r->metadata_ = h.metadata;
  r->add_file(file, rel, std::move(h));
  return r;
}

// Whether `p` exists (following links); an error other than its absence is the environment's.
bool path_exists(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  detail::fail("cannot access", p, errno);
}

std::unique_ptr<CheckpointReader> open_sharded(const fs::path& dir) {
  const fs::path index_path = dir / "model.safetensors.index.json";
  // Read as config.json is (core/input_file.hpp): a regular file of at most 16 MiB (an index of
  // 100,000 tensors is a few MiB); a link to /dev/zero or a 2 GiB sparse file was read whole.
  const Fd fd = open_file(index_path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) detail::fail("cannot read", index_path, errno);
  if (static_cast<std::uint64_t>(st.st_size) > kMaxInputFileBytes)
    invalid(index_path, "is larger than 16 MiB (" + text(static_cast<std::uint64_t>(st.st_size)) + " bytes)");
  std::string raw(static_cast<std::size_t>(st.st_size), '\0');
  if (!full_pread(fd.get(), raw.data(), raw.size(), 0, index_path)) invalid(index_path, "is shorter than its size (changed while read?)");
  const auto index = parse_json(index_path, "index", raw, kMaxIndexDepth);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    invalid(index_path, "has no weight_map (a JSON object of tensor names to shard files)");
  const auto& map = index["weight_map"];
  std::set<std::string> shards;
  for (const auto& [name, shard] : map.items()) {
    if (!shard.is_string()) invalid(index_path, "weight_map gives tensor " + quote(name) + " no shard file name");
    shards.insert(shard.get<std::string>());
  }
  for (const auto& s : shards) {
    const fs::path rel(s);
    bool outside = s.empty() || rel.is_absolute();
    for (const auto& part : rel) outside |= part == "..";
    if (outside) invalid(index_path, "names shard " + quote(s) + ", which is not a file in its directory");
    if (!path_exists(dir / rel)) invalid(index_path, "names shard " + quote(s) + ", which does not exist");
  }
  auto r = std::make_unique<SafetensorsReader>("safetensors");
  std::uint64_t found = 0;
  for (const auto& s : shards) {  // in the order of their names: model-00001-of-00003 first
    const fs::path p = dir / s;
    Header h = read_header(p);
    for (const Entry& e : h.entries) {
      const auto it = map.find(e.name);
      if (it == map.end()) invalid(p, "holds tensor " + quote(e.name) + ", which the index does not name");
      if (it->get<std::string>() != s)
        invalid(p, "holds tensor " + quote(e.name) + ", which the index puts in " + quote(it->get<std::string>()));
      ++found;
    }
    if (s == *shards.begin()) r->metadata_ = h.metadata;
    r->add_file(p, s, std::move(h));
  }
  if (found != map.size()) {  // a tensor the index names that no shard holds
    std::set<std::string> held;
    for (const auto& t : r->tensors()) held.insert(t.name);
    for (const auto& [name, shard] : map.items())
      if (!held.count(name))
        invalid(index_path, "puts tensor " + quote(name) + " in " + quote(shard.get<std::string>()) + ", which does not hold it");
  }
  return r;
}

struct RankFile {
  std::string name;
  std::uint64_t rank = 0, ranks = 0;
};

// rank-RRRRR-of-NNNNN.safetensors (at least one digit each; emit --rank writes five or more).
std::optional<RankFile> parse_rank_file(const std::string& name) {
  static const std::string pre = "rank-", mid = "-of-", ext = ".safetensors";
  if (name.rfind(pre, 0) != 0 || !name.ends_with(ext)) return std::nullopt;
  const std::string body = name.substr(pre.size(), name.size() - pre.size() - ext.size());
  const auto m = body.find(mid);
  if (m == std::string::npos) return std::nullopt;
  auto number = [](std::string_view s) -> std::optional<std::uint64_t> {
    if (s.empty() || s.size() > 19) return std::nullopt;
    std::uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return v;
  };
  const auto r = number(std::string_view(body).substr(0, m)), n = number(std::string_view(body).substr(m + mid.size()));
  if (!r || !n) return std::nullopt;
  return RankFile{name, *r, *n};
}

// The keys of a rank file's __metadata__ that are its own, not the checkpoint's.
constexpr const char* kShardsKey = "layerinit.shards";
constexpr const char* kMeshKey = "layerinit.mesh";

// `files` sorted by rank (then name).
std::unique_ptr<CheckpointReader> open_rank_files(const fs::path& dir, const std::vector<RankFile>& files) {
  for (std::size_t i = 0; i < files.size(); ++i) {
    const RankFile& f = files[i];
    if (f.ranks != files[0].ranks)
      invalid(dir, "holds rank files of different meshes: " + printable(files[0].name) + " (" + text(files[0].ranks) +
                       " ranks) and " + printable(f.name) + " (" + text(f.ranks) + " ranks)");
    if (f.rank >= f.ranks) invalid(dir / f.name, "names rank " + text(f.rank) + " of " + text(f.ranks));
    if (i > 0 && f.rank == files[i - 1].rank)
      invalid(dir, "holds two files of rank " + text(f.rank) + ": " + printable(files[i - 1].name) + " and " + printable(f.name));
  }
  auto r = std::make_unique<SafetensorsReader>("rank files");
  nlohmann::json mesh0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const fs::path p = dir / files[i].name;
    Header h = read_header(p);
    const auto shards = h.metadata.count(kShardsKey) ? nlohmann::json::parse(h.metadata[kShardsKey], nullptr, false)
                                                     : nlohmann::json();
    if (!shards.is_object()) invalid(p, "has no layerinit.shards (a JSON object) in its __metadata__");
    auto mesh = h.metadata.count(kMeshKey) ? nlohmann::json::parse(h.metadata[kMeshKey], nullptr, false) : nlohmann::json();
    if (mesh.is_object()) mesh.erase("rank");
    h.metadata.erase(kShardsKey);
    h.metadata.erase(kMeshKey);
    if (i == 0) {
      r->metadata_ = h.metadata;
      mesh0 = mesh;
    } else {
      if (mesh != mesh0)
        invalid(p, "is a rank file of another mesh than " + printable(files[0].name) + " (layerinit.mesh " +
                       printable(mesh.dump()) + ", not " + printable(mesh0.dump()) + ")");
      for (const auto& [k, v] : r->metadata_)
        if (!h.metadata.count(k) || h.metadata[k] != v)
          invalid(p, "__metadata__ " + quote(k) + " differs from " + printable(files[0].name) + "'s: another checkpoint's rank file");
      for (const auto& [k, v] : h.metadata)
        if (!r->metadata_.count(k))
          invalid(p, "__metadata__ " + quote(k) + " differs from " + printable(files[0].name) + "'s: another checkpoint's rank file");
    }
    const std::size_t first = r->tensors().size();
    r->add_file(p, files[i].name, std::move(h));
    for (std::size_t k = first; k < r->tensors().size(); ++k) {
      StoredTensor& t = r->mutable_tensors()[k];
      const auto it = shards.find(t.name);
      const std::string tn = "tensor " + quote(t.name);
      if (it == shards.end() || !it->is_object() || !it->contains("global_shape") || !it->contains("offset") ||
          !(*it)["global_shape"].is_array() || !(*it)["offset"].is_array())
        invalid(p, tn + " has no global_shape and offset in layerinit.shards");
      bool ok = (*it)["global_shape"].size() == t.shape.size() && (*it)["offset"].size() == t.shape.size();
      for (std::size_t d = 0; ok && d < t.shape.size(); ++d) {
        const auto& g = (*it)["global_shape"][d];
        const auto& o = (*it)["offset"][d];
        ok = g.is_number_unsigned() && o.is_number_unsigned() && o.get<std::uint64_t>() <= g.get<std::uint64_t>() &&
             t.shape[d] <= g.get<std::uint64_t>() - o.get<std::uint64_t>();
        if (ok) {
          t.global_shape.push_back(g.get<std::uint64_t>());
          t.offset.push_back(o.get<std::uint64_t>());
        }
      }
      if (!ok)
        invalid(p, tn + ": layerinit.shards places its " + shape_string(t.shape) + " piece at offset " +
                       printable((*it)["offset"].dump()) + " of global shape " + printable((*it)["global_shape"].dump()) +
                       ", which does not hold it");
    }
  }
  return r;
}

std::unique_ptr<CheckpointReader> open_directory(const fs::path& dir) {
  std::vector<RankFile> ranks;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (auto f = parse_rank_file(it->path().filename().string())) ranks.push_back(std::move(*f));
  if (ec) detail::fail("cannot read", dir, ec.value());
  std::sort(ranks.begin(), ranks.end(),
            [](const RankFile& a, const RankFile& b) { return a.rank != b.rank ? a.rank < b.rank : a.name < b.name; });
  const bool index = path_exists(dir / "model.safetensors.index.json"), single = path_exists(dir / "model.safetensors");
  if ((index || single) && !ranks.empty())
    invalid(dir, std::string("holds both a model (") + (index ? "model.safetensors.index.json" : "model.safetensors") +
                     ") and rank files (" + printable(ranks.front().name) + "): one checkpoint to a directory");
  if (index) return open_sharded(dir);
  if (single) return open_single(dir / "model.safetensors", "model.safetensors");
  if (!ranks.empty()) return open_rank_files(dir, ranks);
  invalid(dir, "holds no model.safetensors, model.safetensors.index.json or rank-RRRRR-of-NNNNN.safetensors files");
}

}  // namespace

std::unique_ptr<CheckpointReader> open_checkpoint_reader(const fs::path& path) {
  if (path.empty()) bad_argument("checkpoint path", "is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) detail::open_failed("cannot open", path, errno);
  if (S_ISDIR(st.st_mode)) return open_directory(path);
  if (!S_ISREG(st.st_mode)) invalid(path, "is neither a file nor a directory");
  open_file(path);  // unreadable (EACCES) is the environment's failure, not "no checkpoint"
  if (detail::is_hdf5_file(path)) return detail::open_hdf5_reader(path);
  if (path.extension() == ".safetensors" || looks_like_safetensors(path)) return open_single(path, "");
  invalid(path, "is neither an HDF5 file nor a safetensors file");
}

}  // namespace layerinit
