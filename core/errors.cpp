#include <layerinit/core/errors.hpp>

#include <layerinit/core/bytes.hpp>

namespace layerinit {

out_of_memory::out_of_memory(std::size_t requested, std::size_t in_use, const std::string& where)
    : error("out of memory on " + where + ": asked for " + format_bytes(requested) + " with " +
            format_bytes(in_use) + " in use"),
      requested_(requested),
      in_use_(in_use) {}

cuda_error::cuda_error(const std::string& call, const std::string& what, const char* file, int line)
    : error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + what), call_(call) {}

void throw_precondition(const char* expr, const std::string& msg, const char* file, int line) {
  throw std::invalid_argument(msg + " (" + expr + " at " + file + ":" + std::to_string(line) + ")");
}

}  // namespace layerinit
