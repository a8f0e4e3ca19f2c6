// Shared parts of the checkpoint writers: validation, free space, temporary paths, atomic publish,
// format names and config.json.
// defines: everything in checkpoint/detail.hpp; format_name, parse_checkpoint_format,
//          check_free_space, planned_bytes, open_checkpoint_writer, config_json,
//          CheckpointWriter::write(name, ...), CheckpointWriter::index_of
#include "checkpoint/detail.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "layerinit/config.hpp"

namespace layerinit {
namespace detail {

void fail(const std::string& what, const fs::path& path, int err) {
  throw checkpoint_error("checkpoint: " + what + " " + printable(path.string()) + ": " + std::strerror(err));
}

fs::path normalize_target(const fs::path& target) {
  if (target.empty()) throw std::invalid_argument("checkpoint: empty output path");
  fs::path p = fs::absolute(target).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (!p.has_filename() || p == p.root_path()) throw std::invalid_argument("checkpoint: bad output path " + target.string());
  return p;
}

void preflight(const fs::path& target, bool target_is_dir, bool overwrite, bool check_space, std::uint64_t bytes) {
  struct stat st{};
  if (::lstat(target.c_str(), &st) == 0) {
    if (!overwrite)
      throw checkpoint_error("checkpoint: refusing to overwrite existing " + target.string() + " (use --force)");
    if (!target_is_dir && S_ISDIR(st.st_mode))
      throw checkpoint_error("checkpoint: " + target.string() + " is a directory, not a file");
  } else if (errno != ENOENT) {
    fail("cannot access", target, errno);
  }
  const fs::path dir = target.parent_path();
  if (::stat(dir.c_str(), &st) != 0) fail("cannot use output directory", dir, errno);
  if (!S_ISDIR(st.st_mode)) fail("cannot use output directory", dir, ENOTDIR);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) fail("cannot write into", dir, errno);
  if (check_space) check_free_space(dir, bytes);
}

TempPath::TempPath(const fs::path& target, bool directory) : directory_(directory) {
  std::string name = ".";  // (not "." + string: GCC 12 warns -Wrestrict falsely)
  name += target.filename().string();
  name += ".tmp-XXXXXX";
  std::string tmpl = (target.parent_path() / name).string();
  if (directory) {
    if (::mkdtemp(tmpl.data()) == nullptr) fail("cannot create a temporary directory beside", target, errno);
    ::chmod(tmpl.c_str(), 0755);
  } else {
    int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) fail("cannot create a temporary file beside", target, errno);
    ::fchmod(fd, 0644);
    ::close(fd);
  }
  path_ = tmpl;
  live_ = true;
}

void TempPath::remove() noexcept {
  if (!live_) return;
  std::error_code ec;
  if (directory_) fs::remove_all(path_, ec);
  else fs::remove(path_, ec);
  live_ = false;
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
  if (directory_) {
    for (const auto& e : fs::directory_iterator(path_)) fsync_path(e.path(), false);
  }
  fsync_path(path_, directory_);
  // RENAME_NOREPLACE refuses a target that appeared while writing; RENAME_EXCHANGE swaps a directory
  // atomically with the old one, which is then removed.
  if (!overwrite) {
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST)
        throw checkpoint_error("checkpoint: refusing to overwrite existing " + target.string() + " (use --force)");
      fail("cannot rename the temporary into", target, errno);
    }
  } else if (directory_ && fs::exists(fs::symlink_status(target))) {
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
      std::error_code ec;
      fs::remove_all(path_, ec);  // now the old checkpoint
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
      std::error_code ec;
      fs::remove_all(old, ec);
    }
  } else if (::rename(path_.c_str(), target.c_str()) != 0) {
    fail("cannot rename the temporary into", target, errno);
  }
  live_ = false;
  fsync_path(target.parent_path(), true);
}

Progress::Progress(const std::vector<DatasetSpec>& d) : d_(d), written_(d.size(), 0) {
  for (const auto& s : d) numel_.push_back(numel(s.shape));
}

void Progress::check(std::size_t i, std::uint64_t first, const void* bytes, std::uint64_t n) const {
  if (i >= d_.size())
    throw std::invalid_argument("checkpoint: dataset index " + std::to_string(i) + " out of range (" +
                                std::to_string(d_.size()) + " declared)");
  if (first != written_[i])
    throw std::invalid_argument("checkpoint: " + d_[i].name + ": write at element " + std::to_string(first) +
                                " but " + std::to_string(written_[i]) + " written so far (writes must be in order)");
  if (n > numel_[i] - first)
    throw std::invalid_argument("checkpoint: " + d_[i].name + ": write of " + std::to_string(n) + " elements at " +
                                std::to_string(first) + " past its " + std::to_string(numel_[i]) + " elements");
  if (n > 0 && bytes == nullptr) throw std::invalid_argument("checkpoint: " + d_[i].name + ": null data");
}

void Progress::check_complete(const fs::path& target) const {
  for (std::size_t i = 0; i < d_.size(); ++i)
    if (written_[i] != numel_[i])
      throw checkpoint_error("checkpoint: " + target.string() + ": dataset " + d_[i].name + " incomplete: " +
                             std::to_string(written_[i]) + " of " + std::to_string(numel_[i]) + " elements written");
}

