// ServeOptions: defaults, the YAML configuration file and flags (flags win), unknown names and
// bad values reported with where they came from.
#include "cli/serve_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace pier::cli {
namespace {

class ServeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pier_serve_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteConfig(const std::string& text) {
    const std::filesystem::path path = dir_ / "serve.yaml";
    std::ofstream(path) << text;
    return path.string();
  }

  std::filesystem::path dir_;
};

TEST_F(ServeConfigTest, DefaultsWithoutFileOrFlags) {
  Result<ServeOptions> options = ResolveServeOptions({});
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ((*options).host, "127.0.0.1");
  EXPECT_EQ((*options).port, 8080);
  EXPECT_EQ((*options).http_threads, 1);
  EXPECT_EQ((*options).model_defaults.threads, 0);
  EXPECT_EQ((*options).model_defaults.ctx, 4096);
  EXPECT_EQ((*options).device, "cpu");
  EXPECT_EQ((*options).model_defaults.max_batched_tokens, 512);
  EXPECT_EQ((*options).model_defaults.max_seqs, 64);
  EXPECT_EQ((*options).model_defaults, serving::ModelSettings{});
  EXPECT_EQ((*options).max_body_bytes, uint64_t{4} << 20);
  EXPECT_TRUE((*options).memory_budget.is_percent);
  EXPECT_EQ((*options).memory_budget.percent, 100);
  EXPECT_FALSE((*options).device_memory.has_value());
  EXPECT_TRUE((*options).model.empty());
  EXPECT_TRUE((*options).api_keys.empty());
}

