// Running the layerinit binary (or any program: mpirun, a Python reader) as a user runs it, for the
// CLI tests: fork + exec, stdout and stderr captured to their ends at once (one poll loop), exit
// status and resource usage from wait4, and the child's limits, umask, directory, user and
// environment set between fork and exec.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace layerinit::testing {

// The layerinit binary of this build tree.
inline const std::string kLayerinit = std::string(LAYERINIT_BINARY_DIR) + "/bin/layerinit";

struct Result {
  int status = 0;
  std::string out, err;
  long maxrss_kb = 0;  // ru_maxrss of the child (Linux: KiB)
  bool exited() const { return WIFEXITED(status); }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  std::string how() const {
    if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
  }
  // Lines of stderr that are layerinit's own (mpirun may add its own banner around them).
  std::vector<std::string> our_lines() const {
    std::vector<std::string> v;
    std::size_t p = 0;
    while (p < err.size()) {
      const std::size_t e = err.find('\n', p);
      const std::string line = err.substr(p, e == std::string::npos ? std::string::npos : e - p);
      if (line.rfind("layerinit:", 0) == 0) v.push_back(line);
      p = e == std::string::npos ? err.size() : e + 1;
    }
    return v;
  }
};

struct SpawnOptions {
  rlim_t max_file_size = RLIM_INFINITY;  // RLIMIT_FSIZE of the child, with SIGXFSZ ignored unless...
  bool default_sigxfsz = false;          // ...this is set: SIGXFSZ as a shell leaves it (terminate)
  rlim_t max_open_files = RLIM_INFINITY; // RLIMIT_NOFILE of the child
  int umask = -1;                        // the child's umask, when >= 0
  std::string cwd;                       // the child's working directory, when not empty
  int uid = -1;                          // run as this user and group id, when >= 0 (needs root)
  const char* stdout_file = nullptr;     // opened for writing as the child's stdout instead of the pipe
  bool close_stdout = false;             // the child starts with fd 1 closed (a shell's >&-)
  // The stderr pipe starts full (64 KiB of '.'): the child's first write to it waits until the test
  // reads, which finish() does; a signal sent before then finds it inside that write.
  bool full_stderr = false;
  bool broken_stdout = false;            // fd 1 is a pipe nobody reads (`| true` once true exited), SIGPIPE default
  rlim_t max_address_space = RLIM_INFINITY;  // RLIMIT_AS: a runaway allocation fails instead of eating the machine
  unsigned alarm_s = 0;                  // SIGALRM (kept across exec) ends a child that runs this long
  std::map<std::string, std::string> env;  // set in the child's environment (replacing inherited values)
  // Sent to the child, blocked, just before exec (a blocked signal stays pending across exec): it
  // arrives at the program's first unblocking, before any of its work. 0: none.
  int pending_signal = 0;
  int ignored_signal = 0;  // SIG_IGN in the child (as nohup leaves SIGHUP). 0: none
  int only_cpu = -1;       // the child may run on this CPU alone (as `taskset -c N` starts it), when >= 0
};

struct Child {
  pid_t pid = -1;
  int out = -1, err = -1;
};

// Reads a child's stdout and stderr to their ends at once; closes both descriptors.
inline void drain(int out_fd, int err_fd, std::string& out, std::string& err) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  char buf[65536];
  for (int open_fds = 2; open_fds > 0;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& f : fds)
    if (f.fd >= 0) ::close(f.fd);
}

