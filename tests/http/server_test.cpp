// HttpServer over real sockets on 127.0.0.1: keep-alive, routing errors, limits, timeouts,
// streams (SSE and collected), disconnects, slow readers, connection limits, shutdown.
// Timing: every wait is a polling loop or a blocking read with a deadline of seconds; no
// sleep is used as an assertion.
#include "http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace pier::http {
namespace {

using std::chrono::milliseconds;
using testing::ClientResponse;
using testing::Clock;
using testing::StreamBox;
using testing::StreamFlood;
using testing::TestClient;
using testing::TestStream;
using testing::WaitUntil;

class HttpServerTest : public ::testing::Test {
 protected:
  HttpServerTest() {
    options_.port = 0;
    options_.on_response = [this](const HttpRequest& request, int status, std::string_view) {
      std::lock_guard<std::mutex> lock(mu_);
      responses_.emplace_back(request.path, status);
    };
    router_->Add("GET", "/hello", [](const HttpRequest& request) {
      HttpResponse response;
      response.content_type = "text/plain";
      response.body = "hello " + request.query;
      return response;
    });
    router_->Add("POST", "/echo", [this](const HttpRequest& request) {
      ++echo_calls_;
      HttpResponse response;
      response.content_type = "text/plain";
      response.body = request.body;
      response.headers.emplace_back("X-Header-Count", std::to_string(request.headers.size()));
      return response;
    });
    router_->Add("GET", "/throw", [](const HttpRequest&) -> HttpResponse {
      throw std::runtime_error("handler bug");
    });
    auto stream_handler = [this](bool chunked) {
      return [this, chunked](const HttpRequest&) {
        auto stream = std::make_shared<TestStream>();
        streams_.Add(stream);
        HttpResponse response;
        response.content_type = chunked ? "text/event-stream" : "application/json";
        response.stream = stream;
        response.chunked = chunked;
        return response;
      };
    };
    router_->Add("GET", "/sse", stream_handler(true));
    router_->Add("GET", "/collect", stream_handler(false));
  }

  std::unique_ptr<HttpServer> StartServer() {
    auto server = HttpServer::Start(options_, router_);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  std::vector<std::pair<std::string, int>> Responses() {
    std::lock_guard<std::mutex> lock(mu_);
    return responses_;
  }

  bool SawResponse(const std::string& path, int status) {
    for (const auto& [p, s] : Responses()) {
      if (p == path && s == status) return true;
    }
    return false;
  }

  HttpServerOptions options_;
  std::shared_ptr<Router> router_ = std::make_shared<Router>();
  StreamBox streams_;
  std::atomic<int> echo_calls_{0};
  std::mutex mu_;
  std::vector<std::pair<std::string, int>> responses_;
};

TEST_F(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(server->port(), 0);
  TestClient client(server->port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.SendGet("/hello?a=1"));
  auto first = client.ReadResponse();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "hello a=1");
  EXPECT_EQ(first->Header("content-type"), "text/plain");
  EXPECT_EQ(first->Header("connection"), "keep-alive");
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nX-Test:  padded  \r\n"
                  "Content-Length: 5\r\n\r\nabcde"));
  auto second = client.ReadResponse();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200);
  EXPECT_EQ(second->body, "abcde");
  EXPECT_EQ(second->Header("x-header-count"), "3");
  EXPECT_EQ(server->Stats().connections_accepted, 1);
  EXPECT_EQ(server->Stats().requests, 2);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(
      client.Send("GET /hello?1 HTTP/1.1\r\nHost: t\r\n\r\n"
                  "GET /hello?2 HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto first = client.ReadResponse();
  auto second = client.ReadResponse();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->body, "hello 1");
  EXPECT_EQ(second->body, "hello 2");
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimResponseBeforeTheBody) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                  "Content-Length: 4\r\n\r\n"));
  auto interim = client.ReadHead(Clock::now() + milliseconds(10'000));
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(client.Send("body"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "body");
}

TEST_F(HttpServerTest, Http10ClientGetsAChunkedStreamCollected) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("GET /sse HTTP/1.0\r\n\r\n"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->Push("data: a\n\n"));
  stream->Finish();
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_TRUE(response->Header("transfer-encoding").empty());
  EXPECT_EQ(response->body, "data: a\n\n");
  EXPECT_EQ(response->Header("connection"), "close");
}

TEST_F(HttpServerTest, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/nowhere"));
  auto missing = client.ReadResponse();
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("\"not_found_error\""), std::string::npos) << missing->body;
  ASSERT_TRUE(client.Send("DELETE /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto wrong = client.ReadResponse();
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->Header("allow"), "GET, HEAD");
  EXPECT_TRUE(
      WaitUntil([&] { return SawResponse("/nowhere", 404) && SawResponse("/hello", 405); }));
}

TEST_F(HttpServerTest, OversizeContentLengthIs413WithoutReadingTheBody) {
  options_.max_body_bytes = 1024;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  // Only the head is sent: the answer must not wait for a body.
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 413);
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_NE(response->body.find("10000000"), std::string::npos) << response->body;
  EXPECT_NE(response->body.find("\"invalid_request_error\""), std::string::npos);
  EXPECT_TRUE(client.WaitClosed());
  EXPECT_EQ(echo_calls_, 0);
}

