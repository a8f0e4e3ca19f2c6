// The MPI job this process may run in. MPI lives in the CLI alone: the library's parallel emit takes
// a Collective (checkpoint/parallel.hpp), which MpiJob implements over MPI_COMM_WORLD, so the library
// builds, installs and runs the same on machines without MPI. Built without MPI (LAYERINIT_MPI=OFF,
// or none found), mpi_none.cpp supplies the same names and MpiJob::start refuses.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <layerinit/checkpoint/parallel.hpp>

namespace layerinit::cli {

// What a launcher's environment says about this process, read without any MPI call:
// OMPI_COMM_WORLD_RANK and _SIZE (Open MPI's mpirun), PMI_RANK and PMI_SIZE (MPICH's hydra, Intel
// MPI), PMIX_RANK (a PMIx launcher such as srun --mpi=pmix; size 0: known only after MPI_Init).
struct Launch {
  std::uint64_t rank = 0;
  std::uint64_t size = 0;
};
std::optional<Launch> mpi_launch();

// This process's rank among those of its node, as its launcher says: OMPI_COMM_WORLD_LOCAL_RANK (Open
// MPI), MPI_LOCALRANKID (MPICH's hydra, Intel MPI), SLURM_LOCALID (srun), LOCAL_RANK (torchrun).
std::optional<std::uint64_t> launcher_local_rank();

// Whether this layerinit was built with MPI.
bool mpi_built();

class MpiJob : public Collective {
 public:
  // MPI_Init, then a group over MPI_COMM_WORLD whose waits poll and give up with
  // layerinit::error("interrupted") once *cancel is set (a signal from the launcher tearing the job
  // down), so the caller can remove its temporaries instead of hanging on a dead peer. Throws
  // layerinit::error when built without MPI.
  static std::unique_ptr<MpiJob> start(int& argc, char**& argv, const std::atomic<bool>* cancel);
  // The smallest `value` over all ranks (allreduce MIN).
  virtual std::uint64_t min(std::uint64_t value) = 0;
  // MPI_Finalize: after every rank's last collective.
  virtual void finish() = 0;
};

}  // namespace layerinit::cli
