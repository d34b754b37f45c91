#pragma once
// DeepSeek-V4 chat encoding: an OpenAI chat-completions request body in, the V4 prompt out.
//
// This file is the encoding itself: a checked request (text/chat_request.h) rendered into prompt pieces. The
// JSON inside the prompt is spelled by text/python_json.h.
//
// The prompt format is the one of deepseek-ai's reference encoder `encoding/encoding_dsv4.py` (shipped with the
// V4 checkpoints; SGLang and vLLM carry it as `encoding_dsv4.py` / `deepseek_v4_encoding.py`). In short:
//
//   <｜begin▁of▁sentence｜>[max-effort preamble]{system}[\n\n## Tools ...][\n\n## Response Format: ...]
//   <｜User｜>{user}[\n\n<tool_result>{result}</tool_result>...]<｜Assistant｜><think> or </think>
//   [{reasoning}</think>]{content}[\n\n<｜DSML｜tool_calls>...</｜DSML｜tool_calls>]<｜end▁of▁sentence｜>
//   <｜User｜>...<｜Assistant｜><think>            (thinking mode; </think> in chat mode)
//
// How a request maps onto the reference encoder's inputs is written out (and executable) in
// tests/reference/chat_reference.py; tests/fixtures/chat holds requests and the reference's prompts for them.
//
// Control-token safety: the encoder returns the prompt as pieces. A control piece is a token the encoder itself
// inserts (its exact spelling); everything that came from the request — message text, reasoning, tool names,
// arguments, results, schemas — is a text piece, tokenized with special spellings as plain text. A request can
// therefore never smuggle "<｜User｜>" or "<｜end▁of▁sentence｜>" into the prompt as a control token.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

// The request side (ChatRequestOptions, ReasoningEffort, ToolChoice) comes along: every caller that encodes a
// request also hands its options to the output parser.
#include "text/chat_request.h"

namespace strata::text {

class Tokenizer;

// One piece of a prompt: either text from the conversation (tokenized with special spellings as plain text) or
// a control token the encoder itself inserts (its exact spelling, e.g. "<｜User｜>"). encode_chat_v4 never
// returns two adjacent text pieces nor an empty one.
struct PromptPiece {
  std::string text;
  bool control = false;
  bool operator==(const PromptPiece&) const = default;
};

// The control tokens the V4 encoder inserts (spellings from encoding_dsv4.py).
namespace v4_tokens {
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";  // DSML tags are "<" + kDsml + "invoke" and so on
}  // namespace v4_tokens
// All of the above, in that order.
const std::vector<std::string_view>& v4_control_spellings();

// What DeepSeek-V4.1's encoder (`encoding_dsv41`) adds: the system token, written before a leading system message
// (or the reasoning budget) and before every system message after it. V4.1 keeps V4's other tokens; its DSML tags
// are "<｜DSML｜ calls>", "<｜DSML｜ invoke ...>", "<｜DSML｜ parameter ...>" (a space before each name).
namespace v41_tokens {
inline constexpr std::string_view kSystem = "<｜System｜>";
}  // namespace v41_tokens
// The control spellings of `encoding`: V4's, and for V4.1 the system token too.
const std::vector<std::string_view>& control_spellings(ChatEncoding encoding);

// The prompt in `encoding`. V4.1 differs from V4 in (docs/chat_encoding_v41.md):
//   <｜begin▁of▁sentence｜>[<｜System｜>Reasoning Effort: N (range 1-100, ...)\n\n]  (thinking mode; N = budget)
//   [<｜System｜>]{system}[\n\n## Tools ... spaced DSML tags ...]                  (<｜System｜> once at the start)
//   <｜User｜>...<｜Assistant｜>...[<｜System｜>{mid-conversation system}<｜Assistant｜><think>]
// and a system message after the first opens the assistant's turn like a user message.
std::vector<PromptPiece> encode_chat(const nlohmann::ordered_json& request, ChatEncoding encoding);

// Reads an OpenAI chat-completions request body (text/chat_request.h: messages, tools, tool_choice,
// response_format, reasoning_effort, chat_template_kwargs.thinking) and renders the V4 prompt. Bad requests throw
// strata::Error naming the field (e.g. "messages[2].tool_calls[0].function.arguments: not valid JSON ...").
//
// Takes ordered_json because the prompt embeds tool schemas and response_format schemas serialized in the order
// the client wrote their keys (as the reference's json.dumps does); a nlohmann::json converts implicitly but has
// its keys sorted.
std::vector<PromptPiece> encode_chat_v4(const nlohmann::ordered_json& request);

// The same, from the request body's text; malformed JSON is a strata::Error (parse_chat_request_body).
std::vector<PromptPiece> encode_chat_v4_text(std::string_view request_body);

// The prompt as one string: the pieces concatenated.
std::string render_prompt(const std::vector<PromptPiece>& pieces);

// The prompt's token ids: text pieces encoded with parse_special=false (special spellings stay plain text),
// control pieces mapped to their ids. Consecutive text is one piece, so ids match tokenizing the rendered prompt
// whole (as the reference does) whenever the conversation's text holds no special spelling. Throws strata::Error
// if a control spelling is not a single token of `tokenizer` (e.g. "<think>" with a pre-V4 tokenizer.json).
std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, const std::vector<PromptPiece>& pieces);

}  // namespace strata::text
