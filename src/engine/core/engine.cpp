#include "engine/core/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "engine/core/engine_state.h"
#include "engine/core/kv_ceiling.h"
#include "engine/core/kv_copies.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_matcher.h"
#include "engine/speculative/ngram_proposer.h"
#include "grammar/constraint.h"

namespace pier::engine {

namespace {

SchedulerOptions WithKvGroups(SchedulerOptions options, const KvGroups& groups, bool release) {
  options.kv_groups = groups;
  if (!release) std::fill(options.kv_groups.windows.begin(), options.kv_groups.windows.end(), 0);
  return options;
}

}  // namespace

Engine::Engine(const EngineOptions& options, ModelRunner* runner, KvStore* kv,
               const tokenizer::Tokenizer* tokenizer, std::unique_ptr<SwapSpace> swap)
    : options_(options),
      runner_(runner),
      kv_(kv),
      elastic_(dynamic_cast<LeasedKvStore*>(kv)),
      tokenizer_(tokenizer),
      max_request_tokens_(
          std::min({runner->shape().context_length,
                    // Positions with every group's block: the longest sequence stays what
                    // the KV store holds without releases; released sliding blocks make room
                    // for more sequences at once, not for longer ones.
                    kv->num_blocks() / std::max<int64_t>(1, runner->shape().kv_groups.n_groups()) *
                        kv->layout().block_size,
                    options.max_request_tokens > 0 ? options.max_request_tokens
                                                   : std::numeric_limits<int64_t>::max()})),
      swap_(std::move(swap)),
      copier_(MakeKvBlockCopier(kv)),
      blocks_(kv->num_blocks(), kv->layout().block_size,
              elastic_ != nullptr ? elastic_->usable_blocks() : -1),
      scheduler_(WithKvGroups(options.scheduler, runner->shape().kv_groups,
                              options.release_sliding_blocks),
                 &blocks_, swap_.get(), copier_.get()),
      logits_scratch_(static_cast<size_t>(runner->shape().n_vocab)) {
  stats_.kv_blocks_total = blocks_.capacity();
  stats_.kv_blocks_max = blocks_.num_blocks();
  stats_.kv_block_size = blocks_.block_size();
  if (elastic_ != nullptr) {
    elastic_kv_.emplace(elastic_, &blocks_, &scheduler_, options.scheduler);
    elastic_->SetShrinkHandler([this](const ShrinkRequest& r) { ShrinkKv(r.chunks); });
    release_listener_ =
        elastic_->lease().governor().AddReleaseListener([this] { OnMemoryReleased(); });
  }
  stats_.max_request_tokens = max_request_tokens_;
  stats_.max_seqs = options.scheduler.max_seqs;
}

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options, ModelRunner* runner,
                                               KvStore* kv, const tokenizer::Tokenizer* tokenizer) {
  if (runner == nullptr || kv == nullptr) {
    return InvalidArgumentError("engine: a model runner and a KV store are required");
  }
  if (!(kv->layout() == runner->shape().kv)) {
    return InvalidArgumentError("engine: the KV store's layout does not match the model's");
  }
  if (kv->num_blocks() < 1) return InvalidArgumentError("engine: the KV store has no blocks");
  if (options.scheduler.max_batched_tokens < 1 || options.scheduler.max_seqs < 1) {
    return InvalidArgumentError("engine: max_batched_tokens and max_seqs must be at least 1");
  }
  if (options.swap_blocks < 0) return InvalidArgumentError("engine: swap_blocks must be >= 0");
  if (!(options.scheduler.reserved_share >= 0 && options.scheduler.reserved_share <= 0.5)) {
    return InvalidArgumentError("engine: reserved_share must be in [0, 0.5]");
  }
  if (options.adaptive.min_batched_tokens < 0 || options.adaptive.max_prefill_chunk < 0) {
    return InvalidArgumentError("engine: adaptive batching bounds must be >= 0");
  }
  if (options.scheduler.preempt_by_swap && options.swap_blocks == 0) {
    return InvalidArgumentError("engine: preempt_by_swap needs swap_blocks > 0");
  }
  if (options.swap_blocks > 0 && options.swap_pool == nullptr) {
    return InvalidArgumentError("engine: swap_blocks needs a swap_pool (the pinned host pool)");
  }
  std::unique_ptr<SwapSpace> swap;
  if (options.swap_blocks > 0) {
    PIER_ASSIGN_OR_RETURN(swap, CreateHostSwapSpace(kv, options.swap_blocks, options.swap_pool));
  }
  if (options.max_n < 1) return InvalidArgumentError("engine: max_n must be at least 1");
  if (tokenizer != nullptr && tokenizer->vocab_size() > runner->shape().n_vocab) {
    return InvalidArgumentError("engine: the tokenizer's vocabulary is larger than the model's");
  }
  const SpeculativeOptions& spec = options.speculative;
  if (spec.method != SpeculativeMethod::kOff) {
    if (spec.max_tokens < 1 || spec.max_tokens > 32) {
      return InvalidArgumentError("engine: speculative max_tokens must be in [1, 32], got " +
                                  std::to_string(spec.max_tokens));
    }
    if (spec.ngram_min < 1 || spec.ngram_max < spec.ngram_min || spec.ngram_max > 16) {
      return InvalidArgumentError(
          "engine: speculative n-gram sizes must satisfy 1 <= ngram_min <= ngram_max <= 16");
    }
    if (spec.method == SpeculativeMethod::kDraft && spec.proposer == nullptr) {
      return InvalidArgumentError("engine: speculative method draft needs the draft's proposer");
    }
  }
  std::unique_ptr<Engine> engine(new Engine(options, runner, kv, tokenizer, std::move(swap)));
  if (spec.method != SpeculativeMethod::kOff) {
    if (spec.method == SpeculativeMethod::kNgram) {
      engine->own_proposer_ = std::make_unique<NgramProposer>(spec.ngram_min, spec.ngram_max);
      engine->proposer_ = engine->own_proposer_.get();
    } else {
      engine->proposer_ = spec.proposer.get();
    }
    engine->planner_.emplace(spec.max_tokens);
    engine->spec_accepted_per_position_.assign(static_cast<size_t>(spec.max_tokens), 0);
    engine->spec_accepted_lengths_.assign(static_cast<size_t>(spec.max_tokens) + 1, 0);
    if (spec.adaptive) engine->CalibrateSpeculation();
  }
  engine->UpdateIdle();
  if (options.start_thread) engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::~Engine() {
  if (elastic_ != nullptr) {
    elastic_->SetShrinkHandler({});
    elastic_->lease().governor().RemoveReleaseListener(release_listener_);
  }
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  TakeInbox();
  std::vector<std::string> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (const std::string& id : ids) AbortLive(id);
}

Result<std::shared_ptr<RequestHandle>> Engine::Submit(Request request) {
  const ModelShape& shape = runner_->shape();
  if (request.id.empty()) return InvalidArgumentError("request id is empty");
  if (request.prompt_tokens.empty()) return InvalidArgumentError("prompt is empty");
  for (int32_t t : request.prompt_tokens) {
    if (t < 0 || t >= shape.n_vocab) {
      return InvalidArgumentError("prompt token " + std::to_string(t) +
                                  " is outside the vocabulary [0, " +
                                  std::to_string(shape.n_vocab) + ")");
    }
  }
  PIER_RETURN_IF_ERROR(request.sampling.Validate());
  if (request.n < 1 || request.n > options_.max_n) {
    return InvalidArgumentError("n must be in [1, " + std::to_string(options_.max_n) + "], got " +
                                std::to_string(request.n));
  }
  if (request.max_tokens < 1) {
    return InvalidArgumentError("max_tokens must be at least 1, got " +
                                std::to_string(request.max_tokens));
  }
  if (request.prompt_logprobs.has_value() &&
      (*request.prompt_logprobs < 0 || *request.prompt_logprobs > sampling::kMaxLogprobs)) {
    return InvalidArgumentError("prompt_logprobs must be in [0, " +
                                std::to_string(sampling::kMaxLogprobs) + "], got " +
                                std::to_string(*request.prompt_logprobs));
  }
  for (const std::string& s : request.stop) {
    if (s.empty()) return InvalidArgumentError("stop strings must not be empty");
  }
  if (request.constraint.active()) {
    if (tokenizer_ == nullptr) {
      return InvalidArgumentError("an output constraint needs the model's tokenizer");
    }
    // Refused here, on the caller's thread, so a bad schema never reaches the engine thread;
    // the engine compiles it again against the vocabulary (cached per constraint).
    PIER_RETURN_IF_ERROR(grammar::CheckConstraint(request.constraint));
  }
  const int64_t total = static_cast<int64_t>(request.prompt_tokens.size()) + request.max_tokens;
  if (total > max_request_tokens_) {
    return InvalidArgumentError(
        "prompt (" + std::to_string(request.prompt_tokens.size()) + " tokens) plus max_tokens (" +
        std::to_string(request.max_tokens) + ") is " + std::to_string(total) +
        " tokens; this model instance holds at most " + std::to_string(max_request_tokens_) +
        " tokens per sequence (KV capacity " + std::to_string(blocks_.num_blocks()) +
        " blocks of " + std::to_string(blocks_.block_size()) + ", context length " +
        std::to_string(shape.context_length) + ")");
  }
  // Memory that can never come is refused now rather than waited for.
  if (std::optional<std::string> refusal =
          KvCeilingRefusal(total, KvCeilingTokens(), KvBytesPerToken());
      refusal.has_value()) {
    return InvalidArgumentError(*refusal);
  }
  if (request.arrival_us == 0) request.arrival_us = NowUs();
  auto handle = std::make_shared<RequestHandle>(request.id, request.n);
  {
    MutexLock lock(mutex_);
    if (stopping_) return UnavailableError("engine is shutting down");
    if (options_.max_waiting > 0) {
      const int64_t waiting = stats_.waiting + unpublished_sequences_;
      // With a critical reserve, its share of the queue's places (at least one) is kept for
      // critical requests: a full queue refuses every other class before it refuses them.
      const int64_t limit = request.priority == Priority::kCritical
                                ? options_.max_waiting
                                : options_.max_waiting - ReservedQueuePlaces();
      if (waiting + request.n > limit) {
        return ResourceExhaustedError(
            "queue full: " + std::to_string(waiting) + " sequences are waiting (limit " +
            std::to_string(limit) +
            (limit < options_.max_waiting
                 ? " for class " + std::string(PriorityName(request.priority)) + ", " +
                       std::to_string(options_.max_waiting - limit) + " kept for critical"
                 : std::string()) +
            ")");
      }
    }
    if (!ids_in_use_.insert(request.id).second) {
      return InvalidArgumentError("request id '" + request.id + "' is already in use");
    }
    unpublished_sequences_ += request.n;
    unpublished_by_class_[static_cast<size_t>(request.priority)] += request.n;
    if (options_.scheduler.qos && request.priority == Priority::kCritical) {
      critical_arrived_.store(true, std::memory_order_relaxed);
    }
    inbox_.emplace_back(std::move(request), handle);
  }
  cv_.notify_all();
  return handle;
}

void Engine::Abort(const std::string& id) {
  {
    MutexLock lock(mutex_);
    aborts_.push_back(id);
  }
  cv_.notify_all();
}

void Engine::AbortAll(std::string reason) {
  {
    MutexLock lock(mutex_);
    abort_all_reason_ = std::move(reason);
  }
  cv_.notify_all();
}

EngineStats Engine::Stats() const {
  EngineStats stats;
  stats.kv_ceiling_tokens = KvCeilingTokens();
  stats.kv_bytes_per_token = KvBytesPerToken();
  {
    MutexLock lock(mutex_);
    const int64_t ceiling = stats.kv_ceiling_tokens;
    const int64_t per_token = stats.kv_bytes_per_token;
    stats = stats_;
    stats.kv_ceiling_tokens = ceiling;
    stats.kv_bytes_per_token = per_token;
    // Submitted and not yet taken by the engine thread: waiting too (a router choosing the
    // least loaded instance must see requests the moment they are accepted).
    stats.waiting += unpublished_sequences_;
    for (size_t c = 0; c < stats.waiting_by_class.size(); ++c) {
      stats.waiting_by_class[c] += unpublished_by_class_[c];
    }
  }
  // The fair-share ledger may be the device's, moved by other models' steps while this engine
  // idles: read it now, with this engine's waiting counts from its last step.
  std::map<std::pair<Priority, std::string>, int64_t> waiting;
  for (const TenantShare& t : stats.tenants) waiting[{t.priority, t.tenant}] = t.waiting;
  stats.tenants.clear();
  const FairShareLedger& ledger = *scheduler_.ledger();
  for (size_t c = 0; c < stats.fair_share_clocks.size(); ++c) {
    const auto cls = static_cast<Priority>(c);
    stats.fair_share_clocks[c] = ledger.Clock(cls);
    for (TenantShare& t : ledger.Snapshot(cls)) {
      t.priority = cls;
      auto it = waiting.find({cls, t.tenant});
      t.waiting = it == waiting.end() ? 0 : it->second;
      stats.tenants.push_back(std::move(t));
    }
  }
  return stats;
}

void Engine::ShrinkKv(size_t chunks) {
  if (elastic_ == nullptr) return;
  {
    MutexLock lock(mutex_);
    shrink_chunks_ += chunks;
  }
  cv_.notify_all();
}

void Engine::ApplyShrink() {
  size_t chunks = 0;
  {
    MutexLock lock(mutex_);
    std::swap(chunks, shrink_chunks_);
  }
  if (!elastic_kv_.has_value() || chunks == 0 || !elastic_kv_->Shrink(chunks)) return;
  MutexLock lock(mutex_);
  ++stats_.kv_shrinks;
}

bool Engine::TryGrowKv(const StepPlan& plan) {
  if (!elastic_kv_.has_value() || !elastic_kv_->NeedsMoreBlocks(plan) ||
      !elastic_kv_->TryGrow(releases_at_plan_)) {
    return false;
  }
  MutexLock lock(mutex_);
  ++stats_.kv_grows;
  return true;
}

void Engine::UpdateIdle() {
  if (elastic_kv_.has_value()) elastic_kv_->UpdateIdle();
}

void Engine::Loop() {
  while (true) {
    WaitForWork();
    {
      MutexLock lock(mutex_);
      if (stopping_) return;
    }
    RunStep();
  }
}

bool Engine::RunStep() {
  TakeInbox();
  ApplyShrink();
  UpdateIdle();
  if (elastic_kv_.has_value()) {
    const auto idle_us =
        std::chrono::duration_cast<std::chrono::microseconds>(options_.kv_idle_release).count();
    if (elastic_kv_->ReleaseIdle(NowUs(), idle_us) > 0) {
      ++kv_idle_releases_;
      MutexLock lock(mutex_);
      ++stats_.kv_shrinks;
    }
  }
  if (!scheduler_.HasWork()) {
    stalled_ = false;
    PublishStats(0, 0);
    return false;
  }
  Step();
  UpdateIdle();
  return true;
}

void Engine::TakeInbox() {
  std::vector<std::pair<Request, std::shared_ptr<RequestHandle>>> inbox;
  std::vector<std::string> aborts;
  std::optional<std::string> abort_all;
  {
    MutexLock lock(mutex_);
    inbox.swap(inbox_);
    critical_arrived_.store(false, std::memory_order_relaxed);  // taken: the next plan has it
    aborts.swap(aborts_);
    abort_all.swap(abort_all_reason_);
  }
  for (const auto& [request, handle] : inbox) {
    taken_sequences_ += request.n;
    taken_by_class_[static_cast<size_t>(request.priority)] += request.n;
  }
  for (auto& [request, handle] : inbox) StartRequest(std::move(request), std::move(handle));
  for (const std::string& id : aborts) AbortLive(id);
  if (abort_all.has_value()) {
    std::vector<std::string> ids;
    for (const auto& [id, live] : live_) ids.push_back(id);
    for (const std::string& id : ids) AbortLive(id, *abort_all);
  }
}

void Engine::StartRequest(Request request, std::shared_ptr<RequestHandle> handle) {
  if (request.priority <= Priority::kHigh) last_urgent_us_ = NowUs();
  auto live = std::make_unique<Live>();
  live->request = std::move(request);
  live->handle = std::move(handle);
  const Request& r = live->request;
  std::vector<int32_t> eog = r.stop_token_ids;
  if (!r.ignore_eos) {
    const std::vector<int32_t>& model_eog = tokenizer_ != nullptr
                                                ? tokenizer_->end_of_generation_ids()
                                                : options_.end_of_generation_ids;
    eog.insert(eog.end(), model_eog.begin(), model_eog.end());
  }
  const auto n_vocab = static_cast<int32_t>(runner_->shape().n_vocab);
  for (int32_t i = 0; i < r.n; ++i) {
    sampling::SamplingParams params = r.sampling;
    params.seed = r.sampling.seed + static_cast<uint64_t>(i);
    Result<sampling::Sampler> sampler = sampling::Sampler::Create(params, n_vocab);
    Result<sampling::StopMatcher> stop = sampling::StopMatcher::Create(r.stop, eog);
    PIER_CHECK(sampler.ok() && stop.ok(), "validated at Submit");
    Status added = sampler->AddPromptTokens(r.prompt_tokens);
    PIER_CHECK(added.ok(), "validated at Submit");
    live->choices.push_back(Choice{
        .index = i,
        .sampler = std::move(sampler).value(),
        .output = OutputProcessor(std::move(stop).value(), tokenizer_, r.skip_special_tokens),
        .constraint = std::nullopt});
  }
  const std::string id = r.id;
  Live& ref = *live;
  live_.emplace(id, std::move(live));
  if (Status attached = AttachConstraint(ref); !attached.ok()) {
    for (Choice& c : ref.choices) {
      Event event;
      event.error = attached.ToString();
      event.request_fault = true;
      FinishChoice(ref, c, std::move(event), FinishReason::kError);
    }
    FinishRequestIfDone(id);
    return;
  }
  AddChoiceSequence(ref, 0);
}

Status Engine::AttachConstraint(Live& live) {
  const grammar::OutputConstraint& constraint = live.request.constraint;
  if (!constraint.active()) return Status::Ok();
  if (grammars_ == nullptr) {
    grammars_ = std::make_unique<grammar::GrammarCache>(
        grammar::TokenVocabulary::FromTokenizer(*tokenizer_));
  }
  PIER_ASSIGN_OR_RETURN(std::shared_ptr<grammar::Grammar> compiled, grammars_->Get(constraint));
  for (Choice& c : live.choices) c.constraint.emplace(compiled);
  return Status::Ok();
}

void Engine::AddChoiceSequence(Live& live, int32_t index) {
  Choice& c = live.choices[index];
  c.sequence_id = next_sequence_id_++;
  c.started = true;
  SequenceSpec spec;
  spec.id = c.sequence_id;
  spec.tokens = live.request.prompt_tokens;
  spec.priority = live.request.priority;
  spec.deadline_us = live.request.deadline_us;
  spec.arrival_us = live.request.arrival_us;
  spec.tenant = live.request.tenant;
  spec.tenant_weight = live.request.tenant_weight;
  spec.prompt_logits = index == 0 && live.request.prompt_logprobs.has_value();
  scheduler_.Add(std::move(spec));
  by_sequence_[c.sequence_id] = {&live, index};
}

void Engine::FinishChoice(Live& live, Choice& c, Event event, FinishReason reason) {
  if (c.started) {
    if (c.generated == 0 && scheduler_.Contains(c.sequence_id)) {
      live.cached_prompt_tokens =
          std::max(live.cached_prompt_tokens, scheduler_.CachedTokens(c.sequence_id));
    }
    scheduler_.Remove(c.sequence_id);
    by_sequence_.erase(c.sequence_id);
    if (planner_.has_value()) {
      planner_->Forget(c.sequence_id);
      proposer_->Forget(c.sequence_id);
    }
    // Readers who see the final event also see the blocks freed.
    const SchedulerStats s = scheduler_.Stats();
    const int64_t kv_tokens_used = CountKvTokensUsed();
    MutexLock lock(mutex_);
    stats_.kv_blocks_used = blocks_.num_used();
    stats_.kv_blocks_cached = blocks_.num_cached();
    stats_.kv_tokens_used = kv_tokens_used;
    stats_.running = s.running;
    stats_.waiting = s.waiting;
  }
  c.done = true;
  event.choice = c.index;
  event.finish = reason;
  event.usage.prompt_tokens = static_cast<int64_t>(live.request.prompt_tokens.size());
  event.usage.completion_tokens = c.generated;
  event.usage.cached_prompt_tokens = live.cached_prompt_tokens;
  event.times.queued_us = live.request.arrival_us;
  event.times.scheduled_us = live.scheduled_us;
  event.times.first_token_us = c.first_token_us;
  event.times.finished_us = NowUs();
  // The request's id is free again before its last event is seen, so a caller who reuses the
  // id right after that event is not refused ("already in use").
  const bool last = std::all_of(live.choices.begin(), live.choices.end(),
                                [](const Choice& choice) { return choice.done; });
  if (last) {
    MutexLock lock(mutex_);
    ids_in_use_.erase(live.request.id);
    ++stats_.requests_finished;
  }
  live.handle->Push(std::move(event));
}

void Engine::FinishRequestIfDone(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  for (const Choice& c : it->second->choices) {
    if (!c.done) return;
  }
  live_.erase(it);  // its id was freed with its last event (FinishChoice)
}

void Engine::AbortLive(const std::string& id, const std::string& reason) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = *it->second;
  for (Choice& c : live.choices) {
    Event event;
    event.error = reason;
    if (!c.done) FinishChoice(live, c, std::move(event), FinishReason::kAbort);
  }
  FinishRequestIfDone(id);
}

