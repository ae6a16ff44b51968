// The helpers /v1/embeddings and KServe v2 share: tokenization with truncation, client token
// ids, Triton's length-prefixed BYTES (against hostile bytes), the texts tensor checks, the
// priority mapping and base64 floats. The tokenizer is llama.cpp's bge WordPiece vocabulary
// (tests/fixtures/vendor, placed by scripts/bootstrap).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api/kserve/kserve_api.h"
#include "api/openai/embeddings_api.h"
#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"

namespace pier::api {
namespace {

class EmbeddingInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = model::GgufFile::Open(std::string(PIER_SOURCE_DIR) +
                                      "/tests/fixtures/vendor/llama.cpp/ggml-vocab-bert-bge.gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString() << " (run scripts/bootstrap)";
    auto tokenizer = model::LoadTokenizer(**file);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    tokenizer_ = std::move(tokenizer).value();
  }
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

TEST_F(EmbeddingInputsTest, TextsGetClsAndSepAndAreCutToTheLimit) {
  const std::vector<std::string> texts = {"hello world", "one two three four five six"};
  auto ids = TokenizeTexts(*tokenizer_, texts, 5, /*truncate=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ((*ids)[0], (std::vector<int32_t>{101, 7592, 2088, 102}));
  ASSERT_EQ((*ids)[1].size(), 5u);
  EXPECT_EQ((*ids)[1].front(), 101);
  EXPECT_EQ((*ids)[1].back(), 102) << "[SEP] kept when cut";
  auto refused = TokenizeTexts(*tokenizer_, texts, 5, /*truncate=*/false);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("input[1]"), std::string::npos);
  const std::vector<std::string> empty = {"ok", ""};
  EXPECT_EQ(TokenizeTexts(*tokenizer_, empty, 64, true).status().code(),
            StatusCode::kInvalidArgument);
  const std::vector<std::string> bad_utf8 = {"bad \xff"};
  EXPECT_EQ(TokenizeTexts(*tokenizer_, bad_utf8, 64, true).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(EmbeddingInputsTest, ClientIdsAreCheckedAndWrapped) {
  auto ids = PrepareTokenIds(*tokenizer_, {{7592, 2088}, {101, 7592, 102}}, 64, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*ids)[0], (std::vector<int32_t>{101, 7592, 2088, 102}));
  EXPECT_EQ((*ids)[1], (std::vector<int32_t>{101, 7592, 102}));
  EXPECT_EQ(PrepareTokenIds(*tokenizer_, {{1, 40000}}, 64, true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareTokenIds(*tokenizer_, {{-1}}, 64, true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareTokenIds(*tokenizer_, {{}}, 64, true).status().code(),
            StatusCode::kInvalidArgument);
}

std::string Prefixed(const std::vector<std::string>& texts) {
  std::string out;
  for (const std::string& t : texts) {
    const auto n = static_cast<uint32_t>(t.size());
    for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
    out += t;
  }
  return out;
}

TEST(KServeBinary, ParsesLengthPrefixedStringsAndRefusesBrokenOnes) {
  std::vector<std::string> texts;
  ASSERT_TRUE(ParseBinaryStrings(Prefixed({"abc", "", "héllo"}), &texts));
  EXPECT_EQ(texts, (std::vector<std::string>{"abc", "", "héllo"}));
  for (const std::string& broken : {std::string("\x03\x00\x00", 3),
                                    std::string("\x05\x00\x00\x00"
                                                "abc",
                                                7),
                                    std::string("\xff\xff\xff\xff"
                                                "x",
                                                5),
                                    Prefixed({"ok"}) + "\x01"}) {
    texts.clear();
    EXPECT_FALSE(ParseBinaryStrings(broken, &texts)) << broken.size() << " bytes";
  }
  // Random bytes never read out of bounds (ASan would say) and every success is consistent.
  std::mt19937 rng(5);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 8 == 0 ? rng() : rng() % 4);
    texts.clear();
    if (ParseBinaryStrings(bytes, &texts)) {
      size_t total = 0;
      for (const std::string& t : texts) total += 4 + t.size();
      EXPECT_EQ(total, bytes.size());
    }
  }
}

TEST(KServeTensor, TextsTensorMustBeBytesOfMatchingShape) {
  EXPECT_TRUE(CheckTextTensor("m", "text", "BYTES", {2}, 2).ok());
  EXPECT_TRUE(CheckTextTensor("m", "text", "BYTES", {2, 1}, 2).ok());
  const Status fp32 = CheckTextTensor("m", "text", "FP32", {2}, 2);
  EXPECT_EQ(fp32.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fp32.message().find("BYTES"), std::string::npos);
  EXPECT_FALSE(CheckTextTensor("m", "text", "BYTES", {3}, 2).ok());
  EXPECT_FALSE(CheckTextTensor("m", "text", "BYTES", {2, 2}, 4).ok());
  EXPECT_FALSE(CheckTextTensor("m", "text", "BYTES", {}, 0).ok());
  EXPECT_FALSE(CheckTextTensor("m", "text", "BYTES", {0}, 0).ok());
  EXPECT_FALSE(CheckTextTensor("m", "text", "BYTES", {-1}, 1).ok());
}

TEST(KServePriority, TritonLevelsMapToClassesUnderTheCeiling) {
  EXPECT_EQ(BatcherPriority(1, engine::Priority::kCritical), 3);
  EXPECT_EQ(BatcherPriority(0, engine::Priority::kCritical), 1);  // default: normal
  EXPECT_EQ(BatcherPriority(2, engine::Priority::kCritical), 2);
  EXPECT_EQ(BatcherPriority(9, engine::Priority::kCritical), 0);
  EXPECT_EQ(BatcherPriority(1, engine::Priority::kNormal), 1) << "capped at the key's ceiling";
}

TEST(Base64Floats, EncodesLittleEndianFloat32) {
  const float values[] = {1.0f, -2.5f};
  // 1.0f = 00 00 80 3f, -2.5f = 00 00 20 c0.
  EXPECT_EQ(Base64Floats(values, 2), "AACAPwAAIMA=");
  EXPECT_EQ(Base64Floats(values, 0), "");
}

}  // namespace
}  // namespace pier::api
