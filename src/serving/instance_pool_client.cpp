#include "serving/instance_pool_client.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace pier::serving {

InstancePoolClient::InstancePoolClient(std::vector<engine::EngineClient*> instances)
    : instances_(std::move(instances)) {
  PIER_CHECK(!instances_.empty(), "an instance pool needs an instance");
}

size_t InstancePoolClient::PickInstance() const {
  size_t best = 0;
  double best_load = 0;
  bool best_serving = false;
  for (size_t i = 0; i < instances_.size(); ++i) {
    const bool serving = instances_[i]->Serving();
    const engine::EngineStats s = instances_[i]->Stats();
    const double capacity = static_cast<double>(std::max<int64_t>(1, s.kv_blocks_max));
    const double load = static_cast<double>(s.running + s.waiting) / capacity;
    // An instance that serves now beats one that does not (a worker restarting); then load.
    if (i == 0 || (serving && !best_serving) || (serving == best_serving && load < best_load)) {
      best = i;
      best_load = load;
      best_serving = serving;
    }
  }
  return best;
}

Result<std::shared_ptr<engine::RequestHandle>> InstancePoolClient::Submit(engine::Request request) {
  return instances_[PickInstance()]->Submit(std::move(request));
}

void InstancePoolClient::Abort(const std::string& id) {
  for (engine::EngineClient* instance : instances_) instance->Abort(id);
}

void InstancePoolClient::AbortAll(std::string reason) {
  for (engine::EngineClient* instance : instances_) instance->AbortAll(reason);
}

engine::EngineStats InstancePoolClient::Stats() const {
  std::vector<engine::EngineStats> all;
  for (engine::EngineClient* instance : instances_) all.push_back(instance->Stats());
  engine::EngineStats sum;
  sum.max_request_tokens = all.front().max_request_tokens;
  sum.kv_block_size = all.front().kv_block_size;
  double tokens = 0, hit_rate = 0;
  engine::TimestampUs busy_heartbeat = 0, latest_heartbeat = 0;
  bool any_busy = false;
  for (const engine::EngineStats& s : all) {
    sum.running += s.running;
    sum.waiting += s.waiting;
    sum.swapped += s.swapped;
    sum.swap_outs += s.swap_outs;
    sum.cow_copies += s.cow_copies;
    sum.kv_blocks_used += s.kv_blocks_used;
    sum.kv_blocks_total += s.kv_blocks_total;
    sum.kv_blocks_cached += s.kv_blocks_cached;
    sum.kv_tokens_used += s.kv_tokens_used;
    sum.kv_blocks_max += s.kv_blocks_max;
    sum.kv_grows += s.kv_grows;
    sum.kv_shrinks += s.kv_shrinks;
    sum.prompt_tokens_cached += s.prompt_tokens_cached;
    sum.steps += s.steps;
    sum.tokens_last_step += s.tokens_last_step;
    sum.preemptions += s.preemptions;
    sum.requests_finished += s.requests_finished;
    for (size_t c = 0; c < sum.waiting_by_class.size(); ++c) {
      sum.waiting_by_class[c] += s.waiting_by_class[c];
    }
    // The pool drains as fast as its instances together.
    sum.max_seqs += s.max_seqs;
    sum.admissions_per_s += s.admissions_per_s;
    sum.admissions += s.admissions;
    sum.queue_expired += s.queue_expired;
    sum.queue_delayed += s.queue_delayed;
    sum.steps_stopped_early += s.steps_stopped_early;
    sum.spec_drafts += s.spec_drafts;
    sum.spec_draft_tokens += s.spec_draft_tokens;
    sum.spec_accepted_tokens += s.spec_accepted_tokens;
    sum.spec_skipped += s.spec_skipped;
    auto add = [](std::vector<int64_t>& into, const std::vector<int64_t>& from) {
      if (into.size() < from.size()) into.resize(from.size(), 0);
      for (size_t i = 0; i < from.size(); ++i) into[i] += from[i];
    };
    add(sum.spec_accepted_per_position, s.spec_accepted_per_position);
    add(sum.spec_accepted_lengths, s.spec_accepted_lengths);
    sum.running_critical += s.running_critical;
    sum.reserved_seqs += s.reserved_seqs;
    sum.reserved_tokens += s.reserved_tokens;
    sum.reserved_blocks += s.reserved_blocks;
    for (size_t c = 0; c < sum.fair_share_clocks.size(); ++c) {
      sum.fair_share_clocks[c] = std::max(sum.fair_share_clocks[c], s.fair_share_clocks[c]);
    }
    // One entry per tenant across the instances: counts add up, the latest weight holds.
    for (const engine::TenantShare& t : s.tenants) {
      auto it =
          std::find_if(sum.tenants.begin(), sum.tenants.end(), [&](const engine::TenantShare& u) {
            return u.tenant == t.tenant && u.priority == t.priority;
          });
      if (it == sum.tenants.end()) {
        sum.tenants.push_back(t);
        continue;
      }
      it->weight = t.weight;
      it->virtual_time = std::max(it->virtual_time, t.virtual_time);
      it->live_sequences += t.live_sequences;
      it->waiting += t.waiting;
      it->tokens += t.tokens;
    }
    sum.last_step_us = std::max(sum.last_step_us, s.last_step_us);
    // A request fits the pool when it fits an instance (they are alike).
    sum.max_request_tokens = std::min(sum.max_request_tokens, s.max_request_tokens);
    // Instances of one model share the device's budget: the lowest ceiling any has (0: none).
    if (s.kv_ceiling_tokens > 0) {
      sum.kv_ceiling_tokens = sum.kv_ceiling_tokens > 0
                                  ? std::min(sum.kv_ceiling_tokens, s.kv_ceiling_tokens)
                                  : s.kv_ceiling_tokens;
    }
    sum.kv_bytes_per_token = std::max(sum.kv_bytes_per_token, s.kv_bytes_per_token);
    sum.kv_waiting_for_memory += s.kv_waiting_for_memory;
    if (s.kv_waiting_since_us > 0) {
      sum.kv_waiting_since_us = sum.kv_waiting_since_us > 0
                                    ? std::min(sum.kv_waiting_since_us, s.kv_waiting_since_us)
                                    : s.kv_waiting_since_us;
    }
    sum.kv_idle_releases += s.kv_idle_releases;
    tokens += s.tokens_per_step * static_cast<double>(s.steps);
    hit_rate += s.prefix_hit_rate;
    latest_heartbeat = std::max(latest_heartbeat, s.last_step_at_us);
    // The watchdog must see one stalled busy instance: the stalest busy heartbeat.
    if (s.running + s.waiting > 0) {
      busy_heartbeat = any_busy ? std::min(busy_heartbeat, s.last_step_at_us) : s.last_step_at_us;
      any_busy = true;
    }
  }
  sum.last_step_at_us = any_busy ? busy_heartbeat : latest_heartbeat;
  sum.tokens_per_step = sum.steps > 0 ? tokens / static_cast<double>(sum.steps) : 0;
  sum.prefix_hit_rate = hit_rate / static_cast<double>(all.size());
  return sum;
}

}  // namespace pier::serving
