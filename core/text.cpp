#include <layerinit/core/text.hpp>

#include <fnmatch.h>

#include <string>

namespace layerinit {

bool name_matches(std::string_view pattern, std::string_view name) {
  return fnmatch(std::string(pattern).c_str(), std::string(name).c_str(), 0) == 0;
}

}  // namespace layerinit
