// Parallel emit: the checkpoint's files split among the ranks of a Collective, published by rank 0
// once every rank has agreed that its share is complete.
#include <layerinit/checkpoint/parallel.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <layerinit/backends/content_hash.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/spec_json.hpp>

#include <layerinit/checkpoint/detail.hpp>
#include <layerinit/init/engine.hpp>
#include "feed.hpp"

namespace layerinit {

namespace fs = std::filesystem;

rank_failed::rank_failed(std::uint64_t rank, std::uint64_t ranks)
    : error("emit: rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " failed; nothing was published"),
      rank_(rank) {}

std::vector<std::uint64_t> split_by_bytes(const std::vector<std::uint64_t>& bytes, std::uint64_t ranks) {
  LAYERINIT_EXPECTS(ranks > 0, "split_by_bytes: no ranks");
  using u128 = unsigned __int128;
  u128 total = 0;
  for (auto b : bytes) total += b;
  std::vector<std::uint64_t> owner(bytes.size(), 0);
  u128 start = 0;
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    // Twice the middle byte's position over twice the total: integer arithmetic, no rounding.
    if (total > 0) {
      const u128 r = (u128(ranks) * (2 * start + bytes[k])) / (2 * total);
      owner[k] = static_cast<std::uint64_t>(std::min<u128>(r, ranks - 1));
    }
    start += bytes[k];
  }
  return owner;
}

std::string hdf5_rank_file_name(std::uint64_t rank, std::uint64_t ranks) { return rank_file_name(rank, ranks, ".h5"); }

namespace {

// Where dataset k of checkpoint_datasets(b) comes from: a tensor before the layers, layer tensors
// (per-layer: one; stacked: every layer tensor of a buffer), or a tensor after them.
struct Origins {
  std::size_t pre = 0, middle = 0, post = 0;  // dataset counts
  std::uint64_t layers = 0, per_layer = 0;    // L, and tensors per layer (T)
  bool stacked = false;
  StackedLayout sl;

  explicit Origins(const Builder& b)
      : pre(b.spec().pre.size()), post(b.spec().post.size()), layers(b.spec().num_layers),
        per_layer(b.spec().layer.tensors.size()), stacked(b.options().layout == Layout::stacked),
        sl(stacked_layout(b.spec(), b.options().experts)) {
    middle = layers == 0 ? 0 : stacked ? sl.buffers.size() : layers * per_layer;
  }
};

// Like Builder::stream, over layers [layers.offset, + size) and only the tensors whose dataset the
// feed's writer holds: each pre or post tensor alone, each layer's selected tensors together; a part
// with nothing selected is not built. A stacked layer tensor j of layer i is slice
// layout.slice(j, i - slice_base) of its buffer's dataset. Peak: the largest part.
void stream_selected(const Builder& b, Range layers, detail::DatasetFeed& feed, const EmitOptions& opts,
                     std::uint64_t slice_base) {
  const Engine eng = b.engine(detail::cancellation(opts));
  b.walk({.first = layers.offset, .count = layers.size}, [&](const PlanStep& s) {
    const std::vector<PartTensor> all = whole_tensors(s);
    std::vector<PartTensor> chosen;
    std::vector<detail::FeedSlot> slots;
    for (std::size_t k = 0; k < all.size(); ++k) {
      const detail::FeedSlot slot = all[k].stack ? detail::FeedSlot{all[k].stack->name, s.layout->slice(k, s.layer - slice_base)}
                                                 : detail::FeedSlot{s.tensors[k].name, std::nullopt};
      if (!feed.find(slot.dataset)) continue;
      chosen.push_back(all[k]);
      slots.push_back(slot);
    }
    if (chosen.empty()) return;
    const std::vector<Tensor> tensors = eng.fill_part(chosen);
    std::vector<TensorView> views;
    for (const auto& t : tensors) views.push_back(t.view);
    feed.put_part(s.kind == Part::Kind::layer, views, [&](std::size_t j) { return slots[j]; });
  });  // freed before the next part
}

// The checks emit_checkpoint makes before any work, for every rank, and the parallel emit's own.
void check_emit(const Builder& b, backend& be, const EmitOptions& opts) {
  detail::check_emit(b, be, opts);
  for (const char* key : {detail::kRankFilesAttribute, "layerinit.rank"})
    if (opts.meta.extra.count(key)) bad_argument("emit: metadata key", key, "is the parallel emit's own");
}

// Every rank's verdict: returns when all succeeded; else throws, the first failed rank its own
// error and the others rank_failed. A collective that cannot complete throws as it is.
void agree(Collective& c, const std::exception_ptr& failure) {
  const std::optional<std::uint64_t> first = c.first_failure(failure == nullptr);
  if (!first) return;
  if (*first == c.rank() && failure) std::rethrow_exception(failure);
  throw rank_failed(*first, c.size());
}

// Removes the shared staging directory when this rank leaves before the agreement that the
// checkpoint is complete (a failure, or a collective that could not complete). Every rank holds one,
// so the directory goes whichever rank is left standing.
class StagingGuard {
 public:
  explicit StagingGuard(fs::path dir) : dir_(std::move(dir)) {}
  ~StagingGuard() {
    if (dir_.empty()) return;
    detail::remove_tree(dir_);
  }
  StagingGuard(const StagingGuard&) = delete;
  StagingGuard& operator=(const StagingGuard&) = delete;
  void disarm() noexcept { dir_.clear(); }

