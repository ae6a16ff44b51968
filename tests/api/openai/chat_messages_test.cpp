// The chat route's messages and tools as the template receives them, checked against
// transformers: every fixture case of the "tool_call" conversation (rendered by
// apply_chat_template, tests/fixtures/chat_template/expected.json) is sent in OpenAI's wire form
// (arguments as JSON text, content null), parsed as a request, turned into template messages and
// tools by Pier, rendered by Pier's Jinja engine, and must give the same text byte for byte.
#include "api/openai/chat_messages.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "api/openai/openai_request.h"
#include "api/openai/tool_calls.h"
#include "tokenizer/chat_template.h"

namespace pier::api {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatMessagesTest, ToolConversationsRenderAsTransformersDoes) {
  const std::string root = std::string(PIER_SOURCE_DIR) + "/tests/fixtures/";
  const ordered_json fixture = ordered_json::parse(ReadFile(root + "chat_template/expected.json"));
  // The conversation in OpenAI's wire form.
  ordered_json wire = fixture["conversations"]["tool_call"];
  for (ordered_json& m : wire) {
    if (!m.contains("tool_calls")) continue;
    for (ordered_json& call : m["tool_calls"]) {
      call["function"]["arguments"] = call["function"]["arguments"].dump();
    }
  }
  int compared = 0;
  for (const ordered_json& c : fixture["cases"]) {
    if (c["conversation"] != "tool_call" || !c.contains("expected") ||
        fixture["inline_templates"].contains(c["template"].get<std::string>())) {
      continue;
    }
    bool plain = true;  // only bos/eos and tools, which the route passes
    for (const auto& [key, value] : c["kwargs"].items()) {
      plain = plain && (key == "bos_token" || key == "eos_token" || key == "tools");
    }
    if (!plain || !c["kwargs"].contains("tools")) continue;
    const std::string name = c["template"].get<std::string>();
    SCOPED_TRACE(name);
    const std::string source = ReadFile(root + "vendor/llama.cpp/templates/" + name);
    ASSERT_FALSE(source.empty()) << "missing vendor template " << name
                                 << " (run scripts/bootstrap)";
    Result<tokenizer::ChatTemplate> t = tokenizer::ChatTemplate::Parse(source);
    ASSERT_TRUE(t.ok()) << t.status().ToString();

    const ordered_json body = {{"messages", wire}, {"tools", c["kwargs"]["tools"]}};
    OpenAiParseResult parsed = ParseChatCompletionRequest(body.dump());
    ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(parsed))
        << std::get<OpenAiError>(parsed).message;
    const OpenAiRequest& r = std::get<OpenAiRequest>(parsed);
    const ordered_json tools = ordered_json::parse(ToolsJsonForTemplate(r.tools));
    tokenizer::ChatTemplateOptions options;
    options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    options.now_unix_seconds = fixture["pinned_unix_seconds"].get<int64_t>();
    options.bos_token = c["kwargs"].value("bos_token", "");
    options.eos_token = c["kwargs"].value("eos_token", "");
    options.tools = &tools;
    Result<std::string> text = t->Apply(TemplateMessages(r.messages), options);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, c["expected"].get<std::string>());
    ++compared;
  }
  std::printf("tool conversations compared with transformers: %d templates\n", compared);
  EXPECT_GE(compared, 20);
}

}  // namespace
}  // namespace pier::api
