// The HDF5 checkpoint reader: every dataset of the file (root and groups), raw bytes in the file's
// own type, element ranges as hyperslab selections; a parallel emit's master reads through its
// virtual datasets' rank files.
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <layerinit/checkpoint/reader.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>

#include "detail.hpp"
#include "hdf5_detail.hpp"

namespace layerinit {
namespace {

namespace fs = std::filesystem;
using detail::Hid;
using detail::invalid;
using detail::QuietErrors;

// What HDF5 refuses in a file it opened is the file's fault (a corrupt object header, heap or
// B-tree: exit 2), unless its error stack names a system call's failure (an errno: I/O, memory).
[[noreturn]] void hdf5_fail(const std::string& what, const fs::path& p) {
  bool system = false;
  const std::string why = detail::hdf5_reason(&system);
  if (system) throw checkpoint_error("checkpoint: " + what + " " + printable(p.string()) + ": " + why);
  std::string rule = what;  // "cannot read dataset 'x' in" -> "cannot read dataset 'x' (why)"
  if (rule.ends_with(" in") || rule.ends_with(" of")) rule.resize(rule.size() - 3);
  invalid(p, rule + " (" + why + ")");
}

// A string attribute (variable or fixed length, one value); nullopt for any other.
std::optional<std::string> string_attribute(hid_t obj, const char* name) {
  Hid a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return std::nullopt;
  Hid type(H5Aget_type(a.get()), H5Tclose);
  Hid space(H5Aget_space(a.get()), H5Sclose);
  if (!type.valid() || !space.valid() || H5Tget_class(type.get()) != H5T_STRING || H5Sget_simple_extent_npoints(space.get()) != 1)
    return std::nullopt;
  if (H5Tis_variable_str(type.get()) > 0) {
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char* p = nullptr;
    if (H5Aread(a.get(), mem.get(), &p) < 0) return std::nullopt;
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::string s(size, '\0');
  if (size > 0 && H5Aread(a.get(), type.get(), s.data()) < 0) return std::nullopt;
  s.erase(std::find(s.begin(), s.end(), '\0'), s.end());  // null-terminated or -padded
  return s;
}

// The root's string attributes, and the names of the metadata attributes layerinit writes (as strings)
// that hold something else.
struct RootAttributes {
  std::map<std::string, std::string>* strings;
  std::vector<std::string> not_strings;
};

bool layerinit_metadata_name(std::string_view name) {
  for (const char* k : {"format_version", "library_version", "dtype", "seed", "recipe", "layout", "orientation", "model_spec",
                        "init_overrides", "dtype_overrides", "experts", detail::kRankFilesAttribute})
    if (name == k) return true;
  return false;
}

herr_t collect_root_attribute(hid_t loc, const char* name, const H5A_info_t*, void* out) {
  auto& attrs = *static_cast<RootAttributes*>(out);
  if (auto v = string_attribute(loc, name)) (*attrs.strings)[name] = std::move(*v);
  else if (layerinit_metadata_name(name)) attrs.not_strings.emplace_back(name);
  return 0;
}

herr_t collect_link(hid_t, const char* name, const H5L_info_t* info, void* out) {
  if (info->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// The stored type in words ("f64", "i32", "compound"), and the dtype when it is one layerinit makes:
// IEEE f32, a 2-byte float of 8 exponent bits (bf16, as hdf5_writer.cpp declares it) or of 5 (f16).
std::pair<std::optional<DType>, std::string> type_of(hid_t t) {
  const std::size_t size = H5Tget_size(t);
  switch (H5Tget_class(t)) {
    case H5T_FLOAT: {
      std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
      H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize);
      if (size == 2 && esize == 8 && msize == 7) return {DType::bf16, "bf16"};
      if (size == 2 && esize == 5 && msize == 10) return {DType::f16, "fp16"};
      if (size == 4 && esize == 8 && msize == 23) return {DType::f32, "fp32"};
      return {std::nullopt, std::string(1, 'f') += std::to_string(size * 8)};
    }
    case H5T_INTEGER:
      return {std::nullopt, std::string(1, H5Tget_sign(t) == H5T_SGN_NONE ? 'u' : 'i') += std::to_string(size * 8)};
    case H5T_STRING: return {std::nullopt, "string"};
    case H5T_BITFIELD: return {std::nullopt, "bitfield"};
    case H5T_OPAQUE: return {std::nullopt, "opaque"};
    case H5T_COMPOUND: return {std::nullopt, "compound"};
    case H5T_REFERENCE: return {std::nullopt, "reference"};
    case H5T_ENUM: return {std::nullopt, "enum"};
    case H5T_VLEN: return {std::nullopt, "vlen"};
    case H5T_ARRAY: return {std::nullopt, "array"};
    default: return {std::nullopt, "unknown"};
  }
}

class Hdf5Reader final : public CheckpointReader {
 public:
  explicit Hdf5Reader(const fs::path& path) : path_(path) {
    QuietErrors quiet;
    try {
      open();
    } catch (...) {
      H5Eclear2(H5E_DEFAULT);
      throw;
    }
  }

  std::string_view format() const override { return "hdf5"; }
  const std::vector<StoredTensor>& tensors() const override { return tensors_; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }

  void read(std::size_t k, std::uint64_t first, std::uint64_t n, void* out) override {
    LAYERINIT_EXPECTS(k < tensors_.size(), "checkpoint read: tensor index out of range");
    const StoredTensor& t = tensors_[k];
    LAYERINIT_EXPECTS(detail::element_size(t.dtype_text) > 0,
                      "checkpoint read: tensor " + quote(t.name) + " has dtype " + quote(t.dtype_text) + ", of no known element size");
    const std::uint64_t count = numel(t.shape);
    LAYERINIT_EXPECTS(first <= count && n <= count - first, "checkpoint read: elements [" + std::to_string(first) + ", +" +
                                                                 std::to_string(n) + ") leave tensor " + quote(t.name) +
                                                                 " of " + std::to_string(count));
    if (n == 0) return;
    QuietErrors quiet;
    if (open_ != k) {
      open_ = tensors_.size();
      ds_ = Hid(H5Dopen2(file_.get(), t.name.c_str(), dapl_.get()), H5Dclose);
      if (!ds_.valid()) hdf5_fail("cannot open dataset " + quote(t.name) + " in", path_);
      Hid type(H5Dget_type(ds_.get()), H5Tclose);
      mem_type_ = Hid(H5Tcopy(type.get()), H5Tclose);
      if (!mem_type_.valid() || (H5Tget_size(type.get()) > 1 && H5Tset_order(mem_type_.get(), H5T_ORDER_LE) < 0))
        hdf5_fail("cannot read dataset " + quote(t.name) + " in", path_);
      space_ = Hid(H5Dget_space(ds_.get()), H5Sclose);
      if (!space_.valid()) hdf5_fail("cannot read dataset " + quote(t.name) + " in", path_);
      open_ = k;
    }
    herr_t rc = 0;
    if (t.shape.empty()) {  // a scalar: its one element
      rc = H5Dread(ds_.get(), mem_type_.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
    } else {
      read_boxes(t, first, n, static_cast<unsigned char*>(out));
    }
    if (rc < 0) hdf5_fail("cannot read dataset " + quote(t.name) + " in", path_);
  }

 // Reads the first element of every tensor that has one: what the first read of each dataset
  // touches (its object header, its chunk index, a virtual dataset's source files).
  void touch_every_dataset() {
    for (std::size_t k = 0; k < tensors_.size(); ++k) {
      const std::uint64_t esize = detail::element_size(tensors_[k].dtype_text);
      if (esize == 0 || numel(tensors_[k].shape) == 0) continue;
      std::vector<unsigned char> one(esize);
      read(k, 0, 1, one.data());
    }
  }

 private:
  void open() {
    file_ = Hid(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file_.valid()) {
      // The file has HDF5's signature and could be opened and read: what HDF5 then refuses is the
      // file's (a cut file, a bad superblock: exit 2, as any broken format rule), unless HDF5 names a
      // system call's failure (an errno: a lock the filesystem refuses, an I/O error): the environment's.
      bool system = false;
      const std::string why = detail::hdf5_reason(&system);
      if (why.find("truncated file") != std::string::npos) invalid(path_, "a cut HDF5 file (" + why + ")");
      if (system) throw checkpoint_error("checkpoint: cannot open " + printable(path_.string()) + ": " + why);
      invalid(path_, "not a readable HDF5 file (" + why + ")");
    }
    // A virtual dataset's sources are named relative to the master's directory. HDF5 1.10.8 searches
    // it anyway (after HDF5_VDS_PREFIX and this prefix, before the working directory); the prefix
    // names it rather than rely on that search order.
    const fs::path dir = fs::absolute(path_).parent_path();
    dapl_ = Hid(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
    if (!dapl_.valid() || H5Pset_virtual_prefix(dapl_.get(), dir.c_str()) < 0) hdf5_fail("cannot open", path_);
    hsize_t idx = 0;
    RootAttributes attrs{&metadata_, {}};
    if (H5Aiterate2(file_.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_root_attribute, &attrs) < 0)
      hdf5_fail("cannot read the attributes of", path_);
    // A seed of 1.5 was passed over: verify then checked seed 0 and passed. Refused, as a safetensors
    // __metadata__ value that is not a string is.
    if (!attrs.not_strings.empty())
      invalid(path_, "attribute " + quote(attrs.not_strings.front()) + " is not a string (layerinit writes its metadata as one string each)");
    // HDF5 reads a virtual dataset's missing source as its fill value (zeros), no error.
    if (auto it = metadata_.find(detail::kRankFilesAttribute); it != metadata_.end()) {
      struct stat st {};
      if (::stat((dir / it->second).c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        invalid(path_, "its rank directory " + quote(it->second) +
                           " (layerinit.rank_files) is missing: its datasets would read as zeros");
    }
    std::vector<std::string> names;
    if (H5Lvisit(file_.get(), H5_INDEX_NAME, H5_ITER_INC, collect_link, &names) < 0) hdf5_fail("cannot read the groups of", path_);
    std::set<std::string> sources_seen;
    struct stat self {};
    if (::stat(path_.c_str(), &self) != 0) detail::open_failed("cannot read", path_, errno);
    for (const std::string& name : names) {
      Hid obj(H5Oopen(file_.get(), name.c_str(), H5P_DEFAULT), H5Oclose);
      if (!obj.valid()) hdf5_fail("cannot open " + quote(name) + " in", path_);
      if (H5Iget_type(obj.get()) != H5I_DATASET) continue;
      StoredTensor t;
      t.name = name;
      Hid type(H5Dget_type(obj.get()), H5Tclose), space(H5Dget_space(obj.get()), H5Sclose),
          dcpl(H5Dget_create_plist(obj.get()), H5Pclose);
      if (!type.valid() || !space.valid() || !dcpl.valid()) hdf5_fail("cannot read dataset " + quote(name) + " in", path_);
      switch (H5Sget_simple_extent_type(space.get())) {
        case H5S_SCALAR: break;
        case H5S_NULL: t.shape = {0}; break;  // no elements
        default: {
          std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(space.get()))));
          H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
          t.shape.assign(dims.begin(), dims.end());
        }
      }
      auto [dtype, text] = type_of(type.get());
      t.dtype = dtype;
      t.dtype_text = text;
      if (auto said = string_attribute(obj.get(), "dtype"); said && (*said == "bf16" || *said == "fp16" || *said == "fp32")) {
        if (*said != text)
          invalid(path_, "dataset " + quote(name) + ": its dtype attribute says " + *said + ", but its HDF5 type is " + text);
      }
      if (H5Pget_layout(dcpl.get()) == H5D_VIRTUAL) {
        std::size_t count = 0;
        if (H5Pget_virtual_count(dcpl.get(), &count) < 0) hdf5_fail("cannot read dataset " + quote(name) + " in", path_);
        for (std::size_t i = 0; i < count; ++i) {
          const ssize_t len = H5Pget_virtual_filename(dcpl.get(), i, nullptr, 0);
          if (len < 0) hdf5_fail("cannot read dataset " + quote(name) + " in", path_);
          std::string src(static_cast<std::size_t>(len) + 1, '\0');
          H5Pget_virtual_filename(dcpl.get(), i, src.data(), src.size());
          src.resize(static_cast<std::size_t>(len));
          const fs::path p = src == "." ? path_ : fs::path(src).is_absolute() ? fs::path(src) : dir / src;
          struct stat st {};
          if (::stat(p.c_str(), &st) != 0)
            invalid(path_, "dataset " + quote(name) + " reads from " + quote(src) + ", which is missing: it would read as zeros");
          if (st.st_dev == self.st_dev && st.st_ino == self.st_ino) check_source_in_file(name, i, dcpl.get());
          sources_seen.insert(src);
        }
      }
      tensors_.push_back(std::move(t));
    }
  }

  // A virtual dataset's mapping `i` whose source is this file: its source dataset must be there and
  // hold its own values. One that is virtual too (itself, or a chain back to it) made HDF5 recurse
  // until the stack overflowed; layerinit's masters read from rank files only.
  void check_source_in_file(const std::string& name, std::size_t i, hid_t dcpl) {
    const ssize_t len = H5Pget_virtual_dsetname(dcpl, i, nullptr, 0);
    if (len < 0) hdf5_fail("cannot read dataset " + quote(name) + " in", path_);
    std::string src(static_cast<std::size_t>(len) + 1, '\0');
    H5Pget_virtual_dsetname(dcpl, i, src.data(), src.size());
    src.resize(static_cast<std::size_t>(len));
    if (H5Lexists(file_.get(), src.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      invalid(path_, "dataset " + quote(name) + " reads from dataset " + quote(src) + " of this file, which is missing");
    }
    Hid source(H5Dopen2(file_.get(), src.c_str(), H5P_DEFAULT), H5Dclose);
    Hid plist(source.valid() ? H5Dget_create_plist(source.get()) : H5I_INVALID_HID, H5Pclose);
    if (!plist.valid()) hdf5_fail("cannot read dataset " + quote(src) + " in", path_);
    if (H5Pget_layout(plist.get()) == H5D_VIRTUAL)
      invalid(path_, "dataset " + quote(name) + " reads from dataset " + quote(src) +
                         " of this file, itself virtual (a chain that may lead back to itself)");
  }

  // Reads elements [first, first + n) (row-major) as at most 2 * rank boxes, one after the other
  // into `out`: up from the innermost dimension to align `first`, then down to cover the rest. Each
  // box is one H5Dread into a memory space of the box's own shape: against a 1-D memory space (or a
  // union of boxes) HDF5 maps every element to its chunk one by one (H5S_select_iterate), 20 times
  // slower than the file's bytes (22 MB/s for gpt2-large, docs/benchmarks.md "Verify against emit").
  void read_boxes(const StoredTensor& t, std::uint64_t first, std::uint64_t n, unsigned char* out) {
    const Shape& shape = t.shape;
    const std::uint64_t esize = detail::element_size(t.dtype_text);
    const std::size_t r = shape.size();
    std::vector<std::uint64_t> stride(r + 1, 1);  // stride[i]: elements per step of dimension i; stride[-1] the whole
    for (std::size_t i = r; i-- > 0;) stride[i] = stride[i + 1] * shape[i];
    // stride[i + 1] is dimension i's; stride[0] the tensor's.
    auto box = [&](std::uint64_t at, std::size_t dim, std::uint64_t rows) {
      std::vector<hsize_t> start(r), count(r);
      for (std::size_t i = 0; i < r; ++i) {
        start[i] = (at / stride[i + 1]) % shape[i];
        count[i] = i < dim ? 1 : i == dim ? rows : shape[i];
      }
      if (H5Sselect_hyperslab(space_.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0)
        hdf5_fail("cannot select in", path_);
      Hid mem(H5Screate_simple(static_cast<int>(r), count.data(), nullptr), H5Sclose);
      if (!mem.valid() || H5Dread(ds_.get(), mem_type_.get(), mem.get(), space_.get(), H5P_DEFAULT, out) < 0)
        hdf5_fail("cannot read dataset " + quote(t.name) + " in", path_);
      out += rows * stride[dim + 1] * esize;
    };
    std::uint64_t a = first;
    const std::uint64_t b = first + n;
    std::size_t dim = r - 1;
    // Up: at dimension dim, `a` is a multiple of its step; whole rows up to the next multiple of
    // the step of dimension dim - 1 (for dimension 0, the end of the tensor).
    for (;;) {
      const std::uint64_t step = stride[dim + 1], outer = stride[dim];
      const std::uint64_t next = (a / outer + (a % outer != 0)) * outer;
      if (next > b) break;
      if (next > a) box(a, dim, (next - a) / step);
      a = next;
      if (dim == 0 || a == b) break;
      --dim;
    }
    // Down: what is left lies inside one row of dimension dim - 1.
    for (std::size_t d = dim; a < b; ++d) {
      const std::uint64_t step = stride[d + 1];
      const std::uint64_t rows = (b - a) / step;
      if (rows > 0) box(a, d, rows);
      a += rows * step;
    }
  }

  fs::path path_;
  Hid file_, dapl_;
  std::vector<StoredTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  // The dataset last read, kept open: a tensor is read range after range.
  std::size_t open_ = static_cast<std::size_t>(-1);
  Hid ds_, mem_type_, space_;
};

// The probe child's memory beyond what it shares with its parent: HDF5 allocates what a corrupt size
// field says (a local heap of 7 GB read from a 30 KB file, in seconds of page zeroing). Reading the
// metadata and one element per dataset of a real file takes a small part of this.
std::uint64_t probe_memory(const fs::path& p) {
  std::error_code ec;
  const std::uint64_t size = fs::file_size(p, ec);
  return (std::uint64_t{1} << 30) + (ec ? 0 : 2 * size);
}

// The probe child's CPU time, in seconds: HDF5 loops forever on some corrupt global heaps (reading a
// string attribute). LAYERINIT_HDF5_PROBE_SECONDS sets it (a positive integer), else 60: a real file's
// metadata and first elements take a small part of it (docs/checkpoint.md).
unsigned probe_seconds() {
  if (const char* v = std::getenv("LAYERINIT_HDF5_PROBE_SECONDS")) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(v, &end, 10);
    if (end != v && *end == '\0' && n > 0 && n < 86400) return static_cast<unsigned>(n);
  }
  return 60;
}

// The process's address space now, in bytes (/proc/self/statm's first field); 0 when unknown.
std::uint64_t address_space_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long pages = 0;
  const bool ok = std::fscanf(f, "%llu", &pages) == 1;
  std::fclose(f);
  return ok ? pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

// Debian's HDF5 1.10.8 crashes on some files whose metadata is corrupt (a SIGSEGV reading an
// attribute's global heap in H5Aread, a double free closing the file in H5Fclose: 9 of 60 emitted
// files with 16 random bytes in their first 8 KiB), where h5py's HDF5 1.14 raises an error; on others
// it allocates what a corrupt size says. No check of ours can come before HDF5's own parsing, so a
// child process, its memory bounded, opens the file first, walks what opening it and the first read
// of each dataset touch, and closes it. A file that kills the child, or keeps it busy past its CPU time,
// is refused; one the child refuses
// is refused with its words (the parent does not redo what ran out of the child's memory). Without a
// process or a pipe to spare the file is opened unprobed.
void probe_in_child(const fs::path& p) {
  const std::uint64_t budget = probe_memory(p);
  const unsigned seconds = probe_seconds();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  if (pid == 0) {
    // Only HDF5 runs here, then _exit: no handler of the parent's (the CLI's "interrupted" line), no
    // atexit, no crash's words on the user's terminal (glibc's "double free detected").
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(fds[0]);
    if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) ::dup2(null, STDERR_FILENO);
    if (const std::uint64_t now = address_space_bytes(); now > 0) {
      const rlimit limit{now + budget, now + budget};
      ::setrlimit(RLIMIT_AS, &limit);
    }
    if (rlimit cpu{}; ::getrlimit(RLIMIT_CPU, &cpu) == 0) {  // SIGXCPU at the soft limit ends it
      cpu.rlim_cur = std::min<rlim_t>(seconds, cpu.rlim_max);
      ::setrlimit(RLIMIT_CPU, &cpu);
    }
    // What the parent is told: nothing (opened), or a kind and one line: 'i' checkpoint_invalid,
    // 'e' checkpoint_error, 'm' out of the child's memory.
    std::string said;
    try {
      Hdf5Reader r(p);
      r.touch_every_dataset();
    } catch (const checkpoint_invalid& e) {
      said = std::string("i") + e.what();
    } catch (const checkpoint_error& e) {
      said = std::string("e") + e.what();
    } catch (const std::bad_alloc&) {
      said = "m";
    } catch (...) {  // anything else: the parent's own open meets it again
    }
    for (std::size_t at = 0; at < said.size();) {
      const ssize_t n = ::write(fds[1], said.data() + at, said.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string said;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) said.append(buf, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    if (said.empty()) return;
    if (said[0] == 'i') throw checkpoint_invalid(said.substr(1));
    if (said[0] == 'e') throw checkpoint_error(said.substr(1));
    invalid(p, "not a readable HDF5 file (HDF5 asked for more than " + std::to_string(budget >> 20) +
                   " MiB reading its metadata and first elements: a size in the file is corrupt)");
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
    invalid(p, "not a readable HDF5 file (HDF5 spent " + std::to_string(seconds) +
                   " s of CPU reading its metadata and first elements, in a probe process: a loop in the file's structure? "
                   "LAYERINIT_HDF5_PROBE_SECONDS gives it more)");
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGKILL)
      throw checkpoint_error("checkpoint: reading the metadata of " + printable(p.string()) + " was interrupted (signal " +
                             std::to_string(sig) + ")");
  }
  invalid(p, "not a readable HDF5 file (HDF5 crashed reading its metadata, in a probe process: " +
                 (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) : "exit " + std::to_string(WEXITSTATUS(status))) + ")");
}

}  // namespace

namespace detail {

bool is_hdf5_file(const fs::path& p) noexcept {
  QuietErrors quiet;
#if H5_VERSION_GE(1, 12, 0)
  const htri_t r = H5Fis_accessible(p.c_str(), H5P_DEFAULT);
#else
  const htri_t r = H5Fis_hdf5(p.c_str());
#endif
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

std::unique_ptr<CheckpointReader> open_hdf5_reader(const fs::path& p) {
  // As the writers: HDF5's own cleanup at exit is not needed (hdf5_writer.cpp, open_hdf5).
  static const bool no_atexit = [] { return H5dont_atexit() >= 0; }();
  (void)no_atexit;
  probe_in_child(p);
  return std::make_unique<Hdf5Reader>(p);
}

}  // namespace detail

}  // namespace layerinit
