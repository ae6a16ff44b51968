// HttpServer over real sockets on 127.0.0.1: keep-alive, routing errors, limits, timeouts,
// streams (SSE and collected), disconnects, slow readers, connection limits (shutdown, probes,
// framing, CORS and the rest: server_shutdown_test.cpp; the fixture: server_test_fixture.h).
// Timing: every wait is a polling loop or a blocking read with a deadline of seconds; no
// sleep is used as an assertion.
#include "http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server_test_fixture.h"
#include "server_test_util.h"

namespace pier::http {
namespace {

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

// Router::SetBodyLimit: a route's own limit, known from the head, replaces max_body_bytes (up
// or down) for Content-Length and chunked bodies alike; other routes keep the server's.
TEST_F(HttpServerTest, ARouteMaySetItsOwnBodyLimit) {
  options_.max_body_bytes = 1024;
  router_->SetBodyLimit("/echo", [](const HttpRequest& head) -> std::optional<size_t> {
    if (head.Header("x-big")) return 4096;
    return std::nullopt;
  });
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::string body(3000, 'b');
  TestClient client(server->port());
  ASSERT_TRUE(client.Send(
      "POST /echo HTTP/1.1\r\nHost: t\r\nX-Big: 1\r\nContent-Length: 3000\r\n\r\n" + body));
  auto big = client.ReadResponse();
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 200);
  EXPECT_EQ(big->body, body);

  TestClient over(server->port());
  ASSERT_TRUE(
      over.Send("POST /echo HTTP/1.1\r\nHost: t\r\nX-Big: 1\r\nContent-Length: 5000\r\n\r\n"));
  auto refused = over.ReadResponse();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 413);
  EXPECT_NE(refused->body.find("request body of 5000 bytes exceeds the limit of 4096 bytes"),
            std::string::npos)
      << refused->body;

  TestClient plain(server->port());
  ASSERT_TRUE(plain.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3000\r\n\r\n"));
  auto small = plain.ReadResponse();
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 413);
  EXPECT_NE(small->body.find("1024"), std::string::npos) << small->body;

  TestClient chunked(server->port());
  std::string request =
      "POST /echo HTTP/1.1\r\nHost: t\r\nX-Big: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 10; ++i) request += "200\r\n" + std::string(512, 'x') + "\r\n";
  request += "0\r\n\r\n";
  ASSERT_TRUE(chunked.Send(request));
  auto grown = chunked.ReadResponse();
  ASSERT_TRUE(grown);
  EXPECT_EQ(grown->status, 413);
  EXPECT_NE(grown->body.find("4096"), std::string::npos) << grown->body;
  EXPECT_EQ(echo_calls_, 1);
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

// A client that half-closes inside its request can still read: it gets a 400 saying what was
// missing, not a silent close.
TEST_F(HttpServerTest, RequestCutShortByAHalfCloseIs400) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::pair<std::string, std::string> cases[] = {
      {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc",
       "the request body ended after 3 of its 100 bytes"},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
       "the chunked request body ended before its last chunk"},
      {"GET /hello HTTP/1.1\r\nHost: t\r\n", "the request head ended before its blank line"},
  };
  for (const auto& [request, message] : cases) {
    TestClient client(server->port());
    ASSERT_TRUE(client.Send(request));
    client.ShutdownWrite();
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << request;
    EXPECT_EQ(response->status, 400) << request;
    EXPECT_NE(response->body.find(message), std::string::npos) << response->body;
    EXPECT_NE(response->body.find("closed its side"), std::string::npos) << response->body;
    EXPECT_TRUE(client.WaitClosed());
  }
  EXPECT_EQ(echo_calls_, 0);
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

}  // namespace
}  // namespace pier::http
