// WorkerClient's elastic KV mirror (worker_client.h, "Memory"): creating it from the worker's
// Ready, growing it for MoreMemory, giving chunks back once the worker reports it has, and
// releasing it when the worker ends or the client goes.
#include "serving/worker_kv_mirror.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "memory/byte_size.h"

namespace pier::serving {

using ipc::proto::Frame;

Status WorkerClient::MirrorKv(const ipc::proto::Ready& ready,
                              const std::shared_ptr<ipc::Channel>& channel) {
  if (ready.kv_chunk_bytes() > 0 && ready.kv_max_chunks() > ready.kv_chunks() && kv_ == nullptr) {
    // The worker's KV lease may grow past what the grant holds: mirror it in the ledger.
    LeaseOptions mirror;
    mirror.name = owner_name_ + " kv";
    mirror.chunk_bytes = ready.kv_chunk_bytes();
    mirror.max_chunks = static_cast<size_t>(ready.kv_max_chunks() - ready.kv_chunks());
    mirror.accounting_only = true;
    auto kv = std::make_shared<KvMirror>();
    kv->fixed_bytes = options_.budget_bytes;
    std::weak_ptr<KvMirror> weak = kv;
    mirror.on_shrink_request = [weak, name = name_](const ShrinkRequest& asked) {
      std::shared_ptr<KvMirror> kv = weak.lock();
      if (kv == nullptr) return;
      spdlog::info("{}: asked to give back {} KV chunks for '{}'", name, asked.chunks,
                   asked.requester);
      KvMirror::SendTarget(*kv);
    };
    MemoryResult<std::unique_ptr<Lease>> lease =
        options_.device_governor->CreateLease(owner_, mirror);
    if (!lease.ok())
      return InternalError(name_ +
                           ": its KV lease cannot be mirrored: " + lease.status().message());
    kv->lease = std::move(lease).value();
    kv->fixed_chunks = ready.kv_chunks();
    kv->chunk_tokens = ready.kv_chunk_tokens();
    kv->release_listener = options_.device_governor->AddReleaseListener([weak] {
      std::shared_ptr<KvMirror> kv = weak.lock();
      if (kv == nullptr) return;
      size_t unmet = 0;
      int urgency = 0;
      {
        MutexLock lock(kv->mutex);
        if (kv->lease == nullptr || kv->channel == nullptr) return;
        unmet = kv->unmet_chunks;
        urgency = kv->unmet_urgency;
      }
      if (unmet == 0) return;
      KvMirror::Lend(*kv, unmet, urgency);
      bool lent = false;
      {
        MutexLock lock(kv->mutex);
        lent = kv->unmet_chunks == 0;
      }
      if (lent) KvMirror::SendTarget(*kv);
    });
    if (kv->lease->chunk_bytes() != ready.kv_chunk_bytes()) {
      spdlog::info("{}: KV chunks of {} are counted as {} in the device's ledger", name_,
                   FormatBytes(ready.kv_chunk_bytes()), FormatBytes(kv->lease->chunk_bytes()));
    }
    kv_ = std::move(kv);
  }
  if (kv_ != nullptr) {
    MutexLock kv_lock(kv_->mutex);
    kv_->channel = channel;
    kv_->seq = 0;           // a new worker has applied no Budget yet
    kv_->unmet_chunks = 0;  // nor asked for any
  }
  return Status::Ok();
}

void WorkerClient::ReleaseKvOfEndedWorker() {
  if (kv_ == nullptr) return;
  // Its KV memory went with it: the mirror gives every lent chunk back.
  MutexLock kv_lock(kv_->mutex);
  kv_->channel.reset();
  if (const size_t lent = kv_->lease->chunks(); lent > 0) (void)kv_->lease->Shrink(lent);
}

void WorkerClient::DropKvMirror() {
  if (kv_ == nullptr) return;
  options_.device_governor->RemoveReleaseListener(kv_->release_listener);
  MutexLock kv_lock(kv_->mutex);
  kv_->channel.reset();
  kv_->lease.reset();
}

void WorkerClient::OnMoreMemory(const ipc::proto::MoreMemory& ask) {
  if (kv_ == nullptr) {
    // A static KV cache has all it will get; answer so that the worker does not wait.
    std::shared_ptr<ipc::Channel> channel;
    {
      MutexLock lock(mutex_);
      channel = channel_;
    }
    Frame frame;
    frame.mutable_budget()->set_budget_bytes(options_.budget_bytes);
    if (channel != nullptr) (void)channel->Send(frame);
    return;
  }
  const uint64_t chunk = kv_->lease->chunk_bytes();
  const size_t wanted =
      static_cast<size_t>(std::max<uint64_t>(1, (ask.bytes() + chunk - 1) / chunk));
  // Not waiting: the device's governor asks others to shrink, and a release lends it then.
  KvMirror::Lend(*kv_, wanted, ask.urgency());
  KvMirror::SendTarget(*kv_);
}

void WorkerClient::ReconcileKv(const ipc::proto::Stats& stats) {
  if (kv_ == nullptr) return;
  Lease& lease = *kv_->lease;
  lease.SetIdle(stats.kv_idle());
  lease.SetUrgency(stats.kv_urgency());
  lease.SetWaitingOnly(stats.kv_waiting_only());
  bool lower = false;
  {
    MutexLock kv_lock(kv_->mutex);
    if (kv_->channel == nullptr) return;
    // An idle worker whose lease gave chunks back on its own (kv_idle_release): lower its budget
    // to what it holds, so the device's ledger gets them back once it has applied that.
    if (stats.kv_idle() && stats.has_kv_lease_chunks()) {
      const auto held =
          static_cast<size_t>(std::max<int64_t>(0, stats.kv_lease_chunks() - kv_->fixed_chunks));
      if (held < lease.chunks() && kv_->release_to != held) {
        kv_->release_to = held;
        lower = true;
      }
    }
    // Only a budget the worker applied after the last one sent, and no lowering on its way.
    if (!lower && stats.budget_seq() == kv_->seq && !stats.budget_pending()) {
      const uint64_t above =
          stats.budget_bytes() - std::min(stats.budget_bytes(), kv_->fixed_bytes);
      const size_t holds = static_cast<size_t>(above / lease.chunk_bytes());
      const size_t chunks = lease.chunks();
      if (chunks > holds) {
        if (Status shrunk = lease.Shrink(chunks - holds); !shrunk.ok()) {
          spdlog::warn("{}: KV mirror: {}", name_, shrunk.message());
        }
      }
      if (kv_->release_to.has_value() && lease.chunks() <= *kv_->release_to) {
        kv_->release_to.reset();
      }
    }
  }
  if (lower) KvMirror::SendTarget(*kv_);
}

uint64_t WorkerClient::GrantedBytes() const {
  uint64_t lent = 0;
  if (kv_ != nullptr) {
    MutexLock kv_lock(kv_->mutex);
    if (kv_->lease != nullptr) lent = uint64_t{kv_->lease->chunks()} * kv_->lease->chunk_bytes();
  }
  return options_.budget_bytes + (measured_.has_value() ? measured_->bytes() : 0) + lent;
}

}  // namespace pier::serving

namespace pier::serving {

int64_t WorkerClient::KvCeilingTokens(int64_t max_request_tokens) const {
  if (kv_ == nullptr) return 0;
  MutexLock kv_lock(kv_->mutex);
  if (kv_->lease == nullptr || kv_->chunk_tokens <= 0) return 0;
  const auto chunks = kv_->fixed_chunks + static_cast<int64_t>(kv_->lease->AttainableChunks());
  const int64_t tokens = chunks * kv_->chunk_tokens;
  return max_request_tokens > 0 ? std::min(tokens, max_request_tokens) : tokens;
}

}  // namespace pier::serving
