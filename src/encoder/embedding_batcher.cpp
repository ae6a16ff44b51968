#include "encoder/embedding_batcher.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "common/check.h"
#include "common/mutex.h"

namespace pier::encoder {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kTextsBounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
constexpr double kTokensBounds[] = {16, 64, 256, 1024, 4096, 16384};
constexpr double kSecondsBounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                     0.05,   0.1,   0.2,   0.5,   1,    2};

Buckets MakeBuckets(std::span<const double> bounds) {
  Buckets b;
  b.bounds.assign(bounds.begin(), bounds.end());
  b.counts.assign(bounds.size() + 1, 0);
  return b;
}

// One request in flight: its texts' vectors fill in as their batches run.
struct Pending {
  EmbedRequest request;
  std::function<void(EmbedResult)> done;
  EmbedResult result;
  int64_t remaining = 0;
  bool failed = false;
  std::vector<size_t> first_row = {};  // per-token vectors: each text's first row in result
};

// One text waiting for a batch.
struct Item {
  std::shared_ptr<Pending> owner;
  size_t index;
  Clock::time_point queued;
  int64_t length;
};

// Takes the next batch out of `waiting` (see the header for the rules). `full`: more waited
// than the batch could hold, or it reached a budget.
std::vector<Item> FormBatch(std::deque<Item>& waiting, const BatcherOptions& options,
                            int64_t budget, Clock::time_point now, bool* full) {
  // Highest class first, FIFO within it: a stable order over the queue. A text rises one class
  // for every `aging` it has waited, so a steady stream of a higher class cannot starve it.
  const auto effective = [&](const Item& item) {
    int64_t boost = 0;
    if (options.aging.count() > 0) boost = (now - item.queued) / options.aging;
    return item.owner->request.priority + boost;
  };
  std::vector<int64_t> rank(waiting.size());
  for (size_t i = 0; i < waiting.size(); ++i) rank[i] = effective(waiting[i]);
  std::vector<size_t> order(waiting.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rank[a] > rank[b]; });
  int64_t all_tokens = 0;
  for (const Item& item : waiting) all_tokens += item.length;
  std::vector<bool> take(waiting.size(), false);
  int64_t tokens = 0, texts = 0;
  auto add = [&](size_t i) {
    if (take[i] || texts >= options.max_batch_texts || tokens + waiting[i].length > budget) {
      return false;
    }
    take[i] = true;
    tokens += waiting[i].length;
    ++texts;
    return true;
  };
  const bool everything_fits =
      all_tokens <= budget && static_cast<int64_t>(waiting.size()) <= options.max_batch_texts;
  if (everything_fits) {
    for (size_t i : order) add(i);
  } else {
    // The oldest text of the highest class anchors the batch; texts within length_similarity
    // of its length join first (its class, then any), then, while the batch is under half full,
    // shorter texts: they add little to the batch's time, and a short anchor never pulls long
    // texts in, so short requests are not held behind long ones.
    const size_t first = order.front();
    const int64_t anchor = waiting[first].length;
    const double slack = options.length_similarity * static_cast<double>(anchor);
    const auto near = [&](size_t i) {
      return std::abs(static_cast<double>(waiting[i].length - anchor)) <= slack;
    };
    add(first);
    for (size_t i : order) {
      if (rank[i] == rank[first] && near(i)) add(i);
    }
    for (size_t i : order) {
      if (near(i)) add(i);
    }
    for (size_t i : order) {
      if (2 * tokens >= budget || 2 * texts >= options.max_batch_texts) break;
      if (static_cast<double>(waiting[i].length) <= static_cast<double>(anchor) + slack) add(i);
    }
  }
  *full = !everything_fits || tokens >= budget || texts >= options.max_batch_texts;
  std::vector<Item> batch;
  std::deque<Item> rest;
  for (size_t i = 0; i < waiting.size(); ++i) {
    if (take[i]) {
      batch.push_back(std::move(waiting[i]));
    } else {
      rest.push_back(std::move(waiting[i]));
    }
  }
  waiting = std::move(rest);
  return batch;
}

}  // namespace

struct EmbeddingBatcher::Impl {
  BertModel& model;
  const BatcherOptions options;
  const int64_t dim;
  const bool per_token;  // pooling none: a vector per token, not per text

  Mutex mutex;
  std::condition_variable wake;
  std::deque<Item> queue PIER_GUARDED_BY(mutex);
  bool stopping PIER_GUARDED_BY(mutex) = false;
  std::chrono::microseconds window PIER_GUARDED_BY(mutex);
  // Tokens per second of compute, a moving average over batches (0 until one ran).
  double tokens_per_second PIER_GUARDED_BY(mutex) = 0;
  BatcherStats stats PIER_GUARDED_BY(mutex);
  std::thread thread;

