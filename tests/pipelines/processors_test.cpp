// The built-in text and image processors (src/pipelines/processors/processors.h) inside a
// pipeline: template ({name} substitution, {{ }} escapes, its refusals at build, no text at
// all from empty inputs), top_k with labels from a file, and image refusing what is not one.
#include "pipelines/processors/processors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "fake_model.h"
#include "pipelines/pipeline.h"

namespace pier::pipelines {
namespace {

using testing::Answers;
using testing::Floats;
using testing::MakePipeline;
using testing::ProcessorStep;
using testing::SpecOf;
using testing::Texts;
using testing::TextsIn;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs one request through `pipeline` and returns its answer.
PipelineResult RunOnce(Pipeline& pipeline, std::vector<HostTensor> inputs) {
  Answers answers;
  PipelineRequest request;
  request.inputs = std::move(inputs);
  Result<uint64_t> id = pipeline.Submit(std::move(request), answers.For("r"));
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  if (!id.ok()) return {};
  EXPECT_TRUE(answers.WaitFor(1));
  return answers.Get("r");
}

PipelineSpec TemplateSpec(const std::string& text,
                          std::map<std::string, std::string> inputs = {{"a", "a"}, {"b", "b"}}) {
  return SpecOf("prompt", {{"a", ElementType::kBytes}, {"b", ElementType::kBytes}},
                {{"text", ElementType::kBytes}},
                {ProcessorStep("fill", "template", std::move(inputs), {{"text", "text"}},
                               {{"template", text}, {"separator", ", "}})});
}

// MakeStep's refusal for `spec`'s only step.
std::string BuildError(const PipelineSpec& spec) {
  Result<std::unique_ptr<Step>> step = MakeStep(spec.steps[0], {});
  EXPECT_FALSE(step.ok());
  return step.ok() ? "" : step.status().message();
}

TEST(TemplateProcessorTest, ReplacesEachInputJoinedBySeparatorAndUnescapesBraces) {
  std::shared_ptr<Pipeline> pipeline = MakePipeline(TemplateSpec("A={a}; {{b}}={b}!"), {});
  ASSERT_NE(pipeline, nullptr);
  PipelineResult result = RunOnce(*pipeline, {Texts("a", {"x", "y"}), Texts("b", {"z"})});
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_EQ(result.outputs[0].shape, std::vector<int64_t>({1}));
  EXPECT_EQ(TextsIn(result.outputs[0]), std::vector<std::string>({"A=x, y; {b}=z!"}));
  // One input empty, the other not: still a text, with nothing in the empty one's place.
  result = RunOnce(*pipeline, {Texts("a", {}), Texts("b", {"only"})});
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  EXPECT_EQ(TextsIn(result.outputs[0]), std::vector<std::string>({"A=; {b}=only!"}));
}

TEST(TemplateProcessorTest, EveryInputEmptyGivesNoTextAtAll) {
  std::shared_ptr<Pipeline> pipeline = MakePipeline(TemplateSpec("A={a} B={b}"), {});
  ASSERT_NE(pipeline, nullptr);
  const PipelineResult result = RunOnce(*pipeline, {Texts("a", {}), Texts("b", {""})});
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_EQ(result.outputs[0].type, ElementType::kBytes);
  EXPECT_EQ(result.outputs[0].shape, std::vector<int64_t>({0}));
  EXPECT_TRUE(TextsIn(result.outputs[0]).empty());
}

TEST(TemplateProcessorTest, RefusesAtBuildWhatCannotBeFilled) {
  std::string error = BuildError(TemplateSpec("{a} and {c}"));
  EXPECT_TRUE(Contains(error, "(fill).template")) << error;
  EXPECT_TRUE(Contains(error, "{c} names no input")) << error;
  error = BuildError(TemplateSpec("{a} only"));
  EXPECT_TRUE(Contains(error, "(fill).inputs.b")) << error;
  EXPECT_TRUE(Contains(error, "never uses {b}")) << error;
  error = BuildError(TemplateSpec("{a} {b"));
  EXPECT_TRUE(Contains(error, "never closed")) << error;
  PipelineSpec no_text = TemplateSpec("{a}{b}");
  no_text.steps[0].settings.erase("template");
  error = BuildError(no_text);
  EXPECT_TRUE(Contains(error, "needs its text")) << error;
  PipelineSpec extra = TemplateSpec("{a}{b}");
  extra.steps[0].settings["seperator"] = "-";
  error = BuildError(extra);
  EXPECT_TRUE(Contains(error, "has no key 'seperator'")) << error;
  EXPECT_TRUE(Contains(error, "separator")) << error;  // the keys it does take
}

TEST(TopKProcessorTest, GivesTheBestClassesWithLabelsFromAFile) {
  const std::string folder = ::testing::TempDir();
  const std::string file = "pipeline_top_k_labels.txt";
  {
    std::ofstream out(folder + "/" + file);
    out << "cat\r\ndog\nbird\n";
  }
  PipelineSpec spec = SpecOf("classes", {{"scores", ElementType::kFp32, {-1, 3}}},
                             {{"labels", ElementType::kBytes}},
                             {ProcessorStep("best", "top_k", {{"scores", "scores"}},
                                            {{"labels", "labels"}}, {{"k", 2}, {"labels", file}})});
  spec.steps[0].folder = folder;  // a relative file is read from the configuration's folder
  std::shared_ptr<Pipeline> pipeline = MakePipeline(spec, {});
  ASSERT_NE(pipeline, nullptr);
  // spec.outputs' default shape is [-1]; labels are [N, k]: check the result, not the rank.
  const PipelineResult result =
      RunOnce(*pipeline, {Floats("scores", {2, 3}, {0.1f, 0.7f, 0.2f, 0.5f, 0.25f, 0.9f})});
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  EXPECT_EQ(result.outputs[0].shape, std::vector<int64_t>({2, 2}));
  EXPECT_EQ(TextsIn(result.outputs[0]),
            std::vector<std::string>(
                {"0.700000:1:dog", "0.200000:2:bird", "0.900000:2:bird", "0.500000:0:cat"}));
  std::remove((folder + "/" + file).c_str());

  spec.steps[0].settings["labels"] = "no_such_labels.txt";
  Result<std::unique_ptr<Step>> missing = MakeStep(spec.steps[0], {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "(best).labels")) << missing.status().message();
  EXPECT_TRUE(Contains(missing.status().message(), "no_such_labels.txt"))
      << missing.status().message();

  spec.steps[0].settings["labels"] = "metadata:classes";
  Result<std::unique_ptr<Step>> no_model = MakeStep(spec.steps[0], {});
  ASSERT_FALSE(no_model.ok());
  EXPECT_TRUE(Contains(no_model.status().message(), "name the model too"))
      << no_model.status().message();
}

// image -> text_detection_input: a PNG becomes a [1, 3, H, W] tensor; bytes that are not an
// image, or none, fail the request naming the step and what was wrong.
class ImageProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PipelineSpec spec = SpecOf(
        "page", {{"image", ElementType::kBytes, {1}}}, {{"tensor", ElementType::kFp32}},
        {ProcessorStep("decode", "image", {{"bytes", "image"}}, {{"image", "page"}}),
         ProcessorStep("prepare", "text_detection_input", {{"image", "page"}},
                       {{"tensor", "tensor"}}, {{"limit_side_len", 64}, {"limit_type", "max"}})});
    pipeline_ = MakePipeline(spec, {});
    ASSERT_NE(pipeline_, nullptr);
  }
  std::shared_ptr<Pipeline> pipeline_;
};

