// HttpServer over real sockets on 127.0.0.1, continued from server_test.cpp: shutdown with and
// without grace, probes while draining, half-closed clients, ambiguous framing, HEAD, CORS,
// the bounded send buffer, handler exceptions, option errors and the response hook.
// Timing: every wait is a polling loop or a blocking read with a deadline of seconds; no
// sleep is used as an assertion.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server_test_fixture.h"

namespace pier::http {
namespace {

TEST_F(HttpServerTest, ShutdownWithGraceFinishesInFlightStreamAndRefusesNewRequests) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient streaming(server->port());
  TestClient idle(server->port());
  ASSERT_TRUE(idle.SendGet("/hello"));
  ASSERT_TRUE(idle.ReadResponse());
  ASSERT_TRUE(streaming.SendGet("/sse"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->Push("data: before\n\n"));

  std::atomic<bool> shutdown_returned{false};
  std::thread stopper([&] {
    server->Shutdown(milliseconds(20'000));
    shutdown_returned = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return server->shutting_down(); }));
  // A new request on an open keep-alive connection is refused.
  ASSERT_TRUE(idle.SendGet("/hello"));
  auto refused = idle.ReadResponse();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->Header("connection"), "close");
  EXPECT_NE(refused->body.find("shutting down"), std::string::npos);
  EXPECT_FALSE(shutdown_returned);
  // The in-flight stream may still finish.
  ASSERT_TRUE(stream->Push("data: after\n\n"));
  stream->Finish();
  auto response = streaming.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "data: before\n\ndata: after\n\n");
  stopper.join();
  EXPECT_EQ(stream->cancels(), 0);
  // No longer listening.
  TestClient late(server->port());
  EXPECT_TRUE(!late.connected() || late.WaitClosed());
}

TEST_F(HttpServerTest, ShutdownWithoutGraceCancelsAnEndlessStream) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/sse"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitStarted());
  EXPECT_TRUE(WaitUntil([&] { return server->Stats().streams_active == 1; }));
  const Clock::time_point start = Clock::now();
  server->Shutdown(milliseconds(0));
  EXPECT_LT(Clock::now() - start, milliseconds(10'000));
  EXPECT_EQ(stream->cancel_reason(), "server shutting down");
  EXPECT_TRUE(client.WaitClosed());
  server->Shutdown(milliseconds(0));  // idempotent
  server.reset();
  stream->WakeLate();  // the server is gone: must be harmless
}

TEST_F(HttpServerTest, ShutdownEndsAStreamWithItsEndingAndTheChunkedTerminator) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/sse"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  stream->set_ending("data: {\"error\":1}\n\ndata: [DONE]\n\n");
  ASSERT_TRUE(stream->Push("data: a\n\n"));
  const Clock::time_point deadline = Clock::now() + milliseconds(10'000);
  ASSERT_TRUE(client.ReadHead(deadline));
  ASSERT_EQ(client.ReadChunk(deadline), "data: a\n\n");
  server->Shutdown(milliseconds(0));
  EXPECT_EQ(stream->cancel_reason(), "server shutting down");
  // The raw bytes: the ending as one chunk, then the terminator, then the close.
  const std::string rest = client.ReadAll();
  EXPECT_EQ(rest, "21\r\ndata: {\"error\":1}\n\ndata: [DONE]\n\n\r\n0\r\n\r\n");
  EXPECT_TRUE(WaitUntil([&] { return server->Stats().streams_active == 0; }));
}

TEST_F(HttpServerTest, ShutdownAnswersACollectedResponseWithAComplete503) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/collect"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitStarted());
  ASSERT_TRUE(stream->Push("{\"partial\":"));
  EXPECT_TRUE(WaitUntil([&] { return server->Stats().streams_active == 1; }));
  server->Shutdown(milliseconds(0));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response) << client.buffered();
  EXPECT_EQ(response->status, 503);
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_EQ(response->Header("content-length"), std::to_string(response->body.size()));
  EXPECT_NE(response->body.find("server shutting down"), std::string::npos) << response->body;
  EXPECT_EQ(response->body.find("partial"), std::string::npos);
}

