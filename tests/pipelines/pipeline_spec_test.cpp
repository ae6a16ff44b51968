// ParsePipelines (src/pipelines/pipeline_spec.h): the `pipelines:` list as models.yaml writes
// it. Every refusal is INVALID_ARGUMENT naming the file, the pipeline, the step and the key; a
// valid list comes back with its steps in an order that runs.
#include "pipelines/pipeline_spec.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <vector>

namespace pier::pipelines {
namespace {

Result<std::vector<PipelineSpec>> Parse(const std::string& yaml) {
  return ParsePipelines(YAML::Load(yaml), "serve.yaml", "/configs");
}

// The error ParsePipelines gives for `yaml`, which must be INVALID_ARGUMENT.
std::string ErrorOf(const std::string& yaml) {
  Result<std::vector<PipelineSpec>> parsed = Parse(yaml);
  EXPECT_FALSE(parsed.ok()) << yaml;
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << parsed.status().ToString();
  return parsed.status().message();
}

// A valid two-step pipeline; tests change one line of it.
constexpr const char* kHeader = R"(
- name: cards
  inputs: [{name: image, datatype: BYTES, shape: [1]}]
  outputs: [{name: text, datatype: BYTES}]
)";

TEST(PipelineSpecTest, AValidPipelineReadsEveryField) {
  Result<std::vector<PipelineSpec>> parsed = Parse(std::string(kHeader) + R"(
  max_inflight: 4
  max_queue: 9
  threads: 3
  steps:
    - name: decode
      processor: image
      max_image_bytes: 1000
      inputs: {bytes: image}
      outputs: {image: page}
    - name: read
      model: reader
      max_inflight: 2
      inputs: {x: page}
      outputs: {y: text}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 1u);
  const PipelineSpec& spec = (*parsed)[0];
  EXPECT_EQ(spec.name, "cards");
  EXPECT_EQ(spec.max_inflight, 4);
  EXPECT_EQ(spec.max_queue, 9);
  EXPECT_EQ(spec.threads, 3);
  ASSERT_EQ(spec.inputs.size(), 1u);
  EXPECT_EQ(spec.inputs[0].type, ElementType::kBytes);
  EXPECT_EQ(spec.inputs[0].shape, std::vector<int64_t>({1}));
  ASSERT_EQ(spec.outputs.size(), 1u);
  EXPECT_EQ(spec.outputs[0].shape, std::vector<int64_t>({-1}));
  ASSERT_EQ(spec.steps.size(), 2u);
  EXPECT_EQ(spec.steps[0].processor, "image");
  EXPECT_EQ(spec.steps[0].settings["max_image_bytes"], 1000);
  EXPECT_EQ(spec.steps[0].max_inflight, 0);
  EXPECT_EQ(spec.steps[1].model, "reader");
  EXPECT_EQ(spec.steps[1].max_inflight, 2);
  EXPECT_EQ(spec.steps[1].inputs.at("x"), "page");
  EXPECT_EQ(spec.steps[1].folder, "/configs");
  EXPECT_NE(spec.steps[1].source.find("serve.yaml"), std::string::npos) << spec.steps[1].source;
  EXPECT_NE(spec.steps[1].source.find("read"), std::string::npos) << spec.steps[1].source;
}

TEST(PipelineSpecTest, NoListIsNoPipelines) {
  Result<std::vector<PipelineSpec>> parsed = ParsePipelines(YAML::Node(), "serve.yaml");
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->empty());
  EXPECT_NE(ErrorOf("{name: x}").find("must be a list"), std::string::npos);
}

