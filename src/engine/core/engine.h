// Engine: one model instance serving many requests at once.
//
// Submit() validates a Request and queues it; the engine thread turns it into sequences (one
// per choice), and every step asks the Scheduler for a plan, applies it, runs the ModelRunner
// on the resulting ragged batch, samples the sequences that reached their last token, detokenizes
// (UTF-8 safe), matches stop strings (held back, never streamed in part) and pushes Events to
// the request's RequestHandle. Finished and aborted requests free their KV blocks between steps.
//
// n > 1: choice 0 is queued alone; when its prompt has been computed, choices 1..n-1 are forked
// from it: they share every prompt block (a shared block is copied before its first write) and
// each samples its first token from the same logits, with seed + index.
//
// Elastic KV: when the KV store is a LeasedKvStore, the block manager's capacity follows the
// lease (ElasticKvController, elastic_kv.h: grows before a step that needs blocks, honours
// shrink requests between steps, marks the lease idle while nothing is live, gives an idle
// lease back down to its minimum after kv_idle_release). Submit refuses a request whose
// prompt + max_tokens needs more KV than the lease could ever reach under the memory budget
// (every other owner's leases at their minimum: Lease::AttainableChunks), so nothing waits
// for memory that can never come. When waiting work cannot start because the lease cannot
// grow now, the engine thread sleeps until the governor reports memory given back (a release
// listener), new work, an abort, a queue deadline or a 1 s heartbeat: it never spins.
// Detokenization and stop strings per choice: OutputProcessor (output_processor.h).
//
// Output constraints (Request::constraint): each choice of a constrained request has a
// grammar::GrammarMatcher; its mask is applied to the choice's own logits before sampling
// (penalties, bias and temperature come after it, so a refused token stays refused), which
// depends on nothing but that choice's tokens and so keeps batch invariance. A choice whose
// output has become a whole match that nothing may extend ends with finish reason stop.
//
// Ownership: the engine borrows the ModelRunner, its KvStore and the Tokenizer (optional), which
// must outlive it; it owns the BlockManager, the Scheduler and the request state.
// Thread-safety: Submit, Abort and Stats may be called from any thread. With
// EngineOptions::start_thread (the default) one engine thread owns the runner, the KV cache and
// the scheduler; without it the caller drives the engine with RunStep() from one thread (tests).
// RequestHandle methods may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/core/elastic_kv.h"
#include "engine/core/output_processor.h"
#include "engine/core/request_handle.h"
#include "engine/kv/block_manager.h"
#include "engine/kv/kv_store.h"
#include "engine/kv/leased_kv_store.h"
#include "engine/request.h"
#include "engine/runner/model_runner.h"
#include "engine/scheduler/scheduler.h"
#include "engine/speculative/proposer.h"
#include "engine/speculative/speculation_planner.h"
#include "memory/pinned_host_pool.h"
#include "tokenizer/tokenizer.h"

namespace pier::grammar {
class GrammarCache;
}

