// What both checkpoint writers share: validation, the target and free space checks, temporary
// paths, atomic publish, the writer lifecycle, format names and planned sizes.
#include "detail.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include <layerinit/config.hpp>
#include <layerinit/core/bytes.hpp>
#include <layerinit/core/text.hpp>

namespace layerinit {
namespace detail {

void fail(const std::string& what, const fs::path& path, int err) {
  throw checkpoint_error("checkpoint: " + what + " " + printable(path.string()) + ": " + std::strerror(err));
}

void refuse(const std::string& what, const fs::path& path, int err) {
  throw checkpoint_refused("checkpoint: " + what + " " + path.string() + ": " + std::strerror(err));
}

fs::path normalize_target(const fs::path& target) {
  if (target.empty()) bad_argument("checkpoint output path", "is empty");
  fs::path p = fs::absolute(target).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (!p.has_filename() || p == p.root_path()) bad_argument("checkpoint output path", target.string(), "names no file or directory");
  return p;
}

void fail_at(const std::string& what, const fs::path& path, int err) {
  if (err == ENOENT || err == ENOTDIR || err == ELOOP || err == ENAMETOOLONG) refuse(what, path, err);
  fail(what, path, err);
}

namespace {

// Why --force may not replace the existing `target` (lstat in `st`), or "" when it may.
std::string not_replaceable(const fs::path& target, const struct stat& st, bool target_is_dir, const OwnershipCheck& ours) {
  if (S_ISLNK(st.st_mode)) return "it is a symbolic link";
  if (S_ISFIFO(st.st_mode)) return "it is a FIFO";
  if (S_ISSOCK(st.st_mode)) return "it is a socket";
  if (S_ISCHR(st.st_mode)) return "it is a character device";
  if (S_ISBLK(st.st_mode)) return "it is a block device";
  if (target_is_dir && !S_ISDIR(st.st_mode)) return "it is a file, and this checkpoint is a directory";
  if (S_ISDIR(st.st_mode)) {
    struct stat parent{};
    if (::stat(target.parent_path().c_str(), &parent) == 0 && (parent.st_dev != st.st_dev || parent.st_ino == st.st_ino))
      return "it is a mount point";
    // Replacing the directory a shell sits in (or one above it) would pull it from under the user.
    std::error_code ec;
    const fs::path cwd = fs::current_path(ec), real = fs::canonical(target, ec);
    if (!ec && !cwd.empty()) {
      const auto [a, b] = std::mismatch(real.begin(), real.end(), cwd.begin(), cwd.end());
      if (a == real.end()) return "it is the current directory or one of its parents";
    }
  }
  return ours(target);
}

void check_replaceable(const fs::path& target, const struct stat& st, bool target_is_dir, const OwnershipCheck& ours) {
  if (!target_is_dir && S_ISDIR(st.st_mode))
    throw checkpoint_refused("checkpoint: " + target.string() + " is a directory, not a file");
  const std::string why = not_replaceable(target, st, target_is_dir, ours);
  if (!why.empty())
    throw checkpoint_refused("checkpoint: refusing to replace " + target.string() +
                             " (--force replaces only what layerinit wrote): " + why);
}
}  // namespace

void check_replaceable(const fs::path& target, bool target_is_dir, const OwnershipCheck& ours) {
  struct stat st{};
  if (::lstat(target.c_str(), &st) == 0) check_replaceable(target, st, target_is_dir, ours);
}

void preflight(const fs::path& target, bool target_is_dir, bool overwrite, bool check_space, std::uint64_t bytes,
               const OwnershipCheck& ours) {
  struct stat st{};
  if (::lstat(target.c_str(), &st) == 0) {
    if (!overwrite)
      throw checkpoint_refused("checkpoint: refusing to overwrite existing " + target.string() + " (use --force)");
    check_replaceable(target, st, target_is_dir, ours);
  } else if (errno != ENOENT) {
    fail_at("cannot access", target, errno);
  }
  const fs::path dir = target.parent_path();
  if (::stat(dir.c_str(), &st) != 0) {
    fail_at("cannot use output directory", dir, errno);
  }
  if (!S_ISDIR(st.st_mode)) refuse("cannot use output directory", dir, ENOTDIR);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) fail("cannot write into", dir, errno);
  if (check_space) check_free_space(dir, bytes);
}

namespace {
// The process's umask without changing it: umask(2) can only be read by setting it, which would
// race with files other threads create; Linux reports it in /proc/self/status (since 4.7).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    char* end = nullptr;
    const unsigned long m = line.rfind("Umask:", 0) == 0 ? std::strtoul(line.c_str() + 6, &end, 8) : 0;
    if (end != nullptr && end != line.c_str() + 6) return static_cast<mode_t>(m & 0777);
  }
  const mode_t m = ::umask(022);
  ::umask(m);
  return m;
}
}  // namespace

