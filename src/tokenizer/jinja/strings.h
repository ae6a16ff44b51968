// Python str operations on UTF-8 text, for Pier's Jinja engine.
//
// Python strings are sequences of code points, so length, indexing, slicing and the case
// and whitespace functions here work on code points. Invalid UTF-8 bytes count as one code
// point each and pass through unchanged. Case mapping uses utf8proc's simple (one-to-one)
// mappings plus Python's "ß" -> "SS"; Python's other one-to-many mappings (ligatures such as
// "ﬁ".upper() == "FI") are not reproduced.
// Stateless free functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pier::tokenizer::jinja {

// Byte offset where each code point starts, plus a final entry == text.size().
std::vector<size_t> CodepointOffsets(std::string_view text);
size_t CodepointCount(std::string_view text);

// Python's str.isspace() for one code point.
bool IsPyWhitespace(uint32_t cp);

// str.strip / lstrip / rstrip. `chars` unset strips whitespace; otherwise any of its code points.
std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                    bool right);

std::string PyUpper(std::string_view text);
std::string PyLower(std::string_view text);
std::string PySwapCase(std::string_view text);
// str.title(): first letter of each run of cased letters upper, the rest lower.
std::string PyTitle(std::string_view text);
// str.capitalize(): first code point upper, the rest lower.
std::string PyCapitalize(std::string_view text);
// Python's str.islower()/isupper(): at least one cased character and all cased ones match.
bool PyIsLower(std::string_view text);
bool PyIsUpper(std::string_view text);
bool PyIsAlpha(std::string_view text);
bool PyIsDigit(std::string_view text);
bool PyIsAlnum(std::string_view text);
bool PyIsSpace(std::string_view text);

// str.split(sep, maxsplit) / str.rsplit; `sep` unset splits on whitespace runs. maxsplit < 0: all.
std::vector<std::string> PySplit(std::string_view text, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right);

// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts between code points.
std::string PyReplace(std::string_view text, std::string_view old_text, std::string_view new_text,
                      int64_t count);

// Code point index of the first (or last) occurrence, or -1.
int64_t PyFind(std::string_view text, std::string_view needle, bool from_right);
int64_t PyCount(std::string_view text, std::string_view needle);

// markupsafe.escape: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(std::string_view text);

// Appends one code point as UTF-8.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace pier::tokenizer::jinja
