#include "api/json_shape.h"

#include <vector>

namespace pier::api {

std::string InvalidJsonMessage(const nlohmann::json::exception& e, std::string_view where) {
  std::string_view detail = e.what();
  // "[json.exception.parse_error.101] parse error at line 1, column 8: syntax error ...":
  // the id and the line and column (the byte offset says it better) go.
  if (detail.substr(0, 16) == "[json.exception.") {
    if (const size_t end = detail.find("] "); end != std::string_view::npos) {
      detail.remove_prefix(end + 2);
    }
  }
  if (detail.substr(0, 15) == "parse error at ") {
    if (const size_t colon = detail.find(": "); colon != std::string_view::npos) {
      detail.remove_prefix(colon + 2);
    }
  }
  std::string message = "invalid JSON";
  if (!where.empty()) message += " in " + std::string(where);
  // The parser counts the byte it stopped at from 1 (0: not known).
  if (const auto* parse = dynamic_cast<const nlohmann::json::parse_error*>(&e);
      parse != nullptr && parse->byte > 0) {
    message += " at byte offset " + std::to_string(parse->byte - 1);
  }
  return message + ": " + std::string(detail);
}

std::optional<std::string> CheckJsonShape(std::string_view text, const JsonShapeLimits& limits) {
  // For each open container: whether it is an object, and its members so far.
  struct Open {
    bool object = false;
    size_t members = 0;
  };
  std::vector<Open> open;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        if (!open.empty() && open.back().object && open.back().members == 0) {
          open.back().members = 1;  // the first key
        }
        break;
      case '{':
      case '[':
        if (static_cast<int>(open.size()) >= limits.max_depth) {
          return "the JSON nests deeper than " + std::to_string(limits.max_depth) + " levels";
        }
        open.push_back({c == '{', 0});
        break;
      case '}':
      case ']':
        if (!open.empty()) open.pop_back();
        break;
      case ',':
        if (!open.empty() && open.back().object &&
            ++open.back().members > limits.max_object_members) {
          return "a JSON object has more than " + std::to_string(limits.max_object_members) +
                 " members";
        }
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

}  // namespace pier::api
