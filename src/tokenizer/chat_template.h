// ChatTemplate: renders a model's `tokenizer.chat_template` (Jinja) into a prompt string,
// byte-for-byte as HF transformers' `apply_chat_template(..., tokenize=False)` does.
//
// Parse() compiles the template once with Pier's own Jinja engine (src/tokenizer/jinja_*);
// a construct the engine does not support (an unknown tag, filter, test or method) fails
// there, at load time, with UNSUPPORTED naming it and its line:column, so a template never
// renders silently wrong. Apply() prepares the inputs as transformers does (keys whose value
// is null are dropped from each message; reasoning fields are aliased), exposes `messages`,
// `tools`, `documents`, `add_generation_prompt`, `bos_token`, `eos_token` and any extra
// variables, and renders under resource limits.
//
// Ownership: a ChatTemplate owns its source and shares its immutable syntax tree between
// copies. Thread-safety: Apply() is const and may be called from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pier::tokenizer {

namespace jinja {
struct TemplateAst;
}

struct ChatTemplateOptions {
  // Appends the assistant header so the model answers (transformers' default is false;
  // serving wants true).
  bool add_generation_prompt = true;
  // `bos_token` / `eos_token` variables; left undefined when empty.
  std::string bos_token;
  std::string eos_token;
  // Defines `date_string` (Llama 3.x prints it as "Today Date"), e.g. "26 Jul 2024".
  std::optional<std::string> date_string;
  // Clock for strftime_now(), in seconds since the Unix epoch, formatted as UTC (pin it for
  // reproducible prompts and tests). Unset: the current local time, as transformers does.
  std::optional<int64_t> now_unix_seconds;
  // Borrowed for the duration of Apply(); null means "not given".
  const nlohmann::ordered_json* tools = nullptr;          // list of JSON tool schemas
  const nlohmann::ordered_json* extra_context = nullptr;  // object: more variables
                                                          // (enable_thinking, ...)
  // Render limits against hostile templates (RESOURCE_EXHAUSTED when exceeded).
  size_t max_output_bytes = size_t{8} << 20;
  int64_t max_loop_iterations = 1'000'000;
};

class ChatTemplate {
 public:
  // INVALID_ARGUMENT for syntax errors, UNSUPPORTED for constructs Pier does not implement;
  // both name line:column.
  static Result<ChatTemplate> Parse(std::string source);

  // `messages`: a non-empty JSON array of objects ({"role": ..., "content": ...}); content
  // may be a string or a list of parts, passed to the template as-is. Objects keep their key
  // order (as Python dicts do), which matters for `tojson` and `.items()`.
  // Errors: INVALID_ARGUMENT for bad input, for a template error (message names line:column)
  // and for raise_exception(msg) (message is exactly msg); RESOURCE_EXHAUSTED past the limits.
  Result<std::string> Apply(const nlohmann::ordered_json& messages,
                            const ChatTemplateOptions& options = {}) const;
  // Same, for callers holding nlohmann::json (its objects are key-sorted, so key order is lost).
  Result<std::string> Apply(const nlohmann::json& messages,
                            const ChatTemplateOptions& options = {}) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, std::shared_ptr<const jinja::TemplateAst> ast);

  std::string source_;
  std::shared_ptr<const jinja::TemplateAst> ast_;
};

// True when `prompt` begins with a non-empty `bos_token`: the template already wrote the BOS,
// so the tokenizer must not add a second one.
bool PromptStartsWithBos(std::string_view prompt, std::string_view bos_token);

}  // namespace pier::tokenizer