TEST_F(HttpServerTest, ChunkedBodyGrowingPastTheLimitIs413) {
  options_.max_body_bytes = 1024;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  std::string request = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; ++i) request += "200\r\n" + std::string(512, 'x') + "\r\n";
  request += "0\r\n\r\n";
  ASSERT_TRUE(client.Send(request));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 413);
  EXPECT_NE(response->body.find("1024"), std::string::npos) << response->body;
  EXPECT_EQ(echo_calls_, 0);

  // Within the limit, a chunked body arrives whole.
  TestClient small(server->port());
  ASSERT_TRUE(
      small.Send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  auto ok = small.ReadResponse();
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, "abcde");
}

TEST_F(HttpServerTest, GarbageRequestLineIs400) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("\x01\x02 garbage\r\n\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 400);
  EXPECT_NE(response->body.find("malformed HTTP request"), std::string::npos) << response->body;
  EXPECT_TRUE(client.WaitClosed());
}

TEST_F(HttpServerTest, HeaderLargerThanTheLimitIs431) {
  options_.max_header_bytes = 256;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(1000, 'y') +
                          "\r\n\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 431);
}

TEST_F(HttpServerTest, HalfAHeadTimesOutWith408) {
  options_.header_timeout = milliseconds(300);
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nHost: t\r\n"));
  auto response = client.ReadResponse(milliseconds(10'000));
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 408);
  EXPECT_NE(response->body.find("300 ms"), std::string::npos) << response->body;
  EXPECT_TRUE(client.WaitClosed());
  EXPECT_GE(server->Stats().timeouts, 1);
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionClosesSilently) {
  options_.idle_timeout = milliseconds(300);
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/hello"));
  ASSERT_TRUE(client.ReadResponse());
  EXPECT_TRUE(client.WaitClosed());
  EXPECT_TRUE(client.buffered().empty()) << client.buffered();
  EXPECT_GE(server->Stats().timeouts, 1);
}

TEST_F(HttpServerTest, SlowSenderGets200WithoutBlockingOtherClients) {
  options_.header_timeout = milliseconds(20'000);
  options_.request_timeout = milliseconds(20'000);
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::string request = "GET /hello?slow HTTP/1.1\r\nHost: test\r\nX-Pad: 0123456789\r\n\r\n";
  std::atomic<bool> slow_sent{false};
  std::optional<ClientResponse> slow_response;
  std::thread slow([&] {
    TestClient client(server->port());
    for (char c : request) {
      client.Send(std::string(1, c));
      std::this_thread::sleep_for(milliseconds(30));
    }
    slow_sent = true;
    slow_response = client.ReadResponse();
  });
  // Meanwhile other clients are served; the slow one takes ~1.8 s to send its head.
  for (int i = 0; i < 5; ++i) {
    TestClient fast(server->port());
    ASSERT_TRUE(fast.SendGet("/hello?fast"));
    auto response = fast.ReadResponse();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->body, "hello fast");
  }
  EXPECT_FALSE(slow_sent) << "fast clients were served only after the slow one finished";
  slow.join();
  ASSERT_TRUE(slow_response);
  EXPECT_EQ(slow_response->status, 200);
  EXPECT_EQ(slow_response->body, "hello slow");
}

TEST_F(HttpServerTest, SseStreamDeliversChunksInOrderAsProduced) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/sse"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitStarted());
  const Clock::time_point deadline = Clock::now() + milliseconds(10'000);
  auto head = client.ReadHead(deadline);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("content-type"), "text/event-stream");
  EXPECT_EQ(head->Header("transfer-encoding"), "chunked");
  // Each chunk reaches the client before the next is produced.
  for (int i = 0; i < 5; ++i) {
    const std::string event = "data: {\"n\":" + std::to_string(i) + "}\n\n";
    ASSERT_TRUE(stream->Push(event));
    auto chunk = client.ReadChunk(deadline);
    ASSERT_TRUE(chunk) << "chunk " << i << " not delivered";
    EXPECT_EQ(*chunk, event);
  }
  stream->Finish();
  auto last = client.ReadChunk(deadline);
  ASSERT_TRUE(last);
  EXPECT_EQ(*last, "");
  EXPECT_EQ(stream->cancels(), 0);
  // The connection stays usable.
  ASSERT_TRUE(client.SendGet("/hello"));
  auto after = client.ReadResponse();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
  EXPECT_TRUE(WaitUntil([&] { return SawResponse("/sse", 200); }));
  EXPECT_EQ(server->Stats().streams_active, 0);
  // A wake long after the response ended is harmless.
  stream->WakeLate();
}

TEST_F(HttpServerTest, CollectedStreamUsesTheStatusOverride) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.SendGet("/collect"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitStarted());
  std::thread producer([&] {
    stream->Push("{\"part\":1,");
    stream->Push("\"part\":2}");
    stream->Finish(500);
  });
  auto response = client.ReadResponse();
  producer.join();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 500);
  EXPECT_EQ(response->body, "{\"part\":1,\"part\":2}");
  EXPECT_EQ(response->Header("content-length"), std::to_string(response->body.size()));
  EXPECT_TRUE(response->Header("transfer-encoding").empty());
  EXPECT_TRUE(WaitUntil([&] { return SawResponse("/collect", 500); }));
}

