// A text of `length` WordPiece ids for all-MiniLM-L6-v2: [CLS], ids drawn from the vocabulary's
// ordinary words by `seed`, [SEP]. For tests that need many texts of known lengths.
#pragma once

#include <cstdint>
#include <vector>

namespace pier::encoder::testing {

inline std::vector<int32_t> SyntheticText(int32_t seed, int length) {
  std::vector<int32_t> ids = {101};
  for (int i = 0; i + 2 < length; ++i) ids.push_back(2000 + (seed * 131 + i * 17) % 20000);
  ids.push_back(102);
  return ids;
}

}  // namespace pier::encoder::testing
