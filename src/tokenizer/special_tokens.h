// SpecialTokenMatcher: finds special and added tokens written verbatim in text.
//
// Before BPE or SentencePiece run, text is cut into fragments: runs of ordinary
// text, and exact occurrences of control / user-defined tokens (e.g.
// "<|im_start|>"), longest match first at each position. Immutable after
// construction; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pier::tokenizer {

struct TextFragment {
  std::string_view text;  // points into the text passed to Split()
  TokenId token = -1;     // >= 0 when the fragment is that special token
};

class SpecialTokenMatcher {
 public:
  // `specials`: the token's literal text and its id. Empty strings are ignored.
  explicit SpecialTokenMatcher(std::vector<std::pair<std::string, TokenId>> specials);

  // Fragments covering `text` in order; ordinary runs are never empty.
  std::vector<TextFragment> Split(std::string_view text) const;

  bool empty() const { return specials_.empty(); }

 private:
  std::vector<std::pair<std::string, TokenId>> specials_;  // sorted longest first
  // Indices into specials_ (longest first) of the tokens starting with each byte.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace pier::tokenizer
