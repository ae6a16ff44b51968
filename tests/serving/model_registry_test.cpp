#include "serving/model_registry.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "serving/model_loader.h"

namespace pier::serving {
namespace {

class NullClient final : public engine::EngineClient {
 public:
  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request) override {
    return UnavailableError("null client");
  }
  void Abort(const std::string&) override {}
  engine::EngineStats Stats() const override { return {}; }
};

class NoTokenizer final : public tokenizer::Tokenizer {
 public:
  Result<std::vector<tokenizer::TokenId>> Encode(std::string_view,
                                                 const tokenizer::EncodeOptions&) const override {
    return std::vector<tokenizer::TokenId>{};
  }
  std::string TokenBytes(tokenizer::TokenId) const override { return ""; }
  std::string_view Piece(tokenizer::TokenId) const override { return ""; }
  tokenizer::TokenType Type(tokenizer::TokenId) const override {
    return tokenizer::TokenType::kNormal;
  }
  int32_t vocab_size() const override { return 1; }
  tokenizer::TokenId bos_id() const override { return -1; }
  tokenizer::TokenId eos_id() const override { return -1; }
  bool add_bos() const override { return false; }
  bool add_eos() const override { return false; }
  const std::vector<tokenizer::TokenId>& end_of_generation_ids() const override { return eog_; }

 private:
  std::vector<tokenizer::TokenId> eog_;
};

TEST(ModelRegistryTest, ResolvesByIdAndTheFirstModelIsTheDefault) {
  NullClient client_a, client_b;
  NoTokenizer tokenizer;
  ModelRegistry registry;
  EXPECT_EQ(registry.default_model(), nullptr);
  EXPECT_FALSE(registry.Resolve("").ok());
  ASSERT_TRUE(registry.Add({.id = "a", .client = &client_a, .tokenizer = &tokenizer}).ok());
  ASSERT_TRUE(registry.Add({.id = "b", .client = &client_b, .tokenizer = &tokenizer}).ok());

  ASSERT_TRUE(registry.Resolve("b").ok());
  EXPECT_EQ((*registry.Resolve("b"))->client, &client_b);
  EXPECT_EQ((*registry.Resolve(""))->id, "a");
  EXPECT_EQ(registry.default_model()->id, "a");
  Result<const ServedModel*> missing = registry.Resolve("gpt-4");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "model gpt-4 does not exist");
  EXPECT_EQ(registry.Find("gpt-4"), nullptr);
  ASSERT_EQ(registry.models().size(), 2u);
  EXPECT_EQ(registry.models()[1].id, "b");
}

TEST(ModelRegistryTest, AliasesReachTheirModelAndMayNotCollide) {
  NullClient client_a, client_b;
  NoTokenizer tokenizer;
  ModelRegistry registry;
  ASSERT_TRUE(registry
                  .Add({.id = "a",
                        .aliases = {"gpt-4o-mini", "chat"},
                        .client = &client_a,
                        .tokenizer = &tokenizer})
                  .ok());
  const ServedModel* first = registry.Find("a");
  ASSERT_TRUE(registry.Add({.id = "b", .client = &client_b, .tokenizer = &tokenizer}).ok());
  EXPECT_EQ(registry.Find("a"), first) << "entries must not move when models are added";
  EXPECT_EQ((*registry.Resolve("gpt-4o-mini"))->id, "a");
  EXPECT_EQ((*registry.Resolve("chat"))->client, &client_a);
  EXPECT_EQ((*registry.Resolve("b"))->client, &client_b);
  // An alias may not take another model's id or alias, nor repeat within one model.
  EXPECT_FALSE(
      registry.Add({.id = "c", .aliases = {"b"}, .client = &client_b, .tokenizer = &tokenizer})
          .ok());
  EXPECT_FALSE(registry.Add({.id = "chat", .client = &client_b, .tokenizer = &tokenizer}).ok());
  EXPECT_FALSE(
      registry.Add({.id = "d", .aliases = {"x", "x"}, .client = &client_b, .tokenizer = &tokenizer})
          .ok());
  EXPECT_EQ(registry.models().size(), 2u);
}

TEST(ModelRegistryTest, RefusesDuplicatesAndIncompleteEntries) {
  NullClient client;
  NoTokenizer tokenizer;
  ModelRegistry registry;
  ASSERT_TRUE(registry.Add({.id = "a", .client = &client, .tokenizer = &tokenizer}).ok());
  Status duplicate = registry.Add({.id = "a", .client = &client, .tokenizer = &tokenizer});
  EXPECT_FALSE(duplicate.ok());
  EXPECT_NE(duplicate.message().find("already served"), std::string::npos);
  EXPECT_FALSE(registry.Add({.id = "", .client = &client, .tokenizer = &tokenizer}).ok());
  EXPECT_FALSE(registry.Add({.id = "c", .client = nullptr, .tokenizer = &tokenizer}).ok());
  EXPECT_FALSE(registry.Add({.id = "d", .client = &client, .tokenizer = nullptr}).ok());
  EXPECT_FALSE(registry.AddHost("e", {}, 0, nullptr).ok());
  EXPECT_EQ(registry.models().size(), 1u);
}

TEST(ModelIdFromPathTest, DropsFolderAndGgufSuffix) {
  EXPECT_EQ(ModelIdFromPath("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(ModelIdFromPath("model.bin"), "model.bin");
  EXPECT_EQ(ModelIdFromPath("dir/.gguf"), ".gguf");
}

}  // namespace
}  // namespace pier::serving