TEST_F(ServeConfigTest, FileSetsEverySettingAFlagSets) {
  const std::string path = WriteConfig(R"(
model: /models/m.gguf
name: my-model
host: 0.0.0.0
port: 8081
threads: 3
http_threads: 2
api_keys: /etc/pier/keys.yaml
metrics_key: scrape
admin_key: operator
max_queued: 7
memory_budget: 80%
device_memory: 2GiB
memory_reserve: 128MiB
workers: on
worker_heartbeat_timeout: 0.5
worker_leak_margin: 1GiB
topology: /etc/pier/target.xml
ready_policy: any
ctx: 2048
kv_dtype: f16
weights_dtype: q8_0
kv_policy: static
kv_min: 512
kv_max: 96MiB
max_batched_tokens: 256
prefill_chunk_while_decoding: 0
max_seqs: 16
grpc_port: 8001
adaptive_batch_window: off
class_max_queue_ms: "normal=5000,low=20000"
class_deadline_action: "low=delay"
class_ttft_ms: "critical=500"
class_tpot_ms: "critical=100,high=200"
qos_reserve: 0.1
qos: off
qos_stop_steps: off
adaptive_batching: off
min_batched_tokens: 128
max_prefill_chunk: 192
max_queue_delay_ms: 4
max_batch_texts: 32
embed_batch_tokens: 2048
max_body_bytes: 1MiB
shutdown_grace: 2.5
watchdog_seconds: 5
load_wait: 12
unload_grace: 3
swap_space: 64MiB
kv_idle_release: 30
stream_backlog: 64
write_timeout: 1.5
default_max_tokens: 100
max_tokens_limit: 500
cors_origins: "https://app.example, http://localhost:3000/"
gpu_telemetry: off
gpu_telemetry_min_period: 0.5
gpu_telemetry_max_period: 20
device: cuda:1
tool_format: generic
onnxruntime_library: /opt/onnxruntime/libonnxruntime.so.1
max_batch_size: 16
preferred_batch_sizes: [4, 8]
inputs: {x: {shape: [-1, 3, 32, 32]}}
preprocess: {resize: letterbox, pad_value: 0}
speculative: {method: ngram, max_tokens: 5}
)");
  Result<ServeOptions> resolved = ResolveServeOptions({{"config", path}});
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  const ServeOptions& o = *resolved;
  EXPECT_EQ(o.model, "/models/m.gguf");
  EXPECT_EQ(o.name, "my-model");
  EXPECT_EQ(o.host, "0.0.0.0");
  EXPECT_EQ(o.port, 8081);
  EXPECT_EQ(o.model_defaults.threads, 3);
  EXPECT_EQ(o.http_threads, 2);
  EXPECT_EQ(o.api_keys, "/etc/pier/keys.yaml");
  EXPECT_EQ(o.metrics_key, "scrape");
  EXPECT_EQ(o.admin_key, "operator");
  EXPECT_EQ(o.model_defaults.max_queued, 7);
  EXPECT_TRUE(o.memory_budget.is_percent);
  EXPECT_EQ(o.memory_budget.percent, 80);
  EXPECT_EQ(o.device_memory, uint64_t{2} << 30);
  EXPECT_EQ(o.memory_reserve, uint64_t{128} << 20);
  EXPECT_TRUE(o.workers);
  EXPECT_DOUBLE_EQ(o.worker_heartbeat_timeout_seconds, 0.5);
  EXPECT_EQ(o.worker_leak_margin, uint64_t{1} << 30);
  EXPECT_EQ(o.topology, "/etc/pier/target.xml");
  EXPECT_TRUE(o.ready_any);
  EXPECT_EQ(o.model_defaults.ctx, 2048);
  EXPECT_EQ(o.model_defaults.kv_dtype, engine::KvDtype::kF16);
  EXPECT_EQ(o.model_defaults.weights_dtype, DType::kQ8_0);
  EXPECT_EQ(o.model_defaults.kv_policy, engine::KvPolicy::kStatic);
  EXPECT_EQ(o.model_defaults.kv_min, engine::KvSize::Tokens(512));
  EXPECT_EQ(o.model_defaults.kv_max, engine::KvSize::Bytes(uint64_t{96} << 20));
  EXPECT_EQ(o.model_defaults.max_batched_tokens, 256);
  EXPECT_EQ(o.model_defaults.prefill_chunk_while_decoding, 0);  // no cap
  EXPECT_EQ(o.model_defaults.max_seqs, 16);
  EXPECT_EQ(o.model_defaults.max_queue_delay_ms, 4);
  EXPECT_FALSE(o.model_defaults.adaptive_batch_window);
  EXPECT_EQ(o.class_max_queue.max_queue_ms[static_cast<size_t>(engine::Priority::kLow)], 20000);
  EXPECT_TRUE(o.class_max_queue.delay[static_cast<size_t>(engine::Priority::kLow)]);
  EXPECT_FALSE(o.class_max_queue.delay[static_cast<size_t>(engine::Priority::kNormal)]);
  EXPECT_EQ(o.class_slo.ttft_ms[0], 500);
  EXPECT_EQ(o.class_slo.tpot_ms[1], 200);
  EXPECT_DOUBLE_EQ(o.model_defaults.qos_reserve, 0.1);
  EXPECT_FALSE(o.model_defaults.qos);
  EXPECT_FALSE(o.model_defaults.qos_stop_steps);
  EXPECT_FALSE(o.model_defaults.adaptive_batching);
  EXPECT_EQ(o.model_defaults.min_batched_tokens, 128);
  EXPECT_EQ(o.model_defaults.max_prefill_chunk, 192);
  EXPECT_EQ(o.grpc_port, 8001);
  EXPECT_EQ(o.model_defaults.max_batch_texts, 32);
  EXPECT_EQ(o.model_defaults.embed_batch_tokens, 2048);
  EXPECT_EQ(o.max_body_bytes, uint64_t{1} << 20);
  EXPECT_DOUBLE_EQ(o.shutdown_grace_seconds, 2.5);
  EXPECT_DOUBLE_EQ(o.watchdog_seconds, 5);
  EXPECT_DOUBLE_EQ(o.load_wait_seconds, 12);
  EXPECT_DOUBLE_EQ(o.unload_grace_seconds, 3);
  EXPECT_EQ(o.model_defaults.swap_space, uint64_t{64} << 20);
  EXPECT_DOUBLE_EQ(o.model_defaults.kv_idle_release_seconds, 30);
  EXPECT_EQ(o.stream_backlog, 64);
  EXPECT_DOUBLE_EQ(o.write_timeout_seconds, 1.5);
  EXPECT_EQ(o.default_max_tokens, 100);
  EXPECT_EQ(o.max_tokens_limit, 500);
  EXPECT_EQ(o.cors_origins,
            (std::vector<std::string>{"https://app.example", "http://localhost:3000"}));
  EXPECT_FALSE(o.gpu_telemetry);
  EXPECT_DOUBLE_EQ(o.gpu_telemetry_min_period_seconds, 0.5);
  EXPECT_DOUBLE_EQ(o.gpu_telemetry_max_period_seconds, 20);
  // Every setting name appears in the file above: none is flag-only by mistake.
  EXPECT_EQ(o.device, "cuda:1");
  EXPECT_EQ(o.model_defaults.tool_format, serving::ToolFormat::kGeneric);
  EXPECT_EQ(o.onnxruntime_library, "/opt/onnxruntime/libonnxruntime.so.1");
  EXPECT_EQ(o.model_defaults.max_batch_size, 16);
  EXPECT_EQ(o.model_defaults.preferred_batch_sizes, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(o.model_defaults.inputs.at("x").shape, (std::vector<int64_t>{-1, 3, 32, 32}));
  ASSERT_TRUE(o.model_defaults.preprocess.has_value());
  EXPECT_EQ(o.model_defaults.preprocess->pad_value, 0);
  EXPECT_EQ(o.model_defaults.speculative.method, engine::SpeculativeMethod::kNgram);
  EXPECT_EQ(o.model_defaults.speculative.max_tokens, 5);
  EXPECT_EQ(ServeSettingNames().size(), 65u);
}

TEST_F(ServeConfigTest, CorsOriginsMustBeOriginsOrAStar) {
  for (const char* good : {"*", "http://localhost:3000", "https://a.b-c.example",
                           "http://[::1]:8080", "http://127.0.0.1"}) {
    Result<ServeOptions> r = ResolveServeOptions({{"cors_origins", good}});
    EXPECT_TRUE(r.ok()) << good << ": " << r.status().ToString();
  }
  for (const char* bad : {"localhost:3000", "ftp://x.example", "http://", "https://a.example/path",
                          "http://a.example:port", "http://a.example:1234567", "*, http://a.b",
                          "http://a.example,,http://b.example", "", "http://a b"}) {
    Result<ServeOptions> r = ResolveServeOptions({{"cors_origins", bad}});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--cors-origins"), std::string::npos)
        << r.status().message();
  }
}

TEST_F(ServeConfigTest, DefaultMaxTokensAboveTheLimitIsAnErrorUnlessItIsTheBuiltInOne) {
  Result<ServeOptions> clash =
      ResolveServeOptions({{"default_max_tokens", "600"}, {"max_tokens_limit", "500"}});
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("default_max_tokens (600) is above max_tokens_limit "
                                          "(500)"),
            std::string::npos)
      << clash.status().message();
  // The built-in default (2048) follows a lower limit down.
  Result<ServeOptions> limited = ResolveServeOptions({{"max_tokens_limit", "500"}});
  ASSERT_TRUE(limited.ok()) << limited.status().ToString();
  EXPECT_EQ(limited->default_max_tokens, 500);
  EXPECT_EQ(ResolveServeOptions({})->default_max_tokens, 2048);
}

