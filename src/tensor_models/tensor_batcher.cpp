#include "tensor_models/tensor_batcher.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <thread>
#include <utility>

#include "common/check.h"
#include "common/mutex.h"
#include "tensor_models/batch_tensors.h"

namespace pier::tensor_models {
namespace {

using Clock = std::chrono::steady_clock;

// How often the watcher looks at a running batch's cancellation flags and the queue.
constexpr std::chrono::milliseconds kCancelPoll{10};

constexpr double kItemsBounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
constexpr double kSecondsBounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                     0.05,   0.1,   0.2,   0.5,   1,    2};

Buckets MakeBuckets(std::span<const double> bounds) {
  Buckets b;
  b.bounds.assign(bounds.begin(), bounds.end());
  b.counts.assign(bounds.size() + 1, 0);
  return b;
}

// One request from Submit until its callback.
struct Pending {
  TensorRequest request;  // its inputs in the model's order
  std::function<void(TensorResult)> done;
  TensorResult result;
  Clock::time_point queued;
  int64_t items = 1;  // its batch (1 for max_batch_size 0)
  // Its shape group: each input's rank, then its dimensions after the first (-1 for each the
  // model pads, so that requests differing only there share a group).
  std::vector<int64_t> group;
  // The outputs it gets, as indexes into info.outputs, in the order asked.
  std::vector<size_t> wanted;
  // Its cancellation flag (null: it cannot be cancelled); set at Submit, then only read.
  std::shared_ptr<const std::atomic<bool>> cancelled;

  bool Cancelled() const {
    return cancelled != nullptr && cancelled->load(std::memory_order_relaxed);
  }
};

using PendingPtr = std::unique_ptr<Pending>;
using Queue = std::deque<PendingPtr>;  // in Submit order

// The next batch, decided over the queue without changing it (plan, then apply).
struct BatchPlan {
  bool ready = false;        // a batch goes now
  std::vector<size_t> take;  // its requests, as indexes into the queue, in batch order
  bool filled = false;       // it goes early: it reached a preferred size or the maximum
  Clock::time_point close;   // when its group's window ends
  Clock::time_point wake = Clock::time_point::max();  // not ready: when to plan again
};

BatchPlan PlanBatch(const Queue& queue, const TensorModelInfo& info,
                    std::chrono::milliseconds aging, std::chrono::microseconds window,
                    Clock::time_point now) {
  BatchPlan plan;
  if (queue.empty()) return plan;
  // Each request's class, raised one per `aging` waited.
  std::vector<int64_t> rank(queue.size());
  for (size_t i = 0; i < queue.size(); ++i) {
    const int64_t boost = aging.count() > 0 ? (now - queue[i]->queued) / aging : 0;
    rank[i] = queue[i]->request.priority + boost;
  }
  if (info.max_batch_size == 0) {
    // Nothing to batch: the highest class's oldest request goes alone, at once.
    size_t lead = 0;
    for (size_t i = 1; i < queue.size(); ++i) {
      if (rank[i] > rank[lead]) lead = i;
    }
    plan.ready = true;
    plan.take = {lead};
    plan.close = now;
    return plan;
  }
  struct Group {
    std::vector<size_t> members;  // in queue order
    int64_t items = 0;
    size_t lead = 0;  // its highest class's oldest request
    Clock::time_point close;
  };
  std::vector<Group> groups;  // in the order of their oldest request
  std::map<std::reference_wrapper<const std::vector<int64_t>>, size_t,
           std::less<std::vector<int64_t>>>
      index;
  for (size_t i = 0; i < queue.size(); ++i) {
    auto [at, added] = index.try_emplace(std::cref(queue[i]->group), groups.size());
    if (added) {
      groups.push_back({.members = {}, .items = 0, .lead = i, .close = queue[i]->queued + window});
    }
    Group& g = groups[at->second];
    g.members.push_back(i);
    g.items += queue[i]->items;
    if (rank[i] > rank[g.lead]) g.lead = i;
  }
  const int64_t max = info.max_batch_size;
  // Whether `items` reach a preferred size (within the maximum).
  const auto reaches_preferred = [&](int64_t items) {
    for (int64_t p : info.preferred_batch_sizes) {
      if (p <= max && p <= items) return true;
    }
    return false;
  };
  const Group* chosen = nullptr;
  for (const Group& g : groups) {
    const bool ready = g.items >= max || reaches_preferred(g.items) || now >= g.close;
    if (!ready) {
      plan.wake = std::min(plan.wake, g.close);
      continue;
    }
    if (chosen == nullptr || rank[g.lead] > rank[chosen->lead]) chosen = &g;
  }
  if (chosen == nullptr) {
    // Wake for the first window to end, or the first deadline to pass (to refuse it then).
    for (const PendingPtr& p : queue) plan.wake = std::min(plan.wake, p->request.deadline);
    return plan;
  }
  const Group& g = *chosen;
  plan.ready = true;
  plan.close = g.close;
  // Higher classes first, FIFO within a class (the lead comes first); a request that does not
  // fit waits, and smaller ones behind it may fill the batch.
  std::vector<size_t> order = g.members;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rank[a] > rank[b]; });
  const auto fill = [&](int64_t target, std::vector<size_t>* take) {
    int64_t items = 0;
    for (size_t i : order) {
      if (items + queue[i]->items > target && !take->empty()) continue;
      take->push_back(i);
      items += queue[i]->items;
    }
    return items;
  };
  // Before its window ends a group goes because it reached the maximum or a preferred size:
  // then it takes the largest preferred size its requests make up exactly, and the rest waits
  // for the next batch. Otherwise (or when no preferred size can be made up exactly) it takes
  // what fits in the maximum.
  plan.filled = now < g.close;
  if (plan.filled && g.items < max) {
    std::vector<int64_t> sizes = info.preferred_batch_sizes;
    std::sort(sizes.rbegin(), sizes.rend());
    for (int64_t size : sizes) {
      if (size > g.items || size > max) continue;
      std::vector<size_t> take;
      if (fill(size, &take) == size) {
        plan.take = std::move(take);
        return plan;
      }
    }
  }
  fill(max, &plan.take);
  return plan;
}

