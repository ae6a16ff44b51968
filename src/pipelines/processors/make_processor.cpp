// MakeProcessor (processors.h): the built-in processors by name.
#include "pipelines/processors/processor_base.h"

namespace pier::pipelines {

Result<std::unique_ptr<Step>> MakeProcessor(const StepSpec& spec, const ModelResolver& models) {
  const std::string& name = spec.processor;
  if (name == "image") return MakeImageProcessor(spec);
  if (name == "text_detection_input") return MakeDetectionInputProcessor(spec);
  if (name == "text_boxes") return MakeTextBoxesProcessor(spec);
  if (name == "crop_lines") return MakeCropLinesProcessor(spec);
  if (name == "line_tensor") return MakeLineTensorProcessor(spec);
  if (name == "orient_lines") return MakeOrientLinesProcessor(spec);
  if (name == "ctc_decode") return MakeCtcDecodeProcessor(spec, models);
  if (name == "top_k") return MakeTopKProcessor(spec, models);
  if (name == "template") return MakeTemplateProcessor(spec);
  return NotFoundError(spec.source + ".processor: there is no processor '" + name +
                       "' (known: image, text_detection_input, text_boxes, crop_lines, "
                       "line_tensor, orient_lines, ctc_decode, top_k, template)");
}

}  // namespace pier::pipelines
