#include "http/api_keys.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "common/ascii.h"
#include "common/yaml.h"

namespace pier::http {
namespace {

// The key a request presents: "Authorization: Bearer <key>" (scheme case-insensitive), else
// "X-API-Key: <key>"; nullopt when neither header is there.
std::optional<std::string_view> PresentedKey(const HttpRequest& request) {
  if (std::optional<std::string_view> auth = request.Header("authorization")) {
    std::string_view value = TrimSpaceAndTab(*auth);
    constexpr std::string_view kBearer = "bearer ";
    if (value.size() >= kBearer.size()) {
      bool is_bearer = true;
      for (size_t i = 0; i < kBearer.size(); ++i) {
        const char c = static_cast<char>(value[i] | 0x20);
        if (c != kBearer[i]) is_bearer = false;
      }
      if (is_bearer) return TrimSpaceAndTab(value.substr(kBearer.size()));
    }
    return value;  // another scheme: never matches a key unless it is literally the key
  }
  if (std::optional<std::string_view> key = request.Header("x-api-key"))
    return TrimSpaceAndTab(*key);
  return std::nullopt;
}

}  // namespace

bool ConstantTimeEquals(std::string_view presented, std::string_view stored) {
  unsigned char diff = presented.size() == stored.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    const unsigned char s =
        stored.empty() ? 0 : static_cast<unsigned char>(stored[i % stored.size()]);
    diff |= static_cast<unsigned char>(static_cast<unsigned char>(presented[i]) ^ s);
  }
  return diff == 0;
}

namespace {

// An optional field that must be a number above 0; 0 when absent.
Result<double> PositiveNumber(const YAML::Node& entry, const char* name, const std::string& where) {
  if (!entry[name]) return 0.0;
  const std::string text = entry[name].Scalar();
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v > 0) || v > 1e9) {
    return InvalidArgumentError(where + ": " + name + " must be a number above 0, got \"" +
                                text.substr(0, 40) + "\"");
  }
  return v;
}

std::string FormatWeight(double weight) {
  std::ostringstream out;
  out << weight;
  return out.str();
}

// An optional field that must be an integer of at least 1; 0 when absent.
Result<int64_t> PositiveInteger(const YAML::Node& entry, const char* name,
                                const std::string& where) {
  if (!entry[name]) return int64_t{0};
  const std::string text = entry[name].Scalar();
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 1) {
    return InvalidArgumentError(where + ": " + name + " must be an integer of at least 1, got \"" +
                                text.substr(0, 40) + "\"");
  }
  return v;
}

}  // namespace

Result<ApiKeys> ApiKeys::Parse(std::string_view yaml_text, std::string_view source_name) {
  const std::string source(source_name);
  PIER_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text, source));
  if (!root.IsMap() || !root["keys"]) {
    return InvalidArgumentError(source + ": expected a map with a list under \"keys\"");
  }
  const YAML::Node list = root["keys"];
  if (!list.IsSequence()) return InvalidArgumentError(source + ": \"keys\" must be a list");
  ApiKeys keys;
  std::set<std::string> seen;
  std::map<std::string, double> weights;  // per tenant
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node entry = list[i];
    const std::string where = source + ": keys[" + std::to_string(i) + "]";
    if (!entry.IsMap()) return InvalidArgumentError(where + ": expected a map with key and tenant");
    for (const auto& field : entry) {
      const std::string name = field.first.Scalar();
      if (name != "key" && name != "tenant" && name != "max_priority" && name != "weight" &&
          name != "requests_per_second" && name != "tokens_per_minute" &&
          name != "max_concurrent" && name != "max_prompt_tokens" && name != "max_output_tokens") {
        return InvalidArgumentError(where + ": unknown field \"" + name +
                                    "\" (known: key, tenant, max_priority, weight, "
                                    "requests_per_second, "
                                    "tokens_per_minute, max_concurrent, max_prompt_tokens, "
                                    "max_output_tokens)");
      }
      if (!field.second.IsScalar()) {
        return InvalidArgumentError(where + ": \"" + name + "\" must be a single value");
      }
    }
    Entry parsed;
    if (!entry["key"] || entry["key"].Scalar().empty()) {
      return InvalidArgumentError(where + ": \"key\" is missing or empty");
    }
    parsed.key = entry["key"].Scalar();
    if (!entry["tenant"] || entry["tenant"].Scalar().empty()) {
      return InvalidArgumentError(where + ": \"tenant\" is missing or empty");
    }
    parsed.principal.tenant = entry["tenant"].Scalar();
    if (entry["max_priority"]) {
      Result<engine::Priority> priority = engine::ParsePriority(entry["max_priority"].Scalar());
      if (!priority.ok()) {
        return InvalidArgumentError(where + ": max_priority: " + priority.status().message());
      }
      parsed.principal.max_priority = *priority;
    }
    if (entry["weight"]) {
      PIER_ASSIGN_OR_RETURN(parsed.principal.weight, PositiveNumber(entry, "weight", where));
    }
    if (auto [it, inserted] = weights.emplace(parsed.principal.tenant, parsed.principal.weight);
        !inserted && it->second != parsed.principal.weight) {
      return InvalidArgumentError(
          where + ": tenant \"" + parsed.principal.tenant + "\" has weight " +
          FormatWeight(it->second) + " on an earlier key and " +
          FormatWeight(parsed.principal.weight) + " here (a tenant has one weight)");
    }
    KeyLimits limits;
    PIER_ASSIGN_OR_RETURN(limits.requests_per_second,
                          PositiveNumber(entry, "requests_per_second", where));
    for (auto [name, out] : {std::pair{"tokens_per_minute", &limits.tokens_per_minute},
                             std::pair{"max_concurrent", &limits.max_concurrent},
                             std::pair{"max_prompt_tokens", &limits.max_prompt_tokens},
                             std::pair{"max_output_tokens", &limits.max_output_tokens}}) {
      PIER_ASSIGN_OR_RETURN(*out, PositiveInteger(entry, name, where));
    }
    if (limits.any()) parsed.principal.usage = std::make_shared<KeyUsage>(limits);
    // The message names the entry and its tenant, never the key.
    if (!seen.insert(parsed.key).second) {
      return InvalidArgumentError(where + " (tenant \"" + parsed.principal.tenant +
                                  "\"): duplicate key (each key must be unique)");
    }
    keys.entries_.push_back(std::move(parsed));
  }
  // A keys file that lists nothing would leave the API open: refuse it.
  if (keys.entries_.empty()) {
    return InvalidArgumentError(source +
                                ": \"keys\" lists no key (an empty list would leave "
                                "the API open; run without --api-keys for that)");
  }
  return keys;
}

