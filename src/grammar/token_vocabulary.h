// TokenVocabulary: a model's tokens as byte strings, laid out as a trie in preorder so that
// a token mask is one forward walk with subtrees skipped where the grammar dies.
//
// Only tokens that write text take part: control tokens (<|im_start|>, ...) are never allowed
// under a constraint, and the end-of-generation tokens are allowed exactly where the
// constraint's output is complete (grammar.h). Tokens with the same bytes (an added token
// that repeats a normal one) share a node and are all allowed or all refused.
//
// Thread-safety: immutable after construction; shared by every grammar of one model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pier::tokenizer {
class Tokenizer;
}

namespace pier::grammar {

class TokenVocabulary {
 public:
  struct Node {
    uint8_t byte = 0;
    int32_t depth = 0;         // bytes from the root, >= 1
    int32_t subtree_end = 0;   // the first node after this node's subtree
    int32_t tokens_begin = 0;  // [tokens_begin, tokens_end) into token_ids(): tokens ending here
    int32_t tokens_end = 0;
  };

  // `token_bytes[id]` for every id in [0, vocab_size); `writes_text[id]` false leaves a token
  // out; `end_of_generation` are the ids that end an output.
  TokenVocabulary(const std::vector<std::string>& token_bytes, const std::vector<bool>& writes_text,
                  std::vector<int32_t> end_of_generation);

  // The tokenizer's tokens: normal, byte and user-defined tokens write text; control tokens
  // do not.
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const tokenizer::Tokenizer& t);

  int32_t vocab_size() const { return vocab_size_; }
  const std::vector<Node>& nodes() const { return nodes_; }  // preorder
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  const std::string& bytes(int32_t token) const { return bytes_[static_cast<size_t>(token)]; }
  bool writes_text(int32_t token) const { return writes_text_[static_cast<size_t>(token)]; }
  const std::vector<int32_t>& end_of_generation() const { return end_of_generation_; }
  bool IsEndOfGeneration(int32_t token) const;
  int32_t max_depth() const { return max_depth_; }

 private:
  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;  // [vocab_size]
  std::vector<bool> writes_text_;   // [vocab_size]
  std::vector<int32_t> end_of_generation_;
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  int32_t max_depth_ = 0;
};

}  // namespace pier::grammar
