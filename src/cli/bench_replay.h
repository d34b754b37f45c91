#pragma once
// `strata bench --cache-replay IDS` (and --cache-storage): what the prefix cache's replay mode (cache/prefix_cache.h, DeepSeek's bounded
// replay) costs in accuracy and saves in storage, against exact mode, on a real text (token ids, as
// `strata chat-template --ids` prints them):
//  - storage: a token block's bytes and a boundary's rows (sliding window + compressor rings, which replay mode
//    does not store) at this model's shapes, and the bytes each mode keeps for a prompt saved at its checkpoints;
//  - accuracy: for prefixes of the text cut at a block boundary, the logits of the next tokens after a replay of
//    the last K tokens against a cold prefill (largest and mean |Δ|, top-1 agreement), and how many greedy tokens
//    of a continuation agree before the first difference.
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace strata::cli {

// `lengths`: prompt lengths (prefixes of `ids`); `replays`: the K values; `continuation`: greedy tokens compared.
// Empty `ids`: the storage part only (`strata bench --cache-storage`).
nlohmann::json cache_replay(const model::Model& m, const std::vector<int32_t>& ids, const std::vector<int64_t>& lengths,
                            const std::vector<int64_t>& replays, int64_t continuation, int64_t checkpoint_every_blocks);

}  // namespace strata::cli
