// ApiKeys: parsing the keys file, and authenticating requests by "Authorization: Bearer" or
// "X-API-Key" in constant time, with 401s in OpenAI's error shape that never echo a key.
#include "api/auth/api_keys.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace pier::api {
namespace {

constexpr const char* kKeysYaml = R"(
keys:
  - key: "sk-team-a-1"
    tenant: "team-a"
    max_priority: high
  - key: "sk-team-b-1"
    tenant: "team-b"
    max_priority: low
  - key: "sk-ops"
    tenant: "ops"
)";

HttpRequest WithHeader(const std::string& name, const std::string& value) {
  HttpRequest request;
  request.method = "GET";
  request.path = request.target = "/v1/models";
  request.headers.emplace_back(name, value);
  return request;
}

ApiKeys MustParse(const std::string& yaml) {
  Result<ApiKeys> keys = ApiKeys::Parse(yaml, "keys.yaml");
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return keys.ok() ? std::move(keys).value() : ApiKeys();
}

Principal MustAuthenticate(const ApiKeys& keys, const HttpRequest& request) {
  auto result = keys.Authenticate(request);
  if (const HttpResponse* denied = std::get_if<HttpResponse>(&result)) {
    ADD_FAILURE() << "denied: " << denied->status << " " << denied->body;
    return {};
  }
  return std::get<Principal>(result);
}

HttpResponse MustDeny(const ApiKeys& keys, const HttpRequest& request) {
  auto result = keys.Authenticate(request);
  if (const HttpResponse* denied = std::get_if<HttpResponse>(&result)) return *denied;
  ADD_FAILURE() << "allowed as " << std::get<Principal>(result).tenant;
  return {};
}

TEST(ApiKeysTest, BearerKeyMapsToTenantAndCeiling) {
  const ApiKeys keys = MustParse(kKeysYaml);
  EXPECT_TRUE(keys.enabled());
  EXPECT_EQ(keys.size(), 3u);
  Principal a = MustAuthenticate(keys, WithHeader("authorization", "Bearer sk-team-a-1"));
  EXPECT_EQ(a.tenant, "team-a");
  EXPECT_EQ(a.max_priority, engine::Priority::kHigh);
  Principal b = MustAuthenticate(keys, WithHeader("authorization", "Bearer sk-team-b-1"));
  EXPECT_EQ(b.tenant, "team-b");
  EXPECT_EQ(b.max_priority, engine::Priority::kLow);
}

TEST(ApiKeysTest, CeilingDefaultsToCritical) {
  const ApiKeys keys = MustParse(kKeysYaml);
  Principal ops = MustAuthenticate(keys, WithHeader("authorization", "Bearer sk-ops"));
  EXPECT_EQ(ops.tenant, "ops");
  EXPECT_EQ(ops.max_priority, engine::Priority::kCritical);
}

TEST(ApiKeysTest, AcceptsXApiKeyHeaderAndAnyCaseOfBearer) {
  const ApiKeys keys = MustParse(kKeysYaml);
  EXPECT_EQ(MustAuthenticate(keys, WithHeader("x-api-key", "sk-team-a-1")).tenant, "team-a");
  EXPECT_EQ(MustAuthenticate(keys, WithHeader("authorization", "bearer sk-ops")).tenant, "ops");
  EXPECT_EQ(MustAuthenticate(keys, WithHeader("authorization", "BEARER  sk-ops ")).tenant, "ops");
}

TEST(ApiKeysTest, MissingKeyIs401InOpenAiShape) {
  const ApiKeys keys = MustParse(kKeysYaml);
  HttpRequest request;
  request.path = "/v1/models";
  HttpResponse denied = MustDeny(keys, request);
  EXPECT_EQ(denied.status, 401);
  auto body = nlohmann::json::parse(denied.body);
  EXPECT_EQ(body["error"]["type"], "authentication_error");
  EXPECT_EQ(body["error"]["code"], "missing_api_key");
  EXPECT_TRUE(body["error"]["message"].is_string());
}