namespace {
std::string temp_name(const fs::path& target) {
  std::string name = ".";  // (not "." + string: GCC 12 warns -Wrestrict falsely)
  name += target.filename().string();
  name += ".tmp-XXXXXX";
  return name;
}
}  // namespace

TempPath::TempPath(const fs::path& target, bool directory)
    : TempPath(target.parent_path(), temp_name(target), directory, target) {}

TempPath::TempPath(const fs::path& dir, const std::string& name_template, bool directory, const fs::path& shown)
    : directory_(directory) {
  std::string tmpl = (dir / name_template).string();
  const fs::path target = shown.empty() ? dir / name_template : shown;  // for messages
  // mkdtemp creates 0700; the result gets the mode any new file or directory gets under the user's
  // umask, as if created with open(0666) or mkdir(0777).
  const mode_t mask = current_umask();
  const char* what = directory ? "cannot create a temporary directory beside" : "cannot create a temporary file beside";
  if (::mkdtemp(tmpl.data()) == nullptr) fail(what, target, errno);
  ::chmod(tmpl.c_str(), 0777 & ~mask);
  // A file is staged in a marked directory too: a killed writer's file is then found and removed
  // the way its directories are (remove_stale_staging), one mechanism for both.
  // The marker is locked under another name, then renamed: a cleaner never sees it unlocked.
  stage_ = tmpl;
  path_ = directory ? stage_ : stage_ / (shown.empty() ? fs::path(name_template) : shown).filename();
  const fs::path fresh = stage_ / ".layerinit-staging-new";
  lock_fd_ = ::open(fresh.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666 & ~mask);
  int fd = -1;
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX) != 0 || ::rename(fresh.c_str(), (stage_ / kStagingMarker).c_str()) != 0 ||
      (!directory && (fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666 & ~mask)) < 0)) {
    const int e = errno;
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
    remove_tree(stage_);
    fail(what, target, e);
  }
  if (fd >= 0) ::close(fd);
  live_ = true;
}

void TempPath::remove() noexcept {
  if (!live_) return;
  unmark();  // first: its descriptor may be the last one the removal needs
  remove_tree(stage_);
  live_ = false;
}

void TempPath::unmark() noexcept {
  if (lock_fd_ < 0) return;
  ::unlink((stage_ / kStagingMarker).c_str());
  ::close(lock_fd_);
  lock_fd_ = -1;
}

