// The OpenAI request body and stream reading, and whole runs against a fake server on
// loopback (fake_openai_server.h): counts, token totals, timing order, concurrency limits,
// failures and the time cap.
#include "loadgen/benchmark.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "fake_openai_server.h"
#include "loadgen/report.h"
#include "loadgen/streaming_request.h"

namespace pier::loadgen {
namespace {

using testing::FakeOpenAiServer;
using testing::FakeServerOptions;

TEST(OpenAiRequestTest, CompletionsBodyAsksForStreamedUsage) {
  RequestOptions options;
  options.model = "m";
  options.ignore_eos = true;
  options.extra_body = {{"top_k", 1}, {"temperature", 0.5}};
  WorkloadRequest request;
  request.prompt_ids = {5, 6, 7};
  request.output_len = 9;
  const auto body = nlohmann::json::parse(MakeRequestBody(options, request));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(body["max_tokens"], 9);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["top_k"], 1);
  EXPECT_EQ(body["temperature"], 0.5);  // --extra-body wins
}

TEST(OpenAiRequestTest, ChatBodySendsAUserMessageAndNoIgnoreEosUnlessAsked) {
  RequestOptions options;
  options.api = ApiKindForEndpoint("/v1/chat/completions");
  ASSERT_EQ(options.api, ApiKind::kChat);
  WorkloadRequest request;
  request.prompt_text = "hello there";
  request.output_len = 4;
  const auto body = nlohmann::json::parse(MakeRequestBody(options, request));
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"], "hello there");
  EXPECT_FALSE(body.contains("prompt"));
  EXPECT_FALSE(body.contains("ignore_eos"));
}

TEST(OpenAiRequestTest, StreamCountsTextChunksAndPrefersUsage) {
  RequestResult result;
  StreamAccumulator stream(ApiKind::kChat, Clock::now(), &result);
  stream.Feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n");
  stream.Feed("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
  stream.Feed("data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n");
  stream.Feed("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
  stream.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3}}\n\n");
  stream.Feed("data: [DONE]\n\n");
  stream.Finish(Clock::now());
  EXPECT_TRUE(result.success) << result.error;
  EXPECT_TRUE(stream.saw_done());
  EXPECT_EQ(result.text_chunks, 2);
  EXPECT_EQ(result.itl_s.size(), 1u);
  EXPECT_EQ(result.output_tokens, 3);  // usage wins over the chunk count
  EXPECT_EQ(result.prompt_tokens, 4);
  EXPECT_LE(result.ttft_s, result.latency_s);
}

TEST(OpenAiRequestTest, ErrorEventsAndEmptyStreamsFail) {
  RequestResult a;
  StreamAccumulator with_error(ApiKind::kCompletions, Clock::now(), &a);
  with_error.Feed("data: {\"choices\":[{\"text\":\"x\"}]}\n\n");
  with_error.Feed("data: {\"error\":{\"message\":\"engine died\"}}\n\n");
  with_error.Finish(Clock::now());
  EXPECT_FALSE(a.success);
  EXPECT_NE(a.error.find("engine died"), std::string::npos) << a.error;

  RequestResult b;
  StreamAccumulator not_sse(ApiKind::kCompletions, Clock::now(), &b);
  not_sse.Feed("{\"choices\":[{\"text\":\"x\"}]}");
  not_sse.Finish(Clock::now());
  EXPECT_FALSE(b.success);
  EXPECT_NE(b.error.find("not an SSE stream"), std::string::npos) << b.error;

  RequestResult c;
  StreamAccumulator bad_json(ApiKind::kCompletions, Clock::now(), &c);
  bad_json.Feed("data: {oops\n\n");
  bad_json.Finish(Clock::now());
  EXPECT_FALSE(c.success);
  EXPECT_NE(c.error.find("malformed JSON"), std::string::npos) << c.error;
}

BenchmarkConfig SmallRun(const std::string& base_url) {
  BenchmarkConfig config;
  config.base_url = base_url;
  config.workload.num_prompts = 12;
  config.workload.input_len = 16;
  config.workload.output_len = 5;
  config.ignore_eos = true;
  config.max_concurrency = 4;
  config.timeout_s = 60;
  return config;
}

TEST(BenchmarkTest, MeasuresEveryStreamedRequestAgainstAFakeServer) {
  FakeServerOptions server_options;
  server_options.first_token_delay_ms = 20;
  server_options.token_delay_ms = 4;
  server_options.split_events = true;
  FakeOpenAiServer server(server_options);
  BenchmarkConfig config = SmallRun(server.base_url());
  config.slos.ttft_ms = 60000;  // everyone meets it
  auto result = RunBenchmark(config);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->model, "fake-model");  // from GET /v1/models
  const BenchmarkMetrics& m = result->metrics;
  EXPECT_EQ(m.completed, 12u);
  EXPECT_EQ(m.failed, 0u);
  EXPECT_EQ(m.not_sent, 0u);
  EXPECT_EQ(m.total_output_tokens, 12 * 5);
  EXPECT_EQ(m.total_input_tokens, 12 * 16);  // the server's count of prompt words
  EXPECT_TRUE(m.all_usage_reported);
  EXPECT_EQ(m.good_requests, 12u);
  EXPECT_LE(result->max_in_flight, 4u);
  EXPECT_LE(server.max_active(), 4);
  EXPECT_GE(server.max_active(), 2);  // rate inf: requests overlap
  ASSERT_EQ(result->requests.size(), 12u);
  for (const RequestResult& r : result->requests) {
    EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(r.text_chunks, 5);
    ASSERT_EQ(r.itl_s.size(), 4u);
    // The server waits 20 ms before the first token and 4 ms between tokens; a client may
    // read late (then several chunks at once), so only the bounds below are certain.
    EXPECT_GE(r.ttft_s, 0.020);
    double last_token_s = r.ttft_s;
    for (double itl : r.itl_s) {
      EXPECT_GE(itl, 0.0);
      last_token_s += itl;
    }
    EXPECT_GE(last_token_s, 0.020 + 4 * 0.004);
    EXPECT_LE(last_token_s, r.latency_s);
    EXPECT_NEAR(r.TpotSeconds(), (r.latency_s - r.ttft_s) / 4, 1e-12);
  }
  EXPECT_GE(m.ttft_ms.mean, 20);
  EXPECT_EQ(m.itl_ms.count, 12u * 4);
  EXPECT_GT(m.request_throughput, 0);
  EXPECT_NEAR(m.output_throughput, 60 / m.duration_s, 1e-9);
  for (const nlohmann::json& body : server.bodies()) {
    EXPECT_EQ(body["model"], "fake-model");
    EXPECT_EQ(body["max_tokens"], 5);
    EXPECT_EQ(body["ignore_eos"], true);
    EXPECT_EQ(body["stream_options"]["include_usage"], true);
  }
  // The report and the JSON carry the same figures.
  const std::string report = FormatReport(*result);
  EXPECT_NE(report.find("Successful requests:                     12"), std::string::npos)
      << report;
  EXPECT_NE(report.find("P99 ITL (ms):"), std::string::npos);
  EXPECT_NE(report.find("Request goodput (req/s):"), std::string::npos);
  const nlohmann::json json = ResultToJson(*result);
  EXPECT_EQ(json["completed"], 12);
  EXPECT_EQ(json["total_output_tokens"], 60);
  EXPECT_EQ(json["ttfts"].size(), 12u);
  EXPECT_DOUBLE_EQ(json["p99_itl_ms"].get<double>(), m.itl_ms.percentiles[2].second);
}

