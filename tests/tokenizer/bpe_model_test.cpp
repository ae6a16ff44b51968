// The default model's tokenizer (SmolLM2, byte-level BPE, pre-tokenizer "smollm")
// against Hugging Face: tests/fixtures/tokenizer/smollm2_encodings.json holds the
// ids `tokenizers` gives for ~230 varied strings, with special tokens parsed
// (Hugging Face's default) and with `encode_special_tokens = True` (their text
// tokenized as plain text). Made by tools/gen_tokenizer_fixture.py.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace pier::tokenizer {
namespace {

class SmolLm2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto file = model::GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto tokenizer = model::LoadTokenizer(**file);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    tokenizer_ = std::move(tokenizer).value().release();
    std::ifstream in(std::string(PIER_SOURCE_DIR) +
                     "/tests/fixtures/tokenizer/smollm2_encodings.json");
    ASSERT_TRUE(in) << "missing fixture; run tools/gen_tokenizer_fixture.py";
    fixture_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete fixture_;
  }
  void SetUp() override {
    ASSERT_NE(tokenizer_, nullptr);
    ASSERT_NE(fixture_, nullptr);
  }

  static Tokenizer* tokenizer_;
  static nlohmann::json* fixture_;
};

Tokenizer* SmolLm2TokenizerTest::tokenizer_ = nullptr;
nlohmann::json* SmolLm2TokenizerTest::fixture_ = nullptr;

TEST_F(SmolLm2TokenizerTest, MatchesHuggingFaceWithSpecialTokensParsed) {
  const auto& cases = fixture_->at("cases");
  ASSERT_GE(cases.size(), 200u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    auto ids = tokenizer_->Encode(text);  // add_special and parse_special, like HF defaults
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c.at("ids").get<std::vector<TokenId>>()) << "\"" << text << "\"";
  }
}

TEST_F(SmolLm2TokenizerTest, MatchesHuggingFaceWithSpecialTokensAsText) {
  EncodeOptions options;
  options.parse_special = false;
  int differs_from_parsed = 0;
  for (const auto& c : fixture_->at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    auto ids = tokenizer_->Encode(text, options);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    const auto expected = c.at("ids_no_special").get<std::vector<TokenId>>();
    EXPECT_EQ(*ids, expected) << "\"" << text << "\"";
    if (expected != c.at("ids").get<std::vector<TokenId>>()) ++differs_from_parsed;
  }
  EXPECT_GE(differs_from_parsed, 10);  // the fixture does exercise special tokens
}

TEST_F(SmolLm2TokenizerTest, AddsNoBosLikeHuggingFace) {
  EXPECT_FALSE(fixture_->at("add_bos").get<bool>());
  EXPECT_FALSE(tokenizer_->add_bos());
  EXPECT_FALSE(tokenizer_->add_eos());
  auto ids = tokenizer_->Encode("Hello");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 1u);
  EXPECT_NE((*ids)[0], tokenizer_->bos_id());
}

TEST_F(SmolLm2TokenizerTest, EndOfGenerationIsImEndAndEndOfText) {
  EXPECT_EQ(tokenizer_->eos_id(), 2);
  EXPECT_EQ(tokenizer_->Piece(2), "<|im_end|>");
  EXPECT_TRUE(tokenizer_->IsEndOfGeneration(2));
  EXPECT_TRUE(tokenizer_->IsEndOfGeneration(0));   // <|endoftext|>
  EXPECT_FALSE(tokenizer_->IsEndOfGeneration(1));  // <|im_start|>
}

TEST_F(SmolLm2TokenizerTest, DecodeAndStreamingGiveTheTextBack) {
  for (const auto& c : fixture_->at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const auto ids = c.at("ids").get<std::vector<TokenId>>();
    EXPECT_EQ(tokenizer_->Decode(ids), text);
    IncrementalDecoder decoder(*tokenizer_);
    std::string streamed;
    for (TokenId id : ids) streamed += decoder.Push(id);
    streamed += decoder.Flush();
    EXPECT_EQ(streamed, text);
  }
}

// Not a timed assertion (timings vary under sanitizers and load): prints the cost
// of encoding ~10 KB of English for the record.
TEST_F(SmolLm2TokenizerTest, EncodesTenKilobytesOfEnglish) {
  std::string text;
  const std::string sentence =
      "The quick brown fox jumps over the lazy dog, and then it runs 12 miles home. ";
  while (text.size() < 10 * 1024) text += sentence;
  const auto start = std::chrono::steady_clock::now();
  constexpr int kRounds = 20;
  size_t tokens = 0;
  for (int i = 0; i < kRounds; ++i) {
    auto ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok());
    tokens = ids->size();
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      kRounds;
  EXPECT_GT(tokens, text.size() / 8);
  std::printf("encoded %zu bytes into %zu tokens in %.3f ms\n", text.size(), tokens, ms);
}

}  // namespace
}  // namespace pier::tokenizer
