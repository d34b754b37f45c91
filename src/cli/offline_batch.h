#pragma once
// Offline batch inference: a file of OpenAI requests through one Engine — the continuous-batching scheduler the
// server uses — and one output record per request, in input order (see offline_requests.h for both formats).
//
// Requests enter the engine in file order, up to twice --max-num-seqs sequences at a time, so the running batch
// stays full while finished requests are written out. Each choice of a request is its own engine sequence with
// seed + i, and its tokens go through the same CompletionStream as a server response; a line's record is
// therefore the body a non-streamed `strata serve` response would carry (apart from the random id and created).
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "cli/offline_requests.h"
#include "engine/engine.h"

namespace strata::model {
class Model;
}

namespace strata::cli {

class OfflineProgress;

struct OfflineSettings {
  engine::EngineConfig engine;
  OfflineLimits limits;  // limits.protocol.vocab_size is taken from the model
};

struct OfflineSummary {
  int64_t requests = 0, succeeded = 0, failed = 0;
  int64_t prompt_tokens = 0;     // usage of the requests that succeeded
  int64_t generated_tokens = 0;  // every token the engine sampled
  double wall_s = 0;
  engine::EngineStats engine;
};

// Runs every non-blank line of `lines` (line i of the file is lines[i - 1]) and writes one record per request to
// `out`, each followed by a newline. `progress` (may be null) is updated as requests finish.
OfflineSummary run_offline_batch(const model::Model& model, const text::Tokenizer& tokenizer,
                                 OfflineSettings settings, const std::vector<std::string>& lines, std::ostream& out,
                                 OfflineProgress* progress = nullptr);

}  // namespace strata::cli
