// `pier top`'s screen from two scrapes of /metrics: every section from the names Pier
// exports, rates between the scrapes, every line within the width, and what is missing shown
// as "-" rather than made up.
#include "cli/top_screen.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pier::cli {
namespace {

const char* kBefore = R"(pier_model_state{model="smol",state="ready"} 1
pier_generation_tokens_total{model="smol"} 1000
pier_time_to_first_token_seconds_sum{model="smol"} 1.0
pier_time_to_first_token_seconds_count{model="smol"} 10
)";

const char* kNow = R"(# HELP pier_model_state 1 for the state each model is in.
pier_model_state{model="smol",state="ready"} 1
pier_model_state{model="smol",state="loading"} 0
pier_model_state{model="a-model-with-a-very-long-name-indeed",state="unloaded"} 1
pier_num_requests_running{model="smol"} 3
pier_num_requests_waiting{model="smol"} 7
pier_generation_tokens_total{model="smol"} 1500
pier_time_to_first_token_seconds_sum{model="smol"} 2.0
pier_time_to_first_token_seconds_count{model="smol"} 14
pier_kv_cache_usage_ratio{model="smol"} 0.5
pier_qos_queued_sequences{model="smol",class="critical"} 1
pier_qos_queued_sequences{model="smol",class="normal"} 6
pier_memory_used_bytes{device="cpu"} 1073741824
pier_memory_budget_bytes{device="cpu"} 4294967296
pier_memory_pressure_index{device="cpu"} 0.25
pier_memory_waiting_allocations{device="cpu"} 1
pier_gpu_info{gpu="0",mig="",uuid="GPU-a",name="NVIDIA H100 80GB HBM3",driver="550"} 1
pier_gpu_utilization_ratio{gpu="0",mig="",uuid="GPU-a"} 0.35
pier_gpu_memory_used_bytes{gpu="0",mig="",uuid="GPU-a"} 21474836480
pier_gpu_memory_total_bytes{gpu="0",mig="",uuid="GPU-a"} 85899345920
pier_gpu_temperature_celsius{gpu="0",mig="",uuid="GPU-a"} 51
pier_gpu_power_watts{gpu="0",mig="",uuid="GPU-a"} 250.5
pier_demand_requests_per_second{model="smol"} 1.5
pier_demand_forecast_requests_per_second{model="smol"} 2.25
pier_worker_up{model="smol",instance="1"} 1
pier_worker_up{model="smol",instance="2"} 0
pier_worker_restarts_total{model="smol",instance="2"} 3
pier_worker_resident_bytes{model="smol",instance="1"} 314572800
)";

std::string Find(const std::vector<std::string>& lines, const std::string& start) {
  for (const std::string& line : lines) {
    if (line.rfind(start, 0) == 0) return line;
  }
  return "<no line starting with " + start + ">";
}

