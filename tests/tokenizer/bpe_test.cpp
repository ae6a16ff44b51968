// Byte-level BPE on small vocabularies built in memory: merge order, special
// tokens, BOS/EOS, errors. The real vocabularies are in bpe_vocab_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../model/gguf_test_writer.h"
#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pier::tokenizer {
namespace {

using model::GgufFile;
using model::testing::GgufTestWriter;

// Vocabulary: ids 0..255 are the byte-level characters of bytes 0..255, then
// the extra tokens below. Merges are listed lowest rank first.
struct VocabSpec {
  std::vector<std::pair<std::string, TokenType>> extra = {
      {"bc", TokenType::kNormal},           // 256
      {"ab", TokenType::kNormal},           // 257
      {"abc", TokenType::kNormal},          // 258
      {"aa", TokenType::kNormal},           // 259
      {"<s>", TokenType::kControl},         // 260
      {"<|end|>", TokenType::kControl},     // 261
      {"<user>", TokenType::kUserDefined},  // 262
      {"<|im_end|>", TokenType::kControl},  // 263
      {"<|eot_id|>", TokenType::kNormal},   // 264: not control, not end-of-generation
      {"Ġa", TokenType::kNormal},           // 265
  };
  std::vector<std::string> merges = {"b c", "a b", "a bc", "a a", "Ġ a"};
  std::string model = "gpt2";
  std::string pre = "gpt2";
  bool write_types = true;
  int extra_types_entries = 0;  // makes token_type longer than tokens
  std::vector<std::pair<std::string, uint32_t>> ids = {{"tokenizer.ggml.bos_token_id", 260},
                                                       {"tokenizer.ggml.eos_token_id", 261}};
  std::vector<std::pair<std::string, bool>> flags;
};

constexpr TokenId kBc = 256, kAb = 257, kAbc = 258, kAa = 259, kBos = 260, kEnd = 261, kUser = 262,
                  kImEnd = 263, kEotNormal = 264, kSpaceA = 265;

// Holds the GGUF image alive for the file that points into it.
struct Built {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

Built BuildFile(const VocabSpec& spec) {
  GgufTestWriter writer;
  writer.AddString("general.architecture", "llama");
  writer.AddString("tokenizer.ggml.model", spec.model);
  if (!spec.pre.empty()) writer.AddString("tokenizer.ggml.pre", spec.pre);
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  const auto& alphabet = ByteLevelAlphabet();
  for (int b = 0; b < 256; ++b) {
    std::string character;
    AppendUtf8(alphabet[b], &character);
    tokens.push_back(character);
    types.push_back(static_cast<int32_t>(TokenType::kByte));
  }
  for (const auto& [text, type] : spec.extra) {
    tokens.push_back(text);
    types.push_back(static_cast<int32_t>(type));
  }
  for (int i = 0; i < spec.extra_types_entries; ++i) types.push_back(1);
  writer.AddStringArray("tokenizer.ggml.tokens", tokens);
  if (spec.write_types)
    writer.AddArray<int32_t>("tokenizer.ggml.token_type", GgufTestWriter::kI32, types);
  writer.AddStringArray("tokenizer.ggml.merges", spec.merges);
  for (const auto& [key, id] : spec.ids) writer.AddU32(key, id);
  for (const auto& [key, value] : spec.flags) writer.AddBool(key, value);
  Built built;
  built.bytes = writer.Build();
  auto file = GgufFile::FromMemory(built.bytes.data(), built.bytes.size(), "test.gguf");
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (file.ok()) built.file = std::move(file).value();
  return built;
}

std::unique_ptr<Tokenizer> MakeOrDie(const VocabSpec& spec = {}) {
  Built built = BuildFile(spec);
  if (built.file == nullptr) return nullptr;
  auto tokenizer = model::LoadTokenizer(*built.file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

Status MakeError(const VocabSpec& spec) {
  Built built = BuildFile(spec);
  if (built.file == nullptr) return InternalError("no file");
  auto tokenizer = model::LoadTokenizer(*built.file);
  return tokenizer.status();
}

std::vector<TokenId> EncodeOrDie(const Tokenizer& tokenizer, std::string_view text,
                                 EncodeOptions options = {}) {
  auto ids = tokenizer.Encode(text, options);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

TokenId Byte(char c) { return static_cast<uint8_t>(c); }

TEST(BpeTokenizerTest, AppliesMergesInRankOrder) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  // "b c" (rank 0) before "a b" (rank 1), then "a bc" (rank 2).
  EXPECT_EQ(EncodeOrDie(*tokenizer, "abc"), (std::vector<TokenId>{kAbc}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, "ab"), (std::vector<TokenId>{kAb}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, "abd"), (std::vector<TokenId>{kAb, Byte('d')}));
}

TEST(BpeTokenizerTest, EqualRanksMergeLeftmostFirst) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeOrDie(*tokenizer, "aaa"), (std::vector<TokenId>{kAa, Byte('a')}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, "aaaa"), (std::vector<TokenId>{kAa, kAa}));
}

TEST(BpeTokenizerTest, MergesNeverCrossPreTokenizerPieces) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  // gpt2 splits "a a" into "a", " a"; the space joins the second word.
  EXPECT_EQ(EncodeOrDie(*tokenizer, "a a"), (std::vector<TokenId>{Byte('a'), kSpaceA}));
}

TEST(BpeTokenizerTest, UnmergedBytesUseByteLevelCharacters) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  // Each byte of "é" (C3 A9) is its own token, whose id here equals the byte.
  EXPECT_EQ(EncodeOrDie(*tokenizer, "é"), (std::vector<TokenId>{0xC3, 0xA9}));
  EXPECT_EQ(tokenizer->Piece(' '), "Ġ");
  EXPECT_EQ(tokenizer->TokenBytes(' '), " ");
  EXPECT_EQ(tokenizer->TokenBytes(kSpaceA), " a");
}

