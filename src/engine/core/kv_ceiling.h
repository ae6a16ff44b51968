// The refusal of a request that needs more KV cache than its model could ever hold under the
// memory budget, worded once for every place that checks it: the engine's Submit (in-process),
// the supervisor's WorkerClient (a worker's lease is mirrored in the device's ledger) and the
// HTTP front end (which also sizes a default max_tokens by the same ceiling).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pier::engine {

// nullopt when a sequence of `tokens` positions (prompt + max_tokens) fits under
// `ceiling_tokens` (0: no ceiling); otherwise the message, naming the tokens and bytes needed
// and available (`bytes_per_token`: the KV bytes one position takes; 0 leaves bytes out).
std::optional<std::string> KvCeilingRefusal(int64_t tokens, int64_t ceiling_tokens,
                                            int64_t bytes_per_token);

}  // namespace pier::engine
