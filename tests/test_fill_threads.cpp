// The host fill when threads cannot be started (a pids limit in a container, RLIMIT_NPROC): it goes
// on with the threads it has (the calling thread always works) and writes the same bytes; it never
// aborts. Thread creation is made to fail deterministically through set_fill_thread_start_hook,
// because root ignores RLIMIT_NPROC and a pids cgroup is not writable in CI. Each fill runs in a
// child process, so an abort (std::terminate on a joinable std::thread) is a failed test, not a
// crashed test binary.
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <new>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/fill_host.hpp>
#include <layerinit/kernels/fill_host_seams.hpp>
#include "test_util.hpp"

using namespace layerinit;
using layerinit::testing::in_child_with_message;

namespace {

using Bytes = std::vector<unsigned char>;

// 8 chunks of 2^16 elements and a tail: enough work for 8 threads.
constexpr std::uint64_t kElements = 8 * 65536 + 123;

Bytes fill_bf16(int threads) {
  Bytes out(kElements * 2);
  const FillJob j = make_fill_job(out.data(), DType::bf16, kElements, 7, "model.layers.0.mlp.up_proj.weight",
                                  FillSpec::normal(0, 0.02));
  fill_host(std::span(&j, 1), threads);
  return out;
}

std::atomic<int> g_calls{0};
std::atomic<int> g_fail_from{0};  // the first k whose start fails
std::atomic<int> g_kind{0};       // 0: std::system_error(EAGAIN), 1: std::bad_alloc

void failing_start(std::size_t k) {
  ++g_calls;
  if (static_cast<int>(k) < g_fail_from.load()) return;
  if (g_kind.load() == 0) throw std::system_error(EAGAIN, std::generic_category(), "pthread_create");
  throw std::bad_alloc();
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

TEST(FillThreads, ThreadStartFailureGoesOnWithFewerThreadsAndTheSameBytes) {
  const Bytes reference = fill_bf16(1);
  struct Case {
    int fail_from;  // 1: no extra thread starts; 3: two start, the third fails
    int kind;
  };
  for (const Case c : {Case{3, 0}, Case{1, 0}, Case{5, 1}}) {
    SCOPED_TRACE("thread " + std::to_string(c.fail_from) + (c.kind == 0 ? " fails with EAGAIN" : " fails with bad_alloc"));
    const auto out = in_child_with_message([&](std::string& msg) {
      g_calls = 0;
      g_fail_from = c.fail_from;
      g_kind = c.kind;
      set_fill_thread_start_hook(failing_start);
      const Bytes got = fill_bf16(8);
      set_fill_thread_start_hook(nullptr);
      msg = std::to_string(g_calls.load());
      return got == reference ? 0 : 1;
    });
    ASSERT_TRUE(WIFEXITED(out.status)) << "the fill did not return: " << describe(out.status);
    EXPECT_EQ(WEXITSTATUS(out.status), 0) << "bytes differ from the single-thread fill";
    // Starts are attempted up to the first failure and no further.
    EXPECT_EQ(out.message, std::to_string(c.fail_from)) << "thread starts attempted";
  }
}

TEST(FillThreads, HookThatNeverFailsChangesNothing) {
  const Bytes reference = fill_bf16(1);
  const auto out = in_child_with_message([&](std::string& msg) {
    g_calls = 0;
    g_fail_from = 1000;
    set_fill_thread_start_hook(failing_start);
    const Bytes got = fill_bf16(8);
    set_fill_thread_start_hook(nullptr);
    msg = std::to_string(g_calls.load());
    return got == reference ? 0 : 1;
  });
  ASSERT_TRUE(WIFEXITED(out.status)) << describe(out.status);
  EXPECT_EQ(WEXITSTATUS(out.status), 0);
  EXPECT_EQ(out.message, "7") << "8 threads: the caller and 7 started";
}