// Calls each request's callback once and frees the request right after, so whatever it holds
// is released here.
void FinishAll(std::vector<PendingPtr>& finished) {
  for (PendingPtr& p : finished) {
    std::function<void(TensorResult)> done = std::move(p->done);
    p->done = nullptr;
    if (done) done(std::move(p->result));
    p.reset();
  }
  finished.clear();
}

bool AllCancelled(const std::vector<std::shared_ptr<const std::atomic<bool>>>& flags) {
  if (flags.empty()) return false;
  for (const auto& flag : flags) {
    if (flag == nullptr || !flag->load(std::memory_order_relaxed)) return false;
  }
  return true;
}

}  // namespace

Status CancelledError(const std::string& model) {
  return UnavailableError("cancelled: nobody waits for the answer from model '" + model +
                          "' any more");
}

struct TensorBatcher::Impl {
  const std::string model;
  const TensorModelInfo info;
  BatchExecutor& executor;
  const TensorBatcherOptions options;

  Mutex mutex;
  std::condition_variable wake;   // the batching thread: a request queued, or stopping
  std::condition_variable watch;  // the watcher: a batch started, or stopping
  Queue queue PIER_GUARDED_BY(mutex);
  int64_t queued_items PIER_GUARDED_BY(mutex) = 0;
  bool stopping PIER_GUARDED_BY(mutex) = false;
  std::chrono::microseconds window PIER_GUARDED_BY(mutex);
  // The running batch: whether one runs, its requests' cancellation flags, and whether the
  // watcher has asked the executor to stop it.
  bool running PIER_GUARDED_BY(mutex) = false;
  std::vector<std::shared_ptr<const std::atomic<bool>>> running_flags PIER_GUARDED_BY(mutex);
  bool stop_sent PIER_GUARDED_BY(mutex) = false;
  TensorRunnerStats stats PIER_GUARDED_BY(mutex);
  std::thread batching;
  std::thread watcher;

  Impl(std::string m, TensorModelInfo i, BatchExecutor& e, TensorBatcherOptions o)
      : model(std::move(m)),
        info(std::move(i)),
        executor(e),
        options(o),
        window(o.max_queue_delay) {
    PIER_CHECK(info.max_batch_size >= 0, "a negative max_batch_size");
    PIER_CHECK(options.pads.empty() || options.pads.size() == info.inputs.size(),
               "a pad rule per input of the model");
    for (size_t i = 0; i < options.pads.size(); ++i) {
      PIER_CHECK(options.pads[i].padded.size() == info.inputs[i].shape.size(),
                 "a pad rule of the input's rank");
    }
    stats.batch_items = MakeBuckets(kItemsBounds);
    stats.queue_seconds = MakeBuckets(kSecondsBounds);
    stats.compute_seconds = MakeBuckets(kSecondsBounds);
    batching = std::thread([this] { BatchLoop(); });
    watcher = std::thread([this] { WatchLoop(); });
  }