TEST(BenchmarkTest, CountsChunksWhenTheServerSendsNoUsageAndReadsCloseDelimitedBodies) {
  FakeServerOptions server_options;
  server_options.send_usage = false;
  server_options.chunked = false;
  server_options.first_token_delay_ms = 1;
  server_options.token_delay_ms = 1;
  FakeOpenAiServer server(server_options);
  BenchmarkConfig config = SmallRun(server.base_url());
  config.endpoint = "/v1/chat/completions";
  config.model = "given-model";
  auto result = RunBenchmark(config);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->model, "given-model");
  EXPECT_EQ(result->metrics.completed, 12u);
  EXPECT_EQ(result->metrics.total_output_tokens, 60);  // five text chunks each; role chunk not
  EXPECT_FALSE(result->metrics.all_usage_reported);
  EXPECT_EQ(result->metrics.total_input_tokens, 12 * 16);  // asked lengths
  EXPECT_NE(FormatReport(*result).find("reported no usage"), std::string::npos);
}

TEST(BenchmarkTest, ServerErrorsAreCountedAsFailures) {
  FakeServerOptions server_options;
  server_options.fail_every = 3;
  server_options.first_token_delay_ms = 1;
  server_options.token_delay_ms = 1;
  FakeOpenAiServer server(server_options);
  BenchmarkConfig config = SmallRun(server.base_url());
  config.workload.format = PromptFormat::kTokenIds;
  auto result = RunBenchmark(config);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->metrics.completed, 8u);
  EXPECT_EQ(result->metrics.failed, 4u);
  EXPECT_EQ(result->metrics.total_output_tokens, 8 * 5);
  EXPECT_EQ(result->metrics.total_input_tokens, 8 * 16);  // token-id prompts: exact
  size_t http_500 = 0;
  for (const RequestResult& r : result->requests) {
    if (!r.success) {
      EXPECT_EQ(r.error, "HTTP 500: fake overload");
      ++http_500;
    }
  }
  EXPECT_EQ(http_500, 4u);
  EXPECT_NE(FormatReport(*result).find("4 x HTTP 500: fake overload"), std::string::npos);
}

