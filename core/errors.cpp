#include <layerinit/core/errors.hpp>

#include <charconv>

#include <layerinit/core/bytes.hpp>
#include <layerinit/core/text.hpp>

namespace layerinit {

out_of_memory::out_of_memory(std::size_t requested, std::size_t in_use, const std::string& where)
    : error("out of memory on " + where + ": asked for " + format_bytes(requested) + " with " +
            format_bytes(in_use) + " in use"),
      requested_(requested),
      in_use_(in_use) {}

cuda_error::cuda_error(const std::string& call, const std::string& what, const char* file, int line)
    : error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + what), call_(call) {}

std::string quote(std::string_view s, std::size_t max) {
  std::string q(1, '\'');  // appended, not "'" + ...: GCC 12 warns (-Wrestrict) on that form
  for (const char c : printable(s, max)) {
    if (c == '\'') q += "\\x27";  // a quote inside would end the value early
    else q += c;
  }
  q += '\'';
  return q;
}

namespace {
std::string bad_input_line(std::string_view argument, std::string_view shown, std::string_view problem) {
  std::string m;
  m.reserve(argument.size() + shown.size() + problem.size() + 2);
  m.append(argument);
  if (!shown.empty()) m.append(" ").append(shown);
  if (!problem.empty() && problem.front() != ':') m.append(" ");
  m.append(problem);
  return m;
}

std::string without_colon(std::string problem) {
  if (!problem.empty() && problem.front() == ':') problem.erase(0, problem.find_first_not_of(": "));
  return problem;
}

[[noreturn]] void throw_bad(std::string_view argument, std::string_view shown, std::string_view problem) {
  throw bad_input(std::string(argument), std::string(shown), std::string(problem));
}
}  // namespace

bad_input::bad_input(std::string argument, std::string value, std::string problem)
    : bad_input(argument, value, without_colon(problem), bad_input_line(argument, value, problem)) {}

bad_input::bad_input(std::string argument, std::string value, std::string problem, const std::string& line)
    : std::invalid_argument(line),
      argument_(std::move(argument)),
      value_(std::move(value)),
      problem_(std::move(problem)) {}

void bad_argument(std::string_view argument, std::string_view value, std::string_view problem) {
  throw_bad(argument, quote(value), problem);
}
void bad_argument(std::string_view argument, long long value, std::string_view problem) {
  throw_bad(argument, std::to_string(value), problem);
}
void bad_argument(std::string_view argument, unsigned long long value, std::string_view problem) {
  throw_bad(argument, std::to_string(value), problem);
}
void bad_argument(std::string_view argument, double value, std::string_view problem) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);  // shortest form that reads back exactly
  throw_bad(argument, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)), problem);
}
void bad_argument(std::string_view argument, std::string_view problem) { throw_bad(argument, "", problem); }

void throw_precondition(const char* expr, const std::string& msg, const char* file, int line) {
  throw logic_error(msg + " (" + (expr ? std::string(expr) + " " : "") + "at " + file + ":" + std::to_string(line) + ")");
}

}  // namespace layerinit
