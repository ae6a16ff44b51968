// Runs the built `pier inspect` binary on the default model and on bad files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/pier_process.h"
#include "model/gguf_test_writer.h"

namespace pier::model {
namespace {

using ::testing::HasSubstr;

using pier::testing::CommandResult;
using pier::testing::RunPier;

TEST(InspectCliTest, JsonMatchesGgufPyFacts) {
  std::ifstream in(std::string(PIER_SOURCE_DIR) + "/tests/fixtures/model/smollm2_rows.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json expected = nlohmann::json::parse(in)["info"];
  CommandResult result = RunPier(std::string("inspect --json ") + PIER_DEFAULT_MODEL_PATH, false);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json got = nlohmann::json::parse(result.output);
  for (const char* key :
       {"architecture", "context_length", "embedding_length", "block_count", "feed_forward_length",
        "head_count", "head_count_kv", "head_dim", "vocab_size", "weight_bytes",
        "kv_bytes_per_token", "has_chat_template", "tensor_types", "parameter_count"}) {
    EXPECT_EQ(got[key], expected[key]) << key;
  }
}

TEST(InspectCliTest, TextNamesTheFacts) {
  CommandResult result = RunPier(std::string("inspect ") + PIER_DEFAULT_MODEL_PATH, false);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("architecture:          llama"));
  EXPECT_THAT(result.output, HasSubstr("q4_1 210"));
  EXPECT_THAT(result.output, HasSubstr("KV cache per token:    23040 bytes"));
  EXPECT_THAT(result.output, HasSubstr("chat template:         present"));
}

TEST(InspectCliTest, MissingFileExitsOneNamingIt) {
  CommandResult result = RunPier("inspect /nonexistent/dir/missing-model.gguf", true);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("missing-model.gguf"));
  EXPECT_THAT(result.output, HasSubstr("No such file"));
}

TEST(InspectCliTest, CorruptFileExitsOneNamingTheProblem) {
  testing::GgufTestWriter writer;
  writer.AddString("general.architecture", "llama");
  writer.AddTensor("blk.0.attn_q.weight", 0, {1024}, std::vector<uint8_t>(16));
  const std::vector<uint8_t> bytes = writer.Build();
  const std::string path = ::testing::TempDir() + "/pier_inspect_corrupt.gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  CommandResult result = RunPier("inspect " + path, true);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("pier_inspect_corrupt.gguf"));
  EXPECT_THAT(result.output, HasSubstr("extends past the end of the file"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pier::model