TEST(ApiKeysTest, WrongKeyIs401AndIsNotEchoed) {
  const ApiKeys keys = MustParse(kKeysYaml);
  for (const std::string wrong :
       {"sk-team-a-", "sk-team-a-12", "SK-TEAM-A-1", "sk-wrong-key-xyz"}) {
    HttpResponse denied = MustDeny(keys, WithHeader("authorization", "Bearer " + wrong));
    EXPECT_EQ(denied.status, 401) << wrong;
    EXPECT_EQ(nlohmann::json::parse(denied.body)["error"]["code"], "invalid_api_key");
    EXPECT_EQ(denied.body.find(wrong), std::string::npos) << denied.body;
  }
  // Another scheme, or an empty bearer token, is no key.
  EXPECT_EQ(MustDeny(keys, WithHeader("authorization", "Basic c2stb3Bz")).status, 401);
  EXPECT_EQ(MustDeny(keys, WithHeader("authorization", "Bearer ")).status, 401);
  EXPECT_EQ(MustDeny(keys, WithHeader("x-api-key", "")).status, 401);
}

TEST(ApiKeysTest, WithoutKeysEveryRequestIsTheDefaultPrincipal) {
  const ApiKeys keys;
  EXPECT_FALSE(keys.enabled());
  Principal p = MustAuthenticate(keys, HttpRequest{});
  EXPECT_EQ(p.tenant, "default");
  EXPECT_EQ(p.max_priority, engine::Priority::kCritical);
}