namespace pier::engine {

// Adaptive batching (issue #16): before each step the engine sets the scheduler's token budget
// and its prompt chunk beside decodes between a latency-leaning setting (the scheduler's
// prefill_chunk_while_decoding and `min_batched_tokens`: short steps, so running streams keep
// their time per token) and a throughput-leaning one (`max_prefill_chunk` and the scheduler's
// max_batched_tokens: long steps that drain a queue faster). The queue's depth (waiting /
// max_seqs) moves it from one to the other; critical or high requests live in the engine (or
// arrived in the last 5 s) keep it latency-leaning; with no stream decoding, a prompt gets the
// whole budget as before.
struct AdaptiveBatching {
  bool enabled = false;
  // 0: the running streams' decodes + the reserve + one prompt chunk (prefill_chunk_while_
  // decoding, at least 16), the shortest step that still admits work.
  int64_t min_batched_tokens = 0;
  int64_t max_prefill_chunk = 0;  // 0: the scheduler's prefill_chunk_while_decoding
};

struct EngineOptions {
  SchedulerOptions scheduler;
  AdaptiveBatching adaptive;
  int32_t max_n = 8;  // largest Request::n accepted
  // End-of-generation tokens when no tokenizer is given (with one, its set is used).
  std::vector<int32_t> end_of_generation_ids;
  bool start_thread = true;
  // Host memory for preemption by swap (with scheduler.preempt_by_swap), in KV blocks, taken
  // from `swap_pool` (required with swap_blocks > 0; borrowed, it must outlive the engine).
  int64_t swap_blocks = 0;
  PinnedHostPool* swap_pool = nullptr;
  // Submit answers RESOURCE_EXHAUSTED ("queue full") while this many sequences wait to be
  // admitted, counting those submitted since the last step (0: no limit).
  int64_t max_waiting = 0;
  // Largest prompt + max_tokens of one request, below the model's context and the KV capacity
  // (a server's `ctx` when its KV cache is sized apart, by kv_max); 0: no further limit.
  int64_t max_request_tokens = 0;
  // Release a sliding-window layer's K/V blocks once behind its window (kv_groups.h); false
  // keeps every block as full attention would (the A/B of the benchmarks).
  bool release_sliding_blocks = true;
  // With QoS: a critical request arriving while a step runs that reads no critical prompt stops
  // the step between layers (Batch::stop_early); it is redone after the critical prompt's step.
  bool stop_steps_for_critical = true;
  // An elastic KV lease idle this long shrinks to its minimum, returning its memory to the
  // device (0: never).
  std::chrono::milliseconds kv_idle_release{std::chrono::minutes(2)};
  // Submit refuses requests that need more KV than the elastic lease could ever reach under
  // the memory budget. A worker process turns it off: its governor's budget is a grant from
  // its supervisor, which checks against the device's ledger instead (WorkerClient).
  bool check_kv_ceiling = true;
  // Speculative decoding (speculative/proposer.h): decoding sequences compute proposed tokens
  // beside their own and keep those the sampler would have drawn, so the output is bit for bit
  // the output without it. Off by default.
  SpeculativeOptions speculative;
};

struct EngineStats {
  int64_t running = 0;     // sequences holding KV blocks
  int64_t waiting = 0;     // sequences queued or preempted
  int64_t swapped = 0;     // sequences whose K/V wait in host memory
  int64_t swap_outs = 0;   // preemptions by swap (counted in preemptions too)
  int64_t cow_copies = 0;  // shared KV blocks copied before a write (n > 1)
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_cached = 0;  // free but holding a reusable prefix
  int64_t kv_block_size = 0;
  // Block slots (one position of one block) holding K/V of the running sequences (a block
  // shared by forked sequences counted once); with KV groups (kv_groups.h) a position counts
  // once per group block holding it. kv_blocks_used * kv_block_size - kv_tokens_used slots are
  // allocated but empty (KV waste: mostly the unfilled tail of each sequence's last block).
  int64_t kv_tokens_used = 0;
  int64_t kv_blocks_max = 0;   // with an elastic KV arena: its largest size
  int64_t kv_grows = 0;        // chunks added to the elastic arena
  int64_t kv_shrinks = 0;      // shrinks honoured
  double prefix_hit_rate = 0;  // prompt tokens served from the prefix cache / admitted
  int64_t prompt_tokens_cached = 0;
  int64_t steps = 0;
  int64_t tokens_last_step = 0;
  double tokens_per_step = 0;  // mean over all steps
  int64_t preemptions = 0;
  int64_t last_step_us = 0;         // duration of the latest step
  TimestampUs last_step_at_us = 0;  // when it ended (a heartbeat)
  // Largest prompt + max_tokens one request may ask for (KV capacity and context length).
  int64_t max_request_tokens = 0;
  // With an elastic KV cache: the longest sequence (prompt + max_tokens) it could ever hold
  // under the memory budget, every other owner's KV given back down to its minimum (0: no
  // ceiling below max_request_tokens known here), and the KV bytes one position takes.
  int64_t kv_ceiling_tokens = 0;
  int64_t kv_bytes_per_token = 0;
  // Sequences waiting to start while the KV cache cannot grow (the budget is taken by others):
  // they start when memory is given back. Since when (0: none waits so).
  int64_t kv_waiting_for_memory = 0;
  TimestampUs kv_waiting_since_us = 0;
  int64_t kv_idle_releases = 0;  // times an idle lease gave its chunks back (kv_idle_release)
  int64_t requests_finished = 0;
  // QoS (issue #16).
  // Waiting sequences per requested class (critical first), counting accepted submissions
  // not yet taken by the engine thread at their class.
  std::array<int64_t, 4> waiting_by_class = {0, 0, 0, 0};
  int64_t max_seqs = 0;
  // The queue's drain rate: sequences admitted (first admissions) per second of the steps
  // that ran while sequences waited, over the last 10 s of such steps; 0 until measured.
  // Idle time does not dilute it. Predicted queue waits divide the work ahead by it.
  double admissions_per_s = 0;
  int64_t admissions = 0;
  int64_t queue_expired = 0;  // requests refused as their queue deadline passed
  int64_t queue_delayed = 0;  // requests demoted as their queue deadline passed
  // Steps stopped between layers because a critical request arrived (Batch::stop_early);
  // each was run again after the critical prompt's step.
  int64_t steps_stopped_early = 0;
  int64_t running_critical = 0;
  int64_t reserved_seqs = 0;  // what the top class keeps (SchedulerOptions::reserved_share)
  int64_t reserved_tokens = 0;
  int64_t reserved_blocks = 0;
  // Adaptive batching: the token budget and prompt chunk beside decodes of the latest step.
  int64_t step_token_budget = 0;
  int64_t step_prefill_chunk = 0;
  std::array<double, 4> fair_share_clocks = {0, 0, 0, 0};  // per class, critical first
  std::vector<TenantShare> tenants = {};  // live tenants (and idle ones still in debt)
  // Speculative decoding (EngineOptions::speculative; all 0 when off). A draft is one
  // sequence's proposals verified in one step.
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;     // proposed tokens verified
  int64_t spec_accepted_tokens = 0;  // of which kept
  // [max_tokens]: drafts whose proposal at position i (0-based) was kept.
  std::vector<int64_t> spec_accepted_per_position = {};
  // [max_tokens + 1]: drafts that kept exactly i proposals.
  std::vector<int64_t> spec_accepted_lengths = {};
  // Decoding sequence-steps that got no proposal (the planner held back, or no match).
  int64_t spec_skipped = 0;
};

class Engine {
 public:
  // INVALID_ARGUMENT when the KV store's layout or the options do not fit the runner;
  // RESOURCE_EXHAUSTED when the swap pool cannot hold swap_blocks.
  [[nodiscard]] static Result<std::unique_ptr<Engine>> Create(
      const EngineOptions& options, ModelRunner* runner, KvStore* kv,
      const tokenizer::Tokenizer* tokenizer = nullptr);
  // Stops the engine thread; unfinished requests end with finish reason abort.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues. INVALID_ARGUMENT for an empty prompt or id, an id in use, a token
  // outside the vocabulary, bad sampling parameters, prompt_logprobs outside [0, 20], n outside [1,
  // max_n], max_tokens < 1, an empty stop string, prompt + max_tokens above max_request_tokens
  // (named in the message), or an output constraint that does not compile or comes without a
  // tokenizer; UNAVAILABLE after shutdown began.
  [[nodiscard]] Result<std::shared_ptr<RequestHandle>> Submit(Request request);
  // Ends the request (every choice gets a final abort event) and frees its blocks before the
  // next step. Unknown or finished ids are ignored.
  void Abort(const std::string& id);
  // Ends every request submitted so far, as Abort does, with `reason` in each final event's
  // `error` (e.g. "model chat is being unloaded"), before the next step.
  void AbortAll(std::string reason);
  // A snapshot; `waiting` counts accepted submissions the engine thread has not taken yet.
  EngineStats Stats() const;
  // The longest sequence the elastic KV cache could ever hold under the budget (see
  // EngineStats::kv_ceiling_tokens; 0 without one or with check_kv_ceiling off).
  int64_t KvCeilingTokens() const;
  // The KV bytes one position of one sequence takes (all layers; 0 when unknown).
  int64_t KvBytesPerToken() const;
  // Positions of one sequence one chunk of the elastic KV lease holds (0 without one).
  int64_t KvChunkTokens() const;
  // Places of the max_waiting queue only critical requests may take: the critical reserve's
  // share of it, at least one (0 without a reserve, QoS or a queue limit).
  int64_t ReservedQueuePlaces() const;
  // Asks the engine to give `chunks` chunks of its elastic KV arena back (no-op without one);
  // done before the next step. Thread-safe. The governor's shrink requests arrive here too.
  void ShrinkKv(size_t chunks);

