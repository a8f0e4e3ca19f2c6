// Reading a file a user names (a JSON spec, a config.json): one reader for the command line, the
// library and Python, so that each refuses the same files with the same line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <layerinit/core/api.hpp>

namespace layerinit {

// Input files are JSON of a few KiB; the cap keeps a huge file from being read whole.
inline constexpr std::size_t kMaxInputFileBytes = 16u << 20;

// The bytes of the regular file at `path`, which `what` names in errors ("spec file"). Throws
// bad_input (bad_argument) "<what> '<path>' <problem>" where problem is
//   "cannot be read: <the OS's reason>"  (missing, no permission, an I/O error),
//   "is not a regular file"              (a FIFO, a device such as /dev/zero, a directory, a socket),
//   "is larger than 16 MiB"              (more than kMaxInputFileBytes).
// Nothing blocks: what is not a regular file is not opened (opening a device can act), and a FIFO
// put in a file's place meanwhile is opened without waiting for a writer and refused; at most
// kMaxInputFileBytes + 1 bytes are read, so a file that grows while read is refused too.
LAYERINIT_API std::string read_input_file(const std::string& path, std::string_view what);

}  // namespace layerinit
