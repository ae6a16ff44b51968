// Jinja renderer: walks a parsed template with a variable context and produces text.
//
// Semantics follow Jinja2 3.1 as configured by transformers (ImmutableSandboxedEnvironment,
// default Undefined, loopcontrols, `generation` tag): `for` and macro bodies get their own
// scope (a `set` inside a loop does not leak out; namespace attributes do), `if` does not;
// undefined values render as "" and are falsy, but using one in arithmetic, calling it or
// taking an attribute of it fails with Jinja's message. Globals: range (at most 100000
// items, as the sandbox), namespace, dict, raise_exception, strftime_now.
//
// Every render is bounded (RenderLimits) so a hostile template cannot hang or exhaust
// memory: output bytes, intermediate string bytes, loop iterations and macro call depth;
// exceeding one is RESOURCE_EXHAUSTED. raise_exception(msg) yields INVALID_ARGUMENT whose
// message is exactly `msg`; other render errors are INVALID_ARGUMENT "chat template error at
// L:C: ...". Thread-safety: a render uses only its own state; the AST is read-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace pier::tokenizer::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{8} << 20;  // the rendered prompt
  size_t max_work_bytes = size_t{256} << 20;  // strings built along the way, in total
  int64_t max_loop_iterations = 1'000'000;    // all loops of one render together
  int max_call_depth = 64;                    // nested macro calls
};

struct RenderOptions {
  // Clock for strftime_now(): seconds since the Unix epoch, formatted as UTC. Unset: the
  // current local time (what transformers does).
  std::optional<int64_t> now_unix_seconds;
  RenderLimits limits;
};

// Renders `ast` with `context` as the template's variables (over the built-in globals).
// True when raise_exception() caused the error is reported through `raised` (may be null).
Result<std::string> Render(const TemplateAst& ast, const DictData& context,
                           const RenderOptions& options, bool* raised = nullptr);

}  // namespace pier::tokenizer::jinja
