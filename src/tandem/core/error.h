// Errors: the exception every module throws and the invariant check. Only main() catches and exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tandem {

// An error a user can act on: what failed, with what values, what to do.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace tandem

// TANDEM_CHECK(cond, parts...): a broken invariant, reported with the file, line and condition.
#define TANDEM_CHECK(cond, ...)                                                                                  \
  do {                                                                                                           \
    if (!(cond))                                                                                                 \
      throw ::tandem::Error(::tandem::detail::concat("internal check failed at ", __FILE__, ":", __LINE__, ": ", \
                                                     #cond, " " __VA_OPT__(, ) __VA_ARGS__));                    \
  } while (0)

// TANDEM_FAIL(parts...): throw a user-facing Error built from the parts.
#define TANDEM_FAIL(...) throw ::tandem::Error(::tandem::detail::concat(__VA_ARGS__))