void validate_datasets(const std::vector<DatasetSpec>& d) {
  std::set<std::string_view> names;
  for (const auto& s : d) {
    if (s.name.empty()) throw std::invalid_argument("checkpoint: a dataset has an empty name");
    if (s.name.find('/') != std::string::npos || s.name == "__metadata__")
      throw std::invalid_argument("checkpoint: bad dataset name '" + s.name + "'");
    if (!names.insert(s.name).second) throw std::invalid_argument("checkpoint: duplicate dataset name '" + s.name + "'");
    if (s.shape.empty()) throw std::invalid_argument("checkpoint: " + s.name + ": rank 0 is not supported");
    for (auto x : s.shape)
      if (x == 0) throw std::invalid_argument("checkpoint: " + s.name + ": zero dimension in " + shape_string(s.shape));
    if (s.slab_elements != 0) {
      std::uint64_t p = 1;
      bool ok = false;
      for (std::size_t j = s.shape.size() + 1; j-- > 0;) {
        if (j < s.shape.size()) p *= s.shape[j];
        if (p == s.slab_elements) ok = true;
      }
      if (!ok)
        throw std::invalid_argument("checkpoint: " + s.name + ": slab of " + std::to_string(s.slab_elements) +
                                    " elements is not a product of trailing dimensions of " + shape_string(s.shape));
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
  for (const auto& [k, val] : m.extra) {
    for (const auto& kv : v)
      if (kv.first == k) throw std::invalid_argument("checkpoint: metadata key '" + k + "' given twice");
    if (k == "format") throw std::invalid_argument("checkpoint: metadata key 'format' is reserved");
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
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", shown, errno);
  try {
    full_pwrite(fd, text.data(), text.size(), 0, shown);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace detail

std::string_view format_name(CheckpointFormat f) { return f == CheckpointFormat::hdf5 ? "hdf5" : "safetensors"; }

CheckpointFormat parse_checkpoint_format(std::string_view s) {
  if (s == "hdf5" || s == "h5") return CheckpointFormat::hdf5;
  if (s == "safetensors") return CheckpointFormat::safetensors;
  throw std::invalid_argument("unknown checkpoint format '" + printable(s) + "' (valid: hdf5, safetensors)");
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

std::unique_ptr<CheckpointWriter> open_checkpoint_writer(CheckpointFormat f, const std::filesystem::path& target,
                                                         std::vector<DatasetSpec> datasets,
                                                         const CheckpointMetadata& meta, const WriterOptions& opts) {
  if (f == CheckpointFormat::hdf5) return open_hdf5_writer(target, std::move(datasets), meta, opts);
  return open_safetensors_writer(target, std::move(datasets), meta, opts);
}

std::size_t CheckpointWriter::index_of(std::string_view name) const {
  const auto& d = datasets();
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d[i].name == name) return i;
  throw std::invalid_argument("checkpoint: no dataset named '" + std::string(name) + "'");
}

void CheckpointWriter::write(std::string_view name, std::uint64_t first, const void* bytes, std::uint64_t n) {
  write(index_of(name), first, bytes, n);
}

std::string config_json(const ModelSpec& spec, DType dtype) {
  const Hyper& h = spec.hyper;
  const std::string& fam = spec.family;
  const char* torch_dtype = dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
  nlohmann::ordered_json j;
  if (fam == "llama" || fam == "mistral" || fam == "mixtral") {
    const char* arch = fam == "llama" ? "LlamaForCausalLM" : fam == "mistral" ? "MistralForCausalLM" : "MixtralForCausalLM";
    j["architectures"] = {arch};
    j["model_type"] = fam;
    j["vocab_size"] = h.vocab_size;
    j["hidden_size"] = h.hidden_size;
    j["intermediate_size"] = h.intermediate_size;
    j["num_hidden_layers"] = spec.num_layers;
    j["num_attention_heads"] = h.num_heads;
    j["num_key_value_heads"] = h.num_kv_heads ? h.num_kv_heads : h.num_heads;
    if (h.head_dim) j["head_dim"] = h.head_dim;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = h.max_position_embeddings;
    j["rms_norm_eps"] = h.norm_eps;
    j["rope_theta"] = h.rope_theta;
    j["tie_word_embeddings"] = h.tie_word_embeddings;
    j["initializer_range"] = h.initializer_range;
    if (fam == "llama") {
      j["attention_bias"] = h.bias;
      j["mlp_bias"] = false;
    }
    if (fam == "mistral" || fam == "mixtral") j["sliding_window"] = nullptr;
    if (fam == "mixtral") {
      j["num_local_experts"] = h.num_experts;
      j["num_experts_per_tok"] = h.experts_per_token;
    }
  } else if (fam == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = h.vocab_size;
    j["n_positions"] = h.max_position_embeddings;
    j["n_embd"] = h.hidden_size;
    j["n_layer"] = spec.num_layers;
    j["n_head"] = h.num_heads;
    if (h.intermediate_size && h.intermediate_size != 4 * h.hidden_size) j["n_inner"] = h.intermediate_size;
    else j["n_inner"] = nullptr;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = h.norm_eps;
    j["initializer_range"] = h.initializer_range;
    j["tie_word_embeddings"] = true;
    // GPT2Config defaults both to 50256 (GPT-2's <|endoftext|>, its last token), which lies outside a
    // smaller vocabulary (gpt2-tiny's 512): the last token of this one.
    if (h.vocab_size > 0) {
      j["bos_token_id"] = h.vocab_size - 1;
      j["eos_token_id"] = h.vocab_size - 1;
    }
  } else {
    throw std::invalid_argument("config.json: no Hugging Face model_type for family '" + fam +
                                "' (supported: llama, mistral, mixtral, gpt2)");
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace layerinit
