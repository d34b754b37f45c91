#include "text/chat_encoding.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"
#include "text/python_json.h"
#include "text/tokenizer.h"

namespace strata::text {

namespace {

using ojson = nlohmann::ordered_json;

// Python's truth value of a JSON value (the reference writes `if response_format:`).
bool truthy(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return false;
    case ojson::value_t::boolean: return v.get<bool>();
    case ojson::value_t::number_integer: return v.get<int64_t>() != 0;
    case ojson::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case ojson::value_t::number_float: return v.get<double>() != 0;
    case ojson::value_t::string: return !v.get_ref<const std::string&>().empty();
    default: return !v.empty();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The conversation as the V4 encoder sees it: tool results merged into user turns.

struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_call_id;
};

struct Turn {
  ChatRole role = ChatRole::kUser;
  std::string content;
  std::vector<Block> blocks;  // user turns
  std::string reasoning;
  std::vector<ChatToolCall> tool_calls;
  const ojson* tools = nullptr;            // system turn 0 only: the request's tools
  const ojson* response_format = nullptr;  // likewise
};

// merge_tool_messages: every user message and tool result joins the user turn right before it, if any.
std::vector<Turn> merge_into_turns(const std::vector<ChatMessage>& messages) {
  std::vector<Turn> turns;
  for (const ChatMessage& m : messages) {
    if (m.role == ChatRole::kUser || m.role == ChatRole::kTool) {
      Block block{m.role == ChatRole::kTool, m.content, m.tool_call_id};
      if (turns.empty() || turns.back().role != ChatRole::kUser) turns.push_back(Turn{ChatRole::kUser, m.content, {}, {}, {}});
      turns.back().blocks.push_back(std::move(block));
    } else {
      turns.push_back(Turn{m.role, m.content, {}, m.reasoning, m.tool_calls});
    }
  }
  return turns;
}

// sort_tool_results_by_call_order: within a user turn, tool results take the order of the calls of the last
// assistant turn that made calls (results of unknown ids count as position 0; the sort is stable).
void sort_tool_results(std::vector<Turn>& turns) {
  std::map<std::string, size_t> call_order;
  for (Turn& turn : turns) {
    if (turn.role == ChatRole::kAssistant && !turn.tool_calls.empty()) {
      call_order.clear();
      for (size_t i = 0; i < turn.tool_calls.size(); ++i)
        if (!turn.tool_calls[i].id.empty()) call_order[turn.tool_calls[i].id] = i;
    } else if (turn.role == ChatRole::kUser && !call_order.empty()) {
      std::vector<Block> results;
      for (const Block& b : turn.blocks)
        if (b.tool_result) results.push_back(b);
      if (results.size() < 2) continue;
      const auto position = [&](const Block& b) {
        const auto it = call_order.find(b.tool_call_id);
        return it == call_order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Block& a, const Block& b) { return position(a) < position(b); });
      size_t next = 0;
      for (Block& b : turn.blocks)
        if (b.tool_result) b = results[next++];
    }
  }
}

// A turn after which the assistant's turn opens: a user or developer turn, and in V4.1 a system turn other than
// the first (a mid-conversation system message counts as the user's, find_last_user_index).
bool asks(const std::vector<Turn>& turns, size_t i, ChatEncoding encoding) {
  const ChatRole role = turns[i].role;
  return role == ChatRole::kUser || role == ChatRole::kDeveloper ||
         (encoding == ChatEncoding::kV41 && role == ChatRole::kSystem && i > 0);
}

long last_user_index(const std::vector<Turn>& turns, ChatEncoding encoding) {
  for (size_t i = turns.size(); i-- > 0;)
    if (asks(turns, i, encoding)) return static_cast<long>(i);
  return -1;
}

// _drop_thinking_messages: before the last user/developer turn, assistant turns lose their reasoning and
// developer turns disappear.
std::vector<Turn> drop_old_thinking(std::vector<Turn> turns, ChatEncoding encoding) {
  const long last_user = last_user_index(turns, encoding);
  std::vector<Turn> kept;
  for (size_t i = 0; i < turns.size(); ++i) {
    Turn& turn = turns[i];
    const bool before = static_cast<long>(i) < last_user;
    if (before && turn.role == ChatRole::kDeveloper) continue;
    if (before && turn.role == ChatRole::kAssistant) turn.reasoning.clear();
    kept.push_back(std::move(turn));
  }
  return kept;
}

// ---------------------------------------------------------------------------------------------------------------
// Rendering.

// Texts of the reference encoder (encoding_dsv4.py), its {dsml_token}/{thinking_*_token} fields filled in.
constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// DSML tag names: V4 writes <｜DSML｜tool_calls>, <｜DSML｜invoke ...>, <｜DSML｜parameter ...>; V4.1 puts a space
// before each name and calls the block " calls" (encoding_dsv41's tool_calls_block_name and tag names).
struct DsmlNames {
  std::string_view calls, invoke, parameter;
};
constexpr DsmlNames kV4Names{"tool_calls", "invoke", "parameter"};
constexpr DsmlNames kV41Names{" calls", " invoke", " parameter"};

// TOOLS_TEMPLATE before {tool_schemas}, its {dsml_token}, tag names and {thinking_*_token} fields filled in.
std::string tools_head(const DsmlNames& n) {
  const std::string calls = cat("<｜DSML｜", n.calls, ">"), invoke = cat("｜DSML｜", n.invoke),
                    parameter = cat("｜DSML｜", n.parameter);
  return cat("## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
             "writing a \"", calls, "\" block like the following:\n\n",
             calls, "\n",
             "<", invoke, " name=\"$TOOL_NAME\">\n",
             "<", parameter, " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</", parameter, ">\n",
             "...\n",
             "</", invoke, ">\n",
             "<", invoke, " name=\"$TOOL_NAME2\">\n",
             "...\n",
             "</", invoke, ">\n",
             "</｜DSML｜", n.calls, ">\n\n",
             "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
             "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
             "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
             "<think>...</think> BEFORE any tool calls or final response.\n\n"
             "Otherwise, output directly after </think> with tool calls or final response.\n\n"
             "### Available Tool Schemas\n\n");
}
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

class PromptBuilder {
 public:
  explicit PromptBuilder(const std::vector<std::string_view>& spellings) : spellings_(spellings) {}
  // Conversation text: never a control token, whatever it spells.
  void text(std::string_view s) {
    if (s.empty()) return;
    if (!pieces_.empty() && !pieces_.back().control) pieces_.back().text += s;
    else pieces_.push_back({std::string(s), false});
  }
  void control(std::string_view spelling) { pieces_.push_back({std::string(spelling), true}); }
  // The encoder's own template text: the control spellings in it are control tokens, as in the reference prompt.
  void markup(std::string_view s) {
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
      const std::string_view* hit = nullptr;
      for (const std::string_view& spelling : spellings_)
        if (s.substr(i, spelling.size()) == spelling) hit = &spelling;
      if (!hit) {
        ++i;
        continue;
      }
      text(s.substr(start, i - start));
      control(*hit);
      i += hit->size();
      start = i;
    }
    text(s.substr(start));
  }
  std::vector<PromptPiece> take() { return std::move(pieces_); }

