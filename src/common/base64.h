// Base64 (RFC 4648, the standard alphabet with '=' padding): decoding, for images sent inside
// JSON requests, and encoding, for binary values in JSON answers.
//
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pier {

// The bytes `text` encodes; nullopt when it is not base64 (a character outside the alphabet,
// a length that is not a multiple of 4 once padded, padding in the middle). ASCII whitespace
// (line breaks of MIME-style text) is skipped; a "data:...;base64," prefix is not accepted
// here (callers strip it).
std::optional<std::string> DecodeBase64(std::string_view text);

// `bytes` in base64, padded with '=' (for binary values inside JSON answers).
std::string EncodeBase64(std::string_view bytes);

}  // namespace pier
