// ApiKeys: who may call the API and as whom. Loaded from the YAML file of `--api-keys`:
//
//   keys:
//     - key: "sk-team-a-1"        # required, unique, non-empty
//       tenant: "team-a"          # required
//       max_priority: high        # optional ceiling: critical|high|normal|low (default critical)
//       requests_per_second: 5    # optional abuse limits (key_limits.h): requests_per_second,
//       max_concurrent: 4         #   max_concurrent, max_prompt_tokens, max_output_tokens
//       class_limits:             # optional, the same limits per priority class
//         critical: {max_concurrent: 1}
//
// A request presents its key as "Authorization: Bearer <key>" (what the openai client sends)
// or "X-API-Key: <key>". Without a keys file the API is open (tenant "default", no ceiling).
// Keys are compared in constant time per key and never logged.
//
// Thread-safety: immutable after Load/Parse; Authenticate may run on any thread.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api/auth/key_limits.h"
#include "api/http_types.h"
#include "common/status.h"
#include "engine/request.h"

namespace pier::api {

// Equality that reads every byte of `presented` whatever the contents, so the time taken does
// not tell how many leading bytes matched (the length of the stored secret may still show).
// For API keys and the metrics key.
bool ConstantTimeEquals(std::string_view presented, std::string_view stored);

// What a caller presented, from HTTP headers or gRPC metadata alike: the values of
// `authorization` and `x-api-key` as sent (nullopt: not sent).
struct Credentials {
  std::optional<std::string_view> authorization;
  std::optional<std::string_view> api_key;
};
// An HTTP request's credentials (its first `authorization` and `x-api-key` headers).
Credentials CredentialsOf(const HttpRequest& request);

// Why a caller is not let in: OpenAI's error `code` ("missing_api_key", "invalid_api_key")
// and the message (which never echoes the key). HTTP answers 401 with
// `WWW-Authenticate: Bearer` (ResponseOf); gRPC, UNAUTHENTICATED.
struct AuthRefusal {
  std::string message;
  std::string code;
};
HttpResponse ResponseOf(const AuthRefusal& refusal);

struct Principal {
  std::string tenant = "default";
  engine::Priority max_priority = engine::Priority::kCritical;  // highest class allowed
  // The tenant's fair-share weight (keys file `weight`, default 1; every key of one tenant
  // must give the same): its share of tokens within a class, against the other tenants'.
  double weight = 1;
  // The key's abuse limits and live usage, shared by all its requests; null: no limits.
  std::shared_ptr<KeyUsage> usage;
  // The key's limits for each priority class (class_limits; by Priority); null: none.
  std::array<std::shared_ptr<KeyUsage>, 4> class_usage = {};
};

// A size limit a request of some class is held to: the smaller of the key's and its class's
// (value 0: none), and the setting it comes from ("max_prompt_tokens",
// "class_limits.low.max_prompt_tokens") for the 400's message.
struct SizeLimit {
  int64_t value = 0;
  std::string setting;
};
SizeLimit MaxPromptTokens(const Principal& principal, engine::Priority priority);
SizeLimit MaxOutputTokens(const Principal& principal, engine::Priority priority);

class ApiKeys {
 public:
  // An empty set: every request is allowed as the default principal.
  ApiKeys() = default;
  // INVALID_ARGUMENT naming the file and the entry for bad YAML, a missing key or tenant, an
  // unknown priority, a weight that is not above 0 (or differs between keys of one tenant) or
  // a duplicate key; NOT_FOUND when the file cannot be read.
  [[nodiscard]] static Result<ApiKeys> Load(const std::string& path);
  [[nodiscard]] static Result<ApiKeys> Parse(std::string_view yaml_text,
                                             std::string_view source_name = "api keys");

  bool enabled() const { return !entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // Who presented `credentials`: the principal, or why not ("missing API key" / "invalid API
  // key"). The one authentication every route calls, over HTTP and gRPC.
  std::variant<Principal, AuthRefusal> Authenticate(const Credentials& credentials) const;
  // The same for an HTTP request, the refusal as its 401 response (ResponseOf).
  std::variant<Principal, HttpResponse> Authenticate(const HttpRequest& request) const;

 private:
  struct Entry {
    std::string key;
    Principal principal;
  };
  std::vector<Entry> entries_;
};

// Why a key's limits refuse a request: RESOURCE_EXHAUSTED (429, OpenAI code
// rate_limit_exceeded) for the concurrency or a rate, with `retry_after_s` for a rate (the
// Retry-After header); INVALID_ARGUMENT (400, `param` naming the field) when the request
// costs more than a minute's tokens, which no wait can help. Messages name the limit and where
// it is set.
struct KeyRefusal {
  Status status;
  std::string param;
  std::string code;
  std::optional<int64_t> retry_after_s = std::nullopt;  // the Retry-After header, if any
};
// The refusal in OpenAI's error shape (status from api/status_map.h, Retry-After when set).
HttpResponse ResponseOf(const KeyRefusal& refusal);

// Takes `cost` tokens and a slot from the principal's key limits and from those of class
// `priority` (none: nothing to take), from both or from neither. On success `*slot` holds the
// slots (null without limits) and nullopt is returned; otherwise why not (KeyRefusal).
// `cost_what` says what the cost counts ("prompt plus n x max_tokens"), `cost_param` is the
// 400's param.
std::optional<KeyRefusal> AdmitKeyRequest(const Principal& principal, engine::Priority priority,
                                          int64_t cost, std::string_view cost_what,
                                          std::string_view cost_param,
                                          std::shared_ptr<KeySlot>* slot);

}  // namespace pier::api