TEST(BpeTokenizerTest, DecodeRoundTripsAnyValidText) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  for (std::string_view text :
       {"", "abc aaa", "héllo wörld\n\t 123", "🦙 👨‍👩‍👧 中文", "a\r\n  b"}) {
    EXPECT_EQ(tokenizer->Decode(EncodeOrDie(*tokenizer, text)), text);
  }
}

TEST(BpeTokenizerTest, ParsesSpecialTokensOnlyWhenAsked) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeOrDie(*tokenizer, "ab<|end|>ab"), (std::vector<TokenId>{kAb, kEnd, kAb}));
  EncodeOptions literal;
  literal.parse_special = false;
  const auto ids = EncodeOrDie(*tokenizer, "<|end|>", literal);
  EXPECT_EQ(std::find(ids.begin(), ids.end(), kEnd), ids.end());
  EXPECT_EQ(tokenizer->Decode(ids), "<|end|>");
  // User-defined (added) tokens are words: matched either way.
  EXPECT_EQ(EncodeOrDie(*tokenizer, "<user>", literal), (std::vector<TokenId>{kUser}));
}

TEST(BpeTokenizerTest, AddsBosAndEosAsTheFileSays) {
  auto plain = MakeOrDie();
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(plain->add_bos());  // gpt2 default when the key is absent
  EXPECT_EQ(EncodeOrDie(*plain, "ab"), (std::vector<TokenId>{kAb}));

  VocabSpec spec;
  spec.flags = {{"tokenizer.ggml.add_bos_token", true}, {"tokenizer.ggml.add_eos_token", true}};
  auto both = MakeOrDie(spec);
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(EncodeOrDie(*both, "ab"), (std::vector<TokenId>{kBos, kAb, kEnd}));
  EncodeOptions no_special;
  no_special.add_special = false;
  EXPECT_EQ(EncodeOrDie(*both, "ab", no_special), (std::vector<TokenId>{kAb}));
}

TEST(BpeTokenizerTest, Llama3AddsBosUnlessTheFileSaysOtherwise) {
  VocabSpec spec;
  spec.pre = "llama-bpe";
  auto by_default = MakeOrDie(spec);
  ASSERT_NE(by_default, nullptr);
  EXPECT_TRUE(by_default->add_bos());
  spec.flags = {{"tokenizer.ggml.add_bos_token", false}};
  auto disabled = MakeOrDie(spec);
  ASSERT_NE(disabled, nullptr);
  EXPECT_FALSE(disabled->add_bos());
}

