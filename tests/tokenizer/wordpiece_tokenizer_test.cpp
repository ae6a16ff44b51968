// Tests for the WordPiece (BERT) tokenizer (wordpiece_tokenizer.h) on llama.cpp's public test
// vectors for the bge vocabulary (tests/fixtures/vendor/llama.cpp/ggml-vocab-bert-bge.gguf,
// placed by scripts/bootstrap; ids made by llama.cpp from Hugging Face tokenizers), plus the
// metadata handling. The Hugging Face fixture of 259 texts over all-MiniLM-L6-v2's own GGUF is
// in wordpiece_model_test.cpp.
#include "tokenizer/wordpiece_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"

namespace pier::tokenizer {
namespace {

const std::string kBge =
    std::string(PIER_SOURCE_DIR) + "/tests/fixtures/vendor/llama.cpp/ggml-vocab-bert-bge.gguf";

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::unique_ptr<WordPieceTokenizer> LoadBge() {
  if (!std::filesystem::exists(kBge)) {
    ADD_FAILURE() << kBge << " is missing: run scripts/bootstrap";
    return nullptr;
  }
  auto file = model::GgufFile::Open(kBge);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return nullptr;
  auto spec = model::ReadVocabularySpec(**file);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  auto tokenizer = WordPieceTokenizer::Create(*spec);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

TEST(WordPieceTokenizer, MatchesLlamaCppVectorsForBge) {
  auto tokenizer = LoadBge();
  ASSERT_NE(tokenizer, nullptr);
  const std::string inputs = ReadWholeFile(kBge + ".inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inputs.size();) {
    const size_t next = inputs.find(separator, pos);
    texts.push_back(inputs.substr(pos, next == std::string::npos ? next : next - pos));
    if (next == std::string::npos) break;
    pos = next + separator.size();
  }
  std::ifstream out(kBge + ".out");
  std::string line;
  size_t checked = 0;
  for (size_t i = 0; std::getline(out, line) && i < texts.size(); ++i) {
    std::vector<TokenId> want;
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) want.push_back(id);
    auto got = tokenizer->Encode(texts[i], {.add_special = false, .parse_special = false});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, want) << "text: '" << texts[i] << "'";
    ++checked;
  }
  EXPECT_GE(checked, 30u);
}

TEST(WordPieceTokenizer, ReadsSpecialIdsAndCasing) {
  auto tokenizer = LoadBge();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->cls_id(), 101);
  EXPECT_EQ(tokenizer->sep_id(), 102);
  EXPECT_EQ(tokenizer->unknown_id(), 100);
  EXPECT_TRUE(tokenizer->uncased());
  auto ids = tokenizer->Encode("Hello world");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{101, 7592, 2088, 102}));
  EXPECT_EQ(tokenizer->Decode(*ids, /*skip_special=*/true), "hello world");
}

TEST(WordPieceTokenizer, PairsCarryTokenTypes) {
  auto tokenizer = LoadBge();
  ASSERT_NE(tokenizer, nullptr);
  auto pair = tokenizer->EncodePair("hello", "world");
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(pair->ids, (std::vector<TokenId>{101, 7592, 102, 2088, 102}));
  EXPECT_EQ(pair->type_ids, (std::vector<int32_t>{0, 0, 0, 1, 1}));
}

TEST(WordPieceTokenizer, RefusesInvalidUtf8) {
  auto tokenizer = LoadBge();
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->Encode("abc\xff");
  EXPECT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
}

TEST(WordPieceTokenizer, NeedsClsSepAndUnk) {
  VocabularySpec spec;
  spec.source = "test";
  spec.model = "bert";
  spec.tokens = {"[PAD]", "\xE2\x96\x81hello", "[CLS]", "[SEP]"};
  auto missing_unk = WordPieceTokenizer::Create(spec);
  ASSERT_FALSE(missing_unk.ok());
  EXPECT_NE(missing_unk.status().message().find("[UNK]"), std::string::npos);
  spec.tokens.push_back("[UNK]");
  spec.tokens.push_back("\xE2\x96\x81World");  // upper-case letters in 1 of 6 tokens: cased
  auto cased = WordPieceTokenizer::Create(spec);
  ASSERT_TRUE(cased.ok()) << cased.status().ToString();
  EXPECT_FALSE((*cased)->uncased());
  auto ids = (*cased)->Encode("hello World world", {.add_special = false});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{1, 5, 4}));
  spec.cls_id = 99;
  EXPECT_FALSE(WordPieceTokenizer::Create(spec).ok());
}

}  // namespace
}  // namespace pier::tokenizer
