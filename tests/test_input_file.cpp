// read_input_file (core/input_file.hpp): the one reader of the files a user names (--spec, --hf-config,
// Python's spec and hf_spec paths): a regular file's bytes, at most 16 MiB, else one line naming the
// file and why, without waiting on a FIFO or reading a device.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <layerinit/core/input_file.hpp>

#include "test_util.hpp"

using namespace layerinit;
using layerinit::testing::TempDir;
using layerinit::testing::write_file;

namespace {

// The message read_input_file throws for `path`, run in a child that SIGALRM ends after 10 s (a FIFO
// that blocks the open fails the test instead of hanging it); "read N bytes" when it reads the file.
std::string outcome(const std::string& path) {
  const auto r = layerinit::testing::in_child_with_message([&](std::string& msg) {
    ::alarm(10);
    try {
      msg = "read " + std::to_string(read_input_file(path, "spec file").size()) + " bytes";
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    return 0;
  });
  if (!WIFEXITED(r.status)) return "ended by signal " + std::to_string(WTERMSIG(r.status));
  return r.message;
}

}  // namespace

TEST(InputFile, ReadsARegularFileAsItIs) {
  TempDir dir;
  const std::string bytes("{\"a\": 1}\n\0\xff", 11);
  write_file(dir / "x.json", bytes);
  EXPECT_EQ(read_input_file((dir / "x.json").string(), "spec file"), bytes);
  write_file(dir / "empty.json", "");
  EXPECT_EQ(read_input_file((dir / "empty.json").string(), "spec file"), "");
  // Through a symbolic link: the file it names decides.
  std::filesystem::create_symlink(dir / "x.json", dir / "link.json");
  EXPECT_EQ(read_input_file((dir / "link.json").string(), "spec file"), bytes);
}

TEST(InputFile, ReadsUpTo16MiB) {
  TempDir dir;
  write_file(dir / "at_cap", std::string(kMaxInputFileBytes, 'x'));
  write_file(dir / "past_cap", std::string(kMaxInputFileBytes + 1, 'x'));
  EXPECT_EQ(kMaxInputFileBytes, 16u << 20);
  EXPECT_EQ(read_input_file((dir / "at_cap").string(), "spec file").size(), kMaxInputFileBytes);
  EXPECT_EQ(outcome((dir / "past_cap").string()), "spec file '" + (dir / "past_cap").string() + "' is larger than 16 MiB");
}

TEST(InputFile, RefusesWhatIsNotARegularFile) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  std::filesystem::create_symlink(dir / "fifo", dir / "fifo_link");
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = (dir / "sock").string();
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  for (const std::string path : {(dir / "fifo").string(), (dir / "fifo_link").string(), std::string("/dev/zero"),
                                 std::string("/dev/null"), dir.path().string(), sock}) {
    EXPECT_EQ(outcome(path), "spec file '" + path + "' is not a regular file");
  }
  ::close(s);
}

TEST(InputFile, SaysWhyAFileCannotBeRead) {
  TempDir dir;
  write_file(dir / "file", "x");
  const std::string missing = (dir / "nope.json").string(), under_file = (dir / "file" / "x.json").string();
  EXPECT_EQ(outcome(missing), "spec file '" + missing + "' cannot be read: No such file or directory");
  EXPECT_EQ(outcome(under_file), "spec file '" + under_file + "' cannot be read: Not a directory");
  EXPECT_EQ(outcome(""), "spec file '' cannot be read: No such file or directory");
  // The path is user text: quoted and escaped as every bad_argument value is.
  const std::string odd = (dir / "a'b\n.json").string();
  EXPECT_EQ(outcome(odd), "spec file '" + (dir / "a\\x27b\\x0a.json").string() +
                              "' cannot be read: No such file or directory");
}
