#include "tokenizer/incremental_decoder.h"

#include "tokenizer/unicode.h"

namespace pier::tokenizer {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDecoder::Push(TokenId id) {
  if (id < 0 || id >= tokenizer_.vocab_size()) return {};
  if (skip_special_ && tokenizer_.Type(id) == TokenType::kControl) return {};
  std::string piece = tokenizer_.TokenBytes(id);
  if (first_ && tokenizer_.strips_leading_space_on_decode() && !piece.empty() && piece[0] == ' ') {
    piece.erase(0, 1);
  }
  first_ = false;
  pending_ += piece;
  std::string text;
  const size_t consumed = AppendSanitizedUtf8(pending_, /*at_end=*/false, &text);
  pending_.erase(0, consumed);
  return text;
}

std::string IncrementalDecoder::Flush() {
  std::string text;
  AppendSanitizedUtf8(pending_, /*at_end=*/true, &text);
  pending_.clear();
  first_ = true;
  return text;
}

}  // namespace pier::tokenizer
