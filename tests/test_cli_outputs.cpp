// What the layerinit binary writes, and what it will not replace (tests/cli_runner.hpp runs it):
//   - an existing target without --force is exit 2 and untouched; --force replaces only what
//     layerinit wrote (never a FIFO, socket, device node, mount point, foreign file or directory);
//   - a run killed mid-write (SIGKILL) leaves no file at the target and an older file there intact;
//     SIGINT/SIGTERM exit 130, remove the temporary and leave the target untouched;
//   - nothing fails after the rename; traces follow the same rules; outputs follow the umask.
// Skips (GTEST_SKIP) when the binary was not built (LAYERINIT_BUILD_TOOLS=OFF).
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_runner.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace layerinit::testing;
using Cli = CliTest;

namespace {

// The temporary beside `target` (".<name>.tmp-XXXXXX") and the bytes written into it so far.
std::optional<std::pair<fs::path, std::uint64_t>> find_temporary(const fs::path& target) {
  const std::string prefix = "." + target.filename().string() + ".tmp-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::uint64_t bytes = 0;
    if (e.is_directory(ec)) {
      for (const auto& f : fs::recursive_directory_iterator(e.path(), ec))
        if (f.is_regular_file(ec)) bytes += f.file_size(ec);
    } else {
      bytes = e.file_size(ec);
    }
    return std::make_pair(e.path(), ec ? 0 : bytes);
  }
  return std::nullopt;
}

// Waits until the child has written at least `bytes` into its temporary; false if it exited first.
bool wait_until_writing(const Child& c, const fs::path& target, std::uint64_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto t = find_temporary(target);
    if (t && t->second >= bytes) return true;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == c.pid)
      return false;  // exited (still to be reaped by finish())
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// Every entry under `root` (not following links) with its type and, for files and links, what
// they hold (a file as a hash of its bytes): equal snapshots mean nothing there was touched.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const fs::file_status st = e.symlink_status();
    std::string v = std::to_string(static_cast<int>(st.type()));
    if (st.type() == fs::file_type::regular) v += ":" + std::to_string(std::hash<std::string>{}(slurp(e.path())));
    if (st.type() == fs::file_type::symlink) v += ":" + fs::read_symlink(e.path()).string();
    out[fs::relative(e.path(), root).string()] = std::move(v);
  }
  return out;
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

}  // namespace

TEST_F(Cli, ExistingTargetWithoutForceIsExitTwoAndUntouched) {
  TempDir dir;
  for (const char* format : {"hdf5", "safetensors"}) {
    SCOPED_TRACE(format);
    const fs::path target = dir / (std::string("m.") + format);
    ASSERT_EQ(run({"emit", "--preset", "gpt2-tiny", "--format", format, "-o", target.string()}).code(), 0);
    const fs::path data = std::string(format) == "hdf5" ? target : target / "model.safetensors";
    const std::string old = slurp(data);
    const Result r = run({"emit", "--preset", "llama-tiny", "--format", format, "-o", target.string()});
    EXPECT_EQ(r.code(), 2) << r.how();
    expect_one_error_line(r, "existing target");
    EXPECT_NE(r.err.find("refusing to overwrite existing " + target.string() + " (use --force)"), std::string::npos) << r.err;
    EXPECT_EQ(slurp(data), old);
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"m.hdf5", "m.safetensors"}));
}

