// One HTTP/1.1 connection: read a request, dispatch it, send the response (plain or from a
// ResponseStream), repeat while keep-alive. See server_connection.h and server.h.
#include "http/server_connection.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

#include "common/ascii.h"
#include "http/server_wire.h"

namespace pier::http::server_internal {

namespace {

namespace bhttp = beast::http;
using boost::system::error_code;

constexpr size_t kReadSize = 4096;
constexpr size_t kBodyReadSize = size_t{64} << 10;  // Beast's largest single read
// After an error response or "Connection: close": how long and how much of the client's
// remaining input is read and discarded before the socket closes (see LingeringClose).
constexpr auto kLingerTime = std::chrono::milliseconds(1000);
constexpr size_t kLingerMaxBytes = size_t{1} << 20;
// At shutdown, how long the last bytes of a cancelled response may take to write.
constexpr auto kShutdownWriteTime = std::chrono::milliseconds(1000);
int64_t Millis(std::chrono::milliseconds d) { return static_cast<int64_t>(d.count()); }

void FillHead(const bhttp::request<bhttp::string_body>& message, HttpRequest& request) {
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  const size_t question = request.target.find('?');
  request.path = request.target.substr(0, question);
  request.query = question == std::string::npos ? "" : request.target.substr(question + 1);
  for (const auto& field : message) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    request.headers.emplace_back(std::move(name),
                                 std::string(TrimSpaceAndTab(View(field.value()))));
  }
}

// What a request cut short by the client's end of input lacked, for the 400 that says so.
std::string TruncatedRequestMessage(const bhttp::request_parser<bhttp::string_body>& parser,
                                    bool head_done) {
  constexpr std::string_view kWhy =
      ": the client closed its side of the connection before the request was complete";
  if (!head_done) return "the request head ended before its blank line" + std::string(kWhy);
  const auto length = parser.content_length();  // boost::optional
  const auto remaining = parser.content_length_remaining();
  if (length && remaining) {
    return "the request body ended after " + std::to_string(*length - *remaining) + " of its " +
           std::to_string(*length) + " bytes (Content-Length)" + std::string(kWhy);
  }
  return "the chunked request body ended before its last chunk" + std::string(kWhy);
}

// RFC 9112 framing that a proxy in front of the server could read differently from it, and
// headers that must not repeat: the status and message to refuse the request with, or 0.
std::pair<int, std::string> FramingError(const bhttp::request<bhttp::string_body>& message) {
  int transfer_encodings = 0, content_lengths = 0, hosts = 0, authorizations = 0;
  std::string coding;
  for (const auto& field : message) {
    const std::string_view name = View(field.name_string());
    if (EqualsIgnoreAsciiCase(name, "transfer-encoding")) {
      ++transfer_encodings;
      coding += (coding.empty() ? "" : ", ") + std::string(TrimSpaceAndTab(View(field.value())));
    } else if (EqualsIgnoreAsciiCase(name, "content-length")) {
      ++content_lengths;
    } else if (EqualsIgnoreAsciiCase(name, "host")) {
      ++hosts;
    } else if (EqualsIgnoreAsciiCase(name, "authorization")) {
      ++authorizations;
    }
  }
  if (transfer_encodings > 0 && content_lengths > 0) {
    return {400, "a request must not carry both Transfer-Encoding and Content-Length"};
  }
  if (transfer_encodings > 0 && !EqualsIgnoreAsciiCase(coding, "chunked")) {
    return {501, "Transfer-Encoding \"" + coding + "\" is not supported (only chunked)"};
  }
  if (message.version() >= 11 && hosts == 0)
    return {400, "an HTTP/1.1 request needs a Host header"};
  if (hosts > 1) return {400, "more than one Host header"};
  if (authorizations > 1) return {400, "more than one Authorization header"};
  return {0, ""};
}

std::string FormatEndpoint(const tcp::endpoint& endpoint) {
  const std::string address = endpoint.address().to_string();
  const std::string port = std::to_string(endpoint.port());
  return endpoint.address().is_v6() ? "[" + address + "]:" + port : address + ":" + port;
}

}  // namespace

// Header text from handlers must not be able to split the response.
std::string Sanitize(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  return out;
}

std::string_view View(beast::string_view s) { return std::string_view(s.data(), s.size()); }

bool BodylessStatus(int status) { return status < 200 || status == 204 || status == 304; }

