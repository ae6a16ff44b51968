// What build of Pier this is: the project version and the git commit it was configured from.
// Responses carry it as OpenAI's `system_fingerprint`, so a client can tell when the server
// (and so possibly its outputs) changed.
//
// Thread-safety: constants.
#pragma once

#include <string_view>

namespace pier {

// "0.1.0+3f2a9c1d7e0b" (version + commit), or "0.1.0" outside a git checkout.
std::string_view BuildId();

// "fp_3f2a9c1d7e0b" (OpenAI's shape: "fp_" and hex), or "fp_" + the version outside git.
std::string_view SystemFingerprint();

}  // namespace pier