void Engine::Step() {
  const TimestampUs start = NowUs();
  ExpireOverdue(start);
  if (!scheduler_.HasWork()) {
    PublishStats(0, 0);
    return;
  }
  AdaptStepLimits();
  if (planner_.has_value()) ProposeDrafts();
  // Read before planning: a release after this read wakes a stalled engine again.
  releases_at_plan_ = MemoryReleases();
  StepPlan plan = scheduler_.Plan();
  for (int tries = 0; tries < 4 && TryGrowKv(plan); ++tries) {
    plan = scheduler_.Plan();
  }
  // Work waits for blocks the lease could not get: it waits for memory to be given back.
  const bool starved = elastic_kv_.has_value() && elastic_kv_->NeedsMoreBlocks(plan) &&
                       elastic_kv_->WaitingForRelease(releases_at_plan_);
  if (elastic_kv_.has_value()) elastic_kv_->SetWaitingForMemory(starved);
  if (!starved) {
    kv_waiting_since_us_ = 0;
  } else if (kv_waiting_since_us_ == 0) {
    kv_waiting_since_us_ = start;
  }
  Batch batch = scheduler_.Apply(plan);
  stalled_ = batch.sequences.empty();
  // A step that reads no critical prompt may stop for a critical request arriving during it:
  // the request then waits for one layer instead of the rest of the step.
  if (options_.stop_steps_for_critical && scheduler_.MayStopForTopClass(plan)) {
    batch.stop_early = &critical_arrived_;
  }
  if (batch.sequences.empty()) {
    // Everything was preempted or nothing fits this step; Commit advances the step counter.
    (void)scheduler_.Commit(plan);
    PublishStats(0, NowUs() - start);
    return;
  }
  const TimestampUs runner_start = NowUs();
  Result<StepOutput> output = runner_->Step(batch);
  if (!output.ok()) {
    // The whole batch fails with the runner's reason; nothing else is touched.
    const std::string message = output.status().ToString();
    std::set<std::string> ids;
    for (const SequenceSpan& span : batch.sequences) {
      auto it = by_sequence_.find(span.sequence_id);
      if (it != by_sequence_.end()) ids.insert(it->second.first->request.id);
    }
    scheduler_.CommitFailed(plan);  // nothing computed, nothing named for reuse
    for (const std::string& id : ids) {
      Live& live = *live_.at(id);
      for (Choice& c : live.choices) {
        if (c.done) continue;
        Event e;
        e.error = message;
        FinishChoice(live, c, std::move(e), FinishReason::kError);
      }
      FinishRequestIfDone(id);
    }
    PublishStats(0, NowUs() - start);
    return;
  }
  if (output->stopped_early) {
    // As if never run: the next step puts the critical prompt first and redoes the rest
    // (batch invariance gives the same tokens whatever the new batch).
    scheduler_.CommitFailed(plan);
    ++steps_stopped_early_;
    PublishStats(0, NowUs() - start);
    return;
  }
  const std::vector<StepResult> results = scheduler_.Commit(plan);
  const StepOutput& out = *output;
  // Rows come back in batch order, positions ascending: a span's last row is its last
  // position, the one a sampling span samples from; a verified span's rows start at its first.
  std::vector<int64_t> row_of(batch.sequences.size(), -1);
  std::vector<int64_t> first_row_of(batch.sequences.size(), -1);
  for (size_t r = 0; r < out.rows.size(); ++r) {
    const LogitsRow& row = out.rows[r];
    row_of[row.sequence_index] = static_cast<int64_t>(r);
    if (first_row_of[row.sequence_index] < 0) {
      first_row_of[row.sequence_index] = static_cast<int64_t>(r);
    }
    if (batch.sequences[row.sequence_index].logits == LogitsWanted::kAll &&
        results[row.sequence_index].draft.empty()) {
      RecordPromptLogprob(batch.sequences[row.sequence_index].sequence_id, row.position,
                          out.Row(r));
    }
  }
  for (const StepResult& result : results) {
    auto it = by_sequence_.find(result.id);
    if (it != by_sequence_.end() && it->second.first->scheduled_us == 0) {
      it->second.first->scheduled_us = start;
    }
  }
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].samples) continue;
    PIER_CHECK(row_of[i] >= 0, "the runner returned no logits for a sampling span");
    auto it = by_sequence_.find(results[i].id);
    if (it == by_sequence_.end()) continue;
    Live& live = *it->second.first;
    Choice& c = live.choices[it->second.second];
    const std::string id = live.request.id;
    if (!results[i].draft.empty()) {
      VerifyDraft(live, c, out, static_cast<size_t>(first_row_of[i]), results[i].draft);
    } else {
      HandleToken(live, c, out.Row(static_cast<size_t>(row_of[i])));
    }
    FinishRequestIfDone(id);
  }
  if (planner_.has_value()) {
    // The step's cost as speculation weighs it: the runner and the sampling of its rows.
    planner_->cost().Observe(plan.num_tokens(), static_cast<double>(NowUs() - runner_start));
    planner_->EndStep();
  }
  PublishStats(plan.num_tokens(), NowUs() - start);
}

