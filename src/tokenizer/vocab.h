// Vocab: the checked vocabulary every tokenizer algorithm shares, built from a
// VocabularySpec: tokens, types, the special ids (bos, eos, eot, eom, unknown, padding),
// add_bos / add_eos, and the derived end-of-generation set. Errors name the spec's source
// and the field (by its GGUF key). A plain value type; thread-safe to read.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocabulary_spec.h"

namespace pier::tokenizer {

struct Vocab {
  std::vector<std::string> tokens;  // [vocab_size] entries as stored
  std::vector<TokenType> types;     // [vocab_size]; kNormal when the file has no types
  TokenId bos_id = -1;
  TokenId eos_id = -1;
  TokenId eot_id = -1;
  TokenId eom_id = -1;
  TokenId unknown_id = -1;
  TokenId padding_id = -1;
  std::optional<bool> add_bos;  // nullopt when the key is absent
  std::optional<bool> add_eos;
  std::vector<TokenId> end_of_generation_ids;  // sorted, unique

  // Literal texts matched in input before the algorithm runs: with `parse_special`,
  // control, unknown and user-defined tokens; without it, user-defined tokens only
  // (as llama.cpp does: added words stay words, markup tokens become text).
  std::vector<std::pair<std::string, TokenId>> SpecialTexts(bool parse_special) const;
};

[[nodiscard]] Result<Vocab> BuildVocab(const VocabularySpec& spec);

}  // namespace pier::tokenizer