uint16_t UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);  // nothing listens there now
  return ntohs(address.sin_port);
}

TEST(BenchmarkTest, RefusedConnectionsAreFailuresNotCrashes) {
  BenchmarkConfig config = SmallRun("http://127.0.0.1:" + std::to_string(UnusedPort()));
  config.model = "m";
  auto result = RunBenchmark(config);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->metrics.completed, 0u);
  EXPECT_EQ(result->metrics.failed, 12u);
  for (const RequestResult& r : result->requests) {
    EXPECT_NE(r.error.find("cannot connect"), std::string::npos) << r.error;
  }
  EXPECT_EQ(result->metrics.ttft_ms.count, 0u);
}

TEST(BenchmarkTest, ModelLookupFailureStopsBeforeTheRun) {
  FakeServerOptions server_options;
  server_options.models_not_found = true;
  FakeOpenAiServer server(server_options);
  auto result = RunBenchmark(SmallRun(server.base_url()));
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("404"), std::string::npos);
  EXPECT_NE(result.status().message().find("--model"), std::string::npos);
  EXPECT_TRUE(server.bodies().empty());

  BenchmarkConfig unreachable = SmallRun("http://127.0.0.1:" + std::to_string(UnusedPort()));
  EXPECT_FALSE(RunBenchmark(unreachable).ok());
}

TEST(BenchmarkTest, TimeCapEndsRunningRequestsAndStopsSending) {
  FakeServerOptions server_options;
  server_options.first_token_delay_ms = 1;
  server_options.token_delay_ms = 100;  // 50 tokens: 5 s per request
  FakeOpenAiServer server(server_options);
  BenchmarkConfig config = SmallRun(server.base_url());
  config.workload.output_len = 50;
  config.request_rate = 4;  // arrivals ~0.25 s apart: most come after the cap
  config.max_concurrency = 0;
  config.timeout_s = 0.6;
  const auto start = std::chrono::steady_clock::now();
  auto result = RunBenchmark(config);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_LT(elapsed, 3.0);
  EXPECT_TRUE(result->time_cap_reached);
  EXPECT_EQ(result->metrics.completed, 0u);
  EXPECT_GE(result->metrics.failed, 1u);
  EXPECT_GE(result->metrics.not_sent, 1u);
  EXPECT_EQ(result->metrics.failed + result->metrics.not_sent, 12u);
  EXPECT_LE(result->metrics.duration_s, 0.6 + 1e-9);
  for (const RequestResult& r : result->requests) {
    EXPECT_NE(r.error.find("timed out"), std::string::npos) << r.error;
  }
}