void Engine::RecordPromptLogprob(int64_t sequence_id, int64_t position,
                                 std::span<const float> logits) {
  auto it = by_sequence_.find(sequence_id);
  if (it == by_sequence_.end()) return;
  Live& live = *it->second.first;
  const std::vector<int32_t>& prompt = live.request.prompt_tokens;
  // Position p's logits score prompt token p + 1; a recompute after preemption repeats rows
  // already recorded (or already sent with the first token).
  if (live.choices[0].generated > 0 || position + 1 >= static_cast<int64_t>(prompt.size()) ||
      position != static_cast<int64_t>(live.prompt_logprobs.size())) {
    return;
  }
  // The sampler's log-softmax (deterministic exp, fixed summation order): prompt logprobs
  // follow the same convention, bit for bit on any machine, as sampled-token logprobs.
  PromptTokenLogprob lp;
  lp.position = position + 1;
  lp.token = prompt[static_cast<size_t>(position + 1)];
  const sampling::TokenLogprobs computed =
      sampling::ComputeLogprobs(logits, lp.token, *live.request.prompt_logprobs);
  lp.logprob = computed.logprob;
  for (const sampling::TokenLogprob& t : computed.top) {
    lp.top_logprobs.push_back({.token = t.token, .logprob = t.logprob});
  }
  live.prompt_logprobs.push_back(std::move(lp));
}

