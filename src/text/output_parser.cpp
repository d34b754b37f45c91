#include "text/output_parser.h"

#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "core/error.h"
#include "text/dsml.h"

namespace strata::text {
namespace {

using dsml::Match;

enum class Markup { kToolCallsOpen, kThinkEnd, kEndOfSentence, kStrayDsml, kValueClose };
struct Literal {
  std::string_view spelling;
  Markup kind;
};

// The literals each state watches for, in priority order: where two may start at the same place, the first wins
// (so "<｜DSML｜tool_calls>" is tried before the bare "<｜DSML｜" that flags stray markup). Every literal starts
// with '<' or '\n', which is how find_literal skips plain text quickly.
constexpr Literal kThinkEnd{dsml::kThinkEnd, Markup::kThinkEnd};
constexpr Literal kEos{dsml::kEndOfSentence, Markup::kEndOfSentence};
constexpr Literal kStrayOpen{dsml::kOpenPrefix, Markup::kStrayDsml};
constexpr Literal kStrayClose{dsml::kClosePrefix, Markup::kStrayDsml};
struct LiteralSets {
  Literal reasoning_with_tools[4], reasoning_without_tools[2], content_with_tools[6], content_without_tools[4],
      parameter_value[2], invoke_body[2];
};
constexpr LiteralSets literal_sets(const dsml::Tags& t) {
  const Literal after_text{t.tool_calls_open_after_text, Markup::kToolCallsOpen};
  const Literal open{t.tool_calls_open, Markup::kToolCallsOpen};
  return {{after_text, open, kThinkEnd, kEos},
          {kThinkEnd, kEos},
          {after_text, open, kThinkEnd, kEos, kStrayOpen, kStrayClose},
          {kThinkEnd, kEos, kStrayOpen, kStrayClose},
          {{t.parameter_close, Markup::kValueClose}, kEos},
          {{t.invoke_close, Markup::kValueClose}, kEos}};
}
constexpr LiteralSets kV4Literals = literal_sets(dsml::kV4Tags);
constexpr LiteralSets kV41Literals = literal_sets(dsml::kV41Tags);
const LiteralSets& literals_of(ChatEncoding encoding) { return encoding == ChatEncoding::kV41 ? kV41Literals : kV4Literals; }

struct Hit {
  size_t pos = 0;                    // where the literal starts, or text.size() if none does
  const Literal* literal = nullptr;  // null: no literal
  bool partial = false;              // text ends inside the literal: more input decides
};

// The first place in `text` where a literal starts (or, unless at_end, may start once more text arrives).
Hit find_literal(std::string_view text, std::span<const Literal> literals, bool at_end) {
  for (size_t i = text.find_first_of("<\n"); i != std::string_view::npos; i = text.find_first_of("<\n", i + 1)) {
    const std::string_view rest = text.substr(i);
    for (const Literal& literal : literals) {
      const Match m = dsml::match(rest, literal.spelling);
      if (m == Match::kFull) return {i, &literal, false};
      if (m == Match::kPartial && !at_end) return {i, &literal, true};
    }
  }
  return {text.size(), nullptr, false};
}

size_t leading_spaces(std::string_view text) {
  size_t n = 0;
  while (n < text.size() && dsml::is_space(text[n])) ++n;
  return n;
}

// The shortest prefix of `text` that none of `literals` starts with: what showed it is not one of them. Warnings
// quote this rather than whatever input happened to be buffered, so they do not depend on how the text was split.
std::string_view decisive_prefix(std::string_view text, std::initializer_list<std::string_view> literals) {
  size_t longest = 0;
  for (const std::string_view literal : literals) {
    size_t k = 0;
    while (k < text.size() && k < literal.size() && text[k] == literal[k]) ++k;
    longest = std::max(longest, k);
  }
  return text.substr(0, std::min(text.size(), longest + 1));
}

// Whether `text` is one JSON value. nlohmann's lexer takes a NUL byte for the end of input, and JSON text can
// hold none (outside strings it is no token, inside them it must be escaped), so check for it first.
bool is_json(std::string_view text) {
  return text.find('\0') == std::string_view::npos && nlohmann::json::accept(text);
}

const dsml::Attribute* attribute(const dsml::TagParse& tag, std::string_view name) {
  for (const auto& a : tag.attributes) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

}  // namespace

OutputParser::OutputParser(ParserOptions options)
    : options_(std::move(options)),
      tags_(options_.encoding == ChatEncoding::kV41 ? &dsml::kV41Tags : &dsml::kV4Tags),
      state_(options_.thinking ? State::kReasoning : State::kContent) {}

OutputDelta OutputParser::push(std::string_view text) {
  if (finished_) fail("OutputParser::push: called after finish()");
  out_ = {};
  buffer_.append(text);
  run(/*at_end=*/false);
  return std::exchange(out_, {});
}

OutputDelta OutputParser::finish() {
  if (finished_) return {};
  finished_ = true;
  out_ = {};
  run(/*at_end=*/true);
  if (state_ == State::kReasoning) warn("the output ended inside the reasoning (no </think>)");
  // Text put back by abandoning a block is read again as content and may open another block (a held value can
  // hold one), so repeat until the output ends outside any block. Each round starts further into the output.
  while (state_ != State::kReasoning && state_ != State::kContent && state_ != State::kEnded) {
    abandon_tool_calls("the output ended inside a tool_calls block");
    run(/*at_end=*/true);
  }
  return std::exchange(out_, {});
}

std::vector<std::string> OutputParser::warnings() const {
  std::vector<std::string> all = warnings_;
  if (warnings_dropped_ > 0) all.push_back(cat(warnings_dropped_, " more warnings not shown"));
  return all;
}

// Consumes buffer_ until every state step needs more input (or, at_end, until nothing is left to decide).
void OutputParser::run(bool at_end) {
  bool progress = true;
  while (progress) {
    switch (state_) {
      case State::kReasoning:
      case State::kContent:
      case State::kEnded:
        progress = step_text(at_end);
        break;
      case State::kToolCalls:
      case State::kInvoke:
        progress = step_markup(at_end);
        break;
      case State::kStringValue:
      case State::kJsonValue:
      case State::kJsonBody:
        progress = step_value(at_end);
        break;
    }
  }
  buffer_.erase(0, pos_);
  buffer_offset_ += static_cast<int64_t>(pos_);
  pos_ = 0;
}

// Reasoning, content and text after the end: stream everything up to the next literal (or possible start of one).
bool OutputParser::step_text(bool at_end) {
  if (state_ == State::kContent && after_tool_calls_) return step_after_tool_calls(at_end);
  const std::string_view rest = std::string_view(buffer_).substr(pos_);
  if (rest.empty()) return false;

  std::span<const Literal> literals;
  if (state_ == State::kReasoning) {
    literals = options_.tools_enabled ? std::span<const Literal>(literals_of(options_.encoding).reasoning_with_tools)
                                      : literals_of(options_.encoding).reasoning_without_tools;
  } else if (state_ == State::kContent) {
    literals = options_.tools_enabled ? std::span<const Literal>(literals_of(options_.encoding).content_with_tools)
                                      : literals_of(options_.encoding).content_without_tools;
  }
  const Hit hit = find_literal(rest, literals, at_end);
  size_t plain = hit.pos;
  if (hit.literal == nullptr && !at_end) plain -= dsml::incomplete_utf8_suffix(rest.substr(0, plain));
  if (state_ == State::kEnded && plain > 0) warn("text after the end-of-sentence token was kept as content");
  emit_text(rest.substr(0, plain));
  pos_ += plain;
  if (hit.literal == nullptr || hit.partial) return false;

  const std::string_view spelling = hit.literal->spelling;
  pos_ += spelling.size();
  switch (hit.literal->kind) {
    case Markup::kToolCallsOpen:
      if (state_ == State::kReasoning) {
        warn("a tool_calls block started inside the reasoning (no </think> before it); the reasoning ends there");
      }
      state_ = State::kToolCalls;
      block_opening_ = std::string(spelling);
      block_calls_ = 0;
      break;
    case Markup::kThinkEnd:
      if (state_ == State::kReasoning) {
        state_ = State::kContent;
      } else {
        warn(options_.thinking ? "</think> after the reasoning ended was kept as content"
                               : "</think> in chat-mode output was kept as content");
        emit_text(spelling);
      }
      break;
    case Markup::kEndOfSentence:
      if (state_ == State::kReasoning) warn("the output ended inside the reasoning (no </think>)");
      state_ = State::kEnded;
      break;
    case Markup::kStrayDsml:
      warn(options_.tools_enabled ? "DSML markup outside a tool_calls block was kept as content"
                                  : "DSML markup in the output of a request without tools was kept as content");
      emit_text(spelling);
      break;
    case Markup::kValueClose:
      break;  // not watched for in text
  }
  return true;
}

// Whitespace right after </｜DSML｜tool_calls> is layout when only the end-of-sentence token, another block or the
// end follows; before anything else it is content.
bool OutputParser::step_after_tool_calls(bool at_end) {
  const std::string_view rest = std::string_view(buffer_).substr(pos_);
  // Resume where the last look stopped, so a long run of whitespace arriving piece by piece is scanned once.
  const size_t spaces = spaces_after_tool_calls_ + leading_spaces(rest.substr(spaces_after_tool_calls_));
  spaces_after_tool_calls_ = spaces;
  const std::string_view next = rest.substr(spaces);
  if (next.empty()) {
    if (!at_end) return false;
    pos_ += spaces;
    after_tool_calls_ = false;
    return false;
  }
  for (const std::string_view markup : {dsml::kEndOfSentence, tags_->tool_calls_open}) {
    const Match m = dsml::match(next, markup);
    if (m == Match::kPartial && !at_end) return false;
    if (m == Match::kFull) {
      pos_ += spaces;
      break;
    }
  }
  after_tool_calls_ = false;
  return true;
}

// Inside a block, between tags: whitespace is layout, then a tag must follow.
bool OutputParser::step_markup(bool at_end) {
  std::string_view rest = std::string_view(buffer_).substr(pos_);
  const size_t spaces = leading_spaces(rest);
  if (state_ == State::kToolCalls && block_calls_ == 0) block_opening_.append(rest.substr(0, spaces));
  pos_ += spaces;
  rest.remove_prefix(spaces);
  if (rest.empty()) return false;
  const Match eos = dsml::match(rest, dsml::kEndOfSentence);
  if (eos == Match::kPartial && !at_end) return false;
  if (eos == Match::kFull) {
    abandon_tool_calls("the end-of-sentence token came inside a tool_calls block");
    return true;
  }
  return state_ == State::kToolCalls ? step_tool_calls_tag(rest, at_end) : step_invoke_tag(rest, at_end);
}

bool OutputParser::step_tool_calls_tag(std::string_view rest, bool at_end) {
  const Match close = dsml::match(rest, tags_->tool_calls_close);
  if (close == Match::kFull) {
    pos_ += tags_->tool_calls_close.size();
    state_ = State::kContent;
    after_tool_calls_ = true;
    spaces_after_tool_calls_ = 0;
    return true;
  }
  if (close == Match::kPartial && !at_end) return false;
  if (dsml::match(rest, tags_->invoke_open) == Match::kNone) {
    abandon_tool_calls(cat("expected <｜DSML｜invoke name=\"...\"> or </｜DSML｜tool_calls>, found '",
                           dsml::excerpt(decisive_prefix(rest, {tags_->tool_calls_close, tags_->invoke_open})), "'"));
    return true;
  }
  dsml::TagParse tag = dsml::parse_open_tag(rest, tags_->invoke_open);
  if (tag.status == dsml::TagStatus::kIncomplete) {
    if (!at_end) return false;
    abandon_tool_calls(cat("unterminated tag '", dsml::excerpt(rest), "'"));
    return true;
  }
  if (tag.status == dsml::TagStatus::kMalformed) {
    abandon_tool_calls(tag.error);
    return true;
  }
  const dsml::Attribute* name = attribute(tag, "name");
  if (tag.attributes.size() != 1 || name == nullptr || name->value.empty()) {
    abandon_tool_calls(
        cat("expected <｜DSML｜invoke name=\"...\">, found '", dsml::excerpt(rest.substr(0, tag.length)), "'"));
    return true;
  }
  pos_ += tag.length;
  begin_call(name->value);
  return true;
}

bool OutputParser::step_invoke_tag(std::string_view rest, bool at_end) {
  const Match close = dsml::match(rest, tags_->invoke_close);
  if (close == Match::kFull) {
    pos_ += tags_->invoke_close.size();
    end_call();
    state_ = State::kToolCalls;
    return true;
  }
  if (close == Match::kPartial && !at_end) return false;
  if (rest.front() == '{' && !call_.arguments_started && !call_.arguments_done) {
    value_raw_.clear();  // the body is held from its '{' to </｜DSML｜invoke>
    state_ = State::kJsonBody;
    return true;
  }
  if (dsml::match(rest, tags_->parameter_open) == Match::kNone) {
    abandon_tool_calls(cat(
        "expected <｜DSML｜parameter name=\"...\" string=\"true|false\"> or </｜DSML｜invoke> in call '", call_.name,
        "', found '", dsml::excerpt(decisive_prefix(rest, {tags_->invoke_close, tags_->parameter_open})), "'"));
    return true;
  }
  if (call_.arguments_done) {
    abandon_tool_calls(cat("a parameter follows the JSON object in call '", call_.name, "'"));
    return true;
  }
  dsml::TagParse tag = dsml::parse_open_tag(rest, tags_->parameter_open);
  if (tag.status == dsml::TagStatus::kIncomplete) {
    if (!at_end) return false;
    abandon_tool_calls(cat("unterminated tag '", dsml::excerpt(rest), "'"));
    return true;
  }
  if (tag.status == dsml::TagStatus::kMalformed) {
    abandon_tool_calls(tag.error);
    return true;
  }
  const dsml::Attribute* name = attribute(tag, "name");
  const dsml::Attribute* string = attribute(tag, "string");
  if (tag.attributes.size() != 2 || name == nullptr || string == nullptr || name->value.empty() ||
      (string->value != "true" && string->value != "false")) {
    abandon_tool_calls(cat("expected <｜DSML｜parameter name=\"...\" string=\"true|false\">, found '",
                           dsml::excerpt(rest.substr(0, tag.length)), "'"));
    return true;
  }
  const std::string tag_text(rest.substr(0, tag.length));
  pos_ += tag.length;
  begin_parameter(name->value, string->value == "true", tag_text);
  return true;
}

// A parameter value or a direct JSON body: everything up to its closing tag.
bool OutputParser::step_value(bool at_end) {
  const std::string_view rest = std::string_view(buffer_).substr(pos_);
  if (rest.empty()) return false;
  const Hit hit =
      find_literal(rest, state_ == State::kJsonBody ? std::span<const Literal>(literals_of(options_.encoding).invoke_body) : literals_of(options_.encoding).parameter_value, at_end);
  size_t plain = hit.pos;
  if (state_ == State::kStringValue) {
    if (hit.literal == nullptr && !at_end) plain -= dsml::incomplete_utf8_suffix(rest.substr(0, plain));
    std::string escaped;
    dsml::append_json_escaped(escaped, rest.substr(0, plain));
    emit_arguments(escaped);
  } else {
    value_raw_.append(rest.substr(0, plain));
  }
  pos_ += plain;
  if (hit.literal == nullptr || hit.partial) return false;

  if (hit.literal->kind == Markup::kEndOfSentence) {
    abandon_tool_calls(cat("the end-of-sentence token came inside tool call '", call_.name, "'"));
    return true;
  }
  switch (state_) {
    case State::kStringValue:
      pos_ += hit.literal->spelling.size();
      emit_arguments("\"");
      state_ = State::kInvoke;
      break;
    case State::kJsonValue:
      pos_ += hit.literal->spelling.size();
      finish_json_value();
      state_ = State::kInvoke;
      break;
    default:  // kJsonBody
      if (!finish_json_body()) break;
      pos_ += hit.literal->spelling.size();
      end_call();
      state_ = State::kToolCalls;
      break;
  }
  return true;
}

void OutputParser::begin_call(std::string name) {
  call_ = OpenCall{};
  call_.open = true;
  call_.index = static_cast<int>(calls_.size());
  call_.id = options_.tool_call_id_prefix + std::to_string(call_.index);
  call_.name = std::move(name);
  out_.tool_calls.push_back(ToolCallDelta{call_.index, call_.id, call_.name, ""});
  state_ = State::kInvoke;
  ++block_calls_;
}

std::string OutputParser::key_prefix(std::string_view key) {
  std::string text = call_.arguments_started ? ", " : "{";
  call_.arguments_started = true;
  text += dsml::json_string(key);
  text += ": ";
  return text;
}

void OutputParser::begin_parameter(std::string name, bool is_string, std::string_view tag) {
  if (std::find(call_.parameter_names.begin(), call_.parameter_names.end(), name) != call_.parameter_names.end()) {
    warn(cat("tool call '", call_.name, "' repeats parameter '", name, "'"));
  }
  call_.parameter_names.push_back(name);
  if (is_string) {
    emit_arguments(key_prefix(name) + "\"");
    state_ = State::kStringValue;
    return;
  }
  value_key_ = std::move(name);
  value_tag_ = std::string(tag);
  value_raw_.clear();
  state_ = State::kJsonValue;
}

// string="false": the value must be JSON text, inserted as is (decode_dsml_to_arguments); if it is not, it is
// passed as a string so the arguments stay valid JSON.
void OutputParser::finish_json_value() {
  std::string text = key_prefix(value_key_);
  if (is_json(value_raw_)) {
    text += value_raw_;
  } else {
    warn(cat("parameter '", value_key_, "' of tool call '", call_.name,
             "' is marked string=\"false\" but is not JSON ('", dsml::excerpt(value_raw_), "'); passed as a string"));
    text += dsml::json_string(value_raw_);
  }
  emit_arguments(text);
  value_key_.clear();
  value_tag_.clear();
  value_raw_.clear();
}

// A JSON object written directly inside the invoke becomes the arguments; false (block abandoned) if it is not one.
bool OutputParser::finish_json_body() {
  std::string_view body = value_raw_;
  while (!body.empty() && dsml::is_space(body.back())) body.remove_suffix(1);
  if (!is_json(body)) {
    abandon_tool_calls(cat("the body of tool call '", call_.name, "' is neither parameters nor a JSON object"));
    return false;
  }
  emit_arguments(body);
  call_.arguments_done = true;
  value_raw_.clear();
  return true;
}

void OutputParser::end_call() {
  if (!call_.open) return;
  if (!call_.arguments_done) emit_arguments(call_.arguments_started ? "}" : "{}");
  calls_.push_back(ParsedToolCall{call_.id, call_.name, call_.arguments});
  call_ = OpenCall{};
}

// The block went wrong at pos_: close what was streamed so it stays valid JSON, and read the rest as content.
// Text consumed but not yet emitted (a held string="false" parameter, a JSON body) goes back in front of the
// unread input, so it is read as content too; so does the block's opening tag when no call began in it.
void OutputParser::abandon_tool_calls(std::string_view why) {
  warn(cat("malformed tool call markup at byte ", input_offset(), " of the output: ", why,
           "; the rest was kept as content"));
  std::string held;
  if (state_ == State::kStringValue) emit_arguments("\"");
  if (state_ == State::kJsonValue) held = value_tag_ + value_raw_;
  if (state_ == State::kJsonBody) held = value_raw_;
  if (call_.open) {
    warn(cat("tool call '", call_.name, "' was cut short; its arguments were closed where they stopped"));
    end_call();
  }
  value_key_.clear();
  value_tag_.clear();
  value_raw_.clear();
  state_ = State::kContent;
  after_tool_calls_ = false;
  // The opening tag is emitted rather than put back: read again, it would open the same block.
  if (block_calls_ == 0) emit_text(block_opening_);
  block_opening_.clear();
  buffer_.insert(pos_, held);
  buffer_offset_ -= static_cast<int64_t>(held.size());  // those bytes are read again
}

int64_t OutputParser::input_offset() const { return buffer_offset_ + static_cast<int64_t>(pos_); }

void OutputParser::emit_text(std::string_view text) {
  if (text.empty()) return;
  (state_ == State::kReasoning ? out_.reasoning_content : out_.content).append(text);
}

void OutputParser::emit_arguments(std::string_view text) {
  if (text.empty()) return;
  call_.arguments.append(text);
  if (out_.tool_calls.empty() || out_.tool_calls.back().index != call_.index) {
    out_.tool_calls.push_back(ToolCallDelta{call_.index, std::nullopt, std::nullopt, ""});
  }
  out_.tool_calls.back().arguments_delta.append(text);
}

void OutputParser::warn(std::string message) {
  if (std::find(warnings_.begin(), warnings_.end(), message) != warnings_.end()) return;
  if (warnings_.size() >= kMaxWarnings) {
    ++warnings_dropped_;
    return;
  }
  warnings_.push_back(std::move(message));
}

}  // namespace strata::text
