// RenderChatPrompt: the one way Pier turns chat messages into prompt tokens, for the OpenAI
// chat route, `pier run --chat` and `pier prompt` alike.
//
// The template is rendered with `bos_token`/`eos_token` set to the tokenizer's BOS and EOS
// pieces (what llama.cpp and transformers pass), then the text is tokenized with special
// tokens parsed (`<|im_start|>` is one token, not ten), adding the tokenizer's BOS only when
// the template did not write it itself.
//
// Thread-safety: a free function over const objects.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::tokenizer {

struct ChatPrompt {
  std::string text;             // the rendered template
  std::vector<TokenId> tokens;  // its tokens
};

// `messages`: [{"role", "content", ...}, ...] as the template expects them; `tools` (may be
// null): the template's `tools` variable, as transformers passes it. The template's errors,
// prefixed "the chat template failed: ", and the tokenizer's.
[[nodiscard]] Result<ChatPrompt> RenderChatPrompt(const ChatTemplate& chat_template,
                                                  const Tokenizer& tokenizer,
                                                  const nlohmann::ordered_json& messages,
                                                  bool add_generation_prompt = true,
                                                  const nlohmann::ordered_json* tools = nullptr);

// Whether the template shows its model the tools it is given: a probe function rendered with
// one user message must appear in the prompt (a template that ignores `tools` would let a
// model answer without ever seeing them).
bool ChatTemplateShowsTools(const ChatTemplate& chat_template, const Tokenizer& tokenizer);

}  // namespace pier::tokenizer