TEST_F(HttpServerTest, ClientDisconnectMidStreamCancelsIt) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<TestClient>(server->port());
  ASSERT_TRUE(client->SendGet("/sse"));
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->Push("data: first\n\n"));
  const Clock::time_point deadline = Clock::now() + milliseconds(10'000);
  ASSERT_TRUE(client->ReadHead(deadline));
  auto first = client->ReadChunk(deadline);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, "data: first\n\n");
  EXPECT_TRUE(WaitUntil([&] { return server->Stats().streams_active == 1; }));
  client->Close();
  const Clock::time_point closed_at = Clock::now();
  ASSERT_TRUE(stream->WaitCancelled(milliseconds(5'000)));
  // Detection does not wait for the producer: it happens while the stream is idle.
  EXPECT_LT(Clock::now() - closed_at, milliseconds(1'000));
  EXPECT_EQ(stream->cancel_reason(), "client disconnected");
  EXPECT_EQ(stream->cancels(), 1);
  EXPECT_TRUE(WaitUntil([&] { return SawResponse("/sse", 499); }));
  EXPECT_EQ(server->Stats().client_disconnects, 1);
  EXPECT_TRUE(WaitUntil([&] { return server->Stats().streams_active == 0; }));
  EXPECT_FALSE(stream->Push("data: late\n\n"));
}

TEST_F(HttpServerTest, SlowReaderIsCancelledWithoutAffectingOthers) {
  options_.max_stream_backlog = 8;
  options_.write_timeout = milliseconds(3'000);
  options_.io_threads = 2;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient reader(server->port(), /*rcvbuf=*/4096);
  ASSERT_TRUE(reader.SendGet("/sse"));  // and never reads
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitStarted());
  StreamFlood flood(stream, 64 << 10);
  const bool cancelled = stream->WaitCancelled(milliseconds(30'000));
  TestClient other(server->port());
  ASSERT_TRUE(other.SendGet("/hello?other"));
  auto response = other.ReadResponse();
  flood.Join();
  ASSERT_TRUE(cancelled) << "pushed " << flood.pushed() << " chunks without a cancel";
  EXPECT_NE(stream->cancel_reason().find("client reads too slowly"), std::string::npos)
      << stream->cancel_reason();
  EXPECT_LT(flood.pushed(), StreamFlood::kMaxChunks);
  EXPECT_EQ(server->Stats().slow_client_aborts, 1);
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "hello other");
}

TEST_F(HttpServerTest, SlowReaderIsCancelledWhenOneWriteTakesTooLong) {
  options_.max_stream_backlog = size_t{1} << 30;  // only the write timeout can trigger
  options_.write_timeout = milliseconds(500);
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient reader(server->port(), /*rcvbuf=*/4096);
  ASSERT_TRUE(reader.SendGet("/sse"));  // and never reads
  auto stream = streams_.Wait(0);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitStarted());
  StreamFlood flood(stream, 16 << 10);
  const bool cancelled = stream->WaitCancelled(milliseconds(30'000));
  flood.Join();
  ASSERT_TRUE(cancelled) << "pushed " << flood.pushed() << " chunks without a cancel";
  EXPECT_NE(stream->cancel_reason().find("did not finish within 500 ms"), std::string::npos)
      << stream->cancel_reason();
  EXPECT_EQ(server->Stats().slow_client_aborts, 1);
  EXPECT_TRUE(WaitUntil([&] { return server->Stats().streams_active == 0; }));
}

TEST_F(HttpServerTest, TwoHundredConcurrentConnectionsAreAllServed) {
  options_.io_threads = 2;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  constexpr int kClients = 200;
  std::vector<std::unique_ptr<TestClient>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<TestClient>(server->port()));
    ASSERT_TRUE(clients.back()->connected());
  }
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(clients[i]->SendGet("/hello?" + std::to_string(i)));
  }
  const Clock::time_point start = Clock::now();
  int served = 0;
  for (int i = 0; i < kClients; ++i) {
    auto response = clients[i]->ReadResponse(milliseconds(30'000));
    if (response && response->status == 200 && response->body == "hello " + std::to_string(i)) {
      ++served;
    }
  }
  EXPECT_EQ(served, kClients);
  EXPECT_LT(Clock::now() - start, milliseconds(30'000));
  EXPECT_EQ(server->Stats().connections_accepted, kClients);
}

TEST_F(HttpServerTest, ConnectionsOverTheLimitGet503) {
  options_.max_connections = 2;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  TestClient a(server->port());
  TestClient b(server->port());
  for (TestClient* client : {&a, &b}) {
    ASSERT_TRUE(client->SendGet("/hello"));
    auto response = client->ReadResponse();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 200);
  }
  TestClient c(server->port());
  ASSERT_TRUE(c.SendGet("/hello"));
  auto refused = c.ReadResponse();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->Header("connection"), "close");
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(server->Stats().connections_refused, 1);
  // Once one closes, a new connection is served again.
  a.Close();
  EXPECT_TRUE(WaitUntil([&] { return server->Stats().connections_open == 1; }));
  TestClient d(server->port());
  ASSERT_TRUE(d.SendGet("/hello"));
  auto served = d.ReadResponse();
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
}

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
