#include "engine/runner/batch_check.h"

#include <algorithm>
#include <string>

namespace pier::engine {

Status CheckBatch(const Batch& batch, const BatchLimits& limits, int64_t* n_tokens,
                  int64_t* max_context) {
  *n_tokens = 0;
  *max_context = 0;
  const int64_t bs = limits.block_size;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceSpan& seq = batch.sequences[s];
    const std::string where =
        "batch sequence " + std::to_string(s) + " (id " + std::to_string(seq.sequence_id) + "): ";
    if (seq.tokens.empty()) return InvalidArgumentError(where + "no tokens");
    if (seq.first_position < 0) return InvalidArgumentError(where + "negative position");
    const int64_t end = seq.first_position + static_cast<int64_t>(seq.tokens.size());
    if (end > limits.context_length) {
      return InvalidArgumentError(where + "position " + std::to_string(end - 1) +
                                  " is past the model's context length " +
                                  std::to_string(limits.context_length));
    }
    for (int32_t id : seq.tokens) {
      if (id < 0 || id >= limits.n_vocab) {
        return InvalidArgumentError(where + "token id " + std::to_string(id) +
                                    " is outside the vocabulary of " +
                                    std::to_string(limits.n_vocab));
      }
    }
    const KvGroups& groups = *limits.groups;
    const int64_t G = groups.n_groups();
    const int64_t blocks_needed = (end + bs - 1) / bs * G;
    if (static_cast<int64_t>(seq.block_table.size()) < blocks_needed) {
      return InvalidArgumentError(where + "block table has " +
                                  std::to_string(seq.block_table.size()) + " entries, needs " +
                                  std::to_string(blocks_needed));
    }
    for (int64_t e = 0; e < blocks_needed; ++e) {
      const int32_t block = seq.block_table[e];
      // A sliding group may have released the blocks its window no longer reaches.
      if (block == kNoBlock && e / G < groups.BlocksBefore(e % G, seq.first_position, bs)) continue;
      if (block < 0 || block >= limits.n_blocks) {
        return InvalidArgumentError(where + "block id " + std::to_string(block) +
                                    " is not in the KV store of " +
                                    std::to_string(limits.n_blocks) + " blocks");
      }
    }
    *n_tokens += static_cast<int64_t>(seq.tokens.size());
    *max_context = std::max(*max_context, end);
  }
  return Status::Ok();
}

}  // namespace pier::engine
