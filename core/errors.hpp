// Errors the library throws. It never ends the process itself: every failure is an exception.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include <layerinit/core/api.hpp>

namespace layerinit {

// Base of every layerinit error that is not a plain std::invalid_argument.
class LAYERINIT_API error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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

[[noreturn]] LAYERINIT_API void throw_precondition(const char* expr, const std::string& msg, const char* file, int line);

}  // namespace layerinit

// Precondition on arguments: throws std::invalid_argument with the message and location.
#define LAYERINIT_EXPECTS(cond, msg)                                                   \
  do {                                                                                 \
    if (!(cond)) ::layerinit::throw_precondition(#cond, (msg), __FILE__, __LINE__);    \
  } while (0)
