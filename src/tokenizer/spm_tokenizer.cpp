// SentencePiece-style tokenizer: see spm_tokenizer.h.
//
// Encoding follows SentencePiece's BPE-by-score model as llama.cpp's
// llm_tokenizer_spm runs it: within one text fragment, spaces become "▁", a
// leading "▁" is added (first fragment, and any fragment right after a special
// token), the fragment is split into UTF-8 characters, and the adjacent pair
// whose concatenation is a vocabulary piece with the highest score is merged,
// repeatedly (ties go to the leftmost pair). Symbols left that are not pieces
// fall back to <0xNN> byte tokens, or to <unk> when the vocabulary has no byte
// token for one of their bytes.
#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace pier::tokenizer {
namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581 "▁"

constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";

// Length of the UTF-8 sequence starting at text[pos], or 0 when it is invalid
// (stray continuation byte, truncated, overlong, surrogate or above U+10FFFF).
size_t Utf8SequenceLength(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  const auto is_continuation = [&](size_t i) {
    return pos + i < text.size() && (byte(i) & 0xC0) == 0x80;
  };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte or overlong 2-byte lead
  if (lead < 0xE0) return is_continuation(1) ? 2 : 0;
  if (lead < 0xF0) {
    if (!is_continuation(1) || !is_continuation(2)) return 0;
    if (lead == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (lead == 0xED && byte(1) >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (lead < 0xF5) {
    if (!is_continuation(1) || !is_continuation(2) || !is_continuation(3)) return 0;
    if (lead == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (lead == 0xF4 && byte(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

Status ValidateUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = Utf8SequenceLength(text, pos);
    if (length == 0) {
      char byte_hex[8];
      std::snprintf(byte_hex, sizeof(byte_hex), "0x%02X", static_cast<uint8_t>(text[pos]));
      return InvalidArgumentError("text is not valid UTF-8: bad byte " + std::string(byte_hex) +
                                  " at offset " + std::to_string(pos));
    }
    pos += length;
  }
  return Status::Ok();
}

// "<0x0A>" -> 0x0A; -1 when `piece` is not of that form.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (const char c : piece.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

std::string UnescapeSpaces(std::string_view piece) {
  std::string result;
  result.reserve(piece.size());
  for (size_t pos = 0; pos < piece.size();) {
    if (piece.substr(pos, kEscapedSpace.size()) == kEscapedSpace) {
      result += ' ';
      pos += kEscapedSpace.size();
    } else {
      result += piece[pos++];
    }
  }
  return result;
}

// A run of characters of the fragment being encoded; merged symbols keep
// covering contiguous bytes of the escaped text.
struct Symbol {
  uint32_t start = 0;   // byte offset into the escaped text
  uint32_t length = 0;  // bytes; 0 once merged into its left neighbour
  int32_t prev = -1;    // index of the previous live symbol, -1 at the start
  int32_t next = -1;    // index of the next live symbol, -1 at the end
};

struct Bigram {
  float score = 0.0f;
  int32_t left = 0;     // symbol index
  int32_t right = 0;    // symbol index
  uint32_t length = 0;  // bytes of the merged text, to detect stale entries
};

// Orders the queue: highest score on top, the leftmost pair first among equals.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// What MakeSpmTokenizer takes from the spec, with SentencePiece defaults applied.
struct SpmConfig {
  Vocab vocab;
  std::vector<float> scores;  // [n_vocab]
  bool add_space_prefix = true;
  std::vector<std::pair<std::string, TokenId>> specials;      // for parse_special
  std::vector<std::pair<std::string, TokenId>> user_defined;  // for plain text
};

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(SpmConfig config)
      : pieces_(std::move(config.vocab.tokens)),
        scores_(std::move(config.scores)),
        types_(std::move(config.vocab.types)),
        bos_id_(config.vocab.bos_id),
        eos_id_(config.vocab.eos_id),
        unk_id_(config.vocab.unknown_id),
        add_bos_(config.vocab.add_bos.value_or(true)),
        add_eos_(config.vocab.add_eos.value_or(false)),
        add_space_prefix_(config.add_space_prefix),
        all_specials_(std::move(config.specials)),
        user_defined_(std::move(config.user_defined)),
        eog_ids_(std::move(config.vocab.end_of_generation_ids)) {
    const auto n_vocab = static_cast<TokenId>(pieces_.size());
    // pieces_ is complete and never changes again, so views into it stay valid.
    mergeable_.reserve(pieces_.size());
    byte_tokens_.fill(-1);
    token_bytes_.resize(pieces_.size());
    for (TokenId id = 0; id < n_vocab; ++id) {
      const std::string& piece = pieces_[id];
      switch (types_[id]) {
        case TokenType::kNormal:
        case TokenType::kUndefined:
        case TokenType::kUserDefined:
          // First occurrence wins when a vocabulary repeats a piece.
          mergeable_.emplace(std::string_view(piece), id);
          break;
        default:
          break;
      }
      switch (types_[id]) {
        case TokenType::kNormal:
        case TokenType::kUndefined:
          token_bytes_[id] = UnescapeSpaces(piece);
          break;
        case TokenType::kByte: {
          const int value = ParseBytePiece(piece);
          if (value >= 0) {
            token_bytes_[id] = std::string(1, static_cast<char>(value));
            if (byte_tokens_[value] < 0) byte_tokens_[value] = id;
          } else {
            token_bytes_[id] = piece;
          }
          break;
        }
        case TokenType::kUnused:
          break;  // stands for no text
        default:  // control, user-defined, unknown: their literal text
          token_bytes_[id] = piece;
          break;
      }
    }
    // Vocabularies without byte tokens may still hold single-byte pieces.
    for (int value = 0; value < 0x80; ++value) {
      if (byte_tokens_[value] >= 0) continue;
      const auto it = mergeable_.find(std::string_view(std::string(1, static_cast<char>(value))));
      if (it != mergeable_.end()) byte_tokens_[value] = it->second;
    }
  }

  Result<std::vector<TokenId>> Encode(std::string_view text,
                                      const EncodeOptions& options) const override {
    PIER_RETURN_IF_ERROR(ValidateUtf8(text));
    std::vector<TokenId> output;
    output.reserve(text.size() / 3 + 4);
    if (options.add_special && add_bos_ && bos_id_ >= 0) output.push_back(bos_id_);

    // A fragment gets the "▁" prefix when it starts the text or follows a special token.
    bool after_special = true;
    const SpecialTokenMatcher& matcher = options.parse_special ? all_specials_ : user_defined_;
    std::vector<TextFragment> fragments;
    if (matcher.empty()) {
      if (!text.empty()) fragments.push_back(TextFragment{text, -1});
    } else {
      fragments = matcher.Split(text);
    }
    for (const TextFragment& fragment : fragments) {
      if (fragment.token >= 0) {
        output.push_back(fragment.token);
        after_special = true;
        continue;
      }
      PIER_RETURN_IF_ERROR(
          EncodeFragment(fragment.text, add_space_prefix_ && after_special, &output));
      after_special = false;
    }

    if (options.add_special && add_eos_ && eos_id_ >= 0) output.push_back(eos_id_);
    return output;
  }

  std::string TokenBytes(TokenId id) const override {
    PIER_CHECK(InRange(id), "token id out of range");
    return token_bytes_[id];
  }
  std::string_view Piece(TokenId id) const override {
    PIER_CHECK(InRange(id), "token id out of range");
    return pieces_[id];
  }
  TokenType Type(TokenId id) const override {
    PIER_CHECK(InRange(id), "token id out of range");
    return types_[id];
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  TokenId bos_id() const override { return bos_id_; }
  TokenId eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  bool add_eos() const override { return add_eos_; }
  const std::vector<TokenId>& end_of_generation_ids() const override { return eog_ids_; }
  bool strips_leading_space_on_decode() const override { return add_space_prefix_; }

 private:
  bool InRange(TokenId id) const { return id >= 0 && id < vocab_size(); }

  TokenId FindMergeable(std::string_view text) const {
    const auto it = mergeable_.find(text);
    return it == mergeable_.end() ? -1 : it->second;
  }

  // Runs the score-driven merge over one fragment of ordinary text.
  Status EncodeFragment(std::string_view fragment, bool space_prefix,
                        std::vector<TokenId>* output) const {
    std::string escaped;  // the fragment with spaces as "▁", and the optional prefix
    escaped.reserve(fragment.size() + fragment.size() / 2 + kEscapedSpace.size());
    if (space_prefix) escaped += kEscapedSpace;
    for (const char c : fragment) {
      if (c == ' ') {
        escaped += kEscapedSpace;
      } else {
        escaped += c;
      }
    }

    std::vector<Symbol> symbols;  // [n_chars]
    symbols.reserve(escaped.size());
    for (size_t pos = 0; pos < escaped.size();) {
      const size_t length = Utf8SequenceLength(escaped, pos);
      PIER_CHECK(length > 0, "text was validated as UTF-8");
      Symbol symbol;
      symbol.start = static_cast<uint32_t>(pos);
      symbol.length = static_cast<uint32_t>(length);
      symbol.prev = static_cast<int32_t>(symbols.size()) - 1;
      pos += length;
      symbol.next = pos == escaped.size() ? -1 : static_cast<int32_t>(symbols.size()) + 1;
      symbols.push_back(symbol);
    }
    if (symbols.empty()) return Status::Ok();

    std::vector<Bigram> queue_storage;
    queue_storage.reserve(symbols.size());
    std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue(BigramLess{},
                                                                       std::move(queue_storage));
    const auto try_add_bigram = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const uint32_t length = symbols[left].length + symbols[right].length;
      const TokenId id =
          FindMergeable(std::string_view(escaped).substr(symbols[left].start, length));
      if (id < 0) return;
      queue.push(Bigram{scores_[id], left, right, length});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);

    while (!queue.empty()) {
      const Bigram bigram = queue.top();
      queue.pop();
      Symbol& left = symbols[bigram.left];
      Symbol& right = symbols[bigram.right];
      // Skip pairs whose sides have changed since the pair was queued.
      if (left.length == 0 || right.length == 0 || left.next != bigram.right ||
          left.length + right.length != bigram.length) {
        continue;
      }
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = bigram.left;
      try_add_bigram(left.prev, bigram.left);
      try_add_bigram(bigram.left, left.next);
    }

    for (int32_t i = 0; i != -1; i = symbols[i].next) {
      const std::string_view text =
          std::string_view(escaped).substr(symbols[i].start, symbols[i].length);
      PIER_RETURN_IF_ERROR(EmitSymbol(text, output));
    }
    return Status::Ok();
  }

  // A piece when the symbol is one, else its bytes as byte tokens, else <unk>.
  Status EmitSymbol(std::string_view text, std::vector<TokenId>* output) const {
    const TokenId id = FindMergeable(text);
    if (id >= 0) {
      output->push_back(id);
      return Status::Ok();
    }
    bool all_bytes = true;
    for (const char c : text) all_bytes = all_bytes && byte_tokens_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (const char c : text) output->push_back(byte_tokens_[static_cast<uint8_t>(c)]);
      return Status::Ok();
    }
    if (unk_id_ >= 0) {
      output->push_back(unk_id_);
      return Status::Ok();
    }
    return InvalidArgumentError("text holds a character ('" + std::string(text) +
                                "') that the vocabulary cannot encode: no piece, no byte "
                                "tokens and no <unk> token");
  }

  const std::vector<std::string> pieces_;  // [n_vocab]
  const std::vector<float> scores_;        // [n_vocab]
  const std::vector<TokenType> types_;     // [n_vocab]
  const TokenId bos_id_;
  const TokenId eos_id_;
  const TokenId unk_id_;
  const bool add_bos_;
  const bool add_eos_;
  const bool add_space_prefix_;
  // Verbatim matches: control + unknown + user-defined tokens with parse_special,
  // user-defined ones alone without it (as llama.cpp and Hugging Face do).
  const SpecialTokenMatcher all_specials_;
  const SpecialTokenMatcher user_defined_;
  // Pieces that merges may produce (normal, undefined, user-defined), by text;
  // views point into pieces_.
  std::unordered_map<std::string_view, TokenId> mergeable_;
  std::array<TokenId, 256> byte_tokens_{};  // byte value -> <0xNN> token, -1 when absent
  std::vector<std::string> token_bytes_;    // [n_vocab] TokenBytes()
  const std::vector<TokenId> eog_ids_;      // sorted, unique
};

// A special id the file leaves out takes SentencePiece's usual one (<unk> 0, <s> 1,
// </s> 2, as llama.cpp assumes) when the vocabulary has that many tokens.
TokenId DefaultId(TokenId id, TokenId fallback, size_t n_vocab) {
  if (id >= 0) return id;
  return static_cast<size_t>(fallback) < n_vocab ? fallback : TokenId{-1};
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> MakeSpmTokenizer(const VocabularySpec& spec) {
  SpmConfig config;
  PIER_ASSIGN_OR_RETURN(config.vocab, BuildVocab(spec));
  Vocab& vocab = config.vocab;
  const size_t n_vocab = vocab.tokens.size();

  if (spec.scores.empty()) {
    config.scores.assign(n_vocab, 0.0f);
  } else if (spec.scores.size() != n_vocab) {
    return DataLossError(spec.source + ": " + std::string(kScoresKey) + " has " +
                         std::to_string(spec.scores.size()) +
                         " entries but tokenizer.ggml.tokens has " + std::to_string(n_vocab));
  } else {
    config.scores = spec.scores;
  }
  config.add_space_prefix = spec.add_space_prefix.value_or(true);

  vocab.unknown_id = DefaultId(vocab.unknown_id, 0, n_vocab);
  vocab.bos_id = DefaultId(vocab.bos_id, 1, n_vocab);
  if (vocab.eos_id < 0) {
    vocab.eos_id = DefaultId(vocab.eos_id, 2, n_vocab);
    std::vector<TokenId>& eog = vocab.end_of_generation_ids;
    if (vocab.eos_id >= 0 && std::find(eog.begin(), eog.end(), vocab.eos_id) == eog.end()) {
      eog.insert(std::upper_bound(eog.begin(), eog.end(), vocab.eos_id), vocab.eos_id);
    }
  }

  config.specials = vocab.SpecialTexts(/*parse_special=*/true);
  config.user_defined = vocab.SpecialTexts(/*parse_special=*/false);
  return std::unique_ptr<Tokenizer>(std::make_unique<SpmTokenizer>(std::move(config)));
}

}  // namespace pier::tokenizer
