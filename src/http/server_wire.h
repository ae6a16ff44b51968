// Wire helpers shared by the connection's files (server_connection.cpp: reading, plain
// responses, deadlines; server_stream.cpp: streamed responses and disconnect detection):
// response heads, chunk frames, header comparisons. Includes Asio: src/http/server*.cpp only.
#pragma once

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "http/routes.h"

namespace pier::http::server_internal {

// After a client half-closed during a stream: how often the socket is checked for a reset
// (which says its receiving side is closed too).
inline constexpr auto kHangupCheckInterval = std::chrono::milliseconds(100);
// An SSE comment: ignored by every client, it makes a peer that has closed entirely answer
// with a reset.
inline constexpr std::string_view kSseProbe = ":\n\n";

inline auto Await(boost::system::error_code& ec) {
  return boost::asio::redirect_error(boost::asio::use_awaitable, ec);
}

// Header text from handlers with CR and LF replaced, so it cannot split the response.
std::string Sanitize(std::string_view s);
std::string_view View(boost::beast::string_view s);
// 1xx, 204 and 304 responses carry no body and no Content-Length.
bool BodylessStatus(int status);
// "HTTP/1.1 200 OK\r\n" and the headers, without the framing header and the blank line.
std::string ResponseHead(int status, const HttpResponse& response, bool keep_alive);
// One chunk of a chunked body: size line, data, CRLF.
std::string ChunkFrame(std::string_view data);

}  // namespace pier::http::server_internal
