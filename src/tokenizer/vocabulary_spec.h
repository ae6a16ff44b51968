// VocabularySpec: everything a tokenizer is built from, as plain data. model/ reads it out
// of a GGUF file (model/gguf_tokenizer.h); tests and other formats can fill it directly.
// Nothing here knows a file format.
//
// Tokenizer::Create validates it: errors name `source` and the field, by the GGUF key that
// holds it (the vocabulary's common names: "tokenizer.ggml.token_type has 3 entries ...").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pier::tokenizer {

using TokenId = int32_t;

// As in GGUF's `tokenizer.ggml.token_type`.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct VocabularySpec {
  std::string source;  // where the vocabulary came from (a file path), for error messages
  std::string model;   // the algorithm: "gpt2" (byte-level BPE), "llama" (SentencePiece), "bert"
  std::string pre_tokenizer;        // BPE's pre-tokenizer name ("" = the default)
  std::vector<std::string> tokens;  // [vocab_size] entries as stored
  std::vector<TokenType> types;     // [vocab_size], or empty: every token normal
  // BPE merges by rank: the two parts of each, as written.
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<float> scores;  // SentencePiece: [vocab_size], or empty: all 0
  // Special ids as stored (range-checked by Create); absent: none (or SentencePiece's usual).
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, unknown_id, padding_id;
  // WordPiece (BERT): the classification and separator tokens (tokenizer.ggml.cls_token_id,
  // tokenizer.ggml.seperator_token_id, as llama.cpp's converter spells it).
  std::optional<int64_t> cls_id, sep_id;
  std::optional<bool> add_bos, add_eos;  // absent: the algorithm's default
  std::optional<bool> add_space_prefix;  // SentencePiece; absent: true
};

}  // namespace pier::tokenizer
