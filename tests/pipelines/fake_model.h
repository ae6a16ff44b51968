// Test helpers for the pipeline executor (src/pipelines/pipeline.h) without ONNX: FakeModel, a
// tensor model (x FP32 [-1, -1] -> y FP32 [-1, -1], max_batch_size 4) answering y = x * 2
// on a thread of its own after a delay, recording each call; a ModelResolver over fake models;
// Answers, which collects the pipeline's completions in the order they came; and builders for
// specs and tensors.
//
// Thread-safety: FakeModel and Answers may be called from any thread. A FakeModel must outlive
// every request sent to it; its destructor joins its threads.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pipelines/pipeline.h"
#include "pipelines/step.h"

namespace pier::pipelines::testing {

using Clock = std::chrono::steady_clock;

inline HostTensor Floats(std::string name, std::vector<int64_t> shape,
                         const std::vector<float>& values) {
  HostTensor t;
  t.name = std::move(name);
  t.type = ElementType::kFp32;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

inline std::vector<float> FloatsOf(const HostTensor& t) {
  std::vector<float> values(t.bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), t.bytes.data(), values.size() * sizeof(float));
  return values;
}

inline HostTensor Texts(std::string name, const std::vector<std::string>& texts) {
  return TextValue(std::move(name), texts)->tensor;
}

inline std::vector<std::string> TextsIn(const HostTensor& t) {
  Result<std::vector<std::string>> texts = TextsOf(t);
  EXPECT_TRUE(texts.ok()) << texts.status().ToString();
  return texts.ok() ? *texts : std::vector<std::string>{};
}

class FakeModel {
 public:
  struct Call {
    Clock::time_point start;
    Clock::time_point end;
    float first = 0;  // x's first element: which request it was
    int64_t rows = 0;
    int priority = 0;
  };

  // max_batch_size 0: no batch dimension (a request's rows go to the model in one call).
  explicit FakeModel(std::string name, std::chrono::milliseconds delay = {},
                     int64_t max_batch_size = 4)
      : name_(std::move(name)), delay_(delay) {
    info_.inputs = {{"x", ElementType::kFp32, {-1, -1}}};
    info_.outputs = {{"y", ElementType::kFp32, {-1, -1}}};
    info_.max_batch_size = max_batch_size;
  }
  ~FakeModel() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  const std::string& name() const { return name_; }
  // Every later call answers `failure` (after the delay).
  void Fail(Status failure) {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = std::move(failure);
  }
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

  ModelAccess Access() {
    ModelAccess access;
    access.kind = ModelAccess::Kind::kTensor;
    access.id = name_;
    access.info = &info_;
    access.submit = [this](tensor_models::TensorRequest request,
                           std::function<void(tensor_models::TensorResult)> done) {
      std::lock_guard<std::mutex> lock(mutex_);
      threads_.emplace_back(
          [this, request = std::move(request), done = std::move(done)] { Run(request, done); });
      return Status::Ok();
    };
    access.metadata = [](std::string_view key) -> Result<std::string> {
      return NotFoundError("no metadata '" + std::string(key) + "'");
    };
    return access;
  }

 private:
  void Run(const tensor_models::TensorRequest& request,
           const std::function<void(tensor_models::TensorResult)>& done) {
    Call call;
    call.start = Clock::now();
    call.priority = request.priority;
    std::this_thread::sleep_for(delay_);
    tensor_models::TensorResult result;
    const HostTensor& x = request.inputs.at(0);
    call.rows = x.shape.empty() ? 0 : x.shape[0];
    std::vector<float> values = FloatsOf(x);
    if (!values.empty()) call.first = values[0];
    for (float& v : values) v *= 2;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      result.status = failure_;
    }
    if (result.status.ok()) {
      result.outputs.push_back(Floats("y", x.shape, values));
      result.batch_size = call.rows;
    }
    call.end = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      calls_.push_back(call);
    }
    done(std::move(result));
  }

  const std::string name_;
  const std::chrono::milliseconds delay_;
  tensor_models::TensorModelInfo info_;
  mutable std::mutex mutex_;
  Status failure_ = Status::Ok();
  std::vector<Call> calls_;
  std::vector<std::thread> threads_;
};

