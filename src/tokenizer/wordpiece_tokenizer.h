// WordPieceTokenizer: BERT's tokenizer (`tokenizer.ggml.model = bert`), as Hugging Face's
// `tokenizers` runs it for BertTokenizer (BertNormalizer, BertPreTokenizer, WordPiece, the
// [CLS] ... [SEP] template).
//
// The vocabulary is read in llama.cpp's "phantom space" form: a word-initial piece `w` stored
// as "▁w", a continuation `##w` as "w", bracketed tokens ("[CLS]", "[unused0]") as they are.
// Encoding:
//   1. control tokens written verbatim ("[CLS]", "[MASK]") are matched first (parse_special);
//   2. normalization: NUL, U+FFFD and control/format characters (Unicode C*, except tab, CR
//      and LF) are dropped, whitespace becomes a space, CJK ideographs are set apart by spaces,
//      and, for an uncased vocabulary (under 0.1% of its tokens hold an upper-case letter), text is
//      decomposed (NFD), its non-spacing marks dropped and lower-cased (utf8proc);
//   3. words are split at whitespace and every punctuation character (ASCII punctuation and
//      Unicode P*) is a word of its own;
//   4. each word becomes its longest-matching pieces left to right; a word with no complete
//      match, or longer than 100 characters, is one [UNK].
// Encode with add_special wraps the pieces in [CLS] ... [SEP]; EncodePair gives
// [CLS] a [SEP] b [SEP] with token type 0 for the first part and 1 for the second.
//
// Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"
#include "tokenizer/vocabulary_spec.h"

namespace pier::tokenizer {

struct PairEncoding {
  std::vector<TokenId> ids;
  std::vector<int32_t> type_ids;  // 0 for [CLS] a [SEP], 1 for b [SEP]
};

class WordPieceTokenizer final : public Tokenizer {
 public:
  // DATA_LOSS for an inconsistent vocabulary or one without [CLS], [SEP] or [UNK] (by id
  // metadata or by text), naming the spec's source.
  static Result<std::unique_ptr<WordPieceTokenizer>> Create(const VocabularySpec& spec);

  Result<std::vector<TokenId>> Encode(std::string_view text,
                                      const EncodeOptions& options = {}) const override;
  // INVALID_ARGUMENT when either text is not valid UTF-8.
  Result<PairEncoding> EncodePair(std::string_view a, std::string_view b,
                                  bool parse_special = true) const;

  std::string TokenBytes(TokenId id) const override;
  std::string_view Piece(TokenId id) const override;
  TokenType Type(TokenId id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  TokenId bos_id() const override { return cls_id_; }
  TokenId eos_id() const override { return sep_id_; }
  bool add_bos() const override { return true; }
  bool add_eos() const override { return true; }
  const std::vector<TokenId>& end_of_generation_ids() const override { return no_ids_; }
  bool strips_leading_space_on_decode() const override { return true; }

  TokenId cls_id() const { return cls_id_; }
  TokenId sep_id() const { return sep_id_; }
  TokenId unknown_id() const { return unknown_id_; }
  TokenId padding_id() const { return vocab_.padding_id; }
  bool uncased() const { return uncased_; }

  // The pieces of `text` without [CLS]/[SEP], appended to `out`.
  Status AppendPieces(std::string_view text, bool parse_special, std::vector<TokenId>* out) const;

 private:
  WordPieceTokenizer(Vocab vocab, TokenId cls, TokenId sep, TokenId unknown, bool uncased);
  void NormalizeInto(std::string_view text, std::vector<uint32_t>* out) const;
  void AppendWord(std::span<const uint32_t> word, std::vector<TokenId>* out) const;

  Vocab vocab_;
  TokenId cls_id_;
  TokenId sep_id_;
  TokenId unknown_id_;
  bool uncased_;
  SpecialTokenMatcher specials_;
  std::unordered_map<std::string, TokenId> word_start_;    // "w" for "▁w"
  std::unordered_map<std::string, TokenId> continuation_;  // "w" for "##w"
  std::vector<TokenId> no_ids_;
};

}  // namespace pier::tokenizer
