// Internal to src/serving: the device ledger's side of a worker's elastic KV lease
// (WorkerClient::KvMirror, worker_client.h's "Memory"), shared by worker_client.cpp and
// worker_kv_mirror.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/mutex.h"
#include "ipc/frame.h"
#include "memory/lease.h"
#include "serving/worker_client.h"

namespace pier::serving {

// The device ledger's side of a worker's elastic KV lease. The fields not guarded by `mutex`
// are set by MirrorKv before the mirror is published to kv_ (lease is also reset, under
// `mutex`, by DropKvMirror once the client's threads are joined; the Lease itself is
// thread-safe, so it is used without `mutex`).
struct WorkerClient::KvMirror {
  Mutex mutex;
  std::unique_ptr<Lease> lease;  // accounting-only; set once, reset by the destructor
  // The ready worker's (none between workers).
  std::shared_ptr<ipc::Channel> channel PIER_GUARDED_BY(mutex);
  uint64_t fixed_bytes = 0;                 // the grant: weights, workspace, the KV minimum
  uint64_t seq PIER_GUARDED_BY(mutex) = 0;  // of the last Budget frame sent to this worker
  int64_t fixed_chunks = 0;                 // the worker's KV chunks inside the grant
  int64_t chunk_tokens = 0;                 // positions of one sequence a chunk holds
  // The worker asked for chunks the ledger could not lend then: asked again (Retry) each time
  // the device's governor reports memory given back, so the worker, waiting for a raised
  // budget, is woken by a release rather than asking in a loop.
  size_t unmet_chunks PIER_GUARDED_BY(mutex) = 0;
  int unmet_urgency PIER_GUARDED_BY(mutex) = 0;
  uint64_t release_listener = 0;  // the device governor's id of that retry
  // The worker gave chunks back on its own (an idle lease after kv_idle_release): its budget
  // is lowered to what it holds, and the mirror follows once it has applied that.
  std::optional<size_t> release_to PIER_GUARDED_BY(mutex);

  // The budget the worker is to have: the grant plus the mirror's chunks, or as many as a
  // shrink the mirror was asked for leaves.
  uint64_t TargetLocked() const PIER_REQUIRES(mutex) {
    size_t chunks = lease->chunks();
    if (std::optional<ShrinkRequest> asked = lease->pending_request()) {
      chunks = std::min(chunks, asked->target_chunks);
    }
    if (release_to.has_value()) chunks = std::min(chunks, *release_to);
    return fixed_bytes + uint64_t{chunks} * lease->chunk_bytes();
  }
  // Grows the mirror by up to `wanted` chunks (not waiting: the device's governor asks
  // others to shrink and a later release retries); remembers what it could not lend.
  static void Lend(KvMirror& kv, size_t wanted, int urgency) {
    Lease& lease = *kv.lease;
    const size_t room = lease.max_chunks() - std::min(lease.max_chunks(), lease.chunks());
    const size_t ask = std::min(wanted, room);
    bool grown = ask == 0;
    if (ask > 0) grown = lease.Grow(ask, GrowOptions{.urgency = urgency}).ok();
    MutexLock lock(kv.mutex);
    kv.release_to.reset();  // it wants memory again
    kv.unmet_chunks = grown ? 0 : ask;
    kv.unmet_urgency = urgency;
  }
  // Sends the target. The frame is made under `mutex` and sent after it (the caller's
  // thread may be another worker's reader: a full socket must not stop this worker's reader
  // from reconciling); the worker drops a frame older than one it applied.
  static void SendTarget(KvMirror& kv) {
    std::shared_ptr<ipc::Channel> to;
    ipc::proto::Frame frame;
    {
      MutexLock lock(kv.mutex);
      if (kv.channel == nullptr || kv.lease == nullptr) return;
      to = kv.channel;
      frame.mutable_budget()->set_seq(++kv.seq);
      frame.mutable_budget()->set_budget_bytes(kv.TargetLocked());
    }
    (void)to->Send(frame);
  }
};

}  // namespace pier::serving