std::string ResponseHead(int status, const HttpResponse& response, bool keep_alive) {
  std::string_view reason = View(bhttp::obsolete_reason(static_cast<bhttp::status>(status)));
  if (reason.empty() || reason.front() == '<') reason = "Unknown";
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) + "\r\n";
  if (!response.content_type.empty() && !BodylessStatus(status)) {
    head += "Content-Type: " + Sanitize(response.content_type) + "\r\n";
  }
  for (const auto& [name, value] : response.headers) {
    // The server owns framing and connection management.
    if (EqualsIgnoreAsciiCase(name, "content-length") ||
        EqualsIgnoreAsciiCase(name, "transfer-encoding") ||
        EqualsIgnoreAsciiCase(name, "connection")) {
      continue;
    }
    head += Sanitize(name) + ": " + Sanitize(value) + "\r\n";
  }
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  return head;
}

std::string ChunkFrame(std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string frame;
  frame.reserve(static_cast<size_t>(n) + data.size() + 2);
  frame.append(size, static_cast<size_t>(n));
  frame.append(data);
  frame.append("\r\n");
  return frame;
}

Connection::Connection(std::shared_ptr<ServerState> state, tcp::socket socket)
    : state_(std::move(state)),
      executor_(socket.get_executor()),
      socket_(std::move(socket)),
      deadline_timer_(executor_),
      wake_timer_(executor_),
      hangup_timer_(executor_) {
  error_code ec;
  const tcp::endpoint endpoint = socket_.remote_endpoint(ec);
  remote_ = ec ? "unknown" : FormatEndpoint(endpoint);
  socket_.set_option(tcp::no_delay(true), ec);  // SSE chunks must not wait for Nagle
  // A bounded send buffer: a client that stops reading blocks our writes after this many
  // bytes (plus its own receive window), so write_timeout and the stream backlog act soon,
  // not after the kernel's multi-megabyte autotuned buffer has filled.
  if (const size_t bytes = state_->options.send_buffer_bytes; bytes > 0) {
    socket_.set_option(asio::socket_base::send_buffer_size(static_cast<int>(
                           std::min<size_t>(bytes, std::numeric_limits<int>::max()))),
                       ec);
  }
}

Connection::~Connection() { DisableWake(); }

void Connection::DisableWake() {
  if (wake_signal_ == nullptr) return;
  MutexLock lock(wake_signal_->mu);
  wake_signal_->post = nullptr;
}

void Connection::Close() {
  asio::post(executor_, [self = shared_from_this()] {
    if (self->stream_ != nullptr && self->abort_ == Abort::kNone) {
      // The coroutine ends the response itself: the stream's ending (SSE: an error event and
      // [DONE]) and the chunked terminator, or a complete 503; all within kShutdownWriteTime.
      self->abort_ = Abort::kShutdown;
      try {
        self->shutdown_ending_ = self->stream_->CancelWithEnding("server shutting down");
      } catch (const std::exception& e) {
        spdlog::warn("HTTP {}: ResponseStream::CancelWithEnding threw: {}", self->remote_,
                     e.what());
      }
      spdlog::debug("HTTP {}: server shutting down; stream cancelled", self->remote_);
      self->ArmDeadline(Clock::now() + kShutdownWriteTime);
      self->wake_timer_.cancel();
      return;
    }
    // A plain response being written may finish (its write has a deadline); the connection
    // closes after it.
    if (self->writing_) return;
    self->CloseSocket();
  });
}

asio::awaitable<void> Connection::Run(std::shared_ptr<Connection> self) {
  // Unregisters also when the frame is destroyed unfinished (io_context teardown).
  struct Unregister {
    Connection* connection;
    ~Unregister() {
      connection->CloseSocket();
      connection->state_->Unregister(connection);
    }
  } unregister{self.get()};
  try {
    co_await self->Serve();
  } catch (const std::exception& e) {
    spdlog::warn("HTTP connection {} failed: {}", self->remote_, e.what());
  }
}

asio::awaitable<void> Connection::RunRefused(std::shared_ptr<Connection> self) {
  HttpRequest request;
  request.remote_address = self->remote_;
  const int64_t limit = static_cast<int64_t>(self->state_->options.max_connections);
  HttpResponse response =
      ErrorResponse(503, "the server has reached its limit of " + std::to_string(limit) +
                             " open connections; retry later");
  response.headers.emplace_back("Retry-After", "1");
  try {
    co_await self->SendPlain(request, response, /*keep_alive=*/false);
    co_await self->LingeringClose();
  } catch (const std::exception& e) {
    spdlog::warn("HTTP connection {} failed: {}", self->remote_, e.what());
  }
  self->CloseSocket();
  self->state_->ReportResponse(request, 503);
}

