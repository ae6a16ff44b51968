// ProcessorBase: what every built-in processor shares (processors.h): its name and ports, and
// that it runs synchronously on the pipeline's threads. Internal to pipelines/processors/.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipelines/processors/processors.h"

namespace pier::pipelines {

class ProcessorBase : public Step {
 public:
  ProcessorBase(std::string name, std::vector<PortSpec> inputs, std::vector<PortSpec> outputs)
      : name_(std::move(name)), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {}
  const std::vector<PortSpec>& inputs() const override { return inputs_; }
  const std::vector<PortSpec>& outputs() const override { return outputs_; }
  bool synchronous() const override { return true; }
  std::string Describe() const override { return "processor " + name_; }

 protected:
  static StepOutcome Fail(Status status) {
    StepOutcome outcome;
    outcome.status = std::move(status);
    return outcome;
  }
  std::vector<PortSpec>& mutable_inputs() { return inputs_; }

 private:
  std::string name_;
  std::vector<PortSpec> inputs_;
  std::vector<PortSpec> outputs_;
};

// The factories, one per processor (processors.h lists their keys).
Result<std::unique_ptr<Step>> MakeImageProcessor(const StepSpec& spec);
Result<std::unique_ptr<Step>> MakeDetectionInputProcessor(const StepSpec& spec);
Result<std::unique_ptr<Step>> MakeTextBoxesProcessor(const StepSpec& spec);
Result<std::unique_ptr<Step>> MakeCropLinesProcessor(const StepSpec& spec);
Result<std::unique_ptr<Step>> MakeLineTensorProcessor(const StepSpec& spec);
Result<std::unique_ptr<Step>> MakeOrientLinesProcessor(const StepSpec& spec);
Result<std::unique_ptr<Step>> MakeCtcDecodeProcessor(const StepSpec& spec,
                                                     const ModelResolver& models);
Result<std::unique_ptr<Step>> MakeTopKProcessor(const StepSpec& spec, const ModelResolver& models);
Result<std::unique_ptr<Step>> MakeTemplateProcessor(const StepSpec& spec);

}  // namespace pier::pipelines
