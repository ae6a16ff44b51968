#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/unicode.h"

namespace pier::tokenizer {
namespace {

std::vector<std::string> SplitOrDie(const PreTokenizer& pre, std::string_view text) {
  auto pieces = pre.Split(text);
  EXPECT_TRUE(pieces.ok()) << pieces.status().ToString();
  if (!pieces.ok()) return {};
  return std::vector<std::string>(pieces->begin(), pieces->end());
}

std::unique_ptr<PreTokenizer> Make(std::string_view name) {
  auto pre = PreTokenizer::ForName(name);
  EXPECT_TRUE(pre.ok()) << pre.status().ToString();
  return pre.ok() ? std::move(pre).value() : nullptr;
}

TEST(PreTokenizerTest, Gpt2KeepsLeadingSpaceWithWord) {
  auto pre = Make("gpt2");
  ASSERT_NE(pre, nullptr);
  EXPECT_EQ(SplitOrDie(*pre, "Hello world  it's 2024!"),
            (std::vector<std::string>{"Hello", " world", " ", " it", "'s", " 2024", "!"}));
}

TEST(PreTokenizerTest, SmollmSplitsEveryDigit) {
  auto pre = Make("smollm");
  ASSERT_NE(pre, nullptr);
  EXPECT_EQ(SplitOrDie(*pre, "abc 123"), (std::vector<std::string>{"abc", " ", "1", "2", "3"}));
}

TEST(PreTokenizerTest, Llama3GroupsThreeDigitsAndIsCaseInsensitiveOnContractions) {
  auto pre = Make("llama-bpe");
  ASSERT_NE(pre, nullptr);
  EXPECT_TRUE(pre->ignore_merges());
  EXPECT_TRUE(pre->add_bos_by_default());
  EXPECT_EQ(SplitOrDie(*pre, "IT'S 1234567"),
            (std::vector<std::string>{"IT", "'S", " ", "123", "456", "7"}));
}

TEST(PreTokenizerTest, EmptyNameMeansDefault) {
  auto pre = Make("");
  ASSERT_NE(pre, nullptr);
  EXPECT_EQ(SplitOrDie(*pre, "a b"), (std::vector<std::string>{"a", " b"}));
}

TEST(PreTokenizerTest, UnknownNameIsUnsupportedAndListsKnownNames) {
  auto pre = PreTokenizer::ForName("no-such-model");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(pre.status().message().find("no-such-model"), std::string::npos);
  EXPECT_NE(pre.status().message().find("smollm"), std::string::npos);
}

TEST(PreTokenizerTest, BadRegexIsInvalidArgument) {
  auto pre = PreTokenizer::FromRegexes({"(unclosed"});
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), StatusCode::kInvalidArgument);
}

TEST(PreTokenizerTest, KeepsTextBetweenMatchesAsPieces) {
  auto pre = PreTokenizer::FromRegexes({"[0-9]+"});
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(SplitOrDie(**pre, "ab12cd3"), (std::vector<std::string>{"ab", "12", "cd", "3"}));
}

TEST(PreTokenizerTest, EmptyTextGivesNoPieces) {
  auto pre = Make("qwen2");
  ASSERT_NE(pre, nullptr);
  EXPECT_TRUE(SplitOrDie(*pre, "").empty());
}

TEST(PreTokenizerTest, HandlesVeryLongWhitespaceRuns) {
  auto pre = Make("llama-bpe");
  ASSERT_NE(pre, nullptr);
  const std::string text = std::string(200000, ' ') + "x" + std::string(100000, '\n');
  const auto pieces = SplitOrDie(*pre, text);
  std::string joined;
  for (const auto& p : pieces) joined += p;
  EXPECT_EQ(joined, text);
  EXPECT_GE(pieces.size(), 2u);
}

TEST(PreTokenizerTest, ConcurrentSplitsAgree) {
  auto pre = Make("smollm");
  ASSERT_NE(pre, nullptr);
  const std::string text = "The 42 quick brown foxes 🦊 jumped\n\tover 7 lazy dogs. ";
  const auto expected = SplitOrDie(*pre, text);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto pieces = pre->Split(text);
        if (!pieces.ok() || std::vector<std::string>(pieces->begin(), pieces->end()) != expected) {
          ++mismatches[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// Every split in tests/fixtures/tokenizer/pre_tokenizer_splits.json, produced by
// Hugging Face `tokenizers` (tools/gen_tokenizer_fixture.py), is reproduced.
TEST(PreTokenizerTest, MatchesHuggingFaceSplits) {
  std::ifstream in(std::string(PIER_SOURCE_DIR) +
                   "/tests/fixtures/tokenizer/pre_tokenizer_splits.json");
  ASSERT_TRUE(in) << "missing fixture; run tools/gen_tokenizer_fixture.py";
  const auto fixture = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& [name, spec] : fixture.at("pre_tokenizers").items()) {
    auto pre = Make(name);
    ASSERT_NE(pre, nullptr) << name;
    const bool byte_level = spec.at("byte_level").get<bool>();
    for (const auto& c : spec.at("cases")) {
      const std::string text = c.at("text").get<std::string>();
      std::vector<std::string> pieces = SplitOrDie(*pre, text);
      if (byte_level) {
        for (auto& piece : pieces) piece = ByteLevelEncode(piece);
      }
      EXPECT_EQ(pieces, c.at("pieces").get<std::vector<std::string>>())
          << name << " on \"" << text << "\"";
      ++checked;
    }
  }
  EXPECT_GE(checked, 4 * 200);
}

}  // namespace
}  // namespace pier::tokenizer