bool remove_tree(const fs::path& p) noexcept {
  for (int round = 0; round < 16; ++round) {
    struct stat st{};
    if (::lstat(p.c_str(), &st) != 0) return errno == ENOENT;
    if (!S_ISDIR(st.st_mode)) return ::unlink(p.c_str()) == 0 || errno == ENOENT;
    if (DIR* d = ::opendir(p.c_str())) {
      std::vector<std::string> names;
      while (const dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
      ::closedir(d);
      for (const auto& n : names) remove_tree(p / n);
    } else if (errno != ENOENT) {
      return false;
    }
    if (::rmdir(p.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != ENOTEMPTY && errno != EEXIST) return false;  // else something appeared: again
  }
  return false;
}

void test_kill_point(std::string_view point, const fs::path& target) noexcept {
  const char* at = std::getenv("LAYERINIT_TEST_KILL_AT");
  if (at && std::string(point) + ":" + target.filename().string() == at) std::raise(SIGKILL);
}

void remove_stale_staging(const fs::path& target) noexcept {
  const std::string name = target.filename().string();
  const std::string tmp_prefix = "." + name + ".tmp-", ranks_prefix = name + ".ranks-";
  std::error_code ec;
  for (fs::directory_iterator it(target.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    const bool ours = (entry.size() == tmp_prefix.size() + 6 && entry.rfind(tmp_prefix, 0) == 0) ||
                      (entry.size() == ranks_prefix.size() + 6 && entry.rfind(ranks_prefix, 0) == 0);
    std::error_code st;
    if (!ours || !fs::is_directory(it->symlink_status(st))) continue;
    const int fd = ::open((it->path() / kStagingMarker).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // no marker: not staging, or already published
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // its process is gone
      // A parallel HDF5 emit's rank directory stays marked until its master is out: one the master
      // at the target names was published, its process killed before it took the marker out.
      if (entry.rfind(ranks_prefix, 0) == 0 && hdf5_rank_files(target) == entry) ::unlink((it->path() / kStagingMarker).c_str());
      else remove_tree(it->path());
    }
    ::close(fd);
  }
}

void fsync_path(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", p, errno);
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot sync", p, e);
  }
  ::close(fd);
}

void TempPath::publish(const fs::path& target, bool overwrite) {
  // The marker stays until the rename: a process killed before it leaves staging that a later write
  // removes (unmarked first, a complete staging directory stayed for good). A directory's marker
  // goes with it and is taken out of the target after the rename.
  if (directory_)
    for (const auto& e : fs::directory_iterator(path_)) fsync_path(e.path(), false);
  fsync_path(path_, directory_);
  test_kill_point("before-rename", target);
  // RENAME_NOREPLACE refuses a target that appeared while writing; RENAME_EXCHANGE swaps a directory
  // atomically with the old one, which is then removed.
  if (!overwrite) {
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST)  // it appeared while we wrote
        throw checkpoint_refused("checkpoint: refusing to overwrite existing " + target.string() + " (use --force)");
      fail("cannot rename the temporary into", target, errno);
    }
  } else if (directory_ && fs::exists(fs::symlink_status(target))) {
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
      remove_tree(path_);  // now the old checkpoint
    } else {
      if (errno != EINVAL && errno != ENOSYS) fail("cannot rename the temporary into", target, errno);
      // No atomic exchange on this filesystem: move the old one aside first.
      fs::path old = path_;
      old += ".old";
      if (::rename(target.c_str(), old.c_str()) != 0) fail("cannot move aside", target, errno);
      if (::rename(path_.c_str(), target.c_str()) != 0) {
        int e = errno;
        ::rename(old.c_str(), target.c_str());
        fail("cannot rename the temporary into", target, e);
      }
      remove_tree(old);
    }
  } else if (::rename(path_.c_str(), target.c_str()) != 0) {
    fail("cannot rename the temporary into", target, errno);
  }
  test_kill_point("after-rename", target);
  if (directory_) {  // published, it is a checkpoint, not staging
    ::unlink((target / kStagingMarker).c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
  } else {  // the file is out: its staging directory holds only the marker
    unmark();
    remove_tree(stage_);
  }
  live_ = false;
  fsync_path(target.parent_path(), true);
}

Progress::Progress(const std::vector<DatasetSpec>& d) : d_(&d), written_(d.size(), 0) {
  for (const auto& s : d) numel_.push_back(numel(s.shape));
}

void Progress::check(std::size_t i, std::uint64_t first, const void* bytes, std::uint64_t n) const {
  // The writes are the caller's program, not input: a wrong one is misuse.
  LAYERINIT_EXPECTS(i < written_.size(), "checkpoint: dataset index " + std::to_string(i) + " out of range (" +
                                             std::to_string(written_.size()) + " declared)");
  const std::vector<DatasetSpec>& d = *d_;
  LAYERINIT_EXPECTS(first == written_[i], "checkpoint: " + d[i].name + ": write at element " + std::to_string(first) + " but " +
                                              std::to_string(written_[i]) + " written so far (writes must be in order)");
  LAYERINIT_EXPECTS(n <= numel_[i] - first, "checkpoint: " + d[i].name + ": write of " + std::to_string(n) + " elements at " +
                                                std::to_string(first) + " past its " + std::to_string(numel_[i]) + " elements");
  LAYERINIT_EXPECTS(n == 0 || bytes != nullptr, "checkpoint: " + d[i].name + ": null data");
}

WriterBase::WriterBase(fs::path target, const WriterOptions& opts, TargetRules rules)
    : target_(std::move(target)), opts_(opts), rules_(std::move(rules)) {}

void WriterBase::admit(std::uint64_t planned, const DatasetSource& datasets) {
  preflight(target_, rules_.directory, opts_.overwrite, opts_.check_free_space, planned, rules_.ours);
  remove_stale_staging(target_);
  d_ = datasets();
  progress_ = Progress(d_);
}

void WriterBase::publish(TempPath& tmp) {
  if (opts_.overwrite) check_replaceable(target_, rules_.directory, rules_.ours);
  tmp.publish(target_, opts_.overwrite);
}

void WriterBase::require_open() const {
  if (state_ != State::open)
    throw checkpoint_error("checkpoint: " + target_.string() + ": writer is " +
                           (state_ == State::committed ? "already committed" : "aborted"));
}

void WriterBase::write(std::size_t i, std::uint64_t first, const void* bytes, std::uint64_t n) {
  require_open();
  progress_.check(i, first, bytes, n);
  guarded([&] { write_elements(i, first, bytes, n); });
  progress_.advance(i, n);
  if (progress_.complete(i)) guarded([&] { dataset_complete(i); });
}

