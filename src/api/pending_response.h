// PendingResponse: a DeferredResponse that another thread resolves (an admin operation that
// answers when the model manager has done it). ModelWait: a DeferredResponse that waits for a
// model to leave `loading` (an on-demand load), then answers with `retry()` (the request
// handled again, now that the model is ready) or with a 503 that says why not.
// ModelNotReady: what a route answers for a model that is not ready (one of those, or a 503).
//
// Thread-safety: every method may be called from any thread (one mutex each); wake callbacks
// are called without it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/http_types.h"
#include "common/mutex.h"
#include "serving/model_registry.h"

namespace pier::api {

class PendingResponse final : public DeferredResponse {
 public:
  // Any thread, once (later calls are ignored). Before or after Start.
  void Resolve(HttpResponse response);

  void Start(std::function<void()> wake) override;
  std::optional<HttpResponse> Poll() override;
  void Cancel(std::string_view reason) override;

  // Keeps `what` (e.g. the model a request runs on) alive as long as this response: released
  // where the server drops the response (an I/O thread), never by the resolver. Resolvers
  // running on a thread the kept object owns should hold this response by weak_ptr.
  void Hold(std::shared_ptr<const void> what) { held_ = std::move(what); }

 private:
  std::shared_ptr<const void> held_;  // set before the response is handed to the server
  Mutex mutex_;
  std::function<void()> wake_ PIER_GUARDED_BY(mutex_);
  std::optional<HttpResponse> answer_ PIER_GUARDED_BY(mutex_);
  bool taken_ PIER_GUARDED_BY(mutex_) = false;
};

class ModelWait final : public DeferredResponse {
 public:
  // Waits for model `id` (whose entry had `loads` and `load_failures` when the request came)
  // until `deadline`. Borrows the registry, which must outlive it.
  ModelWait(serving::ModelRegistry* registry, serving::ModelEntry entry,
            std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds limit,
            std::function<HttpResponse()> retry);
  ~ModelWait() override;

  // Watches the registry and asks for the load.
  void Start(std::function<void()> wake) override;
  // ready: retry(); the load failed or the model went away, failed or draining: 503 with the
  // reason; the deadline passed: 503 "did not finish loading within N s"; else nothing yet.
  std::optional<HttpResponse> Poll() override;
  void Cancel(std::string_view reason) override;

 private:
  void StopWatching();

  serving::ModelRegistry* const registry_;
  const serving::ModelEntry entry_;
  const std::chrono::steady_clock::time_point deadline_;
  const std::chrono::milliseconds limit_;
  const std::function<HttpResponse()> retry_;
  Mutex mutex_;
  uint64_t watch_ PIER_GUARDED_BY(mutex_) = 0;
  bool done_ PIER_GUARDED_BY(mutex_) = false;
};

// A PendingResponse whose Cancel (the client went away, the server shuts down) also raises
// the flag a tensor runner polls, so that a request nobody waits for stops waiting.
class CancellableResponse final : public DeferredResponse {
 public:
  void Resolve(HttpResponse response) { pending_.Resolve(std::move(response)); }
  void Hold(std::shared_ptr<const void> what) { pending_.Hold(std::move(what)); }
  std::shared_ptr<const std::atomic<bool>> flag() const { return cancelled_; }

  void Start(std::function<void()> wake) override { pending_.Start(std::move(wake)); }
  std::optional<HttpResponse> Poll() override { return pending_.Poll(); }
  void Cancel(std::string_view reason) override {
    cancelled_->store(true);
    pending_.Cancel(reason);
  }

 private:
  PendingResponse pending_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

// The answer to a request for `entry`, a model that is not ready: when it will be (loading, or
// on_demand and unloaded, under a manager) and `load_wait` > 0, a ModelWait that retries the
// request once it is; else 503 `model_unavailable` naming its state and reason (and how to
// load it), with Retry-After.
HttpResponse ModelNotReady(serving::ModelRegistry* registry, const serving::ModelEntry& entry,
                           std::chrono::milliseconds load_wait,
                           std::function<HttpResponse()> retry);

}  // namespace pier::api
