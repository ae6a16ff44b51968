#include "loadgen/workload.h"

#include <cmath>
#include <random>

namespace pier::loadgen {

const std::vector<std::string>& PromptWords() {
  // Common English words, lower case, that BPE vocabularies hold as one " word" token.
  static const std::vector<std::string> kWords = {
      "the",        "of",        "and",       "to",       "in",      "is",     "that",
      "for",        "it",        "as",        "was",      "with",    "be",     "by",
      "on",         "not",       "he",        "this",     "are",     "or",     "his",
      "from",       "at",        "which",     "but",      "have",    "an",     "had",
      "they",       "you",       "were",      "their",    "one",     "all",    "we",
      "can",        "her",       "has",       "there",    "been",    "if",     "more",
      "when",       "will",      "would",     "who",      "so",      "no",     "time",
      "people",     "year",      "way",       "day",      "man",     "thing",  "woman",
      "life",       "child",     "world",     "school",   "state",   "family", "group",
      "country",    "problem",   "hand",      "part",     "place",   "case",   "week",
      "company",    "system",    "program",   "question", "work",    "number", "night",
      "point",      "home",      "water",     "room",     "mother",  "area",   "money",
      "story",      "fact",      "month",     "lot",      "right",   "study",  "book",
      "eye",        "job",       "word",      "business", "issue",   "side",   "kind",
      "head",       "house",     "service",   "friend",   "father",  "power",  "hour",
      "game",       "line",      "end",       "member",   "law",     "car",    "city",
      "name",       "team",      "minute",    "idea",     "body",    "back",   "face",
      "level",      "office",    "door",      "health",   "person",  "art",    "war",
      "history",    "party",     "result",    "change",   "morning", "reason", "research",
      "girl",       "moment",    "air",       "force",    "good",    "new",    "first",
      "last",       "long",      "great",     "little",   "own",     "other",  "old",
      "big",        "high",      "different", "small",    "large",   "next",   "early",
      "young",      "important", "few",       "public",   "bad",     "same",   "able",
      "make",       "know",      "take",      "see",      "come",    "think",  "look",
      "want",       "give",      "use",       "find",     "tell",    "ask",    "seem",
      "feel",       "try",       "leave",     "call",     "keep",    "let",    "begin",
      "help",       "show",      "hear",      "play",     "run",     "move",   "live",
      "believe",    "bring",     "happen",    "write",    "sit",     "stand",  "lose",
      "pay",        "meet",      "include",   "continue", "set",     "learn",  "lead",
      "understand", "watch",     "follow",    "stop",     "create",  "speak",  "read",
      "spend",      "grow",      "open",      "walk",     "win",     "teach",  "offer",
      "remember",   "love",      "consider",  "appear",   "buy",     "wait",   "serve",
      "die",        "send",      "build",     "stay",     "fall",    "cut",    "reach",
      "kill",       "raise",     "pass",      "sell",     "decide",  "return", "explain",
      "hope",       "develop",   "carry",     "break",    "receive", "agree",  "support",
      "hit",        "produce",   "eat",       "cover",    "catch",   "draw",   "choose",
      "river",      "light",     "green",     "black",
  };
  return kWords;
}

namespace {

// Uniform integer in vLLM's range for a length and ratio.
int DrawLength(std::mt19937_64& rng, int length, double ratio, int minimum) {
  const int low = std::max(minimum, static_cast<int>(std::floor(length * (1.0 - ratio))));
  const int high = std::max(low, static_cast<int>(std::ceil(length * (1.0 + ratio))));
  return std::uniform_int_distribution<int>(low, high)(rng);
}

}  // namespace

Result<std::vector<WorkloadRequest>> MakeRandomWorkload(const WorkloadOptions& options) {
  if (options.input_len < 1 || options.output_len < 1) {
    return InvalidArgumentError("input and output lengths must be at least 1 token");
  }
  if (!(options.range_ratio >= 0 && options.range_ratio < 1)) {
    return InvalidArgumentError("range ratio must be in [0, 1), got " +
                                std::to_string(options.range_ratio));
  }
  if (options.format == PromptFormat::kTokenIds &&
      (options.token_id_min < 0 || options.token_id_min >= options.token_id_max)) {
    return InvalidArgumentError("token id range [" + std::to_string(options.token_id_min) + ", " +
                                std::to_string(options.token_id_max) + ") is empty");
  }
  std::mt19937_64 rng(options.seed);
  const auto& words = PromptWords();
  std::uniform_int_distribution<size_t> pick_word(0, words.size() - 1);
  std::uniform_int_distribution<int32_t> pick_id(options.token_id_min, options.token_id_max - 1);
  std::vector<WorkloadRequest> requests(options.num_prompts);
  for (WorkloadRequest& request : requests) {
    request.input_len = DrawLength(rng, options.input_len, options.range_ratio, 1);
    request.output_len = DrawLength(rng, options.output_len, options.range_ratio, 1);
  }
  for (WorkloadRequest& request : requests) {
    if (options.format == PromptFormat::kTokenIds) {
      request.prompt_ids.resize(static_cast<size_t>(request.input_len));
      for (int32_t& id : request.prompt_ids) id = pick_id(rng);
      continue;
    }
    for (int i = 0; i < request.input_len; ++i) {
      if (i > 0) request.prompt_text += ' ';
      request.prompt_text += words[pick_word(rng)];
    }
  }
  return requests;
}

}  // namespace pier::loadgen
