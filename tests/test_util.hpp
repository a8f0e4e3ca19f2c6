// Small helpers shared by tests that touch files.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace layerinit::testing {

// A LAYERINIT_SANITIZE build (AddressSanitizer): resident memory there includes ASan's shadow and the
// quarantine that holds freed blocks back, so tests that bound RSS skip under it, saying so.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// A fresh directory under the system's temp dir, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "layerinit") {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp");
    path_ = t;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // The checkpoint "out" (emit -o DIR/out) and, for a parallel HDF5 one, its rank directory, and
  // nothing else: no staging left, no staging marker in either. A test's failure if not.
  void expect_only_the_checkpoint(bool hdf5) const {
    const std::vector<std::string> left = entries();
    ASSERT_EQ(left.size(), hdf5 ? 2u : 1u) << ::testing::PrintToString(left);
    EXPECT_EQ(left[0], "out");
    if (hdf5) EXPECT_EQ(left[1].rfind("out.ranks-", 0), 0u) << left[1];
    for (const auto& e : left)
      if (std::filesystem::is_directory(path_ / e))
        for (const auto& f : list(path_ / e)) EXPECT_NE(f, ".layerinit-staging") << e;
  }
  // Every entry's name, sorted: after a failure only what the test put there may remain.
  std::vector<std::string> entries() const { return list(path_); }
  static std::vector<std::string> list(const std::filesystem::path& dir) {
    std::vector<std::string> v;
    for (const auto& e : std::filesystem::directory_iterator(dir)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Forks a child that runs `body` and returns its wait status; the child never returns into gtest.
template <class F>
int in_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = body();
    } catch (...) {
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// in_child for a body that also reports a message (e.g. an exception's what()) back to the test.
struct ChildOutcome {
  int status = 0;
  std::string message;
};
template <class F>
ChildOutcome in_child_with_message(F body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  ChildOutcome out;
  out.status = in_child([&] {
    ::close(fds[0]);
    std::string msg;
    const int rc = body(msg);
    const ssize_t n = ::write(fds[1], msg.data(), msg.size());
    (void)n;
    return rc;
  });
  ::close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.message.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  return out;
}

// SplitMix64 (Steele, Lea and Flood): a small, fast, seedable stream of test inputs.
struct SplitMix64 {
  std::uint64_t s;
  std::uint64_t operator()() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n > 0 (slightly biased; fine for a test).
  std::uint64_t below(std::uint64_t n) { return (*this)() % n; }
  // A value of random bit length: small and large magnitudes equally often.
  std::uint64_t log_uniform() {
    const auto bits = static_cast<int>((*this)() % 65);
    return bits == 0 ? 0 : (*this)() >> (64 - bits);
  }
};

}  // namespace layerinit::testing
