// FairShare: weighted fair queueing of one engine's capacity between tenants (issue #16), within
// one priority class (the scheduler keeps one per class: classes come first, fairness applies
// within a class, and a tenant's critical traffic does not use up its normal share).
//
// Each tenant has a virtual time: the tokens computed for it (prompt tokens prefilled plus
// tokens generated; prefix-cache hits cost nothing) divided by its weight. Within a priority
// class the scheduler serves the tenant with the smallest virtual time first, so two
// backlogged tenants of weights 2 and 1 get tokens 2:1 whatever their request rates.
//
// The virtual clock is the smallest virtual time among backlogged tenants -- those with
// sequences waiting -- or, when none waits, among tenants with live sequences (it never goes
// back). A tenant that becomes live again starts at no less than the clock, so time spent idle
// is not banked as credit to burst past the others later (start-time fair queueing); a tenant
// with one slow stream and nothing waiting does not hold the clock back for a newcomer.
//
// FairShareLedger holds the four classes' FairShare of one device, shared by the schedulers of
// every model on it (the device set makes one per device): a tenant's tokens on one model count
// against its share on every other, so admission across the models of a device is fair too.
// Each scheduler registers; its backlogged tenants are kept apart and the clocks move over the
// union of them all. A scheduler without a ledger given makes its own.
//
// Thread-safety: FairShare none (its ledger's lock guards it); FairShareLedger is internally
// synchronized (engine threads of several models call it).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "engine/request.h"

namespace pier::engine {

struct TenantShare {
  std::string tenant;
  Priority priority = Priority::kNormal;  // the class whose share this is
  double weight = 1;
  double virtual_time = 0;  // tokens / weight, never below the clock while live
  int64_t live_sequences = 0;
  int64_t waiting = 0;  // of which waiting (filled by Scheduler::TenantShares)
  int64_t tokens = 0;   // computed for it since the engine started
};

class FairShare {
 public:
  // A sequence of `tenant` became live; `weight` (> 0; others are taken as 1) is the tenant's
  // latest.
  void Join(const std::string& tenant, double weight);
  // One of its live sequences ended.
  void Leave(const std::string& tenant);
  // `tokens` were computed for a sequence of `tenant` (a live one).
  void Charge(const std::string& tenant, int64_t tokens);
  // After a step: moves the clock to the smallest virtual time of the `backlogged` tenants
  // (else of the live ones), and forgets tenants that are idle and have no debt above the clock
  // (they would restart at the clock anyway).
  void AdvanceClock(const std::set<std::string>& backlogged = {});

  // The tenant's virtual time; the clock for one not known.
  double VirtualTime(const std::string& tenant) const;
  double clock() const { return clock_; }
  // Every known tenant, by name.
  std::vector<TenantShare> Snapshot() const;

 private:
  std::map<std::string, TenantShare> tenants_;
  double clock_ = 0;
};

class FairShareLedger {
 public:
  using Backlog = std::array<std::set<std::string>, 4>;  // tenants with sequences waiting

  // A scheduler's handle for AdvanceClocks; Unregister when it goes.
  int Register();
  void Unregister(int scheduler);

  void Join(Priority cls, const std::string& tenant, double weight);
  void Leave(Priority cls, const std::string& tenant);
  void Charge(Priority cls, const std::string& tenant, int64_t tokens);
  // After a step of `scheduler`: its backlog now; every class's clock moves over the union of
  // all schedulers' backlogs.
  void AdvanceClocks(int scheduler, const Backlog& backlogged);

  double VirtualTime(Priority cls, const std::string& tenant) const;
  double Clock(Priority cls) const;
  std::vector<TenantShare> Snapshot(Priority cls) const;

 private:
  mutable Mutex mutex_;
  std::array<FairShare, 4> shares_ PIER_GUARDED_BY(mutex_);
  std::map<int, Backlog> backlogs_ PIER_GUARDED_BY(mutex_);
  int next_scheduler_ PIER_GUARDED_BY(mutex_) = 0;
};

}  // namespace pier::engine
