#include "loadgen/response_parser.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "common/ascii.h"

namespace pier::loadgen {

Result<StatusLine> ParseStatusLine(std::string_view line) {
  // "HTTP/1.1 200 OK"; the reason phrase may be empty or absent.
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ') {
    return InvalidArgumentError("bad status line '" + PrintableAscii(line) + "'");
  }
  const std::string_view code = line.substr(9, 3);
  int value = 0;
  const auto [end, ec] = std::from_chars(code.data(), code.data() + code.size(), value);
  if (ec != std::errc() || end != code.data() + 3 || value < 100 || value > 599 ||
      (line.size() > 12 && line[12] != ' ')) {
    return InvalidArgumentError("bad status code in '" + PrintableAscii(line) + "'");
  }
  return StatusLine{value, std::string(line.size() > 13 ? line.substr(13) : std::string_view())};
}

Result<std::pair<std::string, std::string>> ParseHeaderLine(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgumentError("bad header line '" + PrintableAscii(line) + "'");
  }
  const std::string_view name = line.substr(0, colon);
  for (char c : name) {
    if (c == ' ' || c == '\t' || c < 0x21 || c > 0x7E) {
      return InvalidArgumentError("bad header name '" + PrintableAscii(name) + "'");
    }
  }
  return std::make_pair(AsciiLower(name), std::string(TrimSpaceAndTab(line.substr(colon + 1))));
}

Result<size_t> ParseChunkSizeLine(std::string_view line) {
  // "1a;ext=1": hex size, optional extensions.
  const std::string_view text = TrimSpaceAndTab(line.substr(0, line.find(';')));
  size_t size = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), size, 16);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError("bad chunk size line '" + PrintableAscii(line) + "'");
  }
  return size;
}

std::string_view HttpResponseParser::Header(std::string_view name) const {
  for (const auto& [key, value] : headers_) {
    if (EqualsIgnoreAsciiCase(key, name)) return value;
  }
  return {};
}

Status HttpResponseParser::Fail(std::string message) {
  state_ = State::kError;
  error_ = message;
  return IoError("malformed HTTP response: " + message);
}

Status HttpResponseParser::OnStatusLine(std::string_view line) {
  Result<StatusLine> status = ParseStatusLine(line);
  if (!status.ok()) return Fail(status.status().message());
  status_code_ = status->code;
  reason_ = std::move(status->reason);
  state_ = State::kHeaders;
  return Status::Ok();
}

Status HttpResponseParser::OnHeaderLine(std::string_view line) {
  Result<std::pair<std::string, std::string>> header = ParseHeaderLine(line);
  if (!header.ok()) return Fail(header.status().message());
  headers_.push_back(std::move(*header));
  return Status::Ok();
}

Status HttpResponseParser::StartBody() {
  // 1xx, 204 and 304 responses have no body (RFC 9112 section 6.3).
  if (status_code_ < 200 || status_code_ == 204 || status_code_ == 304) {
    if (status_code_ < 200) {
      // An interim response (100 Continue): the real one follows.
      headers_.clear();
      state_ = State::kStatusLine;
      return Status::Ok();
    }
    state_ = State::kDone;
    return Status::Ok();
  }
  const std::string_view transfer_encoding = Header("transfer-encoding");
  if (!transfer_encoding.empty()) {
    if (!ListHasToken(transfer_encoding, "chunked")) {
      return Fail("unsupported Transfer-Encoding '" + PrintableAscii(transfer_encoding) + "'");
    }
    state_ = State::kChunkSize;
    return Status::Ok();
  }
  std::string_view length_text;
  for (const auto& [key, value] : headers_) {
    if (key != "content-length") continue;
    if (!length_text.empty() && length_text != value) return Fail("conflicting Content-Length");
    length_text = value;
  }
  if (length_text.empty()) {
    state_ = State::kBodyUntilClose;
    return Status::Ok();
  }
  size_t length = 0;
  const auto [end, ec] =
      std::from_chars(length_text.data(), length_text.data() + length_text.size(), length);
  if (ec != std::errc() || end != length_text.data() + length_text.size()) {
    return Fail("bad Content-Length '" + PrintableAscii(length_text) + "'");
  }
  remaining_ = length;
  state_ = length == 0 ? State::kDone : State::kBodyLength;
  return Status::Ok();
}

void HttpResponseParser::EmitBody(std::string_view bytes) {
  if (on_body_ && !bytes.empty()) on_body_(bytes);
}

