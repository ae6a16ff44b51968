#include "grammar/string_pattern.h"

#include <algorithm>
#include <string>
#include <utility>

#include "grammar/json_lexical.h"

namespace pier::grammar {
namespace {

CodePointRanges Normalize(CodePointRanges r) {
  std::sort(r.begin(), r.end());
  CodePointRanges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodePointRanges Complement(const CodePointRanges& r) {
  CodePointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : Normalize(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

CodePointRanges DigitClass() { return {{'0', '9'}}; }
CodePointRanges WordClass() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
CodePointRanges SpaceClass() {
  return {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}
CodePointRanges DotClass() { return Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

class PatternParser {
 public:
  explicit PatternParser(std::string_view p) : p_(p) {}

  Result<ExprPtr> Parse() {
    bool anchored_start = false;
    bool anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    if (p_.size() > pos_ && p_.back() == '$' && !EscapedAt(p_.size() - 1)) {
      anchored_end = true;
      p_.remove_suffix(1);
    }
    PIER_ASSIGN_OR_RETURN(ExprPtr body, ParseAlternation());
    if (pos_ != p_.size()) return Error("unbalanced ')'");
    const ExprPtr any = Repeat(JsonStringChar(), 0, kUnbounded);
    return Seq({anchored_start ? Empty() : any, body, anchored_end ? Empty() : any});
  }

 private:
  // The character at i is preceded by an odd number of backslashes.
  bool EscapedAt(size_t i) const {
    size_t n = 0;
    while (i > n && p_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  Status Error(std::string what) const {
    return InvalidArgumentError("pattern " + std::string(p_.substr(0, 200)) + ": " + what +
                                " (at offset " + std::to_string(pos_) + ")");
  }
  // Valid ECMA-262 that Pier cannot enforce: UNSUPPORTED (the caller may still accept it where
  // nothing is enforced).
  Status Unsupported(std::string what) const {
    return UnsupportedError("pattern " + std::string(p_.substr(0, 200)) + ": " + what +
                            " is not supported (at offset " + std::to_string(pos_) + ")");
  }

  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek() const { return p_[pos_]; }

  Result<ExprPtr> ParseAlternation() {
    std::vector<ExprPtr> options;
    PIER_ASSIGN_OR_RETURN(ExprPtr first, ParseConcat());
    options.push_back(first);
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      PIER_ASSIGN_OR_RETURN(ExprPtr next, ParseConcat());
      options.push_back(next);
    }
    return Alt(std::move(options));
  }

  Result<ExprPtr> ParseConcat() {
    std::vector<ExprPtr> parts;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      PIER_ASSIGN_OR_RETURN(ExprPtr atom, ParseAtom());
      PIER_ASSIGN_OR_RETURN(ExprPtr quantified, ParseQuantifier(atom));
      parts.push_back(quantified);
    }
    return Seq(std::move(parts));
  }

  Result<ExprPtr> ParseQuantifier(ExprPtr atom) {
    if (AtEnd()) return atom;
    int32_t min = 1;
    int32_t max = 1;
    const char c = Peek();
    if (c == '*') {
      min = 0, max = kUnbounded, ++pos_;
    } else if (c == '+') {
      min = 1, max = kUnbounded, ++pos_;
    } else if (c == '?') {
      min = 0, max = 1, ++pos_;
    } else if (c == '{') {
      const size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos) return Error("'{' without '}'");
      const std::string body(p_.substr(pos_ + 1, close - pos_ - 1));
      const size_t comma = body.find(',');
      auto number = [](const std::string& s, int32_t* out) {
        if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) {
          return false;
        }
        *out = std::stoi(s);
        return true;
      };
      if (comma == std::string::npos) {
        if (!number(body, &min)) return Error("bad repeat {" + body + "}");
        max = min;
      } else {
        if (!number(body.substr(0, comma), &min)) return Error("bad repeat {" + body + "}");
        const std::string upper = body.substr(comma + 1);
        if (upper.empty()) {
          max = kUnbounded;
        } else if (!number(upper, &max) || max < min) {
          return Error("bad repeat {" + body + "}");
        }
      }
      if (min > kMaxPatternRepeat || max > kMaxPatternRepeat) {
        return Unsupported("a repeat count above " + std::to_string(kMaxPatternRepeat));
      }
      pos_ = close + 1;
    } else {
      return atom;
    }
    if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: the same strings
    if (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
      return Error("a quantifier after a quantifier");
    }
    return Repeat(std::move(atom), min, max);
  }

  // One UTF-8 character of the pattern.
  Result<uint32_t> ReadChar() {
    const auto b0 = static_cast<uint8_t>(p_[pos_]);
    int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > p_.size()) return Error("invalid UTF-8");
    uint32_t c = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<uint8_t>(p_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) return Error("invalid UTF-8");
      c = c << 6 | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(n);
    return c;
  }

  Result<uint32_t> ReadHex(int digits) {
    if (pos_ + static_cast<size_t>(digits) > p_.size()) return Error("a short hex escape");
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = p_[pos_++];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) return Error("a bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // After a backslash: the escaped set of characters.
  Result<CodePointRanges> ParseEscape(bool in_class) {
    if (AtEnd()) return Error("a trailing backslash");
    const char c = p_[pos_++];
    switch (c) {
      case 'd':
        return DigitClass();
      case 'D':
        return Complement(DigitClass());
      case 'w':
        return WordClass();
      case 'W':
        return Complement(WordClass());
      case 's':
        return SpaceClass();
      case 'S':
        return Complement(SpaceClass());
      case 'n':
        return CodePointRanges{{'\n', '\n'}};
      case 't':
        return CodePointRanges{{'\t', '\t'}};
      case 'r':
        return CodePointRanges{{'\r', '\r'}};
      case 'f':
        return CodePointRanges{{'\f', '\f'}};
      case 'v':
        return CodePointRanges{{'\v', '\v'}};
      case '0':
        return CodePointRanges{{0, 0}};
      case 'x': {
        PIER_ASSIGN_OR_RETURN(uint32_t v, ReadHex(2));
        return CodePointRanges{{v, v}};
      }
      case 'u': {
        PIER_ASSIGN_OR_RETURN(uint32_t v, ReadHex(4));
        return CodePointRanges{{v, v}};
      }
      case 'b':
        if (in_class) return CodePointRanges{{'\b', '\b'}};
        return Unsupported("the word boundary \\b");
      case 'B':
        return Unsupported("\\B");
      case 'p':
      case 'P':
        return Unsupported("the Unicode property escape \\" + std::string(1, c));
      case 'k':
        return Unsupported("the backreference \\k");
      default:
        if (c >= '1' && c <= '9') return Unsupported("the backreference \\" + std::string(1, c));
        if (std::isalnum(static_cast<unsigned char>(c))) {
          return Error("unknown escape \\" + std::string(1, c));
        }
        --pos_;
        PIER_ASSIGN_OR_RETURN(uint32_t v, ReadChar());
        return CodePointRanges{{v, v}};
    }
  }

  Result<ExprPtr> ParseClass() {
    // After '['.
    bool negated = false;
    if (!AtEnd() && Peek() == '^') negated = true, ++pos_;
    CodePointRanges set;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("'[' without ']'");
      if (Peek() == ']' && !first) break;
      first = false;
      CodePointRanges item;
      if (Peek() == '\\') {
        ++pos_;
        PIER_ASSIGN_OR_RETURN(item, ParseEscape(true));
      } else {
        PIER_ASSIGN_OR_RETURN(uint32_t c, ReadChar());
        item = {{c, c}};
      }
      // A range a-b (a '-' before ']' is literal).
      if (item.size() == 1 && item[0].first == item[0].second && pos_ + 1 < p_.size() &&
          Peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = 0;
        if (Peek() == '\\') {
          ++pos_;
          PIER_ASSIGN_OR_RETURN(CodePointRanges end, ParseEscape(true));
          if (end.size() != 1 || end[0].first != end[0].second) {
            return Error("a class escape as a range's end");
          }
          hi = end[0].first;
        } else {
          PIER_ASSIGN_OR_RETURN(hi, ReadChar());
        }
        if (hi < item[0].first) return Error("a range out of order");
        item[0].second = hi;
      }
      set.insert(set.end(), item.begin(), item.end());
    }
    ++pos_;  // ']'
    set = negated ? Complement(set) : Normalize(set);
    return JsonCharFrom(set);
  }

  Result<ExprPtr> ParseAtom() {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (!AtEnd() && Peek() == '?') {
        const std::string_view rest = p_.substr(pos_);
        if (rest.starts_with("?:")) {
          pos_ += 2;
        } else if (rest.starts_with("?<") && !rest.starts_with("?<=") && !rest.starts_with("?<!")) {
          const size_t close = p_.find('>', pos_);
          if (close == std::string_view::npos) return Error("a group name without '>'");
          pos_ = close + 1;
        } else {
          return Unsupported("the lookaround (" + std::string(rest.substr(0, 3)));
        }
      }
      PIER_ASSIGN_OR_RETURN(ExprPtr inner, ParseAlternation());
      if (AtEnd() || Peek() != ')') return Error("'(' without ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') {
      ++pos_;
      return ParseClass();
    }
    if (c == '.') {
      ++pos_;
      return JsonCharFrom(DotClass());
    }
    if (c == '\\') {
      ++pos_;
      PIER_ASSIGN_OR_RETURN(CodePointRanges set, ParseEscape(false));
      return JsonCharFrom(Normalize(set));
    }
    if (c == '^' || c == '$')
      return Unsupported(std::string("the anchor '") + c + "' inside a pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("nothing to repeat");
    PIER_ASSIGN_OR_RETURN(uint32_t ch, ReadChar());
    return JsonCharFrom({{ch, ch}});
  }

  std::string_view p_;
  size_t pos_ = 0;
};

}  // namespace

Result<ExprPtr> PatternContent(std::string_view pattern) { return PatternParser(pattern).Parse(); }

}  // namespace pier::grammar
