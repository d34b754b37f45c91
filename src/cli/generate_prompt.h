#pragma once
// One prompt of `strata generate`: --prompt-ids, --prompt or --chat read into token ids and what shapes the reply
// (a --chat file is read as `strata serve` reads a request body), and the reply shown as the prompt's mode asks:
// ids, text, or the parsed chat message.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/sampling_params.h"
#include "model/config.h"
#include "text/chat_request.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"
#ifdef STRATA_WITH_SERVER
#include "server/stop_matcher.h"
#endif

namespace strata::cli {

// How the prompt was given, and so how the output is shown.
enum class PromptMode { Ids, Text, Chat };

struct Prompt {
  PromptMode mode = PromptMode::Ids;
  std::string option = "prompt-ids";  // the option it came from, for error messages
  std::vector<int32_t> ids;
  std::optional<text::Tokenizer> tokenizer;
  text::ChatRequestOptions chat;
  // A --chat request's own token selection (temperature, stop, seed, ...) and max_tokens (its own, or the rest of
  // the context as the server defaults it); the command-line options override them.
  std::optional<engine::SamplingParams> chat_sampling;
  std::optional<int64_t> max_tokens;
  bool include_stop = false;  // the request's include_stop_str_in_output
  bool parallel_tool_calls = true;  // false: only the reply's first tool call is shown, as the server returns it
};

// The prompt the options give (exactly one of --prompt-ids, --prompt and --chat, checked by the caller). `context`
// is the sequence's limit (--max-model-len); a --chat request's prompt and max_tokens are checked against it.
Prompt read_prompt(const Args& args, const std::string& dir, const model::ModelConfig& mc, int64_t context);

// The generated text of the text modes, cut at a --chat request's stop string as the server cuts it.
class ReplyText {
 public:
  explicit ReplyText(const Prompt& p);
  bool push(int32_t id);  // takes the next token; false once a stop string has ended the text
  std::string finish();   // the whole text

 private:
  text::IncrementalDetokenizer detok_;
#ifdef STRATA_WITH_SERVER
  std::optional<server::StopMatcher> matcher_;  // when the request has stop strings
#endif
  std::string text_;
};

// Prints the reply: the ids (comma-separated), the text, or the chat message as JSON {"reasoning_content",
// "content", "tool_calls"}.
void print_output(const Prompt& p, const std::vector<int32_t>& generated, const std::string& text);

}  // namespace strata::cli
