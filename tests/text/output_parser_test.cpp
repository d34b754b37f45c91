// OutputParser: every expected output is checked under every way of cutting the text into push() calls (one
// piece, two pieces at every byte offset, 1-byte pieces, random chunkings); all must give the same result.
#include "text/output_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace strata::text {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";

// DSML as the reference encoder writes it (encoding_dsv4.py: tool_calls_template, tool_call_template,
// encode_arguments_to_dsml): tags one per line, the block after "\n\n".
std::string param(std::string_view name, bool is_string, std::string_view value) {
  return cat("<｜DSML｜parameter name=\"", name, "\" string=\"", is_string ? "true" : "false", "\">", value,
             "</｜DSML｜parameter>");
}
std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "\n" : "") + parts[i];
  return out;
}
std::string invoke(std::string_view name, const std::vector<std::string>& params) {
  return cat("<｜DSML｜invoke name=\"", name, "\">\n", join(params), "\n</｜DSML｜invoke>");
}
std::string block(const std::vector<std::string>& invokes) {
  return "\n\n<｜DSML｜tool_calls>\n" + join(invokes) + "\n</｜DSML｜tool_calls>";
}

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as JSON parsers demand.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      n = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < low || b > high) : (b & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

struct Call {
  std::string id, name, arguments;
  bool operator==(const Call&) const = default;
};

// Everything a run of the parser produced, rebuilt from its deltas.
struct Result {
  std::string reasoning, content;
  std::vector<Call> calls;   // from the deltas
  std::vector<Call> parsed;  // tool_calls()
  std::vector<std::string> warnings;
  bool operator==(const Result&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Result& r) {
  os << "{reasoning='" << r.reasoning << "', content='" << r.content << "', calls=[";
  for (const auto& c : r.calls) os << c.id << ' ' << c.name << ' ' << c.arguments << "; ";
  os << "], warnings=[";
  for (const auto& w : r.warnings) os << w << "; ";
  return os << "]}";
}

void collect(const OutputDelta& delta, Result& result, bool check_utf8) {
  result.reasoning += delta.reasoning_content;
  result.content += delta.content;
  if (check_utf8) {
    EXPECT_TRUE(valid_utf8(delta.reasoning_content)) << delta.reasoning_content;
    EXPECT_TRUE(valid_utf8(delta.content)) << delta.content;
  }
  int previous = -1;
  for (const ToolCallDelta& d : delta.tool_calls) {
    EXPECT_GT(d.index, previous) << "one entry per call, in index order";
    previous = d.index;
    if (check_utf8) {
      EXPECT_TRUE(valid_utf8(d.arguments_delta)) << d.arguments_delta;
    }
    if (d.index == static_cast<int>(result.calls.size())) {
      // A call's first delta names it.
      EXPECT_TRUE(d.id.has_value());
      EXPECT_TRUE(d.name.has_value());
      result.calls.push_back({d.id.value_or(""), d.name.value_or(""), ""});
    } else {
      ASSERT_LT(d.index, static_cast<int>(result.calls.size()));
      EXPECT_FALSE(d.id.has_value());
      EXPECT_FALSE(d.name.has_value());
    }
    result.calls[static_cast<size_t>(d.index)].arguments += d.arguments_delta;
  }
}

// Feeds `text` cut at `cuts` (ascending offsets) and finishes.
Result run(std::string_view text, const std::vector<size_t>& cuts, const ParserOptions& options) {
  OutputParser parser(options);
  Result result;
  const bool utf8 = valid_utf8(text);
  size_t start = 0;
  for (const size_t cut : cuts) {
    collect(parser.push(text.substr(start, cut - start)), result, utf8);
    start = cut;
  }
  collect(parser.push(text.substr(start)), result, utf8);
  collect(parser.finish(), result, utf8);
  for (const ParsedToolCall& c : parser.tool_calls()) result.parsed.push_back({c.id, c.name, c.arguments});
  result.warnings = parser.warnings();
  return result;
}

// The one-shot result, after checking that every cutting gives the same.
Result parse(std::string_view text, const ParserOptions& options = {}) {
  const Result whole = run(text, {}, options);
  EXPECT_EQ(whole.calls, whole.parsed) << "deltas and tool_calls() disagree";
  for (const auto& call : whole.parsed) {
    EXPECT_TRUE(nlohmann::json::accept(call.arguments)) << call.arguments;
    EXPECT_TRUE(nlohmann::json::parse(call.arguments).is_object()) << call.arguments;
  }
  for (size_t cut = 1; cut < text.size(); ++cut) {
    const Result split = run(text, {cut}, options);
    EXPECT_EQ(split, whole) << "split at byte " << cut;
    if (split != whole) return whole;
  }
  std::vector<size_t> bytes;
  for (size_t cut = 1; cut < text.size(); ++cut) bytes.push_back(cut);
  EXPECT_EQ(run(text, bytes, options), whole) << "1-byte pieces";
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<size_t> cuts;
    std::uniform_int_distribution<size_t> step(1, 1 + static_cast<size_t>(trial % 12));
    for (size_t at = step(rng); at < text.size(); at += step(rng)) cuts.push_back(at);
    const Result chunked = run(text, cuts, options);
    EXPECT_EQ(chunked, whole) << "random chunking, trial " << trial;
    if (chunked != whole) break;
  }
  return whole;
}

ParserOptions thinking() { return ParserOptions{.thinking = true}; }

nlohmann::json args(const Result& r, size_t i) { return nlohmann::json::parse(r.calls.at(i).arguments); }

bool has_warning(const Result& r, std::string_view part) {
  for (const auto& w : r.warnings) {
    if (w.find(part) != std::string::npos) return true;
  }
  return false;
}

// --- well-formed output ---------------------------------------------------------------------------------------

TEST(OutputParser, ChatModeContentOnly) {
  const Result r = parse("Hello, world! 你好 🌍\n\nBye." + kEos);
  EXPECT_EQ(r.content, "Hello, world! 你好 🌍\n\nBye.");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, ChatModeWithoutEndOfSentence) {
  // The detokenizer may skip special tokens, so the end of sentence may not be in the text at all.
  const Result r = parse("Plain answer with a < and a </b> tag\n");
  EXPECT_EQ(r.content, "Plain answer with a < and a </b> tag\n");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, ThinkingModeReasoningThenContent) {
  const Result r = parse("The user greets me.\nI should greet back.</think>Hello! How can I help?" + kEos, thinking());
  EXPECT_EQ(r.reasoning, "The user greets me.\nI should greet back.");
  EXPECT_EQ(r.content, "Hello! How can I help?");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, ThinkingModeEmptyReasoning) {
  const Result r = parse("</think>Answer." + kEos, thinking());
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Answer.");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, ThinkingModeToolCall) {
  const std::string text = "Need the weather.</think>" +
                           block({invoke("get_weather", {param("city", true, "Paris"), param("days", false, "3")})}) +
                           kEos;
  const Result r = parse(text, thinking());
  EXPECT_EQ(r.reasoning, "Need the weather.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].id, "call_0");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  // The reference decoder's layout: {"key": value, ...}.
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "Paris", "days": 3})");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, ContentBeforeToolCalls) {
  // The "\n\n" before the block belongs to the block (the reference parser's start token).
  const Result r = parse("Let me check that.\n" + block({invoke("search", {param("q", true, "x")})}) + kEos);
  EXPECT_EQ(r.content, "Let me check that.\n");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"q": "x"})");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, BlockWithoutBlankLineBefore) {
  const Result r = parse("Checking.<｜DSML｜tool_calls>\n" + invoke("f", {}) + "\n</｜DSML｜tool_calls>" + kEos);
  EXPECT_EQ(r.content, "Checking.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, ParallelToolCalls) {
  const std::string text =
      block({invoke("get_weather", {param("location", true, "杭州"), param("date", true, "2024-01-16")}),
             invoke("get_weather", {param("location", true, "北京"), param("date", true, "2024-01-16")}),
             invoke("get_time", {})}) +
      kEos;
  const Result r = parse(text);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(r.calls[i].id, "call_" + std::to_string(i));
  EXPECT_EQ(r.calls[0].arguments, R"({"location": "杭州", "date": "2024-01-16"})");
  EXPECT_EQ(r.calls[1].arguments, R"({"location": "北京", "date": "2024-01-16"})");
  EXPECT_EQ(r.calls[2].name, "get_time");
  EXPECT_EQ(r.calls[2].arguments, "{}");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, ContentAfterToolCallsAndSecondBlock) {
  const std::string text = "First." + block({invoke("a", {param("x", false, "1")})}) + "\nThen more." +
                           block({invoke("b", {param("y", false, "2")})}) + "\n" + kEos;
  const Result r = parse(text);
  EXPECT_EQ(r.content, "First.\nThen more.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "a");
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_EQ(r.calls[1].id, "call_1");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, ParameterOrderKept) {
  const Result r =
      parse(block({invoke("f", {param("zeta", true, "1"), param("alpha", false, "2"), param("mid", true, "3")})}));
  EXPECT_EQ(r.calls.at(0).arguments, R"({"zeta": "1", "alpha": 2, "mid": "3"})");
}

TEST(OutputParser, StringValuesAreEscaped) {
  const std::string nasty = "He said \"hi\" \\ path C:\\dir\n\ttab\r\x01 end — 中文 😀 </ not a tag <｜DSML｜x>";
  const Result r = parse(block({invoke("write", {param("text", true, nasty), param("empty", true, "")})}) + kEos);
  ASSERT_EQ(r.calls.size(), 1u);
  const nlohmann::json a = args(r, 0);
  EXPECT_EQ(a.at("text"), nasty);
  EXPECT_EQ(a.at("empty"), "");
  EXPECT_NE(r.calls[0].arguments.find("\\u0001"), std::string::npos);
  EXPECT_NE(r.calls[0].arguments.find("😀"), std::string::npos) << "UTF-8 is not \\u-escaped";
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, MultilineStringValueKeepsNewlines) {
  const std::string code = "\ndef f(x):\n    return x  # \"quoted\"\n\n";
  const Result r = parse(block({invoke("run", {param("code", true, code)})}));
  EXPECT_EQ(args(r, 0).at("code"), code);
}

TEST(OutputParser, NonStringValuesInsertedAsJson) {
  const Result r = parse(block({invoke("f",
                                       {
                                           param("int", false, "42"),
                                           param("neg", false, "-1.5e3"),
                                           param("yes", false, "true"),
                                           param("no", false, "false"),
                                           param("nothing", false, "null"),
                                           param("list", false, R"([1, "two", [3], {"four": 4}])"),
                                           param("obj", false, R"({"a": {"b": [null, "x\"y"]}, "c": "中"})"),
                                           param("spaced", false, "\n  7 \n"),
                                       })}) +
                         kEos);
  ASSERT_EQ(r.calls.size(), 1u);
  const nlohmann::json a = args(r, 0);
  EXPECT_EQ(a.at("int"), 42);
  EXPECT_EQ(a.at("neg"), -1500.0);
  EXPECT_EQ(a.at("yes"), true);
  EXPECT_EQ(a.at("no"), false);
  EXPECT_TRUE(a.at("nothing").is_null());
  EXPECT_EQ(a.at("list"), nlohmann::json::parse(R"([1, "two", [3], {"four": 4}])"));
  EXPECT_EQ(a.at("obj").at("a").at("b").at(1), "x\"y");
  EXPECT_EQ(a.at("spaced"), 7);
  // Inserted as written, as the reference decoder does.
  EXPECT_NE(r.calls[0].arguments.find(R"("neg": -1.5e3)"), std::string::npos);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, NonStringValueThatIsNotJsonBecomesString) {
  const Result r = parse(
      block({invoke("f", {param("n", false, "forty two"), param("m", false, "{unclosed"), param("e", false, "")})}));
  const nlohmann::json a = args(r, 0);
  EXPECT_EQ(a.at("n"), "forty two");
  EXPECT_EQ(a.at("m"), "{unclosed");
  EXPECT_EQ(a.at("e"), "");
  EXPECT_TRUE(has_warning(r, "parameter 'n' of tool call 'f' is marked string=\"false\" but is not JSON"));
  EXPECT_TRUE(has_warning(r, "parameter 'm'"));
}

