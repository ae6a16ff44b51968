// The HTTP response and SSE parsers on inputs split at every byte, and on broken responses.
#include "loadgen/response_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pier::loadgen {
namespace {

struct Parsed {
  Status status;
  int status_code = 0;
  std::string body;
  std::vector<SseEvent> events;
  bool complete = false;
};

// Feeds `pieces` to a response parser whose body goes through an SSE parser; ends with
// Finish() when `close` is set (the peer closed the connection).
Parsed Parse(const std::vector<std::string>& pieces, bool close) {
  Parsed out;
  SseParser sse([&out](const SseEvent& e) { out.events.push_back(e); });
  HttpResponseParser parser([&](std::string_view bytes) {
    out.body.append(bytes);
    sse.Feed(bytes);
  });
  for (const std::string& piece : pieces) {
    out.status = parser.Feed(piece);
    if (!out.status.ok()) return out;
  }
  if (close) {
    out.status = parser.Finish();
    if (out.status.ok()) sse.Finish();
  }
  out.status_code = parser.status_code();
  out.complete = parser.complete();
  return out;
}

std::string Chunk(const std::string& data) {
  char size[16];
  std::snprintf(size, sizeof(size), "%zx", data.size());
  return std::string(size) + "\r\n" + data + "\r\n";
}

// An SSE stream with LF, CRLF and CR line ends, a comment, a multi-line data field and an
// event name; split over chunks so that events and line ends straddle chunk boundaries.
const std::string kSseBody =
    ": keep-alive comment\n"
    "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\n"
    "data: {\"choices\":[{\"text\":\"lo\"}]}\r\n\r\n"
    "event: note\rdata: line one\rdata: line two\r\r"
    "data:no-space\n\n"
    "data: [DONE]\n\n";

const std::vector<SseEvent> kSseEvents = {
    {"", "{\"choices\":[{\"text\":\"Hel\"}]}"},
    {"", "{\"choices\":[{\"text\":\"lo\"}]}"},
    {"note", "line one\nline two"},
    {"", "no-space"},
    {"", "[DONE]"},
};

std::string ChunkedResponse() {
  std::string out =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
      "X-Extra:   padded value  \r\n\r\n";
  // Chunks of 7 bytes (with an extension on the first), then the last chunk and a trailer.
  for (size_t pos = 0; pos < kSseBody.size(); pos += 7) {
    std::string chunk = Chunk(kSseBody.substr(pos, 7));
    if (pos == 0) chunk.insert(chunk.find("\r\n"), ";ext=1");
    out += chunk;
  }
  out += "0\r\nX-Trailer: t\r\n\r\n";
  return out;
}

void ExpectEvents(const std::vector<SseEvent>& got, const std::string& context) {
  ASSERT_EQ(got.size(), kSseEvents.size()) << context;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].event, kSseEvents[i].event) << context << " event " << i;
    EXPECT_EQ(got[i].data, kSseEvents[i].data) << context << " event " << i;
  }
}

TEST(HttpResponseParserTest, ChunkedSseAtEverySplitPoint) {
  const std::string response = ChunkedResponse();
  for (size_t split = 0; split <= response.size(); ++split) {
    const Parsed p = Parse({response.substr(0, split), response.substr(split)}, false);
    const std::string context = "split at " + std::to_string(split);
    ASSERT_TRUE(p.status.ok()) << context << ": " << p.status.ToString();
    EXPECT_TRUE(p.complete) << context;
    EXPECT_EQ(p.status_code, 200);
    EXPECT_EQ(p.body, kSseBody) << context;
    ExpectEvents(p.events, context);
  }
}

TEST(HttpResponseParserTest, ChunkedSseByteByByte) {
  const std::string response = ChunkedResponse();
  std::vector<std::string> bytes;
  for (char c : response) bytes.emplace_back(1, c);
  const Parsed p = Parse(bytes, false);
  ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  EXPECT_TRUE(p.complete);
  ExpectEvents(p.events, "byte by byte");
}

TEST(HttpResponseParserTest, ContentLengthBodyAtEverySplitPoint) {
  const std::string body = R"({"data":[{"id":"m"}]})";
  const std::string response =
      "HTTP/1.1 404 Not Found\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
      body;
  for (size_t split = 0; split <= response.size(); ++split) {
    const Parsed p = Parse({response.substr(0, split), response.substr(split)}, false);
    ASSERT_TRUE(p.status.ok()) << split << ": " << p.status.ToString();
    EXPECT_TRUE(p.complete);
    EXPECT_EQ(p.status_code, 404);
    EXPECT_EQ(p.body, body);
  }
}

