#pragma once
// Streaming parser for DeepSeek-V4 completions: decoded text in, OpenAI-style deltas out — reasoning_content,
// content and tool_calls (DSML invoke blocks rebuilt as JSON arguments). The format it reads is described, with
// its sources, in text/dsml.h.
//
// Guarantees:
//  * Split-independence: however the text is cut into push() calls (mid-tag, mid-UTF-8), the concatenated deltas,
//    tool_calls() and warnings() are the same as for one push() of the whole text.
//  * Latency: only text that could still be the start of a tag (or an incomplete UTF-8 character) is held back;
//    string parameter values stream as they arrive; a string="false" value is held until its closing tag, since
//    only the whole value can be checked as JSON.
//  * No lost text and no exception on any input: malformed markup (unknown or misplaced DSML tags, bad attributes,
//    a second </think>, text after the end-of-sentence token, a block cut off by the end of generation) is kept
//    as content and reported by warnings(); a tool call already streamed when its block goes bad is closed so its
//    arguments stay valid JSON, and the markup from the fault onwards becomes content.
//  * Arguments are valid JSON whenever the input is valid UTF-8: {"key": value, ...} in parameter order, as the
//    reference decoder writes them. A string="false" value that is not JSON is passed as a string (warned).
//
// Usage (one parser per completion):
//   OutputParser parser({.thinking = true});
//   for (piece : detokenized pieces) send(parser.push(piece));
//   send(parser.finish());  for (w : parser.warnings()) log(w);
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_request.h"
#include "text/dsml.h"

namespace strata::text {

// One piece of one tool call. A call's first piece carries its id and name (and whatever of the arguments arrived
// with them); later pieces only append to the arguments. Calls are indexed 0, 1, ... in the order they start,
// across blocks.
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> id, name;
  std::string arguments_delta;
};

// What a push() or finish() adds. Strings are empty when nothing was added; tool_calls holds at most one entry
// per call index, in index order.
struct OutputDelta {
  std::string reasoning_content, content;
  std::vector<ToolCallDelta> tool_calls;
};

struct ParsedToolCall {
  std::string id, name, arguments /* JSON text */;
};

struct ParserOptions {
  bool thinking = false;      // the prompt ended with <think>: the output starts inside the reasoning
  bool tools_enabled = true;  // false: DSML is not parsed (kept as content, with a warning)
  // Tool call ids are this prefix followed by the call's index ("call_0", "call_1", ...). A server should make it
  // unique per response (e.g. "call_<request id>_") so ids stay unique across the turns of a conversation.
  std::string tool_call_id_prefix = "call_";
  // The tool-call tags the model writes: V4's, or DeepSeek-V4.1's spaced ones (dsml::kV41Tags).
  ChatEncoding encoding = ChatEncoding::kV4;
};

class OutputParser {
 public:
  explicit OutputParser(ParserOptions options);

  // Decoded text as it streams, split anywhere. Throws strata::Error if called after finish().
  OutputDelta push(std::string_view text);
  // End of generation: flushes held-back text; unterminated markup becomes content (with a warning) and an open
  // tool call is closed. Calling it again returns an empty delta.
  OutputDelta finish();

  const std::vector<ParsedToolCall>& tool_calls() const { return calls_; }  // completed calls so far
  // Problems met so far, oldest first, for the caller to log. Identical messages are reported once, and at most
  // kMaxWarnings are kept (then one line saying how many more there were).
  std::vector<std::string> warnings() const;
  static constexpr size_t kMaxWarnings = 32;

 private:
  enum class State {
    kReasoning,    // before </think>, thinking mode
    kContent,      // answer text
    kToolCalls,    // inside <｜DSML｜tool_calls>, between invokes
    kInvoke,       // inside <｜DSML｜invoke name="...">, between parameters
    kStringValue,  // a string="true" parameter value, streamed as a JSON string
    kJsonValue,    // a string="false" parameter value, held until its closing tag
    kJsonBody,     // a JSON object written directly inside an invoke (no parameters)
    kEnded,        // after <｜end▁of▁sentence｜>: anything more is content, with a warning
  };
  struct OpenCall {
    bool open = false;
    int index = 0;
    std::string id, name, arguments;
    bool arguments_started = false;  // "{" written by a parameter
    bool arguments_done = false;     // a direct JSON body was written whole
    std::vector<std::string> parameter_names;
  };

  void run(bool at_end);
  bool step_text(bool at_end);
  bool step_after_tool_calls(bool at_end);
  bool step_markup(bool at_end);
  bool step_tool_calls_tag(std::string_view rest, bool at_end);
  bool step_invoke_tag(std::string_view rest, bool at_end);
  bool step_value(bool at_end);

  void begin_call(std::string name);
  std::string key_prefix(std::string_view key);
  void begin_parameter(std::string name, bool is_string, std::string_view tag);
  void finish_json_value();
  bool finish_json_body();
  void end_call();
  void abandon_tool_calls(std::string_view why);

  int64_t input_offset() const;  // where pos_ is in the whole output, for warnings
  void emit_text(std::string_view text);
  void emit_arguments(std::string_view text);
  void warn(std::string message);

  ParserOptions options_;
  const dsml::Tags* tags_;  // the encoding's tool-call tags
  State state_;
  bool after_tool_calls_ = false;       // whitespace right after a block is markup if only EOS or a block follows
  size_t spaces_after_tool_calls_ = 0;  // how much of it was seen already
  bool finished_ = false;
  std::string buffer_;  // input not consumed yet: [pos_, end) is held back
  size_t pos_ = 0;
  int64_t buffer_offset_ = 0;  // where buffer_ starts in the whole output
  OutputDelta out_;            // what the current push()/finish() returns
  OpenCall call_;
  std::string block_opening_;                      // the current block's opening tag and layout, until its first invoke
  int block_calls_ = 0;                            // invokes begun in the current block
  std::string value_key_, value_tag_, value_raw_;  // the held string="false" value / JSON body
  std::vector<ParsedToolCall> calls_;
  std::vector<std::string> warnings_;
  size_t warnings_dropped_ = 0;
};

}  // namespace strata::text