  Impl(BertModel& m, BatcherOptions o)
      : model(m),
        options(o),
        dim(m.info().embedding_length),
        per_token(m.info().pooling == Pooling::kNone),
        window(o.max_queue_delay) {
    stats.batch_texts = MakeBuckets(kTextsBounds);
    stats.batch_tokens = MakeBuckets(kTokensBounds);
    stats.queue_seconds = MakeBuckets(kSecondsBounds);
    stats.compute_seconds = MakeBuckets(kSecondsBounds);
    thread = std::thread([this] { Run(); });
  }

  static void Count(const std::vector<int64_t>& buckets, std::vector<int64_t>& counts, int64_t v) {
    size_t i = 0;
    while (i < buckets.size() && v > buckets[i]) ++i;
    ++counts[i];
  }

  // Calls the request's callback once, without the lock, and destroys it right after, so
  // whatever it holds is released here and not whenever the last queue entry lets go.
  static void Finish(const std::shared_ptr<Pending>& p) {
    std::function<void(EmbedResult)> done = std::move(p->done);
    p->done = nullptr;
    if (done) done(std::move(p->result));
  }

  // Drops the queued texts of requests that have failed (the lock held): they would only hold
  // memory and queue slots until a batch skipped them.
  void PurgeFailed() PIER_REQUIRES(mutex) {
    std::erase_if(queue, [](const Item& item) { return item.owner->failed; });
  }

  void Run() {
    MutexLock lock(mutex);
    while (true) {
      lock.Wait(wake, [&]() PIER_REQUIRES(mutex) { return stopping || !queue.empty(); });
      if (stopping) break;
      // Wait out the window from the oldest text, unless the queue fills a batch first.
      const Clock::time_point close = queue.front().queued + window;
      lock.WaitUntil(wake, close, [&]() PIER_REQUIRES(mutex) {
        if (stopping) return true;
        int64_t tokens = 0;
        for (const Item& item : queue) tokens += item.length;
        return tokens >= model.max_batch_tokens() ||
               static_cast<int64_t>(queue.size()) >= options.max_batch_texts;
      });
      if (stopping) break;
      const Clock::time_point now = Clock::now();
      bool full = false;
      std::vector<Item> batch = FormBatch(queue, options, model.max_batch_tokens(), now, &full);
      const bool nothing_left = queue.empty();
      // Expired texts fail their request; the rest run.
      std::vector<Item> run;
      std::vector<std::shared_ptr<Pending>> finished;
      for (Item& item : batch) {
        Pending& p = *item.owner;
        if (p.failed) continue;
        if (now > p.request.deadline) {
          p.failed = true;
          p.result.status = ResourceExhaustedError(
              "the request waited past its class's max queue time before a batch could take it");
          stats.expired += p.remaining;
          finished.push_back(item.owner);
          continue;
        }
        run.push_back(std::move(item));
      }
      batch.clear();
      if (!finished.empty()) PurgeFailed();
      stats.running_texts = static_cast<int64_t>(run.size());
      // Adapt the window: a lone batch halves it, a batch that filled early doubles it.
      if (!options.adaptive_window) {
        // A fixed window: max_queue_delay always.
      } else if (full && now < close) {
        window =
            std::min(options.max_queue_delay, std::max(window * 2, std::chrono::microseconds(500)));
      } else if (nothing_left && !full) {
        window = window / 2;
      }
      lock.Unlock();
      for (const auto& p : finished) Finish(p);
      finished.clear();
      std::vector<EncoderInput> inputs;
      int64_t tokens = 0;
      for (const Item& item : run) {
        inputs.push_back({.ids = item.owner->request.texts[item.index]});
        tokens += item.length;
      }
      std::vector<float> out((per_token ? static_cast<size_t>(tokens) : run.size()) *
                             static_cast<size_t>(dim));
      const Clock::time_point start = Clock::now();
      Status status = run.empty() ? Status::Ok() : model.Embed(inputs, out.data());
      const double compute = std::chrono::duration<double>(Clock::now() - start).count();
      std::vector<double> waits;
      size_t out_row = 0;  // the batch's first output row of run[i]
      for (size_t i = 0; i < run.size(); ++i) {
        const size_t rows = per_token ? static_cast<size_t>(run[i].length) : 1;
        out_row += rows;
        Pending& p = *run[i].owner;
        const double waited = std::chrono::duration<double>(start - run[i].queued).count();
        waits.push_back(waited);
        p.result.queue_seconds = std::max(p.result.queue_seconds, waited);
        if (!p.failed) {
          if (!status.ok()) {
            p.failed = true;
            p.result.status = status;
            finished.push_back(run[i].owner);
            continue;
          }
          const size_t first = per_token ? p.first_row[run[i].index] : run[i].index;
          for (size_t r = 0; r < rows; ++r) {
            float* dst = p.result.vectors.data() + (first + r) * static_cast<size_t>(dim);
            const float* src = out.data() + (out_row - rows + r) * static_cast<size_t>(dim);
            std::copy(src, src + dim, dst);
            if (p.request.normalize) NormalizeL2(dst, dim);
          }
        }
        // Each request's compute time counts each batch once.
        if (i == 0 || run[i - 1].owner != run[i].owner) p.result.compute_seconds += compute;
        if (--p.remaining == 0 && !p.failed) finished.push_back(run[i].owner);
      }
      // The figures first, so a client that has its answer sees its batch counted.
      const auto n_ran = static_cast<int64_t>(run.size());
      lock.Lock();
      if (!status.ok()) PurgeFailed();
      stats.running_texts = 0;
      if (n_ran > 0) {
        ++stats.batches;
        stats.texts += n_ran;
        stats.tokens += tokens;
        stats.batch_texts.Observe(static_cast<double>(n_ran));
        stats.batch_tokens.Observe(static_cast<double>(tokens));
        stats.compute_seconds.Observe(compute);
        if (compute > 0) {
          const double rate = static_cast<double>(tokens) / compute;
          tokens_per_second = tokens_per_second > 0 ? 0.8 * tokens_per_second + 0.2 * rate : rate;
        }
        for (double waited : waits) stats.queue_seconds.Observe(waited);
      }
      lock.Unlock();
      for (const auto& p : finished) Finish(p);
      // Release this batch's references before taking the lock again.
      finished.clear();
      inputs.clear();
      run.clear();
      lock.Lock();
    }
    // Shutting down: fail what waits.
    std::vector<std::shared_ptr<Pending>> left;
    for (Item& item : queue) {
      if (!item.owner->failed) {
        item.owner->failed = true;
        item.owner->result.status = UnavailableError("the embedding model is shutting down");
        left.push_back(item.owner);
      }
    }
    queue.clear();
    lock.Unlock();
    for (const auto& p : left) Finish(p);
  }

