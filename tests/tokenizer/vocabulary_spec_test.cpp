// Tokenizers built from a plain VocabularySpec, with no GGUF file: what the spec says is
// what the tokenizer does, and a bad spec is refused naming its source and the field.
#include "tokenizer/vocabulary_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pier::tokenizer {
namespace {

// Byte-level BPE over "a", "b", "ab", "abb" and two control tokens.
VocabularySpec ToyBpe() {
  VocabularySpec spec;
  spec.source = "toy-bpe";
  spec.model = "gpt2";
  spec.tokens = {"a", "b", "ab", "abb", "<s>", "<|im_end|>"};
  spec.types = {TokenType::kNormal, TokenType::kNormal,  TokenType::kNormal,
                TokenType::kNormal, TokenType::kControl, TokenType::kControl};
  spec.merges = {{"a", "b"}, {"ab", "b"}};
  spec.bos_id = 4;
  spec.add_bos = true;
  return spec;
}

TEST(VocabularySpecTest, BpeFollowsTheSpecsMergesAndSpecialIds) {
  auto tokenizer = Tokenizer::Create(ToyBpe());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  auto ids = (*tokenizer)->Encode("abbab");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, (std::vector<TokenId>{4, 3, 2}));
  EXPECT_EQ((*tokenizer)->Decode(*ids, /*skip_special=*/true), "abbab");
  // <|im_end|> is a known end of turn: a control token with that text ends generation.
  EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(5));
  EXPECT_FALSE((*tokenizer)->IsEndOfGeneration(3));
  // Without the second merge "abb" is never formed.
  VocabularySpec fewer = ToyBpe();
  fewer.merges.pop_back();
  auto plain = Tokenizer::Create(fewer);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*(*plain)->Encode("abb"), (std::vector<TokenId>{4, 2, 1}));
}

TEST(VocabularySpecTest, SentencePieceTakesItsScoresAndDefaults) {
  VocabularySpec spec;
  spec.source = "toy-spm";
  spec.model = "llama";
  spec.tokens = {"<unk>",
                 "<s>",
                 "</s>",
                 "\xE2\x96\x81"
                 "a",
                 "b",
                 "\xE2\x96\x81"
                 "ab"};
  spec.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
                TokenType::kNormal,  TokenType::kNormal,  TokenType::kNormal};
  spec.scores = {0, 0, 0, -1, -2, -0.5f};
  auto tokenizer = Tokenizer::Create(spec);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  // No ids in the spec: SentencePiece's usual <unk> 0, <s> 1, </s> 2; BOS added by default.
  EXPECT_EQ((*tokenizer)->bos_id(), 1);
  EXPECT_EQ(*(*tokenizer)->Encode("ab"), (std::vector<TokenId>{1, 5}));
}

TEST(VocabularySpecTest, BadSpecsAreRefusedNamingTheSourceAndTheField) {
  VocabularySpec none = ToyBpe();
  none.model.clear();
  EXPECT_EQ(Tokenizer::Create(none).status().code(), StatusCode::kNotFound);

  VocabularySpec unknown = ToyBpe();
  unknown.model = "wordpiece";
  Status status = Tokenizer::Create(unknown).status();
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("'wordpiece'"), std::string::npos) << status.ToString();

  VocabularySpec types = ToyBpe();
  types.types.pop_back();
  status = Tokenizer::Create(types).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("toy-bpe: tokenizer.ggml.token_type has 5 entries"),
            std::string::npos)
      << status.ToString();

  VocabularySpec bos = ToyBpe();
  bos.bos_id = 6;
  status = Tokenizer::Create(bos).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("bos_token_id = 6 is outside the vocabulary of 6"),
            std::string::npos)
      << status.ToString();

  VocabularySpec empty = ToyBpe();
  empty.tokens.clear();
  empty.types.clear();
  EXPECT_EQ(Tokenizer::Create(empty).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pier::tokenizer