TEST_F(ServeConfigTest, TheGpuTelemetryPeriodsMustBeInOrder) {
  Result<ServeOptions> bad =
      ResolveServeOptions({{"gpu_telemetry_min_period", "5"}, {"gpu_telemetry_max_period", "2"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gpu_telemetry_min_period (5 s) is above "
                                        "gpu_telemetry_max_period (2 s)"),
            std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(ResolveServeOptions({{"gpu_telemetry", "maybe"}}).ok());
}

TEST_F(ServeConfigTest, FlagsWinOverTheFile) {
  const std::string path = WriteConfig("port: 8081\nhost: 0.0.0.0\nmemory_budget: 80%\n");
  Result<ServeOptions> o =
      ResolveServeOptions({{"config", path}, {"port", "9000"}, {"memory_budget", "512MiB"}});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ((*o).port, 9000);
  EXPECT_EQ((*o).host, "0.0.0.0");
  EXPECT_FALSE((*o).memory_budget.is_percent);
  EXPECT_EQ((*o).memory_budget.bytes, uint64_t{512} << 20);
}

TEST_F(ServeConfigTest, RelativePathsInTheFileAreFromItsFolder) {
  const std::string path = WriteConfig("model: m.gguf\napi_keys: sub/keys.yaml\n");
  Result<ServeOptions> o = ResolveServeOptions({{"config", path}});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ((*o).model, (dir_ / "m.gguf").string());
  EXPECT_EQ((*o).api_keys, (dir_ / "sub/keys.yaml").string());
  // A relative flag stays as given (relative to the working directory).
  Result<ServeOptions> flag = ResolveServeOptions({{"config", path}, {"model", "x.gguf"}});
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ((*flag).model, "x.gguf");
}

TEST_F(ServeConfigTest, UnknownKeysAreNamedInTheError) {
  const std::string path = WriteConfig("port: 8081\nprot: 1\nthreadz: 2\n");
  Result<ServeOptions> o = ResolveServeOptions({{"config", path}});
  ASSERT_FALSE(o.ok());
  const std::string m = o.status().message();
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("\"prot\""), std::string::npos) << m;
  EXPECT_NE(m.find("\"threadz\""), std::string::npos) << m;
  // Flag-style names are not keys.
  EXPECT_FALSE(ResolveServeOptions({{"config", WriteConfig("max-seqs: 4\n")}}).ok());
}

void ExpectBad(const std::map<std::string, std::string>& flags, const std::string& part) {
  Result<ServeOptions> o = ResolveServeOptions(flags);
  ASSERT_FALSE(o.ok()) << part;
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find(part), std::string::npos) << o.status().message();
}

