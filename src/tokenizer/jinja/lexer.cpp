#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cstdlib>

#include "tokenizer/jinja/strings.h"

namespace pier::tokenizer::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.rstrip() on UTF-8.
std::string_view RStripPy(std::string_view text) {
  std::string stripped = PyStrip(text, std::nullopt, false, true);
  return text.substr(0, stripped.size());
}

// True when `text` is one or more whitespace code points (Python's `\s+` fullmatch).
bool AllWhitespace(std::string_view text) {
  return !text.empty() && PyStrip(text, std::nullopt, true, false).empty();
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = FindTagStart(pos);
      if (start == std::string::npos) {
        Emit(TokenKind::kData, pos, src_.substr(pos));
        break;
      }
      char kind = src_[start + 1];  // '{', '%' or '#'
      char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      size_t raw_end = kind == '%' ? MatchRawBegin(start) : std::string::npos;

      std::string_view text(src_.data() + pos, start - pos);
      if (sign == '-') {
        text = RStripPy(text);
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && AllWhitespace(text.substr(l_pos))) {
          text = text.substr(0, l_pos);
        }
      }
      if (!text.empty()) Emit(TokenKind::kData, pos, std::string(text));

      if (raw_end != std::string::npos) {
        PIER_ASSIGN_OR_RETURN(pos, LexRaw(start, raw_end, &line_starting));
        continue;
      }
      size_t body = start + 2 + (sign != '\0' ? 1 : 0);
      if (kind == '#') {
        PIER_ASSIGN_OR_RETURN(pos, SkipComment(start, body, &line_starting));
        continue;
      }
      bool is_block = kind == '%';
      Emit(is_block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, start, "");
      PIER_ASSIGN_OR_RETURN(pos, LexTag(body, is_block, &line_starting));
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    Locate(src_.size(), &eof);
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char next = src_[p + 1];
      if (next == '{' || next == '%' || next == '#') return p;
      pos = p + 1;
    }
  }

  // If `{%[-+]?\s*raw\s*(-%}\s*|%})` starts at `start`, returns the offset after it.
  size_t MatchRawBegin(size_t start) const {
    size_t p = start + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      return p;
    }
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  Result<size_t> LexRaw(size_t start, size_t body, bool* line_starting) {
    // Body runs to `{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)`.
    size_t search = body;
    while (true) {
      size_t p = src_.find("{%", search);
      if (p == std::string::npos) return Error(start, "missing end of raw directive");
      size_t q = p + 2;
      char sign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = p + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      size_t end;
      if (src_.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (src_.compare(q, 3, "-%}") == 0) {
        end = q + 3;
        while (end < src_.size() && IsSpace(src_[end])) ++end;
      } else if (src_.compare(q, 2, "%}") == 0) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        search = p + 2;
        continue;
      }
      std::string_view text(src_.data() + body, p - body);
      if (sign == '-') {
        text = RStripPy(text);
      } else if (sign != '+') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
        if (l_pos > 0 && AllWhitespace(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      if (!text.empty()) Emit(TokenKind::kData, body, std::string(text));
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
  }

  Result<size_t> SkipComment(size_t start, size_t body, bool* line_starting) {
    size_t q = src_.find("#}", body);
    if (q == std::string::npos) return Error(start, "missing end of comment tag");
    size_t end;
    if (q > body && src_[q - 1] == '-') {
      end = q + 2;
      while (end < src_.size() && IsSpace(src_[end])) ++end;
    } else if (q > body && src_[q - 1] == '+') {
      end = q + 2;
    } else {
      end = q + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;
    }
    *line_starting = src_[end - 1] == '\n';
    return end;
  }

  // Lexes the inside of `{{ }}` or `{% %}` from `pos`; returns the offset after the end tag.
  Result<size_t> LexTag(size_t pos, bool is_block, bool* line_starting) {
    std::vector<char> balancing;
    size_t tag_start = pos;
    while (true) {
      if (pos >= src_.size()) {
        return Error(tag_start, is_block ? "unexpected end of template, expected '%}'"
                                         : "unexpected end of template, expected '}}'");
      }
      if (balancing.empty()) {
        size_t end = MatchTagEnd(pos, is_block);
        if (end != std::string::npos) {
          Emit(is_block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, pos, "");
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      char c = src_[pos];
      if (IsSpace(c)) {
        ++pos;
        continue;
      }
      if (IsDigit(c)) {
        PIER_ASSIGN_OR_RETURN(pos, LexNumber(pos));
        continue;
      }
      if (IsNameStart(c)) {
        size_t end = pos;
        while (end < src_.size() && IsNameChar(src_[end])) ++end;
        Emit(TokenKind::kName, pos, src_.substr(pos, end - pos));
        pos = end;
        continue;
      }
      if (c == '\'' || c == '"') {
        PIER_ASSIGN_OR_RETURN(pos, LexString(pos));
        continue;
      }
      static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (std::string_view two : kTwoChar) {
        if (src_.compare(pos, 2, two) == 0) op = std::string(two);
      }
      if (op.empty() &&
          std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) {
        op = std::string(1, c);
      }
      if (op.empty()) {
        return Error(pos, "unexpected character '" + std::string(1, c) + "'");
      }
      if (op == "(" || op == "[" || op == "{") {
        balancing.push_back(op == "(" ? ')' : (op == "[" ? ']' : '}'));
      } else if (op == ")" || op == "]" || op == "}") {
        if (balancing.empty()) return Error(pos, "unexpected '" + op + "'");
        if (balancing.back() != op[0]) {
          return Error(
              pos, "unexpected '" + op + "', expected '" + std::string(1, balancing.back()) + "'");
        }
        balancing.pop_back();
      }
      Emit(TokenKind::kOperator, pos, op);
      pos += op.size();
    }
  }

  size_t MatchTagEnd(size_t pos, bool is_block) const {
    if (is_block) {
      if (src_.compare(pos, 3, "+%}") == 0) return pos + 3;
      if (src_.compare(pos, 3, "-%}") == 0) {
        size_t end = pos + 3;
        while (end < src_.size() && IsSpace(src_[end])) ++end;
        return end;
      }
      if (src_.compare(pos, 2, "%}") == 0) {
        size_t end = pos + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
        return end;
      }
      return std::string::npos;
    }
    if (src_.compare(pos, 3, "-}}") == 0) {
      size_t end = pos + 3;
      while (end < src_.size() && IsSpace(src_[end])) ++end;
      return end;
    }
    if (src_.compare(pos, 2, "}}") == 0) return pos + 2;
    return std::string::npos;
  }

  // Digits with optional single underscores between them, starting at pos; returns the end.
  size_t ScanDigits(size_t pos) const {
    size_t end = pos;
    while (end < src_.size()) {
      if (IsDigit(src_[end])) {
        ++end;
      } else if (src_[end] == '_' && end > pos && end + 1 < src_.size() && IsDigit(src_[end + 1])) {
        ++end;
      } else {
        break;
      }
    }
    return end;
  }

  Result<size_t> LexNumber(size_t pos) {
    auto clean = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    // Prefixed integers: 0b, 0o, 0x.
    if (src_[pos] == '0' && pos + 2 < src_.size()) {
      char p = static_cast<char>(src_[pos + 1] | 0x20);
      int base = p == 'b' ? 2 : (p == 'o' ? 8 : (p == 'x' ? 16 : 0));
      if (base != 0) {
        size_t end = pos + 2;
        while (end < src_.size() &&
               (std::isxdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
          ++end;
        std::string digits = clean(src_.substr(pos + 2, end - pos - 2));
        char* parse_end = nullptr;
        errno = 0;
        long long v = std::strtoll(digits.c_str(), &parse_end, base);
        if (digits.empty() || *parse_end != '\0' || errno == ERANGE) {
          return Error(pos, "invalid integer literal");
        }
        Emit(TokenKind::kInteger, pos, "", v);
        return end;
      }
    }
    size_t int_end = ScanDigits(pos);
    size_t end = int_end;
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && IsDigit(src_[end + 1])) {
      end = ScanDigits(end + 1);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && IsDigit(src_[e])) {
        end = ScanDigits(e);
        is_float = true;
      }
    }
    std::string text = clean(src_.substr(pos, end - pos));
    if (is_float) {
      Token t;
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
      Locate(pos, &t);
      tokens_.push_back(std::move(t));
      return end;
    }
    errno = 0;
    long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return Error(pos, "integer literal does not fit in 64 bits");
    Emit(TokenKind::kInteger, pos, "", v);
    return end;
  }

  Result<size_t> LexString(size_t pos) {
    char quote = src_[pos];
    std::string out;
    size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) return Error(pos, "unterminated string literal");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) return Error(pos, "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          if (p + n > src_.size()) return Error(p, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (size_t i = 0; i < n; ++i) {
            char h = src_[p + i];
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              return Error(p, "truncated \\" + std::string(1, e) + " escape");
            }
            cp = cp * 16 + static_cast<uint32_t>(IsDigit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return Error(p, "escape is not a valid Unicode scalar value");
          }
          AppendUtf8(cp, &out);
          p += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
            }
            AppendUtf8(cp, &out);
          } else if (e == 'N') {
            return Error(p - 2, "\\N{...} escapes are not supported");
          } else {
            out.push_back('\\');  // Python keeps unknown escapes verbatim
            out.push_back(e);
          }
      }
    }
    // Adjacent literals are joined by the parser; keep each token separate here.
    Emit(TokenKind::kString, pos, std::move(out));
    return p + 1;
  }

  void Locate(size_t offset, Token* t) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    t->line = static_cast<int>(line_index) + 1;
    t->column = static_cast<int>(offset - line_starts_[line_index]) + 1;
  }

  void Emit(TokenKind kind, size_t offset, std::string text, int64_t int_value = 0) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.int_value = int_value;
    Locate(offset, &t);
    tokens_.push_back(std::move(t));
  }

  Status Error(size_t offset, const std::string& message) const {
    Token t;
    Locate(offset, &t);
    return InvalidArgumentError("chat template syntax error at " + std::to_string(t.line) + ":" +
                                std::to_string(t.column) + ": " + message);
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  // keep_trailing_newline=False: a single trailing newline is dropped.
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source) {
  Lexer lexer(NormalizeNewlines(source));
  return lexer.Run();
}

}  // namespace pier::tokenizer::jinja
