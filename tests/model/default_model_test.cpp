// Reads the default model and compares with gguf-py's GGUFReader + dequantize
// (fixture: tools/gen_dequant_fixture.py --model ...): model info, and a sample
// of dequantized rows of a few tensors.
#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf_file.h"
#include "model/model_info.h"

namespace pier::model {
namespace {

uint64_t Fnv1a64(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

nlohmann::json LoadFixture() {
  const std::string path = std::string(PIER_SOURCE_DIR) + "/tests/fixtures/model/smollm2_rows.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing fixture " << path;
  return nlohmann::json::parse(in);
}

TEST(ModelInfoTest, DefaultModelMatchesGgufPy) {
  const nlohmann::json expected = LoadFixture()["info"];
  auto file = GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Result<ModelInfo> info = ReadModelInfo(**file);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->architecture, expected["architecture"]);
  EXPECT_EQ(info->name, expected["name"]);
  EXPECT_EQ(info->context_length, expected["context_length"]);
  EXPECT_EQ(info->embedding_length, expected["embedding_length"]);
  EXPECT_EQ(info->block_count, expected["block_count"]);
  EXPECT_EQ(info->feed_forward_length, expected["feed_forward_length"]);
  EXPECT_EQ(info->head_count, expected["head_count"]);
  EXPECT_EQ(info->head_count_kv, expected["head_count_kv"]);
  EXPECT_EQ(info->head_dim, expected["head_dim"]);
  EXPECT_DOUBLE_EQ(info->rope_freq_base, expected["rope_freq_base"].get<double>());
  EXPECT_DOUBLE_EQ(info->rms_norm_eps, expected["rms_norm_eps"].get<double>());
  EXPECT_FALSE(info->rope_scaling.has_value());
  EXPECT_EQ(info->vocab_size, expected["vocab_size"]);
  EXPECT_EQ(info->weight_bytes, expected["weight_bytes"].get<uint64_t>());
  EXPECT_EQ(info->parameter_count, expected["parameter_count"]);
  EXPECT_EQ(info->kv_bytes_per_token, expected["kv_bytes_per_token"].get<uint64_t>());
  EXPECT_EQ(info->has_chat_template, expected["has_chat_template"].get<bool>());
  ASSERT_EQ(info->tensor_types.size(), expected["tensor_types"].size());
  for (const auto& [type, count] : info->tensor_types) {
    EXPECT_EQ(count, expected["tensor_types"][std::string(DTypeName(type))]) << DTypeName(type);
  }
}

TEST(ModelDequantTest, DefaultModelRowsMatchGgufPy) {
  const nlohmann::json fixture = LoadFixture();

  auto file = GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  int rows_checked = 0;
  for (const auto& t : fixture["tensors"]) {
    const std::string name = t["name"].get<std::string>();
    const GgufTensorInfo* tensor = (*file)->FindTensor(name);
    ASSERT_NE(tensor, nullptr) << name;
    std::string type_name = t["type"].get<std::string>();  // "Q4_1"
    for (char& c : type_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(DTypeName(tensor->type), type_name) << name;
    ASSERT_EQ(tensor->row_length(), t["row_length"].get<int64_t>()) << name;
    ASSERT_EQ(tensor->row_count(), t["rows"].get<int64_t>()) << name;
    std::vector<float> row(static_cast<size_t>(tensor->row_length()));
    for (const auto& sample : t["samples"]) {
      const auto r = sample["row"].get<int64_t>();
      ASSERT_TRUE(DequantizeRows(*tensor, r, 1, row.data()).ok()) << name << " row " << r;
      const std::string first = sample["first"].get<std::string>();
      for (size_t i = 0; i < first.size() / 8; ++i) {
        const auto bits = static_cast<uint32_t>(std::stoul(first.substr(8 * i, 8), nullptr, 16));
        EXPECT_EQ(std::bit_cast<uint32_t>(row[i]), bits)
            << name << " row " << r << " [" << i << "]";
      }
      char hash[17];
      std::snprintf(hash, sizeof(hash), "%016llx",
                    static_cast<unsigned long long>(Fnv1a64(row.data(), row.size() * 4)));
      EXPECT_EQ(std::string(hash), sample["fnv1a64"].get<std::string>()) << name << " row " << r;
      double sum = 0;
      for (float v : row) sum += v;
      EXPECT_NEAR(sum, sample["sum"].get<double>(), 1e-9 * (1 + std::abs(sum))) << name;
      ++rows_checked;
    }
  }
  EXPECT_GE(rows_checked, 15);
}

TEST(ModelDequantTest, RowsOutOfRangeAreRejected) {
  auto file = GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const GgufTensorInfo* tensor = (*file)->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(tensor, nullptr);
  std::vector<float> row(static_cast<size_t>(tensor->row_length()));
  EXPECT_EQ(DequantizeRows(*tensor, tensor->row_count(), 1, row.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeRows(*tensor, -1, 1, row.data()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pier::model
