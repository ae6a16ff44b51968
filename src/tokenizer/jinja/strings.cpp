#include "tokenizer/jinja/strings.h"

#include <utf8proc.h>

#include <algorithm>

namespace pier::tokenizer::jinja {
namespace {

// Length of the UTF-8 sequence at text[pos], or 1 for an invalid byte.
size_t SequenceLength(std::string_view text, size_t pos) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos);
  utf8proc_int32_t cp = 0;
  utf8proc_ssize_t n =
      utf8proc_iterate(bytes, static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
  return n > 0 ? static_cast<size_t>(n) : 1;
}

// Decodes the code point at text[pos]; -1 for an invalid byte.
int32_t DecodeAt(std::string_view text, size_t pos, size_t* length) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos);
  utf8proc_int32_t cp = 0;
  utf8proc_ssize_t n =
      utf8proc_iterate(bytes, static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
  if (n <= 0) {
    *length = 1;
    return -1;
  }
  *length = static_cast<size_t>(n);
  return cp;
}

bool IsCased(int32_t cp) {
  if (cp < 0) return false;
  utf8proc_category_t cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
         cat == UTF8PROC_CATEGORY_LT || utf8proc_toupper(cp) != cp || utf8proc_tolower(cp) != cp;
}

bool IsAlpha(int32_t cp) {
  if (cp < 0) return false;
  utf8proc_category_t cat = utf8proc_category(cp);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

bool IsDigit(int32_t cp) { return cp >= 0 && utf8proc_category(cp) == UTF8PROC_CATEGORY_ND; }

bool IsNumeric(int32_t cp) {
  if (cp < 0) return false;
  utf8proc_category_t cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

constexpr int32_t kSharpS = 0xDF;  // ß: Python upper-cases it to "SS", title-cases to "Ss"
constexpr int32_t kToSS = -2;      // map() result meaning "SS"
constexpr int32_t kToSs = -3;      // map() result meaning "Ss"

// Applies `map` to every valid code point; invalid bytes pass through.
template <typename Map>
std::string MapCodepoints(std::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    int32_t cp = DecodeAt(text, pos, &len);
    if (cp < 0) {
      out.append(text.substr(pos, len));
    } else {
      int32_t mapped = map(cp);
      if (mapped == kToSS) {
        out += "SS";
      } else if (mapped == kToSs) {
        out += "Ss";
      } else {
        AppendUtf8(static_cast<uint32_t>(mapped), &out);
      }
    }
    pos += len;
  }
  return out;
}

template <typename Pred>
bool AllCodepoints(std::string_view text, Pred pred) {
  if (text.empty()) return false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    int32_t cp = DecodeAt(text, pos, &len);
    if (!pred(cp)) return false;
    pos += len;
  }
  return true;
}

bool ContainsCodepoint(std::string_view set, int32_t cp, std::string_view raw) {
  if (cp < 0) return set.find(raw) != std::string_view::npos;
  size_t pos = 0;
  while (pos < set.size()) {
    size_t len = 0;
    if (DecodeAt(set, pos, &len) == cp) return true;
    pos += len;
  }
  return false;
}

size_t CodepointIndexOfByte(std::string_view text, size_t byte_pos) {
  return CodepointCount(text.substr(0, byte_pos));
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::vector<size_t> CodepointOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    offsets.push_back(pos);
    pos += SequenceLength(text, pos);
  }
  offsets.push_back(text.size());
  return offsets;
}

size_t CodepointCount(std::string_view text) {
  size_t count = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path.
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
    } else {
      pos += SequenceLength(text, pos);
    }
    ++count;
  }
  return count;
}

bool IsPyWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                    bool right) {
  auto strippable = [&](size_t pos, size_t* len) {
    int32_t cp = DecodeAt(text, pos, len);
    if (!chars) return cp >= 0 && IsPyWhitespace(static_cast<uint32_t>(cp));
    return ContainsCodepoint(*chars, cp, text.substr(pos, *len));
  };
  std::vector<size_t> offsets = CodepointOffsets(text);
  size_t first = 0;
  size_t last = offsets.size() - 1;  // exclusive, in code points
  size_t len = 0;
  if (left) {
    while (first < last && strippable(offsets[first], &len)) ++first;
  }
  if (right) {
    while (last > first && strippable(offsets[last - 1], &len)) --last;
  }
  return std::string(text.substr(offsets[first], offsets[last] - offsets[first]));
}

std::string PyUpper(std::string_view text) {
  return MapCodepoints(text,
                       [](int32_t cp) { return cp == kSharpS ? kToSS : utf8proc_toupper(cp); });
}

