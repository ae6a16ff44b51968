#include "pipelines/pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tensor_models/batch_tensors.h"

namespace pier::pipelines {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kSecondsBounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                     0.1,    0.2,   0.5,   1,     2,    5,    10};
constexpr double kBatchBounds[] = {1, 2, 4, 8, 16, 32, 64};

template <size_t N>
Buckets MakeBuckets(const double (&bounds)[N]) {
  Buckets b;
  b.bounds.assign(bounds, bounds + N);
  b.counts.assign(N + 1, 0);
  return b;
}

int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// There is no CANCELLED code: a cancelled request is UNAVAILABLE, as the tensor batcher's.
Status CancelledError(const std::string& message) {
  return UnavailableError("cancelled: " + message);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool TypeAccepts(const ValueType& port, const ValueType& value) {
  if (port.kind != value.kind) return false;
  if (port.kind != ValueKind::kTensor) return true;
  return !port.element.has_value() || !value.element.has_value() || *port.element == *value.element;
}

}  // namespace

struct Pipeline::Impl {
  struct Job {
    uint64_t id = 0;
    int priority = 1;
    Clock::time_point deadline;
    std::shared_ptr<const std::atomic<bool>> cancelled;
    bool cancel_requested = false;  // Cancel(id) came (it cannot set the caller's flag)
    std::string traceparent;
    std::function<void(const std::string&)> on_stage;
    Values values;                                  // by value name
    std::map<std::string, ExternalCharge> charges;  // by value name
    size_t step = 0;                                // the stage it waits for or runs in
    bool running = false;
    Clock::time_point submitted;
    Clock::time_point entered;   // the pipeline
    Clock::time_point enqueued;  // the current stage's queue
    Clock::time_point started;
    int64_t started_unix_us = 0;
    PipelineResult result;
    std::function<void(PipelineResult)> done;
  };
  using JobPtr = std::shared_ptr<Job>;

  struct Stage {
    std::unique_ptr<Step> step;
    const StepSpec* spec = nullptr;
    int64_t max_inflight = 2;
    int64_t running = 0;
    std::vector<JobPtr> waiting;
    // Values whose last reader is this stage (given back when it finishes).
    std::vector<std::string> last_reads;
    StageStats stats;
  };

  PipelineSpec spec;
  PipelineOptions options;
  OwnerId owner;
  bool has_owner = false;

  mutable std::mutex mutex;
  std::vector<Stage> stages;
  std::vector<JobPtr> entry;        // waiting to enter
  std::map<uint64_t, JobPtr> jobs;  // every job not finished
  int64_t inside = 0;
  uint64_t next_id = 1;
  bool stopping = false;
  PipelineStats totals;
  uint64_t held_bytes = 0;

  // The processors' threads.
  std::condition_variable work_cv;
  std::deque<std::function<void()>> work;
  std::vector<std::thread> threads;
  // Set once the threads have stopped: a model answering after Stop completes on its own
  // thread (Post), or its request would never be answered.
  bool threads_stopped = false;

  ~Impl() {
    StopThreads();
    // Every job has finished (each holds the Impl while a step runs it): nothing is charged.
    if (has_owner) options.governor->RemoveOwner(owner).IgnoreError();
  }