TEST_F(Cli, KilledMidWriteLeavesNoTargetAndTheOldFileIntact) {
  TempDir dir;
  const std::string spec = (dir / "big.json").string();
  write_file(spec, kBigSpec);
  for (const char* format : {"hdf5", "safetensors"}) {
    for (bool old : {false, true}) {
      SCOPED_TRACE(std::string(format) + (old ? ", over an old checkpoint" : ", new target"));
      const fs::path target = dir / (std::string("m.") + format);
      const fs::path data = std::string(format) == "hdf5" ? target : target / "model.safetensors";
      std::string before;
      if (old) {
        ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--format", format, "-o", target.string()}).code(), 0);
        before = slurp(data);
      }
      Child c = spawn({"emit", "--spec", spec, "--format", format, "--force", "--backend", "cpu", "--threads", "2",
                       "-o", target.string()});
      const bool writing = wait_until_writing(c, target, 8u << 20);
      ::kill(c.pid, SIGKILL);
      const Result r = finish(c);
      ASSERT_TRUE(writing) << "the emit ended before it had written 8 MiB: " << r.how() << " " << r.err;
      ASSERT_TRUE(WIFSIGNALED(r.status)) << r.how();
      if (old) {
        EXPECT_EQ(slurp(data), before) << "the old checkpoint changed";
      } else {
        EXPECT_FALSE(fs::exists(target));
      }
      // A killed process cannot remove its temporary: it is the only other thing there, until the
      // next emit to the same target (with --force over the old checkpoint, else without) removes it.
      ASSERT_TRUE(find_temporary(target).has_value());
      std::vector<std::string> later{"emit", "--preset", "gpt2-tiny", "--format", format, "-o", target.string()};
      if (old) later.push_back("--force");
      const Result again = run(later);
      ASSERT_EQ(again.code(), 0) << again.how() << "\nstderr: " << again.err;
      EXPECT_FALSE(find_temporary(target).has_value()) << "the killed emit's temporary is still there";
      std::vector<std::string> expected{"big.json"};
      for (const char* f : {"hdf5", "safetensors"})
        if (fs::exists(dir / (std::string("m.") + f))) expected.push_back(std::string("m.") + f);
      EXPECT_EQ(dir.entries(), expected);
      fs::remove_all(target);
    }
  }
}

TEST_F(Cli, InterruptExits130RemovesTheTemporaryAndKeepsTheTarget) {
  TempDir dir;
  const std::string spec = (dir / "big.json").string();
  write_file(spec, kBigSpec);
  struct Case {
    const char* format;
    int sig;
    bool old;
  };
  for (const Case k : {Case{"hdf5", SIGINT, true}, Case{"safetensors", SIGINT, true}, Case{"hdf5", SIGTERM, false},
                       Case{"safetensors", SIGINT, false}}) {
    SCOPED_TRACE(std::string(k.format) + " " + strsignal(k.sig) + (k.old ? " over an old checkpoint" : ""));
    const fs::path target = dir / (std::string("m.") + k.format);
    const fs::path data = std::string(k.format) == "hdf5" ? target : target / "model.safetensors";
    std::string before;
    if (k.old) {
      ASSERT_EQ(run({"emit", "--preset", "gpt2-tiny", "--format", k.format, "-o", target.string()}).code(), 0);
      before = slurp(data);
    }
    Child c = spawn({"emit", "--spec", spec, "--format", k.format, "--force", "--backend", "cpu", "--threads", "2",
                     "-o", target.string()});
    const bool writing = wait_until_writing(c, target, 8u << 20);
    ::kill(c.pid, k.sig);
    const Result r = finish(c);
    ASSERT_TRUE(writing) << "the emit ended before it had written 8 MiB: " << r.how() << " " << r.err;
    EXPECT_EQ(r.code(), 130) << r.how() << "\nstderr: " << r.err;
    EXPECT_EQ(r.err, "layerinit: interrupted; " + target.string() + " was left as it was\n");
    EXPECT_FALSE(find_temporary(target).has_value()) << "temporary left behind";
    if (k.old) {
      EXPECT_EQ(slurp(data), before);
      EXPECT_EQ(dir.entries(), (std::vector<std::string>{"big.json", target.filename().string()}));
    } else {
      EXPECT_EQ(dir.entries(), std::vector<std::string>{"big.json"});
    }
    fs::remove_all(target);
  }
}

