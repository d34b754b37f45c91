#pragma once
// A parsed completion request's prompts as token ids, under the server's context rules. One source for the HTTP
// server (Server::prepare) and the offline batch mode (cli/offline_requests), so both refuse the same requests
// with the same errors.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/openai_protocol.h"
#include "server/request_constraint.h"
#include "text/tokenizer.h"

namespace strata::server {

struct PromptRules {
  int64_t max_model_len = 8192;   // prompt + generated tokens per sequence
  int64_t vocab_size = 0;         // prompt token ids must lie in [0, vocab_size)
  std::string served_model_name;  // a request's "model", when given, must name it (404 otherwise)
  bool streaming = true;          // false where responses are written whole (offline batches): stream is refused
  // Compiles the grammars of structured outputs and tool_choice (server/request_constraint.h); null: a request
  // that asks for one is refused.
  text::grammar::GrammarCache* grammars = nullptr;
};

struct TokenizedPrompts {
  std::vector<std::vector<int32_t>> prompts;  // one per prompt of the request (chat: one)
  std::vector<int64_t> max_tokens;            // per prompt: given, or the default (chat: the rest of the context)
  std::vector<std::string> echo;              // per prompt, when the request echoes
  std::shared_ptr<const engine::OutputConstraint> constraint;  // what the output must follow (null: free)
};

// Throws RequestError for what the client got wrong (unknown model, streaming where there is none, a bad chat, ids
// outside the vocabulary, empty or too long prompts, a grammar that does not compile), in that order; any other
// Error is the server's own.
TokenizedPrompts tokenize_prompts(const CompletionRequest& request, const text::Tokenizer& tokenizer,
                                  const PromptRules& rules);

}  // namespace strata::server
