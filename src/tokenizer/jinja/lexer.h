// Jinja lexer: template source -> tokens, with transformers' whitespace settings.
//
// Reproduces Jinja2's lexer with trim_blocks=True and lstrip_blocks=True (what
// transformers' chat-template environment uses): newlines are normalized to "\n" and one
// trailing newline is dropped; `{%- -%}` / `{{- -}}` / `{#- -#}` strip whitespace; `+`
// disables lstrip/trim; the first newline after a block or comment tag is removed; spaces
// before a block or comment tag alone on its line are removed; `{% raw %}` bodies are data.
// Comments produce no tokens. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pier::tokenizer::jinja {

enum class TokenKind : uint8_t {
  kData,           // literal template text (text)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifier (text)
  kString,         // string literal, escapes decoded (text)
  kInteger,        // int_value
  kFloat,          // float_value
  kOperator,       // + - * / // % ** ~ [ ] ( ) { } == != < <= > >= = . : | , ; (text)
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes
};

// INVALID_ARGUMENT naming line:column for an unterminated tag, comment or string, an
// unbalanced bracket, a bad escape or an unexpected character.
Result<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace pier::tokenizer::jinja
