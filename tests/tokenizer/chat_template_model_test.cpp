// The default model's own chat template, read from its GGUF metadata.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/gguf_file.h"
#include "tokenizer/chat_template.h"

namespace pier::tokenizer {
namespace {

TEST(ChatTemplateModelTest, DefaultModelTemplateMatchesTheFixture) {
  Result<std::unique_ptr<model::GgufFile>> file = model::GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Result<ChatTemplate> t = LoadChatTemplate(**file);
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

}  // namespace
}  // namespace pier::tokenizer