  void StopThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    work_cv.notify_all();
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
    threads.clear();
    std::deque<std::function<void()>> left;
    {
      std::lock_guard<std::mutex> lock(mutex);
      threads_stopped = true;
      left.swap(work);
    }
    for (auto& task : left) task();
  }

  // Runs `task` on the pipeline's threads, or here once they have stopped.
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!threads_stopped) {
        work.push_back(std::move(task));
        task = nullptr;
      }
    }
    if (task) {
      task();
    } else {
      work_cv.notify_one();
    }
  }

  void WorkLoop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        work_cv.wait(lock, [&] { return stopping || !work.empty(); });
        if (work.empty()) return;
        task = std::move(work.front());
        work.pop_front();
      }
      task();
    }
  }

  static bool Cancelled(const Job& job) {
    return job.cancel_requested || (job.cancelled != nullptr && job.cancelled->load());
  }

  static bool Before(const JobPtr& a, const JobPtr& b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    if (a->deadline != b->deadline) return a->deadline < b->deadline;
    return a->id < b->id;
  }

  static JobPtr PopBest(std::vector<JobPtr>* queue) {
    auto best = std::min_element(queue->begin(), queue->end(), Before);
    JobPtr job = *best;
    queue->erase(best);
    return job;
  }

  // Ends `job` (under the lock): it leaves every structure, its charges go back; the caller
  // calls the returned completion after unlocking.
  std::function<void()> FinishLocked(const JobPtr& job, Status status) {
    if (jobs.erase(job->id) == 0) return {};
    if (job->entered != Clock::time_point{}) --inside;
    for (auto& [name, charge] : job->charges) held_bytes -= charge.bytes();
    job->charges.clear();
    ++totals.requests;
    if (!status.ok()) {
      ++totals.failures;
      if (Cancelled(*job)) ++totals.cancelled;
    }
    job->result.status = std::move(status);
    if (job->result.status.ok()) {
      for (const PipelineTensor& out : spec.outputs) {
        HostTensor tensor = job->values.at(out.name)->tensor;
        tensor.name = out.name;
        job->result.outputs.push_back(std::move(tensor));
      }
    }
    job->values.clear();
    auto done = std::move(job->done);
    auto result = std::make_shared<PipelineResult>(std::move(job->result));
    return [done = std::move(done), result] { done(std::move(*result)); };
  }

  Status CheckTimely(const JobPtr& job, const Clock::time_point now) const {
    if (Cancelled(*job)) {
      return CancelledError("pipeline " + spec.name + ": nobody waits for the answer any more");
    }
    if (now > job->deadline) {
      return ResourceExhaustedError("pipeline " + spec.name + ", step " +
                                    stages[job->step].spec->name +
                                    ": the request waited past its deadline");
    }
    return Status::Ok();
  }

  // Starts what stage `s` may start now: up to its max_inflight, while the next stage's queue
  // has room (backpressure), each request checked for cancellation and its deadline first.
  void StartWaitingLocked(size_t s, Clock::time_point now,
                          std::vector<std::function<void()>>* after,
                          std::vector<std::pair<JobPtr, size_t>>* to_start) {
    Stage& stage = stages[s];
    while (stage.running < stage.max_inflight && !stage.waiting.empty()) {
      if (s + 1 < stages.size() &&
          static_cast<int64_t>(stages[s + 1].waiting.size()) >= stages[s + 1].max_inflight) {
        break;  // backpressure: the next stage's queue is full
      }
      JobPtr job = PopBest(&stage.waiting);
      if (Status timely = CheckTimely(job, now); !timely.ok()) {
        if (auto done = FinishLocked(job, std::move(timely))) after->push_back(std::move(done));
        continue;
      }
      ++stage.running;
      job->running = true;
      job->started = now;
      job->started_unix_us = UnixMicros();
      to_start->emplace_back(std::move(job), s);
    }
  }

  // Starts what may start now; returns the work to do outside the lock.
  void PumpLocked(std::vector<std::function<void()>>* after,
                  std::vector<std::pair<JobPtr, size_t>>* to_start) {
    if (stopping) return;
    const Clock::time_point now = Clock::now();
    // From the last stage back, so a stage's queue drains before the one above fills it.
    for (size_t s = stages.size(); s-- > 0;) StartWaitingLocked(s, now, after, to_start);
    // Then requests enter while there is room inside, and the first stage takes them.
    bool entered = false;
    while (inside < spec.max_inflight && !entry.empty()) {
      JobPtr job = PopBest(&entry);
      job->step = 0;
      if (Status timely = CheckTimely(job, now); !timely.ok()) {
        if (auto done = FinishLocked(job, std::move(timely))) after->push_back(std::move(done));
        continue;
      }
      ++inside;
      job->entered = now;
      job->result.admission_seconds = Seconds(now - job->submitted);
      job->enqueued = now;
      stages[0].waiting.push_back(job);
      entered = true;
    }
    if (entered) StartWaitingLocked(0, now, after, to_start);
  }

  void Pump(std::shared_ptr<Impl> self) {
    std::vector<std::function<void()>> after;
    std::vector<std::pair<JobPtr, size_t>> to_start;
    {
      std::lock_guard<std::mutex> lock(mutex);
      PumpLocked(&after, &to_start);
    }
    for (auto& done : after) done();
    for (auto& [job, s] : to_start) StartJob(self, job, s);
  }

  StepCall CallFor(const JobPtr& job, const Stage& stage) {
    StepCall call;
    for (const auto& [port, value] : stage.spec->inputs) call.inputs[port] = job->values.at(value);
    call.priority = job->priority;
    call.deadline = job->deadline;
    call.cancelled = job->cancelled;
    call.request_id = spec.name + "-" + std::to_string(job->id);
    call.traceparent = job->traceparent;
    return call;
  }

  void StartJob(const std::shared_ptr<Impl>& self, const JobPtr& job, size_t s) {
    StepCall call;
    {
      std::lock_guard<std::mutex> lock(mutex);
      call = CallFor(job, stages[s]);
    }
    Step* step = stages[s].step.get();
    if (job->on_stage) job->on_stage(stages[s].spec->name);
    if (step->synchronous()) {
      Post([self, job, s, call = std::move(call), step] {
        StepOutcome outcome = step->Run(call);
        self->Complete(self, job, s, std::move(outcome));
      });
      return;
    }
    // A model answers on its batcher's or engine's thread, which must not wait or call back
    // into the engine: the completion (which may start the next step) runs on ours.
    step->Start(std::move(call), [self, job, s](StepOutcome outcome) {
      auto shared = std::make_shared<StepOutcome>(std::move(outcome));
      self->Post([self, job, s, shared] { self->Complete(self, job, s, std::move(*shared)); });
    });
  }

  void Complete(const std::shared_ptr<Impl>& self, const JobPtr& job, size_t s,
                StepOutcome outcome) {
    std::vector<std::function<void()>> after;
    std::vector<std::pair<JobPtr, size_t>> to_start;
    {
      std::lock_guard<std::mutex> lock(mutex);
      Stage& stage = stages[s];
      --stage.running;
      job->running = false;
      const Clock::time_point now = Clock::now();
      StageTiming timing;
      timing.step = stage.spec->name;
      // A model step's wait in its model's own queue (its batcher's, its engine's) is queueing
      // too: at load it is most of the step's time, and the run itself is what is left.
      const double elapsed = Seconds(now - job->started);
      const double model_queue = std::clamp(outcome.model_queue_seconds, 0.0, elapsed);
      timing.queue_seconds = Seconds(job->started - job->enqueued) + model_queue;
      timing.compute_seconds = elapsed - model_queue;
      timing.start_unix_us = job->started_unix_us;
      timing.end_unix_us = UnixMicros();
      timing.batch_size = outcome.batch_size;
      ++stage.stats.requests;
      stage.stats.queue_seconds.Observe(timing.queue_seconds);
      stage.stats.compute_seconds.Observe(timing.compute_seconds);
      if (outcome.batch_size > 0) stage.stats.batch_size.Observe(double(outcome.batch_size));
      Status status = std::move(outcome.status);
      if (status.ok() && Cancelled(*job)) {
        status = CancelledError("nobody waits for the answer any more");
      }
      // Keep the outputs: each charged to the pipeline's owner.
      for (auto& [port, value] : outcome.outputs) {
        if (!status.ok()) break;
        auto bound = stage.spec->outputs.find(port);
        if (bound == stage.spec->outputs.end() || value == nullptr) continue;
        timing.items = std::max(timing.items, value->Items());
        if (has_owner) {
          MemoryResult<ExternalCharge> charge =
              options.governor->ChargeExternal(owner, std::max<uint64_t>(value->Bytes(), 1));
          if (!charge.ok()) {
            status = ResourceExhaustedError("the memory budget refused " +
                                            std::to_string(value->Bytes()) + " bytes for '" +
                                            bound->second + "': " + charge.status().message());
            break;
          }
          held_bytes += charge->bytes();
          job->charges[bound->second] = std::move(charge).value();
        }
        job->values[bound->second] = std::move(value);
      }
      stage.stats.items += timing.items;
      if (!job->traceparent.empty()) {
        spdlog::info(
            "pipeline {} step {}: queue {:.1f} ms, compute {:.1f} ms, {} ({}) "
            "traceparent={}",
            spec.name, stage.spec->name, timing.queue_seconds * 1e3, timing.compute_seconds * 1e3,
            status.ok() ? "ok" : "failed",
            status.ok() ? std::to_string(timing.items) + " items" : status.message(),
            job->traceparent);
      }
      job->result.stages.push_back(std::move(timing));
      if (!status.ok()) {
        ++stage.stats.failures;
        status = Status(status.code(), "pipeline " + spec.name + ", step " + stage.spec->name +
                                           ": " + status.message());
        if (auto done = FinishLocked(job, std::move(status))) after.push_back(std::move(done));
      } else {
        // Values nobody reads any more go back now.
        for (const std::string& name : stage.last_reads) {
          if (auto c = job->charges.find(name); c != job->charges.end()) {
            held_bytes -= c->second.bytes();
            job->charges.erase(c);
          }
          job->values.erase(name);
        }
        if (s + 1 == stages.size()) {
          if (auto done = FinishLocked(job, Status::Ok())) after.push_back(std::move(done));
        } else if (stopping) {
          if (auto done =
                  FinishLocked(job, UnavailableError("pipeline " + spec.name + " is stopping"))) {
            after.push_back(std::move(done));
          }
        } else if (jobs.count(job->id) > 0) {
          job->step = s + 1;
          job->enqueued = now;
          stages[s + 1].waiting.push_back(job);
        }
      }
      PumpLocked(&after, &to_start);
    }
    for (auto& done : after) done();
    for (auto& [next, stage_index] : to_start) StartJob(self, next, stage_index);
  }
};

