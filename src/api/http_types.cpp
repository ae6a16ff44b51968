#include "api/http_types.h"

#include <nlohmann/json.hpp>

namespace pier::api {

std::optional<std::string_view> HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return std::string_view(value);
  }
  return std::nullopt;
}

namespace {

std::string_view DefaultErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json NullableString(std::string_view s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(s));
}

}  // namespace

std::string ErrorJson(int status, std::string_view message, std::string_view param,
                      std::string_view code, std::string_view type) {
  nlohmann::json error = {
      {"message", std::string(message)},
      {"type", std::string(type.empty() ? DefaultErrorType(status) : type)},
      {"param", NullableString(param)},
      // OpenAI's form: a string code or null, never a number.
      {"code", NullableString(code)},
  };
  // Messages may quote client bytes that are not UTF-8: replace rather than throw.
  return nlohmann::json({{"error", error}})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse ErrorResponse(int status, std::string_view message, std::string_view param,
                           std::string_view code, std::string_view type) {
  HttpResponse response;
  response.status = status;
  response.body = ErrorJson(status, message, param, code, type);
  // RFC 9110: a 401 names the scheme that would be accepted.
  if (status == 401) response.headers.emplace_back("WWW-Authenticate", "Bearer");
  return response;
}

void Router::Add(std::string method, std::string path, Handler handler) {
  routes_.push_back({std::move(method), std::move(path), false, std::move(handler)});
}

void Router::AddPrefix(std::string method, std::string prefix, Handler handler) {
  routes_.push_back({std::move(method), std::move(prefix), true, std::move(handler)});
}

void Router::SetBodyLimit(std::string prefix, BodyLimit limit) {
  body_limits_.emplace_back(std::move(prefix), std::move(limit));
}

std::optional<size_t> Router::BodyLimitFor(const HttpRequest& head) const {
  const BodyLimit* best = nullptr;
  size_t best_length = 0;
  for (const auto& [prefix, limit] : body_limits_) {
    if (head.path.starts_with(prefix) && (best == nullptr || prefix.size() > best_length)) {
      best = &limit;
      best_length = prefix.size();
    }
  }
  return best == nullptr ? std::nullopt : (*best)(head);
}

HttpResponse Router::Dispatch(const HttpRequest& request) const {
  // HEAD is GET without the body (RFC 9110): the server drops the body when it sends.
  if (request.method == "HEAD") {
    HttpRequest as_get = request;
    as_get.method = "GET";
    HttpResponse response = Dispatch(as_get);
    if (response.status == 405) {
      for (auto& [name, value] : response.headers) {
        if (name == "Allow") value += ", HEAD";
      }
    }
    return response;
  }
  const Route* best = nullptr;
  std::string allow;
  auto consider = [&](bool prefix) {
    size_t best_length = 0;
    for (const Route& route : routes_) {
      if (route.prefix != prefix) continue;
      const bool matches =
          prefix ? request.path.starts_with(route.path) : request.path == route.path;
      if (!matches) continue;
      if (route.method == request.method) {
        if (best == nullptr || route.path.size() > best_length) {
          best = &route;
          best_length = route.path.size();
        }
      } else if (allow.find(route.method) == std::string::npos) {
        allow += allow.empty() ? route.method : ", " + route.method;
        if (route.method == "GET") allow += ", HEAD";
      }
    }
  };
  consider(false);
  if (best == nullptr && allow.empty()) consider(true);
  if (best != nullptr) return best->handler(request);
  if (!allow.empty()) {
    HttpResponse response = ErrorResponse(405, "method " + request.method + " is not allowed on " +
                                                   request.path + " (allowed: " + allow + ")");
    response.headers.emplace_back("Allow", allow);
    return response;
  }
  return ErrorResponse(404, "no route for " + request.method + " " + request.path);
}

}  // namespace pier::api