TEST_F(ServeConfigTest, BadFlagValuesNameTheFlag) {
  ExpectBad({{"port", "65536"}}, "--port");
  ExpectBad({{"port", "80x"}}, "--port");
  ExpectBad({{"port", "-1"}}, "--port");
  ExpectBad({{"threads", "0"}}, "--threads");
  ExpectBad({{"http_threads", "0"}}, "--http-threads");
  ExpectBad({{"max_queued", "-3"}}, "--max-queued");
  ExpectBad({{"memory_budget", ""}}, "--memory-budget");
  ExpectBad({{"memory_budget", "150%"}}, "--memory-budget");
  ExpectBad({{"device_memory", "lots"}}, "--device-memory");
  ExpectBad({{"device", "gpu0"}}, "--device: \"gpu0\" is not a device");
  ExpectBad({{"memory_reserve", "-1MiB"}}, "--memory-reserve");
  ExpectBad({{"workers", "yes"}}, "expected on or off");
  ExpectBad({{"worker_heartbeat_timeout", "0"}}, "--worker-heartbeat-timeout");
  ExpectBad({{"kv_dtype", "q4_0"}}, "--kv-dtype");
  ExpectBad({{"weights_dtype", "q4_k"}}, "expected q8_0 or q4_0");
  ExpectBad({{"ctx", "1"}}, "--ctx");
  ExpectBad({{"max_batched_tokens", "0"}}, "--max-batched-tokens");
  ExpectBad({{"prefill_chunk_while_decoding", "-1"}}, "--prefill-chunk-while-decoding");
  ExpectBad({{"max_seqs", "0"}}, "--max-seqs");
  ExpectBad({{"max_body_bytes", "0"}}, "--max-body-bytes");
  ExpectBad({{"shutdown_grace", "-1"}}, "--shutdown-grace");
  ExpectBad({{"watchdog_seconds", "0"}}, "--watchdog-seconds");
  ExpectBad({{"load_wait", "-1"}}, "--load-wait");
  ExpectBad({{"unload_grace", "soon"}}, "--unload-grace");
  ExpectBad({{"swap_space", "lots"}}, "--swap-space");
  ExpectBad({{"kv_min", "lots"}}, "--kv-min");
  ExpectBad({{"kv_max", "-5"}}, "--kv-max");
  ExpectBad({{"kv_max", "99999999999"}}, "--kv-max");
  ExpectBad({{"kv_max", "64 parsecs"}}, "unknown unit");
  ExpectBad({{"name", ""}}, "--name");
  ExpectBad({{"api_keys", ""}}, "--api-keys");
  ExpectBad({{"config", ""}}, "--config");
  ExpectBad({{"class_deadline_action", "low=drop"}}, "needs reject or delay");
  ExpectBad({{"class_deadline_action", "urgent=delay"}}, "names no class");
  ExpectBad({{"class_ttft_ms", "critical=-5"}}, "class_ttft_ms");
  ExpectBad({{"class_tpot_ms", "critical"}}, "class_tpot_ms");
  ExpectBad({{"qos_reserve", "0.9"}}, "--qos-reserve");
  ExpectBad({{"qos_reserve", "-0.1"}}, "--qos-reserve");
  ExpectBad({{"qos", "maybe"}}, "expected on or off");
  ExpectBad({{"qos_stop_steps", "1"}}, "expected on or off");
}