Pipeline::Pipeline(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Pipeline::~Pipeline() { Stop(); }

const PipelineSpec& Pipeline::spec() const { return impl_->spec; }

Result<std::shared_ptr<Pipeline>> Pipeline::Create(PipelineSpec spec, PipelineOptions options) {
  auto impl = std::make_shared<Impl>();
  impl->spec = std::move(spec);
  impl->options = std::move(options);
  const PipelineSpec& s = impl->spec;
  // What each value is, as its producer declares it.
  std::map<std::string, ValueType> types;
  for (const PipelineTensor& in : s.inputs) types[in.name] = ValueType{ValueKind::kTensor, in.type};
  for (const StepSpec& step_spec : s.steps) {
    PIER_ASSIGN_OR_RETURN(std::unique_ptr<Step> step, MakeStep(step_spec, impl->options.models));
    for (const auto& [port, value] : step_spec.inputs) {
      auto declared = std::find_if(step->inputs().begin(), step->inputs().end(),
                                   [&](const PortSpec& p) { return p.name == port; });
      if (declared == step->inputs().end()) {
        std::string known;
        for (const PortSpec& p : step->inputs()) known += (known.empty() ? "" : ", ") + p.name;
        return InvalidArgumentError(step_spec.source + ".inputs: " + step->Describe() +
                                    " has no input '" + port + "' (its inputs: " + known + ")");
      }
      const ValueType& type = types.at(value);
      if (!TypeAccepts(declared->type, type)) {
        return InvalidArgumentError(step_spec.source + ".inputs." + port + ": '" + value + "' is " +
                                    ValueTypeText(type) + ", but " + step->Describe() + " takes " +
                                    ValueTypeText(declared->type) + " there");
      }
    }
    for (const PortSpec& p : step->inputs()) {
      if (!p.optional && step_spec.inputs.count(p.name) == 0) {
        return InvalidArgumentError(step_spec.source + ".inputs: " + step->Describe() +
                                    " needs its input '" + p.name + "' bound to a value");
      }
    }
    for (const auto& [port, value] : step_spec.outputs) {
      auto declared = std::find_if(step->outputs().begin(), step->outputs().end(),
                                   [&](const PortSpec& p) { return p.name == port; });
      if (declared == step->outputs().end()) {
        std::string known;
        for (const PortSpec& p : step->outputs()) known += (known.empty() ? "" : ", ") + p.name;
        return InvalidArgumentError(step_spec.source + ".outputs: " + step->Describe() +
                                    " has no output '" + port + "' (its outputs: " + known + ")");
      }
      types[value] = declared->type;
    }
    Impl::Stage stage;
    stage.spec = &step_spec;
    stage.max_inflight =
        step_spec.max_inflight > 0 ? step_spec.max_inflight : step->default_max_inflight();
    stage.stats.step = step_spec.name;
    stage.stats.kind = step->Describe();
    stage.stats.max_inflight = stage.max_inflight;
    stage.stats.queue_seconds = MakeBuckets(kSecondsBounds);
    stage.stats.compute_seconds = MakeBuckets(kSecondsBounds);
    stage.stats.batch_size = MakeBuckets(kBatchBounds);
    stage.step = std::move(step);
    impl->stages.push_back(std::move(stage));
  }
  for (const PipelineTensor& out : s.outputs) {
    const ValueType& type = types.at(out.name);
    if (type.kind != ValueKind::kTensor ||
        (type.element.has_value() && *type.element != out.type)) {
      return InvalidArgumentError(s.source + ".outputs: '" + out.name + "' is declared " +
                                  std::string(ElementTypeName(out.type)) + " but its step gives " +
                                  ValueTypeText(type));
    }
  }
  // The last stage that reads each value (pipeline outputs are kept to the end).
  std::map<std::string, size_t> last_read;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    for (const auto& [port, value] : s.steps[i].inputs) last_read[value] = i;
  }
  for (const PipelineTensor& out : s.outputs) last_read.erase(out.name);
  for (const auto& [value, i] : last_read) impl->stages[i].last_reads.push_back(value);
  if (impl->options.governor != nullptr) {
    PIER_ASSIGN_OR_RETURN(impl->owner,
                          impl->options.governor->AddOwner({.name = "pipeline:" + s.name}));
    impl->has_owner = true;
  }
  for (int64_t t = 0; t < s.threads; ++t) {
    impl->threads.emplace_back([raw = impl.get()] { raw->WorkLoop(); });
  }
  return std::shared_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

Result<uint64_t> Pipeline::Submit(PipelineRequest request,
                                  std::function<void(PipelineResult)> done) {
  Impl& impl = *impl_;
  const PipelineSpec& s = impl.spec;
  auto job = std::make_shared<Impl::Job>();
  for (HostTensor& tensor : request.inputs) {
    auto declared = std::find_if(s.inputs.begin(), s.inputs.end(),
                                 [&](const PipelineTensor& t) { return t.name == tensor.name; });
    if (declared == s.inputs.end()) {
      std::string known;
      for (const PipelineTensor& t : s.inputs) known += (known.empty() ? "" : ", ") + t.name;
      return InvalidArgumentError("pipeline " + s.name + " has no input '" + tensor.name +
                                  "' (its inputs: " + known + ")");
    }
    if (tensor.type != declared->type) {
      return InvalidArgumentError("pipeline " + s.name + ": input '" + tensor.name + "' is " +
                                  std::string(ElementTypeName(declared->type)) + ", got " +
                                  std::string(ElementTypeName(tensor.type)));
    }
    if (tensor.shape.size() != declared->shape.size()) {
      return InvalidArgumentError("pipeline " + s.name + ": input '" + tensor.name +
                                  "' has shape " + ShapeText(declared->shape) + ", got " +
                                  ShapeText(tensor.shape));
    }
    for (size_t d = 0; d < tensor.shape.size(); ++d) {
      if (declared->shape[d] >= 0 && declared->shape[d] != tensor.shape[d]) {
        return InvalidArgumentError("pipeline " + s.name + ": input '" + tensor.name +
                                    "' has shape " + ShapeText(declared->shape) + ", got " +
                                    ShapeText(tensor.shape));
      }
    }
    if (tensor.type == ElementType::kBytes) {
      PIER_RETURN_IF_ERROR(
          tensor_models::BytesElementOffsets(tensor.bytes, ElementCount(tensor.shape))
              .status()
              .WithContext("pipeline " + s.name + ": input '" + tensor.name + "'"));
    } else if (static_cast<int64_t>(tensor.bytes.size()) !=
               ElementCount(tensor.shape) * ElementSize(tensor.type)) {
      return InvalidArgumentError(
          "pipeline " + s.name + ": input '" + tensor.name + "' holds " +
          std::to_string(tensor.bytes.size()) + " bytes; its shape " + ShapeText(tensor.shape) +
          " needs " + std::to_string(ElementCount(tensor.shape) * ElementSize(tensor.type)));
    }
    if (job->values.count(tensor.name) > 0) {
      return InvalidArgumentError("pipeline " + s.name + ": input '" + tensor.name +
                                  "' is given twice");
    }
    auto value = std::make_shared<PipelineValue>();
    value->tensor = std::move(tensor);
    job->values[value->tensor.name] = std::move(value);
  }
  for (const PipelineTensor& in : s.inputs) {
    if (job->values.count(in.name) == 0) {
      return InvalidArgumentError("pipeline " + s.name + " needs its input '" + in.name + "'");
    }
  }
  job->priority = request.priority;
  job->deadline = request.deadline;
  job->cancelled = std::move(request.cancelled);
  job->traceparent = std::move(request.traceparent);
  job->on_stage = std::move(request.on_stage);
  job->done = std::move(done);
  job->submitted = Clock::now();
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    if (impl.stopping) return UnavailableError("pipeline " + s.name + " is stopping");
    if (static_cast<int64_t>(impl.entry.size()) >= s.max_queue && impl.inside >= s.max_inflight) {
      ++impl.totals.refused;
      return ResourceExhaustedError(
          "pipeline " + s.name + ": " + std::to_string(impl.entry.size()) +
          " requests wait to enter (the most is " + std::to_string(s.max_queue) + ")");
    }
    // Inputs are charged like every value.
    if (impl.has_owner) {
      for (auto& [name, value] : job->values) {
        MemoryResult<ExternalCharge> charge = impl.options.governor->ChargeExternal(
            impl.owner, std::max<uint64_t>(value->Bytes(), 1));
        if (!charge.ok()) {
          // The inputs charged before it go back with `job`; so must their count.
          for (const auto& [charged, c] : job->charges) impl.held_bytes -= c.bytes();
          return ResourceExhaustedError("pipeline " + s.name + ": the memory budget refused " +
                                        std::to_string(value->Bytes()) + " bytes for input '" +
                                        name + "': " + charge.status().message());
        }
        impl.held_bytes += charge->bytes();
        job->charges[name] = std::move(charge).value();
      }
    }
    id = impl.next_id++;
    job->id = id;
    impl.jobs[id] = job;
    impl.entry.push_back(job);
  }
  impl.Pump(impl_);
  return id;
}

