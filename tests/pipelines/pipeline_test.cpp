// The pipeline executor (src/pipelines/pipeline.h) over fake tensor models (fake_model.h): the
// answers and their order, stages overlapping across requests, max_inflight, priority and
// deadline order at a queue, backpressure, max_queue, failures naming the pipeline and step,
// cancellation, Submit's and Create's checks. Delays are tens of milliseconds; every timing
// assertion is an ordering or an overlap with a wide margin, never a duration. Each test
// declares its Answers first, so that it outlives the models and the pipeline that call it.
#include "pipelines/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include "fake_model.h"

namespace pier::pipelines {
namespace {

using namespace std::chrono_literals;
using testing::Answers;
using testing::ChainSpec;
using testing::Clock;
using testing::CreateError;
using testing::Eventually;
using testing::FakeModel;
using testing::Floats;
using testing::FloatsOf;
using testing::MakePipeline;
using testing::ModelStep;
using testing::ProcessorStep;
using testing::RequestOf;
using testing::ResolverOf;
using testing::SpecOf;
using testing::Texts;
using testing::TextsIn;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

uint64_t SubmitOk(Pipeline& pipeline, PipelineRequest request,
                  std::function<void(PipelineResult)> done) {
  Result<uint64_t> id = pipeline.Submit(std::move(request), std::move(done));
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? *id : 0;
}

// A pipeline "one" of a single step "only" over `model` (x in, y out), its stage taking
// `max_inflight` requests at once (0: its default).
PipelineSpec OneStepSpec(const std::string& model, int64_t max_inflight) {
  return SpecOf("one", {{"x", ElementType::kFp32, {-1, -1}}}, {{"y", ElementType::kFp32, {-1, -1}}},
                {ModelStep("only", model, "x", "y", max_inflight)});
}

// The same over `model` with its stage taking one request at a time.
std::shared_ptr<Pipeline> OneAtATime(FakeModel& model) {
  return MakePipeline(OneStepSpec(model.name(), 1), ResolverOf({&model}));
}

TEST(PipelineTest, AnswersEveryDeclaredOutputInDeclaredOrder) {
  Answers answers;
  FakeModel m1("m1");
  FakeModel m2("m2");
  // x -> m1 -> y -> m2 -> z, and y -> top_k -> labels; outputs declared z, labels, y.
  PipelineSpec spec =
      SpecOf("mixed", {{"x", ElementType::kFp32, {-1, 2}}},
             {{"z", ElementType::kFp32, {-1, -1}},
              {"labels", ElementType::kBytes, {-1, -1}},
              {"y", ElementType::kFp32, {-1, -1}}},
             {ModelStep("first", "m1", "x", "y"), ModelStep("second", "m2", "y", "z"),
              ProcessorStep("best", "top_k", {{"scores", "y"}}, {{"labels", "labels"}})});
  std::shared_ptr<Pipeline> pipeline = MakePipeline(spec, ResolverOf({&m1, &m2}));
  ASSERT_NE(pipeline, nullptr);
  PipelineRequest request;
  request.inputs.push_back(Floats("x", {2, 2}, {1, 3, 5, 2}));
  SubmitOk(*pipeline, std::move(request), answers.For("a"));
  ASSERT_TRUE(answers.WaitFor(1));
  const PipelineResult result = answers.Get("a");
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  ASSERT_EQ(result.outputs.size(), 3u);
  EXPECT_EQ(result.outputs[0].name, "z");
  EXPECT_EQ(result.outputs[0].shape, std::vector<int64_t>({2, 2}));
  EXPECT_EQ(FloatsOf(result.outputs[0]), std::vector<float>({4, 12, 20, 8}));
  EXPECT_EQ(result.outputs[1].name, "labels");
  EXPECT_EQ(result.outputs[1].shape, std::vector<int64_t>({2, 1}));
  EXPECT_EQ(TextsIn(result.outputs[1]), std::vector<std::string>({"6.000000:1", "10.000000:0"}));
  EXPECT_EQ(result.outputs[2].name, "y");
  EXPECT_EQ(FloatsOf(result.outputs[2]), std::vector<float>({2, 6, 10, 4}));
  // Every stage ran once, each after the one that feeds it.
  ASSERT_EQ(result.stages.size(), 3u);
  EXPECT_EQ(result.stages[0].step, "first");
  EXPECT_EQ(result.stages[0].batch_size, 2);
  EXPECT_EQ(result.stages[0].items, 2);
  for (const StageTiming& stage : result.stages) {
    EXPECT_LE(stage.start_unix_us, stage.end_unix_us) << stage.step;
    if (stage.step != "first") {
      EXPECT_GE(stage.start_unix_us, result.stages[0].end_unix_us) << stage.step;
    }
  }
  const PipelineStats stats = pipeline->Stats();
  EXPECT_EQ(stats.requests, 1);
  EXPECT_EQ(stats.failures, 0);
  EXPECT_EQ(stats.inside, 0);
  ASSERT_EQ(stats.stages.size(), 3u);
  EXPECT_EQ(stats.stages[0].kind, "model m1 (tensor)");
  EXPECT_EQ(stats.stages[0].max_inflight, 8);  // the default: two batches of 4
  for (const StageStats& stage : stats.stages) EXPECT_EQ(stage.requests, 1) << stage.step;
}

TEST(PipelineTest, SplitsRowsPastTheModelsBatchInOrderAndSkipsItForNone) {
  Answers answers;
  FakeModel m1("m1");
  FakeModel m2("m2");
  std::shared_ptr<Pipeline> pipeline = MakePipeline(ChainSpec(), ResolverOf({&m1, &m2}));
  ASSERT_NE(pipeline, nullptr);
  PipelineRequest six;
  six.inputs.push_back(Floats("x", {6, 1}, {1, 2, 3, 4, 5, 6}));
  SubmitOk(*pipeline, std::move(six), answers.For("six"));
  PipelineRequest none;
  none.inputs.push_back(Floats("x", {0, 1}, {}));
  SubmitOk(*pipeline, std::move(none), answers.For("none"));
  ASSERT_TRUE(answers.WaitFor(2));
  const PipelineResult six_result = answers.Get("six");
  ASSERT_TRUE(six_result.status.ok()) << six_result.status.ToString();
  EXPECT_EQ(six_result.outputs[0].shape, std::vector<int64_t>({6, 1}));
  EXPECT_EQ(FloatsOf(six_result.outputs[0]), std::vector<float>({4, 8, 12, 16, 20, 24}));
  // max_batch_size 4: rows 4 and 2, each model twice.
  std::vector<int64_t> rows;
  for (const FakeModel::Call& call : m1.calls()) rows.push_back(call.rows);
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, std::vector<int64_t>({2, 4}));
  EXPECT_EQ(m2.calls().size(), 2u);
  const PipelineResult none_result = answers.Get("none");
  ASSERT_TRUE(none_result.status.ok()) << none_result.status.ToString();
  ASSERT_EQ(none_result.outputs.size(), 1u);
  EXPECT_EQ(none_result.outputs[0].shape[0], 0);
}

// (b) A two-stage chain with one request per stage: B runs in the first stage while A runs in
// the second; with the pipeline's max_inflight 1 B waits until A has left.
TEST(PipelineTest, RequestsOverlapAcrossStagesUnlessThePipelineTakesOne) {
  for (const int64_t max_inflight : {int64_t{32}, int64_t{1}}) {
    SCOPED_TRACE("pipeline max_inflight " + std::to_string(max_inflight));
    Answers answers;
    FakeModel m1("m1", 80ms);
    FakeModel m2("m2", 80ms);
    PipelineSpec spec = ChainSpec(1, 1);
    spec.max_inflight = max_inflight;
    std::shared_ptr<Pipeline> pipeline = MakePipeline(spec, ResolverOf({&m1, &m2}));
    ASSERT_NE(pipeline, nullptr);
    SubmitOk(*pipeline, RequestOf(1), answers.For("A"));
    SubmitOk(*pipeline, RequestOf(2), answers.For("B"));
    ASSERT_TRUE(answers.WaitFor(2));
    const PipelineResult a = answers.Get("A");
    const PipelineResult b = answers.Get("B");
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    EXPECT_EQ(FloatsOf(a.outputs[0]), std::vector<float>({4}));
    EXPECT_EQ(FloatsOf(b.outputs[0]), std::vector<float>({8}));
    ASSERT_EQ(a.stages.size(), 2u);
    ASSERT_EQ(b.stages.size(), 2u);
    const StageTiming& a_second = a.stages[1];
    const StageTiming& b_first = b.stages[0];
    const int64_t overlap_us = std::min(a_second.end_unix_us, b_first.end_unix_us) -
                               std::max(a_second.start_unix_us, b_first.start_unix_us);
    if (max_inflight > 1) {
      EXPECT_GT(overlap_us, 30000) << "B's first stage should run while A is in the second";
    } else {
      EXPECT_GE(b_first.start_unix_us, a_second.end_unix_us) << "B entered before A left";
      EXPECT_GT(b.admission_seconds, 0.1);
    }
  }
}

// (c) Priority inversion at a queue: a critical request overtakes the low ones still waiting.
TEST(PipelineTest, AHigherPriorityOvertakesTheWaitingLowerOnes) {
  Answers answers;
  FakeModel slow("slow", 30ms);
  std::shared_ptr<Pipeline> pipeline = OneAtATime(slow);
  ASSERT_NE(pipeline, nullptr);
  for (int i = 0; i < 4; ++i) {
    SubmitOk(*pipeline, RequestOf(float(i), 0), answers.For("low" + std::to_string(i)));
  }
  SubmitOk(*pipeline, RequestOf(9, 3), answers.For("critical"));
  ASSERT_TRUE(answers.WaitFor(5));
  const std::vector<std::string> order = answers.order();
  // low0 was already running; every other low one waited behind the critical one.
  EXPECT_EQ(order[0], "low0");
  EXPECT_EQ(order[1], "critical");
  EXPECT_EQ(order[2], "low1");  // then the oldest first
  const std::vector<FakeModel::Call> calls = slow.calls();
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(calls[1].first, 9);
  EXPECT_EQ(calls[1].priority, 3);  // the class reaches the model
}

TEST(PipelineTest, WithinAClassTheEarliestDeadlineGoesFirstAndAPassedOneIsRefused) {
  Answers answers;
  FakeModel slow("slow", 40ms);
  std::shared_ptr<Pipeline> pipeline = OneAtATime(slow);
  ASSERT_NE(pipeline, nullptr);
  SubmitOk(*pipeline, RequestOf(0), answers.For("busy"));
  PipelineRequest late = RequestOf(1);
  late.deadline = Clock::now() + 10s;
  SubmitOk(*pipeline, std::move(late), answers.For("late"));
  PipelineRequest early = RequestOf(2);
  early.deadline = Clock::now() + 5s;
  SubmitOk(*pipeline, std::move(early), answers.For("early"));
  PipelineRequest expiring = RequestOf(3);
  expiring.deadline = Clock::now() + 5ms;  // passes while "busy" runs
  SubmitOk(*pipeline, std::move(expiring), answers.For("expiring"));
  ASSERT_TRUE(answers.WaitFor(4));
  const std::vector<std::string> order = answers.order();
  const auto at = [&](const std::string& tag) {
    return std::find(order.begin(), order.end(), tag) - order.begin();
  };
  EXPECT_LT(at("early"), at("late"));
  const PipelineResult expired = answers.Get("expiring");
  EXPECT_EQ(expired.status.code(), StatusCode::kResourceExhausted) << expired.status.ToString();
  EXPECT_TRUE(Contains(expired.status.message(), "deadline")) << expired.status.message();
  EXPECT_EQ(slow.calls().size(), 3u);
}

// (d) A slow second stage holds the first back: the first stage starts a request only while
// the second's queue has room, so what waits in the second never passes its max_inflight.
TEST(PipelineTest, ASlowStageHoldsBackTheOneBeforeIt) {
  Answers answers;
  FakeModel fast("m1", 5ms);
  FakeModel slow("m2", 30ms);
  std::shared_ptr<Pipeline> pipeline = MakePipeline(ChainSpec(1, 1), ResolverOf({&fast, &slow}));
  ASSERT_NE(pipeline, nullptr);
  constexpr int kRequests = 6;
  for (int i = 0; i < kRequests; ++i) {
    SubmitOk(*pipeline, RequestOf(float(i)), answers.For("r" + std::to_string(i)));
  }
  int64_t most_waiting_second = 0;
  bool held_back = false;  // the first stage idle with requests waiting for it
  int samples = 0;
  while (answers.count() < kRequests && samples < 5000) {
    const PipelineStats stats = pipeline->Stats();
    const StageStats& first = stats.stages[0];
    const StageStats& second = stats.stages[1];
    most_waiting_second = std::max(most_waiting_second, second.waiting);
    EXPECT_LE(second.waiting, second.max_inflight);
    // What the first stage has ahead of the second: at most the second's room.
    EXPECT_LE(second.waiting + first.running, first.max_inflight + second.max_inflight - 1);
    if (first.waiting > 0 && first.running == 0 && second.running == second.max_inflight) {
      held_back = true;
    }
    ++samples;
    std::this_thread::sleep_for(500us);
  }
  ASSERT_TRUE(answers.WaitFor(kRequests));
  EXPECT_TRUE(held_back) << "the first stage never waited for the second";
  EXPECT_EQ(most_waiting_second, 1);
  for (int i = 0; i < kRequests; ++i) {
    const PipelineResult result = answers.Get("r" + std::to_string(i));
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    EXPECT_EQ(FloatsOf(result.outputs[0]), std::vector<float>({4.0f * float(i)}));
  }
}

// (e) Past max_inflight inside and max_queue waiting, Submit refuses at once.
TEST(PipelineTest, RefusesSubmitsPastMaxInflightAndMaxQueue) {
  Answers answers;
  FakeModel slow("slow", 40ms);
  PipelineSpec spec = OneStepSpec("slow", 0);
  spec.max_inflight = 1;
  spec.max_queue = 2;
  std::shared_ptr<Pipeline> pipeline = MakePipeline(spec, ResolverOf({&slow}));
  ASSERT_NE(pipeline, nullptr);
  for (int i = 0; i < 3; ++i) SubmitOk(*pipeline, RequestOf(float(i)), answers.For("ok"));
  PipelineStats stats = pipeline->Stats();
  EXPECT_EQ(stats.inside, 1);
  EXPECT_EQ(stats.waiting, 2);
  Result<uint64_t> refused = pipeline->Submit(RequestOf(9), answers.For("refused"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(refused.status().message(), "pipeline one")) << refused.status().message();
  EXPECT_EQ(pipeline->Stats().refused, 1);
  ASSERT_TRUE(answers.WaitFor(3));
  EXPECT_FALSE(answers.Has("refused"));
  // Room again once they are done.
  SubmitOk(*pipeline, RequestOf(4), answers.For("later"));
  ASSERT_TRUE(answers.WaitFor(4));
}

// (f) A failing step ends the request with its code, the message naming pipeline and step.
TEST(PipelineTest, AFailingStepEndsTheRequestNamingPipelineAndStep) {
  Answers answers;
  FakeModel m1("m1");
  FakeModel m2("m2");
  m2.Fail(UnavailableError("the device is lost"));
  std::shared_ptr<Pipeline> pipeline = MakePipeline(ChainSpec(), ResolverOf({&m1, &m2}));
  ASSERT_NE(pipeline, nullptr);
  SubmitOk(*pipeline, RequestOf(1), answers.For("a"));
  ASSERT_TRUE(answers.WaitFor(1));
  const PipelineResult result = answers.Get("a");
  EXPECT_EQ(result.status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(result.status.message(), "pipeline chain, step second: "))
      << result.status.message();
  EXPECT_TRUE(Contains(result.status.message(), "the device is lost")) << result.status.message();
  EXPECT_TRUE(result.outputs.empty());
  EXPECT_EQ(result.stages.size(), 2u);
  const PipelineStats stats = pipeline->Stats();
  EXPECT_EQ(stats.failures, 1);
  EXPECT_EQ(stats.stages[0].failures, 0);
  EXPECT_EQ(stats.stages[1].failures, 1);
  EXPECT_EQ(stats.inside, 0);
}

TEST(PipelineTest, AModelGoneAtRequestTimeFailsNamingTheStep) {
  Answers answers;
  FakeModel m1("m1");
  FakeModel m2("m2");
  std::atomic<bool> m2_gone{false};
  ModelResolver models = [&](std::string_view name) -> Result<ModelAccess> {
    if (name == "m2" && m2_gone.load()) return UnavailableError("model 'm2' is unloading");
    return ResolverOf({&m1, &m2})(name);
  };
  std::shared_ptr<Pipeline> pipeline = MakePipeline(ChainSpec(), models);
  ASSERT_NE(pipeline, nullptr);
  m2_gone = true;
  SubmitOk(*pipeline, RequestOf(1), answers.For("a"));
  ASSERT_TRUE(answers.WaitFor(1));
  const Status status = answers.Get("a").status;
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(status.message(), "pipeline chain, step second: model 'm2' is unloading"))
      << status.message();
}

// (g) Cancel of a request waiting at a queue answers it at once and it never runs.
TEST(PipelineTest, CancelOfAWaitingRequestAnswersAtOnce) {
  Answers answers;
  FakeModel slow("slow", 60ms);
  std::shared_ptr<Pipeline> pipeline = OneAtATime(slow);
  ASSERT_NE(pipeline, nullptr);
  SubmitOk(*pipeline, RequestOf(1), answers.For("running"));
  const uint64_t waiting = SubmitOk(*pipeline, RequestOf(2), answers.For("waiting"));
  pipeline->Cancel(waiting);
  ASSERT_TRUE(answers.Has("waiting")) << "Cancel did not answer the waiting request at once";
  const Status status = answers.Get("waiting").status;
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(status.message(), "cancelled")) << status.message();
  EXPECT_FALSE(answers.Has("running"));
  ASSERT_TRUE(answers.WaitFor(2));
  EXPECT_TRUE(answers.Get("running").status.ok());
  EXPECT_EQ(slow.calls().size(), 1u);
  pipeline->Cancel(waiting);  // already answered: nothing happens
  const PipelineStats stats = pipeline->Stats();
  EXPECT_EQ(stats.cancelled, 1);
  EXPECT_EQ(stats.requests, 2);
  EXPECT_EQ(stats.stages[0].waiting, 0);
}

