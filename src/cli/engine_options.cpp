#include "cli/engine_options.h"

#include <algorithm>

#include "core/error.h"
#include "model/state_pool.h"

namespace strata::cli {

EngineOptions read_engine_options(const Args& args, int64_t default_max_num_seqs) {
  EngineOptions o;
  o.max_num_seqs = positive_integer(args, "max-num-seqs", default_max_num_seqs);
  o.max_num_batched_tokens = positive_integer(args, "max-num-batched-tokens", 2048);
  o.state_bytes = args.has("state-memory") ? parse_byte_count(args.str("state-memory"), "state-memory") : 0;
  if (args.has("state-memory") && o.state_bytes < 1) fail("option --state-memory: expected a positive byte count");
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
  return ec;
}

}  // namespace strata::cli
