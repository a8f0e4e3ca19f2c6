// Errors the library throws. It never ends the process itself: every failure is an exception.
//
// Two kinds of failure are kept apart (as RMM keeps RMM_EXPECTS's logic_error apart from its runtime errors):
// - Bad input: a value a user wrote (a name, a size, a file, a spec field, a command-line option) that the
//   library cannot use. It is bad_input (a std::invalid_argument) carrying the argument, the value and
//   the problem apart, its line "<argument> <value> <problem>", e.g. "dtype 'fp8' is unknown (valid:
//   fp32, fp16, bf16)" or "tp 0 must be at least 1": thrown through bad_argument() by the library and
//   the CLI alike. Python sees layerinit.BadInputError (a ValueError with the three as attributes), the
//   CLI prints the line and exits 2.
// - Misuse by a caller: a broken precondition that only a program can cause (a null pointer, a count the
//   caller computed, a call out of order), never a user's input. It is LAYERINIT_EXPECTS, which throws
//   layerinit::logic_error naming the expression, file and line: a bug to fix, not a message to act on.
// Failures of the environment (memory, CUDA, files) are layerinit::error and its subclasses below.
#pragma once

#include <concepts>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <layerinit/core/api.hpp>

namespace layerinit {

// Base of every layerinit error of the environment (memory, CUDA, I/O).
class LAYERINIT_API error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller broke a precondition (LAYERINIT_EXPECTS): a programming error, not bad input.
class LAYERINIT_API logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// An allocation could not be satisfied: `requested` bytes asked with `in_use` bytes already held.
class LAYERINIT_API out_of_memory : public error {
 public:
  out_of_memory(std::size_t requested, std::size_t in_use, const std::string& where);
  std::size_t requested() const noexcept { return requested_; }
  std::size_t in_use() const noexcept { return in_use_; }

 private:
  std::size_t requested_;
  std::size_t in_use_;
};

// A CUDA runtime or driver call failed: carries the call, file and line.
class LAYERINIT_API cuda_error : public error {
 public:
  cuda_error(const std::string& call, const std::string& what, const char* file, int line);
  const std::string& call() const noexcept { return call_; }

 private:
  std::string call_;
};

// Bad input (see the top of this file). A spec, config.json or composite that cannot be used is its
// subclass spec_error (init/spec_json.hpp).
class LAYERINIT_API bad_input : public std::invalid_argument {
 public:
  // The line as bad_argument writes it: "<argument> <value> <problem>", the value as shown (quoted
  // text or a number; empty: none); a problem starting with ':' follows without a space.
  bad_input(std::string argument, std::string value, std::string problem);
  // A line of its own words (the CLI's usage lines: "--tp must be a positive integer ..., got '0'")
  // with the same three apart.
  bad_input(std::string argument, std::string value, std::string problem, const std::string& line);
  const std::string& argument() const noexcept { return argument_; }
  const std::string& value() const noexcept { return value_; }      // as the line shows it
  const std::string& problem() const noexcept { return problem_; }  // without a leading ": "

 private:
  std::string argument_, value_, problem_;
};

// "'" + printable(s, max) + "'", a quote inside escaped too (\x27): user text inside a message (the
// `problem` of bad_argument, a second value), so that a newline or control byte never breaks the one
// line and the value ends where its closing quote is. Not named quoted: for a std::string argument,
// argument-dependent lookup would pick std::quoted wherever <iomanip> is seen.
LAYERINIT_API std::string quote(std::string_view s, std::size_t max = std::string_view::npos);

// Bad input: throws bad_input("<argument> <value> <problem>"). A string value is shown
// quoted and escaped (quote()); a number as it is (a double in its shortest exact form: 0.02, 1e+300,
// inf). `argument` and `problem` are the library's own words: user text inside them goes through quote().
// A problem that starts with ':' follows the value without a space: what is wrong inside the value,
// e.g. bad_argument("tensor", name, ": " + inner) gives "tensor 'lm_head.weight': <inner>".
[[noreturn]] LAYERINIT_API void bad_argument(std::string_view argument, std::string_view value, std::string_view problem);
[[noreturn]] LAYERINIT_API void bad_argument(std::string_view argument, long long value, std::string_view problem);
[[noreturn]] LAYERINIT_API void bad_argument(std::string_view argument, unsigned long long value, std::string_view problem);
[[noreturn]] LAYERINIT_API void bad_argument(std::string_view argument, double value, std::string_view problem);
// Any other integer (int, std::uint64_t, std::size_t) as it is. A bool or a character is refused at
// compile time: it would print as 1 or as its code; say it in words, or pass the character as text.
template <std::integral T>
[[noreturn]] void bad_argument(std::string_view argument, T value, std::string_view problem) {
  static_assert(!std::is_same_v<T, bool>, "bad_argument: say what a bool means in words");
  static_assert(!std::is_same_v<T, char> && !std::is_same_v<T, signed char> && !std::is_same_v<T, unsigned char> &&
                    !std::is_same_v<T, char8_t> && !std::is_same_v<T, char16_t> && !std::is_same_v<T, char32_t> &&
                    !std::is_same_v<T, wchar_t>,
                "bad_argument: pass a character as text (std::string_view(&c, 1))");
  if constexpr (std::is_signed_v<T>) bad_argument(argument, static_cast<long long>(value), problem);
  else bad_argument(argument, static_cast<unsigned long long>(value), problem);
}
// Bad input with no one value to show: throws bad_input("<argument> <problem>"), e.g.
// "checkpoint output path is empty".
[[noreturn]] LAYERINIT_API void bad_argument(std::string_view argument, std::string_view problem);

// LAYERINIT_EXPECTS and LAYERINIT_FAIL's throw (expr: the failed condition, or nullptr).
[[noreturn]] LAYERINIT_API void throw_precondition(const char* expr, const std::string& msg, const char* file, int line);

}  // namespace layerinit

// Precondition a caller must meet (misuse, not bad input: see the top of this file): throws
// layerinit::logic_error "<msg> (<expression> at <file>:<line>)". msg is built only on failure.
#define LAYERINIT_EXPECTS(cond, msg)                                                   \
  do {                                                                                 \
    if (!(cond)) ::layerinit::throw_precondition(#cond, (msg), __FILE__, __LINE__);    \
  } while (0)

// Misuse found where there is no one condition to name (as RMM_FAIL): the end of a switch over an
// enum that a caller filled with a value out of range. Throws layerinit::logic_error "<msg> (at <file>:<line>)".
#define LAYERINIT_FAIL(msg) ::layerinit::throw_precondition(nullptr, (msg), __FILE__, __LINE__)