TEST_F(HttpServerTest, ProbePathsAreServedWhileDrainingAndOthersGet503) {
  options_.paths_served_while_draining = {"/hello"};
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient streaming(server->port());
  TestClient probe(server->port());
  ASSERT_TRUE(streaming.SendGet("/sse"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitStarted());
  std::thread stopper([&] { server->Shutdown(milliseconds(20'000)); });
  ASSERT_TRUE(WaitUntil([&] { return server->shutting_down(); }));
  ASSERT_TRUE(probe.SendGet("/hello?probe"));
  auto served = probe.ReadResponse();
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
  EXPECT_EQ(served->body, "hello probe");
  EXPECT_EQ(served->Header("connection"), "close");
  // The listener stays open through the grace period: a new connection's probe is served,
  // anything else gets 503.
  TestClient fresh(server->port());
  ASSERT_TRUE(fresh.SendGet("/hello?fresh"));
  auto fresh_probe = fresh.ReadResponse();
  ASSERT_TRUE(fresh_probe);
  EXPECT_EQ(fresh_probe->status, 200);
  TestClient other(server->port());
  ASSERT_TRUE(other.SendGet("/collect"));
  auto refused = other.ReadResponse();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  stream->Finish();
  stopper.join();
  TestClient late(server->port());  // after the grace period: no longer listening
  EXPECT_TRUE(!late.connected() || late.WaitClosed());
}

TEST_F(HttpServerTest, HalfClosedClientStillGetsItsResponse) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  {
    TestClient plain(server->port());
    ASSERT_TRUE(plain.Send("GET /hello?half HTTP/1.1\r\nHost: t\r\n\r\n"));
    plain.ShutdownWrite();
    auto response = plain.ReadResponse();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "hello half");
  }
  for (const char* path : {"/sse", "/collect"}) {
    TestClient client(server->port());
    ASSERT_TRUE(client.SendGet(path));
    client.ShutdownWrite();
    auto stream = streams_.Wait(std::string(path) == "/sse" ? 0 : 1);
    ASSERT_NE(stream, nullptr);
    ASSERT_TRUE(stream->WaitStarted());
    // Longer than the hangup checks take to notice a closed peer.
    std::this_thread::sleep_for(milliseconds(400));
    ASSERT_TRUE(stream->Push("data: late\n\n")) << path << " was cancelled";
    stream->Finish();
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << path;
    EXPECT_EQ(response->status, 200) << path;
    EXPECT_NE(response->body.find("data: late\n\n"), std::string::npos) << response->body;
    EXPECT_EQ(stream->cancels(), 0) << path;
  }
  EXPECT_EQ(server->Stats().client_disconnects, 0);
}

TEST_F(HttpServerTest, AmbiguousFramingAndMissingOrRepeatedHeadersAreRefused) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::vector<std::pair<std::string, int>> cases = {
      {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"
       "\r\n3\r\nabc\r\n0\r\n\r\n",
       400},
      {"GET /hello HTTP/1.1\r\n\r\n", 400},
      {"GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"GET /hello HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer a\r\nAuthorization: Bearer "
       "b\r\n\r\n",
       400},
  };
  for (const auto& [raw, status] : cases) {
    TestClient client(server->port());
    ASSERT_TRUE(client.Send(raw));
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << raw;
    EXPECT_EQ(response->status, status) << raw << response->body;
    EXPECT_EQ(response->Header("connection"), "close") << raw;
    EXPECT_TRUE(client.WaitClosed()) << raw;
  }
  EXPECT_EQ(echo_calls_, 0);
  // Chunked alone is fine, and HTTP/1.0 needs no Host.
  TestClient chunked(server->port());
  ASSERT_TRUE(chunked.Send(
      "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"));
  auto echoed = chunked.ReadResponse();
  ASSERT_TRUE(echoed);
  EXPECT_EQ(echoed->status, 200);
  EXPECT_EQ(echoed->body, "abc");
  TestClient old(server->port());
  ASSERT_TRUE(old.Send("GET /hello?old HTTP/1.0\r\n\r\n"));
  auto answered = old.ReadResponse();
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->status, 200);
}

TEST_F(HttpServerTest, HeadIsServedByGetWithoutTheBody) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("HEAD /hello?x HTTP/1.1\r\nHost: t\r\n\r\n"));
  const Clock::time_point deadline = Clock::now() + milliseconds(10'000);
  auto head = client.ReadHead(deadline);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("content-length"), std::to_string(std::string("hello x").size()));
  // No body follows: the next response on the connection starts right after the head.
  ASSERT_TRUE(client.SendGet("/hello?y"));
  auto next = client.ReadResponse();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->body, "hello y");
}