TEST_F(ServeConfigTest, BadFileValuesNameTheFileAndKey) {
  const std::string path = WriteConfig("port: eighty\n");
  Result<ServeOptions> o = ResolveServeOptions({{"config", path}});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find(path + ": port"), std::string::npos) << o.status().message();
  ExpectBad({{"config", WriteConfig("port: [1, 2]\n")}}, "single value");
  ExpectBad({{"config", WriteConfig("port:\n")}}, "no value");
  ExpectBad({{"config", WriteConfig("- port\n")}}, "map of settings");
  ExpectBad({{"config", WriteConfig("port: [\n")}}, "not valid YAML");
}

TEST_F(ServeConfigTest, EmptyFileAndMissingFile) {
  Result<ServeOptions> empty = ResolveServeOptions({{"config", WriteConfig("")}});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty).port, 8080);
  Result<ServeOptions> missing = ResolveServeOptions({{"config", (dir_ / "nope.yaml").string()}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(FlagNameTest, UnderscoresBecomeDashes) {
  EXPECT_EQ(FlagName("max_batched_tokens"), "--max-batched-tokens");
  EXPECT_EQ(FlagName("port"), "--port");
}

}  // namespace
}  // namespace pier::cli

namespace pier::cli {
namespace {

// The models: list (model_repository.h): several models, each with its own settings, and
// every mistake named with the file, the model and the key.
class ModelRepositoryTest : public ServeConfigTest {
 protected:
  void SetUp() override {
    ServeConfigTest::SetUp();
    std::ofstream(dir_ / "a.gguf") << "x";
    std::ofstream(dir_ / "b.gguf") << "x";
  }
  Status ErrorOf(const std::string& yaml) {
    return ResolveServeOptions({{"config", WriteConfig(yaml)}}).status();
  }
};

TEST_F(ModelRepositoryTest, ListsModelsWithAliasesAndTheirOwnSettings) {
  const std::string path = WriteConfig(R"(
ctx: 1024
models:
  - name: alpha
    path: a.gguf
    aliases: [gpt-4o-mini, chat]
    ctx: 512
    max_seqs: 4
    kv_min: 16MiB
    kv_max: 2048
    swap_space: 8MiB
    priority: 10
    instances: 2
    fallback: beta
    fallback_load: 0.9
    fallback_queue_ms: 2000
    fallback_max_class: normal
  - name: beta
    path: b.gguf
    aliases: small
    load: on_demand
    idle_unload_after: 2.5
    device: cuda:1
)");
  Result<ServeOptions> o = ResolveServeOptions({{"config", path}});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(o->models.size(), 2u);
  EXPECT_EQ(o->model_defaults.ctx, 1024);  // server-wide
  const ModelConfig& a = o->models[0];
  EXPECT_EQ(a.name, "alpha");
  EXPECT_EQ(a.path, (dir_ / "a.gguf").string());  // relative to the file's folder
  EXPECT_EQ(a.aliases, (std::vector<std::string>{"gpt-4o-mini", "chat"}));
  EXPECT_EQ(a.fallback, "beta");
  EXPECT_DOUBLE_EQ(a.fallback_when.load_above, 0.9);
  EXPECT_DOUBLE_EQ(a.fallback_when.load_below, 0.7);  // 0.2 below, by default
  EXPECT_EQ(a.fallback_when.queue_ms_above, 2000);
  EXPECT_EQ(a.fallback_when.max_class, engine::Priority::kNormal);
  EXPECT_EQ(a.priority, 10);
  EXPECT_EQ(a.instances, 2);
  EXPECT_EQ(o->models[1].instances, 1);
  EXPECT_EQ(o->models[1].priority, 0);
  EXPECT_EQ(a.settings, nlohmann::json({{"ctx", "512"},
                                        {"max_seqs", "4"},
                                        {"kv_min", "16MiB"},
                                        {"kv_max", "2048"},
                                        {"swap_space", "8MiB"}}));
  EXPECT_EQ(o->models[1].aliases, (std::vector<std::string>{"small"}));
  EXPECT_TRUE(o->models[1].settings.empty());
  EXPECT_FALSE(a.on_demand);
  EXPECT_EQ(a.idle_unload_after_seconds, 0);
  EXPECT_TRUE(o->models[1].on_demand);
  EXPECT_DOUBLE_EQ(o->models[1].idle_unload_after_seconds, 2.5);
  EXPECT_EQ(o->models[1].device, "cuda:1");  // GPU 1: whether it is usable shows at load
  EXPECT_EQ(a.device, "") << "none of its own: the server's device";
}

TEST_F(ModelRepositoryTest, EveryMistakeIsNamedWithTheFileTheModelAndTheKey) {
  struct Case {
    std::string yaml;
    std::string expected;  // part of the message
  };
  const std::vector<Case> cases = {
      {"models: [{name: a, path: a.gguf, colour: red}]", "models[0] (a): unknown keys \"colour\""},
      {"models: [{name: a, path: a.gguf, ctx: lots}]", "models[0] (a): ctx: expected an integer"},
      {"models: [{name: a, path: a.gguf, ctx: [512, 1024]}]",
       "models[0] (a): ctx must be a single value"},
      {"models: [{name: a, path: a.gguf, max_seqs: {n: 4}}]",
       "models[0] (a): max_seqs must be a single value"},
      {"models: [{name: a, path: a.gguf, kv_policy: lazy}]",
       "models[0] (a): kv_policy: unknown KV policy 'lazy'"},
      {"models: [{name: a, path: a.gguf, kv_max: 1 parsec}]",
       "models[0] (a): kv_max \"1 parsec\": unknown unit"},
      {"models: [{name: a, path: missing.gguf}]", "models[0] (a): path: no such file"},
      {"models: [{path: a.gguf}]", "models[0]: name is required"},
      {"models: [{name: a}]", "models[0] (a): path is required"},
      {"models: [{name: 'has space', path: a.gguf}]", "may use only letters, digits"},
      {"models: [{name: a, path: a.gguf}, {name: a, path: b.gguf}]",
       "models[1] (a): \"a\" is already the name or an alias of"},
      {"models: [{name: a, path: a.gguf, aliases: [x]}, {name: b, path: b.gguf, aliases: x}]",
       "models[1] (b): \"x\" is already the name or an alias of"},
      {"models: [{name: a, path: a.gguf, aliases: [a]}]", "\"a\" is listed twice"},
      {"models: [{name: a, path: a.gguf, fallback: nobody}]",
       "models[0] (a): fallback \"nobody\" names no model"},
      {"models: [{name: a, path: a.gguf, fallback: b}, {name: b, path: b.gguf, fallback: a}]",
       "fallback cycle a -> b -> a"},
      {"models: [{name: a, path: a.gguf, fallback: a}]", "fallback cycle a -> a"},
      {"models: [{name: a, path: a.gguf, fallback_load: 0.5}]",
       "models[0] (a): fallback_load, fallback_release, fallback_queue_ms and "
       "fallback_max_class need a fallback model"},
      {"models: [{name: a, path: a.gguf, fallback: b, fallback_load: 0.5, fallback_release: 0.6},"
       " {name: b, path: b.gguf}]",
       "fallback_release 0.600000 must be below fallback_load 0.500000"},
      {"models: [{name: a, path: a.gguf, fallback: b, fallback_load: -1}, {name: b, path: b.gguf}]",
       "models[0] (a): fallback_load: expected a load 0..100"},
      {"models: [{name: a, path: a.gguf, fallback: b, fallback_max_class: vip},"
       " {name: b, path: b.gguf}]",
       "models[0] (a): fallback_max_class"},
      {"models: [{name: a, path: a.gguf, fallback: b, fallback_queue_ms: soon},"
       " {name: b, path: b.gguf}]",
       "models[0] (a): fallback_queue_ms: expected 0..3600000 milliseconds"},
      {"models: []", "models must be a list of models"},
      {"models: [{name: a, path: a.gguf, priority: 101}]",
       "models[0] (a): priority: expected an integer in [-100, 100]"},
      {"models: [{name: a, path: a.gguf, instances: 0}]",
       "models[0] (a): instances: expected an integer in [1, 16]"},
      {"models: [just-a-name]", "models[0]: expected a map"},
      {"models: [{name: a, path: a.gguf, load: lazily}]",
       "models[0] (a): load: expected on_start or on_demand, got \"lazily\""},
      {"models: [{name: a, path: a.gguf, load: on_demand, idle_unload_after: -3}]",
       "models[0] (a): idle_unload_after: expected seconds (0 or more)"},
      {"models: [{name: a, path: a.gguf, idle_unload_after: 30}]",
       "models[0] (a): idle_unload_after needs load: on_demand"},
      {"models: [{name: a, path: a.gguf, device: 'cuda:x'}]",
       "models[0] (a): device: \"cuda:x\" is not a device (cpu, cuda:N for GPU N, a GPU's "
       "UUID, or a MIG instance's with workers: on)"},
      {"models: [{name: a, path: a.gguf, device: tpu}]",
       "models[0] (a): device: \"tpu\" is not a device"},
      {"models: [{name: a, path: a.gguf, cpus: 3-1}]",
       "models[0] (a): cpus: CPU list \"3-1\": \"3-1\" is not a range a-b"},
      {"models: [{name: a, path: a.gguf, instances: 2, cpus: ['0-1', '2-3', '4-5']}]",
       "models[0] (a): cpus: 3 values for 2 instances"},
      {"models: [{name: a, path: a.gguf, numa_node: near}]",
       "models[0] (a): numa_node (a node or auto): expected an integer in [0, 1023]"},
      {"models: [{name: a, path: a.gguf, mps_thread_percentage: 0}]",
       "models[0] (a): mps_thread_percentage: expected an integer in [1, 100]"},
      {"models: [{name: a, path: a.gguf, mps_memory_limit: 10KiB}]",
       "models[0] (a): mps_memory_limit: at least 1MiB"},
      {"models: [{name: a, path: a.gguf, gpu: []}]", "models[0] (a): gpu: the list is empty"},
      {"model: a.gguf\nmodels: [{name: a, path: a.gguf}]",
       "model describes the one model of a file without a models: list"},
  };
  for (const Case& c : cases) {
    const Status status = ErrorOf(c.yaml);
    EXPECT_FALSE(status.ok()) << c.yaml;
    EXPECT_NE(status.message().find(c.expected), std::string::npos)
        << c.yaml << "\n  got: " << status.message();
    EXPECT_NE(status.message().find("serve.yaml"), std::string::npos) << status.message();
  }
}

TEST_F(ModelRepositoryTest, BindingsGiveOneValueForAllOrOnePerInstance) {
  using Choice = placement::BindingRequest::Choice;
  const std::string path = WriteConfig(R"(
models:
  - name: alpha
    path: a.gguf
    instances: 2
    cpus: [[0, 1], "4-5,8"]
    numa_node: auto
    gpu: [0, MIG-4b6b1a2c-0000-5000-8000-000000000000]
    mps_thread_percentage: 50
    mps_memory_limit: 20GiB
  - name: beta
    path: b.gguf
    instances: 3
    cpus: [2, 3]
  - name: gamma
    path: b.gguf
    cpus: auto
    numa_node: 1
  - name: delta
    path: a.gguf
)");
  Result<ServeOptions> o = ResolveServeOptions({{"config", path}});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  const std::vector<placement::BindingRequest>& a = o->models[0].bindings;
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].cpus, Choice::kGiven);
  EXPECT_EQ(a[0].cpu_list, (std::vector<int>{0, 1}));
  EXPECT_EQ(a[1].cpu_list, (std::vector<int>{4, 5, 8}));
  EXPECT_EQ(a[0].numa, Choice::kAuto);
  EXPECT_EQ(a[1].numa, Choice::kAuto);
  EXPECT_EQ(a[0].gpu, "0");
  EXPECT_EQ(a[1].gpu, "MIG-4b6b1a2c-0000-5000-8000-000000000000");
  EXPECT_EQ(a[1].mps_thread_percentage, 50);
  EXPECT_EQ(a[1].mps_memory_limit_bytes, uint64_t{20} << 30);
  // A flat list of numbers is one CPU list, shared by the three instances.
  const std::vector<placement::BindingRequest>& b = o->models[1].bindings;
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].cpu_list, (std::vector<int>{2, 3}));
  EXPECT_EQ(b[0].numa, Choice::kNone);
  const std::vector<placement::BindingRequest>& g = o->models[2].bindings;
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].cpus, Choice::kAuto);
  EXPECT_EQ(g[0].numa, Choice::kGiven);
  EXPECT_EQ(g[0].numa_node, 1);
  EXPECT_TRUE(o->models[3].bindings.empty());
}

TEST_F(ModelRepositoryTest, TheOneModelsNameFollowsTheSameRule) {
  EXPECT_TRUE(ResolveServeOptions({{"name", "chat-1.5:q4"}}).ok());
  const Status status = ResolveServeOptions({{"name", "team/chat"}}).status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("--name: \"team/chat\" may use only letters"), std::string::npos)
      << status.message();
}

TEST_F(ModelRepositoryTest, TheModelFlagCannotJoinAList) {
  const std::string path = WriteConfig("models: [{name: a, path: a.gguf}]");
  const Status status = ResolveServeOptions({{"config", path}, {"model", "x.gguf"}}).status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("--model cannot be combined with the models: list"),
            std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace pier::cli