  // Without an engine thread: takes queued submissions and aborts, then runs one step if any
  // sequence is live. Returns whether a step ran.
  bool RunStep();
  // KV-cache consistency (for tests; engine thread or RunStep caller only).
  [[nodiscard]] Status CheckConsistency() const { return blocks_.CheckConsistency(); }

 private:
  struct Choice;
  struct Live;

  Engine(const EngineOptions& options, ModelRunner* runner, KvStore* kv,
         const tokenizer::Tokenizer* tokenizer, std::unique_ptr<SwapSpace> swap);
  void Loop();
  void TakeInbox();
  void StartRequest(Request request, std::shared_ptr<RequestHandle> handle);
  void AddChoiceSequence(Live& live, int32_t index);
  // Gives every choice of a constrained request its matcher; the constraint's compile error.
  [[nodiscard]] Status AttachConstraint(Live& live);
  void FinishChoice(Live& live, Choice& choice, Event event, FinishReason reason);
  void FinishRequestIfDone(const std::string& id);
  void AbortLive(const std::string& id, const std::string& reason = {});
  void Step();
  void HandleToken(Live& live, Choice& choice, std::span<const float> logits);
  // Samples the choice's next token from `logits` and emits it. `proposed` (>= 0): the token
  // speculation computed at that position; when the sample equals it (and the choice goes on)
  // its K/V are kept as computed and the answer is true: the next row may be verified.
  // `sampled` (optional) receives the token drawn (-1 when sampling failed).
  bool SampleChoice(Live& live, Choice& choice, std::span<const float> logits,
                    int32_t proposed = -1, int32_t* sampled = nullptr);
  // Speculative decoding (engine_speculative.cpp): the planner's first cost measurements; the
  // proposals for this step's decoding sequences (set on the scheduler); a verified step's
  // rows [first_row, first_row + draft.size()] for one choice.
  void CalibrateSpeculation();
  void ProposeDrafts();
  void VerifyDraft(Live& live, Choice& choice, const StepOutput& out, size_t first_row,
                   std::span<const int32_t> draft);
  void RecordPromptLogprob(int64_t sequence_id, int64_t position, std::span<const float> logits);
  void PublishStats(int64_t tokens, int64_t step_us);
  int64_t CountKvTokensUsed() const;
  void ApplyShrink();
  // Grows the elastic KV arena by a chunk when `plan` needs more blocks; whether it grew.
  bool TryGrowKv(const StepPlan& plan);
  void UpdateIdle();
  // The engine thread's wait between steps: until new work, an abort, a shrink, stopping, or
  // (while nothing could run: stalled_) memory given back or the next timed event.
  void WaitForWork();
  // The earliest queue deadline of a request still waiting, or an idle lease's release time.
  std::optional<TimestampUs> NextTimedEvent();
  // The KV lease's governor's release epoch (0 without an elastic store); the listener only
  // wakes the engine thread, which reads the epoch itself so a step never misses one.
  uint64_t MemoryReleases() const;
  void OnMemoryReleased();
  // Sets this step's token budget and prompt chunk (AdaptiveBatching).
  void AdaptStepLimits();
  // Ends (or demotes) the requests still waiting whose queue deadline has passed.
  void ExpireOverdue(TimestampUs now);
  // A step of `step_us` admitted `admitted` sequences while `backlogged` (some waited):
  // admissions_per_s.
  double MeasureDrainRate(int64_t step_us, int64_t admitted, bool backlogged);

