#include "tokenizer/chat_prompt.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace pier::tokenizer {

Result<ChatPrompt> RenderChatPrompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                    const nlohmann::ordered_json& messages,
                                    bool add_generation_prompt,
                                    const nlohmann::ordered_json* tools) {
  ChatTemplateOptions render;
  render.add_generation_prompt = add_generation_prompt;
  render.tools = tools;
  if (tokenizer.bos_id() >= 0) render.bos_token = std::string(tokenizer.Piece(tokenizer.bos_id()));
  if (tokenizer.eos_id() >= 0) render.eos_token = std::string(tokenizer.Piece(tokenizer.eos_id()));
  ChatPrompt prompt;
  Result<std::string> text = chat_template.Apply(messages, render);
  if (!text.ok()) {
    return Status(text.status().code(), "the chat template failed: " + text.status().message());
  }
  prompt.text = std::move(text).value();
  EncodeOptions encode;
  encode.parse_special = true;
  // The template may write the BOS itself: do not add a second one.
  encode.add_special = !PromptStartsWithBos(prompt.text, render.bos_token);
  PIER_ASSIGN_OR_RETURN(prompt.tokens, tokenizer.Encode(prompt.text, encode));
  return prompt;
}

bool ChatTemplateShowsTools(const ChatTemplate& chat_template, const Tokenizer& tokenizer) {
  constexpr char kProbe[] = "pier_probe_function_7f3a";
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      std::string(R"([{"type":"function","function":{"name":")") + kProbe +
      R"(","description":"probe","parameters":{"type":"object","properties":{}}}}])");
  const nlohmann::ordered_json messages =
      nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  ChatTemplateOptions render;
  render.tools = &tools;
  if (tokenizer.bos_id() >= 0) render.bos_token = std::string(tokenizer.Piece(tokenizer.bos_id()));
  if (tokenizer.eos_id() >= 0) render.eos_token = std::string(tokenizer.Piece(tokenizer.eos_id()));
  Result<std::string> text = chat_template.Apply(messages, render);
  return text.ok() && text->find(kProbe) != std::string::npos;
}

}  // namespace pier::tokenizer