// (g) Cancel of a running request ends it when its step is done; the next step never runs.
TEST(PipelineTest, CancelOfARunningRequestStopsItAfterItsStep) {
  Answers answers;
  FakeModel m1("m1", 50ms);
  FakeModel m2("m2");
  std::shared_ptr<Pipeline> pipeline = MakePipeline(ChainSpec(), ResolverOf({&m1, &m2}));
  ASSERT_NE(pipeline, nullptr);
  const uint64_t id = SubmitOk(*pipeline, RequestOf(1), answers.For("a"));
  ASSERT_TRUE(Eventually([&] { return pipeline->Stats().stages[0].running == 1; }));
  pipeline->Cancel(id);
  ASSERT_TRUE(answers.WaitFor(1));
  const Status status = answers.Get("a").status;
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_TRUE(Contains(status.message(), "cancelled")) << status.message();
  EXPECT_TRUE(m2.calls().empty());
  EXPECT_EQ(pipeline->Stats().cancelled, 1);
}

// (g) The request's own flag: a waiting request is dropped when its turn comes, a running one
// after its step.
TEST(PipelineTest, TheCancelledFlagDropsTheRequestAtTheNextQueue) {
  Answers answers;
  FakeModel m1("m1", 40ms);
  FakeModel m2("m2");
  std::shared_ptr<Pipeline> pipeline = MakePipeline(ChainSpec(1), ResolverOf({&m1, &m2}));
  ASSERT_NE(pipeline, nullptr);
  auto running_flag = std::make_shared<std::atomic<bool>>(false);
  auto waiting_flag = std::make_shared<std::atomic<bool>>(false);
  PipelineRequest running = RequestOf(1);
  running.cancelled = running_flag;
  SubmitOk(*pipeline, std::move(running), answers.For("running"));
  PipelineRequest waiting = RequestOf(2);
  waiting.cancelled = waiting_flag;
  SubmitOk(*pipeline, std::move(waiting), answers.For("waiting"));
  SubmitOk(*pipeline, RequestOf(3), answers.For("kept"));
  running_flag->store(true);
  waiting_flag->store(true);
  ASSERT_TRUE(answers.WaitFor(3));
  for (const char* tag : {"running", "waiting"}) {
    const Status status = answers.Get(tag).status;
    EXPECT_EQ(status.code(), StatusCode::kUnavailable) << tag << ": " << status.ToString();
    EXPECT_TRUE(Contains(status.message(), "cancelled")) << tag << ": " << status.message();
  }
  const PipelineResult kept = answers.Get("kept");
  ASSERT_TRUE(kept.status.ok()) << kept.status.ToString();
  EXPECT_EQ(FloatsOf(kept.outputs[0]), std::vector<float>({12}));
  // m1 ran "running" and "kept", never "waiting"; m2 only "kept".
  std::vector<float> firsts;
  for (const FakeModel::Call& call : m1.calls()) firsts.push_back(call.first);
  EXPECT_EQ(firsts, std::vector<float>({1, 3}));
  ASSERT_EQ(m2.calls().size(), 1u);
  EXPECT_EQ(m2.calls()[0].first, 6);
  EXPECT_EQ(pipeline->Stats().cancelled, 2);
}

