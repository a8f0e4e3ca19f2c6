// threads = 0 is the CPUs this process may use (core/cpus.hpp): the affinity mask and the cgroup CPU
// quota, never the machine's CPU count. The affinity part runs in a child restricted with
// sched_setaffinity (as `taskset -c N` starts it); the cgroup part reads fake file contents.
#include <sched.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include <layerinit/backends/backend.hpp>
#include <layerinit/core/cpus.hpp>
#include <layerinit/kernels/fill_host.hpp>
#include "test_util.hpp"

using namespace layerinit;
using layerinit::testing::in_child_with_message;

namespace {

// A reader of a fixed set of files, as the cgroup mounts would show them.
text_file_reader files(std::map<std::string, std::string> m) {
  return [m = std::move(m)](const std::string& path) -> std::optional<std::string> {
    const auto it = m.find(path);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

// The first CPU this process may run on.
int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

}  // namespace

TEST(Cpus, CpuMaxIsQuotaOverPeriodAndMaxIsNoLimit) {
  EXPECT_EQ(parse_cgroup_cpu_max("150000 100000\n"), 1.5);
  EXPECT_EQ(parse_cgroup_cpu_max("200000 100000"), 2.0);
  EXPECT_EQ(parse_cgroup_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_cpu_max(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_cpu_max("garbage"), std::nullopt);
  EXPECT_EQ(parse_cgroup_cpu_max("0 100000"), std::nullopt);  // not a limit the kernel accepts
  EXPECT_EQ(parse_cgroup_cfs_quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_cfs_quota("50000\n", "100000\n"), 0.5);
  EXPECT_EQ(parse_cgroup_cfs_quota("400000", "100000"), 4.0);
  EXPECT_EQ(parse_cgroup_cfs_quota("x", "100000"), std::nullopt);
}

TEST(Cpus, CgroupQuotaIsTheSmallestAlongThePath) {
  // v2: the job's cgroup and its ancestors; the tightest limit wins wherever it sits.
  const std::string v2 = "0::/slurm/job_17/step_0\n";
  EXPECT_EQ(cgroup_cpu_quota(v2, files({{"/sys/fs/cgroup/slurm/job_17/cpu.max", "400000 100000\n"},
                                        {"/sys/fs/cgroup/slurm/job_17/step_0/cpu.max", "max 100000\n"},
                                        {"/sys/fs/cgroup/slurm/cpu.max", "3200000 100000\n"}})),
            4.0);
  EXPECT_EQ(cgroup_cpu_quota(v2, files({{"/sys/fs/cgroup/slurm/job_17/step_0/cpu.max", "250000 100000"}})), 2.5);
  EXPECT_EQ(cgroup_cpu_quota(v2, files({})), std::nullopt);
  // A container without a cgroup namespace: its own cgroup is the mount's root.
  EXPECT_EQ(cgroup_cpu_quota("0::/docker/abc\n", files({{"/sys/fs/cgroup/cpu.max", "100000 100000"}})), 1.0);
  // v1: the cpu controller's line, at cpu,cpuacct or cpu.
  const std::string v1 = "12:memory:/kube/pod1\n4:cpu,cpuacct:/kube/pod1\n1:name=systemd:/kube/pod1\n";
  EXPECT_EQ(cgroup_cpu_quota(v1, files({{"/sys/fs/cgroup/cpu,cpuacct/kube/pod1/cpu.cfs_quota_us", "150000\n"},
                                        {"/sys/fs/cgroup/cpu,cpuacct/kube/pod1/cpu.cfs_period_us", "100000\n"}})),
            1.5);
  EXPECT_EQ(cgroup_cpu_quota(v1, files({{"/sys/fs/cgroup/cpu/kube/cpu.cfs_quota_us", "-1\n"},
                                        {"/sys/fs/cgroup/cpu/kube/cpu.cfs_period_us", "100000\n"},
                                        {"/sys/fs/cgroup/cpu/kube/pod1/cpu.cfs_quota_us", "300000\n"},
                                        {"/sys/fs/cgroup/cpu/kube/pod1/cpu.cfs_period_us", "100000\n"}})),
            3.0);
  // "cpuset" is not "cpu"; a path that climbs is not followed.
  EXPECT_EQ(cgroup_cpu_quota("3:cpuset:/a\n", files({{"/sys/fs/cgroup/cpuset/a/cpu.cfs_quota_us", "100000"},
                                                      {"/sys/fs/cgroup/cpuset/a/cpu.cfs_period_us", "100000"}})),
            std::nullopt);
  EXPECT_EQ(cgroup_cpu_quota("0::/../etc\n", files({{"/sys/fs/cgroup/cpu.max", "100000 100000"}})), std::nullopt);
}

TEST(Cpus, ThreadsZeroIsTheAffinityMaskUnderTaskset) {
  // A child restricted to one CPU, as `taskset -c N layerinit ...` starts: every way threads = 0 is
  // resolved says 1 (hardware_concurrency() still counts the machine).
  const int cpu = first_allowed_cpu();
  ASSERT_GE(cpu, 0);
  const auto out = in_child_with_message([cpu](std::string& msg) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) return 2;
    msg = std::to_string(affinity_cpu_count().value_or(-1)) + " " + std::to_string(usable_cpu_count()) + " " +
          std::to_string(default_thread_count()) + " " + make_backend("cpu", 0)->describe();
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0) << out.status;
  EXPECT_EQ(out.message, "1 1 1 cpu (1 threads)");
}

TEST(Cpus, UsableCpusAreAtLeastOneAndAtMostTheAffinityMask) {
  const int n = usable_cpu_count();
  EXPECT_GE(n, 1);
  const auto affinity = affinity_cpu_count();
  ASSERT_TRUE(affinity.has_value());
  EXPECT_LE(n, *affinity);
}
