#include "serving/class_labels.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace pier::serving {
namespace {

using Labels = std::vector<std::string>;

tensor_models::TensorModelInfo WithOutputs(std::vector<TensorSpec> outputs) {
  tensor_models::TensorModelInfo info;
  info.inputs = {{"x", ElementType::kFp32, {-1, 3, 8, 8}}};
  info.outputs = std::move(outputs);
  info.max_batch_size = 4;
  return info;
}

TEST(ClassLabelsTest, ReadsAFileOneNamePerLine) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pier_labels_" + std::to_string(getpid()) + ".txt"))
                               .string();
  {
    std::ofstream file(path, std::ios::binary);
    file << "tench\r\ngoldfish\n\ngreat white shark\n\n";  // CRLF, an empty name, trailing lines
  }
  Result<Labels> labels = ReadClassLabels(path, {});
  std::filesystem::remove(path);
  ASSERT_TRUE(labels.ok()) << labels.status().ToString();
  EXPECT_EQ(*labels, (Labels{"tench", "goldfish", "", "great white shark"}));

  Result<Labels> missing = ReadClassLabels("/nonexistent/labels.txt", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/labels.txt"), std::string::npos);
}

TEST(ClassLabelsTest, ReadsTheModelsMetadataInItsThreeForms) {
  const std::map<std::string, std::string> metadata = {
      {"character", "0\n90\n180\n270"},                      // PaddleOCR's orientation classifier
      {"names", "{0: 'person', 1: \"bicycle\", 2: 'car'}"},  // Ultralytics
      {"labels", R"(["cat", "dog"])"},
      {"gap", "{0: 'a', 2: 'c'}"},
  };
  EXPECT_EQ(ReadClassLabels("metadata:character", metadata).value(),
            (Labels{"0", "90", "180", "270"}));
  EXPECT_EQ(ReadClassLabels("metadata:names", metadata).value(),
            (Labels{"person", "bicycle", "car"}));
  EXPECT_EQ(ReadClassLabels("metadata", metadata).value(), (Labels{"cat", "dog"}));

  Result<Labels> gap = ReadClassLabels("metadata:gap", metadata);
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.status().message().find("no name for class 1"), std::string::npos);
  Result<Labels> absent = ReadClassLabels("metadata:classes", metadata);
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("no entry 'classes' (it has: character, gap, labels, "
                                           "names)"),
            std::string::npos)
      << absent.status().message();
}

TEST(ClassLabelsTest, NamesTheOutputsWhoseClassesTheyCount) {
  const Labels four = {"0", "90", "180", "270"};
  auto assigned = AssignClassLabels(
      four,
      WithOutputs({{"scores", ElementType::kFp32, {-1, 4}}, {"ids", ElementType::kInt64, {-1, 1}}}),
      "orientation");
  ASSERT_TRUE(assigned.ok()) << assigned.status().ToString();
  EXPECT_EQ(assigned->size(), 1u);
  EXPECT_EQ(assigned->at("scores"), four);
  // An output that leaves its classes open takes them too.
  assigned = AssignClassLabels(four, WithOutputs({{"logits", ElementType::kFp16, {-1, -1}}}), "m");
  ASSERT_TRUE(assigned.ok());
  EXPECT_EQ(assigned->count("logits"), 1u);

  // A count that matches no output is refused at load, with both counts.
  Result<std::map<std::string, Labels>> wrong = AssignClassLabels(
      {"a", "b", "c"}, WithOutputs({{"scores", ElementType::kFp32, {-1, 4}}}), "orientation");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(),
            "model orientation: labels: 3 names, but output 'scores' has 4 classes");
}

}  // namespace
}  // namespace pier::serving
