// Test doubles for the engine core: a KV store in a vector, a fake model runner and a fake
// tokenizer.
//
// FakeRunner writes, for every computed position p of a span, K = token and V = p into the
// block the span's block table names, then computes each requested logits row from the K/V it
// reads back through the block table for positions 0..p. So the logits depend on the whole
// prefix *as stored in the KV cache*: a wrong block table, a reused block with other content or
// a missing copy-on-write changes the tokens. The values are a fixed hash of that prefix:
// deterministic, instant, independent of what else is in the batch. It also checks that no two
// spans of a step write the same (block, slot) and records each step's composition.
//
// With KV groups (kv_groups.h) it plays a model with sliding-window layers: each group's K/V
// go to that group's entries of the table, and a row's logits hash every group's positions it
// attends (the last `attended[g]` positions, or all for 0). Reading a released entry (kNoBlock)
// is an error, so a scheduler that frees a block still attended fails the step.
//
// Stopping early (Batch::stop_early): with a mid-step hook set, each step calls it halfway (as
// a request arriving while the step runs); if the batch's stop flag is then set, the step writes
// wrong K/V into its positions (a real runner's layers before the stop wrote part of them) and
// returns stopped_early, so an engine that kept any of them as computed produces other tokens.
//
// FakeTokenizer maps token t to one byte 'a' + t % 26 (tokens >= 26 map to upper-case
// letters, then digits), so texts are easy to predict. Thread-safety: none (tests).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "engine/kv/kv_store.h"
#include "engine/request.h"
#include "engine/runner/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace pier::engine::testing {

// The CPU device the fake stores' host memory belongs to (its copies are memcpy).
inline Device* HostDevice() {
  static Device* const device = [] {
    CpuDeviceOptions options;
    options.capacity_bytes = size_t{1} << 30;
    auto created = CpuDevice::Create(options);
    return created.ok() ? static_cast<Device*>(created.value().release()) : nullptr;
  }();
  return device;
}

class VectorKvStore final : public KvStore {
 public:
  VectorKvStore(const KvLayout& layout, int64_t n_blocks)
      : KvStore(layout, HostDevice()),
        n_blocks_(n_blocks),
        bytes_(layout.bytes_per_block() * n_blocks) {}
  int64_t num_blocks() const override { return n_blocks_; }
  std::byte* BlockData(int32_t block) const override {
    return const_cast<std::byte*>(bytes_.data()) + layout().bytes_per_block() * block;
  }

 private:
  int64_t n_blocks_;
  std::vector<std::byte> bytes_;  // [n_blocks][bytes_per_block]
};

inline KvLayout FakeLayout(int64_t block_size) {
  return KvLayout{.n_layer = 1, .block_size = block_size, .n_kv_head = 1, .head_dim = 1};
}

struct StepRecord {
  // (sequence id, tokens computed, first position) per span.
  std::vector<std::tuple<int64_t, int64_t, int64_t>> spans;
  int64_t num_tokens() const {
    int64_t n = 0;
    for (const auto& s : spans) n += std::get<1>(s);
    return n;
  }
  bool Has(int64_t id) const {
    return std::any_of(spans.begin(), spans.end(),
                       [&](const auto& s) { return std::get<0>(s) == id; });
  }
};

class FakeRunner final : public ModelRunner {
 public:
  FakeRunner(KvStore* kv, int64_t n_vocab, int64_t context_length) : kv_(kv) {
    shape_.n_vocab = n_vocab;
    shape_.n_embd = 8;
    shape_.context_length = context_length;
    shape_.kv = kv->layout();
  }
  // A model whose K/V live in `groups` (one layer per group) and whose group g attends the
  // last attended[g] positions (0: all): `groups` may have no windows (nothing is released)
  // while `attended` does, for a reference run.
  FakeRunner(KvStore* kv, int64_t n_vocab, int64_t context_length, KvGroups groups,
             std::vector<int64_t> attended)
      : FakeRunner(kv, n_vocab, context_length) {
    shape_.kv_groups = std::move(groups);
    attended_ = std::move(attended);
  }
  const ModelShape& shape() const override { return shape_; }

