#include "serving/serving_metrics.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "memory/test_util.h"
#include "metrics/exposition_parser.h"

namespace pier::serving {
namespace {

using metrics::testing::Exposition;
using metrics::testing::ParseExposition;
using pier::testing::AddOwner;
using pier::testing::BudgetOf;
using pier::testing::kMiB;
using pier::testing::MakeGovernor;

// Parses and requires a clean exposition.
Exposition Parse(const std::string& text) {
  Exposition parsed = ParseExposition(text);
  for (const std::string& error : parsed.errors) ADD_FAILURE() << error;
  return parsed;
}

double At(const Exposition& parsed, const std::string& series) {
  auto it = parsed.samples.find(series);
  if (it == parsed.samples.end()) {
    ADD_FAILURE() << "no sample " << series;
    return -1;
  }
  return it->second;
}

engine::EngineStats MadeUpStats() {
  engine::EngineStats stats;
  stats.running = 2;
  stats.waiting = 3;
  stats.swapped = 1;
  stats.kv_blocks_used = 30;
  stats.kv_blocks_total = 120;
  stats.kv_blocks_cached = 7;
  stats.kv_blocks_max = 256;
  stats.kv_grows = 9;
  stats.kv_shrinks = 5;
  stats.preemptions = 4;
  stats.steps = 100;
  stats.tokens_per_step = 2.5;
  stats.last_step_us = 1500;
  stats.last_step_at_us = engine::NowUs() - 2'000'000;
  return stats;
}

TEST(ServingMetricsTest, RendersEngineFiguresAndTheirVllmAliases) {
  ServingMetrics metrics("smol");
  Exposition parsed = Parse(metrics.Render(MadeUpStats(), nullptr));
  EXPECT_EQ(At(parsed, "pier_num_requests_running{model=\"smol\"}"), 2);
  EXPECT_EQ(At(parsed, "pier_num_requests_waiting{model=\"smol\"}"), 3);
  EXPECT_EQ(At(parsed, "pier_num_requests_swapped{model=\"smol\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_kv_cache_usage_ratio{model=\"smol\"}"), 0.25);
  EXPECT_EQ(At(parsed, "pier_kv_blocks_used{model=\"smol\"}"), 30);
  EXPECT_EQ(At(parsed, "pier_kv_blocks_total{model=\"smol\"}"), 120);
  EXPECT_EQ(At(parsed, "pier_kv_blocks_cached{model=\"smol\"}"), 7);
  EXPECT_EQ(At(parsed, "pier_preemptions_total{model=\"smol\"}"), 4);
  EXPECT_EQ(At(parsed, "pier_kv_blocks_max{model=\"smol\"}"), 256);
  EXPECT_EQ(At(parsed, "pier_kv_cache_grows_total{model=\"smol\"}"), 9);
  EXPECT_EQ(At(parsed, "pier_kv_cache_reclaims_total{model=\"smol\"}"), 5);
  EXPECT_EQ(At(parsed, "pier_engine_steps_total{model=\"smol\"}"), 100);
  EXPECT_EQ(At(parsed, "pier_engine_tokens_per_step{model=\"smol\"}"), 2.5);
  EXPECT_EQ(At(parsed, "pier_engine_last_step_seconds{model=\"smol\"}"), 0.0015);
  const double age = At(parsed, "pier_engine_heartbeat_age_seconds{model=\"smol\"}");
  EXPECT_GE(age, 2.0);
  EXPECT_LT(age, 60.0);
  EXPECT_EQ(parsed.types.at("pier_preemptions_total"), "counter");
  EXPECT_EQ(parsed.types.at("pier_num_requests_waiting"), "gauge");

  EXPECT_EQ(At(parsed, "vllm:num_requests_running{model_name=\"smol\"}"), 2);
  EXPECT_EQ(At(parsed, "vllm:num_requests_waiting{model_name=\"smol\"}"), 3);
  EXPECT_EQ(At(parsed, "vllm:num_requests_swapped{model_name=\"smol\"}"), 1);
  EXPECT_EQ(At(parsed, "vllm:kv_cache_usage_perc{model_name=\"smol\"}"), 0.25);
  EXPECT_EQ(At(parsed, "vllm:gpu_cache_usage_perc{model_name=\"smol\"}"), 0.25);
  EXPECT_EQ(At(parsed, "vllm:num_preemptions_total{model_name=\"smol\"}"), 4);
  EXPECT_EQ(parsed.types.at("vllm:num_preemptions_total"), "counter");
  // No governor given: no memory figures.
  EXPECT_EQ(parsed.types.count("pier_memory_budget_bytes"), 0u);
}

TEST(ServingMetricsTest, EmptyEngineHasZeroUsageAndNoHeartbeatAge) {
  ServingMetrics metrics("m");
  Exposition parsed = Parse(metrics.Render(engine::EngineStats{}, nullptr));
  EXPECT_EQ(At(parsed, "pier_kv_cache_usage_ratio{model=\"m\"}"), 0);
  EXPECT_EQ(At(parsed, "vllm:kv_cache_usage_perc{model_name=\"m\"}"), 0);
  EXPECT_EQ(At(parsed, "pier_engine_heartbeat_age_seconds{model=\"m\"}"), 0);
  // This model's series start at zero; those keyed by what clients send appear on first use.
  EXPECT_EQ(At(parsed, "pier_prompt_tokens_total{model=\"m\"}"), 0);
  EXPECT_EQ(At(parsed, "pier_requests_total{model=\"m\",finish_reason=\"stop\"}"), 0);
  EXPECT_EQ(At(parsed, "vllm:request_success_total{model_name=\"m\",finished_reason=\"length\"}"),
            0);
  EXPECT_EQ(At(parsed, "pier_time_to_first_token_seconds_count{model=\"m\"}"), 0);
  EXPECT_EQ(parsed.types.at("pier_http_responses_total"), "counter");
  for (const auto& [series, value] : parsed.samples) {
    EXPECT_FALSE(series.starts_with("pier_http_responses_total")) << series;
  }
}

TEST(ServingMetricsTest, RecordsRequestsTokensAndLatencies) {
  ServingMetrics metrics("smol");
  metrics.RecordRequest({.model = "",  // empty: the ServingMetrics model name
                         .finish_reason = "stop",
                         .prompt_tokens = 10,
                         .generation_tokens = 5,
                         .cached_prompt_tokens = 4,
                         .queue_seconds = 0.5,
                         .time_to_first_token = 0.05,
                         .time_per_output_token = 0.02,
                         .e2e_seconds = 0.25});
  // Not measured (negative): counted as a request, absent from the latency histograms.
  metrics.RecordRequest(
      {.model = "smol", .finish_reason = "length", .prompt_tokens = 7, .generation_tokens = 3});
  metrics.RecordInterTokenLatency(0.25);
  metrics.RecordInterTokenLatency(0.125);
  metrics.RecordInterTokenLatency(-1);
  metrics.RecordHttpResponse(200, "/v1/completions", "smol");
  metrics.RecordHttpResponse(200, "/v1/completions", "smol");
  metrics.RecordHttpResponse(429, "/v1/chat/completions", "smol");
  metrics.RecordHttpResponse(200, "/v1/completions", "other");
  metrics.RecordHttpResponse(200, "/health");  // no model
  metrics.RecordClientAbort("disconnect");

  Exposition parsed = Parse(metrics.Render(engine::EngineStats{}, nullptr));
  EXPECT_EQ(At(parsed, "pier_requests_total{model=\"smol\",finish_reason=\"stop\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_requests_total{model=\"smol\",finish_reason=\"length\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_prompt_tokens_total{model=\"smol\"}"), 17);
  EXPECT_EQ(At(parsed, "pier_generation_tokens_total{model=\"smol\"}"), 8);
  EXPECT_EQ(At(parsed, "pier_prefix_cache_queries_total{model=\"smol\"}"), 17);
  EXPECT_EQ(At(parsed, "pier_prefix_cache_hits_total{model=\"smol\"}"), 4);
  EXPECT_EQ(At(parsed,
               "pier_http_responses_total{model=\"smol\",code=\"200\",route=\"/v1/completions\"}"),
            2);
  EXPECT_EQ(At(parsed,
               "pier_http_responses_total{model=\"smol\",code=\"429\",route=\"/v1/chat/"
               "completions\"}"),
            1);
  EXPECT_EQ(At(parsed,
               "pier_http_responses_total{model=\"other\",code=\"200\",route=\"/v1/completions\"}"),
            1);
  EXPECT_EQ(At(parsed, "pier_http_responses_total{model=\"\",code=\"200\",route=\"/health\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_client_aborts_total{model=\"smol\",reason=\"disconnect\"}"), 1);

  // Histograms: one measured observation each, in the buckets vLLM uses.
  EXPECT_EQ(At(parsed, "pier_time_to_first_token_seconds_count{model=\"smol\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_time_to_first_token_seconds_sum{model=\"smol\"}"), 0.05);
  EXPECT_EQ(At(parsed, "pier_time_to_first_token_seconds_bucket{model=\"smol\",le=\"0.04\"}"), 0);
  EXPECT_EQ(At(parsed, "pier_time_to_first_token_seconds_bucket{model=\"smol\",le=\"0.06\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_time_per_output_token_seconds_sum{model=\"smol\"}"), 0.02);
  EXPECT_EQ(At(parsed, "pier_e2e_request_latency_seconds_bucket{model=\"smol\",le=\"0.3\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_request_queue_time_seconds_bucket{model=\"smol\",le=\"0.3\"}"), 0);
  EXPECT_EQ(At(parsed, "pier_request_queue_time_seconds_bucket{model=\"smol\",le=\"0.5\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_inter_token_latency_seconds_count{model=\"smol\"}"), 2);
  EXPECT_EQ(At(parsed, "pier_inter_token_latency_seconds_sum{model=\"smol\"}"), 0.375);
  EXPECT_EQ(At(parsed, "pier_request_prompt_tokens_count{model=\"smol\"}"), 2);
  EXPECT_EQ(At(parsed, "pier_request_prompt_tokens_bucket{model=\"smol\",le=\"5\"}"), 0);
  EXPECT_EQ(At(parsed, "pier_request_prompt_tokens_bucket{model=\"smol\",le=\"10\"}"), 2);
  EXPECT_EQ(At(parsed, "pier_request_generation_tokens_bucket{model=\"smol\",le=\"2\"}"), 0);
  EXPECT_EQ(At(parsed, "pier_request_generation_tokens_bucket{model=\"smol\",le=\"5\"}"), 2);

  // vLLM aliases carry the same values.
  EXPECT_EQ(At(parsed, "vllm:prompt_tokens_total{model_name=\"smol\"}"), 17);
  EXPECT_EQ(At(parsed, "vllm:generation_tokens_total{model_name=\"smol\"}"), 8);
  EXPECT_EQ(At(parsed, "vllm:prefix_cache_queries_total{model_name=\"smol\"}"), 17);
  EXPECT_EQ(At(parsed, "vllm:prefix_cache_hits_total{model_name=\"smol\"}"), 4);
  EXPECT_EQ(At(parsed, "vllm:request_success_total{model_name=\"smol\",finished_reason=\"stop\"}"),
            1);
  EXPECT_EQ(At(parsed, "vllm:time_to_first_token_seconds_sum{model_name=\"smol\"}"), 0.05);
  EXPECT_EQ(At(parsed, "vllm:inter_token_latency_seconds_count{model_name=\"smol\"}"), 2);
  EXPECT_EQ(At(parsed, "vllm:time_per_output_token_seconds_count{model_name=\"smol\"}"), 2);
  EXPECT_EQ(At(parsed, "vllm:request_time_per_output_token_seconds_sum{model_name=\"smol\"}"),
            0.02);
  EXPECT_EQ(At(parsed, "vllm:e2e_request_latency_seconds_count{model_name=\"smol\"}"), 1);
  EXPECT_EQ(At(parsed, "vllm:request_queue_time_seconds_sum{model_name=\"smol\"}"), 0.5);
  EXPECT_EQ(At(parsed, "vllm:request_prompt_tokens_sum{model_name=\"smol\"}"), 17);
  EXPECT_EQ(At(parsed, "vllm:request_generation_tokens_sum{model_name=\"smol\"}"), 8);
}

TEST(ServingMetricsTest, RendersMemoryGovernorFigures) {
  FakeDevice device(FakeDeviceOptions{.capacity_bytes = 64 * kMiB});
  auto governor = MakeGovernor(&device, BudgetOf(32 * kMiB));
  OwnerId weights = AddOwner(
      *governor, {.name = "smol/weights", .guaranteed_bytes = kMiB, .max_bytes = 16 * kMiB});
  AddOwner(*governor, {.name = "smol/kv"});
  MemoryResult<Block> block = governor->Allocate(weights, 3 * kMiB);
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  const GovernorStats stats = governor->Stats();

  ServingMetrics metrics("smol");
  Exposition parsed = Parse(metrics.Render(engine::EngineStats{}, governor.get()));
  const std::string device_labels = "{device=\"" + stats.device + "\"}";
  auto owner_labels = [&](const std::string& owner) {
    return "{model=\"smol\",device=\"" + stats.device + "\",owner=\"" + owner + "\"}";
  };
  EXPECT_EQ(At(parsed, "pier_memory_capacity_bytes" + device_labels), 64.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_budget_bytes" + device_labels), 32.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_used_bytes" + device_labels), 3.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_peak_bytes" + device_labels), 3.0 * kMiB);
  EXPECT_GE(At(parsed, "pier_memory_held_bytes" + device_labels), 3.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_held_bytes" + device_labels),
            static_cast<double>(stats.reserved_bytes));
  EXPECT_EQ(At(parsed, "pier_memory_fragmentation_ratio" + device_labels),
            stats.pool.external_fragmentation);
  EXPECT_EQ(At(parsed, "pier_memory_owner_used_bytes" + owner_labels("smol/weights")), 3.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_owner_used_bytes" + owner_labels("smol/kv")), 0);
  EXPECT_EQ(At(parsed, "pier_memory_owner_quota_bytes" + owner_labels("smol/weights")),
            16.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_owner_guaranteed_bytes" + owner_labels("smol/weights")),
            1.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_owner_committed_bytes" + owner_labels("smol/weights")),
            3.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_owner_unresponsive" + owner_labels("smol/weights")), 0);
  // An unlimited owner has no quota line.
  EXPECT_EQ(parsed.samples.count("pier_memory_owner_quota_bytes" + owner_labels("smol/kv")), 0u);
  // Pressure: the floors promised, nothing lent or reclaiming, nobody waiting: index 0.
  EXPECT_EQ(At(parsed, "pier_memory_guaranteed_bytes" + device_labels), 1.0 * kMiB);
  EXPECT_EQ(At(parsed, "pier_memory_lent_bytes" + device_labels), 0);
  EXPECT_EQ(At(parsed, "pier_memory_reclaims_in_progress" + device_labels), 0);
  EXPECT_EQ(At(parsed, "pier_memory_waiting_allocations" + device_labels), 0);
  EXPECT_EQ(At(parsed, "pier_memory_pressure_index" + device_labels), 0);
  // Demand: the model's current rates are there from the start; the forecast only after five
  // minutes of history.
  EXPECT_EQ(At(parsed, "pier_demand_requests_per_second{model=\"smol\"}"), 0);
  EXPECT_EQ(At(parsed, "pier_demand_tokens_per_second{model=\"smol\"}"), 0);
  EXPECT_EQ(parsed.samples.count("pier_demand_forecast_requests_per_second{model=\"smol\"}"), 0u);
}

// Several models on one device: the device's figures once, each owner under its model, and
// each model's engine figures under its own label.
TEST(ServingMetricsTest, ModelsSharingADeviceShowItOnceAndTheirOwnersEach) {
  FakeDevice device(FakeDeviceOptions{.capacity_bytes = 64 * kMiB});
  auto governor = MakeGovernor(&device, BudgetOf(32 * kMiB));
  OwnerId a = AddOwner(*governor, {.name = "alpha/weights"});
  AddOwner(*governor, {.name = "beta/weights"});
  AddOwner(*governor, {.name = "beta#2/kv"});
  MemoryResult<Block> block = governor->Allocate(a, 2 * kMiB);
  ASSERT_TRUE(block.ok());
  const GovernorStats stats = governor->Stats();
  ServingMetrics metrics("alpha");
  metrics.RecordModelLoad("beta", 2.0);
  engine::EngineStats busy = MadeUpStats();
  const ModelFigures figures[] = {{"alpha", busy, governor.get()},
                                  {"beta", engine::EngineStats{}, governor.get()}};
  const std::string text = metrics.Render(figures);
  Exposition parsed = Parse(text);
  const std::string dev = "device=\"" + stats.device + "\"";
  EXPECT_EQ(At(parsed, "pier_memory_used_bytes{" + dev + "}"), 2.0 * kMiB);
  size_t used_lines = 0;
  for (const auto& [series, value] : parsed.samples) {
    used_lines += series.starts_with("pier_memory_used_bytes{") ? 1 : 0;
  }
  EXPECT_EQ(used_lines, 1u) << "one device, one line, however many models share it";
  EXPECT_EQ(At(parsed,
               "pier_memory_owner_used_bytes{model=\"alpha\"," + dev + ",owner=\"alpha/weights\"}"),
            2.0 * kMiB);
  EXPECT_EQ(parsed.samples.count("pier_memory_owner_used_bytes{model=\"beta\"," + dev +
                                 ",owner=\"beta#2/kv\"}"),
            1u);
  EXPECT_EQ(At(parsed, "vllm:num_requests_running{model_name=\"alpha\"}"),
            static_cast<double>(busy.running));
  EXPECT_EQ(At(parsed, "vllm:num_requests_running{model_name=\"beta\"}"), 0);
  EXPECT_EQ(At(parsed, "pier_model_load_seconds_count{model=\"beta\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_model_load_seconds_sum{model=\"beta\"}"), 2.0);
  EXPECT_EQ(At(parsed, "pier_model_state{model=\"alpha\",state=\"ready\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_model_state{model=\"beta\",state=\"ready\"}"), 1);
}

// A tensor model: its batcher's figures as pier_tensor_* (queue, counters, histograms of items
// per batch, queue and compute seconds) instead of the engine's, beside an LLM's.
TEST(ServingMetricsTest, TensorModelsShowTheirBatcherInsteadOfAnEngine) {
  TensorRunnerStats t;
  t.queued_items = 5;
  t.running_items = 4;
  t.batches = 3;
  t.items = 9;
  t.requests = 6;
  t.expired = 2;
  t.cancelled = 1;
  t.window_seconds = 0.004;
  t.batch_items = {.bounds = {1, 2, 4}, .counts = {1, 0, 2, 0}, .sum = 9};
  t.queue_seconds = {.bounds = {0.001, 0.01}, .counts = {4, 1, 1}, .sum = 0.05};
  t.compute_seconds = {.bounds = {0.001, 0.01}, .counts = {0, 3, 0}, .sum = 0.012};
  ServingMetrics metrics("smol");
  ModelFigures add_mul{"add_mul", engine::EngineStats{}, nullptr};
  add_mul.tensor = t;
  const ModelFigures figures[] = {{"smol", MadeUpStats(), nullptr}, add_mul};
  Exposition parsed = Parse(metrics.Render(figures));
  const std::string m = "{model=\"add_mul\"}";
  EXPECT_EQ(At(parsed, "pier_tensor_queue_items" + m), 5);
  EXPECT_EQ(At(parsed, "pier_tensor_running_items" + m), 4);
  EXPECT_EQ(At(parsed, "pier_tensor_window_seconds" + m), 0.004);
  EXPECT_EQ(At(parsed, "pier_tensor_batches_total" + m), 3);
  EXPECT_EQ(At(parsed, "pier_tensor_items_total" + m), 9);
  EXPECT_EQ(At(parsed, "pier_tensor_requests_total" + m), 6);
  EXPECT_EQ(At(parsed, "pier_tensor_expired_total" + m), 2);
  EXPECT_EQ(At(parsed, "pier_tensor_cancelled_total" + m), 1);
  EXPECT_EQ(parsed.types.at("pier_tensor_items_total"), "counter");
  EXPECT_EQ(parsed.types.at("pier_tensor_batch_items"), "histogram");
  // Cumulative buckets: one batch of 1, two of 3 or 4 items.
  EXPECT_EQ(At(parsed, "pier_tensor_batch_items_bucket{model=\"add_mul\",le=\"1\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_tensor_batch_items_bucket{model=\"add_mul\",le=\"2\"}"), 1);
  EXPECT_EQ(At(parsed, "pier_tensor_batch_items_bucket{model=\"add_mul\",le=\"4\"}"), 3);
  EXPECT_EQ(At(parsed, "pier_tensor_batch_items_bucket{model=\"add_mul\",le=\"+Inf\"}"), 3);
  EXPECT_EQ(At(parsed, "pier_tensor_batch_items_sum" + m), 9);
  EXPECT_EQ(At(parsed, "pier_tensor_queue_seconds_count" + m), 6);
  EXPECT_EQ(At(parsed, "pier_tensor_queue_seconds_sum" + m), 0.05);
  EXPECT_EQ(At(parsed, "pier_tensor_compute_seconds_bucket{model=\"add_mul\",le=\"0.01\"}"), 3);
  EXPECT_EQ(At(parsed, "pier_tensor_compute_seconds_count" + m), 3);
  // No engine figures for the tensor model; the LLM beside it keeps its own, and has no
  // tensor series.
  EXPECT_EQ(parsed.samples.count("pier_num_requests_running" + m), 0u);
  EXPECT_EQ(parsed.samples.count("pier_kv_cache_usage_ratio" + m), 0u);
  EXPECT_EQ(At(parsed, "pier_num_requests_running{model=\"smol\"}"), 2);
  EXPECT_EQ(parsed.samples.count("pier_tensor_items_total{model=\"smol\"}"), 0u);
}

// Every sample line follows the grammar and belongs to a family with HELP and TYPE (checked by
// the parser); every family is named legally and carries the model label on every sample.
TEST(ServingMetricsTest, EverythingRenderedIsWellFormedAndLabelledWithTheModel) {
  FakeDevice device(FakeDeviceOptions{.capacity_bytes = 64 * kMiB});
  auto governor = MakeGovernor(&device, BudgetOf(32 * kMiB));
  AddOwner(*governor, {.name = "odd \"owner\"\\name"});
  ServingMetrics metrics("model \"quoted\"");
  metrics.RecordRequest({.model = "",  // empty: the ServingMetrics model name
                         .finish_reason = "stop",
                         .prompt_tokens = 3,
                         .generation_tokens = 2,
                         .time_to_first_token = 0.1,
                         .e2e_seconds = 1});
  metrics.RecordHttpResponse(500, "/v1/chat/completions", "model \"quoted\"");
  metrics.RecordClientAbort("slow reader");
  metrics.RecordInterTokenLatency(0.01);
  const std::string text = metrics.Render(MadeUpStats(), governor.get());
  Exposition parsed = Parse(text);
  ASSERT_GT(parsed.samples.size(), 100u);
  const std::string pier_label = "model=\"model \\\"quoted\\\"\"";
  const std::string vllm_label = "model_name=\"model \\\"quoted\\\"\"";
  for (const auto& [series, value] : parsed.samples) {
    // A device's memory figures describe the device (shared by its models): labelled by
    // device only; everything else by model first.
    const bool device_figure =
        series.starts_with("pier_memory_") && !series.starts_with("pier_memory_owner_");
    const std::string& label = series.starts_with("vllm:") ? vllm_label
                               : device_figure             ? std::string("device=")
                                                           : pier_label;
    EXPECT_NE(series.find("{" + label), std::string::npos) << series;
    EXPECT_TRUE(series.starts_with("pier_") || series.starts_with("vllm:")) << series;
  }
  // The names the Gateway API Inference Extension and vLLM dashboards read are all there.
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_swapped",
        "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total", "vllm:request_success_total", "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds", "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total"}) {
    EXPECT_EQ(parsed.types.count(name), 1u) << name;
  }
  EXPECT_EQ(At(parsed, "pier_memory_owner_used_bytes{" + pier_label + ",device=\"" +
                           governor->Stats().device + "\",owner=\"odd \\\"owner\\\"\\\\name\"}"),
            0);
}

}  // namespace
}  // namespace pier::serving