// A signal in the first 5-90 ms (before emit installed its handlers) killed the process silently
// (status 143 for SIGTERM, no line). The handlers come first in main, for every command: a signal
// that is already there when the program starts (sent blocked before exec, so it arrives at the
// program's very first step) is exit 130 and one line, and nothing is written.
TEST_F(Cli, AnInterruptBeforeAnyWorkIsExit130AndOneLine) {
  TempDir dir;
  const std::string h5 = (dir / "m.h5").string(), st = (dir / "m").string();
  const std::vector<std::vector<std::string>> commands = {
      {"emit", "--preset", "llama-tiny", "--backend", "cpu", "--report", "json", "-o", h5},
      {"emit", "--preset", "llama-tiny", "--backend", "cpu", "--format", "safetensors", "-o", st},
      {"build", "--preset", "llama-tiny", "--backend", "cpu", "--trace", (dir / "t.csv").string()},
      {"plan", "--preset", "llama-tiny"},
  };
  for (const auto& args : commands) {
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
      SCOPED_TRACE(joined(args) + " with " + strsignal(sig) + " pending");
      SpawnOptions so;
      so.pending_signal = sig;
      const Result r = run(args, so);
      EXPECT_EQ(r.code(), 130) << r.how() << "\nstderr: " << r.err;
      EXPECT_EQ(r.err, "layerinit: interrupted\n");
      EXPECT_EQ(r.out, "");
      EXPECT_EQ(dir.entries(), std::vector<std::string>{});
    }
  }
}

// Under a launcher only rank 0 speaks (mpirun tears the others down with SIGTERM when rank 0 fails):
// a rank that is not 0 was quiet only from the middle of main, so a SIGTERM in its first
// milliseconds printed a second "interrupted" line beside rank 0's error (CliMpi.BadInputIsOneLineExitTwo,
// now and then under load). Pending at exec, the signal comes at the handlers' very first step.
TEST_F(Cli, AnInterruptBeforeAnyWorkIsSilentOnRanksOtherThanZero) {
  for (const char* rank : {"0", "1"}) {
    SCOPED_TRACE(std::string("rank ") + rank);
    SpawnOptions so;
    so.pending_signal = SIGTERM;
    so.env = {{"OMPI_COMM_WORLD_RANK", rank}, {"OMPI_COMM_WORLD_SIZE", "2"}};
    const Result r = run({"emit", "--preset", "llama-tiny", "-o", "/nonexistent/x"}, so);
    EXPECT_EQ(r.code(), 130) << r.how() << "\nstderr: " << r.err;
    EXPECT_EQ(r.err, std::string(rank) == "0" ? "layerinit: interrupted\n" : "");
  }
}

