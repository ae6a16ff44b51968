// The processors that make text (processors.h: top_k, template).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <set>
#include <sstream>

#include "pipelines/processors/processor_base.h"

namespace pier::pipelines {
namespace {

const ValueType kText{ValueKind::kTensor, ElementType::kBytes};

class TopKProcessor final : public ProcessorBase {
 public:
  TopKProcessor(int64_t k, std::vector<std::string> labels)
      : ProcessorBase("top_k", {{"scores", {ValueKind::kTensor, ElementType::kFp32}}},
                      {{"labels", kText}}),
        k_(k),
        labels_(std::move(labels)) {}

  StepOutcome Run(const StepCall& call) override {
    const HostTensor& scores = call.inputs.at("scores")->tensor;
    if (scores.shape.empty()) return Fail(InvalidArgumentError("takes [N, classes] scores"));
    const int64_t classes = scores.shape.back();
    const int64_t rows = classes > 0 ? ElementCount(scores.shape) / classes : 0;
    const float* all = reinterpret_cast<const float*>(scores.bytes.data());
    const int64_t k = std::min(k_, classes);
    std::vector<std::string> texts;
    std::vector<int64_t> order(static_cast<size_t>(classes));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = all + r * classes;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return row[a] > row[b]; });
      for (int64_t i = 0; i < k; ++i) {
        const int64_t c = order[static_cast<size_t>(i)];
        char score[32];
        std::snprintf(score, sizeof(score), "%f", static_cast<double>(row[c]));
        std::string text = std::string(score) + ":" + std::to_string(c);
        if (c < static_cast<int64_t>(labels_.size())) text += ":" + labels_[static_cast<size_t>(c)];
        texts.push_back(std::move(text));
      }
    }
    auto value = TextValue("labels", texts);
    std::const_pointer_cast<PipelineValue>(value)->tensor.shape = {rows, k};
    StepOutcome outcome;
    outcome.outputs["labels"] = std::move(value);
    return outcome;
  }

 private:
  int64_t k_;
  std::vector<std::string> labels_;
};

// "Fields: {lines}" -> ["Fields: ", "lines"] pieces: literal text and input names alternate.
struct TemplatePiece {
  bool is_input = false;
  std::string text;
};

class TemplateProcessor final : public ProcessorBase {
 public:
  TemplateProcessor(std::vector<TemplatePiece> pieces, std::vector<PortSpec> inputs,
                    std::string separator)
      : ProcessorBase("template", std::move(inputs), {{"text", kText}}),
        pieces_(std::move(pieces)),
        separator_(std::move(separator)) {}

  StepOutcome Run(const StepCall& call) override {
    std::map<std::string, std::string> joined;
    bool any = false;
    for (const auto& [port, value] : call.inputs) {
      Result<std::vector<std::string>> texts = TextsOf(value->tensor);
      if (!texts.ok()) return Fail(texts.status());
      std::string text;
      for (size_t i = 0; i < texts->size(); ++i) {
        if (i > 0) text += separator_;
        text += (*texts)[i];
      }
      any = any || !text.empty();
      joined[port] = std::move(text);
    }
    StepOutcome outcome;
    // Nothing to say (a page without text): no prompt at all, so the step after it is skipped.
    if (!any) {
      outcome.outputs["text"] = TextValue("text", {});
      return outcome;
    }
    std::string text;
    for (const TemplatePiece& piece : pieces_)
      text += piece.is_input ? joined[piece.text] : piece.text;
    outcome.outputs["text"] = TextValue("text", {text});
    return outcome;
  }

 private:
  std::vector<TemplatePiece> pieces_;
  std::string separator_;
};

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

}  // namespace

Result<std::unique_ptr<Step>> MakeTopKProcessor(const StepSpec& spec, const ModelResolver& models) {
  StepKeys keys(spec);
  PIER_ASSIGN_OR_RETURN(int64_t k, keys.Count("k", 1, 1, 1000));
  PIER_ASSIGN_OR_RETURN(std::string where, keys.Text("labels", ""));
  PIER_ASSIGN_OR_RETURN(std::string model, keys.Text("labels_model", ""));
  PIER_RETURN_IF_ERROR(keys.Finish("processor top_k"));
  std::vector<std::string> labels;
  if (!where.empty()) {
    if (where.rfind("metadata:", 0) != 0 && !spec.folder.empty() &&
        std::filesystem::path(where).is_relative()) {
      where = (std::filesystem::path(spec.folder) / where).string();
    }
    PIER_ASSIGN_OR_RETURN(std::string text,
                          ReadListSource(where, model, models, spec.source + ".labels"));
    labels = SplitLines(text);
  }
  return std::unique_ptr<Step>(new TopKProcessor(k, std::move(labels)));
}

Result<std::unique_ptr<Step>> MakeTemplateProcessor(const StepSpec& spec) {
  StepKeys keys(spec);
  PIER_ASSIGN_OR_RETURN(std::string text, keys.Text("template", ""));
  PIER_ASSIGN_OR_RETURN(std::string separator, keys.Text("separator", "\n"));
  PIER_RETURN_IF_ERROR(keys.Finish("processor template"));
  if (text.empty()) {
    return InvalidArgumentError(spec.source +
                                ".template: processor template needs its text, "
                                "with {input} where an input's text goes");
  }
  std::vector<TemplatePiece> pieces;
  std::set<std::string> used;
  std::string literal;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      literal += '{';
      ++i;
    } else if (text[i] == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      literal += '}';
      ++i;
    } else if (text[i] == '{') {
      const size_t end = text.find('}', i);
      if (end == std::string::npos) {
        return InvalidArgumentError(spec.source + ".template: a '{' at " + std::to_string(i) +
                                    " is never closed (write {{ for a brace)");
      }
      const std::string name = text.substr(i + 1, end - i - 1);
      if (spec.inputs.count(name) == 0) {
        return InvalidArgumentError(spec.source + ".template: {" + name +
                                    "} names no input of the step (bind it under inputs:)");
      }
      pieces.push_back({false, std::move(literal)});
      literal.clear();
      pieces.push_back({true, name});
      used.insert(name);
      i = end;
    } else {
      literal += text[i];
    }
  }
  pieces.push_back({false, literal});
  std::vector<PortSpec> inputs;
  for (const auto& [port, value] : spec.inputs) {
    if (used.count(port) == 0) {
      return InvalidArgumentError(spec.source + ".inputs." + port + ": the template never uses {" +
                                  port + "}");
    }
    inputs.push_back({port, kText, false});
  }
  return std::unique_ptr<Step>(
      new TemplateProcessor(std::move(pieces), std::move(inputs), std::move(separator)));
}

}  // namespace pier::pipelines
