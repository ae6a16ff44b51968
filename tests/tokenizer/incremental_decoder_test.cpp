#include "tokenizer/incremental_decoder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace pier::tokenizer {
namespace {

// A tokenizer whose tokens are given byte strings: enough to drive the decoder.
class FakeTokenizer final : public Tokenizer {
 public:
  FakeTokenizer(std::vector<std::string> bytes, std::vector<TokenType> types, bool strip = false)
      : bytes_(std::move(bytes)), types_(std::move(types)), strip_(strip) {}

  Result<std::vector<TokenId>> Encode(std::string_view, const EncodeOptions&) const override {
    return UnsupportedError("fake");
  }
  std::string TokenBytes(TokenId id) const override { return bytes_[id]; }
  std::string_view Piece(TokenId id) const override { return bytes_[id]; }
  TokenType Type(TokenId id) const override { return types_[id]; }
  int32_t vocab_size() const override { return static_cast<int32_t>(bytes_.size()); }
  TokenId bos_id() const override { return -1; }
  TokenId eos_id() const override { return -1; }
  bool add_bos() const override { return false; }
  bool add_eos() const override { return false; }
  const std::vector<TokenId>& end_of_generation_ids() const override { return eog_; }
  bool strips_leading_space_on_decode() const override { return strip_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<TokenType> types_;
  bool strip_;
  std::vector<TokenId> eog_;
};

// Token i is the single byte i (0..255); 256 is a control token "<|end|>";
// 257 is " hi".
FakeTokenizer MakeByteTokenizer(bool strip = false) {
  std::vector<std::string> bytes;
  std::vector<TokenType> types;
  for (int b = 0; b < 256; ++b) {
    bytes.emplace_back(1, static_cast<char>(b));
    types.push_back(TokenType::kByte);
  }
  bytes.emplace_back("<|end|>");
  types.push_back(TokenType::kControl);
  bytes.emplace_back(" hi");
  types.push_back(TokenType::kNormal);
  return FakeTokenizer(std::move(bytes), std::move(types), strip);
}

std::vector<TokenId> ByteIds(std::string_view text) {
  std::vector<TokenId> ids;
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

// Pushes every id, checking that each output is valid UTF-8; returns all output.
std::string Stream(IncrementalDecoder& decoder, const std::vector<TokenId>& ids,
                   std::vector<std::string>* outputs = nullptr) {
  std::string all;
  for (TokenId id : ids) {
    const std::string out = decoder.Push(id);
    EXPECT_TRUE(ValidateUtf8(out).ok()) << "emitted invalid UTF-8 after token " << id;
    if (outputs != nullptr) outputs->push_back(out);
    all += out;
  }
  const std::string tail = decoder.Flush();
  EXPECT_TRUE(ValidateUtf8(tail).ok());
  return all + tail;
}

TEST(IncrementalDecoderTest, HoldsBackAnEmojiUntilItsLastByte) {
  const FakeTokenizer tokenizer = MakeByteTokenizer();
  IncrementalDecoder decoder(tokenizer);
  const std::string emoji = "🦙";  // F0 9F A6 99
  std::vector<std::string> outputs;
  EXPECT_EQ(Stream(decoder, ByteIds(emoji), &outputs), emoji);
  EXPECT_EQ(outputs, (std::vector<std::string>{"", "", "", emoji}));
}

TEST(IncrementalDecoderTest, ChineseAcrossTokensComesOutWhole) {
  const FakeTokenizer tokenizer = MakeByteTokenizer();
  IncrementalDecoder decoder(tokenizer);
  std::vector<std::string> outputs;
  EXPECT_EQ(Stream(decoder, ByteIds("a你好"), &outputs), "a你好");
  EXPECT_EQ(outputs, (std::vector<std::string>{"a", "", "", "你", "", "", "好"}));
}

TEST(IncrementalDecoderTest, ZwjSequenceIsNeverCutInsideACharacter) {
  const FakeTokenizer tokenizer = MakeByteTokenizer();
  IncrementalDecoder decoder(tokenizer);
  const std::string family = "👨‍👩‍👧";
  EXPECT_EQ(Stream(decoder, ByteIds(family)), family);
  EXPECT_EQ(decoder.pending_bytes(), 0u);
}

TEST(IncrementalDecoderTest, FlushReplacesATruncatedTail) {
  const FakeTokenizer tokenizer = MakeByteTokenizer();
  IncrementalDecoder decoder(tokenizer);
  EXPECT_EQ(decoder.Push('x'), "x");
  EXPECT_EQ(decoder.Push(0xE4), "");
  EXPECT_EQ(decoder.Push(0xBD), "");
  EXPECT_EQ(decoder.pending_bytes(), 2u);
  EXPECT_EQ(decoder.Flush(), kReplacementCharacter);
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(IncrementalDecoderTest, ImpossibleBytesBecomeReplacementsAtOnce) {
  const FakeTokenizer tokenizer = MakeByteTokenizer();
  IncrementalDecoder decoder(tokenizer);
  EXPECT_EQ(decoder.Push(0xFF), kReplacementCharacter);
  EXPECT_EQ(decoder.Push(0x80), kReplacementCharacter);  // stray continuation
  EXPECT_EQ(decoder.Push(0xE4), "");
  // 'A' cannot continue E4: one U+FFFD for the lead byte, then 'A'.
  EXPECT_EQ(decoder.Push('A'), std::string(kReplacementCharacter) + "A");
}

TEST(IncrementalDecoderTest, StreamEqualsDecodeOnMixedInput) {
  const FakeTokenizer tokenizer = MakeByteTokenizer();
  std::vector<TokenId> ids = ByteIds("héllo 🤖 世界");
  ids.insert(ids.begin() + 3, 256);
  ids.push_back(0xF0);  // truncated tail
  ids.push_back(0x9F);
  for (bool skip : {false, true}) {
    IncrementalDecoder decoder(tokenizer, skip);
    EXPECT_EQ(Stream(decoder, ids), tokenizer.Decode(ids, skip)) << "skip_special=" << skip;
  }
}

TEST(IncrementalDecoderTest, SkipsControlTokensWhenAsked) {
  const FakeTokenizer tokenizer = MakeByteTokenizer();
  IncrementalDecoder keep(tokenizer, false);
  EXPECT_EQ(keep.Push(256), "<|end|>");
  IncrementalDecoder skip(tokenizer, true);
  EXPECT_EQ(skip.Push(256), "");
}

TEST(IncrementalDecoderTest, StripsLeadingSpaceOfFirstPieceLikeDecode) {
  const FakeTokenizer tokenizer = MakeByteTokenizer(/*strip=*/true);
  IncrementalDecoder decoder(tokenizer, /*skip_special=*/true);
  const std::vector<TokenId> ids = {256, 257, 257};
  EXPECT_EQ(Stream(decoder, ids), "hi hi");
  EXPECT_EQ(tokenizer.Decode(ids, true), "hi hi");
}

TEST(IncrementalDecoderTest, IgnoresIdsOutsideTheVocabulary) {
  const FakeTokenizer tokenizer = MakeByteTokenizer();
  IncrementalDecoder decoder(tokenizer);
  EXPECT_EQ(decoder.Push(-1), "");
  EXPECT_EQ(decoder.Push(100000), "");
}

TEST(Utf8Test, ValidateReportsTheOffsetOfTheFirstBadByte) {
  EXPECT_TRUE(ValidateUtf8("plain ascii, 中文, 🦙").ok());
  const Status bad = ValidateUtf8(std::string("abc\xC3("));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("byte offset 3"), std::string::npos) << bad.message();
}

TEST(Utf8Test, RejectsOverlongsSurrogatesAndOutOfRange) {
  EXPECT_FALSE(ValidateUtf8("\xC0\xAF").ok());          // overlong '/'
  EXPECT_FALSE(ValidateUtf8("\xE0\x80\xAF").ok());      // overlong
  EXPECT_FALSE(ValidateUtf8("\xED\xA0\x80").ok());      // surrogate U+D800
  EXPECT_FALSE(ValidateUtf8("\xF4\x90\x80\x80").ok());  // U+110000
  EXPECT_FALSE(ValidateUtf8("\xE4\xBD").ok());          // truncated
  EXPECT_TRUE(ValidateUtf8("\xF4\x8F\xBF\xBF").ok());   // U+10FFFF
}

// Python's bytes.decode("utf-8", errors="replace") gives these (maximal subparts).
TEST(Utf8Test, SanitizeReplacesEachMaximalSubpartOnce) {
  const std::string r(kReplacementCharacter);
  const auto sanitize = [](std::string_view bytes) {
    std::string out;
    AppendSanitizedUtf8(bytes, true, &out);
    return out;
  };
  EXPECT_EQ(sanitize("a\xF0\x9F\xA6z"), "a" + r + "z");
  EXPECT_EQ(sanitize("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(sanitize("\xC0\xAF"), r + r);
  EXPECT_EQ(sanitize("\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41"), r + r + r + r + "A");
}

}  // namespace
}  // namespace pier::tokenizer
