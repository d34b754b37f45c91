#pragma once
// The OpenAI HTTP API as Strata speaks it: request bodies of /v1/chat/completions and /v1/completions in,
// validated parameters out; error bodies; the JSON pieces of responses and stream chunks.
//
// Strictness: every field a request may carry is listed here. An unknown field, a field of the wrong type or a
// value out of range is a RequestError (HTTP 400) whose `param` names the field, e.g.
//   {"error":{"message":"top_p: expected a number in (0, 1], found 2","type":"invalid_request_error",
//             "param":"top_p","code":null}}
// A JSON null counts as "not given" for every optional field (some clients send nulls for unset fields).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/sampling_params.h"
#include "text/chat_request.h"
#include "text/grammar/grammar_cache.h"

namespace strata::server {

// An error that becomes an HTTP response with an OpenAI-style body. `param` is the offending field ("" when
// none); `code` is OpenAI's machine-readable code ("" → null), e.g. "model_not_found", "invalid_api_key".
class RequestError : public Error {
 public:
  RequestError(int status, std::string param, const std::string& message, std::string type = "invalid_request_error",
               std::string code = "")
      : Error(message), status_(status), param_(std::move(param)), type_(std::move(type)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_, type_, code_;
};

// {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}
std::string error_body(std::string_view message, std::string_view type, std::string_view param, std::string_view code);
std::string error_body(const RequestError& e);

// A strata::Error from a lower layer (text encoding, engine validation) as a 400: its message starts with the
// field it is about ("top_p: expected ...", "messages[2].content: ..."); that prefix becomes `param`.
// `rename` maps a lower layer's name to the API's (the engine says "prompt" where a chat request says "messages").
RequestError as_request_error(const Error& e, std::string_view rename_prompt_to = "");

enum class Endpoint { kChatCompletions, kCompletions };

// A completions prompt: text, or token ids given directly.
using PromptInput = std::variant<std::string, std::vector<int32_t>>;

// Server-side limits a request is checked against while it is parsed.
struct ProtocolLimits {
  int64_t max_n = 16;            // completions per prompt
  int64_t max_prompts = 16;      // prompts in one /v1/completions batch
  int64_t max_stop_strings = 16;
  int64_t max_stop_bytes = 256;  // per stop string
  int64_t vocab_size = 1 << 30;  // the model's: stop_token_ids must lie below it
};

// Structured outputs: the grammar a request's output must follow, as the grammar cache takes it
// (text/grammar/grammar_cache.h), and the field it came from (for errors).
struct OutputGrammar {
  text::grammar::SourceKind kind = text::grammar::SourceKind::kJsonObject;
  std::string source;  // JSON Schema text, regex, EBNF, or a JSON array of choices
  std::string param;   // "response_format", "structured_outputs.regex", ...
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;  // as the client wrote it; empty when absent
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage and no choices

  // Token selection, with stop strings and n. `sampling.max_tokens` is meaningful only when max_tokens_given;
  // otherwise the server fills it from the context left after the prompt. `sampling.n` is the number of choices
  // per prompt; the server submits each choice to the engine as its own sequence.
  engine::SamplingParams sampling;
  bool max_tokens_given = false;
  std::string max_tokens_param = "max_tokens";  // the name the client used (chat: or max_completion_tokens)

  bool logprobs = false;         // report the chosen tokens' logprobs (chat: logprobs; completions: logprobs ≥ 0)
  int64_t top_logprobs = 0;      // alternatives per position (chat: top_logprobs; completions: the logprobs count)
  bool skip_special_tokens = true;          // vLLM: special tokens (BOS, EOS) are left out of the text
  bool include_stop_str_in_output = false;  // vLLM: keep the matched stop string at the end of the text

  // Chat: the body as given (the V4 encoder reads messages, tools, tool_choice, response_format,
  // reasoning_effort, chat_template_kwargs from it) and the options it implies for the output parser.
  nlohmann::ordered_json chat;
  text::ChatRequestOptions chat_options;
  bool parallel_tool_calls = true;  // false: a reply carries only its first tool call (the model may write more)

  // response_format (chat: json_object, json_schema) or vLLM's structured_outputs (regex, json, grammar, choice);
  // at most one of them.
  std::optional<OutputGrammar> grammar;

  // The prefix cache (cache/prefix_cache.h). prompt_cache_key: OpenAI's; only requests with the same key share
  // cached prefixes (and a router may send them to one replica). cache_class: "chat" or "agent" (the default is
  // agent when the request carries tools), which picks the time to live; prompt_cache_retention overrides it
  // ("in-memory": an hour, "24h", or any duration such as "90m", "3d").
  std::string prompt_cache_key;
  std::string cache_class;
  std::optional<int64_t> cache_retention_seconds;

  // Completions.
  std::vector<PromptInput> prompts;  // one, or a batch
  bool echo = false;                 // prepend the prompt to each choice's text
  bool add_special_tokens = true;    // vLLM: a text prompt gets the tokenizer's BOS
};

// Parses and validates a request body. Throws RequestError (400, naming the field) for anything the server does
// not understand or accept; the messages/tools/... of a chat request are checked by the V4 chat encoder.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body, const ProtocolLimits& limits);

// Token usage of a response.
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens restored from the prefix cache (OpenAI's and DeepSeek's fields)
  nlohmann::ordered_json to_json() const;
};

// "chatcmpl-…" / "cmpl-…": a prefix and 24 random hex digits.
std::string new_response_id(Endpoint endpoint);

}  // namespace strata::server