Status HttpResponseParser::Feed(std::string_view bytes) {
  while (!bytes.empty()) {
    switch (state_) {
      case State::kDone:
        return Fail("bytes after the end of the response");
      case State::kError:
        return IoError("malformed HTTP response: " + error_);
      case State::kBodyLength: {
        const size_t n = std::min(remaining_, bytes.size());
        EmitBody(bytes.substr(0, n));
        bytes.remove_prefix(n);
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kDone;
        break;
      }
      case State::kBodyUntilClose:
        EmitBody(bytes);
        bytes = {};
        break;
      case State::kChunkData: {
        const size_t n = std::min(remaining_, bytes.size());
        EmitBody(bytes.substr(0, n));
        bytes.remove_prefix(n);
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kChunkDataEnd;
        break;
      }
      case State::kStatusLine:
      case State::kHeaders:
      case State::kChunkSize:
      case State::kChunkDataEnd:
      case State::kTrailers: {
        // Line-oriented states: gather up to "\n" (a lone "\n" is accepted as a line end).
        const size_t newline = bytes.find('\n');
        const std::string_view piece =
            bytes.substr(0, newline == std::string_view::npos ? bytes.size() : newline);
        if (state_ == State::kStatusLine || state_ == State::kHeaders) {
          header_bytes_ += piece.size() + 1;
          if (header_bytes_ > kMaxHeaderBytes) return Fail("headers larger than 64 KiB");
        } else if (line_.size() + piece.size() > 4096) {
          return Fail("chunk line longer than 4096 bytes");
        }
        line_.append(piece);
        if (newline == std::string_view::npos) {
          bytes = {};
          break;
        }
        bytes.remove_prefix(newline + 1);
        std::string line = std::move(line_);
        line_.clear();
        if (!line.empty() && line.back() == '\r') line.pop_back();
        switch (state_) {
          case State::kStatusLine:
            PIER_RETURN_IF_ERROR(OnStatusLine(line));
            break;
          case State::kHeaders:
            if (line.empty()) {
              PIER_RETURN_IF_ERROR(StartBody());
            } else {
              PIER_RETURN_IF_ERROR(OnHeaderLine(line));
            }
            break;
          case State::kChunkSize: {
            Result<size_t> size = ParseChunkSizeLine(line);
            if (!size.ok()) return Fail(size.status().message());
            remaining_ = *size;
            state_ = *size == 0 ? State::kTrailers : State::kChunkData;
            break;
          }
          case State::kChunkDataEnd:
            if (!line.empty()) return Fail("chunk data longer than its size");
            state_ = State::kChunkSize;
            break;
          case State::kTrailers:
            if (line.empty()) state_ = State::kDone;
            break;
          default:
            break;
        }
        break;
      }
    }
  }
  return Status::Ok();
}

Status HttpResponseParser::Finish() {
  switch (state_) {
    case State::kDone:
      return Status::Ok();
    case State::kBodyUntilClose:
      state_ = State::kDone;
      return Status::Ok();
    case State::kError:
      return IoError("malformed HTTP response: " + error_);
    case State::kStatusLine:
      if (line_.empty() && header_bytes_ == 0) {
        return Fail("the server closed the connection without a response");
      }
      return Fail("the server closed the connection inside the status line");
    case State::kHeaders:
      return Fail("the server closed the connection inside the headers");
    case State::kBodyLength:
      return Fail("the server closed the connection " + std::to_string(remaining_) +
                  " bytes before the end of the body");
    default:
      return Fail("the server closed the connection inside a chunked body");
  }
}

void SseParser::Feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {
      last_was_cr_ = false;  // the second half of "\r\n": the line ended at the "\r"
      continue;
    }
    last_was_cr_ = c == '\r';
    if (c == '\r' || c == '\n') {
      ProcessLine(line_);
      line_.clear();
    } else {
      line_ += c;
    }
  }
}

void SseParser::Finish() {
  if (!line_.empty()) {
    ProcessLine(line_);
    line_.clear();
  }
  Dispatch();
}

void SseParser::ProcessLine(std::string_view line) {
  if (line.empty()) {
    Dispatch();
    return;
  }
  if (line.front() == ':') return;
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) pending_.data += '\n';
    pending_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    pending_.event = std::string(value);
  } else if (field == "error") {
    pending_.event = "error";
    if (has_data_) pending_.data += '\n';
    pending_.data.append(value);
    has_data_ = true;
  }
}

void SseParser::Dispatch() {
  if (has_data_) on_event_(pending_);
  pending_ = SseEvent();
  has_data_ = false;
}

}  // namespace pier::loadgen
