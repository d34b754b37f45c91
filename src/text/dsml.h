#pragma once
// The spellings that give a DeepSeek-V4 completion its structure, and small helpers for reading them as text
// streams in. OutputParser (output_parser.h) is the one user; this header exists to keep that file short.
//
// What a V4 completion looks like. Sources: deepseek-ai's reference encoder `encoding/encoding_dsv4.py`
// (shipped with the DeepSeek-V4 checkpoints; read as copied in
// github.com/sfxnz/DeepSeek-V4-Flash-Vision-Exp-vLLM-2x-DGX-Spark, encoding/encoding_dsv4.py: templates,
// `parse_message_from_completion_text`, `parse_tool_calls`, `decode_dsml_to_arguments`), and vLLM's parsers
// `vllm/tool_parsers/deepseekv4_tool_parser.py` (V4 = the V3.2 DSML grammar with the block renamed tool_calls),
// `vllm/tool_parsers/deepseekv32_tool_parser.py` and `vllm/reasoning/deepseek_v4_reasoning_parser.py`.
//
//   * Thinking mode: the prompt ends with "<｜Assistant｜><think>", so the completion starts inside the reasoning:
//     "{reasoning}</think>{content}". Chat mode: the prompt ends with "<｜Assistant｜></think>" and the completion is
//     content only (encoding_dsv4.py, render_message: thinking_start_token / thinking_end_token).
//   * Tool calls follow the content as one block, separated from it by "\n\n" (the reference parser's start token
//     is "\n\n<｜DSML｜tool_calls"; the encoder writes content + "\n\n" + block):
//         <｜DSML｜tool_calls>
//         <｜DSML｜invoke name="get_weather">
//         <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//         <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//         </｜DSML｜invoke>
//         <｜DSML｜invoke name="...">            (parallel calls: more invokes in the same block)
//         ...
//         </｜DSML｜invoke>
//         </｜DSML｜tool_calls>
//     SGLang's detector likewise drops the "\n\n" before the block (deepseekv4_detector.py, _extract_preamble).
//     One "\n" separates the tags (tool_calls_template, tool_call_template, encode_arguments_to_dsml); the
//     value sits between '>' and "</｜DSML｜parameter>" untouched (no escaping, newlines kept).
//   * string="true": the value is raw text and becomes a JSON string; string="false": the value is JSON text
//     (number, boolean, null, array, object) inserted as is. The reference rebuilds the arguments as
//     "{" + ", ".join(json.dumps(key) + ": " + value) + "}" (decode_dsml_to_arguments); we use the same
//     separators. Tool arguments end up in the order the parameters were written.
//   * The completion ends with the end-of-sentence token "<｜end▁of▁sentence｜>" (assistant_msg_template); nothing
//     follows the tool_calls block but that token.
//   * vLLM also ends the reasoning when a tool_calls block starts before "</think>"
//     (deepseek_v4_reasoning_parser.py), and SGLang's DeepSeekV4Detector accepts a JSON object written directly
//     inside an invoke instead of parameters (python/sglang/srt/function_call/deepseekv4_detector.py, "Format 2").
//
// The fullwidth bar is U+FF5C (bytes EF BD 9C) and the word separator in end▁of▁sentence is U+2581.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text::dsml {

inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kEndOfSentence = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kToolCallsOpen = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kToolCallsOpenAfterText = "\n\n<｜DSML｜tool_calls>";
inline constexpr std::string_view kToolCallsClose = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";  // then attributes and '>'
inline constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
inline constexpr std::string_view kParameterOpen = "<｜DSML｜parameter";  // then attributes and '>'
inline constexpr std::string_view kParameterClose = "</｜DSML｜parameter>";
inline constexpr std::string_view kOpenPrefix = "<｜DSML｜";  // any DSML tag
inline constexpr std::string_view kClosePrefix = "</｜DSML｜";
static_assert(kOpenPrefix.size() == 11 && kEndOfSentence.size() == 27, "source must be read as UTF-8");

// The tags of one encoding's tool calls. V4 (above); DeepSeek-V4.1 (`encoding_dsv41`) puts a space before each tag
// name and calls the block " calls": <｜DSML｜ calls>, <｜DSML｜ invoke name="...">, <｜DSML｜ parameter ...>. The
// grammar is the same otherwise (docs/chat_encoding_v41.md).
struct Tags {
  std::string_view tool_calls_open, tool_calls_open_after_text, tool_calls_close, invoke_open, invoke_close,
      parameter_open, parameter_close;
};
inline constexpr Tags kV4Tags{kToolCallsOpen, kToolCallsOpenAfterText, kToolCallsClose, kInvokeOpen,
                              kInvokeClose,   kParameterOpen,          kParameterClose};
inline constexpr Tags kV41Tags{"<｜DSML｜ calls>",  "\n\n<｜DSML｜ calls>",  "</｜DSML｜ calls>",
                               "<｜DSML｜ invoke", "</｜DSML｜ invoke>",   "<｜DSML｜ parameter",
                               "</｜DSML｜ parameter>"};

// A tag longer than this is malformed. Names are short (OpenAI caps function names at 64 characters); the bound
// keeps the text held back while a tag is still incomplete small.
inline constexpr size_t kMaxTagLength = 512;

// kFull: `text` starts with `literal`. kPartial: `text` is a non-empty proper prefix of `literal`, so more input
// could complete it. kNone otherwise.
enum class Match { kNone, kPartial, kFull };
Match match(std::string_view text, std::string_view literal);

// An opening tag `open` (kInvokeOpen, kParameterOpen) followed by attributes name="value" (each preceded by
// whitespace; a value holds no '"', '<', '>' or newline) and '>'.
struct Attribute {
  std::string name, value;
};
enum class TagStatus { kIncomplete, kMalformed, kComplete };
struct TagParse {
  TagStatus status = TagStatus::kIncomplete;
  size_t length = 0;  // bytes of the whole tag, when complete
  std::vector<Attribute> attributes;
  std::string error;  // what was expected and found, when malformed
};
// `text` must start with `open` or a prefix of it.
TagParse parse_open_tag(std::string_view text, std::string_view open);

// JSON string escaping as Python's json.dumps(..., ensure_ascii=False) does it: '"', '\\' and control characters
// escaped, every other byte copied (so UTF-8 stays as is).
void append_json_escaped(std::string& out, std::string_view raw);
std::string json_string(std::string_view raw);  // with the quotes

// Bytes at the end of `text` that begin a UTF-8 sequence whose remaining bytes have not arrived (0 to 3).
size_t incomplete_utf8_suffix(std::string_view text);

bool is_space(char c);

// A short, printable excerpt of `text` for warnings: at most `limit` bytes (cut on a character boundary),
// newlines shown as \n.
std::string excerpt(std::string_view text, size_t limit = 40);

}  // namespace strata::text::dsml
