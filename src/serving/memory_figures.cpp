// The memory governor's figures in /metrics: each device's budget, use, pool, pressure
// (waiting allocations, lent and guaranteed bytes, reclaims in progress) and each owner's.
#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runner/local_model.h"
#include "serving/live/memory_history.h"
#include "serving/live_figures.h"

namespace pier::serving {
namespace {

// The served model an owner belongs to: owners are named "<model>/<part>" (a "#2" suffix when
// a name repeats). An owner named after no model is the device's only model's, if it has one
// model; else its name's first part.
std::string OwnerModel(std::string_view owner, const MemoryGovernor* governor,
                       std::span<const ModelFigures> models) {
  const std::string_view base = engine::OwnerModelName(owner);
  const ModelFigures* only = nullptr;
  int on_device = 0;
  for (const ModelFigures& m : models) {
    if (m.governor != governor) continue;
    if (m.model == base) return std::string(m.model);
    only = &m;
    ++on_device;
  }
  return on_device == 1 ? std::string(only->model) : std::string(base);
}

}  // namespace

void AddGovernorFigures(const MemoryGovernor* governor, std::span<const ModelFigures> models,
                        LiveFigures& r) {
  const GovernorStats g = governor->Stats();
  const std::vector<std::string> device_labels = {"device"};
  const metrics::Labels device = {{"device", g.device}};
  auto gauge = [&](std::string name, std::string help, double value) {
    r.GaugeFamily(name, help, device_labels).WithLabels(device).Set(value);
  };
  auto counter = [&](std::string name, std::string help, double value) {
    r.CounterFamily(name, help, device_labels).WithLabels(device).Increment(value);
  };
  auto bytes = [](uint64_t value) { return static_cast<double>(value); };
  gauge("pier_memory_capacity_bytes", "Device memory capacity.", bytes(g.capacity_bytes));
  gauge("pier_memory_budget_bytes", "Device memory Pier may use (after the reserve).",
        bytes(g.budget_bytes));
  gauge("pier_memory_reserve_bytes", "Device memory kept free, never handed out.",
        bytes(g.reserve_bytes));
  gauge("pier_memory_used_bytes",
        "Bytes charged to owners (pool blocks, external charges, KV arena chunks).",
        bytes(g.allocated_bytes));
  gauge("pier_memory_peak_bytes", "Highest pier_memory_used_bytes since the start.",
        bytes(g.peak_allocated_bytes));
  gauge("pier_memory_committed_bytes",
        "Budget promised to owners: max(charged, guaranteed, reserved), summed.",
        bytes(g.committed_bytes));
  gauge("pier_memory_held_bytes",
        "Bytes physically held from the device: pool segments, arena chunks, external.",
        bytes(g.reserved_bytes));
  gauge("pier_memory_peak_held_bytes", "Highest pier_memory_held_bytes since the start.",
        bytes(g.peak_reserved_bytes));
  gauge("pier_memory_arena_bytes", "Mapped elastic KV arena chunks.", bytes(g.arena_bytes));
  gauge("pier_memory_external_bytes", "Memory counted but not allocated by Pier (mapped files).",
        bytes(g.external_bytes));
  gauge("pier_memory_pool_free_bytes", "Free bytes cached in the pool's segments.",
        bytes(g.pool.free_bytes));
  gauge("pier_memory_pool_largest_free_block_bytes", "Largest free block in the pool.",
        bytes(g.pool.largest_free_block_bytes));
  gauge("pier_memory_fragmentation_ratio",
        "Pool external fragmentation: 1 - largest free block / free bytes (0 when none free).",
        g.pool.external_fragmentation);
  counter("pier_memory_alloc_failures_total", "Allocations refused for lack of memory.",
          bytes(g.failure_count));
  counter("pier_memory_shrink_requests_total", "Requests sent to owners to shrink their leases.",
          bytes(g.shrink_requests));
  counter("pier_memory_deadline_misses_total", "Shrink requests not honoured by their deadline.",
          bytes(g.deadline_misses));
  // The governor's pressure figures (issue #22): what is promised, lent and being taken back,
  // and the field report's pressure index, used / capacity x allocations waiting.
  uint64_t guaranteed_sum = 0, reclaiming = 0;
  const uint64_t lent = LentBytes(g);  // the console's figure too (live/memory_history.h)
  for (const OwnerStats& o : g.owners) guaranteed_sum += o.guaranteed_bytes;
  for (const LeaseStats& l : g.leases) {
    if (l.shrink_pending) ++reclaiming;
  }
  gauge("pier_memory_guaranteed_bytes", "Budget guaranteed to owners (their floors), summed.",
        bytes(guaranteed_sum));
  gauge("pier_memory_lent_bytes", "Elastic KV chunks held above their leases' minimum.",
        bytes(lent));
  gauge("pier_memory_reclaims_in_progress", "Leases asked to shrink that have not yet.",
        bytes(reclaiming));
  gauge("pier_memory_waiting_allocations", "Allocations short of budget, waiting on a reclaim now.",
        bytes(g.waiting_allocations));
  gauge("pier_memory_pressure_index",
        "Memory pressure as the field report defined it: held / capacity x allocations waiting "
        "(0 when none wait).",
        PressureIndex(g));

  const std::vector<std::string> owner_labels = {"model", "device", "owner"};
  auto& used =
      r.GaugeFamily("pier_memory_owner_used_bytes",
                    "Bytes charged to the owner (blocks, external, lease chunks).", owner_labels);
  auto& peak = r.GaugeFamily("pier_memory_owner_peak_bytes",
                             "Highest pier_memory_owner_used_bytes since the owner was added.",
                             owner_labels);
  auto& committed = r.GaugeFamily(
      "pier_memory_owner_committed_bytes",
      "The owner's share of the budget: max(used, guaranteed, reserved).", owner_labels);
  auto& guaranteed = r.GaugeFamily("pier_memory_owner_guaranteed_bytes",
                                   "Bytes always available to the owner.", owner_labels);
  auto& quota =
      r.GaugeFamily("pier_memory_owner_quota_bytes",
                    "Bytes the owner may never exceed (absent when unlimited).", owner_labels);
  auto& unresponsive = r.GaugeFamily(
      "pier_memory_owner_unresponsive",
      "1 while the owner has missed a shrink deadline (it may not grow), else 0.", owner_labels);
  for (const OwnerStats& o : g.owners) {
    const metrics::Labels labels = {
        {"model", OwnerModel(o.name, governor, models)}, {"device", g.device}, {"owner", o.name}};
    used.WithLabels(labels).Set(bytes(o.allocated_bytes));
    peak.WithLabels(labels).Set(bytes(o.peak_allocated_bytes));
    committed.WithLabels(labels).Set(bytes(o.committed_bytes));
    guaranteed.WithLabels(labels).Set(bytes(o.guaranteed_bytes));
    if (o.max_bytes != std::numeric_limits<uint64_t>::max()) {
      quota.WithLabels(labels).Set(bytes(o.max_bytes));
    }
    unresponsive.WithLabels(labels).Set(o.unresponsive ? 1 : 0);
  }
}

}  // namespace pier::serving
