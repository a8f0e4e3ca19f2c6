// A layerinit built without MPI: the launcher's environment is still read, so that `mpirun -np 4
// layerinit emit` is refused instead of four processes writing the same checkpoint.
#include "mpi.hpp"

namespace layerinit::cli {

bool mpi_built() { return false; }

std::unique_ptr<MpiJob> MpiJob::start(int&, char**&, const std::atomic<bool>*) {
  throw error("this layerinit was built without MPI (LAYERINIT_MPI=OFF, or CMake found no MPI)");
}

}  // namespace layerinit::cli