  // The next step fails before writing anything.
  void FailNextStep() { fail_next_step_ = true; }
  // Each step sleeps this long first, as a real model takes time (drain-rate tests).
  void set_step_delay(std::chrono::microseconds delay) { step_delay_ = delay; }
  // Called halfway through each step (before the stop flag is read); may submit requests.
  void set_mid_step(std::function<void(const Batch&)> hook) { mid_step_ = std::move(hook); }
  int64_t steps_stopped() const { return steps_stopped_; }

  Result<StepOutput> Step(const Batch& batch) override {
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
    if (fail_next_step_) {  // as a runner refused its workspace: nothing written
      fail_next_step_ = false;
      return ResourceExhaustedError("fake runner: the step's workspace was refused");
    }
    const int64_t bs = shape_.kv.block_size;
    const int64_t G = n_groups();
    StepRecord record;
    std::set<std::pair<int32_t, int64_t>> written;
    for (const SequenceSpan& span : batch.sequences) {
      if (span.tokens.empty()) return InvalidArgumentError("empty span");
      const int64_t last = span.first_position + static_cast<int64_t>(span.tokens.size()) - 1;
      if (last >= shape_.context_length) return InvalidArgumentError("past the context");
      if (static_cast<int64_t>(span.block_table.size()) / G * bs <= last) {
        return InvalidArgumentError("block table too short");
      }
      for (int32_t b : span.block_table) {
        if (b == kNoBlock && !attended_.empty()) continue;  // checked where read or written
        if (b < 0 || b >= kv_->num_blocks()) return InvalidArgumentError("bad block id");
      }
      // What the real attention kernels read: whole tiles from the span's first query's
      // window on (KvGroups::FirstReadPosition).
      for (int64_t g = 0; g < G; ++g) {
        const int64_t window = attended_.empty() ? 0 : attended_[static_cast<size_t>(g)];
        const int64_t first = KvGroups::FirstReadPosition(span.first_position, window);
        for (int64_t b = first / bs; b <= last / bs; ++b) {
          if (span.block_table[b * G + g] == kNoBlock) {
            return InternalError("a block the attention reads was released");
          }
        }
      }
      for (size_t i = 0; i < span.tokens.size(); ++i) {
        const int64_t p = span.first_position + static_cast<int64_t>(i);
        for (int64_t g = 0; g < G; ++g) {
          const int32_t block = span.block_table[p / bs * G + g];
          if (block == kNoBlock) return InternalError("writing a released block");
          if (!written.insert({block, p % bs}).second) {
            return InternalError("two spans write the same KV slot");
          }
        }
      }
      record.spans.emplace_back(span.sequence_id, static_cast<int64_t>(span.tokens.size()),
                                span.first_position);
    }
    if (mid_step_) mid_step_(batch);
    if (batch.stop_early != nullptr && batch.stop_early->load()) {
      for (const SequenceSpan& span : batch.sequences) {
        for (size_t i = 0; i < span.tokens.size(); ++i) {
          const int64_t p = span.first_position + static_cast<int64_t>(i);
          for (int64_t g = 0; g < G; ++g) {
            const int32_t block = span.block_table[p / bs * G + g];
            kv_->Keys(0, block)[p % bs] = static_cast<float>(span.tokens[i] + 7);
          }
        }
      }
      ++steps_stopped_;
      StepOutput stopped;
      stopped.n_vocab = shape_.n_vocab;
      stopped.stopped_early = true;
      return stopped;
    }
    // Write every span's K/V before any read (as the real runner does).
    for (const SequenceSpan& span : batch.sequences) {
      for (size_t i = 0; i < span.tokens.size(); ++i) {
        const int64_t p = span.first_position + static_cast<int64_t>(i);
        for (int64_t g = 0; g < G; ++g) {
          const int32_t block = span.block_table[p / bs * G + g];
          kv_->Keys(0, block)[p % bs] = static_cast<float>(span.tokens[i]);
          kv_->Values(0, block)[p % bs] = static_cast<float>(p);
        }
      }
    }
    StepOutput out;
    out.n_vocab = shape_.n_vocab;
    logits_.clear();
    for (size_t si = 0; si < batch.sequences.size(); ++si) {
      const SequenceSpan& span = batch.sequences[si];
      if (span.logits == LogitsWanted::kNone) continue;
      const int64_t last = span.first_position + static_cast<int64_t>(span.tokens.size()) - 1;
      const int64_t from = span.logits == LogitsWanted::kAll ? span.first_position : last;
      for (int64_t p = from; p <= last; ++p) {
        out.rows.push_back({.sequence_index = static_cast<int32_t>(si), .position = p});
        const std::optional<uint64_t> h = PrefixHash(span.block_table, p);
        if (!h) return InternalError("reading a released block");
        for (int64_t v = 0; v < shape_.n_vocab; ++v) {
          logits_.push_back(static_cast<float>(Mix(*h, static_cast<uint64_t>(v)) % 1000) / 100.0f);
        }
      }
    }
    out.logits = logits_;
    steps_.push_back(std::move(record));
    return out;
  }