asio::awaitable<void> Connection::Serve() {
  HttpRequest request;
  bool keep_alive = false;
  for (bool first = true; !closed_; first = false) {
    const ReadResult read = co_await ReadRequest(first, request, keep_alive);
    if (read != ReadResult::kRequest) co_return;
    bool keep_open = false;
    {
      // Shutdown's grace period waits for this count; the lingering close below is not part
      // of the response.
      struct InFlight {
        ServerState* state;
        explicit InFlight(ServerState* s) : state(s) { state->BeginRequest(); }
        ~InFlight() { state->EndRequest(); }
      } in_flight(state_.get());
      const Outcome outcome = co_await Respond(request, keep_alive);
      keep_open = outcome.keep_open;
    }
    if (!keep_open) {
      co_await LingeringClose();
      co_return;
    }
  }
}

asio::awaitable<Connection::ReadResult> Connection::ReadRequest(bool first, HttpRequest& request,
                                                                bool& keep_alive) {
  const HttpServerOptions& options = state_->options;
  error_code ec;
  request = HttpRequest{};
  request.remote_address = remote_;
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(
      std::min<size_t>(options.max_header_bytes, std::numeric_limits<uint32_t>::max())));
  // The body's limit depends on the route (Router::BodyLimitFor), known once the head is: the
  // head is read without one, then Content-Length (or a chunked body as it grows) is held to
  // the route's limit before a byte of the body is read.
  size_t body_limit = options.max_body_bytes;
  parser_->body_limit(std::numeric_limits<uint64_t>::max());

  // Wait for the first byte: a fresh connection gets header_timeout, a keep-alive one
  // idle_timeout; either closes silently when nothing comes.
  if (buffer_.size() == 0) {
    ArmDeadline(Clock::now() + (first ? options.header_timeout : options.idle_timeout));
    const size_t n = co_await socket_.async_read_some(buffer_.prepare(kReadSize), Await(ec));
    DisarmDeadline();
    if (ec) {
      if (timed_out_) {
        ++state_->timeouts;
        spdlog::debug("HTTP {}: closing idle connection", remote_);
      }
      co_return ReadResult::kClosed;
    }
    buffer_.commit(n);
  }

  const Clock::time_point start = Clock::now();
  ArmDeadline(start + options.header_timeout);
  co_await bhttp::async_read_header(socket_, buffer_, *parser_, Await(ec));
  DisarmDeadline();
  const bool head_done = !ec;
  if (head_done) FillHead(parser_->get(), request);
  if (head_done) {
    const auto& message = parser_->get();
    http11_ = message.version() >= 11;
    auto [framing_status, framing_message] = FramingError(message);
    if (framing_status != 0) {
      const ReadResult rejected = co_await Reject(request, framing_status, framing_message);
      co_return rejected;
    }
    body_limit = state_->router->BodyLimitFor(request).value_or(options.max_body_bytes);
    parser_->body_limit(body_limit);
    if (const auto length = parser_->content_length(); length && *length > body_limit) {
      ec = bhttp::error::body_limit;
    } else if (!parser_->is_done()) {
      // Clients such as curl wait for this before sending a large body.
      if (EqualsIgnoreAsciiCase(View(message[bhttp::field::expect]), "100-continue")) {
        const bool written = co_await Write("HTTP/1.1 100 Continue\r\n\r\n");
        if (!written) co_return ReadResult::kClosed;
      }
      // Beast reads only into the buffer's free capacity (at most 64 KiB a read): from the
      // 4 KiB the head needed, a 600 KB tensor took 150 reads and as many waits (0.5 ms over
      // loopback). A large body gets room for 64 KiB reads; the room is given back below.
      if (const auto length = parser_->content_length(); length && *length > kReadSize) {
        buffer_.reserve(kBodyReadSize);
      }
      ArmDeadline(start + options.request_timeout);
      co_await bhttp::async_read(socket_, buffer_, *parser_, Await(ec));
      DisarmDeadline();
      // An idle keep-alive connection holds no more than a head's room.
      if (buffer_.capacity() > kReadSize) buffer_.shrink_to_fit();
    }
  }
  if (!ec) {
    keep_alive = parser_->get().keep_alive();
    request.body = std::move(parser_->get().body());
    co_return ReadResult::kRequest;
  }

  // Note: g++ 12 mishandles non-trivial temporaries inside co_await expressions (double
  // destruction), so every argument below is a named local.
  int status = 0;
  std::string message;
  if (timed_out_) {
    ++state_->timeouts;
    status = 408;
    message = head_done ? "request body not received within " +
                              std::to_string(Millis(options.request_timeout)) + " ms"
                        : "request head not received within " +
                              std::to_string(Millis(options.header_timeout)) + " ms";
  } else if (ec == bhttp::error::body_limit) {
    status = 413;
    const auto length = parser_->content_length();
    message = "request body exceeds the limit of " + std::to_string(body_limit) + " bytes";
    if (length) {
      message = "request body of " + std::to_string(*length) + " bytes exceeds the limit of " +
                std::to_string(body_limit) + " bytes";
    }
  } else if (ec == bhttp::error::header_limit) {
    status = 431;
    message =
        "request head exceeds the limit of " + std::to_string(options.max_header_bytes) + " bytes";
  } else if (ec == bhttp::error::partial_message) {
    // The client ended its side inside the request. After a half-close it still reads: it is
    // told what was missing. (A client that closed entirely resets this write; no harm.)
    status = 400;
    message = TruncatedRequestMessage(*parser_, head_done);
  } else if (ec != bhttp::error::end_of_stream &&
             ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category()) {
    status = 400;
    message = "malformed HTTP request: " + ec.message();
  }
  // Otherwise the client closed (between requests, before a byte of the next one) or the
  // socket failed: nobody to answer.
  if (status == 0) co_return ReadResult::kClosed;
  const ReadResult result = co_await Reject(request, status, message);
  co_return result;
}

