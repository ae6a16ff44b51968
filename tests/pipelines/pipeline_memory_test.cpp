// The pipeline's values charged to a real MemoryGovernor (over a FakeDevice) under the owner
// pipeline:<name>: held while a request is inside, given back when it ends, and a refusal
// failing the request (at Submit for an input, at the step for what it produces).
#include <gtest/gtest.h>

#include "fake_model.h"
#include "memory/test_util.h"
#include "pipelines/pipeline.h"

namespace pier::pipelines {
namespace {

using namespace std::chrono_literals;
using pier::testing::BudgetOf;
using pier::testing::kMiB;
using pier::testing::MakeGovernor;
using testing::Answers;
using testing::ChainSpec;
using testing::Eventually;
using testing::FakeModel;
using testing::Floats;
using testing::MakePipeline;
using testing::ProcessorStep;
using testing::ResolverOf;
using testing::SpecOf;
using testing::Texts;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The owner's bytes as the governor counts them.
uint64_t ChargedTo(const MemoryGovernor& governor, const std::string& owner) {
  Result<OwnerId> id = governor.FindOwner(owner);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  if (!id.ok()) return 0;
  Result<OwnerStats> stats = governor.StatsFor(*id);
  return stats.ok() ? stats->external_bytes : 0;
}

// [rows, 2] FP32: 8 bytes a row.
PipelineRequest RowsRequest(int64_t rows) {
  PipelineRequest request;
  request.inputs.push_back(
      Floats("x", {rows, 2}, std::vector<float>(static_cast<size_t>(rows * 2), 1.0f)));
  return request;
}

class PipelineMemoryTest : public ::testing::Test {
 protected:
  FakeDevice device_{FakeDeviceOptions{.capacity_bytes = 64 * kMiB}};
};

TEST_F(PipelineMemoryTest, ValuesAreHeldWhileTheRequestIsInsideAndGivenBackAfter) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  Answers answers;
  FakeModel m1("m1", 60ms, 0);
  FakeModel m2("m2", 60ms, 0);
  std::shared_ptr<Pipeline> pipeline =
      MakePipeline(ChainSpec(), ResolverOf({&m1, &m2}), governor.get());
  ASSERT_NE(pipeline, nullptr);
  Result<uint64_t> id = pipeline->Submit(RowsRequest(1000), answers.For("a"));  // 8000 bytes
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  // In the first stage: x is held.
  ASSERT_TRUE(Eventually([&] { return pipeline->Stats().stages[0].running == 1; }));
  EXPECT_GE(pipeline->Stats().held_bytes, 8000u);
  EXPECT_GE(ChargedTo(*governor, "pipeline:chain"), 8000u);
  // In the second: y is held (x went back once its last reader was done).
  ASSERT_TRUE(Eventually([&] { return pipeline->Stats().stages[1].running == 1; }));
  EXPECT_GE(pipeline->Stats().held_bytes, 8000u);
  EXPECT_LT(pipeline->Stats().held_bytes, 16000u);
  ASSERT_TRUE(answers.WaitFor(1));
  EXPECT_TRUE(answers.Get("a").status.ok());
  EXPECT_EQ(pipeline->Stats().held_bytes, 0u);
  EXPECT_EQ(ChargedTo(*governor, "pipeline:chain"), 0u);
}

TEST_F(PipelineMemoryTest, AnInputPastTheBudgetIsRefusedAtSubmit) {
  auto governor = MakeGovernor(&device_, BudgetOf(1 * kMiB));
  Answers answers;
  FakeModel m1("m1", {}, 0);
  FakeModel m2("m2", {}, 0);
  std::shared_ptr<Pipeline> pipeline =
      MakePipeline(ChainSpec(), ResolverOf({&m1, &m2}), governor.get());
  ASSERT_NE(pipeline, nullptr);
  Result<uint64_t> id = pipeline->Submit(RowsRequest(200000), answers.For("big"));  // 1.6 MB
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(id.status().message(), "pipeline chain")) << id.status().message();
  EXPECT_TRUE(Contains(id.status().message(), "input 'x'")) << id.status().message();
  EXPECT_EQ(pipeline->Stats().held_bytes, 0u);
  EXPECT_EQ(ChargedTo(*governor, "pipeline:chain"), 0u);
  EXPECT_TRUE(m1.calls().empty());
}

// Two inputs, the second refused: the first one's charge goes back too, in the stats as well
// as in the governor.
TEST_F(PipelineMemoryTest, ARefusedInputGivesBackTheOnesChargedBeforeIt) {
  auto governor = MakeGovernor(&device_, BudgetOf(1 * kMiB));
  Answers answers;
  PipelineSpec spec = SpecOf("joined", {{"a", ElementType::kBytes}, {"b", ElementType::kBytes}},
                             {{"text", ElementType::kBytes}},
                             {ProcessorStep("join", "template", {{"a", "a"}, {"b", "b"}},
                                            {{"text", "text"}}, {{"template", "{a}{b}"}})});
  std::shared_ptr<Pipeline> pipeline = MakePipeline(spec, {}, governor.get());
  ASSERT_NE(pipeline, nullptr);
  PipelineRequest request;
  request.inputs.push_back(Texts("a", {"small"}));
  request.inputs.push_back(Texts("b", {std::string(2 * kMiB, 'b')}));
  Result<uint64_t> id = pipeline->Submit(std::move(request), answers.For("big"));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(id.status().message(), "input 'b'")) << id.status().message();
  EXPECT_EQ(ChargedTo(*governor, "pipeline:joined"), 0u);
  EXPECT_EQ(pipeline->Stats().held_bytes, 0u);
  // And a request that fits still runs.
  PipelineRequest fits;
  fits.inputs.push_back(Texts("a", {"x"}));
  fits.inputs.push_back(Texts("b", {"y"}));
  ASSERT_TRUE(pipeline->Submit(std::move(fits), answers.For("fits")).ok());
  ASSERT_TRUE(answers.WaitFor(1));
  EXPECT_TRUE(answers.Get("fits").status.ok());
  EXPECT_EQ(pipeline->Stats().held_bytes, 0u);
}

TEST_F(PipelineMemoryTest, AStepsOutputPastTheBudgetFailsTheRequestNamingTheStep) {
  auto governor = MakeGovernor(&device_, BudgetOf(1 * kMiB));
  Answers answers;
  FakeModel m1("m1", {}, 0);
  FakeModel m2("m2", {}, 0);
  std::shared_ptr<Pipeline> pipeline =
      MakePipeline(ChainSpec(), ResolverOf({&m1, &m2}), governor.get());
  ASSERT_NE(pipeline, nullptr);
  // x fits (560 kB); x and y together (1.12 MB) do not.
  ASSERT_TRUE(pipeline->Submit(RowsRequest(70000), answers.For("a")).ok());
  ASSERT_TRUE(answers.WaitFor(1));
  const Status status = answers.Get("a").status;
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_TRUE(Contains(status.message(), "pipeline chain, step first: ")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "memory budget refused")) << status.message();
  EXPECT_TRUE(m2.calls().empty());
  EXPECT_EQ(pipeline->Stats().held_bytes, 0u);
  EXPECT_EQ(ChargedTo(*governor, "pipeline:chain"), 0u);
}

}  // namespace
}  // namespace pier::pipelines