TEST(BenchmarkTest, RequestRateSpacesTheSends) {
  FakeServerOptions server_options;
  server_options.first_token_delay_ms = 1;
  server_options.token_delay_ms = 1;
  FakeOpenAiServer server(server_options);
  BenchmarkConfig config = SmallRun(server.base_url());
  config.workload.num_prompts = 20;
  config.request_rate = 100;
  config.max_concurrency = 0;
  auto result = RunBenchmark(config);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->metrics.completed, 20u);
  double last_send = 0;
  for (const RequestResult& r : result->requests) last_send = std::max(last_send, r.send_offset_s);
  // 19 exponential gaps of mean 10 ms: the last send is far from 0 and from 1 s.
  EXPECT_GT(last_send, 0.05);
  EXPECT_LT(last_send, 1.0);
}

// A shifting-load schedule: each phase's hot model gets most of its requests, a model may have
// its own server, and the report has one row per phase and per model.
TEST(BenchmarkTest, PhaseScheduleSendsMostRequestsToEachPhasesHotModel) {
  FakeServerOptions server_options;
  server_options.first_token_delay_ms = 1;
  server_options.token_delay_ms = 1;
  FakeOpenAiServer shared(server_options);
  FakeOpenAiServer own(server_options);
  BenchmarkConfig config = SmallRun(shared.base_url());
  config.max_concurrency = 0;
  config.request_rate = 400;
  config.models = {"a", "b", "c"};
  auto phases = ParsePhases("a,c,even", config.models, 0.5, 0.8);
  ASSERT_TRUE(phases.ok()) << phases.status().ToString();
  config.phases = *phases;
  config.model_urls["c"] = own.base_url();
  config.slos.ttft_ms = 60000;
  auto result = RunBenchmark(config);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->requests.size(), 600u) << "rate x 1.5 s";
  ASSERT_EQ(result->phases.size(), 3u);
  EXPECT_EQ(result->phases[0].name, "hot:a");
  EXPECT_EQ(result->phases[2].name, "even");
  std::map<int, std::map<std::string, int>> counts;
  for (const RequestResult& r : result->requests) {
    ASSERT_TRUE(r.success) << r.error;
    ++counts[r.phase][r.model];
    EXPECT_GE(r.send_offset_s, 0.5 * r.phase - 0.05);
  }
  // Phase 0: a hot (about 80%), b and c about 10% each.
  const int phase0 = counts[0]["a"] + counts[0]["b"] + counts[0]["c"];
  EXPECT_GT(counts[0]["a"], phase0 * 7 / 10);
  EXPECT_GT(counts[1]["c"], counts[1]["a"] + counts[1]["b"]);
  EXPECT_GT(counts[2]["a"], 0);
  EXPECT_LT(counts[2]["a"], (counts[2]["b"] + counts[2]["c"]));
  // c's requests went to its own server, the others to the shared one.
  size_t to_c = 0;
  for (const nlohmann::json& body : own.bodies()) {
    EXPECT_EQ(body["model"], "c");
    ++to_c;
  }
  EXPECT_EQ(to_c, static_cast<size_t>(counts[0]["c"] + counts[1]["c"] + counts[2]["c"]));
  for (const nlohmann::json& body : shared.bodies()) EXPECT_NE(body["model"], "c");
  EXPECT_EQ(result->per_model.at("a").completed,
            static_cast<size_t>(counts[0]["a"] + counts[1]["a"] + counts[2]["a"]));
  const std::string report = FormatReport(*result);
  EXPECT_NE(report.find("hot:c"), std::string::npos) << report;
  EXPECT_NE(report.find("SLO attainment (%):"), std::string::npos) << report;
  const nlohmann::json json = ResultToJson(*result);
  EXPECT_EQ(json["phases"].size(), 3u);
  EXPECT_DOUBLE_EQ(json["slo_attainment"].get<double>(), 1.0);
}

TEST(BenchmarkTest, PhaseScheduleOptionsAreChecked) {
  const std::vector<std::string> models = {"a", "b"};
  EXPECT_FALSE(ParsePhases("a,z", models, 1, 0.8).ok());
  EXPECT_FALSE(ParsePhases("a,,b", models, 1, 0.8).ok());
  EXPECT_FALSE(ParsePhases("a", models, 0, 0.8).ok());
  EXPECT_FALSE(ParsePhases("a", models, 1, 1.5).ok());
  BenchmarkConfig config = SmallRun("http://127.0.0.1:1");
  config.models = {"a"};
  config.phases = *ParsePhases("a", {"a"}, 1, 0.8);
  config.request_rate = 10;
  EXPECT_FALSE(RunBenchmark(config).ok()) << "one model is not a schedule";
  config.models = {"a", "b"};
  config.request_rate = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(RunBenchmark(config).ok()) << "a schedule needs a finite rate";
}

