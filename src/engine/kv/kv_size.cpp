#include "engine/kv/kv_size.h"

#include <charconv>

#include "common/ascii.h"
#include "memory/byte_size.h"

namespace pier::engine {

std::string KvSize::ToString() const {
  if (!is_set()) return "unset";
  return in_bytes ? FormatBytes(bytes) : std::to_string(tokens) + " tokens";
}

Result<KvSize> ParseKvSize(std::string_view text, std::string_view what, int64_t max_tokens) {
  const std::string_view trimmed = TrimSpaceAndTab(text);
  const bool digits_only =
      !trimmed.empty() && trimmed.find_first_not_of("0123456789") == std::string_view::npos;
  if (!digits_only) {
    // Anything with a unit (or garbage) is a byte size; its parser names what is wrong.
    Result<uint64_t> bytes = ParseByteSize(trimmed, what);
    if (!bytes.ok()) {
      return InvalidArgumentError(bytes.status().message() +
                                  " (give tokens, like 2048, or bytes with a unit, like 64MiB)");
    }
    return KvSize::Bytes(*bytes);
  }
  int64_t tokens = 0;
  const auto [end, ec] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), tokens);
  if (ec != std::errc() || end != trimmed.data() + trimmed.size() || tokens > max_tokens) {
    return InvalidArgumentError(std::string(what) + ": " + std::string(trimmed) +
                                " tokens is more than " + std::to_string(max_tokens));
  }
  return KvSize::Tokens(tokens);
}

}  // namespace pier::engine
