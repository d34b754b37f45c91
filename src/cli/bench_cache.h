#pragma once
// `strata bench --cache-ttft LIST`: time to first token of a prompt seen before against a cold one, through the
// engine and its prefix cache (cache/prefix_cache.h): cold (no cache; and with the cache, which also saves), a hit
// from host memory, and a hit from the cache directory read by a fresh cache (its files dropped from the page cache
// first, so the disk is read), and a hit of replay mode from host memory. Reports the cache's save and load costs
// and bandwidths beside.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace strata::cli {

// One entry per prompt length; `dir` is the cache directory to use (emptied first).
nlohmann::json cache_ttft(const model::Model& m, const std::vector<int64_t>& lengths, int64_t chunk,
                          const std::string& dir, int64_t repeats);

}  // namespace strata::cli