 private:
  const std::vector<std::string_view>& spellings_;  // the encoding's control tokens
  std::vector<PromptPiece> pieces_;
};

void render_tools(PromptBuilder& out, const ojson& tools, const DsmlNames& names) {
  out.markup(tools_head(names));
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) out.text("\n");
    out.text(python_json_dumps(tools[i]));
  }
  out.markup(kToolsTail);
}

// encode_arguments_to_dsml: one parameter line per argument; strings raw with string="true", everything else as
// JSON with string="false".
void render_tool_call(PromptBuilder& out, const ChatToolCall& call, const DsmlNames& names) {
  out.markup(cat("<｜DSML｜", names.invoke, " name=\""));
  out.text(call.name);
  out.markup("\">\n");
  bool first = true;
  for (const auto& [key, value] : call.arguments.items()) {
    if (!first) out.text("\n");
    first = false;
    out.markup(cat("<｜DSML｜", names.parameter, " name=\""));
    out.text(key);
    out.markup(value.is_string() ? "\" string=\"true\">" : "\" string=\"false\">");
    out.text(value.is_string() ? value.get_ref<const std::string&>() : python_json_dumps(value));
    out.markup(cat("</｜DSML｜", names.parameter, ">"));
  }
  out.markup(cat("\n</｜DSML｜", names.invoke, ">"));
}

