#pragma once
// One generation stream: a request's prompt, its sampled tokens so far, and where it stands in the engine.
#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/output_constraint.h"
#include "engine/sampler.h"
#include "core/tensor.h"
#include "engine/sampling_params.h"
#include "engine/speculative_counts.h"
#include "engine/state_stream.h"
#include "model/token_blocks.h"

namespace strata::engine {

// How a request uses the prefix cache (cache/prefix_cache.h), when the engine has one.
struct CacheOptions {
  bool enabled = true;
  std::string scope;        // isolation: only requests of the same scope share entries ("" = everyone's)
  int64_t ttl_seconds = 0;  // how long its entries live past their last use; 0: the cache's chat default
};

// A sequence's part in the prefix cache.
struct SequenceCache {
  std::vector<model::BlockHash> hashes;  // of its known tokens' full blocks, chained from the scope's salt
  model::BlockHash salt;
  int64_t ttl_seconds = 0;
  // Prompt tokens restored at the admission that produced its first token (what the usage reports).
  int64_t cached_tokens = 0;
  // The end of the prompt's longest prefix whose blocks were cached (seen before) when it was admitted, if it lies
  // past what could be restored: a common prefix of several requests, checkpointed there so the next one resumes.
  int64_t seen_prefix_end = 0;
  // The last block boundary decode passed (its blocks, and in exact mode its boundary rows), saved when it finishes.
  std::string staged_rows;
  int64_t staged_blocks = 0;
};

// Prefill/decode disaggregation (disagg/): a sequence's state made by one engine and continued by another.
struct StateHandoff {
  // Prefill side: compute the whole prompt, write its state into this stream piece by piece (Model::snapshot_pieces,
  // then finish; fail if the sequence ends without it), and finish with reason Stop, sampling nothing.
  std::shared_ptr<StateStream> export_to;
  // With export_to, on a host shared with its reader: the floats go into a shared region (Model::make_shared_region:
  // CUDA IPC memory, POSIX shared memory) and the stream carries the skeleton; where the model cannot make one, the
  // floats go in the bytes as usual.
  bool export_shared = false;
  // Decode side: the state of the prompt's first tokens, computed by another engine and arriving here as a stream.
  // At admission the sequence takes a slot and the token blocks of its whole prompt, then waits (holding them)
  // while each layer is restored as its bytes arrive; when the last one is in, it computes the last prompt token.
  // If the stream fails or its bytes cannot be used (damaged, another model, more tokens than the prompt has but
  // one), those tokens are computed here instead.
  std::shared_ptr<StateStream> incoming;
  bool exports() const { return export_to != nullptr; }
};
// Speculative decoding with the model's MTP layer (engine/drafter.h, docs/mtp.md): the drafts proposed for the
// positions after the sequence's last token, and the main model's last-layer streams the MTP layer has not
// consumed yet.
struct SequenceDrafts {
  bool enabled = false;  // it speculates: the engine's option is on, and no logits capture or state export
  std::vector<int32_t> tokens;            // d_1, d_2, … for positions num_tokens(), num_tokens() + 1, …
  std::vector<float> probs;               // the draft distribution's probability of each (the planner's confidence)
  std::vector<std::vector<float>> dists;  // each one's draft distribution q (sampling); empty when greedy
  int64_t planned = 0;                    // how many of them the next step verifies (engine/draft_planner.h)
  // Structured outputs: the grammar mask of the row after each planned draft (the pick with drafts 0..j taken).
  std::vector<std::shared_ptr<const model::TokenMask>> masks;
  Mat streams;                            // main model's last-layer streams of positions streams_from onward
  int64_t streams_from = -1;
  SpeculativeCounts counts;
  void clear_drafts() {
    tokens.clear();
    probs.clear();
    dists.clear();
    masks.clear();
    planned = 0;
  }
  void clear() {  // preempted: its state, and the MTP layer's with it, is gone
    clear_drafts();
    streams = Mat();
    streams_from = -1;
  }
};

enum class SequenceStatus { Waiting, Running, Finished };
enum class FinishReason { None, Stop, Length, Abort };
const char* to_string(FinishReason r);  // OpenAI spellings: "stop", "length", "abort"

struct Sequence {
  uint64_t id = 0;
  std::string request_id;
  int64_t index = 0;  // which of the request's n completions
  std::vector<int32_t> prompt, output;
  SamplingParams params;
  uint64_t seed = 0;  // the request's seed, or one drawn at admission; completion i uses seed + i
  TokenHistory history;

  SequenceStatus status = SequenceStatus::Waiting;
  FinishReason finish = FinishReason::None;
  int32_t slot = -1;          // its state's slot in the StatePool while running, else -1
  int64_t num_computed = 0;   // tokens already folded into that state
  int64_t preemptions = 0;
  std::chrono::steady_clock::time_point arrival;
  // A logits capture (SamplingParams::capture_logits): the raw logits of every prompt position, gathered as the
  // prompt's spans run (so far `captured_rows` rows), handed over with the first token.
  std::vector<float> prompt_logits;
  int64_t captured_rows = 0;
  std::optional<SequenceCache> cache;  // set when it uses the engine's prefix cache
  std::unique_ptr<ConstrainedOutput> constrained;  // set when params.constraint is (structured outputs)
  StateHandoff handoff;
  bool imported = false;        // its state at the first token came from handoff.incoming
  bool awaiting_state = false;  // holds its slot while handoff.incoming's layers are restored: not scheduled
  SequenceDrafts spec;

  int64_t num_tokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    const auto p = static_cast<int64_t>(prompt.size());
    return i < p ? prompt[static_cast<size_t>(i)] : output[static_cast<size_t>(i - p)];
  }
  // Tokens known but not yet in the state: the rest of the prompt, or (after preemption) prompt + outputs.
  int64_t num_uncomputed() const { return num_tokens() - num_computed; }
};

}  // namespace strata::engine
