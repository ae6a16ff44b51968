// Internal to src/serving: the device ledger's side of a worker's elastic KV lease
// (WorkerClient::KvMirror, worker_client.h's "Memory"), shared by worker_client.cpp and
// worker_kv_mirror.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ipc/frame.h"
#include "memory/lease.h"
#include "serving/worker_client.h"

namespace pier::serving {

// The device ledger's side of a worker's elastic KV lease.
struct WorkerClient::KvMirror {
  std::mutex mutex;
  std::unique_ptr<Lease> lease;           // accounting-only; set once, reset by the destructor
  std::shared_ptr<ipc::Channel> channel;  // the ready worker's (none between workers)
  uint64_t fixed_bytes = 0;               // the grant: weights, workspace, the KV minimum
  uint64_t seq = 0;                       // of the last Budget frame sent to this worker

  // The budget the worker is to have: the grant plus the mirror's chunks, or as many as a
  // shrink the mirror was asked for leaves.
  uint64_t TargetLocked() const {
    size_t chunks = lease->chunks();
    if (std::optional<ShrinkRequest> asked = lease->pending_request()) {
      chunks = std::min(chunks, asked->target_chunks);
    }
    return fixed_bytes + uint64_t{chunks} * lease->chunk_bytes();
  }
  // Sends the target. The frame is made under `mutex` and sent after it (the caller's
  // thread may be another worker's reader: a full socket must not stop this worker's reader
  // from reconciling); the worker drops a frame older than one it applied.
  static void SendTarget(KvMirror& kv) {
    std::shared_ptr<ipc::Channel> to;
    ipc::proto::Frame frame;
    {
      std::lock_guard lock(kv.mutex);
      if (kv.channel == nullptr || kv.lease == nullptr) return;
      to = kv.channel;
      frame.mutable_budget()->set_seq(++kv.seq);
      frame.mutable_budget()->set_budget_bytes(kv.TargetLocked());
    }
    (void)to->Send(frame);
  }
};

}  // namespace pier::serving
