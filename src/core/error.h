#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

// Every bad input (file, config, request, parameter) surfaces as a strata::Error whose message says what was
// expected and what was found; callers at the edge (CLI, server) print it and carry on or exit.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds a message from streamable parts: fail("tensor '", name, "': expected ", a, ", found ", b).
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(cat(parts...));
}

}  // namespace strata
