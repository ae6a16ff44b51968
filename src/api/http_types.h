// Plain HTTP request/response types and the route handler signature, free of Asio and Beast so
// that routes (OpenAI API, health, metrics) compile fast and are unit-tested without sockets.
//
// A handler runs on an I/O thread and must return quickly (it may tokenize and submit to the
// engine, never wait for it). A response either has its whole body now, or a ResponseStream
// that produces the body later: the server then waits for the stream without holding a thread
// (see ResponseStream) and sends what it produces.
//
// Thread-safety: HttpRequest/HttpResponse are plain values. ResponseStream: see below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pier::api {

struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // as sent, e.g. "/v1/models?limit=1"
  std::string path;    // target up to '?', not percent-decoded
  std::string query;   // after '?', or empty
  // In arrival order; names lower-cased, values with surrounding whitespace trimmed.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_address;  // "127.0.0.1:53122"

  // The first header named `name` (give it lower-case), or nullopt.
  std::optional<std::string_view> Header(std::string_view name) const;
};

// What a stream has produced since the last Poll.
struct StreamChunk {
  std::string data;   // bytes to send next (may be empty)
  bool done = false;  // nothing follows `data`
  // Non-chunked responses only, read when done: the status to send (0 keeps the response's),
  // e.g. 500 when the engine failed the request after the handler returned.
  int status = 0;
  // Non-chunked responses only, read when done: headers added to the response's, e.g.
  // Retry-After with a 429.
  std::vector<std::pair<std::string, std::string>> headers = {};
};

// The body of a response produced after the handler returned (by the engine).
//
// Protocol, all on I/O threads except `wake`: the server calls Start(wake) once, then Poll()
// each time wake() has been called (and once right after Start), until a chunk says done. The
// producer calls wake() from any thread, as often as it likes, whenever Poll would return
// something new; the server coalesces wakes. The server calls Cancel(reason) when the client
// disconnects, reads too slowly (backlog() above the server's limit, or a write that does not
// finish within its timeout) or the server shuts down; after Cancel the stream must free its
// engine resources at once (abort the request) and the server stops polling.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  virtual void Start(std::function<void()> wake) = 0;
  [[nodiscard]] virtual StreamChunk Poll() = 0;
  // Units produced but not yet taken by Poll (for an engine stream: events waiting).
  virtual size_t backlog() const = 0;
  virtual void Cancel(std::string_view reason) = 0;
  // The server ends the stream itself (shutdown after its grace period): like Cancel, and
  // returns the bytes that end a chunked body cleanly for its client (SSE: an error event and
  // `data: [DONE]`), sent before the chunked terminator; empty when the stream has none, or
  // when it had already finished or been cancelled. Default: Cancel, nothing.
  virtual std::string CancelWithEnding(std::string_view reason) {
    Cancel(reason);
    return {};
  }
};

class DeferredResponse;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers, e.g. Retry-After
  std::string body;                                          // used when stream is null
  // When set, the body comes from the stream. `chunked`: sent as produced, with chunked
  // transfer encoding (SSE: content_type "text/event-stream"); else collected until done and
  // sent whole with Content-Length.
  std::shared_ptr<ResponseStream> stream;
  bool chunked = false;
  // When set, everything above is ignored: the response is not known yet (a model still
  // loading) and comes from the DeferredResponse once it is.
  std::shared_ptr<DeferredResponse> deferred;
  // The served model (its id) this response is for, for metrics; empty: none (a route that
  // names no model, or a request refused before its model was known).
  std::string model;
};

// A response that is not known when the handler returns: the request waits for something
// (an on-demand model to load, a model to finish unloading) and the server waits with it
// without holding a thread, then sends the response Poll returns (which may itself stream or
// be deferred again).
//
// Protocol, all on I/O threads except `wake`: the server calls Start(wake) once, then Poll()
// right after and after each wake() until it returns a response. The producer calls wake()
// from any thread whenever Poll might have an answer. Cancel(reason) when the client
// disconnects or the server shuts down (the server then answers 503 itself, or nothing);
// after Cancel the server stops polling.
class DeferredResponse {
 public:
  virtual ~DeferredResponse() = default;
  virtual void Start(std::function<void()> wake) = 0;
  [[nodiscard]] virtual std::optional<HttpResponse> Poll() = 0;
  virtual void Cancel(std::string_view reason) = 0;
};

using Handler = std::function<HttpResponse(const HttpRequest& request)>;

// A JSON response: {"error": {"message", "type", "param", "code"}} in OpenAI's shape. `type`
// defaults from the status ("invalid_request_error" for 4xx, "server_error" for 5xx,
// "authentication_error" for 401, "not_found_error" for 404, ...); param and code are null
// when empty (code is always a string or null). A 401 carries `WWW-Authenticate: Bearer`.
HttpResponse ErrorResponse(int status, std::string_view message, std::string_view param = {},
                           std::string_view code = {}, std::string_view type = {});
// The same error object serialized alone (for an error event inside a started SSE stream).
std::string ErrorJson(int status, std::string_view message, std::string_view param = {},
                      std::string_view code = {}, std::string_view type = {});

// Maps path + method to handlers. Exact paths first, then the longest matching prefix route.
// Dispatch answers 404 (OpenAI error shape) for an unknown path and 405 with an Allow header
// for a known path with another method. HEAD is served by the GET route (the server sends
// the head without the body). Thread-safety: add routes before the server starts;
// Dispatch is const and may run on any thread.
class Router {
 public:
  void Add(std::string method, std::string path, Handler handler);
  // Any path starting with `prefix` (e.g. "/v1/models/"); the handler reads request.path.
  void AddPrefix(std::string method, std::string prefix, Handler handler);
  HttpResponse Dispatch(const HttpRequest& request) const;

  // The largest body a request for a path under `prefix` may bring, decided from its head
  // (method, path, headers) before the body is read: for routes whose bodies depend on what
  // they name (KServe's infer for a tensor model: the model's inputs). nullopt from it, or no
  // such prefix, means the server's own limit (max_body_bytes). Called on I/O threads; must be
  // quick.
  using BodyLimit = std::function<std::optional<size_t>(const HttpRequest& head)>;
  void SetBodyLimit(std::string prefix, BodyLimit limit);
  // The limit for `head` by the longest prefix given one, or nullopt.
  std::optional<size_t> BodyLimitFor(const HttpRequest& head) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    Handler handler;
  };
  std::vector<Route> routes_;
  std::vector<std::pair<std::string, BodyLimit>> body_limits_;
};

}  // namespace pier::api
