// PIER_CHECK: aborts with file, line and a message when an invariant is broken.
//
// Use it for bugs only. Anything a user, a file or a peer can cause is a Status.
#pragma once

#include <string_view>

namespace pier::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              std::string_view message);
}  // namespace pier::internal

#define PIER_CHECK(condition, ...)                                                          \
  do {                                                                                      \
    if (!(condition)) [[unlikely]] {                                                        \
      ::pier::internal::CheckFailed(__FILE__, __LINE__, #condition,                         \
                                    ::std::string_view{__VA_OPT__(__VA_ARGS__)});           \
    }                                                                                       \
  } while (false)
