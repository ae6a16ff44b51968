// Batches and KV checks for batch-invariance tests on a real model: the reference prompt and
// its spans, a target span among random companion spans, the target's logits picked back out
// of the step's output, and copies and byte comparisons of K/V block ranges. Shared by the f32
// (batch_invariance_test) and f16 (kv_f16_test) checks, which lay out their KV blocks alike:
// the reference prompt's blocks, scratch blocks for the target, then two per companion.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "engine/kv/kv_store.h"
#include "engine/runner/batch.h"

namespace pier::engine::testing {

struct CompanionLayout {
  int64_t prompt_tokens = 0;    // positions of the reference prompt
  int64_t block_size = 0;       // positions per KV block
  int32_t reference_block = 0;  // first block of the reference prompt's K/V
  int64_t prompt_blocks = 0;    // blocks the reference prompt fills
  int32_t companion_block = 0;  // first of the companions' own blocks (two each, 64 at most)
};

inline std::vector<int32_t> BlockRange(int32_t first, int64_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// `n_tokens` tokens: the prompts of the forward-reference fixture, concatenated and repeated.
inline std::vector<int32_t> ReferencePromptTokens(const nlohmann::json& fixture, int64_t n_tokens) {
  std::vector<int32_t> tokens;
  while (static_cast<int64_t>(tokens.size()) < n_tokens) {
    for (const auto& p : fixture["prompts"]) {
      for (int32_t id : p["ids"].get<std::vector<int32_t>>()) tokens.push_back(id);
    }
  }
  tokens.resize(n_tokens);
  return tokens;
}

// Positions [first, first + n) of `prompt` as one span of sequence 1, its block table
// `prompt_blocks` consecutive blocks from `first_block`.
inline SequenceSpan PromptSpan(const std::vector<int32_t>& prompt, int64_t first, int64_t n,
                               int32_t first_block, int64_t prompt_blocks, LogitsWanted logits) {
  SequenceSpan span;
  span.sequence_id = 1;
  span.tokens.assign(prompt.begin() + first, prompt.begin() + first + n);
  span.first_position = first;
  span.block_table = BlockRange(first_block, prompt_blocks);
  span.logits = logits;
  return span;
}

// `b` sequences: `target` at `target_index`; elsewhere spans of 1..6 tokens (mostly single
// decode tokens) drawn from `prompt` at random positions, each writing its own blocks and
// reading the reference's, wanting no, the last or every logit row at random.
inline Batch CompanionBatch(SequenceSpan target, int b, int target_index,
                            const std::vector<int32_t>& prompt, const CompanionLayout& layout,
                            std::mt19937& rng) {
  const int64_t n_prompt = layout.prompt_tokens, bs = layout.block_size;
  Batch batch;
  for (int s = 0; s < b; ++s) {
    if (s == target_index) {
      batch.sequences.push_back(target);
      continue;
    }
    SequenceSpan other;
    other.sequence_id = 100 + s;
    const int64_t len = rng() % 4 == 0 ? 1 + rng() % 6 : 1;
    const int64_t pos = rng() % (n_prompt - len);
    for (int64_t i = 0; i < len; ++i) other.tokens.push_back(prompt[rng() % n_prompt]);
    other.first_position = pos;
    other.block_table = BlockRange(layout.reference_block, layout.prompt_blocks);
    // The blocks this span writes are its own; earlier ones are read from the reference.
    const int32_t own = layout.companion_block + 2 * (s % 64);
    other.block_table[pos / bs] = own;
    if ((pos + len - 1) / bs != pos / bs) other.block_table[(pos + len - 1) / bs] = own + 1;
    other.logits = static_cast<LogitsWanted>(rng() % 3);
    batch.sequences.push_back(std::move(other));
  }
  return batch;
}

// The logit rows of the batch's sequence `index`, in order, concatenated.
inline std::vector<float> RowsOfSequence(const StepOutput& out, int index) {
  std::vector<float> rows;
  for (size_t r = 0; r < out.rows.size(); ++r) {
    if (out.rows[r].sequence_index == index) {
      rows.insert(rows.end(), out.Row(r).begin(), out.Row(r).end());
    }
  }
  return rows;
}

// Copies the K/V of positions [0, n) from the blocks starting at `from` to those at `to`.
inline void CopyKvPrefix(KvStore& kv, int32_t from, int32_t to, int64_t n) {
  const int64_t bs = kv.layout().block_size;
  for (int64_t b = 0; b * bs < n; ++b) {
    std::memcpy(kv.BlockData(to + static_cast<int32_t>(b)),
                kv.BlockData(from + static_cast<int32_t>(b)), kv.layout().bytes_per_block());
  }
}

// Whether positions [first, first + n) hold the same K/V bytes, in every layer, in the blocks
// starting at `a` and at `b`.
inline bool SameKvBytes(const KvStore& kv, int32_t a, int32_t b, int64_t first, int64_t n) {
  const KvLayout& l = kv.layout();
  const size_t row = l.row_bytes();
  for (int64_t layer = 0; layer < l.n_layer; ++layer) {
    for (int64_t p = first; p < first + n; ++p) {
      const int32_t block = static_cast<int32_t>(p / l.block_size);
      const size_t off = static_cast<size_t>(p % l.block_size) * row;
      if (std::memcmp(kv.KeyPlane(layer, a + block) + off, kv.KeyPlane(layer, b + block) + off,
                      row) != 0 ||
          std::memcmp(kv.ValuePlane(layer, a + block) + off, kv.ValuePlane(layer, b + block) + off,
                      row) != 0) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace pier::engine::testing