// A signal once the error is decided (rank 0's line being written, or the process exiting) is
// ignored: the line is written whole and the exit is the error's code. mpirun's SIGTERM, sent when
// another rank failed first, reached rank 0 there and added "layerinit: interrupted" and 130 under its
// line (CliMpi.BadInputIsOneLineExitTwo, now and then). The child waits in the write of its line
// (stderr full) when the signal comes.
TEST_F(Cli, ASignalAfterTheErrorIsDecidedKeepsItsLineAndCode) {
  SpawnOptions so;
  so.full_stderr = true;
  Child c = spawn({"build", "--preset", "nope"}, so);
  // Until the child waits inside the write of its line (its state S, in a pipe write), at most 10 s.
  for (int i = 0; i < 1000; ++i) {
    std::ifstream wchan("/proc/" + std::to_string(c.pid) + "/wchan");
    std::string w;
    if (std::getline(wchan, w) && w.find("pipe_write") != std::string::npos) break;
    ::usleep(10000);
  }
  ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
  const Result r = finish(c);
  const std::string err = r.err.substr(std::min(r.err.size(), r.err.find_first_not_of('.')));
  EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << err;
  EXPECT_EQ(err.rfind("layerinit: error: preset 'nope' is unknown (valid: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;  // no "layerinit: interrupted"
}

// Whether the process `pid` catches `sig` (SigCgt of /proc/PID/status): false once it has exited.
bool catches(pid_t pid, int sig) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1;
  return false;
}

// Whenever SIGTERM comes once the program runs its own code (the dynamic loader before main is the
// system's: the test waits until the handler is there, sending at once or up to 90 ms later), the
// outcome is exit 130 with one line and nothing left, or (too late to stop) a published checkpoint
// and exit 0: never a silent death.
TEST_F(Cli, AnInterruptAtAnyMomentIsExit130OrSuccess) {
  TempDir dir;
  int interrupted = 0;
  for (const char* format : {"hdf5", "safetensors"}) {
    for (const int delay_ms : {0, 0, 1, 2, 5, 10, 20, 35, 50, 90}) {
      SCOPED_TRACE(std::string(format) + ", SIGTERM after " + std::to_string(delay_ms) + " ms");
      const fs::path target = dir / "m";
      Child c = spawn({"emit", "--preset", "llama-tiny", "--backend", "cpu", "--format", format, "--report", "json",
                       "-o", target.string()});
      for (int i = 0; i < 60'000 && !catches(c.pid, SIGTERM); ++i) ::usleep(100);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      ::kill(c.pid, SIGTERM);
      const Result r = finish(c);
      ASSERT_TRUE(r.exited()) << r.how() << "\nstderr: " << r.err;
      if (r.code() == 130) {
        ++interrupted;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_EQ(r.err.rfind("layerinit: interrupted", 0), 0u) << r.err;
        EXPECT_EQ(r.out, "");
        EXPECT_EQ(dir.entries(), std::vector<std::string>{});
      } else {
        EXPECT_EQ(r.code(), 0) << r.err;
        EXPECT_EQ(r.err, "");
        EXPECT_EQ(json::parse(r.out)["output"], target.string());
        EXPECT_EQ(dir.entries(), std::vector<std::string>{"m"});
      }
      fs::remove_all(target);
    }
  }
  EXPECT_GT(interrupted, 0);  // at 0 ms the signal comes before the emit is done
}

// Handled from the first step for every command, SIGHUP would override what `nohup` asked for: a
// hangup that was ignored when layerinit started stays ignored.
TEST_F(Cli, AHangupIgnoredByNohupStaysIgnored) {
  TempDir dir;
  const fs::path target = dir / "m.h5";
  SpawnOptions so;
  so.ignored_signal = SIGHUP;
  Child c = spawn({"emit", "--preset", "llama-tiny", "--backend", "cpu", "-o", target.string()}, so);
  for (int i = 0; i < 60'000 && !catches(c.pid, SIGTERM); ++i) ::usleep(100);
  ::kill(c.pid, SIGHUP);
  const Result r = finish(c);
  EXPECT_EQ(r.code(), 0) << r.how() << "\nstderr: " << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.h5"});
}

TEST_F(Cli, ForceRefusesWhatLayerinitDidNotWrite) {
  TempDir dir;
  // Things layerinit did not write, beside outputs it did.
  const fs::path fifo = dir / "fifo.h5";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const fs::path text = dir / "notes.h5";
  write_file(text, "my notes\n");
  const fs::path sock = dir / "sock.h5";
  const int sfd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sfd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.string().size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(sfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const fs::path real = dir / "real.h5", link = dir / "link.h5";
  ASSERT_EQ(run({"emit", "--preset", "gpt2-tiny", "-o", real.string()}).code(), 0);
  fs::create_symlink(real, link);
  const fs::path foreign = dir / "foreign", nested = dir / "nested";
  for (const fs::path& d : {foreign, nested})
    ASSERT_EQ(run({"emit", "--preset", "gpt2-tiny", "--format", "safetensors", "-o", d.string()}).code(), 0);
  write_file(foreign / "notes.txt", "mine\n");
  fs::create_directory(nested / "sub");
  const fs::path project = dir / "project";  // a project's working copy, emitted into as '.'
  fs::create_directories(project / ".git");
  write_file(project / ".git" / "HEAD", "ref: refs/heads/main\n");
  write_file(project / "main.cpp", "int main() {}\n");

  struct Case {
    std::string what;
    std::vector<std::string> args;
    std::string shown, word;  // the path the line names and why it refuses
  };
  const std::vector<Case> cases = {
      {"FIFO", {"--format", "hdf5", "-o", fifo.string()}, fifo.string(), "FIFO"},
      {"socket", {"--format", "hdf5", "-o", sock.string()}, sock.string(), "socket"},
      {"foreign file", {"--format", "hdf5", "-o", text.string()}, text.string(), "it is not an HDF5 file"},
      {"symbolic link", {"--format", "hdf5", "-o", link.string()}, link.string(), "symbolic link"},
      {"foreign file in the directory", {"--format", "safetensors", "-o", foreign.string()}, foreign.string(), "notes.txt"},
      {"directory in the directory", {"--format", "safetensors", "-o", nested.string()}, nested.string(), "sub"},
      {"socket as a directory target", {"--format", "safetensors", "-o", sock.string()}, sock.string(), "socket"},
  };
  const auto before = snapshot(dir.path());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<std::string> args{"emit", "--preset", "llama-tiny", "--force"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Result r = run(args);
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, c.what);
    EXPECT_NE(r.err.find("refusing to replace " + c.shown), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.word), std::string::npos) << r.err;
    EXPECT_EQ(snapshot(dir.path()), before) << "touched";
  }
  {
    SCOPED_TRACE("the current directory of a project");
    SpawnOptions so;
    so.cwd = project.string();
    const Result r = run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "--force", "-o", "."}, so);
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "current directory");
    EXPECT_NE(r.err.find("refusing to replace " + project.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("current directory"), std::string::npos) << r.err;
    EXPECT_EQ(snapshot(dir.path()), before) << "touched";
  }
  ::close(sfd);
  // What layerinit wrote is still replaced: an HDF5 file, a safetensors directory, an empty directory.
  fs::create_directory(dir / "empty");
  for (const auto& [format, target] : std::vector<std::pair<std::string, fs::path>>{
           {"hdf5", real}, {"safetensors", dir / "foreign2"}, {"safetensors", dir / "empty"}}) {
    SCOPED_TRACE(target.string());
    if (!fs::exists(target))
      ASSERT_EQ(run({"emit", "--preset", "gpt2-tiny", "--format", format, "--max-shard-size", "100KB", "-o", target.string()}).code(), 0);
    const Result r = run({"emit", "--preset", "llama-tiny", "--format", format, "--force", "-o", target.string()});
    EXPECT_EQ(r.code(), 0) << r.err;
  }
  EXPECT_EQ(TempDir::list(dir / "empty"), (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(TempDir::list(dir / "foreign2"), (std::vector<std::string>{"config.json", "model.safetensors"}));
}

TEST_F(Cli, ForceRefusesADeviceNode) {
  if (::geteuid() != 0) GTEST_SKIP() << "mknod needs root";
  TempDir dir;
  const fs::path node = dir / "null.h5";  // a copy of /dev/null
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod: " << std::strerror(errno);
  for (const char* format : {"hdf5", "safetensors"}) {
    SCOPED_TRACE(format);
    const Result r = run({"emit", "--preset", "llama-tiny", "--format", format, "--force", "-o", node.string()});
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "device node");
    EXPECT_NE(r.err.find("refusing to replace " + node.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("character device"), std::string::npos) << r.err;
    struct stat st {};
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_EQ(st.st_rdev, makedev(1, 3));
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"null.h5"});
  }
}

