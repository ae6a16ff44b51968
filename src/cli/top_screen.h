// TopScreen: the text of one `pier top` refresh, made from a server's /metrics (the scrape
// now and the one before it, for rates): a header, each model (state, instances up, running
// and waiting requests (a batcher's items), tokens per second, mean time to first token, KV in
// use), the queue by priority class, each model that runs batches (tensor and embedding
// models: queue, items per second, mean items per batch, mean queue and compute time), each
// device's memory as a bar with its pressure, each GPU's utilisation and memory, the demand
// and its forecast, and each worker process.
//
// Every line fits `width` columns (80 by default: a terminal's and tmux's default); names
// that do not fit are cut with "~". Sections with nothing to show (no GPU, no workers) are
// left out. A figure the server does not export is shown as "-".
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "metrics/exposition_reader.h"

namespace pier::cli {

struct TopScreenInput {
  std::string url;                                  // shown in the header
  std::string clock;                                // "12:34:56", shown in the header
  const metrics::ExpositionRead* now = nullptr;     // required
  const metrics::ExpositionRead* before = nullptr;  // the previous scrape; null: no rates yet
  double seconds_between = 0;                       // between the two scrapes
  int width = 80;
};

std::vector<std::string> RenderTopScreen(const TopScreenInput& input);

// "[#####     ]": `fraction` (clamped to 0..1) of `cells` filled.
std::string Bar(double fraction, int cells);

}  // namespace pier::cli