TEST(OutputParser, NulByteMakesNonStringValueAString) {
  // Found by the fuzzer: nlohmann's lexer stops at a NUL byte, so "1\0junk" must not pass as the JSON value 1.
  const std::string value("1\0junk", 6);
  const Result r = parse(block({invoke("f", {param("n", false, value)})}));
  EXPECT_EQ(args(r, 0).at("n"), value);
  EXPECT_TRUE(has_warning(r, "is not JSON"));
}

TEST(OutputParser, JsonObjectWrittenInsideInvoke) {
  // SGLang's DeepSeekV4Detector "Format 2": a JSON object instead of parameters.
  const Result r = parse(
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n{\"city\": \"San Francisco\", \"n\": [1]}\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "San Francisco", "n": [1]})");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, LenientLayoutBetweenTags) {
  // No newlines, extra spaces inside tags, attributes in either order.
  const Result r = parse(
      "<｜DSML｜tool_calls><｜DSML｜invoke  name=\"f\" ><｜DSML｜parameter string=\"false\"\tname=\"a\">1"
      "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": 1})");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(OutputParser, IdPrefix) {
  ParserOptions options;
  options.tool_call_id_prefix = "call_req7_";
  const Result r = parse(block({invoke("a", {}), invoke("b", {})}), options);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].id, "call_req7_0");
  EXPECT_EQ(r.calls[1].id, "call_req7_1");
}