// (h) Submit checks the inputs against the declared ones before queueing anything.
TEST(PipelineTest, SubmitRefusesInputsThatDoNotMatchNamingThem) {
  Answers answers;
  FakeModel m1("m1");
  FakeModel m2("m2");
  std::shared_ptr<Pipeline> pipeline = MakePipeline(ChainSpec(), ResolverOf({&m1, &m2}));
  ASSERT_NE(pipeline, nullptr);
  const auto error_of = [&](std::vector<HostTensor> inputs) {
    PipelineRequest request;
    request.inputs = std::move(inputs);
    Result<uint64_t> id = pipeline->Submit(std::move(request), answers.For("never"));
    EXPECT_FALSE(id.ok());
    if (id.ok()) return std::string();
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << id.status().ToString();
    EXPECT_TRUE(Contains(id.status().message(), "pipeline chain")) << id.status().message();
    return id.status().message();
  };
  std::string error = error_of({Floats("w", {1, 1}, {1})});
  EXPECT_TRUE(Contains(error, "no input 'w'")) << error;
  EXPECT_TRUE(Contains(error, "its inputs: x")) << error;
  error = error_of({Texts("x", {"1"})});
  EXPECT_TRUE(Contains(error, "'x' is FP32, got BYTES")) << error;
  error = error_of({});
  EXPECT_TRUE(Contains(error, "needs its input 'x'")) << error;
  error = error_of({Floats("x", {2}, {1, 2})});
  EXPECT_TRUE(Contains(error, "'x' has shape")) << error;
  error = error_of({Floats("x", {2, 2}, {1, 2, 3})});
  EXPECT_TRUE(Contains(error, "holds 12 bytes")) << error;
  error = error_of({Floats("x", {1, 1}, {1}), Floats("x", {1, 1}, {2})});
  EXPECT_TRUE(Contains(error, "given twice")) << error;
  EXPECT_EQ(answers.count(), 0u);
  EXPECT_TRUE(m1.calls().empty());
  EXPECT_EQ(pipeline->Stats().requests, 0);
}

