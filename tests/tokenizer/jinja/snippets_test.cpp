// Pier's Jinja engine against Jinja2 itself: every snippet in the fixture
// (tests/fixtures/chat_template/expected.json, "snippets") was rendered by the sandboxed
// environment transformers builds; here each must render to the same bytes or fail likewise.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/jinja/eval.h"
#include "tokenizer/jinja/parser.h"

namespace pier::tokenizer::jinja {
namespace {

using nlohmann::ordered_json;

ordered_json LoadFixture() {
  std::ifstream in(std::string(PIER_SOURCE_DIR) + "/tests/fixtures/chat_template/expected.json",
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str().empty() ? ordered_json::object() : ordered_json::parse(ss.str());
}

TEST(JinjaSnippetsTest, RenderLikeJinja2) {
  ordered_json fixture = LoadFixture();
  ASSERT_TRUE(fixture.contains("snippets")) << "missing fixture";
  RenderOptions options;
  options.now_unix_seconds = fixture["pinned_unix_seconds"].get<int64_t>();
  int checked = 0;
  for (const ordered_json& snippet : fixture["snippets"]) {
    const std::string source = snippet["template"].get<std::string>();
    SCOPED_TRACE("template: " + source + "\ncontext: " + snippet["context"].dump());
    Result<TemplateAst> ast = ParseTemplate(source);
    Result<Value> context = FromJson(snippet["context"]);
    ASSERT_TRUE(context.ok());
    Result<std::string> out = ast.ok() ? Render(*ast, context->dict(), options) : ast.status();
    if (snippet.contains("expected")) {
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(*out, snippet["expected"].get<std::string>());
    } else {
      EXPECT_FALSE(out.ok()) << "expected " << snippet["error"] << ": " << snippet["message"]
                             << ", got: " << *out;
      if (!out.ok() && snippet["error"] == "raise_exception") {
        EXPECT_EQ(out.status().message(), snippet["message"].get<std::string>());
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 80);
}

}  // namespace
}  // namespace pier::tokenizer::jinja