std::string PyLower(std::string_view text) {
  return MapCodepoints(text, [](int32_t cp) { return utf8proc_tolower(cp); });
}

std::string PySwapCase(std::string_view text) {
  return MapCodepoints(text, [](int32_t cp) {
    if (cp == kSharpS) return kToSS;
    int32_t upper = utf8proc_toupper(cp);
    return upper != cp ? upper : utf8proc_tolower(cp);
  });
}

std::string PyTitle(std::string_view text) {
  bool previous_cased = false;
  return MapCodepoints(text, [&](int32_t cp) {
    int32_t mapped =
        previous_cased ? utf8proc_tolower(cp) : (cp == kSharpS ? kToSs : utf8proc_totitle(cp));
    previous_cased = IsCased(cp);
    return mapped;
  });
}

std::string PyCapitalize(std::string_view text) {
  bool first = true;
  return MapCodepoints(text, [&](int32_t cp) {
    int32_t mapped = first ? (cp == kSharpS ? kToSs : utf8proc_totitle(cp)) : utf8proc_tolower(cp);
    first = false;
    return mapped;
  });
}

bool PyIsLower(std::string_view text) {
  bool any_cased = false;
  bool ok = AllCodepoints(text, [&](int32_t cp) {
    if (!IsCased(cp)) return true;
    any_cased = true;
    return cp >= 0 && utf8proc_tolower(cp) == cp && utf8proc_toupper(cp) != cp;
  });
  return ok && any_cased;
}

bool PyIsUpper(std::string_view text) {
  bool any_cased = false;
  bool ok = AllCodepoints(text, [&](int32_t cp) {
    if (!IsCased(cp)) return true;
    any_cased = true;
    return cp >= 0 && utf8proc_toupper(cp) == cp && utf8proc_tolower(cp) != cp;
  });
  return ok && any_cased;
}

bool PyIsAlpha(std::string_view text) { return AllCodepoints(text, IsAlpha); }
bool PyIsDigit(std::string_view text) { return AllCodepoints(text, IsDigit); }
bool PyIsAlnum(std::string_view text) {
  return AllCodepoints(text, [](int32_t cp) { return IsAlpha(cp) || IsNumeric(cp); });
}
bool PyIsSpace(std::string_view text) {
  return AllCodepoints(
      text, [](int32_t cp) { return cp >= 0 && IsPyWhitespace(static_cast<uint32_t>(cp)); });
}

std::vector<std::string> PySplit(std::string_view text, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = text.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(text.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(text.substr(pos));
    } else {
      size_t end = text.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t hit = text.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        parts.emplace_back(text.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      parts.emplace_back(text.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Whitespace splitting works on code points; runs of whitespace are one separator.
  std::vector<size_t> offsets = CodepointOffsets(text);
  size_t n = offsets.size() - 1;
  auto is_space = [&](size_t i) {
    size_t len = 0;
    int32_t cp = DecodeAt(text, offsets[i], &len);
    return cp >= 0 && IsPyWhitespace(static_cast<uint32_t>(cp));
  };
  auto piece = [&](size_t a, size_t b) {
    return std::string(text.substr(offsets[a], offsets[b] - offsets[a]));
  };
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && is_space(i)) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = n;
        parts.push_back(piece(i, end));
        break;
      }
      size_t start = i;
      while (i < n && !is_space(i)) ++i;
      parts.push_back(piece(start, i));
    }
  } else {
    size_t i = n;
    while (true) {
      while (i > 0 && is_space(i - 1)) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(piece(0, i));
        break;
      }
      size_t end = i;
      while (i > 0 && !is_space(i - 1)) --i;
      parts.push_back(piece(i, end));
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::string PyReplace(std::string_view text, std::string_view old_text, std::string_view new_text,
                      int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old_text.empty()) {
    std::vector<size_t> offsets = CodepointOffsets(text);
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      out.append(text.substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
    if (count < 0 || done < count) out.append(new_text);
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    size_t hit = text.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(new_text);
    pos = hit + old_text.size();
    ++done;
  }
  out.append(text.substr(pos));
  return out;
}

int64_t PyFind(std::string_view text, std::string_view needle, bool from_right) {
  size_t hit = from_right ? text.rfind(needle) : text.find(needle);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(CodepointIndexOfByte(text, hit));
}

int64_t PyCount(std::string_view text, std::string_view needle) {
  if (needle.empty()) return static_cast<int64_t>(CodepointCount(text)) + 1;
  int64_t count = 0;
  size_t pos = 0;
  while ((pos = text.find(needle, pos)) != std::string_view::npos) {
    ++count;
    pos += needle.size();
  }
  return count;
}

}  // namespace pier::tokenizer::jinja