  const std::vector<StepRecord>& steps() const { return steps_; }

 private:
  static uint64_t Mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  int64_t n_groups() const { return std::max<int64_t>(1, shape_.kv_groups.n_groups()); }
  // Hash of the (K, V) read back for the positions each group attends at p; PIER-style check
  // that V == position. nullopt when one of them is in a released entry.
  std::optional<uint64_t> PrefixHash(const std::vector<int32_t>& table, int64_t p) const {
    const int64_t bs = shape_.kv.block_size;
    const int64_t G = n_groups();
    uint64_t h = 1;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t window = attended_.empty() ? 0 : attended_[static_cast<size_t>(g)];
      for (int64_t q = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0; q <= p; ++q) {
        const int32_t block = table[q / bs * G + g];
        if (block == kNoBlock) return std::nullopt;
        const float k = kv_->Keys(0, block)[q % bs];
        const float v = kv_->Values(0, block)[q % bs];
        h = Mix(h, static_cast<uint64_t>(k) * 1000003u + (v == static_cast<float>(q) ? 0 : 77));
      }
    }
    return h;
  }

  KvStore* kv_;
  ModelShape shape_;
  std::vector<int64_t> attended_;  // [n_groups] positions each group reads (0: all)
  std::vector<float> logits_;      // [rows, n_vocab]
  std::vector<StepRecord> steps_;
  std::chrono::microseconds step_delay_{0};
  bool fail_next_step_ = false;
  std::function<void(const Batch&)> mid_step_;
  int64_t steps_stopped_ = 0;
};

class FakeTokenizer final : public tokenizer::Tokenizer {
 public:
  explicit FakeTokenizer(int32_t vocab_size, std::vector<int32_t> eog = {})
      : vocab_size_(vocab_size), eog_(std::move(eog)) {}
  Result<std::vector<tokenizer::TokenId>> Encode(std::string_view text,
                                                 const tokenizer::EncodeOptions&) const override {
    std::vector<tokenizer::TokenId> ids;
    for (char c : text) ids.push_back(c - 'a');
    return ids;
  }
  std::string TokenBytes(tokenizer::TokenId id) const override {
    static const std::string kChars =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    return std::string(1, kChars[static_cast<size_t>(id) % kChars.size()]);
  }
  std::string_view Piece(tokenizer::TokenId) const override { return "?"; }
  tokenizer::TokenType Type(tokenizer::TokenId) const override {
    return tokenizer::TokenType::kNormal;
  }
  int32_t vocab_size() const override { return vocab_size_; }
  tokenizer::TokenId bos_id() const override { return -1; }
  tokenizer::TokenId eos_id() const override { return eog_.empty() ? -1 : eog_[0]; }
  bool add_bos() const override { return false; }
  bool add_eos() const override { return false; }
  const std::vector<tokenizer::TokenId>& end_of_generation_ids() const override { return eog_; }

 private:
  int32_t vocab_size_;
  std::vector<int32_t> eog_;
};

// `n` tokens drawn from [0, vocab - 1) with a fixed seed (vocab - 1 is left for the
// end-of-generation token of the tests).
inline std::vector<int32_t> RandomPrompt(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 1));
  return tokens;
}

// A greedy request that ignores end-of-generation, so it produces exactly max_tokens.
inline Request GreedyRequest(std::string id, std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r;
  r.id = std::move(id);
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// The token ids carried by a stream of events, in order.
inline std::vector<int32_t> TokensOf(const std::vector<Event>& events) {
  std::vector<int32_t> tokens;
  for (const Event& e : events) {
    if (e.token >= 0) tokens.push_back(e.token);
  }
  return tokens;
}

}  // namespace pier::engine::testing
