// A small blocking HTTP/1.1 client over POSIX sockets for the load generator.
//
// Each request opens its own TCP connection (sent with "Connection: close"), writes the
// request and reads the response until it is complete, with poll() bounding every wait by
// one deadline. Body bytes of a 2xx response go to a callback as they arrive, so the
// caller can timestamp streamed tokens. Only plain http:// is supported (no TLS).
//
// Thread-safety: the functions keep no state; any number of threads may call them at once,
// each with its own callbacks. An Endpoint is immutable after Resolve and may be shared.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace pier::loadgen {

using Clock = std::chrono::steady_clock;

// A parsed base URL: "http://host[:port][/prefix]".
struct BaseUrl {
  std::string host;  // without brackets for an IPv6 literal
  uint16_t port = 80;
  std::string path_prefix;  // "" or "/prefix" without a trailing '/'
  std::string host_header;  // what the Host header says: "host:port"
};

// Parses a base URL. https:// and other schemes are rejected with a message saying so.
Result<BaseUrl> ParseBaseUrl(std::string_view url);

// A base URL with its address resolved once, so requests skip name lookups.
struct Endpoint {
  BaseUrl url;
  sockaddr_storage address{};
  socklen_t address_length = 0;
};

Result<Endpoint> Resolve(const BaseUrl& url);

struct HttpRequest {
  std::string method = "GET";
  std::string target = "/";  // path and query, already including the base URL's prefix
  std::vector<std::pair<std::string, std::string>> headers;  // besides Host, Content-Length
  std::string body;
};

struct HttpResponse {
  int status_code = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  // The body when it was not handed to a callback: always for non-2xx responses (at most
  // kMaxErrorBodyBytes of it), and for 2xx responses when no callback was given.
  std::string body;
  Clock::time_point headers_time;  // when the status line and headers were complete

  static constexpr size_t kMaxErrorBodyBytes = 4096;
};

// Sends `request` on a new connection and reads the whole response. Body bytes of a 2xx
// response go to `on_body` as they arrive when it is set. Fails with kUnavailable when the
// connection is refused or the deadline passes, kIoError for socket errors and malformed
// responses; the message says which and where.
Result<HttpResponse> SendHttpRequest(const Endpoint& endpoint, const HttpRequest& request,
                                     Clock::time_point deadline,
                                     const std::function<void(std::string_view)>& on_body = {});

}  // namespace pier::loadgen