TEST(BpeTokenizerTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  // "aa" reachable only through a merge that is absent: Llama-3 style still finds it.
  VocabSpec spec;
  spec.merges = {"b c"};
  spec.pre = "gpt2";
  auto merging = MakeOrDie(spec);
  ASSERT_NE(merging, nullptr);
  EXPECT_EQ(EncodeOrDie(*merging, "aa"), (std::vector<TokenId>{Byte('a'), Byte('a')}));
  spec.pre = "llama-bpe";
  auto whole = MakeOrDie(spec);
  ASSERT_NE(whole, nullptr);
  EncodeOptions no_special;
  no_special.add_special = false;
  EXPECT_EQ(EncodeOrDie(*whole, "aa", no_special), (std::vector<TokenId>{kAa}));
}

TEST(BpeTokenizerTest, EndOfGenerationSetHasEosEotAndKnownControlTokens) {
  VocabSpec spec;
  spec.ids.push_back({"tokenizer.ggml.eot_token_id", kUser});
  auto tokenizer = MakeOrDie(spec);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(kEnd));         // eos
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(kUser));        // eot
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(kImEnd));       // <|im_end|>, a control token
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(kEotNormal));  // right text, but a normal token
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(kBos));
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(Byte('a')));
}

TEST(BpeTokenizerTest, DecodeCanSkipControlTokens) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<TokenId> ids = {kBos, kAb, kEnd, kUser};
  EXPECT_EQ(tokenizer->Decode(ids), "<s>ab<|end|><user>");
  EXPECT_EQ(tokenizer->Decode(ids, /*skip_special=*/true), "ab<user>");
}

TEST(BpeTokenizerTest, DecodeReplacesBrokenUtf8) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<TokenId> ids = {'x', 0xE4, 0xBD};  // "x" + 2 of 3 bytes of "你"
  EXPECT_EQ(tokenizer->Decode(ids), "x\xEF\xBF\xBD");
}

TEST(BpeTokenizerTest, InvalidUtf8IsInvalidArgumentWithOffset) {
  auto tokenizer = MakeOrDie();
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->Encode("ok \xFF bad");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("offset 3"), std::string::npos) << ids.status().ToString();
}

TEST(BpeTokenizerTest, UnknownTokenizerModelIsUnsupportedNamingFileAndValue) {
  VocabSpec spec;
  spec.model = "t5-unigram";
  const Status status = MakeError(spec);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("test.gguf"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("t5-unigram"), std::string::npos) << status.ToString();
}

TEST(BpeTokenizerTest, UnknownPreTokenizerIsALoadError) {
  VocabSpec spec;
  spec.pre = "martian";
  const Status status = MakeError(spec);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("test.gguf"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("martian"), std::string::npos) << status.ToString();
}

TEST(BpeTokenizerTest, MismatchedTokenTypeArrayIsDataLoss) {
  VocabSpec spec;
  spec.extra_types_entries = 3;
  const Status status = MakeError(spec);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("tokenizer.ggml.token_type"), std::string::npos);
}

TEST(BpeTokenizerTest, SpecialIdOutsideVocabularyIsDataLoss) {
  VocabSpec spec;
  spec.ids = {{"tokenizer.ggml.eos_token_id", 100000}};
  const Status status = MakeError(spec);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("eos_token_id"), std::string::npos) << status.ToString();
}

TEST(BpeTokenizerTest, MalformedMergeIsDataLoss) {
  VocabSpec spec;
  spec.merges = {"ab"};
  const Status status = MakeError(spec);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("tokenizer.ggml.merges[0]"), std::string::npos);
}

TEST(BpeTokenizerTest, MissingTokenizerIsNotFound) {
  GgufTestWriter writer;
  writer.AddString("general.architecture", "llama");
  const auto bytes = writer.Build();
  auto file = GgufFile::FromMemory(bytes.data(), bytes.size(), "bare.gguf");
  ASSERT_TRUE(file.ok());
  auto tokenizer = model::LoadTokenizer(**file);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), StatusCode::kNotFound);
  EXPECT_NE(tokenizer.status().message().find("bare.gguf"), std::string::npos);
}

}  // namespace
}  // namespace pier::tokenizer
