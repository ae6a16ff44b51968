#include "api/admin/admin_guard.h"

#include <arpa/inet.h>

#include <string>

#include "common/ascii.h"

namespace pier::api {
namespace {

// The host part of a Host header: "[::1]:8080" -> "::1", "a.b:80" -> "a.b".
std::string_view HostName(std::string_view authority) {
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    return close == std::string_view::npos ? authority : authority.substr(1, close - 1);
  }
  const size_t colon = authority.rfind(':');
  return colon == std::string_view::npos ? authority : authority.substr(0, colon);
}

// "http://127.0.0.1:8080" -> "127.0.0.1:8080"; nullopt for "null" or a malformed origin.
std::optional<std::string_view> OriginAuthority(std::string_view origin) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (origin.starts_with(scheme)) {
      std::string_view rest = origin.substr(scheme.size());
      if (rest.empty() || rest.find('/') != std::string_view::npos) return std::nullopt;
      return rest;
    }
  }
  return std::nullopt;
}

HttpResponse Refuse(const std::string& message) {
  return ErrorResponse(403, message, "", "admin_forbidden");
}

}  // namespace

bool FromLoopback(const HttpRequest& request) {
  const std::string& a = request.remote_address;
  return a.starts_with("127.") || a.starts_with("[::1]") || a.starts_with("::1");
}

bool IsIpLiteralOrLocalhost(std::string_view host) {
  const std::string name = AsciiLower(HostName(host));
  if (name == "localhost") return true;
  unsigned char address[16];
  return ::inet_pton(AF_INET, name.c_str(), address) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), address) == 1;
}

std::optional<HttpResponse> CheckAdminOrigin(const HttpRequest& request, bool keyless) {
  const std::string_view host = request.Header("host").value_or("");
  if (keyless && !host.empty() && !IsIpLiteralOrLocalhost(host)) {
    return Refuse(
        "the admin routes without --admin-key answer only requests addressed to an IP "
        "address or localhost (Host: " +
        std::string(host) +
        "): a name could be a DNS-rebinding attack; start pier serve with --admin-key "
        "to use another name");
  }
  if (request.method == "POST") {
    if (const std::optional<std::string_view> origin = request.Header("origin")) {
      const std::optional<std::string_view> authority = OriginAuthority(*origin);
      if (!authority.has_value() || AsciiLower(*authority) != AsciiLower(host)) {
        return Refuse("cross-origin admin request refused (Origin " + std::string(*origin) +
                      " is not this server, " + std::string(host) + ")");
      }
    }
  }
  return std::nullopt;
}

}  // namespace pier::api