asio::awaitable<Connection::ReadResult> Connection::Reject(const HttpRequest& request, int status,
                                                           std::string_view message) {
  spdlog::debug("HTTP {}: {} {}", remote_, status, message);
  const HttpResponse response = ErrorResponse(status, message);
  co_await SendPlain(request, response, /*keep_alive=*/false);
  state_->ReportResponse(request, status);
  co_await LingeringClose();
  co_return ReadResult::kRejected;
}

asio::awaitable<Connection::Outcome> Connection::Respond(const HttpRequest& request,
                                                         bool keep_alive) {
  ++state_->requests;
  const Clock::time_point start = Clock::now();
  HttpResponse response;
  const auto& draining = state_->options.paths_served_while_draining;
  if (state_->shutting_down &&
      std::find(draining.begin(), draining.end(), request.path) == draining.end()) {
    response = ErrorResponse(503, "server is shutting down");
  } else if (std::optional<HttpResponse> preflight = CorsPreflight(state_->cors, request)) {
    response = std::move(*preflight);
  } else {
    try {
      response = state_->router->Dispatch(request);
    } catch (const std::exception& e) {
      spdlog::warn("HTTP {} {} {}: handler threw: {}", remote_, request.method, request.target,
                   e.what());
      response = ErrorResponse(500, "internal server error");
    } catch (...) {
      spdlog::warn("HTTP {} {} {}: handler threw a non-standard exception", remote_, request.method,
                   request.target);
      response = ErrorResponse(500, "internal server error");
    }
  }
  if (state_->shutting_down) keep_alive = false;
  AddCorsHeaders(state_->cors, request, &response);

  Outcome outcome;
  bool answered = false;
  std::string model = response.model;
  // A deferred response resolves to another response (at most a few hops: a deferral that
  // defers again, e.g. a load then a retry).
  for (int hops = 0; response.deferred != nullptr; ++hops) {
    if (hops == 8) {
      response = ErrorResponse(500, "internal server error: a response deferred too often");
      break;
    }
    std::optional<HttpResponse> resolved =
        co_await AwaitDeferred(request, std::move(response.deferred), &outcome);
    if (!resolved.has_value()) {
      answered = true;  // client gone or shutdown: SendStream already did what it could
      break;
    }
    response = std::move(*resolved);
    if (!response.model.empty()) model = response.model;
    if (state_->shutting_down) keep_alive = false;
    AddCorsHeaders(state_->cors, request, &response);
  }
  if (answered) {
    // nothing more to send
  } else if (response.stream != nullptr) {
    outcome = co_await SendStream(request, response, keep_alive);
  } else {
    outcome = co_await SendPlain(request, response, keep_alive);
    if (response.status == 429 || response.status == 503) state_->ReportRefusal(request, response);
  }
  state_->ReportResponse(request, outcome.status, model);
  spdlog::debug("HTTP {} \"{} {}\" {} {:.1f} ms", remote_, request.method, request.target,
                outcome.status,
                std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  co_return outcome;
}

asio::awaitable<Connection::Outcome> Connection::SendPlain(const HttpRequest& request,
                                                           const HttpResponse& response,
                                                           bool keep_alive) {
  std::string out = ResponseHead(response.status, response, keep_alive);
  const bool bodyless = BodylessStatus(response.status);
  if (!bodyless) out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  out += "\r\n";
  if (!bodyless && request.method != "HEAD") out += response.body;
  const bool ok = co_await Write(out);
  co_return Outcome{ok && keep_alive, response.status};
}

asio::awaitable<bool> Connection::Write(std::string_view data) {
  if (closed_) co_return false;
  error_code ec;
  std::chrono::milliseconds timeout = state_->options.write_timeout;
  if (abort_ == Abort::kShutdown) timeout = std::min(timeout, kShutdownWriteTime);
  ArmDeadline(Clock::now() + timeout);
  writing_ = true;
  co_await asio::async_write(socket_, asio::buffer(data.data(), data.size()), Await(ec));
  writing_ = false;
  DisarmDeadline();
  if (!ec) co_return true;
  if (stream_ != nullptr && abort_ == Abort::kNone) {
    if (timed_out_) {
      AbortStream(Abort::kSlowReader, "client reads too slowly: a write did not finish within " +
                                          std::to_string(Millis(state_->options.write_timeout)) +
                                          " ms");
    } else {
      AbortStream(Abort::kClientGone, "client disconnected");
    }
  } else if (timed_out_) {
    spdlog::debug("HTTP {}: write timed out", remote_);
  }
  CloseSocket();
  co_return false;
}

asio::awaitable<void> Connection::LingeringClose() {
  if (closed_) co_return;
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  ArmDeadline(Clock::now() + kLingerTime);
  std::array<char, kReadSize> scratch;
  for (size_t total = 0; total < kLingerMaxBytes;) {
    const size_t n = co_await socket_.async_read_some(asio::buffer(scratch), Await(ec));
    if (ec) break;
    total += n;
  }
  DisarmDeadline();
  CloseSocket();
}

void Connection::ArmDeadline(Clock::time_point deadline) {
  timed_out_ = false;
  const uint64_t generation = ++deadline_generation_;
  deadline_timer_.expires_at(deadline);
  deadline_timer_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
    if (ec || generation != self->deadline_generation_) return;
    self->timed_out_ = true;
    error_code ignored;
    self->socket_.cancel(ignored);
  });
}

