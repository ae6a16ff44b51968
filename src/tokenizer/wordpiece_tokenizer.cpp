#include "tokenizer/wordpiece_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <utility>

#include "tokenizer/unicode.h"

namespace pier::tokenizer {
namespace {

constexpr std::string_view kPhantomSpace = "\xE2\x96\x81";  // U+2581 "▁"
constexpr size_t kMaxCharsPerWord = 100;                    // Hugging Face's default

bool IsBracketed(std::string_view token) {
  return token.size() >= 2 && token.front() == '[' && token.back() == ']';
}

// Rust's char::is_whitespace (Unicode White_Space), which `tokenizers` uses.
bool IsWhitespace(uint32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Control and format characters (Cc, Cf, Cs, Co, Cn) but tab, LF and CR, which count as
// whitespace.
bool IsControl(uint32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

// The CJK Unified Ideographs blocks BERT sets apart (not Hangul, kana or other scripts).
bool IsCjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ASCII punctuation (which includes $ + < = > ^ ` | ~) or a Unicode P* character.
bool IsPunctuation(uint32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

// Decodes valid UTF-8 (checked by the caller) into code points.
std::vector<uint32_t> CodePoints(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n <= 0) break;  // not reached for validated text
    out.push_back(static_cast<uint32_t>(c));
    p += n;
    left -= n;
  }
  return out;
}

bool HasUpperCase(std::string_view token) {
  for (uint32_t c : CodePoints(token)) {
    if (utf8proc_isupper(static_cast<utf8proc_int32_t>(c))) return true;
  }
  return false;
}

TokenId FindText(const Vocab& vocab, std::string_view text) {
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.tokens[id] == text) return static_cast<TokenId>(id);
  }
  return -1;
}

}  // namespace

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::Create(const VocabularySpec& spec) {
  PIER_ASSIGN_OR_RETURN(Vocab vocab, BuildVocab(spec));
  const auto pick = [&](const std::optional<int64_t>& id, TokenId fallback,
                        std::string_view text) -> Result<TokenId> {
    if (id.has_value()) {
      if (*id < 0 || static_cast<size_t>(*id) >= vocab.tokens.size()) {
        return DataLossError(spec.source + ": the " + std::string(text) + " token id " +
                             std::to_string(*id) + " is outside the vocabulary");
      }
      return static_cast<TokenId>(*id);
    }
    if (fallback >= 0) return fallback;
    const TokenId found = FindText(vocab, text);
    if (found < 0) {
      return DataLossError(spec.source + ": a WordPiece vocabulary without a " + std::string(text) +
                           " token");
    }
    return found;
  };
  PIER_ASSIGN_OR_RETURN(TokenId cls, pick(spec.cls_id, vocab.bos_id, "[CLS]"));
  PIER_ASSIGN_OR_RETURN(TokenId sep, pick(spec.sep_id, vocab.eos_id, "[SEP]"));
  PIER_ASSIGN_OR_RETURN(TokenId unknown, pick(std::nullopt, vocab.unknown_id, "[UNK]"));
  // GGUF does not record do_lower_case. An uncased vocabulary was built from lower-cased text,
  // so upper-case letters are all but absent (bert-base-uncased has 2 such tokens, "ℝ" and
  // "##ℝ", of 30,522); a cased one has thousands.
  size_t upper = 0;
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.types[id] == TokenType::kNormal && !IsBracketed(vocab.tokens[id]) &&
        HasUpperCase(vocab.tokens[id])) {
      ++upper;
    }
  }
  const bool uncased = upper * 1000 < vocab.tokens.size();
  return std::unique_ptr<WordPieceTokenizer>(
      new WordPieceTokenizer(std::move(vocab), cls, sep, unknown, uncased));
}

WordPieceTokenizer::WordPieceTokenizer(Vocab vocab, TokenId cls, TokenId sep, TokenId unknown,
                                       bool uncased)
    : vocab_(std::move(vocab)),
      cls_id_(cls),
      sep_id_(sep),
      unknown_id_(unknown),
      uncased_(uncased),
      specials_(vocab_.SpecialTexts(/*parse_special=*/true)) {
  for (size_t id = 0; id < vocab_.tokens.size(); ++id) {
    const std::string& token = vocab_.tokens[id];
    if (vocab_.types[id] == TokenType::kControl || IsBracketed(token)) continue;
    const auto tid = static_cast<TokenId>(id);
    if (token.starts_with(kPhantomSpace)) {
      word_start_.emplace(token.substr(kPhantomSpace.size()), tid);  // first one wins
    } else {
      continuation_.emplace(token, tid);
    }
  }
}

void WordPieceTokenizer::NormalizeInto(std::string_view text, std::vector<uint32_t>* out) const {
  for (uint32_t c : CodePoints(text)) {
    if (c == 0 || c == 0xFFFD || IsControl(c)) continue;
    if (IsWhitespace(c)) {
      out->push_back(' ');
      continue;
    }
    if (IsCjk(c)) {
      out->push_back(' ');
      out->push_back(c);
      out->push_back(' ');
      continue;
    }
    if (!uncased_) {
      out->push_back(c);
      continue;
    }
    // Canonical decomposition, non-spacing marks dropped, then lower case (the order
    // BertNormalizer applies strip_accents and lowercase in).
    utf8proc_int32_t decomposed[32];
    int last_boundclass = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), decomposed,
                                                       32, UTF8PROC_DECOMPOSE, &last_boundclass);
    if (n <= 0 || n > 32) {
      out->push_back(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
      continue;
    }
    for (utf8proc_ssize_t i = 0; i < n; ++i) {
      if (utf8proc_category(decomposed[i]) == UTF8PROC_CATEGORY_MN) continue;
      out->push_back(static_cast<uint32_t>(utf8proc_tolower(decomposed[i])));
    }
  }
}

void WordPieceTokenizer::AppendWord(std::span<const uint32_t> word,
                                    std::vector<TokenId>* out) const {
  if (word.empty()) return;
  if (word.size() > kMaxCharsPerWord) {
    out->push_back(unknown_id_);
    return;
  }
  // Byte offset of each character in the word's UTF-8, so pieces are substrings.
  std::string utf8;
  std::vector<size_t> offsets;
  offsets.reserve(word.size() + 1);
  for (uint32_t c : word) {
    offsets.push_back(utf8.size());
    AppendUtf8(c, &utf8);
  }
  offsets.push_back(utf8.size());
  const size_t first = out->size();
  size_t start = 0;
  while (start < word.size()) {
    const auto& pieces = start == 0 ? word_start_ : continuation_;
    TokenId match = -1;
    size_t end = word.size();
    for (; end > start; --end) {
      auto it = pieces.find(utf8.substr(offsets[start], offsets[end] - offsets[start]));
      if (it != pieces.end()) {
        match = it->second;
        break;
      }
    }
    if (match < 0) {
      out->resize(first);
      out->push_back(unknown_id_);
      return;
    }
    out->push_back(match);
    start = end;
  }
}

Status WordPieceTokenizer::AppendPieces(std::string_view text, bool parse_special,
                                        std::vector<TokenId>* out) const {
  PIER_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<TextFragment> fragments;
  if (parse_special) {
    fragments = specials_.Split(text);
  } else {
    fragments.push_back({text, -1});
  }
  std::vector<uint32_t> normalized;
  for (const TextFragment& fragment : fragments) {
    if (fragment.token >= 0) {
      out->push_back(fragment.token);
      continue;
    }
    normalized.clear();
    NormalizeInto(fragment.text, &normalized);
    size_t word_begin = 0;
    for (size_t i = 0; i <= normalized.size(); ++i) {
      const bool end = i == normalized.size();
      const uint32_t c = end ? ' ' : normalized[i];
      if (c == ' ' || IsPunctuation(c)) {
        AppendWord(std::span(normalized).subspan(word_begin, i - word_begin), out);
        if (!end && c != ' ') AppendWord(std::span(normalized).subspan(i, 1), out);
        word_begin = i + 1;
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<TokenId>> WordPieceTokenizer::Encode(std::string_view text,
                                                        const EncodeOptions& options) const {
  std::vector<TokenId> ids;
  if (options.add_special) ids.push_back(cls_id_);
  PIER_RETURN_IF_ERROR(AppendPieces(text, options.parse_special, &ids));
  if (options.add_special) ids.push_back(sep_id_);
  return ids;
}

Result<PairEncoding> WordPieceTokenizer::EncodePair(std::string_view a, std::string_view b,
                                                    bool parse_special) const {
  PairEncoding pair;
  pair.ids.push_back(cls_id_);
  PIER_RETURN_IF_ERROR(AppendPieces(a, parse_special, &pair.ids));
  pair.ids.push_back(sep_id_);
  pair.type_ids.assign(pair.ids.size(), 0);
  PIER_RETURN_IF_ERROR(AppendPieces(b, parse_special, &pair.ids));
  pair.ids.push_back(sep_id_);
  pair.type_ids.resize(pair.ids.size(), 1);
  return pair;
}

std::string WordPieceTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return {};
  const std::string& token = vocab_.tokens[static_cast<size_t>(id)];
  if (token.starts_with(kPhantomSpace)) return " " + token.substr(kPhantomSpace.size());
  return token;
}

std::string_view WordPieceTokenizer::Piece(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return vocab_.tokens[static_cast<size_t>(id)];
}

TokenType WordPieceTokenizer::Type(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return TokenType::kUndefined;
  return vocab_.types[static_cast<size_t>(id)];
}

}  // namespace pier::tokenizer