TEST_F(Cli, ForceRefusesAMountPoint) {
  struct stat proc {}, root {};
  if (::stat("/proc", &proc) != 0 || ::stat("/", &root) != 0 || proc.st_dev == root.st_dev)
    GTEST_SKIP() << "/proc is not a mount point here";
  const Result r = run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "--force", "-o", "/proc"});
  EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
  expect_one_error_line(r, "mount point");
  EXPECT_NE(r.err.find("refusing to replace /proc"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mount point"), std::string::npos) << r.err;
  EXPECT_FALSE(find_temporary("/proc").has_value());
}

TEST_F(Cli, NothingFailsAfterTheRename) {
  TempDir dir;
  {
    SCOPED_TRACE("-o newdir/ for a file format");
    const std::string target = (dir / "newdir").string() + "/";
    const Result r = run({"emit", "--preset", "llama-tiny", "--format", "hdf5", "-o", target});
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "trailing slash");
    EXPECT_NE(r.err.find("'" + target + "'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("an HDF5 checkpoint is a file"), std::string::npos) << r.err;
    EXPECT_TRUE(dir.entries().empty());
  }
  {
    SCOPED_TRACE("a path that is not UTF-8");
    const std::string name = "\xff" "a\xc3\xa9.h5";  // 0xff is never UTF-8; "a\u00e9" is
    const fs::path target = dir / name;
    const Result r = run({"emit", "--preset", "llama-tiny", "--report", "json", "-o", target.string()});
    ASSERT_EQ(r.code(), 0) << r.how() << "\nstderr: " << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
    const json rep = json::parse(r.out);
    EXPECT_EQ(rep["output"], dir.path().string() + "/\\xffa\xc3\xa9.h5");
    EXPECT_EQ(rep["file_bytes"].get<std::uint64_t>(), fs::file_size(target));
    EXPECT_EQ(dir.entries(), std::vector<std::string>{name});
  }
}

TEST_F(Cli, TraceFileFollowsTheOutputRules) {
  TempDir dir;
  const fs::path trace = dir / "trace.csv";
  write_file(trace, "my numbers\n");
  const std::vector<std::string> build{"build", "--preset", "llama-tiny", "--backend", "cpu", "--trace", trace.string()};
  {
    SCOPED_TRACE("existing file without --force");
    const Result r = run(build);
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "existing trace");
    EXPECT_NE(r.err.find("refusing to overwrite existing " + trace.string() + " (use --force)"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "built before refusing";
  }
  auto forced = build;
  forced.push_back("--force");
  {
    SCOPED_TRACE("--force onto a file that is not a trace");
    const Result r = run(forced);
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "foreign file");
    EXPECT_NE(r.err.find("refusing to replace " + trace.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("not a trace layerinit wrote"), std::string::npos) << r.err;
  }
  EXPECT_EQ(slurp(trace), "my numbers\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"trace.csv"});
  fs::remove(trace);
  ASSERT_EQ(run(build).code(), 0);
  const std::string first = slurp(trace);
  EXPECT_EQ(first.rfind("seconds,event,bytes,current_bytes,layer,tensor\n", 0), 0u) << first.substr(0, 100);
  {
    SCOPED_TRACE("--force onto a trace");
    const Result r = run(forced);
    EXPECT_EQ(r.code(), 0) << r.err;
    EXPECT_EQ(slurp(trace).rfind("seconds,event,bytes,current_bytes,layer,tensor\n", 0), 0u);
    EXPECT_NE(slurp(trace), first) << "not rewritten (the times differ)";
  }
  {
    SCOPED_TRACE("a build that fails after it started");
    const fs::path failed = dir / "failed.csv";
    const Result r = run({"build", "--preset", "llama-tiny", "--backend", "cpu", "--layout", "stacked", "--dtype-override",
                          "model.layers.1.*=fp32", "--trace", failed.string()});
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "failed build");
    EXPECT_NE(r.err.find("stacked layout needs one dtype per stacked buffer"), std::string::npos) << r.err;
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"trace.csv"}) << "a partial trace or its temporary was left";
  }
  {
    SCOPED_TRACE("a trace that cannot be written completely");
    const fs::path cut = dir / "cut.csv";
    SpawnOptions so;
    so.max_file_size = 100;  // the header and one row
    const Result r = run({"build", "--preset", "llama-tiny", "--backend", "cpu", "--trace", cut.string()}, so);
    EXPECT_EQ(r.code(), 1) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "cut trace");
    EXPECT_NE(r.err.find(cut.string()), std::string::npos) << r.err;
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"trace.csv"}) << "a partial trace or its temporary was left";
  }
}

TEST_F(Cli, OutputsFollowTheUmask) {
  for (int mask : {077, 002}) {
    SCOPED_TRACE("umask " + std::to_string(mask));
    TempDir dir;
    SpawnOptions so;
    so.umask = mask;
    const mode_t file = 0666 & ~mask, directory = 0777 & ~mask;
    ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "-o", (dir / "m.h5").string()}, so).code(), 0);
    EXPECT_EQ(mode_of(dir / "m.h5"), file);
    ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "--max-shard-size", "100KB", "-o",
                   (dir / "st").string()}, so).code(), 0);
    EXPECT_EQ(mode_of(dir / "st"), directory);
    const auto files = TempDir::list(dir / "st");
    ASSERT_GE(files.size(), 4u);  // shards, index, config.json
    for (const auto& f : files) EXPECT_EQ(mode_of(dir / "st" / f), file) << f;
    ASSERT_EQ(run({"build", "--preset", "llama-tiny", "--trace", (dir / "t.csv").string()}, so).code(), 0);
    EXPECT_EQ(mode_of(dir / "t.csv"), file);
  }
}
