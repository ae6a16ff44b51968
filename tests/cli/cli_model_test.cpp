// Runs the built `pier tokenize` and `pier prompt` on the default model and on bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/pier_process.h"

namespace pier::cli {
namespace {

using ::testing::HasSubstr;

using pier::testing::CommandResult;
using pier::testing::RunPier;
const auto& Quote = pier::testing::ShellQuote;

std::vector<int> Ids(const nlohmann::json& tokenize_output) {
  std::vector<int> ids;
  for (const auto& token : tokenize_output["tokens"]) ids.push_back(token["id"].get<int>());
  return ids;
}

TEST(TokenizeCliTest, MatchesTheReferenceTokenizerOnFixtureStrings) {
  std::ifstream in(std::string(PIER_SOURCE_DIR) +
                   "/tests/fixtures/tokenizer/smollm2_encodings.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"];
    // Shell-safe, non-empty, printable cases are enough here; the library test covers all.
    if (text.empty() || text.find('\0') != std::string::npos || text[0] == '-') continue;
    CommandResult result = RunPier("tokenize --json " + Quote(text));
    ASSERT_EQ(result.exit_code, 0) << text;
    EXPECT_EQ(Ids(nlohmann::json::parse(result.output)), c["ids"].get<std::vector<int>>()) << text;
    if (++checked == 25) break;
  }
  EXPECT_EQ(checked, 25);
}

TEST(PromptCliTest, RendersChatMlAndTokenizesLikeTokenize) {
  CommandResult prompt = RunPier("prompt --json --system 'Be brief.' 'Hi there'");
  ASSERT_EQ(prompt.exit_code, 0) << prompt.output;
  const nlohmann::json got = nlohmann::json::parse(prompt.output);
  EXPECT_EQ(got["prompt"].get<std::string>(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi "
            "there<|im_end|>\n<|im_start|>assistant\n");
  CommandResult tokenized = RunPier("tokenize --json " + Quote(got["prompt"]));
  ASSERT_EQ(tokenized.exit_code, 0);
  const std::vector<int> ids = Ids(nlohmann::json::parse(tokenized.output));
  EXPECT_EQ(got["tokens"].get<std::vector<int>>(), ids);
  const nlohmann::json first = nlohmann::json::parse(tokenized.output)["tokens"][0];
  EXPECT_EQ(first["piece"], "<|im_start|>");
}

TEST(CliErrorsTest, MissingModelFileNamesItAndExitsOne) {
  for (const char* command : {"tokenize", "prompt", "inspect"}) {
    const std::string args = std::string(command) == "inspect"
                                 ? "inspect /nonexistent/model.gguf"
                                 : std::string(command) + " -m /nonexistent/model.gguf hello";
    CommandResult result = RunPier(args, /*merge_stderr=*/true);
    EXPECT_EQ(result.exit_code, 1) << command;
    EXPECT_THAT(result.output, HasSubstr("/nonexistent/model.gguf")) << command;
  }
}

TEST(CliErrorsTest, InvalidUtf8IsRefused) {
  CommandResult result = RunPier("tokenize \"$(printf 'caf\\351')\"", /*merge_stderr=*/true);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("UTF-8"));
}

TEST(DevicesCliTest, ReportsCpuCapacityAndWhyCudaIsOrIsNotUsed) {
  CommandResult result = RunPier("devices --json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json got = nlohmann::json::parse(result.output);
  EXPECT_GT(got["cpu"]["capacity_bytes"].get<uint64_t>(), 0u);
  EXPECT_LE(got["cpu"]["capacity_bytes"].get<uint64_t>(),
            got["cpu"]["mem_total_bytes"].get<uint64_t>());
  const std::string availability = got["cuda"]["availability"];
  if (availability == "usable") {
    EXPECT_GT(got["cuda"]["devices"].get<int>(), 0);
  } else {
    EXPECT_FALSE(got["cuda"]["reason"].get<std::string>().empty()) << availability;
  }
}

// Worker processes keep the KV policy (elastic by default): the help must not say otherwise.
TEST(ServeCliTest, HelpSaysWorkersKeepTheKvPolicy) {
  CommandResult result = RunPier("serve --help", /*merge_stderr=*/true);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("--workers"));
  EXPECT_THAT(result.output, HasSubstr("elastic KV is lent between workers"));
  EXPECT_THAT(result.output, ::testing::Not(HasSubstr("fixed at its capacity")));
}

TEST(CliErrorsTest, UnknownSubcommandFails) {
  CommandResult result = RunPier("frobnicate", /*merge_stderr=*/true);
  EXPECT_NE(result.exit_code, 0);
}

}  // namespace
}  // namespace pier::cli