  const EngineOptions options_;
  ModelRunner* runner_;                    // not owned
  KvStore* kv_;                            // not owned
  LeasedKvStore* elastic_;                 // kv_ when it is elastic, else null
  const tokenizer::Tokenizer* tokenizer_;  // not owned; may be null
  const int64_t max_request_tokens_;

  // Engine-thread state.
  std::unique_ptr<SwapSpace> swap_;  // with swap_blocks > 0
  std::unique_ptr<BlockCopier> copier_;
  BlockManager blocks_;
  Scheduler scheduler_;
  std::map<std::string, std::unique_ptr<Live>> live_;
  std::map<int64_t, std::pair<Live*, int32_t>> by_sequence_;  // sequence id -> (request, choice)
  int64_t next_sequence_id_ = 1;
  int64_t total_tokens_ = 0;
  std::vector<float> logits_scratch_;  // [n_vocab]
  // Compiled output constraints of this model, made on the first constrained request (the
  // vocabulary trie costs tens of milliseconds, so models that never see one never pay it).
  std::unique_ptr<grammar::GrammarCache> grammars_;
  std::optional<ElasticKvController> elastic_kv_;  // with an elastic store
  // Speculative decoding: the proposer (own_proposer_'s, or the options' draft proposer) and
  // the planner; null/empty when off.
  std::unique_ptr<Proposer> own_proposer_;
  Proposer* proposer_ = nullptr;
  std::optional<SpeculationPlanner> planner_;
  int64_t spec_drafts_ = 0;
  int64_t spec_draft_tokens_ = 0;
  int64_t spec_accepted_tokens_ = 0;
  int64_t spec_skipped_ = 0;
  std::vector<int64_t> spec_accepted_per_position_;
  std::vector<int64_t> spec_accepted_lengths_;
  // (step duration, sequences admitted) of the latest backlogged steps, oldest first, and
  // their sums.
  std::deque<std::pair<int64_t, int64_t>> drain_samples_;
  int64_t drain_us_ = 0;
  int64_t drain_admitted_ = 0;
  int64_t admissions_published_ = 0;
  int64_t queue_expired_ = 0;
  TimestampUs last_urgent_us_ = 0;  // the latest critical or high request's arrival
  int64_t queue_delayed_ = 0;
  int64_t steps_stopped_early_ = 0;
  // The latest step could run nothing though work waits: the next one waits for a change.
  bool stalled_ = false;
  uint64_t releases_at_plan_ = 0;  // MemoryReleases() when the latest plan was made
  int64_t kv_idle_releases_ = 0;
  TimestampUs kv_waiting_since_us_ = 0;  // since when waiting work is starved of KV memory
  uint64_t release_listener_ = 0;        // the governor's id of OnMemoryReleased (elastic only)

