// OutputParser with DeepSeek-V4.1's spaced tool-call tags (dsml::kV41Tags): on a set of completions that cover
// the parser's paths (parallel calls, string and JSON values, a JSON body, reasoning, malformed and stray markup,
// text after the block), the V4.1 spelling under ChatEncoding::kV41 must parse exactly as the V4 spelling under
// kV4 — the same content, reasoning, calls and number of warnings — under every chunking tried; and the other
// encoding's tags are not tool calls.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "text/chat_encoding.h"
#include "text/output_parser.h"

namespace strata::text {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";

// V4 text → the same text in V4.1's tags.
std::string to_v41(std::string s) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"｜DSML｜tool_calls", "｜DSML｜ calls"}, {"｜DSML｜invoke", "｜DSML｜ invoke"},
           {"｜DSML｜parameter", "｜DSML｜ parameter"}})
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

struct Parsed {
  std::string content, reasoning;
  std::vector<ParsedToolCall> calls;
  size_t warnings = 0;
};

Parsed parse(const std::string& text, ChatEncoding encoding, bool thinking, size_t chunk) {
  ParserOptions options;
  options.thinking = thinking;
  options.encoding = encoding;
  OutputParser parser(options);
  Parsed out;
  auto take = [&](const OutputDelta& d) {
    out.content += d.content;
    out.reasoning += d.reasoning_content;
  };
  for (size_t at = 0; at < text.size(); at += chunk) take(parser.push(std::string_view(text).substr(at, chunk)));
  take(parser.finish());
  out.calls = parser.tool_calls();
  out.warnings = parser.warnings().size();
  return out;
}

std::vector<std::string> completions() {
  const std::string p1 = "<｜DSML｜parameter name=\"city\" string=\"true\">Paris, \"FR\"\n2nd line</｜DSML｜parameter>";
  const std::string p2 = "<｜DSML｜parameter name=\"days\" string=\"false\">[1, {\"a\": null}]</｜DSML｜parameter>";
  const std::string call1 = "<｜DSML｜invoke name=\"weather\">\n" + p1 + "\n" + p2 + "\n</｜DSML｜invoke>";
  const std::string call2 = "<｜DSML｜invoke name=\"time\">\n{\"zone\": \"UTC\"}\n</｜DSML｜invoke>";
  const std::string empty = "<｜DSML｜invoke name=\"ping\">\n\n</｜DSML｜invoke>";
  return {
      "Plain answer." + kEos,
      "thinking first</think>Answer." + kEos,
      "reason</think>Let me check.\n\n<｜DSML｜tool_calls>\n" + call1 + "\n</｜DSML｜tool_calls>" + kEos,
      "r</think>\n\n<｜DSML｜tool_calls>\n" + call1 + "\n" + call2 + "\n" + empty + "\n</｜DSML｜tool_calls>" + kEos,
      "<｜DSML｜tool_calls>\n" + call2 + "\n</｜DSML｜tool_calls>\n" + kEos,
      "text <｜DSML｜parameter name=\"x\">stray</｜DSML｜parameter> more" + kEos,
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nme=\"bad\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos,
      "\n\n<｜DSML｜tool_calls>\n" + call1 + "\n</｜DSML｜tool_calls>then text" + kEos,
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"cut\">\n<｜DSML｜parameter name=\"q\" string=\"true\">unfinish",
  };
}

TEST(OutputParserV41, SpacedTagsParseAsV4TagsDo) {
  for (const std::string& v4 : completions()) {
    for (const bool thinking : {false, true}) {
      const Parsed want = parse(v4, ChatEncoding::kV4, thinking, v4.size());
      for (const size_t chunk : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
        SCOPED_TRACE(v4 + " | thinking " + std::to_string(thinking) + " | chunk " + std::to_string(chunk));
        const Parsed got = parse(to_v41(v4), ChatEncoding::kV41, thinking, chunk);
        EXPECT_EQ(got.content, to_v41(want.content));
        EXPECT_EQ(got.reasoning, to_v41(want.reasoning));
        EXPECT_EQ(got.warnings, want.warnings);
        ASSERT_EQ(got.calls.size(), want.calls.size());
        for (size_t i = 0; i < want.calls.size(); ++i) {
          EXPECT_EQ(got.calls[i].name, want.calls[i].name);
          EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments);
          EXPECT_EQ(got.calls[i].id, want.calls[i].id);
        }
      }
    }
  }
}

TEST(OutputParserV41, TheOtherEncodingsTagsAreNotToolCalls) {
  const std::string v4 = completions()[2];
  const Parsed v4_in_v41 = parse(v4, ChatEncoding::kV41, true, 5);
  EXPECT_TRUE(v4_in_v41.calls.empty());
  EXPECT_NE(v4_in_v41.content.find("<｜DSML｜tool_calls>"), std::string::npos);
  EXPECT_GT(v4_in_v41.warnings, 0u);
  const Parsed v41_in_v4 = parse(to_v41(v4), ChatEncoding::kV4, true, 5);
  EXPECT_TRUE(v41_in_v4.calls.empty());
  EXPECT_NE(v41_in_v4.content.find("<｜DSML｜ calls>"), std::string::npos);
}

// What the V4.1 encoder writes for an assistant's tool calls, the V4.1 parser reads back into the same calls.
TEST(OutputParserV41, ReadsBackWhatTheEncoderWrites) {
  const auto request = nlohmann::ordered_json::parse(R"({"messages": [{"role": "user", "content": "u"},
      {"role": "assistant", "reasoning_content": "why", "content": "ok", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"s\": \"x\\ny\", \"n\": [1, 2.5]}"}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}, {"role": "user", "content": "v"}]})");
  std::string prompt = render_prompt(encode_chat(request, ChatEncoding::kV41));
  const std::string from = "<｜Assistant｜></think>", to = "<｜end▁of▁sentence｜>";
  const size_t begin = prompt.find(from) + from.size();
  const std::string reply = prompt.substr(begin, prompt.find(to, begin) + to.size() - begin);
  ASSERT_NE(reply.find("<｜DSML｜ calls>"), std::string::npos) << reply;
  const Parsed got = parse(reply, ChatEncoding::kV41, false, 3);
  EXPECT_EQ(got.content, "ok");
  EXPECT_EQ(got.warnings, 0u);
  ASSERT_EQ(got.calls.size(), 2u);
  EXPECT_EQ(got.calls[0].name, "f");
  EXPECT_EQ(nlohmann::json::parse(got.calls[0].arguments), nlohmann::json::parse(R"({"s": "x\ny", "n": [1, 2.5]})"));
  EXPECT_EQ(got.calls[1].name, "g");
  EXPECT_EQ(got.calls[1].arguments, "{}");
}

}  // namespace
}  // namespace strata::text