// Starts argv[0] (looked up on PATH when it names no directory) with argv[1...]. The child's stdin is
// /dev/null. Exit 126: the child could not be set up as asked; 127: the program could not be run.
inline Child spawn_command(const std::vector<std::string>& argv_in, const SpawnOptions& so = {}) {
  if (argv_in.empty()) throw std::invalid_argument("spawn_command: no program");
  std::vector<std::string> all = argv_in;
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Built before fork: the child only execs. An inherited variable that so.env sets is left out.
  // Progress lines off a terminal come every 5 s of a run: on a slow (sanitized) build a test that
  // compares stderr exactly would see them now and then. Off unless a test asks (test_cli_batch.cpp).
  std::map<std::string, std::string> env = so.env;
  env.emplace("LAYERINIT_TEST_PROGRESS_INTERVAL", "1e9");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (!env.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    if (so.stdout_file) {
      const int fd = ::open(so.stdout_file, O_WRONLY);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, STDOUT_FILENO);
      ::close(fd);
    }
    if (so.close_stdout) ::close(STDOUT_FILENO);
    if (so.full_stderr) {
      const int flags = ::fcntl(STDERR_FILENO, F_GETFL);
      ::fcntl(STDERR_FILENO, F_SETFL, flags | O_NONBLOCK);
      char dots[4096];
      for (char& d : dots) d = '.';
      while (::write(STDERR_FILENO, dots, sizeof dots) > 0 || errno == EINTR) {
      }
      while (::write(STDERR_FILENO, dots, 1) > 0 || errno == EINTR) {
      }
      ::fcntl(STDERR_FILENO, F_SETFL, flags);
    }
    if (so.broken_stdout) {
      int p[2];
      if (::pipe(p) != 0 || ::close(p[0]) != 0 || ::dup2(p[1], STDOUT_FILENO) < 0) ::_exit(126);
      ::close(p[1]);
      ::signal(SIGPIPE, SIG_DFL);  // as a shell leaves it, whatever this test inherited
    }
    if (so.max_address_space != RLIM_INFINITY) {
      struct rlimit rl = {so.max_address_space, so.max_address_space};
      ::setrlimit(RLIMIT_AS, &rl);
    }
    if (so.alarm_s) ::alarm(so.alarm_s);
    if (so.max_file_size != RLIM_INFINITY) {
      // Ignored is kept across exec: writes fail with EFBIG instead.
      ::signal(SIGXFSZ, so.default_sigxfsz ? SIG_DFL : SIG_IGN);
      struct rlimit rl = {so.max_file_size, so.max_file_size};
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    if (so.max_open_files != RLIM_INFINITY) {
      struct rlimit rl = {so.max_open_files, so.max_open_files};
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (so.umask >= 0) ::umask(static_cast<mode_t>(so.umask));
    if (!so.cwd.empty() && ::chdir(so.cwd.c_str()) != 0) ::_exit(126);
    if (so.uid >= 0 && (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(so.uid)) != 0 ||
                        ::setuid(static_cast<uid_t>(so.uid)) != 0))
      ::_exit(126);
    if (so.ignored_signal) ::signal(so.ignored_signal, SIG_IGN);
    if (so.only_cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(so.only_cpu, &one);
      if (::sched_setaffinity(0, sizeof one, &one) != 0) ::_exit(126);
    }
    if (so.pending_signal) {
      ::signal(so.pending_signal, SIG_DFL);  // as a user's shell leaves it, whatever this test inherited
      sigset_t blocked;
      sigemptyset(&blocked);
      sigaddset(&blocked, so.pending_signal);
      if (::sigprocmask(SIG_BLOCK, &blocked, nullptr) != 0 || ::kill(::getpid(), so.pending_signal) != 0) ::_exit(126);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  return {pid, out[0], err[0]};
}

// Waits for the child, its output read to the end.
inline Result finish(Child c) {
  Result r;
  drain(c.out, c.err, r.out, r.err);
  struct rusage ru {};
  ::wait4(c.pid, &r.status, 0, &ru);
  r.maxrss_kb = ru.ru_maxrss;
  return r;
}

inline Result run_command(const std::vector<std::string>& argv, const SpawnOptions& so = {}) {
  return finish(spawn_command(argv, so));
}

// layerinit with these arguments.
inline std::vector<std::string> layerinit_command(const std::vector<std::string>& args) {
  std::vector<std::string> v{kLayerinit};
  v.insert(v.end(), args.begin(), args.end());
  return v;
}
inline Child spawn(const std::vector<std::string>& args, const SpawnOptions& so = {}) {
  return spawn_command(layerinit_command(args), so);
}
inline Result run(const std::vector<std::string>& args, const SpawnOptions& so = {}) { return finish(spawn(args, so)); }

// A copy of the layerinit binary from the build tree (it links the library's objects: no
// liblayerinit.so to carry along), in `dir` (created, mode 755), for running as another user: the
// build tree may lie where that user cannot reach it (a clone under a mode-700 home, or under mktemp
// -d). Returns the copy's path.
inline std::string copy_layerinit(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  constexpr fs::perms rwxr_xr_x = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec;
  fs::create_directories(dir);
  fs::permissions(dir, rwxr_xr_x);
  const fs::path program = dir / "layerinit";
  fs::copy_file(kLayerinit, program, fs::copy_options::overwrite_existing);
  fs::permissions(program, rwxr_xr_x);
  return program.string();
}

// The command line, for messages.
inline std::string joined(const std::vector<std::string>& args) {
  std::string s = "layerinit";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

// Exactly one line, starting "layerinit: error:".
inline void expect_one_error_line(const Result& r, const std::string& what) {
  EXPECT_EQ(r.err.rfind("layerinit: error:", 0), 0u) << what << "\nstderr: " << r.err;
  EXPECT_FALSE(r.err.empty() || r.err.back() != '\n') << what << ": stderr does not end with a newline: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << "\nstderr: " << r.err;
}

// A model of 272 MiB in bf16 whose largest part is a layer of 16 MiB + 2 KiB (the embedding is
// 16 MiB): 17 times its largest part. About 1 s to emit on two cores.
inline const char* const kBigSpec = R"({"name": "cli-big", "family": "custom", "hyper": {"hidden_size": 1024},
 "pre": [{"name": "embed.weight", "shape": [8192, 1024], "role": "embedding"}],
 "layer": {"prefix": "blocks.", "count": 16, "tensors": [
   {"name": "norm.weight", "shape": [1024], "role": "norm_weight"},
   {"name": "up.weight", "shape": [4096, 1024], "role": "linear_weight", "fan_in": 1024, "fan_out": 4096,
    "transposable": true},
   {"name": "down.weight", "shape": [1024, 4096], "role": "output_weight", "fan_in": 4096, "fan_out": 1024,
    "transposable": true}]},
 "post": [{"name": "norm.weight", "shape": [1024], "role": "norm_weight"}]})";

// 4e9 identical layers of one norm weight: 8 TB of weights, as many datasets in per-layer layout.
inline const char* const kHugeSpec = R"({"name": "huge", "family": "custom", "hyper": {"hidden_size": 1024},
    "layer": {"count": 4000000000, "tensors": [{"name": "norm.weight", "shape": [1024], "role": "norm_weight"}]}})";

// The fixture of the CLI tests: skips (GTEST_SKIP) when the binary was not built
// (LAYERINIT_BUILD_TOOLS=OFF).
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kLayerinit.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << kLayerinit << " (tools not built)";
  }
};

}  // namespace layerinit::testing
