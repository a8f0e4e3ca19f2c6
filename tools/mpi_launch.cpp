// Reads what a launcher tells its processes through the environment (no MPI call).
#include <cstdlib>
#include <string>

#include "args.hpp"
#include "mpi.hpp"

namespace layerinit::cli {

namespace {
std::optional<std::uint64_t> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  try {
    return parse_decimal(v, name, 0, UINT64_MAX);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}
}  // namespace

std::optional<Launch> mpi_launch() {
  for (auto [rank, size] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const auto r = env_number(rank), s = env_number(size);
    if (r && s) return Launch{*r, *s};
  }
  if (const auto r = env_number("PMIX_RANK")) return Launch{*r, 0};
  return std::nullopt;
}

std::optional<std::uint64_t> launcher_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const auto r = env_number(name)) return r;
  return std::nullopt;
}

}  // namespace layerinit::cli
