// Status and Result<T>: how Pier reports expected failures.
//
// A failure a caller can act on (a corrupt file, a bad request, a budget that is
// too small) is returned as a Status carrying a code and a message written for
// the person who has to fix it. Broken invariants are not Statuses: they use
// PIER_CHECK (check.h) and abort. Both types are cheap to move and thread-safe
// to read; they hold no references to anything else.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "common/check.h"

namespace pier {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     // the caller passed something malformed or out of range
  kNotFound,            // a file, key, model or route that does not exist
  kDataLoss,            // a corrupt or truncated file
  kUnsupported,         // valid input that Pier does not handle (yet)
  kResourceExhausted,   // a quota, budget or queue is full
  kFailedPrecondition,  // the system is not in a state that allows the call
  kUnavailable,         // not ready, shutting down, device absent
  kIoError,             // the operating system refused a read, write or map
  kInternal,            // a bug that was caught without aborting
};

// Name of a code, e.g. "INVALID_ARGUMENT".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "DATA_LOSS: model.gguf: tensor 'x' extends past the end of the file".
  std::string ToString() const;

  // Returns a copy whose message is "prefix: message"; OK stays OK.
  Status WithContext(std::string_view prefix) const;

  // Explicitly ignores the status where dropping it is intended.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status UnsupportedError(std::string m) {
  return Status(StatusCode::kUnsupported, std::move(m));
}
inline Status ResourceExhaustedError(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status UnavailableError(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status IoError(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

// Either a value or an error: a non-OK Status, or a typed error E that carries fields a
// caller acts on and converts with `Status ToStatus() const` (memory/memory_error.h's
// MemoryError, in MemoryResult<T>). PIER_ASSIGN_OR_RETURN works with either.
template <typename T, typename E = Status>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(E error) : data_(std::move(error)) {   // NOLINT(google-explicit-constructor)
    if constexpr (std::is_same_v<E, Status>) {
      PIER_CHECK(!std::get<Status>(data_).ok(), "Result constructed from an OK Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  // OK when a value is held; otherwise the error as a Status.
  Status status() const {
    if (ok()) return Status();
    if constexpr (std::is_same_v<E, Status>) {
      return std::get<Status>(data_);
    } else {
      return std::get<E>(data_).ToStatus();
    }
  }
  // The error itself; only when !ok().
  const E& error() const {
    PIER_CHECK(!ok(), "Result::error() on a value");
    return std::get<E>(data_);
  }

  T& value() & {
    PIER_CHECK(ok(), "Result::value() on error: " + status().ToString());
    return std::get<T>(data_);
  }
  const T& value() const& {
    PIER_CHECK(ok(), "Result::value() on error: " + status().ToString());
    return std::get<T>(data_);
  }
  T&& value() && {
    PIER_CHECK(ok(), "Result::value() on error: " + status().ToString());
    return std::get<T>(std::move(data_));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, E> data_;
};

}  // namespace pier

#define PIER_STATUS_CONCAT_INNER(a, b) a##b
#define PIER_STATUS_CONCAT(a, b) PIER_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define PIER_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::pier::Status pier_status_ = (expr);        \
    if (!pier_status_.ok()) return pier_status_; \
  } while (false)

// `PIER_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a Result or returns its error.
#define PIER_ASSIGN_OR_RETURN(lhs, expr) \
  PIER_ASSIGN_OR_RETURN_IMPL(PIER_STATUS_CONCAT(pier_result_, __LINE__), lhs, expr)
#define PIER_ASSIGN_OR_RETURN_IMPL(result, lhs, expr) \
  auto result = (expr);                               \
  if (!result.ok()) return result.status();           \
  lhs = std::move(result).value()
