#include "engine/core/kv_ceiling.h"

#include "memory/byte_size.h"

namespace pier::engine {

std::optional<std::string> KvCeilingRefusal(int64_t tokens, int64_t ceiling_tokens,
                                            int64_t bytes_per_token) {
  if (ceiling_tokens <= 0 || tokens <= ceiling_tokens) return std::nullopt;
  auto bytes = [&](int64_t n) {
    return bytes_per_token > 0 ? " (" +
                                     FormatBytes(static_cast<uint64_t>(n) *
                                                 static_cast<uint64_t>(bytes_per_token)) +
                                     ")"
                               : std::string();
  };
  return "the prompt plus max_tokens needs KV cache for " + std::to_string(tokens) + " tokens" +
         bytes(tokens) + ", but under the memory budget this model can hold at most " +
         std::to_string(ceiling_tokens) + " tokens" + bytes(ceiling_tokens) +
         " per sequence, even with every other model's KV cache given back to its minimum; "
         "shorten the prompt or max_tokens, or raise the memory budget";
}

}  // namespace pier::engine