void ExpectParseError(const std::string& yaml, const std::string& expected_part) {
  Result<ApiKeys> keys = ApiKeys::Parse(yaml, "keys.yaml");
  ASSERT_FALSE(keys.ok()) << yaml;
  EXPECT_EQ(keys.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(keys.status().message().find("keys.yaml"), std::string::npos)
      << keys.status().message();
  EXPECT_NE(keys.status().message().find(expected_part), std::string::npos)
      << keys.status().message();
}

TEST(ApiKeysTest, RejectsBadFilesNamingTheEntry) {
  ExpectParseError("keys: [", "not valid YAML");
  ExpectParseError("- key: a\n  tenant: t\n", "keys");
  ExpectParseError("keys: {key: a}\n", "list");
  ExpectParseError("keys:\n  - tenant: t\n", "keys[0]: \"key\" is missing");
  ExpectParseError("keys:\n  - key: a\n    tenant: t\n  - key: b\n", "keys[1]: \"tenant\"");
  ExpectParseError("keys:\n  - key: \"\"\n    tenant: t\n", "keys[0]");
  ExpectParseError("keys:\n  - key: a\n    tenant: t\n    max_priority: urgent\n", "max_priority");
  ExpectParseError("keys:\n  - key: a\n    tenant: t\n    role: admin\n", "unknown field \"role\"");
  ExpectParseError("keys: []\n", "no key");
}

TEST(ApiKeysTest, AbuseLimitsAreReadPerKey) {
  const ApiKeys keys = MustParse(R"(
keys:
  - key: "sk-limited"
    tenant: "a"
    requests_per_second: 2.5
    tokens_per_minute: 1000
    max_concurrent: 3
    max_prompt_tokens: 100
    max_output_tokens: 50
  - key: "sk-free"
    tenant: "b"
)");
  Principal limited = MustAuthenticate(keys, WithHeader("authorization", "Bearer sk-limited"));
  ASSERT_NE(limited.usage, nullptr);
  EXPECT_DOUBLE_EQ(limited.usage->limits().requests_per_second, 2.5);
  EXPECT_EQ(limited.usage->limits().tokens_per_minute, 1000);
  EXPECT_EQ(limited.usage->limits().max_concurrent, 3);
  EXPECT_EQ(limited.usage->limits().max_prompt_tokens, 100);
  EXPECT_EQ(limited.usage->limits().max_output_tokens, 50);
  // Every request of the key shares one usage; a key without limits has none.
  EXPECT_EQ(MustAuthenticate(keys, WithHeader("x-api-key", "sk-limited")).usage, limited.usage);
  EXPECT_EQ(MustAuthenticate(keys, WithHeader("x-api-key", "sk-free")).usage, nullptr);

  const std::string base = "keys:\n  - key: a\n    tenant: t\n";
  ExpectParseError(base + "    requests_per_second: 0\n", "requests_per_second must be a number");
  ExpectParseError(base + "    requests_per_second: fast\n", "requests_per_second");
  ExpectParseError(base + "    max_concurrent: 0\n", "max_concurrent must be an integer");
  ExpectParseError(base + "    tokens_per_minute: 1e3\n", "tokens_per_minute");
  ExpectParseError(base + "    max_prompt_tokens: -5\n", "max_prompt_tokens");
  ExpectParseError(base + "    max_output_tokens: 1.5\n", "max_output_tokens");
}

TEST(KeyUsageTest, TheTokenBucketChargesTheMostARequestMayCost) {
  using Clock = KeyUsage::Clock;
  KeyUsage usage(KeyLimits{.tokens_per_minute = 600});  // refills 10 tokens a second
  const Clock::time_point t0 = Clock::now();
  double retry = 0;
  EXPECT_EQ(usage.Admit(t0, 601, &retry), KeyUsage::Admission::kTooLarge);  // never fits
  EXPECT_EQ(usage.Admit(t0, 500, &retry), KeyUsage::Admission::kAdmitted);
  EXPECT_EQ(usage.Admit(t0, 200, &retry), KeyUsage::Admission::kTokenRateLimited);
  EXPECT_NEAR(retry, 10.0, 1e-9);  // 100 more tokens at 10 a second
  EXPECT_EQ(usage.Admit(t0 + std::chrono::seconds(10), 200, &retry),
            KeyUsage::Admission::kAdmitted);
  EXPECT_EQ(usage.in_flight(), 2);  // refusals took nothing
}

TEST(KeyUsageTest, TheRateBucketAndTheConcurrencyLimit) {
  using Clock = KeyUsage::Clock;
  KeyUsage usage(KeyLimits{.requests_per_second = 2, .max_concurrent = 3});
  const Clock::time_point t0 = Clock::now();
  double retry = 0;
  // A burst of the rate (2), then refused until half a second has refilled one token.
  EXPECT_EQ(usage.Admit(t0, 10, &retry), KeyUsage::Admission::kAdmitted);
  EXPECT_EQ(usage.Admit(t0, 10, &retry), KeyUsage::Admission::kAdmitted);
  EXPECT_EQ(usage.Admit(t0, 10, &retry), KeyUsage::Admission::kRateLimited);
  EXPECT_NEAR(retry, 0.5, 1e-9);
  EXPECT_EQ(usage.Admit(t0 + std::chrono::milliseconds(499), 10, &retry),
            KeyUsage::Admission::kRateLimited);
  EXPECT_EQ(usage.Admit(t0 + std::chrono::milliseconds(501), 10, &retry),
            KeyUsage::Admission::kAdmitted);
  EXPECT_EQ(usage.in_flight(), 3);
  // Three in flight: the fourth waits for a slot whatever the bucket holds.
  EXPECT_EQ(usage.Admit(t0 + std::chrono::seconds(10), 10, &retry),
            KeyUsage::Admission::kTooManyInFlight);
  {
    KeySlot released({std::shared_ptr<KeyUsage>(&usage, [](KeyUsage*) {})});
  }
  EXPECT_EQ(usage.in_flight(), 2);
  EXPECT_EQ(usage.Admit(t0 + std::chrono::seconds(10), 10, &retry), KeyUsage::Admission::kAdmitted);
}

TEST(ApiKeysTest, ClassLimitsAreReadAndMustStayWithinTheKeys) {
  const ApiKeys keys = MustParse(R"(
keys:
  - key: "sk-a"
    tenant: "a"
    max_concurrent: 4
    max_prompt_tokens: 100
    class_limits:
      critical: {max_concurrent: 1, requests_per_second: 0.5}
      low:
        max_prompt_tokens: 10
        tokens_per_minute: 600
)");
  const Principal a = MustAuthenticate(keys, WithHeader("x-api-key", "sk-a"));
  const auto& critical = a.class_usage[static_cast<size_t>(engine::Priority::kCritical)];
  const auto& low = a.class_usage[static_cast<size_t>(engine::Priority::kLow)];
  ASSERT_NE(critical, nullptr);
  ASSERT_NE(low, nullptr);
  EXPECT_EQ(a.class_usage[static_cast<size_t>(engine::Priority::kNormal)], nullptr);
  EXPECT_EQ(critical->limits().max_concurrent, 1);
  EXPECT_DOUBLE_EQ(critical->limits().requests_per_second, 0.5);
  EXPECT_EQ(low->limits().tokens_per_minute, 600);
  // The tightest size limit, named by where it is set.
  EXPECT_EQ(MaxPromptTokens(a, engine::Priority::kLow).value, 10);
  EXPECT_EQ(MaxPromptTokens(a, engine::Priority::kLow).setting,
            "class_limits.low.max_prompt_tokens");
  EXPECT_EQ(MaxPromptTokens(a, engine::Priority::kNormal).value, 100);
  EXPECT_EQ(MaxPromptTokens(a, engine::Priority::kNormal).setting, "max_prompt_tokens");
  EXPECT_EQ(MaxOutputTokens(a, engine::Priority::kNormal).value, 0);

  const std::string base = "keys:\n  - key: a\n    tenant: t\n    max_concurrent: 2\n";
  ExpectParseError(
      base + "    class_limits:\n      critical: {max_concurrent: 3}\n",
      "class_limits.critical.max_concurrent (3) is above the key's max_concurrent (2)");
  ExpectParseError(base + "    class_limits:\n      urgent: {max_concurrent: 1}\n",
                   "class_limits.urgent: unknown class");
  ExpectParseError(base + "    class_limits:\n      1: {max_concurrent: 1}\n",
                   "class_limits.1: unknown class");
  ExpectParseError(base + "    class_limits:\n      low: {burst: 1}\n",
                   "class_limits.low: unknown limit \"burst\"");
  ExpectParseError(base + "    class_limits:\n      low: {max_concurrent: 0}\n",
                   "class_limits.low: max_concurrent must be an integer");
  ExpectParseError(base + "    class_limits: [low]\n", "class_limits must be a map");
}

TEST(ApiKeysTest, AClassLimitRefusesOnlyItsClassAndTakesNothingFromTheKey) {
  const ApiKeys keys = MustParse(R"(
keys:
  - key: "sk-a"
    tenant: "a"
    max_concurrent: 3
    class_limits:
      critical: {max_concurrent: 1}
)");
  const Principal a = MustAuthenticate(keys, WithHeader("x-api-key", "sk-a"));
  std::shared_ptr<KeySlot> first, second, normal;
  EXPECT_FALSE(AdmitKeyRequest(a, engine::Priority::kCritical, 10, "t", "p", &first).has_value());
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(a.usage->in_flight(), 1);
  const std::optional<KeyRefusal> refusal =
      AdmitKeyRequest(a, engine::Priority::kCritical, 10, "t", "p", &second);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->status.code(), StatusCode::kResourceExhausted);
  const std::optional<HttpResponse> refused = ResponseOf(*refusal);
  EXPECT_EQ(refused->status, 429);
  EXPECT_NE(refused->body.find("class critical of this API key has 1 requests in flight, its "
                               "limit (class_limits.critical.max_concurrent)"),
            std::string::npos)
      << refused->body;
  EXPECT_EQ(a.usage->in_flight(), 1) << "the key's slot taken for the refused one is given back";
  // Another class is untouched by the critical limit.
  EXPECT_FALSE(AdmitKeyRequest(a, engine::Priority::kNormal, 10, "t", "p", &normal).has_value());
  EXPECT_EQ(a.usage->in_flight(), 2);
  first.reset();
  EXPECT_EQ(a.usage->in_flight(), 1);
  EXPECT_EQ(a.class_usage[0]->in_flight(), 0);
  EXPECT_FALSE(AdmitKeyRequest(a, engine::Priority::kCritical, 10, "t", "p", &second).has_value());
}

