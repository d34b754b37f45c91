#pragma once
// One request's output side, free of I/O: for each choice, the engine's token events go through the
// detokenizer, the stop-string matcher and (chat) the V4 output parser, and come out as OpenAI stream chunks
// (SSE frames) or, at the end, as one response body.
//
// Text and logprobs: the text of a token that ends a sequence as a stop token (EOS or one of stop_token_ids) is
// left out, as are its logprobs; it still counts in usage. A stop string ends its choice at once: the text before
// it is sent, the rest is dropped, and the caller aborts the engine sequence (update.abort_sequence).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/openai_protocol.h"
#include "server/stop_matcher.h"
#include "text/detokenizer.h"
#include "text/output_parser.h"

namespace strata::text {
class Tokenizer;
}

namespace strata::server {

// One server-sent event: "data: <payload>\n\n". The payload must hold no newline (compact JSON does not).
std::string sse_event(std::string_view payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// What one engine event changed.
struct StreamUpdate {
  std::string sse;              // frames to send now (stream mode; empty otherwise)
  bool choice_finished = false;  // this event ended its choice
  bool abort_sequence = false;   // ended by a stop string while the engine still runs it: abort it
};

class CompletionStream {
 public:
  // `prompt_tokens[p]`: the token count of prompt p; `echo[p]`: its text when the request echoes prompts.
  // Choice c belongs to prompt c / n.
  CompletionStream(const CompletionRequest& request, const text::Tokenizer& tokenizer, std::string id, int64_t created,
                   std::string model, std::vector<int64_t> prompt_tokens, std::vector<std::string> echo = {});

  size_t num_choices() const { return choices_.size(); }
  const std::string& id() const { return id_; }

  // The frames that open a stream: chat sends each choice's role first; completions send echoed prompts.
  std::string begin_sse();
  StreamUpdate on_event(size_t choice, const engine::TokenEvent& event);
  bool done() const { return unfinished_ == 0; }
  // The frames that close a stream: the usage chunk (stream_options.include_usage) and [DONE].
  std::string end_sse() const;

  // The whole response (stream=false), once done().
  std::string response_body() const;
  Usage usage() const;
  // Tokens generated so far by choice c (stop tokens included), and whether it has finished.
  int64_t choice_tokens(size_t c) const { return choices_[c].tokens; }
  const std::string& finish_reason(size_t c) const { return choices_[c].finish_reason; }

 private:
  struct ToolCall {
    std::string id, name, arguments;
  };
  struct Choice {
    Choice(const text::Tokenizer& tokenizer, bool skip_special, std::vector<std::string> stops, bool include_stop);
    text::IncrementalDetokenizer detokenizer;
    StopMatcher stop;
    std::optional<text::OutputParser> parser;  // chat only
    size_t prompt = 0;
    int64_t tokens = 0;
    int64_t cached_tokens = 0;  // of its prompt, restored from the prefix cache (from its first event)
    int64_t chars = 0;  // code points of text so far (completions' text_offset)
    bool finished = false;
    std::string finish_reason;
    // Everything sent so far (the non-stream response is built from these).
    std::string text, reasoning;
    std::vector<ToolCall> tool_calls;
    nlohmann::ordered_json logprobs;  // chat: [entries]; completions: {tokens, token_logprobs, ...}
  };

  // This event's logprobs entry (chat: one object; completions: columns appended to `completion_columns`).
  void add_logprobs(Choice& c, const engine::TokenEvent& event, nlohmann::ordered_json& chunk_logprobs) const;
  nlohmann::ordered_json envelope(bool chunk) const;
  std::string chunk_sse(nlohmann::ordered_json choice) const;
  // A chunk whose choice carries only text (no logprobs, reasoning or tool calls): the common streamed token,
  // written straight into the frame — the bytes chunk_sse would write for the same choice.
  std::string text_chunk_sse(size_t index, const std::string& text, const Choice& c, bool ending) const;

  const text::Tokenizer& tokenizer_;
  Endpoint endpoint_;
  std::string id_, model_;
  int64_t created_;
  bool stream_, include_usage_, logprobs_;
  bool first_tool_call_only_;  // the request's parallel_tool_calls was false
  int64_t n_;
  std::vector<int64_t> prompt_tokens_;
  std::vector<std::string> echo_;
  std::vector<Choice> choices_;
  size_t unfinished_;
  // Every chunk frame is chunk_head_ + the choices + chunk_tail_: the envelope is serialised once per stream.
  std::string chunk_head_, chunk_tail_;
};

}  // namespace strata::server
