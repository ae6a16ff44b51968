#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "model/gguf_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/unicode.h"

namespace pier::tokenizer {

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const model::GgufFile& file) {
  constexpr std::string_view kModelKey = "tokenizer.ggml.model";
  if (!file.Has(kModelKey)) {
    return NotFoundError(file.path() + ": has no tokenizer (metadata key " +
                         std::string(kModelKey) + " is missing)");
  }
  PIER_ASSIGN_OR_RETURN(std::string_view model, file.GetString(kModelKey));
  if (model == "gpt2") return MakeBpeTokenizer(file);
  if (model == "llama") return MakeSpmTokenizer(file);
  return UnsupportedError(file.path() + ": " + std::string(kModelKey) + " = '" +
                          std::string(model) +
                          "' is not supported (supported: 'gpt2' byte-level BPE, 'llama' "
                          "SentencePiece)");
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