void WriterBase::commit(const BeforePublish& before_publish) {
  require_open();
  guarded([&] {
    progress_.check_complete(target_);
    finish();
    if (before_publish) before_publish(tmp_->path());
    publish(*tmp_);
  });
  state_ = State::committed;
}

void WriterBase::abort() noexcept {
  if (state_ != State::open) return;
  state_ = State::aborted;
  release();
  if (tmp_) tmp_->remove();
}

void Progress::check_complete(const fs::path& target) const {
  for (std::size_t i = 0; i < written_.size(); ++i)
    if (written_[i] != numel_[i])
      throw checkpoint_error("checkpoint: " + target.string() + ": dataset " + (*d_)[i].name + " incomplete: " +
                             std::to_string(written_[i]) + " of " + std::to_string(numel_[i]) + " elements written");
}

void validate_datasets(const std::vector<DatasetSpec>& d, CheckpointFormat f) {
  std::set<std::string_view> names;
  for (const auto& s : d) {
    if (s.name.empty()) bad_argument("checkpoint dataset name", "is empty");
    if (s.name == "__metadata__") bad_argument("checkpoint dataset name", s.name, "is not allowed (safetensors' header key)");
    // HDF5 reads '/' as a path of groups; a safetensors key is any string (DM-Haiku's "mlp/~/linear_0.w").
    if (f == CheckpointFormat::hdf5 && s.name.find('/') != std::string::npos)
      bad_argument("checkpoint dataset name", s.name, "is not allowed in HDF5 (no '/': HDF5 reads it as groups); write safetensors");
    if (!names.insert(s.name).second) bad_argument("checkpoint dataset name", s.name, "is given twice");
    if (s.shape.empty()) bad_argument("checkpoint dataset", s.name, "has rank 0, which is not supported");
    // A zero dimension is allowed: a tensor of zero elements, as torch, safetensors and HDF5 have them.
    if (s.slab_elements != 0) {
      std::uint64_t p = 1;
      bool ok = false;
      for (std::size_t j = s.shape.size() + 1; j-- > 0;) {
        if (j < s.shape.size()) p *= s.shape[j];
        if (p == s.slab_elements) ok = true;
      }
      if (!ok)
        bad_argument("checkpoint dataset", s.name,
                     ": slab of " + std::to_string(s.slab_elements) + " elements is not a product of trailing dimensions of " +
                         shape_string(s.shape));
    }
  }
}

std::vector<std::pair<std::string, std::string>> metadata_pairs(const CheckpointMetadata& m) {
  std::vector<std::pair<std::string, std::string>> v = {
      {"format_version", m.format_version},
      {"library_version", m.library_version.empty() ? std::string(LAYERINIT_VERSION) : m.library_version},
      {"dtype", m.dtype},
      {"seed", m.seed},
      {"recipe", m.recipe},
      {"layout", m.layout},
      {"orientation", m.orientation},
      {"model_spec", m.model_spec}};
  if (!m.init_overrides.empty()) v.emplace_back("init_overrides", m.init_overrides);
  if (!m.dtype_overrides.empty()) v.emplace_back("dtype_overrides", m.dtype_overrides);
  if (!m.experts.empty()) v.emplace_back("experts", m.experts);
  for (const auto& [k, val] : m.extra) {
    for (const auto& kv : v)
      if (kv.first == k) bad_argument("checkpoint metadata key", k, "is given twice");
    if (k == "format") bad_argument("checkpoint metadata key", k, "is reserved");
    v.emplace_back(k, val);
  }
  return v;
}

void full_pwrite(int fd, const void* p, std::uint64_t n, std::uint64_t offset, const fs::path& shown) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    std::size_t part = n > (1ull << 30) ? (1ull << 30) : static_cast<std::size_t>(n);
    ssize_t w = ::pwrite(fd, c, part, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", shown, errno);
    }
    if (w == 0) fail("cannot write", shown, ENOSPC);
    c += w;
    n -= static_cast<std::uint64_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
}

void write_small_file(const fs::path& p, const std::string& text, const fs::path& shown) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // the umask decides
  if (fd < 0) fail("cannot create", shown, errno);
  try {
    full_pwrite(fd, text.data(), text.size(), 0, shown);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

TargetRules target_rules(CheckpointFormat f) {
  if (f == CheckpointFormat::hdf5) return {false, hdf5_ownership};
  return {true, safetensors_ownership};
}

}  // namespace detail