  // Fails every request still queued (UNAVAILABLE with `reason`).
  void CancelQueued(const std::string& reason) {
    std::vector<std::shared_ptr<Pending>> cancelled;
    {
      MutexLock lock(mutex);
      for (Item& item : queue) {
        if (!item.owner->failed) {
          item.owner->failed = true;
          item.owner->result.status = UnavailableError(reason);
          cancelled.push_back(item.owner);
        }
      }
      PurgeFailed();
    }
    for (const auto& p : cancelled) Finish(p);
  }
};

EmbeddingBatcher::EmbeddingBatcher(BertModel& model, BatcherOptions options)
    : impl_(std::make_unique<Impl>(model, options)) {}

EmbeddingBatcher::~EmbeddingBatcher() {
  PIER_CHECK(std::this_thread::get_id() != impl_->thread.get_id(),
             "an EmbeddingBatcher destroyed from its own thread (a callback held its model)");
  {
    MutexLock lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

const EncoderInfo& EmbeddingBatcher::info() const { return impl_->model.info(); }

Status EmbeddingBatcher::Submit(EmbedRequest request, std::function<void(EmbedResult)> done) {
  const EncoderInfo& info = impl_->model.info();
  if (request.texts.empty()) return InvalidArgumentError("no input to embed");
  const int64_t limit = std::min(info.context_length, impl_->model.max_batch_tokens());
  int64_t tokens = 0;
  for (size_t i = 0; i < request.texts.size(); ++i) {
    const auto& ids = request.texts[i];
    if (ids.empty()) return InvalidArgumentError("input " + std::to_string(i) + " has no tokens");
    if (static_cast<int64_t>(ids.size()) > limit) {
      return InvalidArgumentError("input " + std::to_string(i) + " has " +
                                  std::to_string(ids.size()) + " tokens; the model takes at most " +
                                  std::to_string(limit));
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= info.vocab_size) {
        return InvalidArgumentError("input " + std::to_string(i) + ": token id " +
                                    std::to_string(id) + " is outside the vocabulary (size " +
                                    std::to_string(info.vocab_size) + ")");
      }
    }
    tokens += static_cast<int64_t>(ids.size());
  }
  if (impl_->per_token) {
    // A vector per token, and front ends pad texts to the longest: the answer is bounded.
    size_t longest = 0;
    for (const auto& text : request.texts) longest = std::max(longest, text.size());
    const size_t bytes = std::max(static_cast<size_t>(tokens), request.texts.size() * longest) *
                         static_cast<size_t>(impl_->dim) * sizeof(float);
    if (bytes > kMaxPerTokenOutputBytes) {
      return InvalidArgumentError("a vector per token for " + std::to_string(request.texts.size()) +
                                  " inputs of up to " + std::to_string(longest) + " tokens is " +
                                  std::to_string(bytes >> 20) + " MiB; the model answers at most " +
                                  std::to_string(kMaxPerTokenOutputBytes >> 20) +
                                  " MiB per request: send fewer inputs");
    }
  }
  if (static_cast<int64_t>(request.texts.size()) > impl_->options.max_queued_texts) {
    return InvalidArgumentError(std::to_string(request.texts.size()) +
                                " inputs in one request; the model queues at most " +
                                std::to_string(impl_->options.max_queued_texts));
  }
  auto pending = std::make_shared<Pending>();
  pending->remaining = static_cast<int64_t>(request.texts.size());
  pending->result.dim = impl_->dim;
  pending->result.prompt_tokens = tokens;
  pending->request = std::move(request);
  pending->done = std::move(done);
  {
    MutexLock lock(impl_->mutex);
    if (impl_->stopping) return UnavailableError("the embedding model is shutting down");
    const auto n = static_cast<int64_t>(pending->request.texts.size());
    if (static_cast<int64_t>(impl_->queue.size()) + n > impl_->options.max_queued_texts) {
      return ResourceExhaustedError("the embedding queue is full (" +
                                    std::to_string(impl_->queue.size()) + " texts waiting)");
    }
    // Admission from the predicted wait: the tokens queued at this class or above, drained at
    // the measured rate, plus the window. A request that could only start after its deadline is
    // refused now, not queued to fail later.
    if (pending->request.deadline != Clock::time_point::max() && impl_->tokens_per_second > 0) {
      int64_t ahead = tokens;
      for (const Item& item : impl_->queue) {
        if (item.owner->request.priority >= pending->request.priority) ahead += item.length;
      }
      const double wait_s = static_cast<double>(ahead) / impl_->tokens_per_second +
                            std::chrono::duration<double>(impl_->window).count();
      const Clock::time_point start = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                         std::chrono::duration<double>(wait_s));
      if (start > pending->request.deadline) {
        ++impl_->stats.predicted_refusals;
        return ResourceExhaustedError(
            "the predicted wait (" + std::to_string(static_cast<int64_t>(wait_s * 1000)) +
            " ms for the texts queued ahead) exceeds this request's class's max queue time");
      }
    }
    // Sized once the request is known to be queued: a refused one allocates nothing.
    size_t rows = pending->request.texts.size();
    if (impl_->per_token) {
      rows = 0;
      for (const auto& text : pending->request.texts) {
        pending->first_row.push_back(rows);
        pending->result.tokens_per_text.push_back(static_cast<int64_t>(text.size()));
        rows += text.size();
      }
    }
    pending->result.vectors.resize(rows * static_cast<size_t>(impl_->dim));
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < pending->request.texts.size(); ++i) {
      impl_->queue.push_back(
          {pending, i, now, static_cast<int64_t>(pending->request.texts[i].size())});
    }
  }
  impl_->wake.notify_all();
  return Status::Ok();
}

