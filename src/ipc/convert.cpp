#include "ipc/convert.h"

#include <cmath>
#include <string>
#include <utility>

namespace pier::ipc {
namespace {

void ToProto(const sampling::TokenLogprob& t, proto::TokenLogprob* out) {
  out->set_token(t.token);
  out->set_logprob(t.logprob);
}

sampling::TokenLogprob FromProto(const proto::TokenLogprob& t) { return {t.token(), t.logprob()}; }

}  // namespace

void ToProto(const engine::Request& r, proto::Request* out) {
  out->Clear();
  out->set_id(r.id);
  out->mutable_prompt_tokens()->Assign(r.prompt_tokens.begin(), r.prompt_tokens.end());
  proto::Sampling* s = out->mutable_sampling();
  const sampling::SamplingParams& p = r.sampling;
  s->set_temperature(p.temperature);
  s->set_top_k(p.top_k);
  s->set_top_p(p.top_p);
  s->set_min_p(p.min_p);
  s->set_repetition_penalty(p.repetition_penalty);
  s->set_presence_penalty(p.presence_penalty);
  s->set_frequency_penalty(p.frequency_penalty);
  s->set_seed(p.seed);
  if (p.logprobs.has_value()) s->set_logprobs(*p.logprobs);
  for (const auto& [token, bias] : p.logit_bias) {
    proto::TokenLogprob* b = s->add_logit_bias();
    b->set_token(token);
    b->set_logprob(bias);
  }
  out->set_n(r.n);
  out->set_max_tokens(r.max_tokens);
  for (const std::string& stop : r.stop) out->add_stop(stop);
  out->mutable_stop_token_ids()->Assign(r.stop_token_ids.begin(), r.stop_token_ids.end());
  out->set_ignore_eos(r.ignore_eos);
  out->set_skip_special_tokens(r.skip_special_tokens);
  if (r.prompt_logprobs.has_value()) out->set_prompt_logprobs(*r.prompt_logprobs);
  out->set_priority(static_cast<int32_t>(r.priority));
  if (r.deadline_us.has_value()) out->set_deadline_us(*r.deadline_us);
  out->set_tenant(r.tenant);
  out->set_arrival_us(r.arrival_us);
  out->set_tenant_weight(r.tenant_weight);
  out->set_on_deadline(static_cast<int32_t>(r.on_deadline));
  out->set_constraint_kind(static_cast<int32_t>(r.constraint.kind));
  out->set_constraint_schema(r.constraint.schema);
  out->set_constraint_prefix(r.constraint.prefix);
  out->set_constraint_suffix(r.constraint.suffix);
}

Result<engine::Request> FromProto(const proto::Request& in) {
  if (in.priority() < 0 || in.priority() > static_cast<int32_t>(engine::Priority::kLow)) {
    return InvalidArgumentError("IPC request " + in.id() + ": priority " +
                                std::to_string(in.priority()) + " is not a class (0..3)");
  }
  constexpr auto kMaxKind = static_cast<int32_t>(grammar::OutputConstraint::Kind::kJsonSchema);
  if (in.constraint_kind() < 0 || in.constraint_kind() > kMaxKind) {
    return InvalidArgumentError("IPC request " + in.id() + ": constraint kind " +
                                std::to_string(in.constraint_kind()) + " is not known (0.." +
                                std::to_string(kMaxKind) + ")");
  }
  if (!(in.tenant_weight() > 0) || !std::isfinite(in.tenant_weight())) {
    return InvalidArgumentError("IPC request " + in.id() + ": tenant weight " +
                                std::to_string(in.tenant_weight()) + " is not positive");
  }
  if (in.on_deadline() < 0 || in.on_deadline() > 1) {
    return InvalidArgumentError("IPC request " + in.id() + ": deadline action " +
                                std::to_string(in.on_deadline()) + " is not known (0..1)");
  }
  engine::Request r;
  r.id = in.id();
  r.prompt_tokens.assign(in.prompt_tokens().begin(), in.prompt_tokens().end());
  const proto::Sampling& s = in.sampling();
  r.sampling.temperature = s.temperature();
  r.sampling.top_k = s.top_k();
  r.sampling.top_p = s.top_p();
  r.sampling.min_p = s.min_p();
  r.sampling.repetition_penalty = s.repetition_penalty();
  r.sampling.presence_penalty = s.presence_penalty();
  r.sampling.frequency_penalty = s.frequency_penalty();
  r.sampling.seed = s.seed();
  if (s.has_logprobs()) r.sampling.logprobs = s.logprobs();
  for (const proto::TokenLogprob& b : s.logit_bias()) {
    r.sampling.logit_bias.emplace_back(b.token(), b.logprob());
  }
  r.n = in.n();
  r.max_tokens = in.max_tokens();
  r.stop.assign(in.stop().begin(), in.stop().end());
  r.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  r.ignore_eos = in.ignore_eos();
  r.skip_special_tokens = in.skip_special_tokens();
  if (in.has_prompt_logprobs()) r.prompt_logprobs = in.prompt_logprobs();
  r.priority = static_cast<engine::Priority>(in.priority());
  if (in.has_deadline_us()) r.deadline_us = in.deadline_us();
  r.tenant = in.tenant();
  r.arrival_us = in.arrival_us();
  r.tenant_weight = in.tenant_weight();
  r.on_deadline = static_cast<engine::Request::DeadlineAction>(in.on_deadline());
  r.constraint.kind = static_cast<grammar::OutputConstraint::Kind>(in.constraint_kind());
  r.constraint.schema = in.constraint_schema();
  r.constraint.prefix = in.constraint_prefix();
  r.constraint.suffix = in.constraint_suffix();
  return r;
}

void ToProto(const engine::Event& e, const std::string& request_id, proto::Event* out) {
  out->Clear();
  out->set_request_id(request_id);
  out->set_choice(e.choice);
  out->set_token(e.token);
  out->set_text(e.text);
  if (e.logprob.has_value()) out->set_logprob(*e.logprob);
  for (const sampling::TokenLogprob& t : e.top_logprobs) ToProto(t, out->add_top_logprobs());
  for (const engine::PromptTokenLogprob& p : e.prompt_logprobs) {
    proto::PromptTokenLogprob* q = out->add_prompt_logprobs();
    q->set_position(p.position);
    q->set_token(p.token);
    q->set_logprob(p.logprob);
    for (const sampling::TokenLogprob& t : p.top_logprobs) ToProto(t, q->add_top_logprobs());
  }
  if (e.finish.has_value()) out->set_finish(static_cast<int32_t>(*e.finish));
  out->set_error(e.error);
  out->set_request_fault(e.request_fault);
  out->set_queue_expired(e.queue_expired);
  out->set_prompt_tokens(e.usage.prompt_tokens);
  out->set_completion_tokens(e.usage.completion_tokens);
  out->set_cached_prompt_tokens(e.usage.cached_prompt_tokens);
  out->set_queued_us(e.times.queued_us);
  out->set_scheduled_us(e.times.scheduled_us);
  out->set_first_token_us(e.times.first_token_us);
  out->set_finished_us(e.times.finished_us);
}

Result<engine::Event> FromProto(const proto::Event& in) {
  if (in.has_finish() &&
      (in.finish() < 0 || in.finish() > static_cast<int32_t>(engine::FinishReason::kError))) {
    return InvalidArgumentError("IPC event of " + in.request_id() + ": finish " +
                                std::to_string(in.finish()) + " is not a finish reason (0..3)");
  }
  if (in.choice() < 0) {
    return InvalidArgumentError("IPC event of " + in.request_id() + ": negative choice " +
                                std::to_string(in.choice()));
  }
  engine::Event e;
  e.choice = in.choice();
  e.token = in.token();
  e.text = in.text();
  if (in.has_logprob()) e.logprob = in.logprob();
  for (const proto::TokenLogprob& t : in.top_logprobs()) e.top_logprobs.push_back(FromProto(t));
  for (const proto::PromptTokenLogprob& q : in.prompt_logprobs()) {
    engine::PromptTokenLogprob p;
    p.position = q.position();
    p.token = q.token();
    p.logprob = q.logprob();
    for (const proto::TokenLogprob& t : q.top_logprobs()) p.top_logprobs.push_back(FromProto(t));
    e.prompt_logprobs.push_back(std::move(p));
  }
  if (in.has_finish()) e.finish = static_cast<engine::FinishReason>(in.finish());
  e.error = in.error();
  e.request_fault = in.request_fault();
  e.queue_expired = in.queue_expired();
  e.usage = {in.prompt_tokens(), in.completion_tokens(), in.cached_prompt_tokens()};
  e.times = {in.queued_us(), in.scheduled_us(), in.first_token_us(), in.finished_us()};
  return e;
}

void ToProto(const engine::EngineStats& s, proto::Stats* out) {
  out->Clear();
  out->set_running(s.running);
  out->set_waiting(s.waiting);
  out->set_swapped(s.swapped);
  out->set_swap_outs(s.swap_outs);
  out->set_cow_copies(s.cow_copies);
  out->set_kv_blocks_used(s.kv_blocks_used);
  out->set_kv_blocks_total(s.kv_blocks_total);
  out->set_kv_blocks_cached(s.kv_blocks_cached);
  out->set_kv_block_size(s.kv_block_size);
  out->set_kv_tokens_used(s.kv_tokens_used);
  out->set_kv_blocks_max(s.kv_blocks_max);
  out->set_kv_grows(s.kv_grows);
  out->set_kv_shrinks(s.kv_shrinks);
  out->set_prefix_hit_rate(s.prefix_hit_rate);
  out->set_prompt_tokens_cached(s.prompt_tokens_cached);
  out->set_steps(s.steps);
  out->set_tokens_last_step(s.tokens_last_step);
  out->set_tokens_per_step(s.tokens_per_step);
  out->set_preemptions(s.preemptions);
  out->set_last_step_us(s.last_step_us);
  out->set_last_step_at_us(s.last_step_at_us);
  out->set_max_request_tokens(s.max_request_tokens);
  out->set_requests_finished(s.requests_finished);
  out->mutable_waiting_by_class()->Assign(s.waiting_by_class.begin(), s.waiting_by_class.end());
  out->set_max_seqs(s.max_seqs);
  out->set_admissions_per_s(s.admissions_per_s);
  out->set_admissions(s.admissions);
  out->set_queue_expired(s.queue_expired);
  out->set_queue_delayed(s.queue_delayed);
  out->set_steps_stopped_early(s.steps_stopped_early);
  out->set_spec_drafts(s.spec_drafts);
  out->set_spec_draft_tokens(s.spec_draft_tokens);
  out->set_spec_accepted_tokens(s.spec_accepted_tokens);
  out->mutable_spec_accepted_per_position()->Assign(s.spec_accepted_per_position.begin(),
                                                    s.spec_accepted_per_position.end());
  out->mutable_spec_accepted_lengths()->Assign(s.spec_accepted_lengths.begin(),
                                               s.spec_accepted_lengths.end());
  out->set_spec_skipped(s.spec_skipped);
  out->set_kv_bytes_per_token(s.kv_bytes_per_token);
  out->set_kv_waiting_for_memory(s.kv_waiting_for_memory);
  out->set_kv_waiting_since_us(s.kv_waiting_since_us);
  out->set_kv_idle_releases(s.kv_idle_releases);
  out->set_running_critical(s.running_critical);
  out->set_reserved_seqs(s.reserved_seqs);
  out->set_reserved_tokens(s.reserved_tokens);
  out->set_reserved_blocks(s.reserved_blocks);
  out->mutable_fair_share_clocks()->Assign(s.fair_share_clocks.begin(), s.fair_share_clocks.end());
  out->set_step_token_budget(s.step_token_budget);
  out->set_step_prefill_chunk(s.step_prefill_chunk);
  for (const engine::TenantShare& t : s.tenants) {
    proto::TenantShare* p = out->add_tenants();
    p->set_tenant(t.tenant);
    p->set_weight(t.weight);
    p->set_virtual_time(t.virtual_time);
    p->set_live_sequences(t.live_sequences);
    p->set_tokens(t.tokens);
    p->set_waiting(t.waiting);
    p->set_priority(static_cast<int32_t>(t.priority));
  }
}

engine::EngineStats FromProto(const proto::Stats& in) {
  engine::EngineStats s;
  s.running = in.running();
  s.waiting = in.waiting();
  s.swapped = in.swapped();
  s.swap_outs = in.swap_outs();
  s.cow_copies = in.cow_copies();
  s.kv_blocks_used = in.kv_blocks_used();
  s.kv_blocks_total = in.kv_blocks_total();
  s.kv_blocks_cached = in.kv_blocks_cached();
  s.kv_block_size = in.kv_block_size();
  s.kv_tokens_used = in.kv_tokens_used();
  s.kv_blocks_max = in.kv_blocks_max();
  s.kv_grows = in.kv_grows();
  s.kv_shrinks = in.kv_shrinks();
  s.prefix_hit_rate = in.prefix_hit_rate();
  s.prompt_tokens_cached = in.prompt_tokens_cached();
  s.steps = in.steps();
  s.tokens_last_step = in.tokens_last_step();
  s.tokens_per_step = in.tokens_per_step();
  s.preemptions = in.preemptions();
  s.last_step_us = in.last_step_us();
  s.last_step_at_us = in.last_step_at_us();
  s.max_request_tokens = in.max_request_tokens();
  s.requests_finished = in.requests_finished();
  // A stats frame is informational: extra classes are ignored, missing ones read 0.
  for (int c = 0; c < in.waiting_by_class_size() && c < 4; ++c) {
    s.waiting_by_class[static_cast<size_t>(c)] = in.waiting_by_class(c);
  }
  s.max_seqs = in.max_seqs();
  s.admissions_per_s = in.admissions_per_s();
  s.admissions = in.admissions();
  s.queue_expired = in.queue_expired();
  s.queue_delayed = in.queue_delayed();
  s.steps_stopped_early = in.steps_stopped_early();
  s.spec_drafts = in.spec_drafts();
  s.spec_draft_tokens = in.spec_draft_tokens();
  s.spec_accepted_tokens = in.spec_accepted_tokens();
  s.spec_accepted_per_position.assign(in.spec_accepted_per_position().begin(),
                                      in.spec_accepted_per_position().end());
  s.spec_accepted_lengths.assign(in.spec_accepted_lengths().begin(),
                                 in.spec_accepted_lengths().end());
  s.spec_skipped = in.spec_skipped();
  s.kv_bytes_per_token = in.kv_bytes_per_token();
  s.kv_waiting_for_memory = in.kv_waiting_for_memory();
  s.kv_waiting_since_us = in.kv_waiting_since_us();
  s.kv_idle_releases = in.kv_idle_releases();
  s.running_critical = in.running_critical();
  s.reserved_seqs = in.reserved_seqs();
  s.reserved_tokens = in.reserved_tokens();
  s.reserved_blocks = in.reserved_blocks();
  for (int c = 0; c < in.fair_share_clocks_size() && c < 4; ++c) {
    s.fair_share_clocks[static_cast<size_t>(c)] = in.fair_share_clocks(c);
  }
  s.step_token_budget = in.step_token_budget();
  s.step_prefill_chunk = in.step_prefill_chunk();
  for (const proto::TenantShare& p : in.tenants()) {
    // A class out of range is informational noise from a peer: shown as low, never indexed.
    const auto priority = static_cast<engine::Priority>(std::clamp(p.priority(), 0, 3));
    s.tenants.push_back({.tenant = p.tenant(),
                         .priority = priority,
                         .weight = p.weight(),
                         .virtual_time = p.virtual_time(),
                         .live_sequences = p.live_sequences(),
                         .waiting = p.waiting(),
                         .tokens = p.tokens()});
  }
  return s;
}

void ToProto(const Status& status, const std::string& request_id, proto::SubmitReply* out) {
  out->set_request_id(request_id);
  out->set_code(static_cast<int32_t>(status.code()));
  out->set_message(status.message());
}

Status FromProto(const proto::SubmitReply& reply) {
  if (reply.code() == 0) return Status::Ok();
  if (reply.code() < 0 || reply.code() > static_cast<int32_t>(StatusCode::kInternal)) {
    return InternalError("worker answered with unknown status code " +
                         std::to_string(reply.code()) + ": " + reply.message());
  }
  return Status(static_cast<StatusCode>(reply.code()), reply.message());
}

}  // namespace pier::ipc