struct RenderContext {
  const std::vector<Turn>& turns;
  bool thinking;
  bool drop_thinking;
  const ChatRequestOptions& options;
  ChatEncoding encoding;
};

// V4.1's first turn (render_message, index 0): in thinking mode the reasoning budget, under the system token;
// otherwise the system token when the turn is the system's. V4's: the max-effort preamble in thinking mode.
void render_first_turn_prefix(PromptBuilder& out, const RenderContext& ctx) {
  if (ctx.encoding == ChatEncoding::kV4) {
    if (ctx.thinking && ctx.options.reasoning_effort == ReasoningEffort::kMax) out.text(kReasoningEffortMax);
    return;
  }
  if (ctx.thinking) {
    out.control(v41_tokens::kSystem);
    out.text(cat("Reasoning Effort: ", ctx.options.reasoning_budget,
                 " (range 1-100, the higher the value, the more thorough the reasoning)\n\n"));
  } else if (ctx.turns.front().role == ChatRole::kSystem) {
    out.control(v41_tokens::kSystem);
  }
}

// render_message: one turn, then — when the next turn is the assistant's or this is the last turn — the
// assistant prefix after a user/developer turn (and in V4.1 after a system turn other than the first).
void render_turn(PromptBuilder& out, const RenderContext& ctx, size_t index) {
  const Turn& turn = ctx.turns[index];
  const long last_user = last_user_index(ctx.turns, ctx.encoding);
  const DsmlNames& names = ctx.encoding == ChatEncoding::kV41 ? kV41Names : kV4Names;
  if (index == 0) render_first_turn_prefix(out, ctx);
  switch (turn.role) {
    case ChatRole::kSystem:
      if (index > 0 && ctx.encoding == ChatEncoding::kV41) out.control(v41_tokens::kSystem);
      out.text(turn.content);
      if (turn.tools && !turn.tools->empty()) {
        out.text("\n\n");
        render_tools(out, *turn.tools, names);
      }
      if (turn.response_format && truthy(*turn.response_format)) {
        out.text("\n\n");
        out.text(kResponseFormatHead);
        out.text(python_json_dumps(*turn.response_format));
      }
      break;
    case ChatRole::kDeveloper:
      out.control(v4_tokens::kUser);
      out.text(turn.content);
      break;
    case ChatRole::kUser:
      out.control(v4_tokens::kUser);
      for (size_t i = 0; i < turn.blocks.size(); ++i) {
        if (i > 0) out.text("\n\n");
        const Block& block = turn.blocks[i];
        if (block.tool_result) out.text("<tool_result>");
        out.text(block.text);
        if (block.tool_result) out.text("</tool_result>");
      }
      break;
    case ChatRole::kAssistant:
      if (ctx.thinking && (!ctx.drop_thinking || static_cast<long>(index) > last_user)) {
        out.text(turn.reasoning);
        out.control(v4_tokens::kThinkEnd);
      }
      out.text(turn.content);
      if (!turn.tool_calls.empty()) {
        out.text("\n\n");
        out.markup(cat("<｜DSML｜", names.calls, ">\n"));
        for (size_t i = 0; i < turn.tool_calls.size(); ++i) {
          if (i > 0) out.text("\n");
          render_tool_call(out, turn.tool_calls[i], names);
        }
        out.markup(cat("\n</｜DSML｜", names.calls, ">"));
      }
      out.control(v4_tokens::kEos);
      break;
    case ChatRole::kTool:
      fail("internal: tool results must be merged into user turns before rendering");
  }
  if (index + 1 < ctx.turns.size() && ctx.turns[index + 1].role != ChatRole::kAssistant) return;
  if (asks(ctx.turns, index, ctx.encoding)) {
    out.control(v4_tokens::kAssistant);
    const bool open_thinking =
        ctx.thinking && (!ctx.drop_thinking || static_cast<long>(index) >= last_user);
    out.control(open_thinking ? v4_tokens::kThinkStart : v4_tokens::kThinkEnd);
  }
}

