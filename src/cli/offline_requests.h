#pragma once
// The lines of an offline batch (`strata generate --input FILE.jsonl`): each line is one OpenAI request, read,
// validated and tokenized exactly as `strata serve` does for an HTTP body, and each gets one output record.
//
// An input line is either a request body, chat if it has "messages", completions otherwise:
//   {"custom_id": "q1", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}
//   {"id": 7, "prompt": [5, 6, 7], "max_tokens": 8, "temperature": 0}
// ("custom_id", or "id", is any JSON string or number; it is taken out of the body and carried to the record)
// or a line of OpenAI's batch API, whose url picks the endpoint:
//   {"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}
//
// The output record of line N (1-based, counting every line of the file):
//   {"line": N, "custom_id": ..., "response": {"status_code": 200, "body": <the server's response body>},
//    "error": null}
// and for a request the server would refuse:
//   {"line": N, "custom_id": ..., "response": {"status_code": 400, "body": {"error": {...}}},
//    "error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// "custom_id" is null when the line has none. Blank lines are not requests and get no record.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/output_constraint.h"
#include "server/openai_protocol.h"
#include "text/grammar/grammar_cache.h"

namespace strata::text {
class Tokenizer;
}

namespace strata::cli {

// What the server would check a request against.
struct OfflineLimits {
  server::ProtocolLimits protocol;
  int64_t max_model_len = 8192;   // prompt + generated tokens per sequence
  std::string served_model_name;  // a request's "model", when given, must name it (404 otherwise)
  // The grammar cache of structured outputs and tool_choice, built on first use (server/request_constraint.h).
  std::function<text::grammar::GrammarCache&()> grammars;
  text::grammar::GrammarCacheLimits grammar_limits;  // the caps `grammars` is built with
};

// One input line, parsed and tokenized: ready for the engine, or refused with the error the server would send.
struct OfflineRequest {
  int64_t line = 0;
  nlohmann::ordered_json custom_id;  // null when absent
  std::optional<server::RequestError> error;
  server::CompletionRequest request;
  std::vector<std::vector<int32_t>> prompts;  // one per prompt of the request
  std::vector<int64_t> max_tokens;            // per prompt: given, or the server's default
  std::vector<std::string> echo;              // per prompt, when the request echoes
  std::shared_ptr<const engine::OutputConstraint> constraint;  // structured outputs / tool_choice (null: none)
};

OfflineRequest prepare_offline_request(int64_t line, std::string_view text, const text::Tokenizer& tokenizer,
                                       const OfflineLimits& limits);

// The output record of a line (one line of JSON, no newline).
std::string success_record(int64_t line, const nlohmann::ordered_json& custom_id, const std::string& response_body);
std::string error_record(int64_t line, const nlohmann::ordered_json& custom_id, const server::RequestError& error);

}  // namespace strata::cli
