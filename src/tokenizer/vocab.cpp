#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

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

std::string Where(const VocabularySpec& spec, std::string_view key) {
  return spec.source + ": " + std::string(key);
}

// An optional special id: -1 when absent; DATA_LOSS when outside the vocabulary,
// except padding, which some converters set to a placeholder and nothing uses.
Result<TokenId> CheckId(const VocabularySpec& spec, const std::optional<int64_t>& id,
                        std::string_view key) {
  if (!id.has_value()) return TokenId{-1};
  if (*id < 0 || static_cast<uint64_t>(*id) >= spec.tokens.size()) {
    if (key == "tokenizer.ggml.padding_token_id") return TokenId{-1};
    return DataLossError(Where(spec, key) + " = " + std::to_string(*id) +
                         " is outside the vocabulary of " + std::to_string(spec.tokens.size()) +
                         " tokens");
  }
  return static_cast<TokenId>(*id);
}

}  // namespace

std::vector<std::pair<std::string, TokenId>> Vocab::SpecialTexts(bool parse_special) const {
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

Result<Vocab> BuildVocab(const VocabularySpec& spec) {
  Vocab vocab;
  const std::vector<std::string>& tokens = spec.tokens;
  if (tokens.empty()) {
    return DataLossError(Where(spec, "tokenizer.ggml.tokens") + " is empty");
  }
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return UnsupportedError(Where(spec, "tokenizer.ggml.tokens") + " has too many tokens");
  }
  vocab.tokens = tokens;
  if (spec.types.empty()) {
    vocab.types.assign(tokens.size(), TokenType::kNormal);
  } else if (spec.types.size() != tokens.size()) {
    return DataLossError(Where(spec, "tokenizer.ggml.token_type") + " has " +
                         std::to_string(spec.types.size()) +
                         " entries but tokenizer.ggml.tokens has " + std::to_string(tokens.size()));
  } else {
    vocab.types = spec.types;
  }
  const size_t n = tokens.size();
  PIER_ASSIGN_OR_RETURN(vocab.bos_id, CheckId(spec, spec.bos_id, "tokenizer.ggml.bos_token_id"));
  PIER_ASSIGN_OR_RETURN(vocab.eos_id, CheckId(spec, spec.eos_id, "tokenizer.ggml.eos_token_id"));
  PIER_ASSIGN_OR_RETURN(vocab.eot_id, CheckId(spec, spec.eot_id, "tokenizer.ggml.eot_token_id"));
  PIER_ASSIGN_OR_RETURN(vocab.eom_id, CheckId(spec, spec.eom_id, "tokenizer.ggml.eom_token_id"));
  PIER_ASSIGN_OR_RETURN(vocab.unknown_id,
                        CheckId(spec, spec.unknown_id, "tokenizer.ggml.unknown_token_id"));
  PIER_ASSIGN_OR_RETURN(vocab.padding_id,
                        CheckId(spec, spec.padding_id, "tokenizer.ggml.padding_token_id"));
  vocab.add_bos = spec.add_bos;
  vocab.add_eos = spec.add_eos;

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
