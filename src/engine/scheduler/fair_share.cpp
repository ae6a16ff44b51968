#include "engine/scheduler/fair_share.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pier::engine {

void FairShare::Join(const std::string& tenant, double weight) {
  auto [it, inserted] = tenants_.try_emplace(tenant);
  TenantShare& t = it->second;
  if (inserted) t.tenant = tenant;
  t.weight = std::isfinite(weight) && weight > 0 ? weight : 1.0;
  if (t.live_sequences == 0) t.virtual_time = std::max(t.virtual_time, clock_);
  ++t.live_sequences;
}

void FairShare::Leave(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end() || it->second.live_sequences == 0) return;
  --it->second.live_sequences;
}

void FairShare::Charge(const std::string& tenant, int64_t tokens) {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end() || tokens <= 0) return;
  it->second.tokens += tokens;
  it->second.virtual_time += static_cast<double>(tokens) / it->second.weight;
}

void FairShare::AdvanceClock(const std::set<std::string>& backlogged) {
  double lowest = std::numeric_limits<double>::infinity();
  for (const auto& [name, t] : tenants_) {
    if (t.live_sequences > 0 && (backlogged.empty() || backlogged.contains(name))) {
      lowest = std::min(lowest, t.virtual_time);
    }
  }
  if (std::isfinite(lowest)) clock_ = std::max(clock_, lowest);
  std::erase_if(tenants_, [&](const auto& entry) {
    return entry.second.live_sequences == 0 && entry.second.virtual_time <= clock_;
  });
}

double FairShare::VirtualTime(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? clock_ : it->second.virtual_time;
}

std::vector<TenantShare> FairShare::Snapshot() const {
  std::vector<TenantShare> out;
  out.reserve(tenants_.size());
  for (const auto& [name, t] : tenants_) out.push_back(t);
  return out;
}

int FairShareLedger::Register() {
  MutexLock lock(mutex_);
  const int id = next_scheduler_++;
  backlogs_[id] = {};
  return id;
}

void FairShareLedger::Unregister(int scheduler) {
  MutexLock lock(mutex_);
  backlogs_.erase(scheduler);
}

void FairShareLedger::Join(Priority cls, const std::string& tenant, double weight) {
  MutexLock lock(mutex_);
  shares_[static_cast<size_t>(cls)].Join(tenant, weight);
}

void FairShareLedger::Leave(Priority cls, const std::string& tenant) {
  MutexLock lock(mutex_);
  shares_[static_cast<size_t>(cls)].Leave(tenant);
}

void FairShareLedger::Charge(Priority cls, const std::string& tenant, int64_t tokens) {
  MutexLock lock(mutex_);
  shares_[static_cast<size_t>(cls)].Charge(tenant, tokens);
}

void FairShareLedger::AdvanceClocks(int scheduler, const Backlog& backlogged) {
  MutexLock lock(mutex_);
  backlogs_[scheduler] = backlogged;
  for (size_t c = 0; c < shares_.size(); ++c) {
    std::set<std::string> all;
    for (const auto& [id, backlog] : backlogs_) all.insert(backlog[c].begin(), backlog[c].end());
    shares_[c].AdvanceClock(all);
  }
}

double FairShareLedger::VirtualTime(Priority cls, const std::string& tenant) const {
  MutexLock lock(mutex_);
  return shares_[static_cast<size_t>(cls)].VirtualTime(tenant);
}

double FairShareLedger::Clock(Priority cls) const {
  MutexLock lock(mutex_);
  return shares_[static_cast<size_t>(cls)].clock();
}

std::vector<TenantShare> FairShareLedger::Snapshot(Priority cls) const {
  MutexLock lock(mutex_);
  return shares_[static_cast<size_t>(cls)].Snapshot();
}

}  // namespace pier::engine
