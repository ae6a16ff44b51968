#include "memory/reclaim_policy.h"

#include <algorithm>
#include <map>

namespace pier {

ReclaimPlan ChooseReclaim(const std::vector<ReclaimCandidate>& leases,
                          const ReclaimRequester& requester, uint64_t need) {
  std::vector<const ReclaimCandidate*> candidates;
  for (const ReclaimCandidate& c : leases) {
    if (c.owner == requester.owner || c.shrink_pending || c.chunk_bytes == 0) continue;
    // A busy lease yields to more urgent work, or to as urgent work of a stronger owner.
    const bool weaker =
        c.urgency < requester.urgency ||
        (c.urgency == requester.urgency &&
         (c.priority < requester.priority ||
          (c.priority == requester.priority && c.waiting_only && requester.owner < c.owner)));
    if (!c.idle && !weaker) continue;
    candidates.push_back(&c);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const ReclaimCandidate* a, const ReclaimCandidate* b) {
                     if (a->idle != b->idle) return a->idle;
                     if (a->idle) return a->priority < b->priority;
                     if (a->urgency != b->urgency) return a->urgency < b->urgency;
                     return a->priority < b->priority;
                   });
  // How much each owner can give back without going below what it must keep.
  std::map<uint64_t, uint64_t> owner_room;
  ReclaimPlan plan;
  for (const ReclaimCandidate* c : candidates) {
    if (plan.bytes >= need) break;
    auto [it, inserted] = owner_room.try_emplace(c->owner, 0);
    if (inserted)
      it->second = c->owner_charged > c->owner_keep ? c->owner_charged - c->owner_keep : 0;
    size_t spare = c->chunks > c->min_chunks ? c->chunks - c->min_chunks : 0;
    spare = std::min<size_t>(spare, it->second / c->chunk_bytes);
    const size_t wanted = (need - plan.bytes + c->chunk_bytes - 1) / c->chunk_bytes;
    const size_t take = std::min(spare, wanted);
    if (take == 0) continue;
    plan.takes.push_back({c->lease_id, take});
    it->second -= take * c->chunk_bytes;
    plan.bytes += take * c->chunk_bytes;
  }
  plan.enough = plan.bytes >= need;
  return plan;
}

}  // namespace pier
