// CORS (the Fetch standard's cross-origin checks) for browser clients: which origins may call
// the API, the answer to a preflight request, and the headers every response carries for an
// allowed origin. Off unless origins are configured (`pier serve --cors-origins`).
//
// A preflight is `OPTIONS` with `Origin` and `Access-Control-Request-Method`: an allowed origin
// gets 204 with the methods and headers it may use (for 10 minutes); any other origin gets
// 403 naming it. Responses to an allowed origin carry Access-Control-Allow-Origin (the origin,
// or `*` when every origin is allowed), `Vary: Origin`, and expose Pier's own headers
// (X-Priority-Applied, Retry-After). Requests without `Origin` are untouched.
//
// Thread-safety: a CorsPolicy is immutable; the functions only read it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/routes.h"

namespace pier::http {

struct CorsPolicy {
  // Origins as browsers send them ("https://app.example", "http://localhost:3000"), or "*".
  std::vector<std::string> origins;

  bool enabled() const { return !origins.empty(); }
  bool AllowsAny() const;
  bool Allows(std::string_view origin) const;
};

// The answer to a preflight request, or nullopt when `request` is not one (or CORS is off).
std::optional<HttpResponse> CorsPreflight(const CorsPolicy& policy, const HttpRequest& request);

// Adds the CORS headers to `response` when the request's Origin is allowed.
void AddCorsHeaders(const CorsPolicy& policy, const HttpRequest& request, HttpResponse* response);

}  // namespace pier::http
