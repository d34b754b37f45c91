#include "server/load_report.h"

#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cache/prefix_cache.h"
#include "core/error.h"

namespace strata::server {

LoadReport make_load_report(const engine::EngineStats& stats, int64_t total_blocks, const cache::PrefixCache* cache,
                            int64_t block_tokens, int64_t requests_in_flight) {
  LoadReport r;
  r.running = stats.running;
  r.waiting = stats.waiting;
  r.total_blocks = total_blocks;
  r.free_blocks = total_blocks - stats.used_blocks;
  r.kept_blocks = stats.kept_blocks;
  r.queued_prefill_tokens = stats.queued_prefill_tokens;
  r.requests_in_flight = requests_in_flight;
  r.block_tokens = cache ? cache->block_tokens() : block_tokens;
  r.cache_enabled = cache != nullptr;
  if (cache) {
    r.cache_mode = cache::reuse_mode_name(cache->config().mode);
    r.cache_salt = cache->salt("");
  }
  return r;
}

std::string block_hash_hex(const model::BlockHash& hash) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64, hash.high, hash.low);
  return buf;
}

std::optional<model::BlockHash> parse_block_hash_hex(const std::string& text) {
  if (text.size() != 32) return std::nullopt;
  uint64_t words[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    words[i / 16] = words[i / 16] << 4 | static_cast<uint64_t>(digit);
  }
  return model::BlockHash{words[1], words[0]};
}

std::string load_report_body(const LoadReport& r) {
  nlohmann::ordered_json cache = {{"enabled", r.cache_enabled}};
  if (r.cache_enabled) {
    cache["mode"] = r.cache_mode;
    cache["salt"] = block_hash_hex(r.cache_salt);
  }
  return nlohmann::ordered_json{{"role", disagg::to_string(r.role)},
                                {"running", r.running},
                                {"waiting", r.waiting},
                                {"free_blocks", r.free_blocks},
                                {"total_blocks", r.total_blocks},
                                {"kept_blocks", r.kept_blocks},
                                {"queued_prefill_tokens", r.queued_prefill_tokens},
                                {"requests_in_flight", r.requests_in_flight},
                                {"block_tokens", r.block_tokens},
                                {"cache", cache}}
      .dump();
}

LoadReport parse_load_report(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("load report: expected a JSON object, found '", body.substr(0, 200), "'");
  const auto count = [&](const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
      fail("load report: \"", key, "\" must be an integer ≥ 0, found ", it == j.end() ? "nothing" : it->dump());
    return it->get<int64_t>();
  };
  LoadReport r;
  if (const auto role = j.find("role"); role != j.end()) {  // absent in reports of replicas older than roles
    if (!role->is_string()) fail("load report: \"role\" must be a string");
    try {
      r.role = disagg::parse_role(role->get<std::string>());
    } catch (const Error& e) {
      fail("load report: \"role\": ", e.what());
    }
  }
  r.running = count("running");
  r.waiting = count("waiting");
  r.free_blocks = count("free_blocks");
  r.total_blocks = count("total_blocks");
  r.kept_blocks = count("kept_blocks");
  r.queued_prefill_tokens = count("queued_prefill_tokens");
  r.requests_in_flight = count("requests_in_flight");
  r.block_tokens = count("block_tokens");
  if (r.block_tokens < 1) fail("load report: \"block_tokens\" must be ≥ 1, found ", r.block_tokens);
  const auto cache = j.find("cache");
  if (cache == j.end() || !cache->is_object() || !cache->contains("enabled") || !(*cache)["enabled"].is_boolean())
    fail("load report: expected \"cache\": {\"enabled\": true|false, ...}");
  r.cache_enabled = (*cache)["enabled"].get<bool>();
  if (r.cache_enabled) {
    const auto mode = cache->find("mode");
    if (mode == cache->end() || !mode->is_string() || (*mode != "exact" && *mode != "replay"))
      fail("load report: \"cache.mode\" must be \"exact\" or \"replay\"");
    r.cache_mode = mode->get<std::string>();
    const auto salt = cache->find("salt");
    const std::optional<model::BlockHash> parsed =
        salt != cache->end() && salt->is_string() ? parse_block_hash_hex(salt->get<std::string>()) : std::nullopt;
    if (!parsed) fail("load report: \"cache.salt\" must be 32 lowercase hex digits");
    r.cache_salt = *parsed;
  }
  return r;
}

}  // namespace strata::server
