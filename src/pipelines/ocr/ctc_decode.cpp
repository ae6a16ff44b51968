// ParseCharset, CtcGreedyDecode: rapidocr's CTCLabelDecode (ch_ppocr_rec/utils.py) over the
// recogniser's `character` metadata (OrtInferSession.get_character_list: str.splitlines).
#include "common/check.h"
#include "pipelines/ocr/ocr.h"

namespace pier::pipelines::ocr {
namespace {

// The length of the line break Python's str.splitlines sees at `text[i]` (0: none): \n, \r,
// \r\n, \v, \f, \x1c-\x1e, and in UTF-8 U+0085, U+2028, U+2029.
size_t LineBreakAt(std::string_view text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  const auto next = [&](size_t k) {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u;
  };
  if (c == '\r') return next(1) == '\n' ? 2 : 1;
  if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
  if (c == 0xc2 && next(1) == 0x85) return 2;
  if (c == 0xe2 && next(1) == 0x80 && (next(2) == 0xa8 || next(2) == 0xa9)) return 3;
  return 0;
}

}  // namespace

std::vector<std::string> ParseCharset(std::string_view metadata) {
  std::vector<std::string> charset = {""};  // the CTC blank (rapidocr's "blank", never shown)
  size_t start = 0;
  for (size_t i = 0; i < metadata.size();) {
    const size_t line_break = LineBreakAt(metadata, i);
    if (line_break == 0) {
      ++i;
      continue;
    }
    charset.emplace_back(metadata.substr(start, i - start));
    i += line_break;
    start = i;
  }
  if (start < metadata.size()) charset.emplace_back(metadata.substr(start));
  charset.emplace_back(" ");
  return charset;
}

DecodedText CtcGreedyDecode(std::span<const float> probabilities, int64_t steps, int64_t classes,
                            const std::vector<std::string>& charset) {
  PIER_CHECK(steps >= 0 && classes > 0);
  PIER_CHECK(probabilities.size() == static_cast<size_t>(steps * classes));
  DecodedText decoded;
  double sum = 0;
  int64_t kept = 0;
  int64_t previous = -1;
  for (int64_t s = 0; s < steps; ++s) {
    const float* row = probabilities.data() + s * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (row[c] > row[best]) best = c;
    }
    const bool repeat = best == previous;
    previous = best;
    if (repeat || best == 0) continue;
    sum += static_cast<double>(row[best]);
    ++kept;
    if (static_cast<size_t>(best) < charset.size())
      decoded.text += charset[static_cast<size_t>(best)];
  }
  decoded.score = kept == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(kept));
  return decoded;
}

}  // namespace pier::pipelines::ocr