// --- streaming: what is held back and what is not ------------------------------------------------------------

TEST(OutputParser, StreamsPlainTextImmediately) {
  OutputParser parser({});
  EXPECT_EQ(parser.push("Hello wor").content, "Hello wor");
  EXPECT_EQ(parser.push("ld <").content, "ld ");          // "<" could start a tag
  EXPECT_EQ(parser.push("b> and\n").content, "<b> and");  // "\n" could start "\n\n<｜DSML｜tool_calls>"
  EXPECT_EQ(parser.push("x").content, "\nx");
  EXPECT_EQ(parser.push("\xE4\xBD").content, "");  // half of 你: held until whole
  EXPECT_EQ(parser.push("\xA0!").content, "你!");
  EXPECT_EQ(parser.finish().content, "");
}

TEST(OutputParser, StreamsReasoningAndStringArguments) {
  OutputParser parser({.thinking = true});
  EXPECT_EQ(parser.push("thinking hard").reasoning_content, "thinking hard");
  OutputDelta d = parser.push("</thi");
  EXPECT_EQ(d.reasoning_content, "");
  d = parser.push(
      "nk>ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"w\">\n<｜DSML｜parameter name=\"t\" string=\"true\">ab");
  EXPECT_EQ(d.content, "ok");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].id, "call_0");
  EXPECT_EQ(d.tool_calls[0].name, "w");
  EXPECT_EQ(d.tool_calls[0].arguments_delta, "{\"t\": \"ab");
  d = parser.push("c\"d</｜DSML｜para");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_FALSE(d.tool_calls[0].name.has_value());
  EXPECT_EQ(d.tool_calls[0].arguments_delta, "c\\\"d");
  d = parser.push("meter>\n<｜DSML｜parameter name=\"n\" string=\"false\">12");
  EXPECT_EQ(d.tool_calls.at(0).arguments_delta, "\"");  // the JSON value waits for its closing tag
  d = parser.push("3</｜DSML｜parameter>\n</｜DSML｜invoke>");
  EXPECT_EQ(d.tool_calls.at(0).arguments_delta, ", \"n\": 123}");
  EXPECT_EQ(parser.tool_calls().size(), 1u);
  parser.push("\n</｜DSML｜tool_calls>" + kEos);
  parser.finish();
  EXPECT_TRUE(parser.warnings().empty());
}

