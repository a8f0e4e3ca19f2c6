#include <layerinit/core/input_file.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <layerinit/core/errors.hpp>

namespace layerinit {

namespace {
// Closes the descriptor on every way out, a throw included.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

std::string read_input_file(const std::string& path, std::string_view what) {
  auto unreadable = [&](int err) { bad_argument(what, path, std::string("cannot be read: ") + std::strerror(err)); };
  // Not opened at all when the path names something else: opening a device can act (a watchdog, a
  // tape). A path that cannot be stat'ed is left to open(), whose errno says why.
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) bad_argument(what, path, "is not a regular file");
  // O_NONBLOCK: opening a FIFO's read end (one put there since stat) would wait for a writer, forever.
  const Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) unreadable(errno);
  if (::fstat(f.fd, &st) != 0) unreadable(errno);
  // The descriptor's own file decides: a FIFO, a device (/dev/zero never ends) or a directory is
  // refused before a byte is read.
  if (!S_ISREG(st.st_mode)) bad_argument(what, path, "is not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > kMaxInputFileBytes) bad_argument(what, path, "is larger than 16 MiB");
  // Blocking reads again: O_NONBLOCK was for the open (a read could end in EAGAIN, on a locked file).
  const int flags = ::fcntl(f.fd, F_GETFL);
  if (flags < 0 || ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) != 0) unreadable(errno);
  // One byte past the cap tells a file that grew after fstat from one at the cap.
  std::string text(static_cast<std::size_t>(st.st_size) + 1, '\0');
  std::size_t n = 0;
  for (;;) {
    if (n == text.size()) {
      if (text.size() > kMaxInputFileBytes) bad_argument(what, path, "is larger than 16 MiB");
      text.resize(std::min(text.size() * 2, kMaxInputFileBytes + 1));
    }
    const ssize_t got = ::read(f.fd, text.data() + n, text.size() - n);
    if (got < 0) {
      if (errno == EINTR) continue;
      unreadable(errno);
    }
    if (got == 0) break;
    n += static_cast<std::size_t>(got);
  }
  text.resize(n);
  return text;
}

}  // namespace layerinit
