// ASCII text helpers for protocol text (HTTP header names and values, tokens): no locale,
// no Unicode. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pier {

// `s` without leading and trailing spaces and tabs (HTTP's optional whitespace).
std::string_view TrimSpaceAndTab(std::string_view s);

// `s` with A-Z lowered; other bytes unchanged.
std::string AsciiLower(std::string_view s);

// Equal ignoring the case of A-Z.
bool EqualsIgnoreAsciiCase(std::string_view a, std::string_view b);

// Whether the comma-separated list (an HTTP header value such as "gzip, chunked") holds
// `token`, ignoring case and the whitespace around items.
bool ListHasToken(std::string_view list, std::string_view token);

// The items of a `separator`-separated list, as written (empty items kept: "a,,b" has three,
// "" has one), for flag values such as "50,90,99" or "a,b,c,even".
std::vector<std::string> SplitList(std::string_view list, char separator = ',');

// At most `max_bytes` of `s` with bytes outside printable ASCII replaced by '?', for quoting
// untrusted protocol text in error messages.
std::string PrintableAscii(std::string_view s, size_t max_bytes = 80);

}  // namespace pier