TEST(PipelineSpecTest, StepsGivenOutOfOrderComeBackInAnOrderThatRuns) {
  // c reads b's output, b reads a's, a the input; listed c, a, b.
  Result<std::vector<PipelineSpec>> parsed = Parse(R"(
- name: chain
  inputs: [{name: in, datatype: FP32}]
  outputs: [{name: v3, datatype: FP32}]
  steps:
    - {name: c, model: m, inputs: {x: v2}, outputs: {y: v3}}
    - {name: a, model: m, inputs: {x: in}, outputs: {y: v1}}
    - {name: b, model: m, inputs: {x: v1}, outputs: {y: v2}}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const std::vector<StepSpec>& steps = (*parsed)[0].steps;
  ASSERT_EQ(steps.size(), 3u);
  // Whatever the order, every value is produced before it is read.
  std::set<std::string> available = {"in"};
  for (const StepSpec& step : steps) {
    for (const auto& [port, value] : step.inputs) {
      EXPECT_EQ(available.count(value), 1u) << step.name << " reads " << value << " too early";
    }
    for (const auto& [port, value] : step.outputs) available.insert(value);
  }
  EXPECT_EQ(steps[0].name, "a");
  EXPECT_EQ(steps[1].name, "b");
  EXPECT_EQ(steps[2].name, "c");
}

TEST(PipelineSpecTest, RefusesAnUnknownPipelineKeyNamingIt) {
  const std::string error = ErrorOf(std::string(kHeader) + R"(
  max_inflights: 3
  steps:
    - {name: s, model: m, inputs: {x: image}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("serve.yaml"), std::string::npos) << error;
  EXPECT_NE(error.find("cards"), std::string::npos) << error;
  EXPECT_NE(error.find("unknown key 'max_inflights'"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesMissingInputsOrSteps) {
  std::string error = ErrorOf(R"(
- name: cards
  outputs: [{name: text, datatype: BYTES}]
  steps:
    - {name: s, model: m, inputs: {x: image}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("cards"), std::string::npos) << error;
  EXPECT_NE(error.find(".inputs"), std::string::npos) << error;
  EXPECT_NE(error.find("required"), std::string::npos) << error;

  error = ErrorOf(kHeader);
  EXPECT_NE(error.find("cards"), std::string::npos) << error;
  EXPECT_NE(error.find(".steps"), std::string::npos) << error;

  error = ErrorOf(std::string(kHeader) + "  steps: []\n");
  EXPECT_NE(error.find(".steps"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesAStepWithBothModelAndProcessorOrNeither) {
  std::string error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: both, model: m, processor: image, inputs: {x: image}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("both"), std::string::npos) << error;
  EXPECT_NE(error.find("exactly one of model"), std::string::npos) << error;

  error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: neither, inputs: {x: image}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("neither"), std::string::npos) << error;
  EXPECT_NE(error.find("exactly one of model"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesAValueNothingProducesNamingTheStepAndPort) {
  const std::string error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: reader, model: m, inputs: {x: imagee}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("reader"), std::string::npos) << error;
  EXPECT_NE(error.find("inputs.x"), std::string::npos) << error;
  EXPECT_NE(error.find("'imagee'"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesAValueProducedTwice) {
  const std::string error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: first, model: m, inputs: {x: image}, outputs: {y: text}}
    - {name: second, model: m, inputs: {x: image}, outputs: {z: text}}
)");
  EXPECT_NE(error.find("second"), std::string::npos) << error;
  EXPECT_NE(error.find("outputs.z"), std::string::npos) << error;
  EXPECT_NE(error.find("also produced by step 'first'"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesAStepThatProducesAPipelineInput) {
  const std::string error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: s, model: m, inputs: {x: text}, outputs: {y: image}}
    - {name: t, model: m, inputs: {x: image}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("'image' is a pipeline input"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesACycleNamingAStepOnIt) {
  const std::string error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: start, model: m, inputs: {x: image}, outputs: {y: a}}
    - {name: ping, model: m, inputs: {x: a, w: pong_out}, outputs: {y: ping_out}}
    - {name: pong, model: m, inputs: {x: ping_out}, outputs: {y: pong_out, z: text}}
)");
  EXPECT_NE(error.find("cycle"), std::string::npos) << error;
  EXPECT_TRUE(error.find("ping") != std::string::npos || error.find("pong") != std::string::npos)
      << error;
  EXPECT_EQ(error.find("(start)"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesAPipelineOutputNoStepProduces) {
  const std::string error = ErrorOf(R"(
- name: cards
  inputs: [{name: image, datatype: BYTES}]
  outputs: [{name: text, datatype: BYTES}, {name: fields, datatype: BYTES}]
  steps:
    - {name: s, model: m, inputs: {x: image}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("cards"), std::string::npos) << error;
  EXPECT_NE(error.find("'fields' is produced by no step"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesDuplicateStepAndPipelineNames) {
  std::string error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: twin, model: m, inputs: {x: image}, outputs: {y: a}}
    - {name: twin, model: m, inputs: {x: a}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("another step is also called 'twin'"), std::string::npos) << error;

  const std::string one = std::string(kHeader) + R"(
  steps:
    - {name: s, model: m, inputs: {x: image}, outputs: {y: text}}
)";
  error = ErrorOf(one + one);
  EXPECT_NE(error.find("pipelines[1]"), std::string::npos) << error;
  EXPECT_NE(error.find("another pipeline is also called 'cards'"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesABadMaxInflightNamingWhere) {
  const std::string step = R"(
  steps:
    - {name: s, model: m, inputs: {x: image}, outputs: {y: text}}
)";
  for (const char* bad : {"0", "-3", "many", "2.5", "[1]"}) {
    const std::string error =
        ErrorOf(std::string(kHeader) + "  max_inflight: " + bad + "\n" + step);
    EXPECT_NE(error.find("cards"), std::string::npos) << error;
    EXPECT_NE(error.find("max_inflight"), std::string::npos) << error;
    EXPECT_NE(error.find("whole number"), std::string::npos) << error;
  }
  const std::string error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: slow, model: m, max_inflight: 0, inputs: {x: image}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("slow"), std::string::npos) << error;
  EXPECT_NE(error.find("max_inflight"), std::string::npos) << error;
}

TEST(PipelineSpecTest, RefusesBadTensorsAndPorts) {
  std::string error = ErrorOf(R"(
- name: cards
  inputs: [{name: image, datatype: JPEG}]
  outputs: [{name: text, datatype: BYTES}]
  steps:
    - {name: s, model: m, inputs: {x: image}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("inputs[0].datatype"), std::string::npos) << error;
  EXPECT_NE(error.find("'JPEG'"), std::string::npos) << error;

  error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: s, model: m, inputs: {x: [image]}, outputs: {y: text}}
)");
  EXPECT_NE(error.find("inputs.x"), std::string::npos) << error;

  error = ErrorOf(std::string(kHeader) + R"(
  steps:
    - {name: s, model: m, inputs: {x: image}}
)");
  EXPECT_NE(error.find("outputs"), std::string::npos) << error;
  EXPECT_NE(error.find("names no value"), std::string::npos) << error;
}

TEST(PipelineSpecTest, TypedYamlToJsonTypesPlainScalarsAndKeepsQuotedOnesStrings) {
  const nlohmann::ordered_json json = TypedYamlToJson(YAML::Load(R"(
whole: 42
negative: -7
real: 0.25
yes: true
no: False
nothing: null
word: hello
quoted_whole: "42"
quoted_true: 'true'
list: [1, "2", 3.5]
nested: {type: object, required: ["name"]}
)"));
  EXPECT_TRUE(json["whole"].is_number_integer());
  EXPECT_EQ(json["whole"], 42);
  EXPECT_EQ(json["negative"], -7);
  EXPECT_TRUE(json["real"].is_number_float());
  EXPECT_DOUBLE_EQ(json["real"].get<double>(), 0.25);
  EXPECT_EQ(json["yes"], true);
  EXPECT_EQ(json["no"], false);
  EXPECT_TRUE(json["nothing"].is_null());
  EXPECT_EQ(json["word"], "hello");
  EXPECT_TRUE(json["quoted_whole"].is_string());
  EXPECT_EQ(json["quoted_whole"], "42");
  EXPECT_TRUE(json["quoted_true"].is_string());
  EXPECT_EQ(json["quoted_true"], "true");
  EXPECT_EQ(json["list"], nlohmann::ordered_json::parse(R"([1, "2", 3.5])"));
  EXPECT_EQ(json["nested"]["required"][0], "name");
  // Keys keep the YAML's order (a schema's properties are read in order).
  EXPECT_EQ(json.begin().key(), "whole");
}

TEST(PipelineSpecTest, AStepsOwnKeysAreTypedSettings) {
  Result<std::vector<PipelineSpec>> parsed = Parse(std::string(kHeader) + R"(
  steps:
    - name: s
      model: m
      temperature: 0.5
      system: "7"
      inputs: {x: image}
      outputs: {y: text}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const nlohmann::ordered_json& settings = (*parsed)[0].steps[0].settings;
  EXPECT_TRUE(settings["temperature"].is_number_float());
  EXPECT_TRUE(settings["system"].is_string());
  EXPECT_FALSE(settings.contains("inputs"));
  EXPECT_FALSE(settings.contains("model"));
}

}  // namespace
}  // namespace pier::pipelines