TEST(OutputParser, PushAfterFinishThrows) {
  OutputParser parser({});
  parser.push("a");
  parser.finish();
  EXPECT_TRUE(parser.finish().content.empty());
  EXPECT_THROW(parser.push("b"), Error);
}

// --- malformed output: content plus a warning, never lost text ----------------------------------------------

TEST(OutputParser, SecondThinkEndIsContent) {
  const Result r = parse("r</think>a</think>b", thinking());
  EXPECT_EQ(r.reasoning, "r");
  EXPECT_EQ(r.content, "a</think>b");
  EXPECT_TRUE(has_warning(r, "</think> after the reasoning ended"));
}

TEST(OutputParser, ThinkEndInChatModeIsContent) {
  const Result r = parse("a</think>b");
  EXPECT_EQ(r.content, "a</think>b");
  EXPECT_TRUE(has_warning(r, "</think> in chat-mode output"));
}

TEST(OutputParser, ReasoningWithoutEnd) {
  const Result r = parse("still thinking <｜DSML｜invoke name=\"x\"> about DSML", thinking());
  EXPECT_EQ(r.reasoning, "still thinking <｜DSML｜invoke name=\"x\"> about DSML");
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(has_warning(r, "ended inside the reasoning"));
}

TEST(OutputParser, ToolCallsInsideReasoningEndIt) {
  const Result r = parse("I will call it." + block({invoke("f", {param("a", true, "b")})}) + kEos, thinking());
  EXPECT_EQ(r.reasoning, "I will call it.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": "b"})");
  EXPECT_TRUE(has_warning(r, "inside the reasoning"));
}

