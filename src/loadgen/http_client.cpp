#include "loadgen/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "loadgen/response_parser.h"

namespace pier::loadgen {

using loadgen::HttpResponseParser;
namespace {

// Closes a socket when it goes out of scope.
class SocketFd {
 public:
  explicit SocketFd(int fd) : fd_(fd) {}
  ~SocketFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  SocketFd(const SocketFd&) = delete;
  SocketFd& operator=(const SocketFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string ErrnoText(int error) { return std::strerror(error); }

// Waits until `fd` is ready for `events` or the deadline passes.
Status WaitFor(int fd, short events, Clock::time_point deadline, std::string_view what) {
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return UnavailableError("timed out " + std::string(what));
    pollfd pfd{fd, events, 0};
    // Wake at least every second so a deadline is never overslept by a long poll.
    const int rc = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
    if (rc > 0) return Status::Ok();
    if (rc < 0 && errno != EINTR) return IoError("poll failed: " + ErrnoText(errno));
  }
}

std::string FormatRequest(const Endpoint& endpoint, const HttpRequest& request) {
  std::string out = request.method + " " + request.target + " HTTP/1.1\r\n";
  out += "Host: " + endpoint.url.host_header + "\r\n";
  out += "Connection: close\r\n";
  for (const auto& [name, value] : request.headers) out += name + ": " + value + "\r\n";
  if (!request.body.empty() || request.method == "POST") {
    out += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  out += "\r\n";
  out += request.body;
  return out;
}

}  // namespace

Result<BaseUrl> ParseBaseUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    if (url.substr(0, 8) == "https://") {
      return UnsupportedError("base URL '" + std::string(url) +
                              "': https is not supported; use http:// (run a TLS proxy in "
                              "front if the server only speaks https)");
    }
    return InvalidArgumentError("base URL '" + std::string(url) +
                                "' must start with http://, e.g. http://127.0.0.1:8080");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  BaseUrl out;
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return InvalidArgumentError("base URL '" + std::string(url) + "': unclosed '[' in host");
    }
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return InvalidArgumentError("base URL '" + std::string(url) + "': bad host");
      }
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) {
    return InvalidArgumentError("base URL '" + std::string(url) + "' has no host");
  }
  if (!port_text.empty() || authority.find(':') != std::string_view::npos) {
    unsigned port = 0;
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
        port == 0 || port > 65535) {
      return InvalidArgumentError("base URL '" + std::string(url) + "': bad port '" +
                                  std::string(port_text) + "'");
    }
    out.port = static_cast<uint16_t>(port);
  }
  out.path_prefix = std::string(path);
  out.host_header = std::string(authority);
  return out;
}

Result<Endpoint> Resolve(const BaseUrl& url) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url.port);
  const int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return UnavailableError("cannot resolve host '" + url.host + "': " + ::gai_strerror(rc));
  }
  Endpoint endpoint;
  endpoint.url = url;
  std::memcpy(&endpoint.address, found->ai_addr, found->ai_addrlen);
  endpoint.address_length = found->ai_addrlen;
  ::freeaddrinfo(found);
  return endpoint;
}

Result<HttpResponse> SendHttpRequest(const Endpoint& endpoint, const HttpRequest& request,
                                     Clock::time_point deadline,
                                     const std::function<void(std::string_view)>& on_body) {
  const auto* address = reinterpret_cast<const sockaddr*>(&endpoint.address);
  SocketFd fd(::socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return IoError("cannot create a socket: " + ErrnoText(errno));
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  const std::string where = endpoint.url.host_header;
  if (::connect(fd.get(), address, endpoint.address_length) != 0) {
    if (errno != EINPROGRESS) {
      return UnavailableError("cannot connect to " + where + ": " + ErrnoText(errno));
    }
    PIER_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, "connecting to " + where));
    int error = 0;
    socklen_t length = sizeof(error);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) return UnavailableError("cannot connect to " + where + ": " + ErrnoText(error));
  }

  const std::string wire = FormatRequest(endpoint, request);
  size_t sent = 0;
  while (sent < wire.size()) {
    const ssize_t n = ::send(fd.get(), wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      PIER_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, "sending to " + where));
    } else if (n < 0 && errno != EINTR) {
      return IoError("sending to " + where + " failed: " + ErrnoText(errno));
    }
  }

  HttpResponse response;
  HttpResponseParser* parser_ptr = nullptr;
  HttpResponseParser parser([&](std::string_view bytes) {
    const int code = parser_ptr->status_code();
    if (code >= 200 && code < 300 && on_body) {
      on_body(bytes);
    } else if (code >= 200 && code < 300) {
      response.body.append(bytes);
    } else if (response.body.size() < HttpResponse::kMaxErrorBodyBytes) {
      response.body.append(
          bytes.substr(0, HttpResponse::kMaxErrorBodyBytes - response.body.size()));
    }
  });
  parser_ptr = &parser;
  char buffer[16384];
  while (!parser.complete()) {
    const ssize_t n = ::recv(fd.get(), buffer, sizeof(buffer), 0);
    if (n > 0) {
      const bool had_headers = parser.headers_done();
      PIER_RETURN_IF_ERROR(parser.Feed(std::string_view(buffer, static_cast<size_t>(n))));
      if (!had_headers && parser.headers_done()) response.headers_time = Clock::now();
    } else if (n == 0) {
      PIER_RETURN_IF_ERROR(parser.Finish());
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      PIER_RETURN_IF_ERROR(WaitFor(fd.get(), POLLIN, deadline, "waiting for " + where));
    } else if (errno != EINTR) {
      return IoError("reading from " + where + " failed: " + ErrnoText(errno));
    }
  }
  response.status_code = parser.status_code();
  response.headers = parser.headers();
  return response;
}

}  // namespace pier::loadgen
