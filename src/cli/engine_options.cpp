#include "cli/engine_options.h"

#include <algorithm>
#include <limits>

#include "cache/duration.h"
#include "core/error.h"
#include "model/state_pool.h"

namespace strata::cli {

const std::set<std::string> kCacheOptions = {"cache", "cache-dir", "cache-host-memory", "cache-disk", "cache-mode",
                                             "cache-replay-tokens", "cache-ttl-chat", "cache-ttl-agent",
                                             "cache-checkpoint-blocks"};
const char* const kCacheOptionsHelp =
    R"(  --cache on|off             reuse computed prompt prefixes across requests (default on): a prompt resumes from
                             the longest cached prefix, exactly as a cold prefill would have computed it
  --cache-dir DIR            also keep cached prefixes as files in DIR (a local disk, or a directory several
                             servers share): they survive restarts; default: host memory only
  --cache-host-memory BYTES  host memory for cached prefixes (default 4GiB)
  --cache-disk BYTES         room in --cache-dir (default 200GiB; less if the disk fills up)
  --cache-mode exact|replay  what is stored: exact = everything a bit-identical resume needs (default); replay =
                             compressed entries only, a hit re-runs the prefix's last tokens to rebuild the sliding
                             window (DeepSeek's bounded replay: less storage, not bit-identical; docs/kv_cache.md)
  --cache-replay-tokens N    replay mode: tokens re-run before a cached prefix's end (default 140; ≥ the window)
  --cache-ttl-chat D         how long a chat request's prefix lives after its last use (default 7d; 90s, 45m, 24h)
  --cache-ttl-agent D        the same for agent requests: those with tools or "cache_class": "agent" (default 3d)
  --cache-checkpoint-blocks N  save a long prompt's state every N token blocks as it is prefilled (default 32)
)";

const std::set<std::string> kSpeculativeOptions = {"speculative-tokens", "speculative-min-prob",
                                                   "speculative-forced-acceptance", "speculative-step-cost",
                                                   "speculative-verify", "speculative-catch-up"};
const char* const kSpeculativeOptionsHelp =
    R"(  --speculative-tokens N     speculative decoding with the model's MTP layer (docs/mtp.md): draft up to N tokens
                             (1..8) ahead and verify them in one forward; 0 = off (default). Greedy output is
                             identical to decoding without it; sampled output is an exact draw from the same
                             distribution. Needs a checkpoint with MTP layers (model init --mtp 1); grammar-
                             constrained requests speculate under their masks
  --speculative-min-prob P   stop a draft chain at the first draft the MTP layer gives less than P (default 0.1)
  --speculative-verify match|rejection
                             how a sampled request (temperature > 0) checks a draft. match (default): the draft is
                             the MTP layer's greedy pick, kept when it is the token the request draws there with its
                             own seed — the output is the run without speculation's, bit for bit, whatever the draft
                             length or batch; rejection: drafts drawn from the MTP layer's distribution and
                             speculative sampling's rule (more drafts accepted at high temperature; the same output
                             distribution, but which tokens depends on the drafts verified)
  --speculative-step-cost R  the draft planner's cost model: a step costs R rows' worth of fixed work (reading the
                             weights) plus one per row, and a draft row is verified only while it raises the expected
                             tokens per unit of that cost (default 8; large on a GPU, where a decode step is bound by
                             reading the weights and rows are nearly free; "inf" verifies every draft)
  --speculative-catch-up kept|verified
                             the MTP layer's catch-up after a verify step runs over the kept rows (kept, the
                             default) or over every verified row (verified: the rejected ones as spare rows, so the
                             step has the verify step's shape and a GPU replays it as one CUDA graph, at the spare
                             rows' cost). The drafts are the same either way
  --speculative-forced-acceptance A
                             BENCHMARKS ONLY: accept each verified draft with probability A instead of checking it
                             against the model (a rejected one becomes the model's token), to time speculation at a
                             chosen acceptance on random weights; the output is then not the model's
)";

std::set<std::string> with_speculative_options(std::set<std::string> valued) {
  valued.insert(kSpeculativeOptions.begin(), kSpeculativeOptions.end());
  return valued;
}

engine::SpeculativeConfig read_speculative_options(const Args& args) {
  engine::SpeculativeConfig c;
  c.tokens = args.integer("speculative-tokens", 0);
  if (c.tokens < 0 || c.tokens > engine::SpeculativeConfig::kMaxTokens)
    fail("option --speculative-tokens: expected 0 (off) to ", engine::SpeculativeConfig::kMaxTokens, " draft tokens, found ", c.tokens);
  c.min_prob = args.number("speculative-min-prob", c.min_prob);
  if (!(c.min_prob >= 0.0 && c.min_prob <= 1.0))
    fail("option --speculative-min-prob: expected a probability in [0, 1], found ", c.min_prob);
  if (args.has("speculative-min-prob") && c.tokens == 0)
    fail("option --speculative-min-prob: needs --speculative-tokens N with N ≥ 1");
  if (args.has("speculative-forced-acceptance")) {
    const double a = args.number("speculative-forced-acceptance", 0.0);
    if (!(a >= 0.0 && a <= 1.0))
      fail("option --speculative-forced-acceptance: expected a probability in [0, 1], found ", a);
    if (c.tokens == 0) fail("option --speculative-forced-acceptance: needs --speculative-tokens N with N ≥ 1");
    c.forced_acceptance = a;
  }
  if (args.has("speculative-verify")) {
    if (c.tokens == 0) fail("option --speculative-verify: needs --speculative-tokens N with N ≥ 1");
    const std::string v = args.str("speculative-verify");
    if (v != "match" && v != "rejection") fail("option --speculative-verify: expected match or rejection, found '", v, "'");
    c.verify = v == "match" ? engine::SpeculativeConfig::Verify::Match : engine::SpeculativeConfig::Verify::Rejection;
  }
  if (args.has("speculative-catch-up")) {
    if (c.tokens == 0) fail("option --speculative-catch-up: needs --speculative-tokens N with N ≥ 1");
    const std::string v = args.str("speculative-catch-up");
    if (v != "verified" && v != "kept") fail("option --speculative-catch-up: expected verified or kept, found '", v, "'");
    c.catch_up_all_rows = v == "verified";
  }
  if (args.has("speculative-step-cost")) {
    if (c.tokens == 0) fail("option --speculative-step-cost: needs --speculative-tokens N with N ≥ 1");
    const std::string v = args.str("speculative-step-cost");
    c.step_cost_rows = v == "inf" ? std::numeric_limits<double>::infinity() : args.number("speculative-step-cost", 0.0);
    if (!(c.step_cost_rows >= 0.0))
      fail("option --speculative-step-cost: expected a number of rows ≥ 0 or \"inf\", found '", v, "'");
  }
  return c;
}

std::set<std::string> with_cache_options(std::set<std::string> valued) {
  valued.insert(kCacheOptions.begin(), kCacheOptions.end());
  return valued;
}

EngineOptions read_engine_options(const Args& args, int64_t default_max_num_seqs) {
  EngineOptions o;
  o.max_num_seqs = positive_integer(args, "max-num-seqs", default_max_num_seqs);
  o.max_num_batched_tokens = positive_integer(args, "max-num-batched-tokens", 2048);
  o.state_bytes = args.has("state-memory") ? parse_byte_count(args.str("state-memory"), "state-memory") : 0;
  if (args.has("state-memory") && o.state_bytes < 1) fail("option --state-memory: expected a positive byte count");

  const std::string cache = args.str("cache", "on");
  if (cache != "on" && cache != "off") fail("option --cache: expected on or off, found '", cache, "'");
  o.cache = cache == "on";
  if (!o.cache)
    for (const std::string& name : kCacheOptions)
      if (name != "cache" && args.has(name)) fail("option --", name, " needs the cache, which --cache off turns off");
  cache::CacheConfig& c = o.cache_config;
  c.store.dir = args.str("cache-dir");
  if (args.has("cache-dir") && c.store.dir.empty()) fail("option --cache-dir: expected a directory");
  c.store.host_bytes = args.has("cache-host-memory") ? parse_byte_count(args.str("cache-host-memory"), "cache-host-memory")
                                                     : int64_t{4} << 30;
  c.store.disk_bytes = args.has("cache-disk") ? parse_byte_count(args.str("cache-disk"), "cache-disk") : int64_t{200} << 30;
  if (args.has("cache-disk") && !args.has("cache-dir")) fail("option --cache-disk: needs --cache-dir");
  const std::string mode = args.str("cache-mode", "exact");
  if (mode != "exact" && mode != "replay") fail("option --cache-mode: expected exact or replay, found '", mode, "'");
  c.mode = mode == "exact" ? cache::ReuseMode::Exact : cache::ReuseMode::Replay;
  c.replay_tokens = positive_integer(args, "cache-replay-tokens", c.replay_tokens);
  if (args.has("cache-replay-tokens") && c.mode != cache::ReuseMode::Replay)
    fail("option --cache-replay-tokens: needs --cache-mode replay");
  auto duration = [&](const char* name, int64_t fallback) {
    if (!args.has(name)) return fallback;
    try {
      return cache::parse_duration_seconds(args.str(name));
    } catch (const Error& e) {
      fail("option --", name, ": ", e.what());
    }
  };
  c.ttl_chat_seconds = duration("cache-ttl-chat", c.ttl_chat_seconds);
  c.ttl_agent_seconds = duration("cache-ttl-agent", c.ttl_agent_seconds);
  c.checkpoint_every_blocks = positive_integer(args, "cache-checkpoint-blocks", c.checkpoint_every_blocks);
  o.speculative = read_speculative_options(args);
  return o;
}

engine::EngineConfig make_engine_config(const EngineOptions& o, const Args& args, const model::Model& model) {
  const model::ModelConfig& mc = model.config();
  engine::EngineConfig ec;
  ec.max_model_len = args.integer("max-model-len", std::min<int64_t>(8192, mc.max_position_embeddings));
  if (ec.max_model_len < 2 || ec.max_model_len > mc.max_position_embeddings)
    fail("option --max-model-len: expected 2..", mc.max_position_embeddings, " (the model's max_position_embeddings), found ",
         ec.max_model_len);
  ec.scheduler.max_num_seqs = o.max_num_seqs;
  ec.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  if (o.state_bytes > 0)
    ec.pool = model::StatePool::limits_for_bytes(model, o.state_bytes, o.max_num_seqs);
  else
    ec.pool.max_sequences = o.max_num_seqs;
  // A model without compressed attention keeps no token blocks: nothing to cache.
  if (o.cache && model.state_layout().block_floats > 0) ec.cache = std::make_shared<cache::PrefixCache>(model, o.cache_config);
  ec.speculative = o.speculative;
  return ec;
}

}  // namespace strata::cli
