// Internal to checkpoint/: what both writers share (and tools/trace.cpp, which publishes its CSV the
// same way). Not installed as API.
#pragma once

#include <cstdint>
#include <optional>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <layerinit/checkpoint/reader.hpp>
#include <layerinit/checkpoint/writer.hpp>

namespace layerinit::detail {

namespace fs = std::filesystem;

// Appends key: value to a JSON object whose keys are known to be distinct (dataset names): the
// ordered object's operator[] searches its keys one by one, quadratic over a checkpoint's tensors.
inline void append_member(nlohmann::ordered_json& object, std::string key, nlohmann::ordered_json value) {
  if (object.is_null()) object = nlohmann::ordered_json::object();
  object.get_ref<nlohmann::ordered_json::object_t&>().emplace_back(std::move(key), std::move(value));
}

// throws checkpoint_error("checkpoint: <what> <path>: <strerror(err)>")
[[noreturn]] void fail(const std::string& what, const fs::path& path, int err);
// the same message as checkpoint_refused: the path, not the environment, is the problem
[[noreturn]] void refuse(const std::string& what, const fs::path& path, int err);
// refuse() when `err` says the path names nothing usable (ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG: bad
// input), else fail() (EACCES, EROFS, EIO, ENOSPC...: the environment)
[[noreturn]] void fail_at(const std::string& what, const fs::path& path, int err);

// Absolute, normalized, no trailing separator; throws bad_input on an empty path.
fs::path normalize_target(const fs::path& target);

// With overwrite, whether an existing target is something this writer wrote: "" if it is, else
// why not ("it holds notes.txt, which layerinit does not write").
using OwnershipCheck = std::function<std::string(const fs::path&)>;

// Before any work: the target must not exist unless overwrite. With overwrite an existing target is
// replaced only if it is what the writer writes (a regular file for a file format, a directory
// otherwise; no link, device, FIFO or socket; not a mount point; not the current directory or one
// of its parents) and `ours` accepts it; else checkpoint_refused. Its directory must exist, and
// there must be room for `bytes`.
void preflight(const fs::path& target, bool target_is_dir, bool overwrite, bool check_space, std::uint64_t bytes,
               const OwnershipCheck& ours);
// The overwrite half of preflight, again just before publishing: an hours-long write leaves time
// for someone to put a file of their own into the directory about to be replaced.
void check_replaceable(const fs::path& target, bool target_is_dir, const OwnershipCheck& ours);
// The formats' ownership checks: "" when --force may replace `p`, else why not.
std::string hdf5_ownership(const fs::path& p);
std::string safetensors_ownership(const fs::path& dir);
// The __metadata__ of a .safetensors file, when it is one (a readable header of at most the format's
// 100 MB holding a JSON object). Never throws.
std::optional<nlohmann::json> safetensors_metadata(const fs::path& file) noexcept;

// Removes `p` and everything under it. Others removing the same tree at the same time (the ranks of
// a parallel emit cleaning up together) are no error: an entry already gone counts as removed, and
// entries that appear meanwhile are removed too. false when something is left; never throws.
bool remove_tree(const fs::path& p) noexcept;

// A staging directory holds this file while its process works in it, locked (flock) for as long
// as the TempPath lives: a directory with the file unlocked was left by a process that died.
inline constexpr const char* kStagingMarker = ".layerinit-staging";

// Removes what an earlier write to `target` left when its process was killed: the directories beside
// it named ".<name>.tmp-XXXXXX" (any writer's staging: an HDF5 or .safetensors file's, a safetensors
// directory, a parallel emit's) or "<name>.ranks-XXXXXX" (a parallel HDF5 emit's rank files) that
// hold kStagingMarker and whose lock no process holds. Nothing else is touched: not a directory
// without the marker (not layerinit's, or a published rank directory), not one in use. Never throws.
void remove_stale_staging(const fs::path& target) noexcept;

// A test hook: SIGKILL here when LAYERINIT_TEST_KILL_AT is "<point>:<target's file name>" (points
// "before-rename", "after-rename": TempPath::publish's), a process killed at the worst moment.
void test_kill_point(std::string_view point, const fs::path& target) noexcept;

// The rank directory (layerinit.rank_files) the parallel HDF5 master at `target` names; nullopt when
// `target` is no such master. Never throws.
std::optional<std::string> hdf5_rank_files(const fs::path& target) noexcept;

// A temporary file or directory staged beside the target in a marked directory
// "<dir>/.<name>.tmp-XXXXXX": a directory target is that directory, a file target the file <name>
// inside it. Removed by remove() or the destructor unless released by publish() or keep(). The
// directory holds kStagingMarker, locked until it is published, kept or removed, so whatever a
// killed process left is found by remove_stale_staging, files and directories alike.
class TempPath {
 public:
  TempPath(const fs::path& target, bool directory);
  // The staging directory "<dir>/<name_template>" with the template's trailing XXXXXX made unique
  // (mkdtemp); a file is created in it named as `shown`'s file. Errors name `shown` (empty: the
  // template's path).
  TempPath(const fs::path& dir, const std::string& name_template, bool directory, const fs::path& shown = {});
  ~TempPath() {
    remove();
    unmark();
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  const fs::path& path() const { return path_; }
  void remove() noexcept;
  // fsyncs and renames the temporary onto `target` (replacing it only if overwrite), removes a
  // file's staging directory, then fsyncs the parent directory. Afterwards nothing is left to remove.
  void publish(const fs::path& target, bool overwrite);
  // Takes the marker out of a directory that became part of a checkpoint (a parallel HDF5 emit's
  // rank directory, once its master is published): no later emit takes it for stale staging. It is
  // still removed by remove() or the destructor.
  void unmark() noexcept;
  // Keeps the path where it is, with nothing left to remove (a parallel HDF5 checkpoint's rank
  // directory, once its master is published). Directories only.
  void keep() noexcept {
    unmark();
    live_ = false;
  }

 private:
  fs::path path_;   // the directory, or the file in it
  fs::path stage_;  // the marked staging directory
  bool directory_;
  bool live_ = false;
  int lock_fd_ = -1;  // the marker's, while marked
};

// Elements written so far per dataset: enforces contiguous, in-order writes.
class Progress {
 public:
  Progress() = default;
  explicit Progress(const std::vector<DatasetSpec>& d);
  // A bad index, an out-of-order or out-of-range write is misuse: layerinit::logic_error.
  void check(std::size_t dataset, std::uint64_t first, const void* bytes, std::uint64_t n) const;
  void advance(std::size_t dataset, std::uint64_t n) { written_[dataset] += n; }
  bool complete(std::size_t dataset) const { return written_[dataset] == numel_[dataset]; }
  // Throws checkpoint_error naming the first dataset not fully written.
  void check_complete(const fs::path& target) const;

