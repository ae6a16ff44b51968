// The default model's own chat template, read from its GGUF metadata.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::tokenizer {
namespace {

TEST(ChatTemplateModelTest, DefaultModelTemplateMatchesTheFixture) {
  Result<std::unique_ptr<model::GgufFile>> file = model::GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Result<ChatTemplate> t = model::LoadChatTemplate(**file);
  ASSERT_TRUE(t.ok()) << t.status().ToString();

  std::ifstream in(std::string(PIER_SOURCE_DIR) + "/tests/fixtures/chat_template/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::ordered_json fixture = nlohmann::ordered_json::parse(ss.str());
  EXPECT_EQ(t->source(), fixture["inline_templates"]["SmolLM2-135M-Instruct"].get<std::string>());

  int compared = 0;
  for (const auto& c : fixture["cases"]) {
    if (c["template"] != "SmolLM2-135M-Instruct" || !c.contains("expected")) continue;
    ChatTemplateOptions options;
    options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    Result<std::string> out =
        t->Apply(fixture["conversations"][c["conversation"].get<std::string>()], options);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << c["conversation"];
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

TEST(ChatTemplateModelTest, RenderChatPromptParsesSpecialTokensAndAddsNoSecondBos) {
  Result<std::unique_ptr<model::GgufFile>> file = model::GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Result<ChatTemplate> t = model::LoadChatTemplate(**file);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto tokenizer = model::LoadTokenizer(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
  Result<ChatPrompt> prompt = RenderChatPrompt(*t, **tokenizer, messages);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  ChatTemplateOptions options;
  options.bos_token = std::string((*tokenizer)->Piece((*tokenizer)->bos_id()));
  options.eos_token = std::string((*tokenizer)->Piece((*tokenizer)->eos_id()));
  EXPECT_EQ(prompt->text, *t->Apply(messages, options));
  // "<|im_start|>" is one special token (parsed), and it is the first: the template wrote
  // the start of the prompt, the tokenizer added nothing before it.
  Result<std::vector<TokenId>> im_start =
      (*tokenizer)->Encode("<|im_start|>", {.add_special = false, .parse_special = true});
  ASSERT_TRUE(im_start.ok());
  ASSERT_EQ(im_start->size(), 1u);
  ASSERT_FALSE(prompt->tokens.empty());
  EXPECT_EQ(prompt->tokens.front(), im_start->front());
  // (SmolLM2's BOS is <|im_start|> itself: a second BOS would make the first two tokens equal.)
  ASSERT_GE(prompt->tokens.size(), 2u);
  EXPECT_NE(prompt->tokens[1], prompt->tokens[0]);
  // Without the generation prompt the text ends before the assistant's header.
  Result<ChatPrompt> plain = RenderChatPrompt(*t, **tokenizer, messages, false);
  ASSERT_TRUE(plain.ok());
  EXPECT_LT(plain->tokens.size(), prompt->tokens.size());
}

}  // namespace
}  // namespace pier::tokenizer
