// available_host_memory on fake /proc and /sys/fs/cgroup trees: cgroup v2 and v1 limits of the
// process's cgroup and its ancestors, inactive file cache not counted as used, MemAvailable, the
// smallest winning; unlimited, missing and malformed files ignored. And the host backend answers
// with the real machine's numbers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <layerinit/memory/available.hpp>
#include <layerinit/backends/backend.hpp>
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace layerinit;
using layerinit::testing::TempDir;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

void meminfo(const TempDir& root, std::uint64_t available_kb) {
  put(root / "proc/meminfo", "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   " +
                                 std::to_string(available_kb) + " kB\nBuffers:          100000 kB\n");
}

}  // namespace

TEST(AvailableMemory, MemAvailableAloneInBytes) {
  TempDir root;
  meminfo(root, 2097152);  // 2 GiB
  const auto a = available_host_memory(root.path());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 2048 * MiB);
  EXPECT_EQ(a->source, "MemAvailable in /proc/meminfo");
}

TEST(AvailableMemory, NothingReadableIsUnknown) {
  TempDir root;
  EXPECT_FALSE(available_host_memory(root.path()).has_value());
  put(root / "proc/meminfo", "MemAvailable: lots\n");
  put(root / "proc/self/cgroup", "0::/a\n");
  put(root / "sys/fs/cgroup/a/memory.max", "garbage\n");
  put(root / "sys/fs/cgroup/a/memory.current", "100\n");
  EXPECT_FALSE(available_host_memory(root.path()).has_value());
}

TEST(AvailableMemory, CgroupV2TheTightestLevelWinsAndInactiveFileIsNotUsed) {
  TempDir root;
  meminfo(root, 16 * 1024 * 1024);  // 16 GiB
  put(root / "proc/self/cgroup", "0::/job/step\n");
  const fs::path cg = root / "sys/fs/cgroup";
  put(cg / "cgroup.controllers", "cpu memory pids\n");
  // The process's own cgroup: 1 GiB, 256 MiB charged of which 64 MiB inactive file cache: 832 MiB left.
  put(cg / "job/step/memory.max", std::to_string(1024 * MiB) + "\n");
  put(cg / "job/step/memory.current", std::to_string(256 * MiB) + "\n");
  put(cg / "job/step/memory.stat", "anon 199229440\nfile 67108864\nactive_file 0\ninactive_file " +
                                       std::to_string(64 * MiB) + "\nslab 1000\n");
  // Its parent: no limit.
  put(cg / "job/memory.max", "max\n");
  put(cg / "job/memory.current", std::to_string(5000 * MiB) + "\n");
  auto a = available_host_memory(root.path());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 832 * MiB);
  EXPECT_EQ(a->source, "cgroup v2 memory.max - memory.current of " + (cg / "job/step").string());
  // A tighter parent: 600 MiB with 100 MiB charged.
  put(cg / "job/memory.max", std::to_string(600 * MiB) + "\n");
  put(cg / "job/memory.current", std::to_string(100 * MiB) + "\n");
  a = available_host_memory(root.path());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 500 * MiB);
  EXPECT_EQ(a->source, "cgroup v2 memory.max - memory.current of " + (cg / "job").string());
  // Charged past the limit: nothing left.
  put(cg / "job/memory.current", std::to_string(700 * MiB) + "\n");
  a = available_host_memory(root.path());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 0u);
  // MemAvailable below every cgroup: it wins.
  put(cg / "job/memory.max", "max\n");
  meminfo(root, 100 * 1024);
  a = available_host_memory(root.path());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 100 * MiB);
  EXPECT_EQ(a->source, "MemAvailable in /proc/meminfo");
}

TEST(AvailableMemory, CgroupV2WithoutANamespaceUsesTheMountRoot) {
  // /proc/self/cgroup names the host's path, which the container's mount does not have.
  TempDir root;
  meminfo(root, 16 * 1024 * 1024);
  put(root / "proc/self/cgroup", "0::/system.slice/docker-abc.scope\n");
  put(root / "sys/fs/cgroup/memory.max", std::to_string(512 * MiB) + "\n");
  put(root / "sys/fs/cgroup/memory.current", std::to_string(12 * MiB) + "\n");
  const auto a = available_host_memory(root.path());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 500 * MiB);
}

TEST(AvailableMemory, CgroupV1MemoryControllerInAHybridTree) {
  // v1 controllers plus an empty v2 hierarchy at unified/ (systemd's hybrid layout).
  TempDir root;
  meminfo(root, 16 * 1024 * 1024);
  put(root / "proc/self/cgroup",
      "9:name=systemd:/\n8:pids:/\n4:cpuset,memory:/docker/abc\n3:cpu,cpuacct:/\n0::/\n");
  put(root / "sys/fs/cgroup/unified/cgroup.controllers", "");
  const fs::path mem = root / "sys/fs/cgroup/memory";
  put(mem / "memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
  put(mem / "memory.usage_in_bytes", std::to_string(4000 * MiB) + "\n");
  put(mem / "docker/abc/memory.limit_in_bytes", std::to_string(2048 * MiB) + "\n");
  put(mem / "docker/abc/memory.usage_in_bytes", std::to_string(1024 * MiB) + "\n");
  put(mem / "docker/abc/memory.stat", "cache 1\ntotal_inactive_file " + std::to_string(24 * MiB) + "\ninactive_file 5\n");
  const auto a = available_host_memory(root.path());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 1048 * MiB);
  EXPECT_EQ(a->source, "cgroup v1 memory.limit_in_bytes - memory.usage_in_bytes of " + (mem / "docker/abc").string());
}

TEST(AvailableMemory, PathsCannotLeaveTheMount) {
  TempDir root;
  put(root / "proc/self/cgroup", "0::/../../outside\n");
  put(root / "sys/fs/cgroup/memory.max", std::to_string(300 * MiB) + "\n");
  put(root / "sys/fs/cgroup/memory.current", "0\n");
  put(root / "outside/memory.max", "1\n");
  put(root / "outside/memory.current", "0\n");
  const auto a = available_host_memory(root.path());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 300 * MiB);
}

TEST(AvailableMemory, TheHostBackendAsksThisMachine) {
  // Every Linux has MemAvailable: the backend answers what the real tree says (read a moment apart).
  const auto a = make_host_backend(1)->available_memory();
  const auto real = available_host_memory();
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(real.has_value());
  EXPECT_EQ(a->source, real->source);
  EXPECT_LT(a->bytes > real->bytes ? a->bytes - real->bytes : real->bytes - a->bytes, 256 * MiB);
  EXPECT_FALSE(make_dry_backend()->available_memory().has_value());
}