 private:
  const std::vector<DatasetSpec>* d_ = nullptr;
  std::vector<std::uint64_t> numel_, written_;
};

// Where a writer's dataset list comes from: made only after the target and the space were checked.
using DatasetSource = std::function<std::vector<DatasetSpec>()>;

// What a format's targets are: a file or a directory, and which existing ones --force may replace.
struct TargetRules {
  bool directory = false;
  OwnershipCheck ours;
};
TargetRules target_rules(CheckpointFormat f);

// The lifecycle both formats share. A format's constructor calls admit() (preflight against the
// planned bytes, then the dataset list), prepares what it needs, then create_temp() (the temporary
// beside the target, then the format's files in it). write(): order checked, any failure aborts;
// commit(): every dataset complete, the format's finish(), the caller's before_publish, publish();
// abort(): idempotent, closes the format's handles and removes the temporary. A format supplies
// only its steps. Its destructor
// must call abort(): the base's cannot reach the format's release().
class WriterBase : public CheckpointWriter {
 public:
  void write(std::size_t dataset, std::uint64_t first, const void* bytes, std::uint64_t n) final;
  void commit(const BeforePublish& before_publish = {}) final;
  void abort() noexcept final;
  const std::vector<DatasetSpec>& datasets() const final { return d_; }
  const fs::path& target() const final { return target_; }

 protected:
  WriterBase(fs::path target, const WriterOptions& opts, TargetRules rules);
  void admit(std::uint64_t planned, const DatasetSource& datasets);
  template <class F> void create_temp(F&& create) {
    tmp_.emplace(target_, rules_.directory);
    guarded(create);
  }
  template <class F> void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      abort();
      throw;
    }
  }
  const fs::path& temp_path() const { return tmp_->path(); }

  // The format's steps.
  virtual void write_elements(std::size_t dataset, std::uint64_t first, const void* bytes, std::uint64_t n) = 0;
  virtual void dataset_complete(std::size_t) {}
  virtual void finish() = 0;            // flush and close everything in the temporary
  virtual void release() noexcept = 0;  // after a failure: close what is open (the base removes the files)
  // Renames the finished temporary onto the target: the ownership check again (overwrite: an
  // hours-long write leaves time for someone to put a file of their own there), then tmp.publish.
  virtual void publish(TempPath& tmp);

  fs::path target_;
  std::vector<DatasetSpec> d_;
  WriterOptions opts_;
  TargetRules rules_;

 private:
  enum class State { open, committed, aborted };
  void require_open() const;