// The one authentication HTTP and gRPC share: credentials as sent, whatever carried them.
TEST(ApiKeysTest, CredentialsAuthenticateAsHeadersDo) {
  Result<ApiKeys> keys = ApiKeys::Parse(R"(
keys:
  - {key: "sk-a", tenant: "team-a"}
)");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  auto tenant = [&](Credentials c) {
    auto result = keys->Authenticate(c);
    if (auto* refused = std::get_if<AuthRefusal>(&result)) return "refused: " + refused->code;
    return std::get<Principal>(result).tenant;
  };
  EXPECT_EQ(tenant({"Bearer sk-a", std::nullopt}), "team-a");
  EXPECT_EQ(tenant({std::nullopt, "sk-a"}), "team-a");
  EXPECT_EQ(tenant({"Bearer sk-b", "sk-a"}), "refused: invalid_api_key")
      << "Authorization, when sent, is the credential";
  EXPECT_EQ(tenant({std::nullopt, std::nullopt}), "refused: missing_api_key");
  EXPECT_EQ(tenant({"", std::nullopt}), "refused: missing_api_key");
  // Over HTTP the refusal is OpenAI's 401 with the Bearer challenge; the key is not echoed.
  auto http = keys->Authenticate(WithHeader("authorization", "Bearer sk-secret"));
  ASSERT_TRUE(std::holds_alternative<HttpResponse>(http));
  const HttpResponse& denied = std::get<HttpResponse>(http);
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(denied.body.find("sk-secret"), std::string::npos);
  EXPECT_NE(denied.body.find("invalid_api_key"), std::string::npos);
}

