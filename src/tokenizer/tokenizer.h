// Tokenizer: text <-> token ids for a model, built from a plain VocabularySpec
// (vocabulary_spec.h; model/gguf_tokenizer.h reads one out of a GGUF file).
//
// Two algorithms live behind this interface: byte-level BPE (spec model "gpt2", with a
// pre-tokenizer chosen by name) and SentencePiece-style ("llama"). Special and added
// tokens are matched verbatim before the algorithm runs when `parse_special`
// is set. Thread-safety: immutable after construction; Encode/Decode may be
// called from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/vocabulary_spec.h"

namespace pier::tokenizer {

struct EncodeOptions {
  bool add_special = true;    // prepend BOS / append EOS when the model asks for them
  bool parse_special = true;  // match special/added tokens written in the text
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Builds the tokenizer a spec describes. No model: NOT_FOUND; an unknown model or
  // pre-tokenizer: UNSUPPORTED; inconsistent arrays or special ids outside the vocabulary:
  // DATA_LOSS; each naming the spec's source and the field.
  static Result<std::unique_ptr<Tokenizer>> Create(const VocabularySpec& spec);

  // INVALID_ARGUMENT when `text` is not valid UTF-8.
  virtual Result<std::vector<TokenId>> Encode(std::string_view text,
                                              const EncodeOptions& options = {}) const = 0;

  // The bytes a token stands for in decoded text (byte-level and "▁" mappings undone).
  // May be a partial UTF-8 sequence.
  virtual std::string TokenBytes(TokenId id) const = 0;

  // The token's vocabulary entry as stored in the file (e.g. "Ġhello", "▁the", "<|im_end|>").
  virtual std::string_view Piece(TokenId id) const = 0;
  virtual TokenType Type(TokenId id) const = 0;
  virtual int32_t vocab_size() const = 0;

  // Special ids; -1 when the model has none.
  virtual TokenId bos_id() const = 0;
  virtual TokenId eos_id() const = 0;
  virtual bool add_bos() const = 0;
  virtual bool add_eos() const = 0;
  // The whole end-of-generation set: eos, eot, eom and similar, from metadata.
  virtual const std::vector<TokenId>& end_of_generation_ids() const = 0;
  bool IsEndOfGeneration(TokenId id) const;

  // Concatenated TokenBytes; control tokens dropped when skip_special.
  // Invalid UTF-8 left at the end or inside is replaced with U+FFFD.
  std::string Decode(std::span<const TokenId> ids, bool skip_special = false) const;
  // SentencePiece drops the leading space of the first piece; BPE does not.
  virtual bool strips_leading_space_on_decode() const { return false; }
};

}  // namespace pier::tokenizer