TEST(HttpResponseParserTest, BodyWithoutLengthEndsAtClose) {
  const std::string body = "data: a\n\ndata: b";  // the last event has no blank line
  for (size_t split = 0; split <= body.size(); ++split) {
    const Parsed p =
        Parse({"HTTP/1.1 200 OK\r\n\r\n" + body.substr(0, split), body.substr(split)}, true);
    ASSERT_TRUE(p.status.ok()) << p.status.ToString();
    EXPECT_TRUE(p.complete);
    EXPECT_EQ(p.body, body);
    ASSERT_EQ(p.events.size(), 2u);
    EXPECT_EQ(p.events[1].data, "b");
  }
}

TEST(HttpResponseParserTest, SkipsInterimResponseAndReadsNoBodyFor204) {
  Parsed p =
      Parse({"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}, false);
  ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  EXPECT_EQ(p.status_code, 200);
  EXPECT_EQ(p.body, "ok");
  p = Parse({"HTTP/1.1 204 No Content\r\n\r\n"}, false);
  ASSERT_TRUE(p.status.ok());
  EXPECT_TRUE(p.complete);
  EXPECT_EQ(p.status_code, 204);
}

TEST(HttpResponseParserTest, HeaderLookupIgnoresCaseAndTrims) {
  HttpResponseParser parser;
  ASSERT_TRUE(
      parser.Feed("HTTP/1.1 200 OK\r\nX-Thing:  v a l  \r\nContent-Length: 0\r\n\r\n").ok());
  EXPECT_EQ(parser.Header("x-THING"), "v a l");
  EXPECT_EQ(parser.Header("missing"), "");
  EXPECT_EQ(parser.reason(), "OK");
}

// Feeds a whole response and returns the first error, from Feed or else from Finish.
Status FirstError(const std::string& response) {
  HttpResponseParser parser;
  Status status = parser.Feed(response);
  if (!status.ok()) return status;
  return parser.Finish();
}

TEST(HttpResponseParserTest, RejectsMalformedResponsesWithAReason) {
  struct Case {
    std::string response;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"SMTP 220 hello\r\n\r\n", "bad status line"},
      {"HTTP/1.1 2x0 OK\r\n\r\n", "bad status code"},
      {"HTTP/1.1 999 Odd\r\n\r\n", "bad status code"},
      {"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"},
      {"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "bad header name"},
      {"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "bad Content-Length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
       "conflicting Content-Length"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
       "chunk data longer than its size"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabc", "bytes after the end"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", "5 bytes before the end"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "inside a chunked body"},
      {"HTTP/1.1 200 OK\r\nContent-Le", "inside the headers"},
      {"HTTP/1.1 2", "inside the status line"},
      {"", "without a response"},
      {"HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'a') + "\r\n\r\n", "larger than 64 KiB"},
  };
  for (const Case& c : cases) {
    const Status status = FirstError(c.response);
    ASSERT_FALSE(status.ok()) << c.reason;
    EXPECT_NE(status.message().find(c.reason), std::string::npos)
        << "expected '" << c.reason << "' in: " << status.message();
  }
}

TEST(HttpResponseParserTest, StaysFailedAfterAnError) {
  HttpResponseParser parser;
  EXPECT_FALSE(parser.Feed("garbage\r\n").ok());
  EXPECT_FALSE(parser.Feed("HTTP/1.1 200 OK\r\n\r\n").ok());
  EXPECT_FALSE(parser.Finish().ok());
}

TEST(SseParserTest, ErrorFieldBecomesAnErrorEventAndEmptyDataIsDispatched) {
  std::vector<SseEvent> events;
  SseParser parser([&events](const SseEvent& e) { events.push_back(e); });
  parser.Feed("error: {\"message\":\"bad\"}\n\nevent: only-a-name\n\ndata\n\n");
  ASSERT_EQ(events.size(), 2u);  // an event with no data is dropped
  EXPECT_EQ(events[0].event, "error");
  EXPECT_EQ(events[0].data, "{\"message\":\"bad\"}");
  EXPECT_EQ(events[1].event, "");
  EXPECT_EQ(events[1].data, "");
}

}  // namespace
}  // namespace pier::loadgen
