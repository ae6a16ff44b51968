// LoadChatTemplate on in-memory GGUF images (no model file needed).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/gguf_file.h"
#include "model/gguf_test_writer.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace pier::tokenizer {
namespace {

using model::GgufFile;
using model::testing::GgufTestWriter;

TEST(ChatTemplateGgufTest, LoadsTheTemplateFromMetadata) {
  GgufTestWriter writer;
  writer.AddString("general.architecture", "llama");
  writer.AddString("tokenizer.chat_template",
                   "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  std::vector<uint8_t> bytes = writer.Build();
  Result<std::unique_ptr<GgufFile>> file =
      GgufFile::FromMemory(bytes.data(), bytes.size(), "mem.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Result<ChatTemplate> t = model::LoadChatTemplate(**file);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Result<std::string> out =
      t->Apply(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "<user>hi");
}

TEST(ChatTemplateGgufTest, MissingTemplateIsNotFound) {
  GgufTestWriter writer;
  writer.AddString("general.architecture", "llama");
  std::vector<uint8_t> bytes = writer.Build();
  Result<std::unique_ptr<GgufFile>> file =
      GgufFile::FromMemory(bytes.data(), bytes.size(), "mem.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(model::LoadChatTemplate(**file).status().code(), StatusCode::kNotFound);
}

TEST(ChatTemplateGgufTest, BrokenTemplateErrorNamesFileAndKey) {
  GgufTestWriter writer;
  writer.AddString("tokenizer.chat_template", "{% if x %}never closed");
  std::vector<uint8_t> bytes = writer.Build();
  Result<std::unique_ptr<GgufFile>> file =
      GgufFile::FromMemory(bytes.data(), bytes.size(), "mem.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Status status = model::LoadChatTemplate(**file).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("mem.gguf: tokenizer.chat_template"), std::string::npos)
      << status.ToString();
}

}  // namespace
}  // namespace pier::tokenizer
