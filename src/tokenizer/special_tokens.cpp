#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <cstring>

namespace pier::tokenizer {

SpecialTokenMatcher::SpecialTokenMatcher(std::vector<std::pair<std::string, TokenId>> specials) {
  std::erase_if(specials, [](const auto& s) { return s.first.empty(); });
  // Longest first, so the first candidate that matches at a position is the longest;
  // equal texts keep the lowest id.
  std::stable_sort(specials.begin(), specials.end(), [](const auto& a, const auto& b) {
    if (a.first.size() != b.first.size()) return a.first.size() > b.first.size();
    return a.second < b.second;
  });
  specials_ = std::move(specials);
  for (uint32_t i = 0; i < specials_.size(); ++i) {
    by_first_byte_[static_cast<uint8_t>(specials_[i].first[0])].push_back(i);
  }
}

std::vector<TextFragment> SpecialTokenMatcher::Split(std::string_view text) const {
  std::vector<TextFragment> fragments;
  size_t run_start = 0;  // start of the ordinary text not yet emitted
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const std::pair<std::string, TokenId>* match = nullptr;
    for (uint32_t index : candidates) {
      const std::string& literal = specials_[index].first;
      if (literal.size() <= text.size() - pos &&
          std::memcmp(text.data() + pos, literal.data(), literal.size()) == 0) {
        match = &specials_[index];
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    if (pos > run_start) fragments.push_back({text.substr(run_start, pos - run_start), -1});
    fragments.push_back({text.substr(pos, match->first.size()), match->second});
    pos += match->first.size();
    run_start = pos;
  }
  if (pos > run_start) fragments.push_back({text.substr(run_start, pos - run_start), -1});
  return fragments;
}

}  // namespace pier::tokenizer
