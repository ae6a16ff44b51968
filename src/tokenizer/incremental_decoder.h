// IncrementalDecoder: streaming detokenization for one generated sequence.
//
// Tokens arrive one at a time and a token may carry only part of a UTF-8
// character (byte-level BPE splits emoji and CJK across tokens; SentencePiece
// has <0xNN> byte tokens). Push() returns only complete, valid UTF-8: bytes of an
// unfinished character are held back until the rest arrives, and bytes that can
// never form a character become U+FFFD right away. Flush() ends the stream and
// turns a truncated tail into U+FFFD. The concatenation of everything Push() and
// Flush() return equals Tokenizer::Decode() of the same ids.
//
// Ownership: borrows the Tokenizer, which must outlive it. Thread-safety: one
// decoder per stream, used by one thread at a time.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace pier::tokenizer {

class IncrementalDecoder {
 public:
  // `skip_special`: drop control tokens, as Decode(ids, skip_special) does.
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // Adds one token; returns the text that became complete (possibly empty).
  std::string Push(TokenId id);

  // Ends the stream: returns the held-back bytes as U+FFFD (or "" when none) and
  // resets the decoder for a new stream.
  std::string Flush();

  // Bytes held back waiting for the rest of a character (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool first_ = true;    // no token has produced output yet
  std::string pending_;  // start of an unfinished UTF-8 character
};

}  // namespace pier::tokenizer
