#pragma once
// The prompts of a serving benchmark (`strata bench serve`): what each request sends and how many tokens it asks
// for. Prompts are random token ids, so no tokenizer is needed on the client and the server skips tokenization,
// as vLLM's random dataset does.
//   random         every prompt: input_len random ids
//   shared-prefix  every prompt: the same prefix_len random ids (one of num_prefixes groups), then input_len
//                  random ids of its own — the case prefix caching and shared-prompt serving care about
//   growing-history  num_prefixes conversations (agent loops): request r is turn r / num_prefixes of conversation
//                  r % num_prefixes and sends the conversation's whole history — prefix_len ids, then input_len new
//                  ids for every turn so far, its own included (the replies are not in it: the client has no
//                  ids of them). Turns are in order, so a turn tends to follow its predecessor.
// With range_ratio r, each request's input and output lengths are drawn uniformly from [len·(1−r), len·(1+r)].
// Chat requests need text: their prompt is `input_len` random words (tokens are roughly words, and the server
// reports the true count in usage).
#include <cstdint>
#include <string>
#include <vector>

namespace strata::bench {

struct WorkloadConfig {
  std::string dataset = "random";  // random | shared-prefix | growing-history
  int64_t num_prompts = 100;
  int64_t input_len = 128;   // per prompt (the suffix, for shared-prefix)
  int64_t output_len = 128;  // max_tokens of each request
  int64_t prefix_len = 0;    // shared-prefix: tokens every prompt of a group starts with
  int64_t num_prefixes = 1;  // shared-prefix: groups, request i in group i % num_prefixes
  double range_ratio = 0.0;  // 0: every request has exactly input_len / output_len
  int32_t token_lo = 1000, token_hi = 30000;  // ids are drawn from [token_lo, token_hi)
  bool chat = false;         // text prompts for /v1/chat/completions
  uint64_t seed = 0;
};

struct BenchPrompt {
  std::vector<int32_t> ids;  // completions
  std::string text;          // chat
  int64_t input_len = 0;     // ids, or words for chat
  int64_t output_len = 0;
};

// The same config and seed give the same prompts. Throws strata::Error naming a bad field.
std::vector<BenchPrompt> make_workload(const WorkloadConfig& config);

}  // namespace strata::bench