std::string_view format_name(CheckpointFormat f) { return f == CheckpointFormat::hdf5 ? "hdf5" : "safetensors"; }

CheckpointFormat parse_checkpoint_format(std::string_view s) {
  if (s == "hdf5" || s == "h5") return CheckpointFormat::hdf5;
  if (s == "safetensors") return CheckpointFormat::safetensors;
  bad_argument("checkpoint format", s, "is unknown (valid: hdf5, safetensors)");
}

void check_free_space(const std::filesystem::path& where, std::uint64_t bytes) {
  std::filesystem::path p = std::filesystem::absolute(where);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  struct statvfs sv{};
  if (::statvfs(p.c_str(), &sv) != 0) detail::fail("cannot query free space of", p, errno);
  const std::uint64_t avail = static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize;
  if (avail < bytes)
    throw checkpoint_error("checkpoint: not enough space for " + where.string() + ": needs " + format_bytes(bytes) +
                           ", " + format_bytes(avail) + " available");
}

void check_checkpoint_target(CheckpointFormat f, const std::filesystem::path& target, const WriterOptions& opts,
                             std::uint64_t planned) {
  const detail::TargetRules rules = detail::target_rules(f);
  detail::preflight(detail::normalize_target(target), rules.directory, opts.overwrite, opts.check_free_space, planned,
                    rules.ours);
}

std::unique_ptr<CheckpointWriter> open_checkpoint_writer(CheckpointFormat f, const std::filesystem::path& target,
                                                         std::vector<DatasetSpec> datasets,
                                                         const CheckpointMetadata& meta, const WriterOptions& opts) {
  if (f == CheckpointFormat::hdf5) return open_hdf5_writer(target, std::move(datasets), meta, opts);
  return open_safetensors_writer(target, std::move(datasets), meta, opts);
}

std::unique_ptr<CheckpointWriter> open_checkpoint_writer(CheckpointFormat f, const std::filesystem::path& target,
                                                         std::uint64_t planned,
                                                         const std::function<std::vector<DatasetSpec>()>& datasets,
                                                         const CheckpointMetadata& meta, const WriterOptions& opts) {
  const detail::DatasetSource validated = [&] {
    std::vector<DatasetSpec> d = datasets();
    detail::validate_datasets(d, f);
    return d;
  };
  if (f == CheckpointFormat::hdf5) return detail::open_hdf5(target, planned, validated, meta, opts);
  return detail::open_safetensors(target, false, planned, validated, meta, opts);
}

std::size_t CheckpointWriter::index_of(std::string_view name) const {
  const auto& d = datasets();
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d[i].name == name) return i;
  LAYERINIT_FAIL("checkpoint: no dataset named " + quote(name));
}

void CheckpointWriter::write(std::string_view name, std::uint64_t first, const void* bytes, std::uint64_t n) {
  write(index_of(name), first, bytes, n);
}

PlannedBytes::PlannedBytes(CheckpointFormat f, const CheckpointMetadata& meta, const WriterOptions& opts)
    : f_(f), max_chunk_bytes_(opts.max_chunk_bytes), max_shard_size_(opts.max_shard_size),
      config_bytes_(opts.config_json.size()) {
  for (const auto& [k, v] : detail::metadata_pairs(meta)) meta_bytes_ += k.size() + v.size() + 64;
}

void PlannedBytes::add_run(const DatasetSpec& d, std::uint64_t count, std::uint64_t name_bytes) {
  datasets_ = saturating_add(datasets_, count);
  const detail::PlannedRun r = f_ == CheckpointFormat::hdf5 ? detail::hdf5_planned_run(d, count, name_bytes, max_chunk_bytes_)
                                                            : detail::safetensors_planned_run(d, count, name_bytes);
  data_ = saturating_add(data_, r.data);
  per_dataset_ = saturating_add(per_dataset_, r.overhead);
}

std::uint64_t PlannedBytes::total() const {
  const std::uint64_t fixed = f_ == CheckpointFormat::hdf5
                                  ? detail::hdf5_planned_fixed(meta_bytes_)
                                  : detail::safetensors_planned_fixed(meta_bytes_, datasets_, max_shard_size_, config_bytes_);
  return saturating_add(saturating_add(data_, per_dataset_), fixed);
}

std::uint64_t planned_bytes(CheckpointFormat f, const std::vector<DatasetSpec>& datasets,
                            const CheckpointMetadata& meta, const WriterOptions& opts) {
  PlannedBytes p(f, meta, opts);
  for (const auto& d : datasets) p.add(d);
  return p.total();
}

}  // namespace layerinit