TEST(KeyUsageTest, RefundGivesBackWhatAdmitTook) {
  using Clock = KeyUsage::Clock;
  KeyUsage usage(KeyLimits{.requests_per_second = 1, .tokens_per_minute = 100});
  const Clock::time_point t0 = Clock::now();
  double retry = 0;
  EXPECT_EQ(usage.Admit(t0, 80, &retry), KeyUsage::Admission::kAdmitted);
  EXPECT_EQ(usage.Admit(t0, 80, &retry), KeyUsage::Admission::kRateLimited);
  usage.Refund(80);
  EXPECT_EQ(usage.in_flight(), 0);
  EXPECT_EQ(usage.Admit(t0, 80, &retry), KeyUsage::Admission::kAdmitted);
}

TEST(ApiKeysTest, TenantWeightsDefaultToOneAndMustAgreeAndBePositive) {
  auto keys = ApiKeys::Parse(
      "keys:\n  - key: a1\n    tenant: a\n    weight: 2.5\n  - key: a2\n    tenant: a\n"
      "    weight: 2.5\n  - key: b\n    tenant: b\n");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  HttpRequest r;
  r.headers = {{"authorization", "Bearer a2"}};
  EXPECT_EQ(std::get<Principal>(keys->Authenticate(r)).weight, 2.5);
  r.headers = {{"authorization", "Bearer b"}};
  EXPECT_EQ(std::get<Principal>(keys->Authenticate(r)).weight, 1.0);
  ExpectParseError("keys:\n  - key: a\n    tenant: t\n    weight: 0\n",
                   "weight must be a number above 0");
  ExpectParseError("keys:\n  - key: a\n    tenant: t\n    weight: -1\n", "weight");
  ExpectParseError(
      "keys:\n  - key: a\n    tenant: t\n    weight: 1\n  - key: b\n    tenant: t\n"
      "    weight: 3\n",
      "tenant \"t\" has weight 1 on an earlier key and 3 here");
}

TEST(ApiKeysTest, DuplicateKeyIsRejectedWithoutQuotingIt) {
  Result<ApiKeys> keys = ApiKeys::Parse(
      "keys:\n  - key: sk-secret-dup\n    tenant: a\n  - key: sk-secret-dup\n    tenant: b\n",
      "keys.yaml");
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("keys[1]"), std::string::npos);
  EXPECT_NE(keys.status().message().find("duplicate"), std::string::npos);
  EXPECT_EQ(keys.status().message().find("sk-secret-dup"), std::string::npos);
}

TEST(ApiKeysTest, LoadsFromFileAndReportsUnreadableFiles) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("pier_api_keys_test_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << kKeysYaml;
  }
  Result<ApiKeys> keys = ApiKeys::Load(path.string());
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ((*keys).size(), 3u);
  std::filesystem::remove(path);
  Result<ApiKeys> missing = ApiKeys::Load(path.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path.string()), std::string::npos);
}

}  // namespace
}  // namespace pier::api
