// Test helper: runs the built `pier` binary through the shell, as a user would.
//
// PIER_BINARY is defined by the test's CMake target. Thread-safety: none needed
// (tests call it from their own thread).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace pier::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when the process did not exit normally
  std::string output;  // stdout, or stdout + stderr when merged
};

// Runs `pier ARGS` (ARGS already shell-quoted); stderr is merged into output when asked,
// otherwise discarded.
inline CommandResult RunPier(const std::string& args, bool merge_stderr = false) {
  const std::string command =
      std::string(PIER_BINARY) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Single-quotes `s` for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace pier::testing
