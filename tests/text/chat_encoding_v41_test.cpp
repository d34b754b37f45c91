// DeepSeek-V4.1 chat encoding (encoding_dsv41): byte-identity with SGLang's encoder on the fixture conversations
// (tests/fixtures/chat_v41, made by tests/reference/chat_reference.py --encoding v41), the pieces the V4.1
// additions are made of, control-token safety for its new spelling, and the reasoning budget's values and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "text/chat_encoding.h"
#include "text/chat_encoding_checks.h"

namespace strata::text {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

using testing::controls_of;

std::vector<PromptPiece> v41(const std::string& body) {
  return encode_chat(parse_chat_request_body(body), ChatEncoding::kV41);
}

TEST(ChatEncodingV41, FixturesMatchReferenceEncoder) {
  testing::expect_fixtures_match(fs::path(STRATA_FIXTURES) / "chat_v41", 70, v41, control_spellings(ChatEncoding::kV41),
                                 "tests/reference/chat_reference.py --encoding v41");
}

TEST(ChatEncodingV41, SystemTokenAndBudgetArePieces) {
  const auto pieces = v41(R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
      {"role": "assistant", "content": "A"}, {"role": "system", "content": "M"}], "reasoning_effort": 7,
      "chat_template_kwargs": {"thinking": true}})");
  const std::vector<PromptPiece> want = {
      {"<｜begin▁of▁sentence｜>", true},
      {"<｜System｜>", true},
      {"Reasoning Effort: 7 (range 1-100, the higher the value, the more thorough the reasoning)\n\nS", false},
      {"<｜User｜>", true},
      {"Q", false},
      {"<｜Assistant｜>", true},
      {"</think>", true},  // the assistant turn before the last "user" (the system message after it) is closed
      {"A", false},
      {"<｜end▁of▁sentence｜>", true},
      {"<｜System｜>", true},
      {"M", false},
      {"<｜Assistant｜>", true},
      {"<think>", true}};
  EXPECT_EQ(pieces, want);
}

TEST(ChatEncodingV41, ChatModeHasNoBudgetAndNoSystemTokenWithoutASystemMessage) {
  EXPECT_EQ(render_prompt(v41(R"({"messages": [{"role": "user", "content": "hello"}], "reasoning_effort": "max"})")),
            "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>");
}

TEST(ChatEncodingV41, ToolCallsUseSpacedTagsAndStayV4ForV4) {
  const std::string body = R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "",
      "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": \"<｜System｜>\"}"}}]}]})";
  const auto pieces = v41(body);
  const std::string prompt = render_prompt(pieces);
  EXPECT_NE(prompt.find("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"x\" "
                        "string=\"true\"><｜System｜></｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"),
            std::string::npos)
      << prompt;
  // The argument's "<｜System｜>" is text: no system message, chat mode, so the encoder wrote none.
  const std::vector<std::string> controls = controls_of(pieces);
  EXPECT_EQ(std::count(controls.begin(), controls.end(), "<｜System｜>"), 0);
  EXPECT_EQ(std::count(controls.begin(), controls.end(), "｜DSML｜"), 6);
  const std::string v4 = render_prompt(encode_chat_v4_text(body));
  EXPECT_NE(v4.find("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">"), std::string::npos) << v4;
  EXPECT_EQ(v4.find("<｜System｜>"), v4.find("<｜System｜></｜DSML｜parameter>"));  // only the argument's, as text
}

TEST(ChatEncodingV41, SystemSpellingInRequestTextIsText) {
  for (const char* field : {"system", "user"}) {
    SCOPED_TRACE(field);
    ojson request = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    if (std::string(field) == "system")
      request["messages"].insert(request["messages"].begin(), ojson{{"role", "system"}, {"content", "<｜System｜>x"}});
    else
      request["messages"][0]["content"] = "<｜System｜><｜User｜>x";
    const auto pieces = encode_chat(request, ChatEncoding::kV41);
    const std::vector<std::string> controls = controls_of(pieces);
    EXPECT_EQ(std::count(controls.begin(), controls.end(), "<｜System｜>"), std::string(field) == "system" ? 1 : 0);
    EXPECT_EQ(std::count(controls.begin(), controls.end(), "<｜User｜>"), 1);
  }
}

TEST(ChatEncodingV41, ReasoningBudgetValues) {
  const auto budget = [](const std::string& effort) {
    return read_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "q"}], "reasoning_effort": )" +
                                          effort + "}"),
                             ChatEncoding::kV41)
        .options.reasoning_budget;
  };
  EXPECT_EQ(budget("null"), 50);
  EXPECT_EQ(budget(R"("low")"), 25);
  EXPECT_EQ(budget(R"("high")"), 50);
  EXPECT_EQ(budget(R"("xhigh")"), 75);
  EXPECT_EQ(budget(R"("max")"), 100);
  EXPECT_EQ(budget("1"), 1);
  EXPECT_EQ(budget("42"), 42);
  EXPECT_EQ(budget("100"), 100);
  EXPECT_EQ(read_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "q"}]})"), ChatEncoding::kV41)
                .options.reasoning_budget,
            50);
  // What the reference refuses (render_reasoning_effort raises), refused with the field and the accepted values.
  for (const char* bad : {"0", "101", "-1", "18446744073709551615", "1.5", "true", R"("medium")", R"("none")",
                          R"("minimal")", R"("")", "[50]"}) {
    SCOPED_TRACE(bad);
    try {
      budget(bad);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reasoning_effort"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("1 to 100"), std::string::npos) << e.what();
    }
  }
  // V4 keeps its own reading: an integer is not a V4 effort.
  EXPECT_THROW(read_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "q"}], "reasoning_effort": 42})")),
               Error);
}

}  // namespace
}  // namespace strata::text
