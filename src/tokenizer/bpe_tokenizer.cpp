#include "tokenizer/bpe_tokenizer.h"

#include <array>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace pier::tokenizer {
namespace {

// What merging two adjacent tokens gives, and how early BPE applies it.
struct Merge {
  int32_t rank;    // position in tokenizer.ggml.merges: lower merges first
  TokenId result;  // the token of the concatenation
};

uint64_t PairKey(TokenId left, TokenId right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// One symbol of a word being merged: a doubly linked list over a vector.
struct Symbol {
  TokenId id;
  int32_t prev;  // -1 at the start
  int32_t next;  // -1 at the end
};

// A merge that may apply between symbols `left` and its successor. Entries go
// stale when either symbol merges with another neighbour first; the ids recorded
// here detect that when the entry is popped.
struct Candidate {
  int32_t rank;
  int32_t left;
  TokenId left_id;
  TokenId right_id;
  TokenId result;
  // Lowest rank first; leftmost first among equal ranks (Hugging Face's order).
  bool operator>(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : left > other.left;
  }
};

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> Make(const VocabularySpec& spec) {
    PIER_ASSIGN_OR_RETURN(Vocab vocab, BuildVocab(spec));
    auto pre = PreTokenizer::ForName(spec.pre_tokenizer);
    if (!pre.ok()) return pre.status().WithContext(spec.source);
    std::unique_ptr<BpeTokenizer> tokenizer(
        new BpeTokenizer(std::move(vocab), std::move(pre).value()));
    tokenizer->BuildMerges(spec.merges);
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  Result<std::vector<TokenId>> Encode(std::string_view text,
                                      const EncodeOptions& options) const override {
    PIER_RETURN_IF_ERROR(ValidateUtf8(text));
    std::vector<TokenId> ids;
    ids.reserve(text.size() / 3 + 2);
    if (options.add_special && add_bos_ && vocab_.bos_id >= 0) ids.push_back(vocab_.bos_id);
    const SpecialTokenMatcher& matcher = options.parse_special ? all_specials_ : word_specials_;
    for (const TextFragment& fragment : matcher.Split(text)) {
      if (fragment.token >= 0) {
        ids.push_back(fragment.token);
        continue;
      }
      PIER_ASSIGN_OR_RETURN(auto pieces, pre_->Split(fragment.text));
      for (std::string_view piece : pieces) EncodePiece(piece, &ids);
    }
    if (options.add_special && add_eos_ && vocab_.eos_id >= 0) ids.push_back(vocab_.eos_id);
    return ids;
  }

  std::string TokenBytes(TokenId id) const override {
    if (!InRange(id)) return {};
    const TokenType type = vocab_.types[id];
    // Markup and added tokens are stored as their literal text, not byte-mapped.
    if (type == TokenType::kControl || type == TokenType::kUserDefined ||
        type == TokenType::kUnknown) {
      return vocab_.tokens[id];
    }
    return ByteLevelDecode(vocab_.tokens[id]);
  }

  std::string_view Piece(TokenId id) const override {
    return InRange(id) ? std::string_view(vocab_.tokens[id]) : std::string_view();
  }
  TokenType Type(TokenId id) const override {
    return InRange(id) ? vocab_.types[id] : TokenType::kUndefined;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  TokenId bos_id() const override { return vocab_.bos_id; }
  TokenId eos_id() const override { return vocab_.eos_id; }
  bool add_bos() const override { return add_bos_; }
  bool add_eos() const override { return add_eos_; }
  const std::vector<TokenId>& end_of_generation_ids() const override {
    return vocab_.end_of_generation_ids;
  }

 private:
  BpeTokenizer(Vocab vocab, std::unique_ptr<PreTokenizer> pre)
      : vocab_(std::move(vocab)),
        pre_(std::move(pre)),
        all_specials_(vocab_.SpecialTexts(/*parse_special=*/true)),
        word_specials_(vocab_.SpecialTexts(/*parse_special=*/false)) {
    add_bos_ = vocab_.add_bos.value_or(pre_->add_bos_by_default());
    add_eos_ = vocab_.add_eos.value_or(false);
    piece_to_id_.reserve(vocab_.tokens.size());
    for (size_t id = 0; id < vocab_.tokens.size(); ++id) {
      // emplace keeps the first id of a duplicated entry.
      piece_to_id_.emplace(vocab_.tokens[id], static_cast<TokenId>(id));
    }
    const auto& alphabet = ByteLevelAlphabet();
    for (int b = 0; b < 256; ++b) {
      std::string character;
      AppendUtf8(alphabet[b], &character);
      byte_token_[b] = Lookup(character);
    }
  }

  bool InRange(TokenId id) const {
    return id >= 0 && static_cast<size_t>(id) < vocab_.tokens.size();
  }

  TokenId Lookup(std::string_view piece) const {
    auto it = piece_to_id_.find(piece);
    return it == piece_to_id_.end() ? -1 : it->second;
  }

  void BuildMerges(const std::vector<std::pair<std::string, std::string>>& merges) {
    merges_.reserve(merges.size());
    std::string joined;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string_view left = merges[rank].first;
      const std::string_view right = merges[rank].second;
      joined.assign(left).append(right);
      const TokenId left_id = Lookup(left);
      const TokenId right_id = Lookup(right);
      const TokenId result = Lookup(joined);
      // A merge whose parts or result are not tokens can never be applied to ids;
      // converters occasionally leave such entries behind, so they are skipped.
      if (left_id < 0 || right_id < 0 || result < 0) continue;
      merges_.emplace(PairKey(left_id, right_id), Merge{static_cast<int32_t>(rank), result});
    }
  }

  const Merge* FindMerge(TokenId left, TokenId right) const {
    auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  // Appends the tokens of one pre-tokenized piece.
  void EncodePiece(std::string_view piece, std::vector<TokenId>* ids) const {
    if (pre_->ignore_merges()) {
      const TokenId whole = Lookup(ByteLevelEncode(piece));
      if (whole >= 0) {
        ids->push_back(whole);
        return;
      }
    }
    // One symbol per byte: GPT-2's alphabet maps every byte to one character.
    std::vector<Symbol> symbols;
    symbols.reserve(piece.size());
    for (char c : piece) {
      TokenId id = byte_token_[static_cast<uint8_t>(c)];
      if (id < 0) id = vocab_.unknown_id;  // a vocabulary without that byte
      if (id < 0) continue;
      const auto index = static_cast<int32_t>(symbols.size());
      symbols.push_back({id, index - 1, index + 1});
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    const auto push_pair = [&](int32_t left) {
      if (left < 0) return;
      const int32_t right = symbols[left].next;
      if (right < 0) return;
      const Merge* merge = FindMerge(symbols[left].id, symbols[right].id);
      if (merge != nullptr) {
        queue.push({merge->rank, left, symbols[left].id, symbols[right].id, merge->result});
      }
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.left];
      if (left.id != top.left_id || left.next < 0) continue;  // left merged since
      Symbol& right = symbols[left.next];
      if (right.id != top.right_id) continue;  // right merged since
      left.id = top.result;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.left;
      right.id = -1;  // unlinked
      push_pair(left.prev);
      push_pair(top.left);
    }
    for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
  }

  Vocab vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  SpecialTokenMatcher all_specials_;   // control, unknown and user-defined texts
  SpecialTokenMatcher word_specials_;  // user-defined texts only
  bool add_bos_ = false;
  bool add_eos_ = false;
  std::unordered_map<std::string_view, TokenId> piece_to_id_;  // views into vocab_.tokens
  std::array<TokenId, 256> byte_token_{};                      // token of each byte, or -1
  std::unordered_map<uint64_t, Merge> merges_;                 // PairKey(left, right) -> merge
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(const VocabularySpec& spec) {
  return BpeTokenizer::Make(spec);
}

}  // namespace pier::tokenizer
