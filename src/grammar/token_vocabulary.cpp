#include "grammar/token_vocabulary.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace pier::grammar {

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes,
                                 const std::vector<bool>& writes_text,
                                 std::vector<int32_t> end_of_generation)
    : vocab_size_(static_cast<int32_t>(token_bytes.size())),
      bytes_(token_bytes),
      writes_text_(writes_text),
      end_of_generation_(std::move(end_of_generation)) {
  writes_text_.resize(bytes_.size(), false);
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  for (int32_t id : end_of_generation_) {
    if (id >= 0 && id < vocab_size_) writes_text_[static_cast<size_t>(id)] = false;
  }
  // Sorted byte strings are the trie in preorder: each string adds the nodes past the prefix
  // it shares with the one before.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (writes_text_[static_cast<size_t>(id)] && !bytes_[static_cast<size_t>(id)].empty()) {
      order.push_back(id);
    }
  }
  std::stable_sort(order.begin(), order.end(), [this](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  std::vector<int32_t> path;  // node index per depth - 1
  // The node each string of `order` ends at; never decreasing, since later strings sort after.
  std::vector<int32_t> node_of;
  node_of.reserve(order.size());
  const std::string* previous = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t shared = 0;
    if (previous != nullptr) {
      const size_t limit = std::min(previous->size(), s.size());
      while (shared < limit && (*previous)[shared] == s[shared]) ++shared;
    }
    // Close the subtrees deeper than the shared prefix.
    while (path.size() > shared) {
      nodes_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = shared; d < s.size(); ++d) {
      Node n;
      n.byte = static_cast<uint8_t>(s[d]);
      n.depth = static_cast<int32_t>(d + 1);
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    node_of.push_back(path.back());
    max_depth_ = std::max(max_depth_, static_cast<int32_t>(s.size()));
    previous = &s;
  }
  while (!path.empty()) {
    nodes_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(nodes_.size());
    path.pop_back();
  }
  token_ids_.reserve(order.size());
  size_t k = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].tokens_begin = static_cast<int32_t>(token_ids_.size());
    while (k < order.size() && node_of[k] == static_cast<int32_t>(i))
      token_ids_.push_back(order[k++]);
    nodes_[i].tokens_end = static_cast<int32_t>(token_ids_.size());
  }
}

bool TokenVocabulary::IsEndOfGeneration(int32_t token) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), token);
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(
    const tokenizer::Tokenizer& t) {
  const int32_t n = t.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> writes(static_cast<size_t>(n), false);
  for (int32_t id = 0; id < n; ++id) {
    const tokenizer::TokenType type = t.Type(id);
    if (type == tokenizer::TokenType::kControl || type == tokenizer::TokenType::kUnknown ||
        type == tokenizer::TokenType::kUnused) {
      continue;
    }
    bytes[static_cast<size_t>(id)] = t.TokenBytes(id);
    writes[static_cast<size_t>(id)] = true;
  }
  return std::make_shared<const TokenVocabulary>(bytes, writes, t.end_of_generation_ids());
}

}  // namespace pier::grammar
