#include "api/auth/api_keys.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
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

#include "api/status_map.h"
#include "common/ascii.h"
#include "common/yaml.h"

namespace pier::api {
namespace {

// The key a request presents: "Authorization: Bearer <key>" (scheme case-insensitive), else
// "X-API-Key: <key>"; nullopt when neither header is there.
std::optional<std::string_view> PresentedKey(const Credentials& credentials) {
  if (std::optional<std::string_view> auth = credentials.authorization) {
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
  if (std::optional<std::string_view> key = credentials.api_key) return TrimSpaceAndTab(*key);
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

constexpr const char* kLimitFields[] = {"requests_per_second", "tokens_per_minute",
                                        "max_concurrent", "max_prompt_tokens", "max_output_tokens"};

bool IsLimitField(const std::string& name) {
  for (const char* f : kLimitFields) {
    if (name == f) return true;
  }
  return false;
}

// The limit fields of `node` (a key's entry, or one class under class_limits).
Result<KeyLimits> ParseLimits(const YAML::Node& node, const std::string& where) {
  KeyLimits limits;
  PIER_ASSIGN_OR_RETURN(limits.requests_per_second,
                        PositiveNumber(node, "requests_per_second", where));
  for (auto [name, out] : {std::pair{"tokens_per_minute", &limits.tokens_per_minute},
                           std::pair{"max_concurrent", &limits.max_concurrent},
                           std::pair{"max_prompt_tokens", &limits.max_prompt_tokens},
                           std::pair{"max_output_tokens", &limits.max_output_tokens}}) {
    PIER_ASSIGN_OR_RETURN(*out, PositiveInteger(node, name, where));
  }
  return limits;
}

// A class's limit above the key's own could never apply: the configuration is wrong.
Status CheckClassWithinKey(const KeyLimits& key, const KeyLimits& cls, const std::string& where,
                           std::string_view class_name) {
  const struct {
    const char* name;
    double key;
    double cls;
  } pairs[] = {
      {"requests_per_second", key.requests_per_second, cls.requests_per_second},
      {"tokens_per_minute", static_cast<double>(key.tokens_per_minute),
       static_cast<double>(cls.tokens_per_minute)},
      {"max_concurrent", static_cast<double>(key.max_concurrent),
       static_cast<double>(cls.max_concurrent)},
      {"max_prompt_tokens", static_cast<double>(key.max_prompt_tokens),
       static_cast<double>(cls.max_prompt_tokens)},
      {"max_output_tokens", static_cast<double>(key.max_output_tokens),
       static_cast<double>(cls.max_output_tokens)},
  };
  for (const auto& p : pairs) {
    if (p.key > 0 && p.cls > p.key) {
      return InvalidArgumentError(where + ": class_limits." + std::string(class_name) + "." +
                                  p.name + " (" + FormatWeight(p.cls) + ") is above the key's " +
                                  p.name + " (" + FormatWeight(p.key) +
                                  "): a class's limit must be at most the key's");
    }
  }
  return Status::Ok();
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
          name != "class_limits" && !IsLimitField(name)) {
        return InvalidArgumentError(where + ": unknown field \"" + name +
                                    "\" (known: key, tenant, max_priority, weight, "
                                    "requests_per_second, "
                                    "tokens_per_minute, max_concurrent, max_prompt_tokens, "
                                    "max_output_tokens, class_limits)");
      }
      if (name == "class_limits") continue;  // a map, read below
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
    PIER_ASSIGN_OR_RETURN(const KeyLimits limits, ParseLimits(entry, where));
    if (limits.any()) parsed.principal.usage = std::make_shared<KeyUsage>(limits);
    if (const YAML::Node classes = entry["class_limits"]) {
      if (!classes.IsMap()) {
        return InvalidArgumentError(where +
                                    ": class_limits must be a map of class names (critical, high, "
                                    "normal, low) to limits");
      }
      for (const auto& item : classes) {
        const std::string class_name = item.first.Scalar();
        const std::string at = where + ": class_limits." + class_name;
        Result<engine::Priority> priority = engine::ParsePriority(class_name);
        if (!priority.ok() || class_name.empty() || std::isdigit(class_name[0])) {
          return InvalidArgumentError(at + ": unknown class (known: critical, high, normal, low)");
        }
        if (!item.second.IsMap()) {
          return InvalidArgumentError(at + ": expected a map of limits");
        }
        for (const auto& field : item.second) {
          const std::string name = field.first.Scalar();
          if (!IsLimitField(name)) {
            return InvalidArgumentError(at + ": unknown limit \"" + name +
                                        "\" (known: requests_per_second, tokens_per_minute, "
                                        "max_concurrent, max_prompt_tokens, max_output_tokens)");
          }
          if (!field.second.IsScalar()) {
            return InvalidArgumentError(at + ": \"" + name + "\" must be a single value");
          }
        }
        PIER_ASSIGN_OR_RETURN(const KeyLimits class_limits, ParseLimits(item.second, at));
        PIER_RETURN_IF_ERROR(CheckClassWithinKey(limits, class_limits, where, class_name));
        auto& slot = parsed.principal.class_usage[static_cast<size_t>(*priority)];
        if (slot != nullptr) return InvalidArgumentError(at + ": given twice");
        if (class_limits.any()) slot = std::make_shared<KeyUsage>(class_limits);
      }
    }
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

Credentials CredentialsOf(const HttpRequest& request) {
  return Credentials{request.Header("authorization"), request.Header("x-api-key")};
}

HttpResponse ResponseOf(const AuthRefusal& refusal) {
  return ErrorResponse(401, refusal.message, "", refusal.code);
}

std::variant<Principal, HttpResponse> ApiKeys::Authenticate(const HttpRequest& request) const {
  auto auth = Authenticate(CredentialsOf(request));
  if (auto* refused = std::get_if<AuthRefusal>(&auth)) return ResponseOf(*refused);
  return std::get<Principal>(std::move(auth));
}

std::variant<Principal, AuthRefusal> ApiKeys::Authenticate(const Credentials& credentials) const {
  if (entries_.empty()) return Principal{};
  const std::optional<std::string_view> presented = PresentedKey(credentials);
  if (!presented.has_value() || presented->empty()) {
    return AuthRefusal{
        "missing API key: send it as \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\"",
        "missing_api_key"};
  }
  // Every key is compared (no early exit), each in constant time.
  const Entry* match = nullptr;
  for (const Entry& entry : entries_) {
    if (ConstantTimeEquals(*presented, entry.key) && match == nullptr) match = &entry;
  }
  if (match == nullptr) return AuthRefusal{"invalid API key", "invalid_api_key"};
  return match->principal;
}

}  // namespace pier::api

namespace pier::api {

namespace {

// The smaller non-zero of the key's and its class's limit, named by where it is set.
template <typename Field>
SizeLimit Tightest(const Principal& principal, engine::Priority priority, const char* name,
                   Field field) {
  SizeLimit tightest;
  if (principal.usage != nullptr && field(principal.usage->limits()) > 0) {
    tightest = {.value = field(principal.usage->limits()), .setting = name};
  }
  if (const auto& c = principal.class_usage[static_cast<size_t>(priority)];
      c != nullptr && field(c->limits()) > 0 &&
      (tightest.value == 0 || field(c->limits()) < tightest.value)) {
    tightest = {
        .value = field(c->limits()),
        .setting = "class_limits." + std::string(engine::PriorityName(priority)) + "." + name};
  }
  return tightest;
}

}  // namespace

SizeLimit MaxPromptTokens(const Principal& principal, engine::Priority priority) {
  return Tightest(principal, priority, "max_prompt_tokens",
                  [](const KeyLimits& l) { return l.max_prompt_tokens; });
}

SizeLimit MaxOutputTokens(const Principal& principal, engine::Priority priority) {
  return Tightest(principal, priority, "max_output_tokens",
                  [](const KeyLimits& l) { return l.max_output_tokens; });
}

HttpResponse ResponseOf(const KeyRefusal& refusal) {
  HttpResponse response = ErrorResponse(HttpStatusOf(refusal.status), refusal.status.message(),
                                        refusal.param, refusal.code);
  if (refusal.retry_after_s.has_value()) {
    response.headers.emplace_back("Retry-After", std::to_string(*refusal.retry_after_s));
  }
  return response;
}

std::optional<KeyRefusal> AdmitKeyRequest(const Principal& principal, engine::Priority priority,
                                          int64_t cost, std::string_view cost_what,
                                          std::string_view cost_param,
                                          std::shared_ptr<KeySlot>* slot) {
  slot->reset();
  // The key's limits, then its class's; each refusal undoes what the others took.
  std::vector<std::pair<std::shared_ptr<KeyUsage>, std::string>> usages;  // (usage, which)
  if (principal.usage != nullptr) usages.emplace_back(principal.usage, "");
  if (const auto& c = principal.class_usage[static_cast<size_t>(priority)]; c != nullptr) {
    usages.emplace_back(c, std::string(engine::PriorityName(priority)));
  }
  if (usages.empty()) return std::nullopt;
  std::vector<std::shared_ptr<KeyUsage>> taken;
  for (const auto& [usage, class_name] : usages) {
    double retry_after_s = 1;
    const KeyUsage::Admission admission =
        usage->Admit(KeyUsage::Clock::now(), cost, &retry_after_s);
    if (admission == KeyUsage::Admission::kAdmitted) {
      taken.push_back(usage);
      continue;
    }
    for (const auto& t : taken) t->Refund(cost);
    const KeyLimits& limits = usage->limits();
    // "this API key" / "class critical of this API key"; the setting by its path.
    const std::string who =
        class_name.empty() ? "this API key" : "class " + class_name + " of this API key";
    auto setting = [&](const char* name) {
      return class_name.empty() ? std::string(name) : "class_limits." + class_name + "." + name;
    };
    switch (admission) {
      case KeyUsage::Admission::kTooManyInFlight:
        return KeyRefusal{ResourceExhaustedError(
                              who + " has " + std::to_string(limits.max_concurrent) +
                              " requests in flight, its limit (" + setting("max_concurrent") + ")"),
                          "", "rate_limit_exceeded", std::nullopt};
      case KeyUsage::Admission::kTooLarge:
        return KeyRefusal{
            InvalidArgumentError("the request may cost " + std::to_string(cost) + " tokens (" +
                                 std::string(cost_what) + "); " + who + " allows " +
                                 std::to_string(limits.tokens_per_minute) + " per minute (" +
                                 setting("tokens_per_minute") + ")"),
            std::string(cost_param), ""};
      case KeyUsage::Admission::kRateLimited:
      case KeyUsage::Admission::kTokenRateLimited: {
        const bool requests = admission == KeyUsage::Admission::kRateLimited;
        char rate[32];
        std::snprintf(
            rate, sizeof(rate), "%g",
            requests ? limits.requests_per_second : static_cast<double>(limits.tokens_per_minute));
        return KeyRefusal{
            ResourceExhaustedError(
                who + " is limited to " + rate +
                (requests ? " requests per second (" + setting("requests_per_second") + ")"
                          : " tokens per minute, " + std::string(cost_what) +
                                " counted at admission (" + setting("tokens_per_minute") + ")")),
            "", "rate_limit_exceeded", static_cast<int64_t>(std::ceil(retry_after_s))};
      }
      case KeyUsage::Admission::kAdmitted:
        break;
    }
  }
  *slot = std::make_shared<KeySlot>(std::move(taken));
  return std::nullopt;
}

}  // namespace pier::api
