#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

#include "model/gguf_file.h"

namespace pier::tokenizer {
namespace {

// Turn-ending tokens that chat models emit although GGUF converters often record
// only one `eos_token_id` (Llama-3 stores <|end_of_text|> but ends each turn with
// <|eot_id|>; ChatML models such as SmolLM2 and Qwen2 end turns with <|im_end|>
// and may emit <|endoftext|>; Gemma ends with <end_of_turn>). Generation must stop
// at any of them or the model writes the next turn itself. llama.cpp keeps the
// same list. Only control tokens count, so ordinary words are never affected.
constexpr std::array<std::string_view, 11> kEndOfGenerationTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|return|>",
    "<end_of_utterance>",
    "<｜end▁of▁sentence｜>",
};

std::string Where(const model::GgufFile& file, std::string_view key) {
  return file.path() + ": " + std::string(key);
}

// An optional special id: -1 when absent; DATA_LOSS when outside the vocabulary,
// except padding, which some converters set to a placeholder and nothing uses.
Result<TokenId> ReadId(const model::GgufFile& file, std::string_view key, size_t vocab_size) {
  if (!file.Has(key)) return TokenId{-1};
  PIER_ASSIGN_OR_RETURN(int64_t id, file.GetInt(key));
  if (id < 0 || static_cast<uint64_t>(id) >= vocab_size) {
    if (key == "tokenizer.ggml.padding_token_id") return TokenId{-1};
    return DataLossError(Where(file, key) + " = " + std::to_string(id) +
                         " is outside the vocabulary of " + std::to_string(vocab_size) + " tokens");
  }
  return static_cast<TokenId>(id);
}

Result<std::optional<bool>> ReadFlag(const model::GgufFile& file, std::string_view key) {
  if (!file.Has(key)) return std::optional<bool>();
  PIER_ASSIGN_OR_RETURN(bool value, file.GetBool(key));
  return std::optional<bool>(value);
}

}  // namespace

std::vector<std::pair<std::string, TokenId>> GgufVocab::SpecialTexts(bool parse_special) const {
  std::vector<std::pair<std::string, TokenId>> specials;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const TokenType type = types[id];
    const bool markup = type == TokenType::kControl || type == TokenType::kUnknown;
    if (type == TokenType::kUserDefined || (parse_special && markup)) {
      specials.emplace_back(tokens[id], static_cast<TokenId>(id));
    }
  }
  return specials;
}

Result<GgufVocab> ReadGgufVocab(const model::GgufFile& file) {
  GgufVocab vocab;
  PIER_ASSIGN_OR_RETURN(auto tokens, file.GetStringArray("tokenizer.ggml.tokens"));
  if (tokens.empty()) {
    return DataLossError(Where(file, "tokenizer.ggml.tokens") + " is empty");
  }
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return UnsupportedError(Where(file, "tokenizer.ggml.tokens") + " has too many tokens");
  }
  vocab.tokens.assign(tokens.begin(), tokens.end());
  vocab.types.assign(tokens.size(), TokenType::kNormal);
  if (file.Has("tokenizer.ggml.token_type")) {
    PIER_ASSIGN_OR_RETURN(auto types, file.GetIntArray("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size()) {
      return DataLossError(
          Where(file, "tokenizer.ggml.token_type") + " has " + std::to_string(types.size()) +
          " entries but tokenizer.ggml.tokens has " + std::to_string(tokens.size()));
    }
    for (size_t i = 0; i < types.size(); ++i) {
      const int64_t t = types[i];
      vocab.types[i] = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
    }
  }
  const size_t n = tokens.size();
  PIER_ASSIGN_OR_RETURN(vocab.bos_id, ReadId(file, "tokenizer.ggml.bos_token_id", n));
  PIER_ASSIGN_OR_RETURN(vocab.eos_id, ReadId(file, "tokenizer.ggml.eos_token_id", n));
  PIER_ASSIGN_OR_RETURN(vocab.eot_id, ReadId(file, "tokenizer.ggml.eot_token_id", n));
  PIER_ASSIGN_OR_RETURN(vocab.eom_id, ReadId(file, "tokenizer.ggml.eom_token_id", n));
  PIER_ASSIGN_OR_RETURN(vocab.unknown_id, ReadId(file, "tokenizer.ggml.unknown_token_id", n));
  PIER_ASSIGN_OR_RETURN(vocab.padding_id, ReadId(file, "tokenizer.ggml.padding_token_id", n));
  PIER_ASSIGN_OR_RETURN(vocab.add_bos, ReadFlag(file, "tokenizer.ggml.add_bos_token"));
  PIER_ASSIGN_OR_RETURN(vocab.add_eos, ReadFlag(file, "tokenizer.ggml.add_eos_token"));

  std::vector<TokenId>& eog = vocab.end_of_generation_ids;
  for (TokenId id : {vocab.eos_id, vocab.eot_id, vocab.eom_id}) {
    if (id >= 0) eog.push_back(id);
  }
  for (size_t id = 0; id < n; ++id) {
    if (vocab.types[id] != TokenType::kControl) continue;
    if (std::find(kEndOfGenerationTexts.begin(), kEndOfGenerationTexts.end(), vocab.tokens[id]) !=
        kEndOfGenerationTexts.end()) {
      eog.push_back(static_cast<TokenId>(id));
    }
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  return vocab;
}

}  // namespace pier::tokenizer
