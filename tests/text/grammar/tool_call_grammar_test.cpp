// tool_choice grammars (text/tool_call_grammar.h) over bytes: the chat encoder's own rendering of a call is a
// sentence; calls to undeclared functions, arguments against the schema, a second call without parallel_tool_calls
// and markup inside free text are not.
#include "text/tool_call_grammar.h"

#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "text/chat_encoding.h"
#include "text/grammar/ebnf_parser.h"

namespace strata::text {
namespace {

using grammar::CompiledGrammar;
using grammar::testing::accepts;
using grammar::testing::accepts_prefix;
using grammar::testing::byte_vocab;
using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["C", "F"]}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
])");

std::shared_ptr<const CompiledGrammar> compile(const ToolCallGrammarOptions& options) {
  return CompiledGrammar::from_ebnf(tool_call_ebnf(kTools, options), byte_vocab());
}

// What the V4 chat encoder writes for an assistant turn with these calls (after the content).
std::string rendered(const std::string& content, const ojson& calls) {
  ojson request = {{"messages", ojson::array({{{"role", "user"}, {"content", "q"}},
                                              {{"role", "assistant"}, {"content", content}, {"tool_calls", calls}}})},
                   {"tools", kTools}};
  const std::string prompt = render_prompt(encode_chat_v4(request));
  const size_t start = prompt.rfind("</think>") + std::string("</think>").size();
  const size_t end = prompt.rfind("<｜end▁of▁sentence｜>");
  return prompt.substr(start, end - start);
}

ojson call(const std::string& name, const std::string& arguments) {
  return {{"id", "c"}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

TEST(ToolCallGrammar, AcceptsTheEncodersRendering) {
  const auto required = compile({ToolCallGrammarOptions::kRequired, "", true});
  const std::string one = rendered("", ojson::array({call("get_weather", R"({"city": "Paris", "days": 3})")}));
  EXPECT_TRUE(accepts(required, one)) << one;
  const std::string two = rendered("", ojson::array({call("get_weather", R"({"city": "Oslo", "unit": "C"})"),
                                                     call("now", "{}")}));
  EXPECT_TRUE(accepts(required, two)) << two;
  const auto single = compile({ToolCallGrammarOptions::kRequired, "", false});
  EXPECT_TRUE(accepts(single, one));
  EXPECT_FALSE(accepts(single, two)) << "parallel_tool_calls false: one call";
  const auto automatic = compile({ToolCallGrammarOptions::kAuto, "", true});
  const std::string with_text = rendered("Let me check.", ojson::array({call("now", "{}")}));
  EXPECT_TRUE(accepts(automatic, with_text)) << with_text;
  EXPECT_TRUE(accepts(automatic, "Just an answer, no call."));
  EXPECT_FALSE(accepts(required, "Just an answer, no call."));
}

TEST(ToolCallGrammar, RefusesUndeclaredFunctionsAndBadArguments) {
  const auto g = compile({ToolCallGrammarOptions::kAuto, "", true});
  const std::string open = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"";
  EXPECT_FALSE(accepts_prefix(g, open + "true\">")) << "a function that is not in tools";
  EXPECT_TRUE(accepts_prefix(g, open + "get_weather\">\n"));
  const std::string weather = open + "get_weather\">\n<｜DSML｜parameter name=\"";
  EXPECT_FALSE(accepts_prefix(g, weather + "days\" string=\"false\">3")) << "city is required and comes first";
  EXPECT_FALSE(accepts_prefix(g, weather + "city\" string=\"false\">")) << "a string parameter is raw text";
  const std::string city = weather + "city\" string=\"true\">Rome</｜DSML｜parameter>\n<｜DSML｜parameter name=\"";
  EXPECT_TRUE(accepts_prefix(g, city + "days\" string=\"false\">12"));
  EXPECT_FALSE(accepts_prefix(g, city + "days\" string=\"false\">1.5")) << "days is an integer";
  EXPECT_FALSE(accepts_prefix(g, city + "unit\" string=\"true\">K")) << "unit is C or F";
  EXPECT_FALSE(accepts_prefix(g, "text with a fullwidth bar ｜ in it")) << "free text never opens markup";
}

TEST(ToolCallGrammar, NamedFunctionOnly) {
  const auto g = compile({ToolCallGrammarOptions::kFunction, "now", true});
  EXPECT_TRUE(accepts(g, rendered("", ojson::array({call("now", "{}")}))));
  EXPECT_FALSE(accepts(g, rendered("", ojson::array({call("get_weather", R"({"city": "Paris"})")}))));
  EXPECT_THROW(tool_call_ebnf(kTools, {ToolCallGrammarOptions::kFunction, "missing", true}), grammar::GrammarError);
}

TEST(ToolCallGrammar, UnsupportedParameterSchemaNamesTheToolAndParameter) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}])");
  try {
    tool_call_ebnf(tools, {});
    FAIL() << "expected an error";
  } catch (const grammar::GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("function f, parameter n"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/multipleOf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::text

namespace strata::text {
namespace {

// DeepSeek-V4.1 (ToolCallGrammarOptions::encoding): the V4.1 encoder's spaced tags are a sentence, V4's are not, and
// the V4 grammar refuses the V4.1 spelling.
TEST(ToolCallGrammar, V41SpellingAcceptsTheV41EncodersRendering) {
  ojson request = {{"messages", ojson::array({{{"role", "user"}, {"content", "q"}},
                                              {{"role", "assistant"}, {"content", ""},
                                               {"tool_calls", ojson::array({call("get_weather", R"({"city": "Oslo", "unit": "C"})"),
                                                                            call("now", "{}")})}}})},
                   {"tools", kTools}};
  const std::string prompt = render_prompt(encode_chat(request, ChatEncoding::kV41));
  const size_t start = prompt.rfind("</think>") + std::string("</think>").size();
  const std::string v41 = prompt.substr(start, prompt.rfind("<｜end▁of▁sentence｜>") - start);
  ASSERT_NE(v41.find("<｜DSML｜ calls>"), std::string::npos) << v41;
  ToolCallGrammarOptions options{ToolCallGrammarOptions::kRequired, "", true};
  options.encoding = ChatEncoding::kV41;
  const auto g41 = CompiledGrammar::from_ebnf(tool_call_ebnf(kTools, options), byte_vocab());
  EXPECT_TRUE(accepts(g41, v41)) << v41;
  const std::string v4 = rendered("", ojson::array({call("get_weather", R"({"city": "Oslo", "unit": "C"})"),
                                                   call("now", "{}")}));
  EXPECT_FALSE(accepts(g41, v4));
  EXPECT_FALSE(accepts(compile({ToolCallGrammarOptions::kRequired, "", true}), v41));
}

}  // namespace
}  // namespace strata::text
