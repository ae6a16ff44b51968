// UTF-8 helpers and GPT-2's byte alphabet, shared by the tokenizers.
//
// UTF-8 validity follows the Unicode Standard (Table 3-7: no overlongs, no
// surrogates, nothing above U+10FFFF). Ill-formed input is replaced by U+FFFD
// once per "maximal subpart" (Unicode 3.9 / WHATWG), the policy Python's
// `bytes.decode(errors="replace")` uses, so decoded text matches a Python
// reference byte for byte. utf8proc does not report maximal subparts, hence
// this small decoder. Stateless functions; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pier::tokenizer {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// What starts at a position of a byte string.
struct Utf8Unit {
  enum class Kind : uint8_t {
    kValid,      // a well-formed character of `length` bytes
    kInvalid,    // `length` bytes that can never start a character: one U+FFFD
    kTruncated,  // `length` bytes of a character the string ends inside of
  };
  Kind kind;
  size_t length;  // >= 1
};

// Classifies the bytes at `text[pos]` (pos < text.size()).
Utf8Unit NextUtf8Unit(std::string_view text, size_t pos);

// OK, or INVALID_ARGUMENT naming the byte offset of the first ill-formed sequence.
Status ValidateUtf8(std::string_view text);

// Appends `bytes` to `out` with every ill-formed subpart replaced by U+FFFD. When
// `at_end` is false, a truncated character at the very end is left unconsumed (it may
// be completed by later bytes). Returns the number of bytes consumed.
size_t AppendSanitizedUtf8(std::string_view bytes, bool at_end, std::string* out);

// Encodes a code point (<= U+10FFFF) as UTF-8.
void AppendUtf8(uint32_t code_point, std::string* out);

// GPT-2's reversible byte <-> character alphabet used by byte-level BPE
// vocabularies: printable bytes map to themselves, the others to U+0100 onwards
// (space 0x20 becomes "Ġ" U+0120, newline "Ċ" U+010A).
const std::array<uint32_t, 256>& ByteLevelAlphabet();

// The byte a character of that alphabet stands for, or -1 when it is not in it.
int ByteLevelByte(uint32_t code_point);

// Maps raw bytes to their byte-level characters ("a b" -> "aĠb").
std::string ByteLevelEncode(std::string_view bytes);

// Undoes ByteLevelEncode. Characters outside the alphabet (and ill-formed UTF-8)
// are copied through unchanged; `*all_mapped` (when given) tells whether every
// character was in the alphabet.
std::string ByteLevelDecode(std::string_view piece, bool* all_mapped = nullptr);

}  // namespace pier::tokenizer