inline ModelResolver ResolverOf(std::vector<FakeModel*> models) {
  return [models](std::string_view name) -> Result<ModelAccess> {
    for (FakeModel* m : models) {
      if (m->name() == name) return m->Access();
    }
    return NotFoundError("there is no model '" + std::string(name) + "'");
  };
}

// The pipeline's answers by tag, and the order they came in.
class Answers {
 public:
  std::function<void(PipelineResult)> For(std::string tag) {
    return [this, tag](PipelineResult result) {
      std::lock_guard<std::mutex> lock(mutex_);
      order_.push_back(tag);
      results_[tag] = std::move(result);
      cv_.notify_all();
    };
  }
  // Waits (at most 5 s) until `count` answers have come.
  bool WaitFor(size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return order_.size() >= count; });
  }
  bool Has(const std::string& tag) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_.count(tag) > 0;
  }
  size_t count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_.size();
  }
  PipelineResult Get(const std::string& tag) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = results_.find(tag);
    EXPECT_NE(it, results_.end()) << "no answer for " << tag;
    return it == results_.end() ? PipelineResult{} : it->second;
  }
  std::vector<std::string> order() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> order_;
  std::map<std::string, PipelineResult> results_;
};

inline StepSpec ModelStep(std::string name, std::string model, std::string in, std::string out,
                          int64_t max_inflight = 0) {
  StepSpec step;
  step.name = std::move(name);
  step.model = std::move(model);
  step.inputs = {{"x", std::move(in)}};
  step.outputs = {{"y", std::move(out)}};
  step.max_inflight = max_inflight;
  step.source = "test.yaml: steps (" + step.name + ")";
  return step;
}

inline StepSpec ProcessorStep(std::string name, std::string processor,
                              std::map<std::string, std::string> inputs,
                              std::map<std::string, std::string> outputs,
                              nlohmann::ordered_json settings = nlohmann::ordered_json::object()) {
  StepSpec step;
  step.name = std::move(name);
  step.processor = std::move(processor);
  step.inputs = std::move(inputs);
  step.outputs = std::move(outputs);
  step.settings = std::move(settings);
  step.source = "test.yaml: steps (" + step.name + ")";
  return step;
}

inline PipelineSpec SpecOf(std::string name, std::vector<PipelineTensor> inputs,
                           std::vector<PipelineTensor> outputs, std::vector<StepSpec> steps) {
  PipelineSpec spec;
  spec.name = std::move(name);
  spec.inputs = std::move(inputs);
  spec.outputs = std::move(outputs);
  spec.steps = std::move(steps);
  spec.source = "test.yaml: pipelines[0] (" + spec.name + ")";
  return spec;
}

// x FP32 [-1, -1] -> first (m1: y = 2x) -> second (m2: z = 2y) -> z.
inline PipelineSpec ChainSpec(int64_t first_inflight = 0, int64_t second_inflight = 0) {
  return SpecOf("chain", {{"x", ElementType::kFp32, {-1, -1}}},
                {{"z", ElementType::kFp32, {-1, -1}}},
                {ModelStep("first", "m1", "x", "y", first_inflight),
                 ModelStep("second", "m2", "y", "z", second_inflight)});
}

// One request of one row [1, 1] holding `value`.
inline PipelineRequest RequestOf(float value, int priority = 1) {
  PipelineRequest request;
  request.inputs.push_back(Floats("x", {1, 1}, {value}));
  request.priority = priority;
  return request;
}

inline std::shared_ptr<Pipeline> MakePipeline(PipelineSpec spec, ModelResolver models,
                                              MemoryGovernor* governor = nullptr) {
  Result<std::shared_ptr<Pipeline>> pipeline =
      Pipeline::Create(std::move(spec), PipelineOptions{governor, std::move(models)});
  EXPECT_TRUE(pipeline.ok()) << pipeline.status().ToString();
  return pipeline.ok() ? *pipeline : nullptr;
}

// Pipeline::Create's refusal (which must come).
inline Status CreateError(PipelineSpec spec, ModelResolver models) {
  Result<std::shared_ptr<Pipeline>> pipeline =
      Pipeline::Create(std::move(spec), PipelineOptions{nullptr, std::move(models)});
  EXPECT_FALSE(pipeline.ok());
  return pipeline.ok() ? Status::Ok() : pipeline.status();
}

// Polls `condition` every millisecond for up to 5 s.
template <typename F>
bool Eventually(F condition) {
  const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return condition();
}

}  // namespace pier::pipelines::testing