std::vector<PromptPiece> encode(const ChatRequest& request, ChatEncoding encoding) {
  std::vector<ChatMessage> messages = request.messages;
  const bool has_tools = !request.tools.empty();
  // Tools and the response format go into a leading system message, created empty when there is none.
  if ((has_tools || request.has_response_format) && messages.front().role != ChatRole::kSystem)
    messages.insert(messages.begin(), ChatMessage{ChatRole::kSystem, "", "", {}, ""});
  std::vector<Turn> turns = merge_into_turns(messages);
  if (has_tools) turns.front().tools = &request.tools;
  if (request.has_response_format) turns.front().response_format = &request.response_format;
  sort_tool_results(turns);
  // With tools in the prompt, every turn keeps its reasoning (the agent loop needs it); otherwise thinking mode
  // drops what came before the last user turn.
  const bool drop_thinking = !has_tools;
  if (request.options.thinking && drop_thinking) turns = drop_old_thinking(std::move(turns), encoding);

  PromptBuilder out(control_spellings(encoding));
  out.control(v4_tokens::kBos);
  const RenderContext ctx{turns, request.options.thinking, drop_thinking, request.options, encoding};
  for (size_t i = 0; i < turns.size(); ++i) render_turn(out, ctx, i);
  return out.take();
}

}  // namespace

const std::vector<std::string_view>& v4_control_spellings() {
  static const std::vector<std::string_view> spellings = {
      v4_tokens::kBos,        v4_tokens::kEos,      v4_tokens::kUser, v4_tokens::kAssistant,
      v4_tokens::kThinkStart, v4_tokens::kThinkEnd, v4_tokens::kDsml};
  return spellings;
}

const std::vector<std::string_view>& control_spellings(ChatEncoding encoding) {
  static const std::vector<std::string_view> v41 = [] {
    std::vector<std::string_view> all = v4_control_spellings();
    all.push_back(v41_tokens::kSystem);
    return all;
  }();
  return encoding == ChatEncoding::kV41 ? v41 : v4_control_spellings();
}

std::vector<PromptPiece> encode_chat(const nlohmann::ordered_json& request, ChatEncoding encoding) {
  return encode(read_chat_request(request, encoding), encoding);
}

std::vector<PromptPiece> encode_chat_v4(const nlohmann::ordered_json& request) {
  return encode_chat(request, ChatEncoding::kV4);
}

std::vector<PromptPiece> encode_chat_v4_text(std::string_view request_body) {
  return encode_chat_v4(parse_chat_request_body(request_body));
}

std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, const std::vector<PromptPiece>& pieces) {
  std::vector<int32_t> ids;
  for (const PromptPiece& piece : pieces) {
    if (!piece.control) {
      const std::vector<int32_t> text_ids = tokenizer.encode(piece.text, /*parse_special=*/false);
      ids.insert(ids.end(), text_ids.begin(), text_ids.end());
      continue;
    }
    const std::optional<int32_t> id = tokenizer.token_id(piece.text);
    if (!id)
      fail("the tokenizer has no single token for the control spelling \"", piece.text,
           "\" (a DeepSeek-V4 tokenizer.json is needed: it adds <think>, </think> and ｜DSML｜)");
    ids.push_back(*id);
  }
  return ids;
}

std::string render_prompt(const std::vector<PromptPiece>& pieces) {
  std::string out;
  for (const PromptPiece& piece : pieces) out += piece.text;
  return out;
}

}  // namespace strata::text