TEST_F(ImageProcessorTest, DecodesAPngIntoTheDetectorsTensor) {
  std::ifstream in(std::string(PIER_SOURCE_DIR) + "/tests/fixtures/image/grey.png",
                   std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(png.empty());
  const PipelineResult result = RunOnce(*pipeline_, {Texts("image", {png})});
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  const std::vector<int64_t>& shape = result.outputs[0].shape;
  ASSERT_EQ(shape.size(), 4u);
  EXPECT_EQ(shape[0], 1);
  EXPECT_EQ(shape[1], 3);
  EXPECT_EQ(shape[2] % 32, 0);
  EXPECT_EQ(shape[3] % 32, 0);
  EXPECT_LE(std::max(shape[2], shape[3]), 64);
  EXPECT_GE(shape[3], shape[2]);  // 37 x 23: wider than tall
}

TEST_F(ImageProcessorTest, RefusesBytesThatAreNotAnImage) {
  PipelineResult result = RunOnce(*pipeline_, {Texts("image", {"hello, not a picture"})});
  EXPECT_EQ(result.status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(result.status.message(), "pipeline page, step decode: "))
      << result.status.message();
  EXPECT_TRUE(Contains(result.status.message(), "not a JPEG or PNG image"))
      << result.status.message();
  ASSERT_EQ(result.stages.size(), 1u);  // the next step never ran

  result = RunOnce(*pipeline_, {Texts("image", {""})});
  EXPECT_EQ(result.status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(result.status.message(), "step decode: the image is empty"))
      << result.status.message();
}

TEST(ProcessorTest, AnUnknownProcessorIsRefusedListingTheKnownOnes) {
  StepSpec spec = ProcessorStep("s", "imagee", {{"bytes", "image"}}, {{"image", "page"}});
  Result<std::unique_ptr<Step>> step = MakeStep(spec, {});
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(step.status().message(), "no processor 'imagee'"));
  EXPECT_TRUE(Contains(step.status().message(), "template"));
}

}  // namespace
}  // namespace pier::pipelines