  // Shared with submitting threads.
  mutable Mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::pair<Request, std::shared_ptr<RequestHandle>>> inbox_ PIER_GUARDED_BY(mutex_);
  std::vector<std::string> aborts_ PIER_GUARDED_BY(mutex_);
  std::optional<std::string> abort_all_reason_ PIER_GUARDED_BY(mutex_);  // AbortAll pending
  std::set<std::string> ids_in_use_ PIER_GUARDED_BY(mutex_);
  bool stopping_ PIER_GUARDED_BY(mutex_) = false;
  size_t shrink_chunks_ PIER_GUARDED_BY(mutex_) = 0;
  // Sequences submitted and not yet counted in stats_.waiting/running: Submit adds n, the
  // first PublishStats after TakeInbox took them subtracts them.
  int64_t unpublished_sequences_ PIER_GUARDED_BY(mutex_) = 0;
  std::array<int64_t, 4> unpublished_by_class_ PIER_GUARDED_BY(mutex_) = {0, 0, 0, 0};
  std::array<int64_t, 4> taken_by_class_ = {0, 0, 0, 0};  // engine thread
  int64_t taken_sequences_ = 0;  // engine thread: taken by TakeInbox since the last publish
  EngineStats stats_ PIER_GUARDED_BY(mutex_);
  // A critical request sits in inbox_ (with QoS): the step in flight, unless it reads a
  // critical prompt, stops at its next layer (Batch::stop_early). Written under mutex_, read
  // by the runner between layers.
  std::atomic<bool> critical_arrived_ = false;
  std::thread thread_;
};

}  // namespace pier::engine
