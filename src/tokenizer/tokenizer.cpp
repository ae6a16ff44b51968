#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace pier::tokenizer {

Result<std::unique_ptr<Tokenizer>> Tokenizer::Create(const VocabularySpec& spec) {
  constexpr std::string_view kModelKey = "tokenizer.ggml.model";
  if (spec.model.empty()) {
    return NotFoundError(spec.source + ": has no tokenizer (metadata key " +
                         std::string(kModelKey) + " is missing)");
  }
  if (spec.model == "gpt2") return MakeBpeTokenizer(spec);
  if (spec.model == "llama") return MakeSpmTokenizer(spec);
  if (spec.model == "bert") {
    PIER_ASSIGN_OR_RETURN(std::unique_ptr<WordPieceTokenizer> wordpiece,
                          WordPieceTokenizer::Create(spec));
    return std::unique_ptr<Tokenizer>(std::move(wordpiece));
  }
  return UnsupportedError(spec.source + ": " + std::string(kModelKey) + " = '" + spec.model +
                          "' is not supported (supported: 'gpt2' byte-level BPE, 'llama' "
                          "SentencePiece, 'bert' WordPiece)");
}

bool Tokenizer::IsEndOfGeneration(TokenId id) const {
  const std::vector<TokenId>& ids = end_of_generation_ids();
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::string Tokenizer::Decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string bytes;
  bool first = true;
  for (TokenId id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && Type(id) == TokenType::kControl) continue;
    std::string piece = TokenBytes(id);
    if (first && strips_leading_space_on_decode() && !piece.empty() && piece[0] == ' ') {
      piece.erase(0, 1);
    }
    first = false;
    bytes += piece;
  }
  std::string text;
  text.reserve(bytes.size());
  AppendSanitizedUtf8(bytes, /*at_end=*/true, &text);
  return text;
}

}  // namespace pier::tokenizer