  Progress progress_;
  std::optional<TempPath> tmp_;
  State state_ = State::open;
};

// A virtual dataset's source: rows [first, first + count) of dimension 0 of the virtual dataset are
// the dataset of the same name in `file` (a path relative to the virtual file's directory).
struct VirtualSource {
  std::string file;
  std::uint64_t first = 0, count = 0;
};
// Creates the HDF5 file `path` (a fresh temporary; not published) whose datasets `d` are virtual
// datasets over sources[i], with the root attributes of `meta` and each dataset's dtype attribute,
// as the HDF5 writer writes them. Failures throw checkpoint_error naming `shown`.
void write_hdf5_virtual(const fs::path& path, const std::vector<DatasetSpec>& d,
                        const std::vector<std::vector<VirtualSource>>& sources, const CheckpointMetadata& meta,
                        const fs::path& shown);
// The master attribute naming a parallel HDF5 checkpoint's rank directory.
inline constexpr const char* kRankFilesAttribute = "layerinit.rank_files";
// The format's writers after the factories' argument checks: the target and the space for `planned`
// bytes are checked (WriterBase::admit) before `datasets` makes the (validated) list.
std::unique_ptr<CheckpointWriter> open_hdf5(const fs::path& target, std::uint64_t planned, const DatasetSource& datasets,
                                            const CheckpointMetadata& meta, const WriterOptions& opts);
std::unique_ptr<CheckpointWriter> open_safetensors(const fs::path& target, bool single_file, std::uint64_t planned,
                                                   const DatasetSource& datasets, const CheckpointMetadata& meta,
                                                   const WriterOptions& opts);
// An HDF5 target is a file ("newdir/" is refused) and max_chunk_bytes lies in [1, 4 GiB): throws
// bad_input.
void check_hdf5_options(const fs::path& target, const WriterOptions& opts);
// Publishes the HDF5 file `tmp` onto `target` (with overwrite, once check_replaceable passes). A
// parallel master it replaces has its rank directory removed after the rename, if it is one a
// parallel emit makes ("<target name>.ranks-XXXXXX" beside it, holding only rank-*.h5 files) and
// not `keep` (the new master's own); that removal never throws, the new file being published.
void publish_hdf5(TempPath& tmp, const fs::path& target, bool overwrite, std::string_view keep = {});

// Each format's share of planned_bytes (PlannedBytes): the data and per-dataset overhead of `count`
// datasets like `each` whose names take `name_bytes`, and the fixed part on top of the sums.
struct PlannedRun {
  std::uint64_t data = 0, overhead = 0;
};
PlannedRun hdf5_planned_run(const DatasetSpec& each, std::uint64_t count, std::uint64_t name_bytes,
                            std::uint64_t max_chunk_bytes);
std::uint64_t hdf5_planned_fixed(std::uint64_t meta_bytes);
PlannedRun safetensors_planned_run(const DatasetSpec& each, std::uint64_t count, std::uint64_t name_bytes);
std::uint64_t safetensors_planned_fixed(std::uint64_t meta_bytes, std::uint64_t datasets, std::uint64_t max_shard_size,
                                        std::uint64_t config_bytes);

// Names unique, non-empty, not __metadata__, without '/' in HDF5; rank >= 1, dims > 0; slab_elements a suffix product or 0.
void validate_datasets(const std::vector<DatasetSpec>& d, CheckpointFormat f);
// The metadata as ordered key/value pairs (fixed keys first, then extra); library_version filled.
std::vector<std::pair<std::string, std::string>> metadata_pairs(const CheckpointMetadata& m);

// pwrite all of it; on failure throws via fail("cannot write", shown, errno).
void full_pwrite(int fd, const void* p, std::uint64_t n, std::uint64_t offset, const fs::path& shown);
void fsync_path(const fs::path& p, bool directory);  // throws on failure
void write_small_file(const fs::path& p, const std::string& text, const fs::path& shown);

// The readers' (reader.cpp, reader_hdf5.cpp).
// throws checkpoint_invalid("checkpoint: <file>: <rule>")
[[noreturn]] void invalid(const fs::path& file, const std::string& rule);
// `what` of `path` failed with `err`: checkpoint_invalid when the path names nothing usable (ENOENT,
// ENOTDIR, ELOOP, ENAMETOOLONG), else fail() (the environment).
[[noreturn]] void open_failed(const std::string& what, const fs::path& path, int err);
// Bytes per element of a StoredTensor::dtype_text; 0 when unknown.
std::uint64_t element_size(std::string_view dtype_text);
bool is_hdf5_file(const fs::path& p) noexcept;
std::unique_ptr<CheckpointReader> open_hdf5_reader(const fs::path& p);

}  // namespace layerinit::detail
