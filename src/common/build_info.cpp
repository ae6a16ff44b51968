#include "common/build_info.h"

#include <string>

// PIER_VERSION and PIER_GIT_COMMIT come from CMake for this file alone, so that a new commit
// recompiles nothing else.
#ifndef PIER_VERSION
#define PIER_VERSION "0.0.0"
#endif
#ifndef PIER_GIT_COMMIT
#define PIER_GIT_COMMIT ""
#endif

namespace pier {
namespace {

constexpr std::string_view kCommit = PIER_GIT_COMMIT;

}  // namespace

std::string_view BuildId() {
  static const std::string id = kCommit.empty()
                                    ? std::string(PIER_VERSION)
                                    : std::string(PIER_VERSION) + "+" + std::string(kCommit);
  return id;
}

std::string_view SystemFingerprint() {
  static const std::string fingerprint =
      "fp_" + (kCommit.empty() ? std::string(PIER_VERSION) : std::string(kCommit));
  return fingerprint;
}

}  // namespace pier
