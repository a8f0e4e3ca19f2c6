// The HDF5 writer: one chunked dataset per declared tensor, written with direct chunk writes from
// the caller's memory (a chunk-sized staging buffer only when a write ends inside a chunk).
#include <hdf5.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "detail.hpp"
#include "hdf5_detail.hpp"
#include "hdf5_layout.hpp"

namespace layerinit {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoint writers assume a little-endian host");

namespace fs = std::filesystem;

using detail::Chunking;
using detail::choose_chunking;
using detail::Hid;
using detail::hdf5_fail;
using detail::QuietErrors;

// bf16: 1 sign, 8 exponent, 7 mantissa bits, bias 127, built with H5Tset_fields/H5Tset_ebias/H5Tset_size
// from a copy of IEEE f32 (HDF5 reference manual, H5T: "Defining custom floating-point types");
// readers convert it exactly.
Hid file_type(DType t) {
  if (t == DType::f32) return Hid(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  if (t == DType::f16) {
    hid_t h = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(h, 15, 10, 5, 0, 10);
    H5Tset_size(h, 2);
    H5Tset_ebias(h, 15);
    return Hid(h, H5Tclose);
  }
  hid_t h = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(h, 15, 7, 8, 0, 7);
  H5Tset_size(h, 2);
  H5Tset_ebias(h, 127);
  return Hid(h, H5Tclose);
}

bool write_string_attribute(hid_t obj, const std::string& name, const std::string& value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid attr(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) return false;
  const char* p = value.c_str();
  return H5Awrite(attr.get(), type.get(), &p) >= 0;
}

// --force replaces an HDF5 file only if it carries the root attributes every layerinit checkpoint
// has (docs/checkpoint.md); "" when it does, else why not.
std::string hdf5_ownership_impl(const fs::path& p) {
  static const char* const marks[] = {"format_version", "library_version", "model_spec"};
  QuietErrors quiet;
  Hid f(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  std::string why;
  if (!f.valid()) {
    why = "it is not an HDF5 file";
  } else {
    for (const char* m : marks)
      if (why.empty() && H5Aexists(f.get(), m) <= 0)
        why = std::string("it is an HDF5 file without the root attribute ") + m + " that layerinit writes";
  }
  H5Eclear2(H5E_DEFAULT);
  return why;
}

// A declared dataset. Open only while it is being written: an open HDF5 dataset holds its object
// header and layout state (about 20 KiB), so a checkpoint of 10^5 tiny tensors held open would take
// gigabytes for megabytes of data.
struct Dataset {
  Hid id;
  Chunking ch;
  std::size_t elem = 2;
  std::vector<unsigned char> staging;  // one chunk, only while a write has ended inside it
  std::uint64_t staged = 0;            // elements in staging
};

class Hdf5Writer final : public detail::WriterBase {
 public:
  Hdf5Writer(fs::path target, std::uint64_t planned, const detail::DatasetSource& datasets, const CheckpointMetadata& meta,
             const WriterOptions& opts)
      : WriterBase(std::move(target), opts, {false, hdf5_ownership_impl}) {
    admit(planned, datasets);
    create_temp([&] { create(meta); });
  }
  ~Hdf5Writer() override { abort(); }

 private:
  void write_elements(std::size_t i, std::uint64_t first, const void* bytes, std::uint64_t n) override {
    QuietErrors quiet;
    Dataset& d = ds_[i];
    if (!d.id.valid()) {
      d.id = Hid(H5Dopen2(file_.get(), d_[i].name.c_str(), dapl_.get()), H5Dclose);
      if (!d.id.valid()) hdf5_fail("cannot open dataset " + d_[i].name + " in", target_);
    }
    write_elements(d, first, static_cast<const unsigned char*>(bytes), n);
  }
  void dataset_complete(std::size_t i) override {
    QuietErrors quiet;
    ds_[i].staging = {};
    if (ds_[i].id.reset() < 0) hdf5_fail("cannot write", target_);
  }
  void finish() override {
    QuietErrors quiet;
    for (auto& d : ds_)
      if (d.id.reset() < 0) hdf5_fail("cannot write", target_);
    dapl_.reset();
    if (file_.reset() < 0) hdf5_fail("cannot write", target_);
  }
  void publish(detail::TempPath& tmp) override { detail::publish_hdf5(tmp, target_, opts_.overwrite); }
  void release() noexcept override {
    QuietErrors quiet;
    ds_.clear();
    dapl_.reset();
    file_.reset();
    H5Eclear2(H5E_DEFAULT);
  }

  void create(const CheckpointMetadata& meta) {
    QuietErrors quiet;
    const fs::path& tmp = temp_path();
    file_ = Hid(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file_.valid()) hdf5_fail("cannot create", tmp);
    for (const auto& [k, v] : detail::metadata_pairs(meta))
      if (!write_string_attribute(file_.get(), k, v)) hdf5_fail("cannot write attributes of", target_);
    ds_.resize(d_.size());
    // No chunk cache: every chunk is written whole, straight from the caller or the staging buffer.
    dapl_ = Hid(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
    H5Pset_chunk_cache(dapl_.get(), 0, 0, 1.0);
    for (std::size_t i = 0; i < d_.size(); ++i) {
      Dataset& d = ds_[i];
      d.ch = choose_chunking(d_[i], opts_.max_chunk_bytes);
      d.elem = dtype_size(d_[i].dtype);
      const int rank = static_cast<int>(d.ch.shape.size());
      const std::vector<hsize_t> shape(d.ch.shape.begin(), d.ch.shape.end()), chunk(d.ch.chunk.begin(), d.ch.chunk.end());
      Hid space(H5Screate_simple(rank, shape.data(), nullptr), H5Sclose);
      Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      if (!d.ch.empty) {  // else the default: contiguous, of no bytes
        H5Pset_chunk(dcpl.get(), rank, chunk.data());
        H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
        H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_INCR);
      }
      Hid type = file_type(d_[i].dtype);
      Hid id(H5Dcreate2(file_.get(), d_[i].name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), dapl_.get()),
             H5Dclose);
      if (!id.valid()) hdf5_fail("cannot create dataset " + d_[i].name + " in", target_);
      if (!write_string_attribute(id.get(), "dtype", std::string(dtype_name(d_[i].dtype))))
        hdf5_fail("cannot write attributes of", target_);
      if (id.reset() < 0) hdf5_fail("cannot write", target_);
    }
  }

  void write_chunk(Dataset& d, std::uint64_t chunk_first, const unsigned char* src) {
    // chunk_first is the chunk's first element; its coordinates: outer index, then block * k.
    const auto& c = d.ch;
    const std::uint64_t plane = c.shape[c.p] * c.inner;
    std::uint64_t outer = chunk_first / plane;
    const std::uint64_t block = (chunk_first % plane) / c.chunk_elements();
    std::vector<hsize_t> off(c.shape.size(), 0);
    off[c.p] = block * c.k;
    for (std::size_t i = c.p; i-- > 0;) {
      off[i] = outer % c.shape[i];
      outer /= c.shape[i];
    }
    if (H5Dwrite_chunk(d.id.get(), H5P_DEFAULT, 0, off.data(), c.chunk_elements() * d.elem, src) < 0)
      hdf5_fail("cannot write", target_);
  }

  void write_elements(Dataset& d, std::uint64_t pos, const unsigned char* src, std::uint64_t n) {
    const auto& c = d.ch;
    const std::uint64_t plane = c.shape[c.p] * c.inner;
    const std::uint64_t full = c.chunk_elements();
    while (n > 0) {
      const std::uint64_t r = pos % plane;
      const std::uint64_t chunk_first = pos - r % full;
      const std::uint64_t rows_left = c.shape[c.p] - (r / full) * c.k;
      const std::uint64_t cn = std::min(c.k, rows_left) * c.inner;  // elements in this chunk
      const std::uint64_t within = pos - chunk_first;
      if (within == 0 && n >= cn && cn == full) {  // a whole chunk straight from the caller
        write_chunk(d, chunk_first, src);
        pos += cn;
        src += cn * d.elem;
        n -= cn;
        continue;
      }
      if (d.staging.empty()) d.staging.assign(full * d.elem, 0);
      const std::uint64_t take = std::min(n, cn - within);
      std::memcpy(d.staging.data() + within * d.elem, src, take * d.elem);
      d.staged = within + take;
      pos += take;
      src += take * d.elem;
      n -= take;
      if (d.staged == cn) {  // complete (an edge chunk is padded with the zeros already there)
        std::fill(d.staging.begin() + static_cast<std::ptrdiff_t>(cn * d.elem), d.staging.end(), 0);
        write_chunk(d, chunk_first, d.staging.data());
        d.staged = 0;
      }
    }
  }

  Hid file_;
  Hid dapl_;  // how datasets are opened
  std::vector<Dataset> ds_;
};

}  // namespace


namespace detail {
std::unique_ptr<CheckpointWriter> open_hdf5(const fs::path& target, std::uint64_t planned, const DatasetSource& datasets,
                                            const CheckpointMetadata& meta, const WriterOptions& opts) {
  // HDF5 1.10's atexit handler (H5_term_library -> H5F__close_cb) crashes on a file whose close failed
  // (disk full, RLIMIT_FSIZE), turning a clean error exit into SIGSEGV in any program using this
  // library. Our writers close everything they open, so HDF5's own cleanup at exit is not needed.
  static const bool no_atexit = [] { return H5dont_atexit() >= 0; }();
  (void)no_atexit;
  check_hdf5_options(target, opts);
  return std::make_unique<Hdf5Writer>(normalize_target(target), planned, datasets, meta, opts);
}

void check_hdf5_options(const fs::path& target, const WriterOptions& opts) {
  // normalize_target would drop the slash of "newdir/" and write a file named newdir: refuse it.
  if (!target.has_filename() || target.filename() == "." || target.filename() == "..")
    bad_argument("checkpoint hdf5 output", target.string(), "names a directory; an HDF5 checkpoint is a file");
  if (opts.max_chunk_bytes == 0 || opts.max_chunk_bytes > (std::uint64_t{1} << 32) - 1)
    bad_argument("checkpoint max_chunk_bytes", opts.max_chunk_bytes, "must be in [1, 4 GiB)");
}
}  // namespace detail

std::unique_ptr<CheckpointWriter> open_hdf5_writer(const std::filesystem::path& target,
                                                   std::vector<DatasetSpec> datasets,
                                                   const CheckpointMetadata& meta, const WriterOptions& opts) {
  detail::validate_datasets(datasets, CheckpointFormat::hdf5);
  const std::uint64_t planned = planned_bytes(CheckpointFormat::hdf5, datasets, meta, opts);
  return detail::open_hdf5(target, planned, [&] { return std::move(datasets); }, meta, opts);
}

namespace detail {
std::string hdf5_ownership(const fs::path& p) { return hdf5_ownership_impl(p); }

void write_hdf5_virtual(const fs::path& path, const std::vector<DatasetSpec>& d,
                        const std::vector<std::vector<VirtualSource>>& sources, const CheckpointMetadata& meta,
                        const fs::path& shown) {
  static const bool no_atexit = [] { return H5dont_atexit() >= 0; }();  // as open_hdf5_writer
  (void)no_atexit;
  QuietErrors quiet;
  try {
    Hid file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.valid()) hdf5_fail("cannot create", shown);
    for (const auto& [k, v] : metadata_pairs(meta))
      if (!write_string_attribute(file.get(), k, v)) hdf5_fail("cannot write attributes of", shown);
    for (std::size_t i = 0; i < d.size(); ++i) {
      const std::vector<hsize_t> shape(d[i].shape.begin(), d[i].shape.end());
      const int rank = static_cast<int>(shape.size());
      Hid vspace(H5Screate_simple(rank, shape.data(), nullptr), H5Sclose);
      Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      for (const VirtualSource& s : sources.at(i)) {
        // Rows [first, first + count) of dimension 0, every element of the others.
        std::vector<hsize_t> start(shape.size(), 0), count = shape;
        start[0] = s.first;
        count[0] = s.count;
        Hid src(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
        if (H5Sselect_hyperslab(vspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
            H5Pset_virtual(dcpl.get(), vspace.get(), s.file.c_str(), d[i].name.c_str(), src.get()) < 0)
          hdf5_fail("cannot map dataset " + d[i].name + " in", shown);
      }
      H5Sselect_all(vspace.get());
      Hid type = file_type(d[i].dtype);
      Hid ds(H5Dcreate2(file.get(), d[i].name.c_str(), type.get(), vspace.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
             H5Dclose);
      if (!ds.valid()) hdf5_fail("cannot create dataset " + d[i].name + " in", shown);
      if (!write_string_attribute(ds.get(), "dtype", std::string(dtype_name(d[i].dtype))))
        hdf5_fail("cannot write attributes of", shown);
      if (ds.reset() < 0) hdf5_fail("cannot write", shown);
    }
    if (file.reset() < 0) hdf5_fail("cannot write", shown);
  } catch (...) {
    H5Eclear2(H5E_DEFAULT);
    throw;
  }
  fsync_path(path, false);
}

namespace {
// The root attribute `name` of the HDF5 file `p` as a string; nullopt when p is no HDF5 file or has no
// such string attribute. Never throws.
std::optional<std::string> hdf5_string_attribute(const fs::path& p, const char* name) noexcept {
  QuietErrors quiet;
  std::optional<std::string> out;
  Hid f(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (f.valid() && H5Aexists(f.get(), name) > 0) {
    Hid a(H5Aopen(f.get(), name, H5P_DEFAULT), H5Aclose);
    Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    Hid stored(a.valid() ? H5Aget_type(a.get()) : H5I_INVALID_HID, H5Tclose);
    char* text = nullptr;
    if (stored.valid() && H5Tis_variable_str(stored.get()) > 0 && H5Aread(a.get(), type.get(), &text) >= 0 && text) {
      out = std::string(text);
      H5free_memory(text);
    }
  }
  H5Eclear2(H5E_DEFAULT);
  return out;
}

// After a master at `target` was replaced: removes the rank directory `name` it named, if it is one a
// parallel emit makes. Never throws: the new checkpoint is published by then.
void remove_replaced_rank_dir(const fs::path& target, const std::string& name) noexcept {
  // Only a directory named like the ones emit_parallel makes for this target, holding only rank
  // files: a master edited to name anything else removes nothing.
  const std::string prefix = target.filename().string() + ".ranks-";
  if (name.size() != prefix.size() + 6 || name.rfind(prefix, 0) != 0 || name.find('/') != std::string::npos) return;
  const fs::path dir = target.parent_path() / name;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (!fs::is_regular_file(it->symlink_status(ec)) || f.rfind("rank-", 0) != 0 || !f.ends_with(".h5")) return;
  }
  if (!ec) fs::remove_all(dir, ec);
}
}  // namespace

std::optional<std::string> hdf5_rank_files(const fs::path& target) noexcept {
  return is_hdf5_file(target) ? hdf5_string_attribute(target, kRankFilesAttribute) : std::nullopt;
}

void publish_hdf5(TempPath& tmp, const fs::path& target, bool overwrite, std::string_view keep) {
  std::optional<std::string> old_ranks;
  if (overwrite) {
    old_ranks = hdf5_string_attribute(target, kRankFilesAttribute);
    check_replaceable(target, false, hdf5_ownership_impl);
  }
  tmp.publish(target, overwrite);
  if (old_ranks && *old_ranks != keep) remove_replaced_rank_dir(target, *old_ranks);
}
}  // namespace detail

}  // namespace layerinit
