// MpiJob over MPI_COMM_WORLD. Every collective is non-blocking (MPI-3) and polled, so a rank whose
// peer died stops waiting when the launcher's SIGTERM arrives (the handler sets *cancel) and removes
// its temporaries within the grace period before SIGKILL (about a second for Open MPI's mpirun).
#include <mpi.h>

#include <time.h>

#include <limits>

#include "mpi.hpp"

namespace layerinit::cli {

bool mpi_built() { return true; }

namespace {

class Job final : public MpiJob {
 public:
  explicit Job(const std::atomic<bool>* cancel) : cancel_(cancel) {
    int r = 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    rank_ = static_cast<std::uint64_t>(r);
    size_ = static_cast<std::uint64_t>(n);
  }
  std::uint64_t rank() const override { return rank_; }
  std::uint64_t size() const override { return size_; }

  std::optional<std::uint64_t> first_failure(bool ok) override {
    const std::uint64_t m = min(ok ? std::numeric_limits<std::uint64_t>::max() : rank_);
    if (m == std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
    return m;
  }

  std::uint64_t min(std::uint64_t value) override {
    std::uint64_t out = 0;
    MPI_Request req;
    check(MPI_Iallreduce(&value, &out, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD, &req), "MPI_Iallreduce");
    wait(req);
    return out;
  }

  std::string broadcast(const std::string& text, std::uint64_t root) override {
    std::uint64_t n = text.size();
    MPI_Request req;
    check(MPI_Ibcast(&n, 1, MPI_UINT64_T, static_cast<int>(root), MPI_COMM_WORLD, &req), "MPI_Ibcast");
    wait(req);
    std::string out = rank_ == root ? text : std::string(n, '\0');
    if (n > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) throw error("emit: MPI message too large");
    check(MPI_Ibcast(out.data(), static_cast<int>(n), MPI_CHAR, static_cast<int>(root), MPI_COMM_WORLD, &req), "MPI_Ibcast");
    wait(req);
    return out;
  }

  std::vector<std::string> gather(const std::string& text, std::uint64_t root) override {
    if (text.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) throw error("emit: MPI message too large");
    const int n = static_cast<int>(text.size());
    std::vector<int> sizes(rank_ == root ? size_ : 0), displs(sizes.size());
    MPI_Request req;
    check(MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, static_cast<int>(root), MPI_COMM_WORLD, &req), "MPI_Igather");
    wait(req);
    std::uint64_t total = 0;
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      if (total > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) throw error("emit: MPI message too large");
      displs[r] = static_cast<int>(total);
      total += static_cast<std::uint64_t>(sizes[r]);
    }
    std::string all(total, '\0');
    check(MPI_Igatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR, static_cast<int>(root),
                       MPI_COMM_WORLD, &req),
          "MPI_Igatherv");
    wait(req);
    std::vector<std::string> out;
    for (std::size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(displs[r], sizes[r]));
    return out;
  }

  void finish() override { MPI_Finalize(); }

 private:
  static void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) throw error(std::string("emit: ") + call + " failed");
  }
  // Polls every 0.2 ms: a collective here completes in microseconds to milliseconds, and the wait
  // must notice *cancel_ without a blocking call that never returns.
  void wait(MPI_Request& req) {
    const timespec pause{0, 200'000};
    for (;;) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      if (cancel_ && cancel_->load()) throw error("interrupted");
      ::nanosleep(&pause, nullptr);
    }
  }

  const std::atomic<bool>* cancel_;
  std::uint64_t rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<MpiJob> MpiJob::start(int& argc, char**& argv, const std::atomic<bool>* cancel) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) throw error("emit: MPI_Init failed");
  // Errors come back as return codes (checked above) instead of aborting the whole job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return std::make_unique<Job>(cancel);
}

}  // namespace layerinit::cli