 private:
  fs::path dir_;
};

// One rank's tensors for the report, sent to rank 0: dataset index, hash (whole: this rank wrote all
// of the dataset) and layer hashes.
struct Contribution {
  std::size_t dataset = 0;
  std::uint64_t hash = 0;
  bool whole = true;
  std::vector<std::uint64_t> layers;
};

// A file a rank wrote into the staging directory, complete: its name there and its size.
struct StagedFile {
  std::string name;
  std::uint64_t bytes = 0;
};

// What a rank sends rank 0 once every rank has written its share.
struct Share {
  std::vector<Contribution> tensors;
  std::vector<StagedFile> files;
};

std::string encode(const Share& s) {
  nlohmann::json t = nlohmann::json::array(), f = nlohmann::json::array();
  for (const auto& c : s.tensors) t.push_back({c.dataset, c.hash, c.whole, c.layers});
  for (const auto& x : s.files) f.push_back({x.name, x.bytes});
  return nlohmann::json{{"tensors", t}, {"files", f}}.dump();
}

Share decode(const std::string& text) {
  Share s;
  const nlohmann::json j = nlohmann::json::parse(text);
  for (const auto& e : j.at("tensors"))
    s.tensors.push_back({e[0].get<std::size_t>(), e[1].get<std::uint64_t>(), e[2].get<bool>(), e[3].get<std::vector<std::uint64_t>>()});
  for (const auto& e : j.at("files")) s.files.push_back({e[0].get<std::string>(), e[1].get<std::uint64_t>()});
  return s;
}

// The size of a file this rank just wrote into the staging directory (`shown` names it as published).
std::uint64_t staged_size(const fs::path& p, const fs::path& shown) {
  struct stat st{};
  if (::lstat(p.c_str(), &st) != 0) detail::fail("cannot read", shown, errno);
  return static_cast<std::uint64_t>(st.st_size);
}

// Rank 0, before publishing: every file the ranks reported is in `dir` with the size its rank wrote,
// and `dir` holds nothing else (its staging marker aside). A file removed, cut or added while the
// emit ran would otherwise be published as part of the checkpoint. `what` names the checkpoint.
void verify_staging(const fs::path& dir, const std::vector<Share>& shares, const std::string& what) {
  auto broken = [&](const std::string& why) {
    throw checkpoint_error("checkpoint: " + what + ": " + why + " (changed while the emit ran?); nothing was published");
  };
  std::set<std::string> expected;
  for (std::size_t r = 0; r < shares.size(); ++r)
    for (const StagedFile& f : shares[r].files) {
      expected.insert(f.name);
      struct stat st{};
      if (::lstat((dir / f.name).c_str(), &st) != 0)
        broken("rank " + std::to_string(r) + "'s file " + f.name + " is missing from the staging directory");
      if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != f.bytes)
        broken("rank " + std::to_string(r) + "'s file " + f.name + " has " + std::to_string(st.st_size) +
               " bytes in the staging directory, " + std::to_string(f.bytes) + " written");
    }
  std::error_code ec;
  std::uint64_t count = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == detail::kStagingMarker) continue;
    ++count;
    if (!expected.count(name)) broken("the staging directory holds " + printable(name) + ", which no rank wrote");
  }
  if (ec) broken("the staging directory cannot be read: " + ec.message());
  if (count != expected.size())
    broken("the staging directory holds " + std::to_string(count) + " files, the ranks wrote " + std::to_string(expected.size()));
}

