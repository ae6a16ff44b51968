// KvSize: an amount of KV cache as a user configures it (`kv_min`, `kv_max`): a number of
// token positions ("2048"), or bytes ("64MiB", as memory/byte_size.h parses them). Bytes
// become tokens only once the model is known (its K/V bytes per position at its kv_dtype),
// rounded down to whole positions, so one setting means the same memory for every model.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pier::engine {

struct KvSize {
  int64_t tokens = 0;  // when given in tokens
  uint64_t bytes = 0;  // when given in bytes
  bool in_bytes = false;

  static KvSize Tokens(int64_t tokens) { return {tokens, 0, false}; }
  static KvSize Bytes(uint64_t bytes) { return {0, bytes, true}; }

  bool is_set() const { return in_bytes ? bytes > 0 : tokens > 0; }
  // Positions this amount holds at `bytes_per_token` (> 0).
  int64_t TokensAt(uint64_t bytes_per_token) const {
    return in_bytes ? static_cast<int64_t>(bytes / bytes_per_token) : tokens;
  }
  // "2048 tokens" or "64.0 MiB"; "unset" when nothing is set.
  std::string ToString() const;

  bool operator==(const KvSize&) const = default;
};

// "2048" -> 2048 tokens (0 allowed: unset); "64MiB", "1.5GB", "4096B" -> bytes. `what` names
// the setting in the message ("serve.yaml: kv_max"). INVALID_ARGUMENT for anything else, or
// more than `max_tokens` tokens.
[[nodiscard]] Result<KvSize> ParseKvSize(std::string_view text, std::string_view what,
                                         int64_t max_tokens);

}  // namespace pier::engine