void Pipeline::Cancel(uint64_t request_id) {
  Impl& impl = *impl_;
  std::function<void()> done;
  Step* running_step = nullptr;
  std::string step_request_id;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    auto it = impl.jobs.find(request_id);
    if (it == impl.jobs.end()) return;
    Impl::JobPtr job = it->second;
    job->cancel_requested = true;
    if (job->running) {
      running_step = impl.stages[job->step].step.get();
      step_request_id = impl.spec.name + "-" + std::to_string(job->id);
    } else {
      auto drop = [&](std::vector<Impl::JobPtr>* queue) {
        queue->erase(std::remove(queue->begin(), queue->end(), job), queue->end());
      };
      drop(&impl.entry);
      for (Impl::Stage& stage : impl.stages) drop(&stage.waiting);
      done = impl.FinishLocked(
          job, CancelledError("pipeline " + impl.spec.name + ": the request was cancelled"));
    }
  }
  if (done) done();
  if (running_step != nullptr) running_step->Cancel(step_request_id);
  impl.Pump(impl_);
}

PipelineStats Pipeline::Stats() const {
  const Impl& impl = *impl_;
  std::lock_guard<std::mutex> lock(impl.mutex);
  PipelineStats stats = impl.totals;
  stats.waiting = static_cast<int64_t>(impl.entry.size());
  stats.inside = impl.inside;
  stats.held_bytes = impl.held_bytes;
  for (const Impl::Stage& stage : impl.stages) {
    StageStats s = stage.stats;
    s.waiting = static_cast<int64_t>(stage.waiting.size());
    s.running = stage.running;
    stats.stages.push_back(std::move(s));
  }
  return stats;
}

void Pipeline::Stop() {
  Impl& impl = *impl_;
  std::vector<std::function<void()>> after;
  std::vector<Impl::JobPtr> waiting;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    if (impl.stopping && impl.threads.empty()) return;
    impl.stopping = true;
    for (auto& [id, job] : impl.jobs) {
      if (!job->running) waiting.push_back(job);
    }
    impl.entry.clear();
    for (Impl::Stage& stage : impl.stages) stage.waiting.clear();
    for (const Impl::JobPtr& job : waiting) {
      if (auto done = impl.FinishLocked(
              job, UnavailableError("pipeline " + impl.spec.name + " is stopping"))) {
        after.push_back(std::move(done));
      }
    }
  }
  for (auto& done : after) done();
  impl.StopThreads();
}

}  // namespace pier::pipelines
