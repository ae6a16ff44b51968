// ChatTemplate against transformers' apply_chat_template (tests/fixtures/chat_template/
// expected.json, made by tools/gen_chat_template_fixture.py), plus API behaviour.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace pier::tokenizer {
namespace {

using nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json& Fixture() {
  static const ordered_json* fixture = [] {
    std::string path = std::string(PIER_SOURCE_DIR) + "/tests/fixtures/chat_template/expected.json";
    std::string text = ReadFile(path);
    if (text.empty()) ADD_FAILURE() << "missing fixture " << path;
    return new ordered_json(text.empty() ? ordered_json::object() : ordered_json::parse(text));
  }();
  return *fixture;
}

// The template named in the fixture: inline (from the model) or a vendor file placed by
// scripts/bootstrap.
std::string TemplateSource(const std::string& name) {
  const ordered_json& inline_templates = Fixture()["inline_templates"];
  if (inline_templates.contains(name)) return inline_templates[name].get<std::string>();
  std::string path =
      std::string(PIER_SOURCE_DIR) + "/tests/fixtures/vendor/llama.cpp/templates/" + name;
  std::string text = ReadFile(path);
  EXPECT_FALSE(text.empty()) << "missing vendor template " << path << " (run scripts/bootstrap)";
  return text;
}

TEST(ChatTemplateTest, MatchesTransformersOnEveryFixtureCase) {
  const ordered_json& fixture = Fixture();
  ASSERT_TRUE(fixture.contains("cases"));
  std::map<std::string, ChatTemplate> parsed;
  std::map<std::string, Status> unparsable;
  int compared = 0;
  for (const ordered_json& c : fixture["cases"]) {
    const std::string name = c["template"].get<std::string>();
    SCOPED_TRACE(name + " / " + c["conversation"].get<std::string>() + " / add_generation_prompt=" +
                 (c["add_generation_prompt"].get<bool>() ? "1" : "0") +
                 " / kwargs=" + c["kwargs"].dump());
    if (!parsed.count(name) && !unparsable.count(name)) {
      Result<ChatTemplate> t = ChatTemplate::Parse(TemplateSource(name));
      if (t.ok()) {
        parsed.emplace(name, std::move(t).value());
      } else {
        unparsable.emplace(name, t.status());
      }
    }
    if (unparsable.count(name)) {
      // Only acceptable where Jinja2 itself refuses to compile the template.
      EXPECT_TRUE(c.contains("error") &&
                  (c["error"] == "TemplateAssertionError" || c["error"] == "TemplateSyntaxError"))
          << unparsable.at(name).ToString();
      ++compared;
      continue;
    }
    ChatTemplateOptions options;
    options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    options.now_unix_seconds = fixture["pinned_unix_seconds"].get<int64_t>();
    ordered_json extra = ordered_json::object();
    ordered_json tools;
    for (const auto& [key, value] : c["kwargs"].items()) {
      if (key == "bos_token") {
        options.bos_token = value.get<std::string>();
      } else if (key == "eos_token") {
        options.eos_token = value.get<std::string>();
      } else if (key == "tools") {
        tools = value;
        options.tools = &tools;
      } else {
        extra[key] = value;
      }
    }
    options.extra_context = &extra;
    const ordered_json& messages = fixture["conversations"][c["conversation"].get<std::string>()];
    Result<std::string> out = parsed.at(name).Apply(messages, options);
    if (c.contains("expected")) {
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else {
      ASSERT_FALSE(out.ok()) << "expected " << c["error"] << ": " << c["message"] << ", got:\n"
                             << *out;
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status().ToString();
      if (c["error"] == "raise_exception") {
        EXPECT_EQ(out.status().message(), c["message"].get<std::string>());
      }
    }
    ++compared;
  }
  EXPECT_GE(compared, 400);
}

TEST(ChatTemplateTest, SmolLm2TemplateRendersChatMl) {
  Result<ChatTemplate> t = ChatTemplate::Parse(TemplateSource("SmolLM2-135M-Instruct"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  Result<std::string> out = t->Apply(messages);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, RejectsEmptyOrMalformedConversations) {
  Result<ChatTemplate> t = ChatTemplate::Parse("{{ messages[0].content }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Apply(ordered_json::array()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Apply(ordered_json::object()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Apply(ordered_json::parse(R"(["hi"])")).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, DropsNullKeysLikeTransformers) {
  Result<ChatTemplate> t = ChatTemplate::Parse(
      "{{ messages[0].content is defined }} {{ messages[0].tool_calls is defined }}");
  ASSERT_TRUE(t.ok());
  Result<std::string> out = t->Apply(
      ordered_json::parse(R"([{"role": "assistant", "content": null, "tool_calls": [1]}])"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "False True");
}

TEST(ChatTemplateTest, AliasesReasoningFields) {
  Result<ChatTemplate> t =
      ChatTemplate::Parse("{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}");
  ASSERT_TRUE(t.ok());
  Result<std::string> out = t->Apply(
      ordered_json::parse(R"([{"role": "assistant", "reasoning": "hmm", "content": "x"}])"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "thinking=hmm;role=assistant;reasoning=hmm;content=x;reasoning_content=hmm;");
}

TEST(ChatTemplateTest, KeepsKeyOrderOfOrderedJsonAndSortsPlainJson) {
  Result<ChatTemplate> t = ChatTemplate::Parse("{{ messages[0] | tojson }}");
  ASSERT_TRUE(t.ok());
  const char* text = R"([{"role": "user", "content": "x"}])";
  Result<std::string> ordered = t->Apply(ordered_json::parse(text));
  Result<std::string> sorted = t->Apply(nlohmann::json::parse(text));
  ASSERT_TRUE(ordered.ok() && sorted.ok());
  EXPECT_EQ(*ordered, R"({"role": "user", "content": "x"})");
  EXPECT_EQ(*sorted, R"({"content": "x", "role": "user"})");
}

TEST(ChatTemplateTest, RaiseExceptionMessageIsReturnedVerbatim) {
  Result<ChatTemplate> t = ChatTemplate::Parse(
      "{% if messages[0].role != 'user' %}{{ raise_exception('Roles must start with user') }}{% "
      "endif %}");
  ASSERT_TRUE(t.ok());
  Result<std::string> out =
      t->Apply(ordered_json::parse(R"([{"role": "system", "content": "x"}])"));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Roles must start with user");
}

TEST(ChatTemplateTest, UnsupportedConstructsFailAtParseWithLocation) {
  struct Case {
    const char* source;
    const char* needle;
  };
  for (const Case& c : {Case{"ok\n  {{ x | frobnicate }}", "filter 'frobnicate' at 2:10"},
                        Case{"{{ x is prime }}", "test 'prime' at 1:9"},
                        Case{"\n\n{% include 'other.jinja' %}", "tag 'include' at 3:4"},
                        Case{"{{ 'a'.encode() }}", "method 'encode()'"},
                        Case{"{% for x in y recursive %}{% endfor %}", "recursive"}}) {
    Result<ChatTemplate> t = ChatTemplate::Parse(c.source);
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_EQ(t.status().code(), StatusCode::kUnsupported) << t.status().ToString();
    EXPECT_NE(t.status().message().find(c.needle), std::string::npos) << t.status().ToString();
  }
}

TEST(ChatTemplateTest, UnknownFilterInsideIfFailsOnlyWhenReached) {
  // Jinja2 compiles this (DeepSeek-V3.2 guards `from_json` this way); it fails when reached.
  Result<ChatTemplate> t = ChatTemplate::Parse(
      "{% if messages[0].content is string %}ok{% else %}{{ x | from_json }}{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Result<std::string> ok = t->Apply(ordered_json::parse(R"([{"role": "user", "content": "x"}])"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "ok");
  Result<std::string> reached =
      t->Apply(ordered_json::parse(R"([{"role": "user", "content": [1]}])"));
  ASSERT_FALSE(reached.ok());
  EXPECT_EQ(reached.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(reached.status().message().find("from_json"), std::string::npos);
}

TEST(ChatTemplateTest, SyntaxErrorsNameLineAndColumn) {
  for (const char* source : {"{% if x %}unclosed", "{{ 'unterminated }}", "line\n{{ (1 }}",
                             "{% endfor %}", "{{ x | }}", "{# never closed"}) {
    Result<ChatTemplate> t = ChatTemplate::Parse(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
    EXPECT_NE(t.status().message().find(" at "), std::string::npos) << t.status().ToString();
  }
}

TEST(ChatTemplateTest, RuntimeErrorsNameTheLocation) {
  Result<ChatTemplate> t = ChatTemplate::Parse("line one\n{{ messages[0].content + 1 }}");
  ASSERT_TRUE(t.ok());
  Result<std::string> out = t->Apply(ordered_json::parse(R"([{"role": "user", "content": "x"}])"));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("at 2:"), std::string::npos) << out.status().ToString();
  EXPECT_NE(out.status().message().find("can only concatenate str"), std::string::npos);
}

TEST(ChatTemplateTest, HostileTemplatesHitLimitsInsteadOfHanging) {
  ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  ChatTemplateOptions options;
  options.max_output_bytes = 1 << 16;
  options.max_loop_iterations = 10000;
  for (const char* source :
       {"{% for i in range(20000) %}{% for j in range(20000) %}{% endfor %}{% endfor %}",
        "{% for i in range(20000) %}{{ 'xxxxxxxxxxxxxxxx' }}{% endfor %}", "{{ 'x' * 1000000000 }}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% "
        "endfor %}"}) {
    Result<ChatTemplate> t = ChatTemplate::Parse(source);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    Result<std::string> out = t->Apply(messages, options);
    ASSERT_FALSE(out.ok()) << source;
    EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status().ToString();
  }
  // Deeply nested expressions are refused at parse time rather than overflowing the stack.
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(ChatTemplate::Parse(deep).ok());
  std::string deep_not = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "not ";
    return s;
  }() + "x }}";
  EXPECT_FALSE(ChatTemplate::Parse(deep_not).ok());
}

TEST(ChatTemplateTest, StrftimeNowUsesThePinnedClock) {
  Result<ChatTemplate> t = ChatTemplate::Parse("{{ strftime_now('%d %b %Y %H:%M') }}");
  ASSERT_TRUE(t.ok());
  ChatTemplateOptions options;
  options.now_unix_seconds = 0;
  Result<std::string> out =
      t->Apply(ordered_json::parse(R"([{"role": "user", "content": ""}])"), options);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "01 Jan 1970 00:00");
}

TEST(ChatTemplateTest, PromptStartsWithBosDetectsTheTemplatesBos) {
  EXPECT_TRUE(PromptStartsWithBos("<|begin_of_text|><|start_header_id|>", "<|begin_of_text|>"));
  EXPECT_FALSE(PromptStartsWithBos("<|start_header_id|>", "<|begin_of_text|>"));
  EXPECT_FALSE(PromptStartsWithBos("anything", ""));
}

TEST(ChatTemplateTest, CopiesShareTheParsedTemplate) {
  Result<ChatTemplate> t = ChatTemplate::Parse("{{ messages | length }}");
  ASSERT_TRUE(t.ok());
  ChatTemplate copy = *t;
  Result<std::string> out = copy.Apply(ordered_json::parse(R"([{"role": "user", "content": ""}])"));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "1");
  EXPECT_EQ(copy.source(), t->source());
}

}  // namespace
}  // namespace pier::tokenizer
