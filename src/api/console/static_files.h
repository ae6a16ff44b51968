// The web console's static files, embedded into the binary at build time from
// src/api/console/static/ (cmake/EmbedFiles.cmake writes EmbeddedFiles' definition).
#pragma once

#include <string_view>
#include <vector>

namespace pier::api::console {

struct EmbeddedFile {
  std::string_view name;  // "index.html", "app.js", ...
  std::string_view bytes;
};

const std::vector<EmbeddedFile>& EmbeddedFiles();

}  // namespace pier::api::console
