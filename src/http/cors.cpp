#include "http/cors.h"

#include <algorithm>

namespace pier::http {
namespace {

constexpr std::string_view kAllowedMethods = "GET, HEAD, POST, OPTIONS";
constexpr std::string_view kDefaultAllowedHeaders = "Authorization, Content-Type, X-Priority";
constexpr std::string_view kExposedHeaders = "X-Priority-Applied, Retry-After";
constexpr std::string_view kMaxAgeSeconds = "600";

}  // namespace

bool CorsPolicy::AllowsAny() const {
  return std::find(origins.begin(), origins.end(), "*") != origins.end();
}

bool CorsPolicy::Allows(std::string_view origin) const {
  if (!enabled() || origin.empty()) return false;
  return AllowsAny() || std::find(origins.begin(), origins.end(), origin) != origins.end();
}

std::optional<HttpResponse> CorsPreflight(const CorsPolicy& policy, const HttpRequest& request) {
  if (!policy.enabled() || request.method != "OPTIONS") return std::nullopt;
  const std::optional<std::string_view> origin = request.Header("origin");
  const std::optional<std::string_view> method = request.Header("access-control-request-method");
  if (!origin.has_value() || !method.has_value()) return std::nullopt;
  if (!policy.Allows(*origin)) {
    return ErrorResponse(403, "origin " + std::string(*origin) +
                                  " is not allowed by this server's CORS policy (--cors-origins)");
  }
  HttpResponse response;
  response.status = 204;
  response.content_type.clear();
  response.headers.emplace_back("Access-Control-Allow-Origin",
                                policy.AllowsAny() ? "*" : std::string(*origin));
  response.headers.emplace_back("Access-Control-Allow-Methods", std::string(kAllowedMethods));
  // The headers the browser asks for (the values are the request's own header names).
  const std::optional<std::string_view> asked = request.Header("access-control-request-headers");
  response.headers.emplace_back("Access-Control-Allow-Headers",
                                asked.has_value() && !asked->empty()
                                    ? std::string(*asked)
                                    : std::string(kDefaultAllowedHeaders));
  response.headers.emplace_back("Access-Control-Max-Age", std::string(kMaxAgeSeconds));
  response.headers.emplace_back("Vary", "Origin");
  return response;
}

void AddCorsHeaders(const CorsPolicy& policy, const HttpRequest& request, HttpResponse* response) {
  const std::optional<std::string_view> origin = request.Header("origin");
  if (!origin.has_value() || !policy.Allows(*origin)) return;
  for (const auto& [name, value] : response->headers) {
    if (name == "Access-Control-Allow-Origin") return;  // a preflight answer has them
  }
  response->headers.emplace_back("Access-Control-Allow-Origin",
                                 policy.AllowsAny() ? "*" : std::string(*origin));
  response->headers.emplace_back("Access-Control-Expose-Headers", std::string(kExposedHeaders));
  response->headers.emplace_back("Vary", "Origin");
}

}  // namespace pier::http