TEST(TopScreenTest, ShowsEverySectionWithinEightyColumns) {
  const metrics::ExpositionRead before = metrics::ReadExposition(kBefore);
  const metrics::ExpositionRead now = metrics::ReadExposition(kNow);
  const std::vector<std::string> lines = RenderTopScreen({.url = "http://127.0.0.1:8080",
                                                          .clock = "12:34:56",
                                                          .now = &now,
                                                          .before = &before,
                                                          .seconds_between = 2,
                                                          .width = 80});
  for (const std::string& line : lines) EXPECT_LE(line.size(), 80u) << line;
  EXPECT_EQ(lines[0].substr(0, 31), "pier top  http://127.0.0.1:8080");
  EXPECT_EQ(lines[0].substr(72), "12:34:56");
  // smol: ready, two workers of which one up, 3 running, 7 waiting, 500 tokens in 2 s, mean
  // TTFT of the 4 requests between the scrapes 1.0 / 4, KV half used.
  const std::string smol = Find(lines, "smol ");
  EXPECT_NE(smol.find("ready"), std::string::npos) << smol;
  EXPECT_NE(smol.find(" 1/2 "), std::string::npos) << smol;
  EXPECT_NE(smol.find("   3     7   250.0  0.25s  [####    ]  50%"), std::string::npos) << smol;
  // A long name is cut with "~"; what it does not export is "-".
  const std::string other = Find(lines, "a-model-with-a-very-l~");
  EXPECT_NE(other.find("unloaded"), std::string::npos) << other;
  EXPECT_NE(other.find(" - "), std::string::npos) << other;
  const std::string queued = Find(lines, "QUEUED");
  EXPECT_NE(queued.find("critical 1"), std::string::npos) << queued;
  EXPECT_NE(queued.find("normal 6"), std::string::npos) << queued;
  const std::string cpu = Find(lines, "cpu ");
  EXPECT_NE(cpu.find("[#####               ]"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("1.0 GiB / 4.0 GiB"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("pressure 0.25 waiting 1"), std::string::npos) << cpu;
  const std::string gpu = Find(lines, "0    NVIDIA H100 8");
  EXPECT_NE(gpu.find("[####      ]  35%"), std::string::npos) << gpu;
  EXPECT_NE(gpu.find("20.0 GiB 51C 250W"), std::string::npos) << gpu;
  const std::string demand = Find(lines, "smol                           1.50");
  EXPECT_NE(demand.find("2.25"), std::string::npos) << demand;
  EXPECT_NE(Find(lines, "smol#2").find("no"), std::string::npos);
  EXPECT_NE(Find(lines, "smol#2").find(" 3 "), std::string::npos);
  EXPECT_NE(Find(lines, "smol#1").find("300.0 MiB"), std::string::npos);
}

TEST(TopScreenTest, WithoutAPreviousScrapeRatesAreDashesAndEmptySectionsAreLeftOut) {
  const metrics::ExpositionRead now = metrics::ReadExposition(
      "pier_model_state{model=\"m\",state=\"ready\"} 1\n"
      "pier_generation_tokens_total{model=\"m\"} 5\n");
  const std::vector<std::string> lines =
      RenderTopScreen({.url = "http://x", .clock = "00:00:00", .now = &now, .width = 60});
  for (const std::string& line : lines) EXPECT_LE(line.size(), 60u) << line;
  const std::string m = Find(lines, "m ");
  EXPECT_NE(m.find("1/1"), std::string::npos) << m;  // in process
  EXPECT_EQ(Find(lines, "GPU").rfind("<no line", 0), 0u);
  EXPECT_EQ(Find(lines, "MEMORY").rfind("<no line", 0), 0u);
  EXPECT_EQ(Find(lines, "WORKER").rfind("<no line", 0), 0u);
}

TEST(TopScreenTest, WhatTheServerSendsCannotMoveTheCursorOrSplitACharacter) {
  const metrics::ExpositionRead now = metrics::ReadExposition(
      "pier_model_state{model=\"evil\\n\u001b[2Jname\",state=\"ready\"} 1\n"
      "pier_model_state{model="
      "\"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\",state="
      "\"ready\"} 1\n");
  const std::vector<std::string> lines =
      RenderTopScreen({.url = "http://x", .clock = "00:00:00", .now = &now, .width = 80});
  for (const std::string& line : lines) {
    for (char c : line) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << line;
  }
  const std::string evil = Find(lines, "evil?");
  EXPECT_NE(evil.find("evil??[2Jname"), std::string::npos) << evil;
  // Twelve two-byte characters cut at 22 bytes: ten whole ones, then "~" (the 11th would
  // straddle the cut).
  const std::string cut = Find(lines, "\u00e9");
  EXPECT_EQ(cut.substr(0, 21), "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9~")
      << cut;
}

// Models that run batches (a tensor model, an embedding model) show their items running and
// waiting in the model's row, and a BATCHER line each: queue, items per second, mean items per
// batch, mean queue and compute milliseconds of what ran between the scrapes.
TEST(TopScreenTest, BatchingModelsShowTheirQueueItemsPerSecondBatchSizeAndLatency) {
  const metrics::ExpositionRead before = metrics::ReadExposition(R"(
pier_model_state{model="add_mul",state="ready"} 1
pier_model_state{model="bge",state="ready"} 1
pier_tensor_queue_items{model="add_mul"} 0
pier_tensor_items_total{model="add_mul"} 100
pier_tensor_batch_items_sum{model="add_mul"} 100
pier_tensor_batch_items_count{model="add_mul"} 40
pier_tensor_queue_seconds_sum{model="add_mul"} 0.1
pier_tensor_queue_seconds_count{model="add_mul"} 50
pier_tensor_compute_seconds_sum{model="add_mul"} 0.2
pier_tensor_compute_seconds_count{model="add_mul"} 40
pier_embedding_queue_texts{model="bge"} 0
pier_embedding_texts_total{model="bge"} 10
)");
  const metrics::ExpositionRead now = metrics::ReadExposition(R"(
pier_model_state{model="add_mul",state="ready"} 1
pier_model_state{model="bge",state="ready"} 1
pier_model_state{model="smol",state="ready"} 1
pier_num_requests_running{model="smol"} 1
pier_tensor_queue_items{model="add_mul"} 6
pier_tensor_running_items{model="add_mul"} 4
pier_tensor_items_total{model="add_mul"} 340
pier_tensor_batch_items_sum{model="add_mul"} 340
pier_tensor_batch_items_count{model="add_mul"} 100
pier_tensor_queue_seconds_sum{model="add_mul"} 0.4
pier_tensor_queue_seconds_count{model="add_mul"} 150
pier_tensor_compute_seconds_sum{model="add_mul"} 0.5
pier_tensor_compute_seconds_count{model="add_mul"} 100
pier_embedding_queue_texts{model="bge"} 2
pier_embedding_texts_total{model="bge"} 30
)");
  const std::vector<std::string> lines = RenderTopScreen({.url = "http://x",
                                                          .clock = "00:00:00",
                                                          .now = &now,
                                                          .before = &before,
                                                          .seconds_between = 2,
                                                          .width = 80});
  for (const std::string& line : lines) EXPECT_LE(line.size(), 80u) << line;
  // add_mul: 4 items running, 6 waiting; no tokens, no TTFT, no KV.
  const std::string row = Find(lines, "add_mul ");
  EXPECT_NE(row.find("   4     6       -      -  -"), std::string::npos) << row;
  const std::string header = Find(lines, "BATCHER");
  EXPECT_NE(header.find("QUEUE   ITEMS/S PER BATCH  QUEUE MS    RUN MS"), std::string::npos)
      << header;
  // 240 items in 2 s; 240 items in 60 batches; 0.3 s over 100 requests; 0.3 s over 60 batches.
  const std::string tensor = Find(lines, "add_mul                 ");
  EXPECT_NE(tensor.find("     6     120.0       4.0      3.00      5.00"), std::string::npos)
      << tensor;
  // The embedding model: texts; what it does not export (no histograms here) is "-".
  const std::string embedding = Find(lines, "bge                     ");
  EXPECT_NE(embedding.find("     2      10.0         -         -         -"), std::string::npos)
      << embedding;
  // An LLM has no BATCHER line.
  size_t batcher_lines = 0;
  bool below = false;
  for (const std::string& line : lines) {
    if (line.rfind("BATCHER", 0) == 0) below = true;
    if (below && line.rfind("smol", 0) == 0) ++batcher_lines;
  }
  EXPECT_EQ(batcher_lines, 0u);
}

TEST(TopScreenTest, BarsFillInProportionAndClamp) {
  EXPECT_EQ(Bar(0, 4), "[    ]");
  EXPECT_EQ(Bar(0.5, 4), "[##  ]");
  EXPECT_EQ(Bar(1.7, 4), "[####]");
  EXPECT_EQ(Bar(-1, 4), "[    ]");
  EXPECT_EQ(Bar(0.0 / 0.0, 4), "[    ]");
}

}  // namespace
}  // namespace pier::cli