void Engine::HandleToken(Live& live, Choice& c, std::span<const float> logits) {
  if (c.generated == 0 && c.index == 0) {
    live.cached_prompt_tokens =
        std::max(live.cached_prompt_tokens, scheduler_.CachedTokens(c.sequence_id));
    // The prompt is computed: the other choices fork from it (before it appends its token)
    // and sample their first tokens from the same logits.
    for (int32_t i = 1; i < live.request.n; ++i) {
      Choice& child = live.choices[i];
      child.sequence_id = next_sequence_id_++;
      child.started = true;
      scheduler_.Fork(c.sequence_id, child.sequence_id);
      by_sequence_[child.sequence_id] = {&live, i};
    }
    SampleChoice(live, c, logits);
    for (int32_t i = 1; i < live.request.n; ++i) SampleChoice(live, live.choices[i], logits);
    return;
  }
  SampleChoice(live, c, logits);
}

bool Engine::SampleChoice(Live& live, Choice& c, std::span<const float> row, int32_t proposed,
                          int32_t* sampled_token) {
  if (sampled_token != nullptr) *sampled_token = -1;
  auto fail = [&](const Status& status, bool request_fault) {
    Event e;
    e.error = status.ToString();
    e.request_fault = request_fault;
    FinishChoice(live, c, std::move(e), FinishReason::kError);
    return false;
  };
  // The row is the runner's (and the other choices'): copied only when masked or penalized.
  const bool writes = c.constraint.has_value() || c.sampler.ModifiesLogits();
  std::span<float> logits;
  if (writes) {
    std::copy(row.begin(), row.end(), logits_scratch_.begin());
    logits = logits_scratch_;
  }
  if (c.constraint.has_value()) {
    if (Status masked = c.constraint->MaskLogits(logits); !masked.ok()) {
      return fail(Status(masked.code(), "the output constraint: " + masked.message()), true);
    }
  }
  Result<sampling::SampleResult> sampled =
      writes ? c.sampler.Sample(logits) : c.sampler.SampleReadOnly(row);
  if (!sampled.ok()) return fail(sampled.status(), false);
  if (c.constraint.has_value()) {
    if (Status accepted = c.constraint->Accept(sampled->token); !accepted.ok()) {
      return fail(accepted, false);  // the mask allowed it: a bug, not the request's fault
    }
  }
  if (sampled_token != nullptr) *sampled_token = sampled->token;
  ++c.generated;
  if (c.first_token_us == 0) c.first_token_us = NowUs();
  Event e;
  if (c.index == 0 && c.generated == 1 && live.request.prompt_logprobs.has_value()) {
    e.prompt_logprobs = std::move(live.prompt_logprobs);
  }
  e.token = sampled->token;
  e.logprob = sampled->logprob;
  e.top_logprobs = std::move(sampled->top_logprobs);
  OutputProcessor::Output out = c.output.OnToken(e.token);
  e.text = std::move(out.text);
  if (out.stopped) {
    FinishChoice(live, c, std::move(e), FinishReason::kStop);
    return false;
  }
  // A constrained output that is a whole match and cannot grow is finished (no need to wait
  // for an end-of-generation token the mask would force next anyway).
  if (c.constraint.has_value() && c.constraint->complete()) {
    OutputProcessor::Output tail = c.output.Finish();
    e.text += tail.text;
    FinishChoice(live, c, std::move(e), FinishReason::kStop);
    return false;
  }
  const int64_t length =
      static_cast<int64_t>(scheduler_.Tokens(c.sequence_id).size()) + 1;  // with this token
  if (c.generated >= live.request.max_tokens || length >= max_request_tokens_) {
    OutputProcessor::Output tail = c.output.Finish();
    e.text += tail.text;
    FinishChoice(live, c, std::move(e), tail.stopped ? FinishReason::kStop : FinishReason::kLength);
    return false;
  }
  // The proposal at this position was this very token: its K/V are the ones just computed.
  const bool kept = proposed >= 0 && e.token == proposed;
  scheduler_.AppendToken(c.sequence_id, e.token, kept);
  e.choice = c.index;
  live.handle->Push(std::move(e));
  return kept;
}

}  // namespace pier::engine
