// WordPiece against Hugging Face `tokenizers` on all-MiniLM-L6-v2's vocabulary: the GGUF that
// scripts/bootstrap converts (models/all-MiniLM-L6-v2.F16.gguf) must tokenize the 259 texts and
// 10 pairs of tests/fixtures/tokenizer/wordpiece_minilm.json (tools/gen_wordpiece_fixture.py,
// from the package's tokenizer.json) to exactly the ids `tokenizers` gave.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace pier::tokenizer {
namespace {

TEST(WordPieceModel, MatchesHuggingFaceTokenizers) {
  const std::string path = std::string(PIER_MODELS_DIR) + "/all-MiniLM-L6-v2.F16.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run scripts/bootstrap";
  auto file = model::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tokenizer = model::LoadTokenizer(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const auto* wordpiece = dynamic_cast<const WordPieceTokenizer*>(tokenizer->get());
  ASSERT_NE(wordpiece, nullptr);

  std::ifstream in(std::string(PIER_SOURCE_DIR) +
                   "/tests/fixtures/tokenizer/wordpiece_minilm.json");
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_GE(fixture["singles"].size(), 200u);
  for (const auto& item : fixture["singles"]) {
    const std::string text = item["text"];
    auto ids = wordpiece->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, item["ids"].get<std::vector<TokenId>>()) << "text: '" << text << "'";
  }
  for (const auto& item : fixture["pairs"]) {
    auto pair = wordpiece->EncodePair(item["a"].get<std::string>(), item["b"].get<std::string>());
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    EXPECT_EQ(pair->ids, item["ids"].get<std::vector<TokenId>>())
        << item["a"] << " / " << item["b"];
    EXPECT_EQ(pair->type_ids, item["type_ids"].get<std::vector<int32_t>>());
  }
}

}  // namespace
}  // namespace pier::tokenizer