void EmbeddingBatcher::CancelQueued(const std::string& reason) { impl_->CancelQueued(reason); }

BatcherStats EmbeddingBatcher::Stats() const {
  MutexLock lock(impl_->mutex);
  BatcherStats stats = impl_->stats;
  stats.queued_texts = static_cast<int64_t>(impl_->queue.size());
  stats.window_seconds = std::chrono::duration<double>(impl_->window).count();
  return stats;
}

std::vector<float> PaddedTokenVectors(const EmbedResult& result, int64_t* longest) {
  *longest = 0;
  for (const int64_t n : result.tokens_per_text) *longest = std::max(*longest, n);
  const auto dim = static_cast<size_t>(result.dim);
  std::vector<float> padded(result.tokens_per_text.size() * static_cast<size_t>(*longest) * dim,
                            0.0f);
  size_t row = 0;
  for (size_t t = 0; t < result.tokens_per_text.size(); ++t) {
    const auto n = static_cast<size_t>(result.tokens_per_text[t]);
    std::copy(
        result.vectors.begin() + static_cast<std::ptrdiff_t>(row * dim),
        result.vectors.begin() + static_cast<std::ptrdiff_t>((row + n) * dim),
        padded.begin() + static_cast<std::ptrdiff_t>(t * static_cast<size_t>(*longest) * dim));
    row += n;
  }
  return padded;
}

}  // namespace pier::encoder