// Rank 0's report: every dataset in file order with the ranks' hashes put together.
EmitResult assemble(const std::vector<DatasetSpec>& datasets, const std::vector<Share>& shares) {
  EmitResult r;
  for (const auto& d : datasets) {
    TensorReport& t = r.tensors.emplace_back(d.name, d.shape, d.dtype);
    t.hashed = false;
    r.weight_bytes += t.bytes;
  }
  std::vector<int> parts(datasets.size(), 0);
  for (const auto& share : shares)  // rank order: layer ranges ascend
    for (const Contribution& c : share.tensors) {
      TensorReport& t = r.tensors.at(c.dataset);
      t.layer_hashes.insert(t.layer_hashes.end(), c.layers.begin(), c.layers.end());
      t.hash = c.hash;
      t.hashed = c.whole && ++parts[c.dataset] == 1;
    }
  return r;
}

// A rank's own report: its contributions, in its order.
EmitResult own_report(const std::vector<DatasetSpec>& datasets, const std::vector<Contribution>& mine) {
  EmitResult r;
  for (const auto& m : mine) {
    const DatasetSpec& d = datasets[m.dataset];
    TensorReport& t = r.tensors.emplace_back(d.name, d.shape, d.dtype);
    t.hash = m.hash;
    t.layer_hashes = m.layers;
    t.hashed = m.whole;
    r.weight_bytes += t.bytes;
  }
  return r;
}

// Streams the checkpoint's tensors that `w` holds into it (stacked slices counted from layer
// `slice_base`) and commits; returns each held dataset's hash and layer hashes, by its checkpoint
// index (`global`).
std::vector<Contribution> write_share(const Builder& b, backend& be, const EmitOptions& opts,
                                      std::chrono::steady_clock::time_point t0, CheckpointWriter& w, Range layers,
                                      const std::vector<std::size_t>& global, std::uint64_t slice_base) {
  detail::DatasetFeed feed(be, w, opts, layers.size, t0);
  stream_selected(b, layers, feed, opts, slice_base);
  std::vector<Contribution> out;
  for (std::size_t k = 0; k < global.size(); ++k) out.push_back({global[k], feed.digest(k), true, feed.slice_hashes(k)});
  w.commit();
  return out;
}

// A rank's writer options inside the staging directory: its own files only, the whole checkpoint's
// space having been checked by rank 0.
WriterOptions rank_writer_options(const EmitOptions& opts) {
  WriterOptions wo = opts.writer;
  wo.overwrite = false;
  wo.check_free_space = false;
  wo.config_json.clear();
  wo.max_shard_size = 0;
  return wo;
}

// Runs f; a checkpoint error it throws says `to` where it said `from` (a path in the staging
// directory, which is gone by the time the user reads the message after a failure).
template <class F>
void naming(const std::string& from, const std::string& to, F&& f) {
  auto rename = [&](std::string m) {
    for (std::size_t p = m.find(from); p != std::string::npos; p = m.find(from, p + to.size())) m.replace(p, from.size(), to);
    return m;
  };
  try {
    f();
  } catch (const checkpoint_refused& e) {
    throw checkpoint_refused(rename(e.what()));
  } catch (const checkpoint_error& e) {
    throw checkpoint_error(rename(e.what()));
  }
}