namespace pier::serving {
namespace {

TEST(ServingMetricsTest, QosSeriesSplitTheTimeToFirstTokenIntoQueueAndTheRest) {
  ServingMetrics metrics("smol");
  metrics.RecordRequest({.finish_reason = "length",
                         .prompt_tokens = 10,
                         .generation_tokens = 4,
                         .queue_seconds = 0.02,
                         .time_to_first_token = 0.09,
                         .tenant = "alpha",
                         .priority_class = "critical"});
  metrics.RecordRequest({.finish_reason = "stop",
                         .prompt_tokens = 10,
                         .generation_tokens = 4,
                         .time_to_first_token = 0.05,  // queue time not measured
                         .tenant = "alpha",
                         .priority_class = "critical"});
  const Exposition parsed = Parse(metrics.Render(engine::EngineStats{}, nullptr));
  const std::string labels = R"({model="smol",tenant="alpha",class="critical"})";
  EXPECT_EQ(At(parsed, "pier_qos_queue_time_seconds_count" + labels), 1);
  EXPECT_DOUBLE_EQ(At(parsed, "pier_qos_queue_time_seconds_sum" + labels), 0.02);
  EXPECT_EQ(At(parsed, "pier_qos_time_to_first_token_seconds_count" + labels), 2);
  EXPECT_DOUBLE_EQ(At(parsed, "pier_qos_time_to_first_token_seconds_sum" + labels), 0.14);
  EXPECT_EQ(At(parsed, "pier_qos_tokens_total" + labels), 28);
}

}  // namespace
}  // namespace pier::serving
