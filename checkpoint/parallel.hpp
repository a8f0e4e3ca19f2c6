// Parallel emit: several processes write one checkpoint together, each a share of its files, and it
// appears whole or not at all (docs/checkpoint.md, "Parallel emit"). The processes talk through
// Collective, which the caller implements: tools/ over MPI, the tests over threads. The library links
// no MPI, so it builds, installs and runs the same on machines without one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/checkpoint/emit.hpp>

namespace layerinit {

// What the parallel emit needs from a group of processes. Every member is collective: each rank
// calls it, in the same order. An implementation that can no longer complete one (a peer died, the
// job is being torn down) throws; emit_parallel then removes what is left and rethrows.
class LAYERINIT_API Collective {
 public:
  virtual ~Collective() = default;
  virtual std::uint64_t rank() const = 0;
  virtual std::uint64_t size() const = 0;
  // The lowest rank that passed ok = false; nullopt when every rank passed true (an allreduce MIN).
  virtual std::optional<std::uint64_t> first_failure(bool ok) = 0;
  // root's text, on every rank.
  virtual std::string broadcast(const std::string& text, std::uint64_t root) = 0;
  // On root every rank's text in rank order; elsewhere empty.
  virtual std::vector<std::string> gather(const std::string& text, std::uint64_t root) = 0;
};

// Thrown on every rank but the failed one when another rank failed first: "emit: rank 2 of 4 failed;
// nothing was published". The failed rank throws its own error.
class LAYERINIT_API rank_failed : public error {
 public:
  rank_failed(std::uint64_t rank, std::uint64_t ranks);
  std::uint64_t rank() const noexcept { return rank_; }

 private:
  std::uint64_t rank_;
};

// Contiguous owners for units of work in order, by bytes: unit k goes to the rank whose share of the
// total holds the unit's middle byte, floor(ranks * (start_k + bytes_k / 2) / total). Owners never
// decrease; a rank may get nothing (more ranks than units, or one large unit).
LAYERINIT_API std::vector<std::uint64_t> split_by_bytes(const std::vector<std::uint64_t>& bytes, std::uint64_t ranks);

// Rank r's file of a parallel HDF5 checkpoint, inside its rank directory: "rank-00003-of-00008.h5".
LAYERINIT_API std::string hdf5_rank_file_name(std::uint64_t rank, std::uint64_t ranks);

// Writes the checkpoint emit_checkpoint writes, split among c.size() ranks; every rank calls it with
// the same builder options, target and opts (a process group started with one command line).
//
// safetensors: the files of safetensors_shards (the same cut as one process makes) are split among
// the ranks by split_by_bytes; each rank builds only the tensors of its files and writes each file to
// a temporary beside it in a staging directory rank 0 made beside the target, renamed when complete.
// When every rank has succeeded, rank 0 writes model.safetensors.index.json and config.json into it
// and renames it onto the target: the directory is byte for byte what emit_checkpoint writes.
//
// hdf5: the units pre tensors, layers and post tensors are split by split_by_bytes; rank r writes its
// units to <target>.ranks-XXXXXX/rank-RRRRR-of-NNNNN.h5 (stacked layout: rows [first, first + n) of
// each [L, ...] dataset as an [n, ...] dataset of the same name). Rank 0 then publishes the target, a
// master file whose datasets are virtual datasets (H5Pset_virtual) over the rank files, with the
// root attributes of emit_checkpoint's file and layerinit.rank_files naming the directory. With
// overwrite, a master it replaces has its rank directory removed after the rename.
//
// A failure on any rank (an exception, or opts.cancel) is agreed on by all ranks before anything is
// published: nothing is published, every temporary is removed, and each rank throws, the first
// failed rank its own error and the others rank_failed. A rank whose collective throws (a peer died)
// removes the staging directory while nothing is published yet and rethrows.
//
// Returns on rank 0 the whole checkpoint's report (tensors in file order, as emit_checkpoint's;
// an HDF5 stacked dataset split among ranks has hashed = false and its layer hashes), elsewhere the
// rank's own tensors. With one rank (c.size() == 1) it is emit_checkpoint.
LAYERINIT_API EmitResult emit_parallel(const Builder& b, backend& be, const std::filesystem::path& target, const EmitOptions& opts,
                                       Collective& c);

}  // namespace layerinit