TEST_F(HttpServerTest, CorsPreflightAndHeadersForAllowedOriginsOnly) {
  options_.cors_origins = {"http://app.example"};
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(
      client.Send("OPTIONS /echo HTTP/1.1\r\nHost: t\r\nOrigin: http://app.example\r\n"
                  "Access-Control-Request-Method: POST\r\n"
                  "Access-Control-Request-Headers: authorization, content-type\r\n\r\n"));
  auto preflight = client.ReadResponse();
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->Header("access-control-allow-origin"), "http://app.example");
  EXPECT_NE(preflight->Header("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_EQ(preflight->Header("access-control-allow-headers"), "authorization, content-type");
  EXPECT_EQ(preflight->Header("vary"), "Origin");
  EXPECT_EQ(echo_calls_, 0);

  ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nHost: t\r\nOrigin: http://app.example\r\n\r\n"));
  auto allowed = client.ReadResponse();
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->Header("access-control-allow-origin"), "http://app.example");

  ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nHost: t\r\nOrigin: http://evil.example\r\n\r\n"));
  auto other = client.ReadResponse();
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(other->Header("access-control-allow-origin"), "");

  ASSERT_TRUE(
      client.Send("OPTIONS /echo HTTP/1.1\r\nHost: t\r\nOrigin: http://evil.example\r\n"
                  "Access-Control-Request-Method: POST\r\n\r\n"));
  auto refused = client.ReadResponse();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  EXPECT_NE(refused->body.find("http://evil.example"), std::string::npos) << refused->body;
}

TEST_F(HttpServerTest, WithoutCorsOriginsNoCorsHeadersAreSent) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nHost: t\r\nOrigin: http://app.example\r\n\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->Header("access-control-allow-origin"), "");
}

TEST_F(HttpServerTest, BoundedSendBufferLetsTheWriteTimeoutCatchAStalledReader) {
  // The client keeps its default receive buffer and never reads. With the kernel's autotuned
  // send buffer (megabytes), the 2 MB below would all be accepted and nothing would time out.
  options_.max_stream_backlog = size_t{1} << 30;
  options_.write_timeout = milliseconds(500);
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient reader(server->port());
  ASSERT_TRUE(reader.SendGet("/sse"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitStarted());
  StreamFlood flood(stream, 1 << 10);
  const bool cancelled = stream->WaitCancelled(milliseconds(30'000));
  flood.Join();
  ASSERT_TRUE(cancelled) << "pushed " << flood.pushed() << " KiB without a cancel";
  EXPECT_NE(stream->cancel_reason().find("client reads too slowly"), std::string::npos);
  EXPECT_LT(flood.pushed(), 1000) << "KiB accepted before the stall was noticed";
}

TEST_F(HttpServerTest, HandlerExceptionIs500AndServingContinues) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/throw"));
  auto failed = client.ReadResponse();
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, 500);
  EXPECT_NE(failed->body.find("\"server_error\""), std::string::npos);
  ASSERT_TRUE(client.SendGet("/hello"));
  auto ok = client.ReadResponse();
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpServerTest, PortInUseIsUnavailable) {
  auto first = StartServer();
  ASSERT_NE(first, nullptr);
  HttpServerOptions options;
  options.port = first->port();
  auto second = HttpServer::Start(options, router_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(first->port())),
            std::string::npos)
      << second.status().message();
}

TEST_F(HttpServerTest, InvalidOptionsAreRejected) {
  options_.io_threads = 0;
  auto server = HttpServer::Start(options_, router_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
  options_.io_threads = 1;
  EXPECT_FALSE(HttpServer::Start(options_, nullptr).ok());
}

TEST_F(HttpServerTest, OnResponseSeesEveryStatus) {
  options_.max_body_bytes = 16;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/hello"));
  ASSERT_TRUE(client.ReadResponse());
  ASSERT_TRUE(client.SendGet("/missing"));
  ASSERT_TRUE(client.ReadResponse());
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n"));
  ASSERT_TRUE(client.ReadResponse());
  EXPECT_TRUE(WaitUntil([&] { return Responses().size() == 3; }));
  const auto responses = Responses();
  ASSERT_EQ(responses.size(), 3u);
  EXPECT_EQ(responses[0], std::make_pair(std::string("/hello"), 200));
  EXPECT_EQ(responses[1], std::make_pair(std::string("/missing"), 404));
  EXPECT_EQ(responses[2], std::make_pair(std::string("/echo"), 413));
}

}  // namespace
}  // namespace pier::http