Result<ApiKeys> ApiKeys::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read the API keys file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return NotFoundError("cannot read the API keys file " + path);
  return Parse(text.str(), path);
}

std::variant<Principal, HttpResponse> ApiKeys::Authenticate(const HttpRequest& request) const {
  if (entries_.empty()) return Principal{};
  const std::optional<std::string_view> presented = PresentedKey(request);
  if (!presented.has_value() || presented->empty()) {
    return ErrorResponse(401,
                         "missing API key: send it as \"Authorization: Bearer <key>\" or "
                         "\"X-API-Key: <key>\"",
                         "", "missing_api_key");
  }
  // Every key is compared (no early exit), each in constant time.
  const Entry* match = nullptr;
  for (const Entry& entry : entries_) {
    if (ConstantTimeEquals(*presented, entry.key) && match == nullptr) match = &entry;
  }
  if (match == nullptr) return ErrorResponse(401, "invalid API key", "", "invalid_api_key");
  return match->principal;
}

}  // namespace pier::http

namespace pier::http {

std::optional<HttpResponse> AdmitKeyRequest(const Principal& principal, int64_t cost,
                                            std::string_view cost_what, std::string_view cost_param,
                                            std::shared_ptr<KeySlot>* slot) {
  slot->reset();
  if (principal.usage == nullptr) return std::nullopt;
  const KeyLimits& limits = principal.usage->limits();
  double retry_after_s = 1;
  const KeyUsage::Admission admission =
      principal.usage->Admit(KeyUsage::Clock::now(), cost, &retry_after_s);
  switch (admission) {
    case KeyUsage::Admission::kTooManyInFlight:
      return ErrorResponse(429,
                           "this API key has " + std::to_string(limits.max_concurrent) +
                               " requests in flight, its limit (max_concurrent)",
                           "", "rate_limit_exceeded");
    case KeyUsage::Admission::kTooLarge:
      return ErrorResponse(400,
                           "the request may cost " + std::to_string(cost) + " tokens (" +
                               std::string(cost_what) + "); this API key allows " +
                               std::to_string(limits.tokens_per_minute) +
                               " per minute (tokens_per_minute)",
                           cost_param);
    case KeyUsage::Admission::kRateLimited:
    case KeyUsage::Admission::kTokenRateLimited: {
      const bool requests = admission == KeyUsage::Admission::kRateLimited;
      char rate[32];
      std::snprintf(
          rate, sizeof(rate), "%g",
          requests ? limits.requests_per_second : static_cast<double>(limits.tokens_per_minute));
      HttpResponse response =
          ErrorResponse(429,
                        std::string("this API key is limited to ") + rate +
                            (requests ? std::string(" requests per second (requests_per_second)")
                                      : " tokens per minute, " + std::string(cost_what) +
                                            " counted at admission (tokens_per_minute)"),
                        "", "rate_limit_exceeded");
      response.headers.emplace_back("Retry-After",
                                    std::to_string(static_cast<int64_t>(std::ceil(retry_after_s))));
      return response;
    }
    case KeyUsage::Admission::kAdmitted:
      *slot = std::make_shared<KeySlot>(principal.usage);
      break;
  }
  return std::nullopt;
}

}  // namespace pier::http
