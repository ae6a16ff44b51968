// OutputProcessor: what one choice's sampled tokens become for the client: text, detokenized
// incrementally (never half a UTF-8 character) and passed through the stop matcher (text that
// may start a stop string is held back, never streamed in part), and whether a token ends the
// choice (an end-of-generation token or a completed stop string).
//
// The engine keeps one per choice; it decides the other endings (max_tokens, context length)
// and then calls Finish for the held-back tail. Without a tokenizer there is no text: only
// end-of-generation tokens end a choice. Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/sampling/stop_matcher.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace pier::engine {

class OutputProcessor {
 public:
  // `tokenizer` may be null (token-only output); it must outlive the processor.
  OutputProcessor(sampling::StopMatcher stop, const tokenizer::Tokenizer* tokenizer,
                  bool skip_special_tokens);

  struct Output {
    std::string text;      // to send with this token (may be empty: held back or no text)
    bool stopped = false;  // the choice ends here with finish reason stop
  };

  // The next sampled token. An end-of-generation token flushes the held-back text and stops;
  // a token that completes a stop string emits the text before it and stops.
  Output OnToken(int32_t token);

  // The choice ended for another reason: the held-back text, up to a stop string it may
  // complete (then `stopped`, and the finish reason is stop).
  Output Finish();

 private:
  sampling::StopMatcher stop_;
  std::optional<tokenizer::IncrementalDecoder> decoder_;
};

}  // namespace pier::engine
