#include "engine/core/output_processor.h"

#include <utility>

namespace pier::engine {

OutputProcessor::OutputProcessor(sampling::StopMatcher stop, const tokenizer::Tokenizer* tokenizer,
                                 bool skip_special_tokens)
    : stop_(std::move(stop)) {
  if (tokenizer != nullptr) decoder_.emplace(*tokenizer, skip_special_tokens);
}

OutputProcessor::Output OutputProcessor::OnToken(int32_t token) {
  if (stop_.IsEndOfGeneration(token)) {
    Output out = Finish();
    out.stopped = true;
    return out;
  }
  Output out;
  if (decoder_.has_value()) {
    sampling::StopResult r = stop_.Feed(decoder_->Push(token));
    out.text = std::move(r.emit);
    out.stopped = r.stop_index.has_value();
  }
  return out;
}

OutputProcessor::Output OutputProcessor::Finish() {
  Output out;
  if (decoder_.has_value()) {
    sampling::StopResult r = stop_.Feed(decoder_->Flush());
    out.text = std::move(r.emit);
    if (r.stop_index.has_value()) {
      out.stopped = true;
      return out;
    }
  }
  out.text += stop_.Flush();
  return out;
}

}  // namespace pier::engine