EmitResult emit_safetensors(const Builder& b, backend& be, const fs::path& target, const EmitOptions& opts, Collective& c,
                            std::chrono::steady_clock::time_point t0) {
  const std::uint64_t me = c.rank(), n = c.size();
  std::exception_ptr failure;
  CheckpointMetadata meta;
  fs::path tgt;
  std::optional<detail::TempPath> staging;  // rank 0's: the directory every rank writes into
  try {
    meta = builder_metadata(b, opts.meta);
    tgt = detail::normalize_target(target);
    if (me == 0) {
      check_checkpoint_target(CheckpointFormat::safetensors, tgt, opts.writer,
                              planned_checkpoint_bytes(b, CheckpointFormat::safetensors, meta, opts.writer));
      detail::remove_stale_staging(tgt);
      staging.emplace(tgt, true);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agree(c, failure);
  const fs::path stage = c.broadcast(me == 0 ? staging->path().string() : std::string(), 0);
  StagingGuard guard(me == 0 ? fs::path() : stage);  // rank 0's TempPath removes it there

  const Origins o(b);
  std::vector<DatasetSpec> datasets;
  Share mine;
  std::vector<SafetensorsShard> shards;
  try {
    datasets = checkpoint_datasets(b);
    shards = safetensors_shards(datasets, opts.writer.max_shard_size);
    std::vector<std::uint64_t> bytes;
    for (const auto& s : shards) bytes.push_back(s.data_bytes);
    const std::vector<std::uint64_t> owner = split_by_bytes(bytes, n);
    for (std::size_t f = 0; f < shards.size(); ++f) {
      if (owner[f] != me) continue;
      std::vector<DatasetSpec> specs;
      std::uint64_t lo = o.layers, hi = 0;  // the layers the file's tensors come from
      for (auto k : shards[f].datasets) {
        specs.push_back(datasets[k]);
        if (k >= o.pre && k < o.pre + o.middle) {
          const std::uint64_t l = o.stacked ? 0 : (k - o.pre) / o.per_layer;
          lo = std::min(lo, l);
          hi = std::max(hi, o.stacked ? o.layers : l + 1);
        }
      }
      naming(stage.string() + "/", tgt.string() + "/", [&] {
        auto w = open_safetensors_file_writer(stage / shards[f].file, std::move(specs), meta, rank_writer_options(opts));
        const Range layers{lo, hi > lo ? hi - lo : 0};
        auto got = write_share(b, be, opts, t0, *w, layers, shards[f].datasets, 0);
        mine.tensors.insert(mine.tensors.end(), got.begin(), got.end());
        mine.files.push_back({shards[f].file, staged_size(stage / shards[f].file, tgt / shards[f].file)});
      });
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agree(c, failure);  // throws on every rank if any failed: the guards and rank 0's TempPath clean up
  guard.disarm();     // complete: only rank 0 touches the staging directory from here on

  const std::vector<std::string> gathered = c.gather(encode(mine), 0);
  EmitResult result;
  failure = nullptr;
  if (me == 0) {
    try {
      std::vector<Share> shares;
      for (const auto& text : gathered) shares.push_back(decode(text));
      verify_staging(staging->path(), shares, tgt.string());
      result = assemble(datasets, shares);
      if (shards.size() > 1)
        detail::write_small_file(staging->path() / "model.safetensors.index.json", safetensors_index_json(shards, datasets),
                                 tgt / "model.safetensors.index.json");
      if (!opts.writer.config_json.empty())
        detail::write_small_file(staging->path() / "config.json", opts.writer.config_json, tgt / "config.json");
      if (opts.writer.overwrite) {
        const detail::TargetRules rules = detail::target_rules(CheckpointFormat::safetensors);
        detail::check_replaceable(tgt, rules.directory, rules.ours);
      }
      staging->publish(tgt, opts.writer.overwrite);
      result.file_bytes = detail::disk_bytes(tgt);
    } catch (...) {
      failure = std::current_exception();
      staging.reset();  // removed before the others hear of it
    }
  } else {
    result = own_report(datasets, mine.tensors);
  }
  if (me == 0 && !failure) {
    try {
      agree(c, nullptr);  // published whatever the others hear
    } catch (...) {
    }
  } else {
    agree(c, failure);
  }
  result.seconds = detail::seconds_since(t0);
  return result;
}

// The HDF5 emit's units in file order (each tensor before the layers, each layer, each tensor after
// them) and the rank writing each, split by bytes.
struct UnitOwners {
  const Origins& o;
  std::vector<std::uint64_t> owner;

  UnitOwners(const Builder& b, const Origins& o, std::uint64_t ranks) : o(o) {
    std::vector<std::uint64_t> bytes;
    b.walk({.mode = WalkMode::runs}, [&](const PlanStep& s) {
      std::uint64_t part = 0;
      for (const auto& p : s.tensors) part += p.bytes();
      bytes.insert(bytes.end(), s.count, part);
    });
    owner = split_by_bytes(bytes, ranks);
  }
  // Rank r's layers: a contiguous range, since owners never decrease (the layers' units follow the
  // o.pre units before them).
  Range layers_of(std::uint64_t r) const {
    const auto first = owner.begin() + static_cast<std::ptrdiff_t>(o.pre);
    const auto [lo, hi] = std::equal_range(first, first + static_cast<std::ptrdiff_t>(o.layers), r);
    return Range{lo != hi ? static_cast<std::uint64_t>(lo - first) : 0, static_cast<std::uint64_t>(hi - lo)};
  }
  bool holds_anything(std::uint64_t r) const { return std::find(owner.begin(), owner.end(), r) != owner.end(); }
  std::uint64_t post_owner(std::size_t j) const { return owner[o.pre + o.layers + j]; }

  // Rank r's datasets (a stacked one cut to its layers, [n, ...] of [L, ...]), each with its index in
  // `datasets` in `global`.
  std::vector<DatasetSpec> datasets_of(std::uint64_t r, const std::vector<DatasetSpec>& datasets,
                                       std::vector<std::size_t>& global) const {
    const Range L = layers_of(r);
    std::vector<DatasetSpec> specs;
    auto add = [&](std::size_t k, DatasetSpec d) {
      global.push_back(k);
      specs.push_back(std::move(d));
    };
    for (std::size_t j = 0; j < o.pre; ++j)
      if (owner[j] == r) add(j, datasets[j]);
    if (L.size > 0) {
      if (o.stacked) {
        for (std::size_t k = 0; k < o.middle; ++k) {
          DatasetSpec d = datasets[o.pre + k];
          d.shape[0] = L.size;  // [n, ...] of the [L, ...] dataset
          add(o.pre + k, std::move(d));
        }
      } else {
        // The datasets of layers L, contiguous in checkpoint_datasets' order.
        for (std::size_t k = o.pre + L.offset * o.per_layer; k < o.pre + (L.offset + L.size) * o.per_layer; ++k)
          add(k, datasets[k]);
      }
    }
    for (std::size_t j = 0; j < o.post; ++j)
      if (post_owner(j) == r) add(o.pre + o.middle + j, datasets[o.pre + o.middle + j]);
    return specs;
  }

  // Each dataset's sources in the master file: the rank file holding it, or per rank its rows of a
  // stacked dataset.
  std::vector<std::vector<detail::VirtualSource>> sources(const std::vector<DatasetSpec>& datasets, const std::string& dir_name,
                                                          std::uint64_t ranks) const {
    std::vector<std::vector<detail::VirtualSource>> out(datasets.size());
    auto file_of = [&](std::uint64_t r) { return dir_name + "/" + hdf5_rank_file_name(r, ranks); };
    for (std::size_t j = 0; j < o.pre; ++j) out[j].push_back({file_of(owner[j]), 0, datasets[j].shape[0]});
    for (std::size_t k = o.pre; k < o.pre + o.middle; ++k) {
      if (o.stacked) {
        for (std::uint64_t r = 0; r < ranks; ++r) {
          const Range L = layers_of(r);
          if (L.size > 0) out[k].push_back({file_of(r), L.offset, L.size});
        }
      } else {
        out[k].push_back({file_of(owner[o.pre + (k - o.pre) / o.per_layer]), 0, datasets[k].shape[0]});
      }
    }
    for (std::size_t j = 0; j < o.post; ++j) {
      const std::size_t k = o.pre + o.middle + j;
      out[k].push_back({file_of(post_owner(j)), 0, datasets[k].shape[0]});
    }
    return out;
  }
};

EmitResult emit_hdf5(const Builder& b, backend& be, const fs::path& target, const EmitOptions& opts, Collective& c,
                     std::chrono::steady_clock::time_point t0) {
  const std::uint64_t me = c.rank(), n = c.size();
  std::exception_ptr failure;
  CheckpointMetadata meta;
  fs::path tgt;
  std::optional<detail::TempPath> ranks_dir;  // rank 0's: the directory of the rank files
  try {
    meta = builder_metadata(b, opts.meta);
    detail::check_hdf5_options(target, opts.writer);
    tgt = detail::normalize_target(target);
    if (me == 0) {
      check_checkpoint_target(CheckpointFormat::hdf5, tgt, opts.writer,
                              planned_checkpoint_bytes(b, CheckpointFormat::hdf5, meta, opts.writer));
      detail::remove_stale_staging(tgt);
      ranks_dir.emplace(tgt.parent_path(), tgt.filename().string() + ".ranks-XXXXXX", true, tgt);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agree(c, failure);
  const std::string dir_name = c.broadcast(me == 0 ? ranks_dir->path().filename().string() : std::string(), 0);
  const fs::path dir = tgt.parent_path() / dir_name;
  StagingGuard guard(me == 0 ? fs::path() : dir);

  const Origins o(b);
  const UnitOwners units(b, o, n);
  const ModelSpec& spec = b.spec();

  std::vector<DatasetSpec> datasets;
  Share mine;
  try {
    datasets = checkpoint_datasets(b);
    if (units.holds_anything(me)) {
      const Range L = units.layers_of(me);
      std::vector<std::size_t> global;  // of specs[k]
      std::vector<DatasetSpec> specs = units.datasets_of(me, datasets, global);
      CheckpointMetadata rank_meta = meta;
      rank_meta.extra["layerinit.rank"] =
          nlohmann::ordered_json{{"rank", me}, {"ranks", n}, {"layers", {L.offset, L.size}}}.dump();
      const std::string file = hdf5_rank_file_name(me, n);
      // Messages name the checkpoint and the rank file: the rank directory goes with a failure.
      naming((dir / file).string(), tgt.string() + " (its rank file " + file + ")", [&] {
        auto w = open_hdf5_writer(dir / file, std::move(specs), rank_meta, rank_writer_options(opts));
        mine.tensors = write_share(b, be, opts, t0, *w, L, global, L.offset);
        mine.files.push_back({file, staged_size(dir / file, dir / file)});
      });
      if (o.stacked)  // a piece of each [L, ...] dataset: whole only if this rank holds every layer
        for (auto& m : mine.tensors)
          if (m.dataset >= o.pre && m.dataset < o.pre + o.middle) m.whole = L.size == spec.num_layers;
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agree(c, failure);
  guard.disarm();

  const std::vector<std::string> gathered = c.gather(encode(mine), 0);
  EmitResult result;
  failure = nullptr;
  if (me == 0) {
    try {
      std::vector<Share> shares;
      for (const auto& text : gathered) shares.push_back(decode(text));
      verify_staging(ranks_dir->path(), shares, tgt.string());
      result = assemble(datasets, shares);
      const auto sources = units.sources(datasets, dir_name, n);
      CheckpointMetadata master_meta = meta;
      master_meta.extra[detail::kRankFilesAttribute] = dir_name;
      detail::TempPath master(tgt, false);
      detail::write_hdf5_virtual(master.path(), datasets, sources, master_meta, tgt);
      fs::path d = ranks_dir->path();
      detail::fsync_path(d, true);
      // Marked until the master is out: killed before, the rank directory is stale staging a later
      // emit removes; killed after, the master names it and a later emit only unmarks it.
      detail::publish_hdf5(master, tgt, opts.writer.overwrite, dir_name);
      ranks_dir->keep();  // the master names it now: a checkpoint's, never stale staging
      result.file_bytes = detail::disk_bytes(tgt) + detail::disk_bytes(d);
    } catch (...) {
      failure = std::current_exception();
      ranks_dir.reset();
    }
  } else {
    result = own_report(datasets, mine.tensors);
  }
  if (me == 0 && !failure) {
    try {
      agree(c, nullptr);
    } catch (...) {
    }
  } else {
    agree(c, failure);
  }
  result.seconds = detail::seconds_since(t0);
  return result;
}

// Everything that decides the checkpoint's bytes and where they go, one [what, value] pair per field
// (long values as their XXH3-64): the format and target, the model, the recipe and its overrides,
// the build options, the writer's options and the file metadata (library version included).
nlohmann::json output_fields(const Builder& b, const fs::path& target, const EmitOptions& opts) {
  auto digest = [](const std::string& text) {
    ContentHash h;
    h.update(text.data(), text.size());
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
    return std::string("xxh3 ") + hex;
  };
  const BuildOptions& o = b.options();
  std::string dtype_overrides, order;
  for (const auto& d : o.dtype_overrides) dtype_overrides += d.pattern + "=" + std::string(dtype_name(d.dtype)) + ";";
  for (auto i : o.layer_order) order += std::to_string(i) + ",";
  std::string meta;
  for (const auto& [k, v] : detail::metadata_pairs(builder_metadata(b, opts.meta))) meta += k + "=" + v + "\n";
  const WriterOptions& w = opts.writer;
  return nlohmann::json::array({
      {"format", std::string(format_name(opts.format))},
      {"output", detail::normalize_target(target).string()},
      {"model", digest(spec_to_json(b.spec()))},
      {"recipe", b.recipe().name()},
      {"init overrides", digest(b.recipe().overrides_text())},
      {"dtype", std::string(dtype_name(o.dtype))},
      {"dtype overrides", digest(dtype_overrides)},
      {"seed", std::to_string(o.seed)},
      {"layout", std::string(layout_name(o.layout))},
      {"orientation", std::string(orientation_name(o.orientation))},
      {"experts", std::string(expert_layout_name(o.experts))},
      {"layer order", digest(order)},
      {"overwrite", w.overwrite ? "yes" : "no"},
      {"free space check", w.check_free_space ? "yes" : "no"},
      {"max shard size", std::to_string(w.max_shard_size)},
      {"config.json", digest(w.config_json)},
      {"max chunk bytes", std::to_string(w.max_chunk_bytes)},
      {"metadata", digest(meta)},
  });
}

// Throws std::invalid_argument naming the first field in which this rank's output (`mine`) differs
// from rank 0's (`root`): the ranks would write parts of different checkpoints.
void check_same_output(const std::string& root, const nlohmann::json& mine, std::uint64_t rank) {
  const nlohmann::json theirs = nlohmann::json::parse(root);
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const std::string what = mine[k][0], a = mine[k][1], b = k < theirs.size() ? theirs[k][1].get<std::string>() : "";
    if (a == b) continue;
    const bool hashed = a.rfind("xxh3 ", 0) == 0;
    bad_argument("emit: rank", rank,
                 "was given another " + what + " than rank 0" + (hashed ? "" : " (" + quote(a, 200) + ", rank 0: " + quote(b, 200) + ")") +
                     ": every process of the job must run the same command");
  }
}

}  // namespace

EmitResult emit_parallel(const Builder& b, backend& be, const fs::path& target, const EmitOptions& opts, Collective& c) {
  LAYERINIT_EXPECTS(c.size() > 0 && c.rank() < c.size(),
                    "emit: rank " + std::to_string(c.rank()) + " of a group of " + std::to_string(c.size()));
  if (c.size() == 1) return emit_checkpoint(b, be, target, opts);
  // Rank 0 publishes while the others wait for it: nothing of the caller's may run in between.
  LAYERINIT_EXPECTS(!opts.before_publish, "emit_parallel: before_publish is taken by emit_checkpoint and emit_rank only");
  const auto t0 = std::chrono::steady_clock::now();
  // Before anything is written: each rank's own checks, then one output on every rank (a rank given
  // another seed, model, format or target would publish a mix, or wait in another protocol).
  std::exception_ptr failure;
  nlohmann::json mine;
  try {
    check_emit(b, be, opts);
    mine = output_fields(b, target, opts);
  } catch (...) {
    failure = std::current_exception();
  }
  agree(c, failure);
  const std::string root = c.broadcast(c.rank() == 0 ? mine.dump() : std::string(), 0);
  try {
    check_same_output(root, mine, c.rank());
  } catch (...) {
    failure = std::current_exception();
  }
  agree(c, failure);
  return opts.format == CheckpointFormat::safetensors ? emit_safetensors(b, be, target, opts, c, t0)
                                                      : emit_hdf5(b, be, target, opts, c, t0);
}

}  // namespace layerinit
