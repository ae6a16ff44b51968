#include "tokenizer/unicode.h"

#include <string>

namespace pier::tokenizer {
namespace {

// Valid range of the second byte after a lead byte (Unicode Table 3-7); later
// continuation bytes are always 0x80..0xBF.
struct LeadInfo {
  size_t length;  // 0 when the byte cannot start a character
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  return {0, 0, 0};
}

std::array<uint32_t, 256> BuildAlphabet() {
  std::array<uint32_t, 256> alphabet{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    alphabet[b] = printable ? b : next++;
  }
  return alphabet;
}

// Inverse of the alphabet over code points 0..0x143 (the largest one used).
std::array<int16_t, 0x144> BuildInverse() {
  std::array<int16_t, 0x144> inverse;
  inverse.fill(-1);
  const auto& alphabet = ByteLevelAlphabet();
  for (int b = 0; b < 256; ++b) inverse[alphabet[b]] = static_cast<int16_t>(b);
  return inverse;
}

uint32_t DecodeValid(std::string_view text, size_t pos, size_t length) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  switch (length) {
    case 1:
      return byte(0);
    case 2:
      return (uint32_t{byte(0)} & 0x1F) << 6 | (byte(1) & 0x3F);
    case 3:
      return (uint32_t{byte(0)} & 0x0F) << 12 | (uint32_t{byte(1)} & 0x3F) << 6 | (byte(2) & 0x3F);
    default:
      return (uint32_t{byte(0)} & 0x07) << 18 | (uint32_t{byte(1)} & 0x3F) << 12 |
             (uint32_t{byte(2)} & 0x3F) << 6 | (byte(3) & 0x3F);
  }
}

}  // namespace

Utf8Unit NextUtf8Unit(std::string_view text, size_t pos) {
  const LeadInfo lead = Lead(static_cast<uint8_t>(text[pos]));
  if (lead.length == 0) return {Utf8Unit::Kind::kInvalid, 1};
  for (size_t i = 1; i < lead.length; ++i) {
    if (pos + i >= text.size()) return {Utf8Unit::Kind::kTruncated, i};
    const auto b = static_cast<uint8_t>(text[pos + i]);
    const uint8_t lo = i == 1 ? lead.second_lo : 0x80;
    const uint8_t hi = i == 1 ? lead.second_hi : 0xBF;
    if (b < lo || b > hi) return {Utf8Unit::Kind::kInvalid, i};
  }
  return {Utf8Unit::Kind::kValid, lead.length};
}

Status ValidateUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Unit unit = NextUtf8Unit(text, pos);
    if (unit.kind != Utf8Unit::Kind::kValid) {
      return InvalidArgumentError("text is not valid UTF-8: ill-formed sequence at byte offset " +
                                  std::to_string(pos));
    }
    pos += unit.length;
  }
  return Status::Ok();
}

size_t AppendSanitizedUtf8(std::string_view bytes, bool at_end, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Unit unit = NextUtf8Unit(bytes, pos);
    switch (unit.kind) {
      case Utf8Unit::Kind::kValid:
        out->append(bytes.substr(pos, unit.length));
        break;
      case Utf8Unit::Kind::kTruncated:
        if (!at_end) return pos;
        out->append(kReplacementCharacter);
        break;
      case Utf8Unit::Kind::kInvalid:
        out->append(kReplacementCharacter);
        break;
    }
    pos += unit.length;
  }
  return pos;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const std::array<uint32_t, 256>& ByteLevelAlphabet() {
  static const std::array<uint32_t, 256> alphabet = BuildAlphabet();
  return alphabet;
}

int ByteLevelByte(uint32_t code_point) {
  static const std::array<int16_t, 0x144> inverse = BuildInverse();
  return code_point < inverse.size() ? inverse[code_point] : -1;
}

std::string ByteLevelEncode(std::string_view bytes) {
  const auto& alphabet = ByteLevelAlphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(alphabet[static_cast<uint8_t>(c)], &out);
  return out;
}

std::string ByteLevelDecode(std::string_view piece, bool* all_mapped) {
  std::string out;
  out.reserve(piece.size());
  bool mapped = true;
  size_t pos = 0;
  while (pos < piece.size()) {
    const Utf8Unit unit = NextUtf8Unit(piece, pos);
    const int byte = unit.kind == Utf8Unit::Kind::kValid
                         ? ByteLevelByte(DecodeValid(piece, pos, unit.length))
                         : -1;
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      mapped = false;
      out.append(piece.substr(pos, unit.length));
    }
    pos += unit.length;
  }
  if (all_mapped != nullptr) *all_mapped = mapped;
  return out;
}

}  // namespace pier::tokenizer