// (i) Create checks the chain against what each step takes and gives.
TEST(PipelineTest, CreateRefusesAChainThatCannotRunNamingStepAndPort) {
  Answers answers;
  FakeModel m1("m1");
  FakeModel m2("m2");
  const ModelResolver models = ResolverOf({&m1, &m2});

  PipelineSpec no_port = ChainSpec();
  no_port.steps[0].inputs = {{"q", "x"}};
  Status status = CreateError(no_port, models);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(), "(first)")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "has no input 'q' (its inputs: x)")) << status.message();

  PipelineSpec no_output = ChainSpec();
  no_output.steps[1].outputs = {{"w", "z"}};
  status = CreateError(no_output, models);
  EXPECT_TRUE(Contains(status.message(), "has no output 'w'")) << status.message();

  PipelineSpec unbound = ChainSpec();
  unbound.steps[1].inputs.clear();
  status = CreateError(unbound, models);
  EXPECT_TRUE(Contains(status.message(), "(second)")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "needs its input 'x' bound")) << status.message();

  PipelineSpec wrong_type = ChainSpec();
  wrong_type.inputs[0].type = ElementType::kBytes;
  status = CreateError(wrong_type, models);
  EXPECT_TRUE(Contains(status.message(), "(first).inputs.x")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "'x' is BYTES tensor")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "takes FP32 tensor")) << status.message();

  PipelineSpec wrong_output = ChainSpec();
  wrong_output.outputs[0].type = ElementType::kBytes;
  status = CreateError(wrong_output, models);
  EXPECT_TRUE(Contains(status.message(), "pipelines[0] (chain).outputs")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "'z' is declared BYTES but its step gives FP32"))
      << status.message();

  // An image is no tensor: a processor's output of another kind cannot feed a model.
  PipelineSpec images =
      SpecOf("images", {{"bytes", ElementType::kBytes, {1}}}, {{"y", ElementType::kFp32, {-1, -1}}},
             {ProcessorStep("decode", "image", {{"bytes", "bytes"}}, {{"image", "page"}}),
              ModelStep("first", "m1", "page", "y")});
  status = CreateError(images, models);
  EXPECT_TRUE(Contains(status.message(), "'page' is images")) << status.message();

  PipelineSpec unknown = ChainSpec();
  unknown.steps[1].model = "m3";
  status = CreateError(unknown, models);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(status.message(), "(second).model")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "m3")) << status.message();

  PipelineSpec bad_key = ChainSpec();
  bad_key.steps[0].settings["temprature"] = 0.5;
  status = CreateError(bad_key, models);
  EXPECT_TRUE(Contains(status.message(), "has no key 'temprature'")) << status.message();
}

// Stop answers every request, waiting or running, and refuses later ones.
TEST(PipelineTest, StopAnswersWaitingRequestsAndRefusesNewOnes) {
  Answers answers;
  FakeModel slow("slow", 40ms);
  std::shared_ptr<Pipeline> pipeline = OneAtATime(slow);
  ASSERT_NE(pipeline, nullptr);
  SubmitOk(*pipeline, RequestOf(1), answers.For("running"));
  SubmitOk(*pipeline, RequestOf(2), answers.For("waiting"));
  pipeline->Stop();
  ASSERT_TRUE(answers.Has("waiting"));
  EXPECT_EQ(answers.Get("waiting").status.code(), StatusCode::kUnavailable);
  Result<uint64_t> later = pipeline->Submit(RequestOf(3), answers.For("later"));
  EXPECT_EQ(later.status().code(), StatusCode::kUnavailable);
  // The one running when Stop came is answered too, once its model is done.
  ASSERT_TRUE(answers.WaitFor(2)) << "the running request was never answered";
  EXPECT_TRUE(answers.Has("running"));
  EXPECT_EQ(pipeline->Stats().inside, 0);
}

}  // namespace
}  // namespace pier::pipelines
