// CheckJsonShape: a linear pre-scan of a request body before any JSON DOM is built, so that
// hostile shapes are refused with a 400 instead of costing the server its stack or its time:
// nesting deeper than max_depth (nlohmann copies and dumps values recursively: a 100,000-deep
// array of a few hundred kilobytes would overflow the stack) and objects with more than
// max_object_members members (an ordered_json object, which keeps the client's key order, pays
// a linear lookup per inserted key).
//
// InvalidJsonMessage: what the parser found wrong with a body, and where, for the client, without
// the library's internals ("[json.exception.parse_error.101] parse error at line 1, column 8").
//
// Thread-safety: free functions over values.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace pier::api {

struct JsonShapeLimits {
  int max_depth = 256;
  size_t max_object_members = 4096;
};

// The problem, as a message for the client; nullopt when the shape is within the limits (the
// text need not be valid JSON: the parser judges that).
std::optional<std::string> CheckJsonShape(std::string_view text,
                                          const JsonShapeLimits& limits = {});

// "invalid JSON[ in `where`][ at byte offset N]: what is wrong" for an exception nlohmann's
// parser threw; N counts from 0 in the text parsed (its length: the text ended too soon).
std::string InvalidJsonMessage(const nlohmann::json::exception& e, std::string_view where = "");

}  // namespace pier::api