  // Takes the queued requests that nobody waits for any more or that are past their deadline
  // out of the queue, their results set.
  std::vector<PendingPtr> TakeUnwanted(Clock::time_point now) PIER_REQUIRES(mutex) {
    std::vector<PendingPtr> taken;
    for (PendingPtr& p : queue) {
      if (p->Cancelled()) {
        p->result.status = CancelledError(model);
        ++stats.cancelled;
      } else if (now >= p->request.deadline) {
        p->result.status = ResourceExhaustedError(
            "model '" + model +
            "': the request waited past its deadline before a batch could take it");
        ++stats.expired;
      } else {
        continue;
      }
      queued_items -= p->items;
      taken.push_back(std::move(p));
    }
    if (!taken.empty()) std::erase_if(queue, [](const PendingPtr& p) { return p == nullptr; });
    return taken;
  }

  // Takes `plan.take` out of the queue, in that order.
  std::vector<PendingPtr> TakeBatch(const BatchPlan& plan) PIER_REQUIRES(mutex) {
    std::vector<PendingPtr> batch;
    for (size_t i : plan.take) {
      queued_items -= queue[i]->items;
      batch.push_back(std::move(queue[i]));
    }
    std::erase_if(queue, [](const PendingPtr& p) { return p == nullptr; });
    return batch;
  }

  void BatchLoop() {
    MutexLock lock(mutex);
    while (true) {
      lock.Wait(wake, [&]() PIER_REQUIRES(mutex) { return stopping || !queue.empty(); });
      if (stopping) break;
      const Clock::time_point now = Clock::now();
      std::vector<PendingPtr> dropped = TakeUnwanted(now);
      if (!dropped.empty()) {
        lock.Unlock();
        FinishAll(dropped);
        lock.Lock();
        continue;
      }
      const BatchPlan plan = PlanBatch(queue, info, options.aging, window, now);
      if (!plan.ready) {
        // Until a window ends or a deadline passes; a Submit or stopping wakes it earlier.
        lock.WaitUntil(wake, plan.wake);
        continue;
      }
      std::vector<PendingPtr> batch = TakeBatch(plan);
      // Adapt the window: a batch that filled early doubles it, a lone one halves it.
      if (options.adaptive_window && info.max_batch_size > 0) {
        if (plan.filled) {
          window = std::min(options.max_queue_delay,
                            std::max(window * 2, std::chrono::microseconds(500)));
        } else if (queue.empty()) {
          window = window / 2;
        }
      }
      running = true;
      stop_sent = false;
      running_flags.clear();
      for (const PendingPtr& p : batch) {
        running_flags.push_back(p->cancelled);
        stats.running_items += p->items;
      }
      lock.Unlock();
      watch.notify_all();
      RunBatch(batch);
      lock.Lock();
    }
    // Shutting down: fail what waits.
    std::vector<PendingPtr> left;
    for (PendingPtr& p : queue) {
      p->result.status = UnavailableError("model '" + model + "' is shutting down");
      left.push_back(std::move(p));
    }
    queue.clear();
    queued_items = 0;
    lock.Unlock();
    FinishAll(left);
  }