void Connection::DisarmDeadline() {
  ++deadline_generation_;
  deadline_timer_.cancel();
}

void Connection::CloseSocket() {
  if (closed_) return;
  closed_ = true;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  deadline_timer_.cancel();
  wake_timer_.cancel();
  hangup_timer_.cancel();
}

void ServerState::Register(const std::shared_ptr<Connection>& connection) {
  MutexLock lock(mu);
  connections.emplace(connection.get(), connection);
}

void ServerState::Unregister(const Connection* connection) {
  {
    MutexLock lock(mu);
    connections.erase(connection);
  }
  changed.notify_all();
}

int64_t ServerState::ConnectionsOpen() {
  MutexLock lock(mu);
  return static_cast<int64_t>(connections.size());
}

void ServerState::BeginRequest() {
  MutexLock lock(mu);
  ++in_flight;
}

void ServerState::EndRequest() {
  {
    MutexLock lock(mu);
    --in_flight;
  }
  changed.notify_all();
}

void ServerState::ReportRefusal(const HttpRequest& request, const HttpResponse& response) {
  if (!options.on_refusal) return;
  try {
    options.on_refusal(request, response);
  } catch (const std::exception& e) {
    spdlog::warn("HTTP on_refusal callback threw: {}", e.what());
  } catch (...) {
    spdlog::warn("HTTP on_refusal callback threw a non-standard exception");
  }
}

void ServerState::ReportResponse(const HttpRequest& request, int status, std::string_view model) {
  if (!options.on_response) return;
  try {
    options.on_response(request, status, model);
  } catch (const std::exception& e) {
    spdlog::warn("HTTP on_response callback threw: {}", e.what());
  } catch (...) {
    spdlog::warn("HTTP on_response callback threw a non-standard exception");
  }
}

}  // namespace pier::http::server_internal