TEST(OutputParser, DsmlOutsideBlockIsContent) {
  const std::string text = "See <｜DSML｜invoke name=\"x\">\n" + param("a", true, "b") + "\n</｜DSML｜invoke> here.";
  const Result r = parse(text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_TRUE(has_warning(r, "DSML markup outside a tool_calls block"));
}

TEST(OutputParser, ToolsDisabledKeepsBlockAsContent) {
  ParserOptions options;
  options.tools_enabled = false;
  const std::string text = "Answer." + block({invoke("f", {param("a", true, "b")})});
  const Result r = parse(text + kEos, options);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_TRUE(has_warning(r, "without tools"));
}

TEST(OutputParser, TextAfterEndOfSentence) {
  const Result r = parse("done" + kEos + "extra</think>", thinking());
  EXPECT_EQ(r.reasoning, "done");
  EXPECT_EQ(r.content, "extra</think>");
  EXPECT_TRUE(has_warning(r, "after the end-of-sentence"));
}

TEST(OutputParser, UnknownTagInBlock) {
  const std::string text = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜call name=\"f\">x</｜DSML｜call>\n</｜DSML｜tool_calls>";
  const Result r = parse("Hi" + text);
  EXPECT_EQ(r.content, "Hi" + text);  // every character kept
  EXPECT_TRUE(r.calls.empty());
  EXPECT_TRUE(has_warning(r, "malformed tool call markup"));
}

TEST(OutputParser, PlainTextInBlock) {
  const std::string text = "<｜DSML｜tool_calls> is how I would call tools.";
  const Result r = parse(text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(has_warning(r, "malformed tool call markup"));
}

TEST(OutputParser, BadInvokeAttributes) {
  for (const std::string tag : {"<｜DSML｜invoke nam=\"f\">", "<｜DSML｜invoke name=f>", "<｜DSML｜invoke name=\"\">",
                                "<｜DSML｜invoke name=\"f\" extra=\"1\">", "<｜DSML｜invokename=\"f\">",
                                "<｜DSML｜invoke name=\"f>\n", "<｜DSML｜invoke>"}) {
    const std::string text = "<｜DSML｜tool_calls>\n" + tag + "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    const Result r = parse(text);
    EXPECT_EQ(r.content, text) << tag;
    EXPECT_TRUE(r.calls.empty()) << tag;
    EXPECT_TRUE(has_warning(r, "malformed tool call markup")) << tag;
  }
}

TEST(OutputParser, BadParameterAttributesCloseTheCall) {
  for (const std::string tag :
       {"<｜DSML｜parameter name=\"a\" strin=\"true\">", "<｜DSML｜parameter name=\"a\">",
        "<｜DSML｜parameter name=\"a\" string=\"yes\">", "<｜DSML｜parameter name='a' string=\"true\">"}) {
    const std::string rest = tag + "v</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    const std::string text =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n" + param("ok", false, "1") + "\n" + rest;
    const Result r = parse(text);
    ASSERT_EQ(r.calls.size(), 1u) << tag;
    EXPECT_EQ(r.calls[0].arguments, R"({"ok": 1})") << tag;  // closed as it stood
    EXPECT_EQ(r.content, rest) << tag;                       // the rest kept
    EXPECT_TRUE(has_warning(r, "tool call 'f' was cut short")) << tag;
  }
}

TEST(OutputParser, OverlongTagIsMalformed) {
  const std::string text =
      "<｜DSML｜tool_calls><｜DSML｜invoke name=\"" + std::string(600, 'n') + "\"></｜DSML｜invoke>";
  const Result r = parse(text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(has_warning(r, "longer than"));
}

TEST(OutputParser, TruncatedInsideStringValue) {
  const std::string text =
      "Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
      "string=\"true\">partial </｜DSML｜param";
  const Result r = parse(text);
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 1u);
  // The value streamed as it came; at the end the held "</｜DSML｜param" turns out to be value text.
  EXPECT_EQ(args(r, 0).at("a"), "partial </｜DSML｜param");
  EXPECT_TRUE(has_warning(r, "ended inside a tool_calls block"));
  EXPECT_TRUE(has_warning(r, "tool call 'f' was cut short"));
}

TEST(OutputParser, TruncatedInsideJsonValue) {
  const std::string held = "<｜DSML｜parameter name=\"n\" string=\"false\">[1, 2";
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n" + param("a", true, "x") + "\n" + held;
  const Result r = parse(text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": "x"})");
  EXPECT_EQ(r.content, held);
  EXPECT_TRUE(has_warning(r, "cut short"));
}

TEST(OutputParser, TruncatedJsonValueHoldingAnotherBlock) {
  // Found by the fuzzer: a held string="false" value put back as content opens a second block, itself cut off.
  const std::string x = "<｜DSML｜parameter name=\"x\" string=\"false\">{\"k\": [2,";
  const std::string y = "<｜DSML｜parameter name=\"y\" string=\"false\">[1";
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n" + x +
                           "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"b\">\n" + y;
  const Result r = parse(text);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_EQ(r.content, x + y);
}

TEST(OutputParser, TruncatedInsideTag) {
  for (const std::string tail : {"<｜DSML｜invo", "<｜DSML｜invoke name=\"f", "</｜DSML｜tool_ca", "<"}) {
    const std::string text = "A.\n\n<｜DSML｜tool_calls>\n" + tail;
    const Result r = parse(text);
    EXPECT_EQ(r.content, text) << tail;  // no call began: the whole block is content
    EXPECT_TRUE(r.calls.empty());
    EXPECT_TRUE(has_warning(r, "malformed tool call markup")) << tail;
  }
}

TEST(OutputParser, UnclosedBlockAfterCompleteCall) {
  const std::string text = "\n\n<｜DSML｜tool_calls>\n" + invoke("f", {param("a", false, "1")}) + "\n";
  const Result r = parse(text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": 1})");
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(has_warning(r, "ended inside a tool_calls block"));
}

TEST(OutputParser, EndOfSentenceInsideValue) {
  const std::string text =
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">ab" + kEos;
  const Result r = parse(text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": "ab"})");
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(has_warning(r, "end-of-sentence token came inside tool call 'f'"));
}

TEST(OutputParser, EndOfSentenceBetweenTags) {
  const Result r = parse("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n" + param("a", false, "1") + "\n" + kEos);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": 1})");
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(has_warning(r, "end-of-sentence token came inside a tool_calls block"));
}

TEST(OutputParser, InvalidJsonBodyIsContent) {
  const std::string body = "{\"city\": oops}\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n" + body;
  const Result r = parse(text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.content, body);
  EXPECT_TRUE(has_warning(r, "neither parameters nor a JSON object"));
}

TEST(OutputParser, JsonAfterParametersIsMalformed) {
  // Found by the fuzzer: the warning must quote only the text that decided, whatever else was buffered.
  const std::string rest = "{\"k\": 1}\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const Result r = parse("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n" + param("a", false, "1") + "\n" + rest);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": 1})");
  EXPECT_EQ(r.content, rest);
  EXPECT_TRUE(has_warning(r, "found '{'"));
}

