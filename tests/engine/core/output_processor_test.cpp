// OutputProcessor on a tokenizer built from a plain vocabulary: streamed text, held-back stop
// prefixes, stop strings and end-of-generation tokens.
#include "engine/core/output_processor.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/vocabulary_spec.h"

namespace pier::engine {
namespace {

// Byte-level BPE whose tokens are "a", "b", "c", "ab" and an end-of-turn control token (5).
std::unique_ptr<tokenizer::Tokenizer> ToyTokenizer() {
  tokenizer::VocabularySpec spec;
  spec.source = "toy";
  spec.model = "gpt2";
  spec.tokens = {"a", "b", "c", "ab", "<s>", "<|im_end|>"};
  spec.types.assign(6, tokenizer::TokenType::kNormal);
  spec.types[4] = spec.types[5] = tokenizer::TokenType::kControl;
  spec.merges = {{"a", "b"}};
  auto made = tokenizer::Tokenizer::Create(spec);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return std::move(made).value();
}

OutputProcessor Make(const tokenizer::Tokenizer* tok, std::vector<std::string> stops) {
  auto stop = sampling::StopMatcher::Create(stops, {5});
  EXPECT_TRUE(stop.ok());
  return OutputProcessor(std::move(stop).value(), tok, /*skip_special_tokens=*/true);
}

TEST(OutputProcessorTest, StreamsTextAndStopsAtEndOfGeneration) {
  auto tok = ToyTokenizer();
  OutputProcessor out = Make(tok.get(), {});
  EXPECT_EQ(out.OnToken(0).text, "a");
  EXPECT_EQ(out.OnToken(3).text, "ab");
  const OutputProcessor::Output end = out.OnToken(5);
  EXPECT_TRUE(end.stopped);
  EXPECT_EQ(end.text, "");
}

TEST(OutputProcessorTest, HoldsBackAStopPrefixAndStopsWithoutIt) {
  auto tok = ToyTokenizer();
  OutputProcessor out = Make(tok.get(), {"bc"});
  EXPECT_EQ(out.OnToken(0).text, "a");
  const OutputProcessor::Output held = out.OnToken(1);  // "b" may start "bc"
  EXPECT_EQ(held.text, "");
  EXPECT_FALSE(held.stopped);
  const OutputProcessor::Output stop = out.OnToken(2);  // "bc": stop, nothing of it sent
  EXPECT_TRUE(stop.stopped);
  EXPECT_EQ(stop.text, "");
}

TEST(OutputProcessorTest, FinishReleasesTheHeldBackTail) {
  auto tok = ToyTokenizer();
  OutputProcessor out = Make(tok.get(), {"bc"});
  EXPECT_EQ(out.OnToken(1).text, "");  // held back
  const OutputProcessor::Output tail = out.Finish();
  EXPECT_FALSE(tail.stopped);
  EXPECT_EQ(tail.text, "b");
}

TEST(OutputProcessorTest, WithoutATokenizerOnlyEndOfGenerationEnds) {
  OutputProcessor out = Make(nullptr, {"a"});
  EXPECT_FALSE(out.OnToken(0).stopped);
  EXPECT_EQ(out.OnToken(0).text, "");
  EXPECT_TRUE(out.OnToken(5).stopped);
}

}  // namespace
}  // namespace pier::engine
