#include "common/base64.h"

#include <array>
#include <cstdint>

namespace pier {
namespace {

constexpr std::array<int8_t, 256> kValues = [] {
  std::array<int8_t, 256> v{};
  v.fill(-1);
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) v[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
  return v;
}();

bool Space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

std::optional<std::string> DecodeBase64(std::string_view text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t group = 0;
  int filled = 0;   // sextets in `group`
  int padding = 0;  // '=' seen
  for (char c : text) {
    if (Space(c)) continue;
    if (c == '=') {
      ++padding;
      if (padding > 2) return std::nullopt;
      continue;
    }
    if (padding > 0) return std::nullopt;  // data after padding
    const int8_t v = kValues[static_cast<uint8_t>(c)];
    if (v < 0) return std::nullopt;
    group = (group << 6) | static_cast<uint32_t>(v);
    if (++filled == 4) {
      out.push_back(static_cast<char>(group >> 16));
      out.push_back(static_cast<char>((group >> 8) & 0xff));
      out.push_back(static_cast<char>(group & 0xff));
      group = 0;
      filled = 0;
    }
  }
  // What is left: 2 sextets make one byte, 3 make two; padding, when present, completes the
  // group of 4.
  if (filled == 1 || (padding > 0 && filled + padding != 4)) return std::nullopt;
  if (filled == 2) out.push_back(static_cast<char>(group >> 4));
  if (filled == 3) {
    out.push_back(static_cast<char>(group >> 10));
    out.push_back(static_cast<char>((group >> 2) & 0xff));
  }
  return out;
}

std::string EncodeBase64(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<uint8_t>(bytes[i])} << 16) |
                       (uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t left = bytes.size() - i;
  if (left > 0) {
    uint32_t v = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (left == 2) v |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += left == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace pier
