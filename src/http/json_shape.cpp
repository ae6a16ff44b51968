#include "http/json_shape.h"

#include <vector>

namespace pier::http {

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

}  // namespace pier::http