TEST(OutputParser, DuplicateParameterWarned) {
  const Result r = parse(block({invoke("f", {param("a", true, "1"), param("a", true, "2")})}));
  EXPECT_EQ(r.calls.at(0).arguments, R"({"a": "1", "a": "2"})");
  EXPECT_TRUE(has_warning(r, "repeats parameter 'a'"));
}

TEST(OutputParser, ParameterOutsideInvoke) {
  const std::string rest = param("a", true, "1") + "\n</｜DSML｜tool_calls>";
  const Result r = parse("<｜DSML｜tool_calls>\n" + invoke("f", {}) + "\n" + rest);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.content, rest);
}

TEST(OutputParser, WarningsAreCapped) {
  std::string text;
  for (int i = 0; i < 100; ++i) {
    text += "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f" + std::to_string(i) +
            "\">oops</｜DSML｜invoke></｜DSML｜tool_calls>";
  }
  OutputParser parser({});
  parser.push(text);
  parser.finish();
  const auto warnings = parser.warnings();
  EXPECT_EQ(warnings.size(), OutputParser::kMaxWarnings + 1);
  EXPECT_NE(warnings.back().find("more warnings not shown"), std::string::npos);
  EXPECT_EQ(parser.tool_calls().size(), 100u);
}

TEST(OutputParser, RandomMarkupSoupIsSplitIndependent) {
  // Fragments of every spelling the parser knows, glued at random: the fuzz target's property, in CI.
  const std::vector<std::string> pieces = {"<｜DSML｜tool_calls>",
                                           "</｜DSML｜tool_calls>",
                                           "<｜DSML｜invoke name=\"f\">",
                                           "</｜DSML｜invoke>",
                                           "<｜DSML｜parameter name=\"p\" string=\"true\">",
                                           "<｜DSML｜parameter name=\"q\" string=\"false\">",
                                           "</｜DSML｜parameter>",
                                           "</think>",
                                           kEos,
                                           "\n\n",
                                           "\n",
                                           " ",
                                           "{\"k\": 1}",
                                           "42",
                                           "text",
                                           "\"",
                                           "\\",
                                           "中",
                                           "<",
                                           "<｜DSML｜",
                                           "<｜DSML｜invoke",
                                           "=\"",
                                           "\x01"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    std::string text;
    std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1);
    for (int i = 0; i < 24; ++i) text += pieces[pick(rng)];
    parse(text, ParserOptions{.thinking = trial % 2 == 1});
  }
}

}  // namespace
}  // namespace strata::text