TEST(BenchmarkTest, KeepsManyStreamsInFlightAtOnce) {
  FakeServerOptions server_options;
  server_options.first_token_delay_ms = 300;  // long enough for many requests to connect
  server_options.token_delay_ms = 1;
  FakeOpenAiServer server(server_options);
  BenchmarkConfig config = SmallRun(server.base_url());
  config.workload.num_prompts = 200;
  config.workload.output_len = 3;
  config.max_concurrency = 128;
  auto result = RunBenchmark(config);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->metrics.completed, 200u);
  EXPECT_EQ(result->metrics.total_output_tokens, 600);
  EXPECT_LE(result->max_in_flight, 128u);
  EXPECT_LE(server.max_active(), 128);
  EXPECT_GE(server.max_active(), 16);
}

TEST(BenchmarkTest, RejectsBadOptionsBeforeSending) {
  BenchmarkConfig config;
  config.model = "m";
  config.endpoint = "/v1/chat/completions";
  config.workload.format = PromptFormat::kTokenIds;
  EXPECT_FALSE(RunBenchmark(config).ok());
  config = BenchmarkConfig();
  config.max_concurrency = kMaxWorkers + 1;
  EXPECT_FALSE(RunBenchmark(config).ok());
  config = BenchmarkConfig();
  config.base_url = "https://example.com";
  EXPECT_FALSE(RunBenchmark(config).ok());
  config = BenchmarkConfig();
  config.percentiles = {101};
  EXPECT_FALSE(RunBenchmark(config).ok());
}

}  // namespace
}  // namespace pier::loadgen

namespace pier::loadgen {
namespace {

// A QoS traffic mix: each request carries its stream's class and deadline, the streams get
// their shares, and results are broken down by stream.
TEST(BenchmarkTrafficTest, EachRequestCarriesItsStreamsClassAndDeadline) {
  FakeServerOptions server_options;
  server_options.first_token_delay_ms = 1;
  server_options.token_delay_ms = 1;
  FakeOpenAiServer server(server_options);
  BenchmarkConfig config;
  config.base_url = server.base_url();
  config.model = "m";
  config.workload.num_prompts = 200;
  config.workload.input_len = 4;
  config.workload.output_len = 2;
  auto traffic = ParseTraffic("vip:-:critical:1:500,bulk:-:low:3");
  ASSERT_TRUE(traffic.ok()) << traffic.status().ToString();
  config.traffic = *traffic;
  auto result = RunBenchmark(config);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  int vip = 0, bulk = 0;
  for (const nlohmann::json& body : server.bodies()) {
    if (body.value("priority", "") == "critical") {
      ++vip;
      EXPECT_EQ(body.value("deadline_ms", 0), 500);
    } else {
      ++bulk;
      EXPECT_EQ(body.value("priority", ""), "low");
      EXPECT_FALSE(body.contains("deadline_ms"));
    }
  }
  EXPECT_EQ(vip + bulk, 200);
  EXPECT_NEAR(vip / 200.0, 0.25, 0.1);
  ASSERT_EQ(result->per_stream.size(), 2u);
  EXPECT_EQ(result->per_stream.at("vip").completed + result->per_stream.at("bulk").completed, 200u);
  EXPECT_NE(FormatReport(*result).find("Per traffic stream"), std::string::npos);
  EXPECT_EQ(ResultToJson(*result)["request_streams"].size(), 200u);
}

TEST(BenchmarkTrafficTest, BadTrafficIsRefusedByName) {
  for (const char* bad : {"", "vip", "vip:k:critical", "vip:k:critical:0", "vip:k:critical:x",
                          "vip:k:critical:1:0", ":k:low:1", "a:b:c:1:2:3"}) {
    EXPECT_FALSE(ParseTraffic(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace pier::loadgen