  // Runs `batch` (taken out of the queue) and answers its requests.
  void RunBatch(std::vector<PendingPtr>& batch) PIER_EXCLUDES(mutex) {
    int64_t items = 0;
    for (const PendingPtr& p : batch) items += p->items;
    std::vector<HostTensor> inputs;
    if (batch.size() == 1) {
      inputs = std::move(batch[0]->request.inputs);
    } else {
      inputs.reserve(info.inputs.size());
      std::vector<const HostTensor*> parts(batch.size());
      for (size_t i = 0; i < info.inputs.size(); ++i) {
        bool differ = false;  // only along padded dimensions (the group says so)
        for (size_t r = 0; r < batch.size(); ++r) {
          parts[r] = &batch[r]->request.inputs[i];
          differ = differ || !std::equal(parts[r]->shape.begin() + 1, parts[r]->shape.end(),
                                         parts[0]->shape.begin() + 1);
        }
        // [items, ...], the largest of each padded dimension when they differ
        inputs.push_back(differ ? ConcatenatePadded(parts, options.pads[i].element)
                                : ConcatenateBatch(parts));
      }
      for (PendingPtr& p : batch) p->request.inputs = {};
    }
    const Clock::time_point start = Clock::now();
    Result<std::vector<HostTensor>> outputs = executor.Run(std::move(inputs));
    const double compute = std::chrono::duration<double>(Clock::now() - start).count();
    Status status = outputs.status();
    if (status.ok()) status = Answer(batch, *outputs, items);
    {
      MutexLock lock(mutex);
      if (stop_sent) {
        status = CancelledError(model);
        stats.cancelled += static_cast<int64_t>(batch.size());
      }
      running = false;
      stop_sent = false;
      running_flags.clear();
      // The figures before the answers, so a client that has its answer sees its batch counted.
      stats.running_items = 0;
      ++stats.batches;
      stats.items += items;
      stats.requests += static_cast<int64_t>(batch.size());
      stats.batch_items.Observe(static_cast<double>(items));
      stats.compute_seconds.Observe(compute);
      for (const PendingPtr& p : batch) {
        stats.queue_seconds.Observe(std::chrono::duration<double>(start - p->queued).count());
      }
    }
    for (PendingPtr& p : batch) {
      TensorResult& r = p->result;
      r.status = status;
      if (!status.ok()) r.outputs.clear();
      r.batch_size = items;
      r.queue_seconds = std::chrono::duration<double>(start - p->queued).count();
      r.compute_seconds = compute;
    }
    FinishAll(batch);
  }

  // Hands each request of `batch` the outputs it asked for: its own rows of each, or for a
  // batch of one the outputs themselves. INTERNAL when the outputs do not match the model.
  Status Answer(std::vector<PendingPtr>& batch, std::vector<HostTensor>& outputs, int64_t items) {
    const std::string prefix = "model '" + model + "': ";
    if (outputs.size() != info.outputs.size()) {
      return InternalError(prefix + "the run gave " + std::to_string(outputs.size()) +
                           " outputs; the model declares " + std::to_string(info.outputs.size()));
    }
    const bool batchable = info.max_batch_size > 0;
    // Checks output `o` and names it as the model does.
    const auto check = [&](size_t o) {
      HostTensor& out = outputs[o];
      const TensorSpec& spec = info.outputs[o];
      out.name = spec.name;
      const std::string where = prefix + "the run's output '" + spec.name + "': ";
      if (out.type != spec.type) {
        return InternalError(where + "expected " + std::string(ElementTypeName(spec.type)) +
                             ", got " + std::string(ElementTypeName(out.type)));
      }
      if (batchable && (out.shape.empty() || out.shape[0] != items)) {
        return InternalError(where + "shape " + ShapeText(out.shape) + " for a batch of " +
                             std::to_string(items));
      }
      Status data = CheckTensorData(out);
      return data.ok() ? data : InternalError(where + data.message());
    };
    if (batch.size() == 1) {
      Pending& p = *batch[0];
      for (size_t o : p.wanted) PIER_RETURN_IF_ERROR(check(o));
      for (size_t o : p.wanted) p.result.outputs.push_back(std::move(outputs[o]));
      return Status::Ok();
    }
    std::vector<std::optional<BatchRows>> rows(outputs.size());
    for (const PendingPtr& p : batch) {
      for (size_t o : p->wanted) {
        if (rows[o]) continue;
        PIER_RETURN_IF_ERROR(check(o));
        rows[o] = std::move(BatchRows::Of(outputs[o])).value();  // checked just above
      }
    }
    int64_t first = 0;  // the batch's first row of each request
    for (PendingPtr& p : batch) {
      for (size_t o : p->wanted) p->result.outputs.push_back(rows[o]->Slice(first, p->items));
      first += p->items;
    }
    return Status::Ok();
  }

  // While a batch runs: stops it once nobody waits for any of its requests, and refuses queued
  // requests that nobody waits for or that passed their deadline (so they need not wait for
  // the batch to end to be answered).
  void WatchLoop() {
    MutexLock lock(mutex);
    while (true) {
      lock.Wait(watch, [&]() PIER_REQUIRES(mutex) { return stopping || running; });
      if (stopping) break;
      lock.WaitUntil(watch, Clock::now() + kCancelPoll,
                     [&]() PIER_REQUIRES(mutex) { return stopping; });
      if (stopping) break;
      if (!running) continue;
      if (AllCancelled(running_flags)) {
        // Under the lock, so that this batch is the one running (or about to, or just ended:
        // then StopRun does nothing); repeated each poll while the batch lasts.
        executor.StopRun();
        stop_sent = true;
      }
      std::vector<PendingPtr> dropped = TakeUnwanted(Clock::now());
      if (!dropped.empty()) {
        lock.Unlock();
        FinishAll(dropped);
        lock.Lock();
      }
    }
  }

  // Fails every request still queued (UNAVAILABLE with `reason`).
  void CancelQueued(const std::string& reason) {
    std::vector<PendingPtr> cancelled;
    {
      MutexLock lock(mutex);
      for (PendingPtr& p : queue) {
        p->result.status = UnavailableError(reason);
        cancelled.push_back(std::move(p));
      }
      queue.clear();
      queued_items = 0;
    }
    FinishAll(cancelled);
  }
};

TensorBatcher::TensorBatcher(std::string model, TensorModelInfo info, BatchExecutor& executor,
                             TensorBatcherOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(info), executor, options)) {}

TensorBatcher::~TensorBatcher() {
  const std::thread::id self = std::this_thread::get_id();
  PIER_CHECK(self != impl_->batching.get_id() && self != impl_->watcher.get_id(),
             "a TensorBatcher destroyed from its own thread (a callback held its model)");
  {
    MutexLock lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->watch.notify_all();
  impl_->batching.join();
  impl_->watcher.join();
}

const TensorModelInfo& TensorBatcher::info() const { return impl_->info; }

Status TensorBatcher::Submit(TensorRequest request, std::function<void(TensorResult)> done) {
  Impl& s = *impl_;
  PIER_RETURN_IF_ERROR(CheckTensorRequest(s.model, s.info, request));
  auto p = std::make_unique<Pending>();
  // The inputs in the model's order (the check found each exactly once).
  std::vector<HostTensor> inputs(s.info.inputs.size());
  for (HostTensor& input : request.inputs) {
    for (size_t i = 0; i < s.info.inputs.size(); ++i) {
      if (s.info.inputs[i].name == input.name) inputs[i] = std::move(input);
    }
  }
  request.inputs = std::move(inputs);
  if (s.info.max_batch_size > 0 && !request.inputs.empty()) p->items = request.inputs[0].shape[0];
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const std::vector<int64_t>& shape = request.inputs[i].shape;
    p->group.push_back(static_cast<int64_t>(shape.size()));
    for (size_t d = 1; d < shape.size(); ++d) {
      const bool padded = !s.options.pads.empty() && s.options.pads[i].padded[d];
      p->group.push_back(padded ? -1 : shape[d]);
    }
  }
  if (request.outputs.empty()) {
    for (size_t o = 0; o < s.info.outputs.size(); ++o) p->wanted.push_back(o);
  } else {
    for (const std::string& name : request.outputs) {
      for (size_t o = 0; o < s.info.outputs.size(); ++o) {
        if (s.info.outputs[o].name == name) p->wanted.push_back(o);
      }
    }
  }
  p->cancelled = request.cancelled;
  p->request = std::move(request);
  p->done = std::move(done);
  {
    MutexLock lock(s.mutex);
    if (s.stopping) return UnavailableError("model '" + s.model + "' is shutting down");
    if (s.queued_items + p->items > s.options.max_queued_items) {
      return ResourceExhaustedError("model '" + s.model + "': the queue is full (" +
                                    std::to_string(s.queued_items) + " items waiting, at most " +
                                    std::to_string(s.options.max_queued_items) + ")");
    }
    p->queued = Clock::now();
    s.queued_items += p->items;
    s.queue.push_back(std::move(p));
  }
  s.wake.notify_all();
  return Status::Ok();
}

void TensorBatcher::CancelQueued(const std::string& reason) { impl_->CancelQueued(reason); }

TensorRunnerStats TensorBatcher::Stats() const {
  MutexLock lock(impl_->mutex);
  TensorRunnerStats stats = impl_->stats;
  stats.queued_items = impl_->queued_items;
  stats.window_seconds = std::chrono::duration<double>(impl_->window).count();
  return stats;
}

}  // namespace pier::tensor_models
