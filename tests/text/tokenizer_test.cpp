// The DeepSeek tokenizer against HF tokenizers: the committed corpus and its expected ids (made by HF tokenizers
// 0.23.2, tests/reference/tokenizer_parity.py), a few spelled-out cases, the V4 test tokenizer, loading errors and
// the `strata tokenize` command.
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"
#include "text/pretokenizer.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"

namespace strata::text {
namespace {

std::string v3_dir() { return std::string(STRATA_TEST_DATA) + "/tokenizer-deepseek_v3"; }

// One load per test process (the file is 7.8 MB).
const Tokenizer& v3() {
  static const Tokenizer t = [] {
    if (!std::filesystem::exists(v3_dir() + "/tokenizer.json"))
      throw std::runtime_error("missing " + v3_dir() + "/tokenizer.json: run scripts/fetch_test_data.sh");
    return Tokenizer::load(v3_dir());
  }();
  return t;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string fixture_path(const std::string& name) { return test::fixture("tokenizer/" + name); }

// First difference between two id lists, for messages.
std::string first_difference(const std::vector<int32_t>& ours, const std::vector<int32_t>& ref) {
  size_t k = 0;
  while (k < ours.size() && k < ref.size() && ours[k] == ref[k]) ++k;
  std::ostringstream s;
  s << "at token " << k << ": ours";
  for (size_t i = k; i < std::min(ours.size(), k + 5); ++i) s << " " << ours[i];
  s << " vs HF";
  for (size_t i = k; i < std::min(ref.size(), k + 5); ++i) s << " " << ref[i];
  return s.str();
}

TEST(TokenizerParity, CorpusMatchesHfTokenizersInBothModes) {
  const std::vector<std::string> corpus = read_lines(fixture_path("corpus.jsonl"));
  const std::vector<std::string> special = read_lines(fixture_path("expected_parse_special.jsonl"));
  const std::vector<std::string> plain = read_lines(fixture_path("expected_plain.jsonl"));
  ASSERT_EQ(corpus.size(), special.size());
  ASSERT_EQ(corpus.size(), plain.size());
  size_t bytes = 0, mismatches = 0, tokens = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = nlohmann::json::parse(corpus[i]).get<std::string>();
    bytes += text.size();
    const auto want_special = nlohmann::json::parse(special[i]).get<std::vector<int32_t>>();
    const nlohmann::json plain_json = nlohmann::json::parse(plain[i]);
    const auto want_plain = plain_json.is_null() ? want_special : plain_json.get<std::vector<int32_t>>();
    const std::vector<int32_t> got_special = v3().encode(text, /*parse_special=*/true);
    const std::vector<int32_t> got_plain = v3().encode(text, /*parse_special=*/false);
    tokens += got_special.size() + got_plain.size();
    if (got_special != want_special && ++mismatches <= 5)
      ADD_FAILURE() << "parse-special, corpus line " << i + 1 << " " << first_difference(got_special, want_special)
                    << "\n  text: " << corpus[i].substr(0, 200);
    if (got_plain != want_plain && ++mismatches <= 5)
      ADD_FAILURE() << "plain, corpus line " << i + 1 << " " << first_difference(got_plain, want_plain)
                    << "\n  text: " << corpus[i].substr(0, 200);
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GE(bytes, 1000000u) << "the parity corpus should hold at least 1 MB of text";
  EXPECT_GT(tokens, 800000u);
}

TEST(TokenizerParity, SpelledOutCases) {
  struct Case {
    std::string text;
    bool parse_special;
    std::vector<int32_t> ids;  // from HF tokenizers 0.23.2
  };
  const std::vector<Case> cases = {
      {"Hello world <｜User｜> 123456 你好", true, {19923, 2058, 223, 128803, 223, 6895, 18009, 223, 30594}},
      {"Hello world <｜User｜> 123456 你好", false, {19923, 2058, 818, 28217, 6756, 28217, 32, 223, 6895, 18009, 223, 30594}},
      {"  leading and trailing  ", false, {223, 6646, 305, 52964, 262}},  // \s+(?!\S) leaves one space to the word
      {"12345678", false, {6895, 18009, 2597}},                          // digits in groups of three
      {"a\xF0\x9F\xAB\xA9!", false, {67, 3574, 107, 105, 3}},            // U+1FAE9 (Unicode 16) is a symbol
      {"x\xE1\xA0\x8Ey", false, {90, 115522, 239, 91}},                  // U+180E is not white space
      {"<｜begin▁of▁sentence｜>hi<|EOT|>", true, {0, 6366, 128805}},
      {"\xF0\x9F\x98\x80", false, {28927, 225}},
  };
  for (const Case& c : cases) EXPECT_EQ(v3().encode(c.text, c.parse_special), c.ids) << c.text;
  EXPECT_TRUE(v3().encode("", true).empty());
}

TEST(TokenizerParity, ConcurrentEncodesAgree) {
  // One Tokenizer shared by several threads (its BPE cache is shared, its regex scratch is per thread).
  const std::vector<std::string> corpus = read_lines(fixture_path("corpus.jsonl"));
  const std::vector<std::string> special = read_lines(fixture_path("expected_parse_special.jsonl"));
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < corpus.size(); i += 5) {
    texts.push_back(nlohmann::json::parse(corpus[i]).get<std::string>());
    want.push_back(nlohmann::json::parse(special[i]).get<std::vector<int32_t>>());
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < texts.size(); ++k) {
        const size_t i = (k * 7 + static_cast<size_t>(t) * 131) % texts.size();
        if (v3().encode(texts[i], true) != want[i]) ++wrong;
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(TokenizerVocabulary, IdsTextsAndConfig) {
  const Tokenizer& t = v3();
  EXPECT_EQ(t.vocab_size(), 128815);
  EXPECT_EQ(t.token_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(t.token_id("<｜User｜>"), 128803);
  EXPECT_EQ(t.token_id("Hello"), 19923);
  EXPECT_EQ(t.token_id("no such token"), std::nullopt);
  EXPECT_EQ(t.token_text(128803), "<｜User｜>");
  EXPECT_EQ(t.token_text(2058), "\xC4\xA0world");  // the raw vocabulary spelling ("Ġworld")
  EXPECT_EQ(t.token_text(999999), "");
  EXPECT_TRUE(t.is_special(0));
  EXPECT_TRUE(t.is_special(128000));       // placeholders are special
  EXPECT_FALSE(t.is_special(128803));      // "<｜User｜>" is a non-special added token in the V3 file
  EXPECT_FALSE(t.is_special(19923));
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.encode("hi", false, /*add_bos=*/true), (std::vector<int32_t>{0, 6366}));
  EXPECT_EQ(t.encode("hi", false, /*add_bos=*/false), (std::vector<int32_t>{6366}));
  EXPECT_EQ(t.added_tokens().size(), 818u);
}

TEST(TokenizerDecode, RoundTripsAndSkipsSpecialTokens) {
  const Tokenizer& t = v3();
  const std::vector<std::string> corpus = read_lines(fixture_path("corpus.jsonl"));
  for (size_t i = 0; i < corpus.size(); i += 7) {
    const std::string text = nlohmann::json::parse(corpus[i]).get<std::string>();
    ASSERT_EQ(t.decode(t.encode(text, false)), text) << "corpus line " << i + 1;
    ASSERT_EQ(t.decode(t.encode(text, true)), text) << "corpus line " << i + 1;
  }
  const std::vector<int32_t> ids = {0, 19923, 128803, 1};
  EXPECT_EQ(t.decode(ids), "<｜begin▁of▁sentence｜>Hello<｜User｜><｜end▁of▁sentence｜>");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "Hello<｜User｜>");
  EXPECT_EQ(t.decode({999999, 19923, -5}), "Hello");  // unknown ids are dropped, as HF does
  EXPECT_EQ(t.decode({228}), "\xEF\xBF\xBD");          // a lone continuation byte
  EXPECT_EQ(t.decode({28927}), "\xEF\xBF\xBD");        // the first three bytes of an emoji
}

TEST(TokenizerEncode, RejectsInvalidUtf8) {
  try {
    v3().encode("ok \xC3(", false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 (byte offset 3)"), std::string::npos) << e.what();
  }
}

TEST(TokenizerRegex, OnigurumaConstructsMeanTheSameInPcre2) {
  const std::string space = onig_to_pcre2(R"(\s+)");
  EXPECT_EQ(space.find("180E"), std::string::npos);
  EXPECT_NE(space.find("\\x{85}"), std::string::npos);
  EXPECT_EQ(onig_to_pcre2(R"(\p{Han}[a-z])"), R"(\p{Han}[a-z])");  // no table: unchanged
  EXPECT_NE(onig_to_pcre2(R"([^\p{L}])").find("\\x{31350}-\\x{323AF}"), std::string::npos);  // CJK Ext H

  const SplitRegex symbols(onig_to_pcre2(R"( ?[\p{P}\p{S}]+)"), "test");
  std::vector<std::pair<size_t, size_t>> m;
  symbols.find_all("a\xF0\x9F\xAB\xA9!", m);  // U+1FAE9 then "!": one run of symbols
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{1, 6}));
  m.clear();
  const SplitRegex spaces(onig_to_pcre2(R"(\s+(?!\S)|\s+)"), "test");
  spaces.find_all("a   b", m);  // the lookahead leaves the last space out of the first run
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{1, 3}, {3, 4}}));
  m.clear();
  const SplitRegex empty(onig_to_pcre2("x*"), "test");
  empty.find_all("axxb", m);  // Oniguruma's find_iter: (0,0) (1,3) (4,4) — no empty match right after a match
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 3}, {4, 4}}));
}

TEST(TokenizerV4, TestTokenizerAddsTheV4Tokens) {
  const std::string dir = test::temp_dir("v4_tokenizer");
  write_test_tokenizer(v3_dir(), dir);
  const Tokenizer t = Tokenizer::load(dir);
  for (const V4AddedToken& token : v4_added_tokens()) {
    EXPECT_EQ(t.token_id(token.content), token.id) << token.content;
    EXPECT_EQ(t.token_text(token.id), token.content);
    EXPECT_EQ(t.is_special(token.id), token.special);
  }
  EXPECT_EQ(t.vocab_size(), 128847);
  EXPECT_EQ(t.token_id("<｜User｜>"), 128803);
  // A prompt and its ids as the real V4 tokenizer gives them (a public check against deepseek-ai's file).
  const std::string prompt = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>";
  const std::vector<int32_t> ids = {128803, 30594, 128804, 128821, 36101, 128822, 7624, 1};
  EXPECT_EQ(t.encode(prompt, /*parse_special=*/true), ids);
  EXPECT_EQ(t.decode(ids), prompt);
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "<｜User｜>你好<｜Assistant｜><think>推理</think>答案");
  EXPECT_EQ(t.encode("<think>", false), v3().encode("<think>", false));  // plain text when not parsing
  EXPECT_EQ(t.encode("<｜DSML｜invoke name=\"f\">", true)[1], 128825);
  EXPECT_THROW(write_test_tokenizer(dir, test::temp_dir("v4_again")), Error);  // not a V3 base any more
  std::filesystem::remove_all(dir);
}

TEST(TokenizerAddedTokens, StripFlagsAndTheTwoPassesMatchHf) {
  // V3 plus tokens with lstrip / rstrip, and a non-normalized token that overlaps a normalized one (HF cuts the
  // non-normalized ones first). Expected ids from HF tokenizers 0.23.2 on the same file.
  std::ifstream in(v3_dir() + "/tokenizer.json");
  nlohmann::json spec = nlohmann::json::parse(in);
  const auto token = [](int id, const char* content, bool lstrip, bool rstrip, bool normalized, bool special) {
    return nlohmann::json{{"id", id},         {"content", content},       {"single_word", false}, {"lstrip", lstrip},
                          {"rstrip", rstrip}, {"normalized", normalized}, {"special", special}};
  };
  spec["added_tokens"].push_back(token(128815, "[L]", true, false, false, true));
  spec["added_tokens"].push_back(token(128816, "[R]", false, true, true, false));
  spec["added_tokens"].push_back(token(128817, "[LR]", true, true, false, true));
  spec["added_tokens"].push_back(token(128818, "<｜User｜>x", false, false, false, true));
  const std::string dir = test::temp_dir("tok_flags");
  std::ofstream(dir + "/tokenizer.json") << spec.dump();
  std::filesystem::copy_file(v3_dir() + "/tokenizer_config.json", dir + "/tokenizer_config.json");
  const Tokenizer t = Tokenizer::load(dir);
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"a [L] b", {67, 128815, 291}},
      {"a   [L]b", {67, 128815, 68}},
      {"a\u3000\u00a0[R]   \n b", {67, 18524, 2162, 128816, 68}},
      {"[L][L]  [R]  [R]", {128815, 128815, 262, 128816, 128816}},
      {"x [LR] y", {90, 128817, 91}},
      {"  [LR]  [LR]  ", {128817, 128817}},
      {"<｜User｜>x<｜User｜>y", {128818, 128803, 91}},
      {"a<｜User｜>xx", {67, 128818, 90}},
      {"[R]\u0085\u180e z", {128816, 115522, 239, 961}},  // rstrip takes U+0085 (White_Space), not U+180E
      {"\t[L]", {128815}},
  };
  for (const auto& [text, ids] : cases) EXPECT_EQ(t.encode(text, true), ids) << text;
  std::filesystem::remove_all(dir);
}

// Writes a tokenizer directory from the V3 config and a small tokenizer.json with `edit` applied.
std::string broken_tokenizer(const std::string& tag, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json spec = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array({{{"id", 3}, {"content", "<s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
  };
  edit(spec);
  const std::string dir = test::temp_dir("tok_" + tag);
  std::ofstream(dir + "/tokenizer.json") << spec.dump();
  std::ofstream(dir + "/tokenizer_config.json") << R"({"add_bos_token": false, "bos_token": "<s>"})";
  return dir;
}

std::string load_error(const std::string& dir) {
  try {
    Tokenizer::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerLoad, ErrorsNameTheFileAndField) {
  const std::string ok = broken_tokenizer("ok", [](nlohmann::json&) {});
  const Tokenizer small = Tokenizer::load(ok);
  EXPECT_EQ(small.encode("ab<s>", true), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(small.bos_id(), 3);

  const auto expect_error = [](const std::string& dir, const std::string& needle) {
    const std::string message = load_error(dir);
    EXPECT_NE(message.find(needle), std::string::npos) << "expected '" << needle << "' in: " << message;
  };
  expect_error(test::temp_dir("tok_missing"), "tokenizer.json: cannot open");
  expect_error(broken_tokenizer("merge", [](nlohmann::json& s) { s["model"]["merges"] = {"a c"}; }),
               "tokenizer.json: model.merges: merge 0 (\"a c\"): token \"c\" is not in the vocabulary");
  expect_error(broken_tokenizer("merge_form", [](nlohmann::json& s) { s["model"]["merges"] = {"a b c"}; }),
               "model.merges[0]: expected two tokens separated by one space");
  expect_error(broken_tokenizer("pretok", [](nlohmann::json& s) { s["pre_tokenizer"] = {{"type", "Whitespace"}}; }),
               "pre_tokenizer: pre-tokenizer type \"Whitespace\" is not supported");
  expect_error(broken_tokenizer("regex", [](nlohmann::json& s) {
                 s["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}, {"invert", false}};
               }),
               "pre_tokenizer.pattern.Regex: cannot compile the regex '(a'");
  expect_error(broken_tokenizer("id", [](nlohmann::json& s) { s["added_tokens"][0]["id"] = 7; }),
               "added_tokens[0] (\"<s>\"): the file gives id 7 but HF tokenizers assigns 3");
  expect_error(broken_tokenizer("model", [](nlohmann::json& s) { s["model"]["type"] = "Unigram"; }),
               "model.type: expected \"BPE\"");
  expect_error(broken_tokenizer("normalizer", [](nlohmann::json& s) { s["normalizer"] = {{"type", "NFC"}}; }),
               "normalizer: only none");
  const std::string bad_config = broken_tokenizer("config", [](nlohmann::json&) {});
  std::ofstream(bad_config + "/tokenizer_config.json") << R"({"add_bos_token": true, "bos_token": "<nope>"})";
  expect_error(bad_config, "tokenizer_config.json: bos_token: \"<nope>\" is not a token");
}

// Runs the strata binary; returns its exit status and fills stdout.
int run_strata(const std::string& args, std::string& out) {
  const std::string command = std::string(STRATA_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  out.clear();
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(TokenizerCli, PrintsIdsAndReportsBadInput) {
  std::string out;
  ASSERT_EQ(run_strata("tokenize --model " + v3_dir() + " --text 'Hello world <｜User｜>' --parse-special", out), 0) << out;
  EXPECT_EQ(out, "[19923, 2058, 223, 128803]\n");
  ASSERT_EQ(run_strata("tokenize --model " + v3_dir() + " --text 'Hello world'  --add-bos", out), 0) << out;
  EXPECT_EQ(out, "[0, 19923, 2058]\n");

  const std::string dir = test::temp_dir("tok_cli");
  std::ofstream(dir + "/in.jsonl") << "\"Hello\"\n\"<｜User｜>\"\n\"\"\n";
  ASSERT_EQ(run_strata("tokenize --model " + v3_dir() + " --jsonl " + dir + "/in.jsonl", out), 0) << out;
  EXPECT_EQ(out, "[19923]\n[30, 28217, 6756, 28217, 32]\n[]\n");
  ASSERT_EQ(run_strata("tokenize --model " + v3_dir() + " --jsonl " + dir + "/in.jsonl --bench --repeats 2", out), 0) << out;
  const nlohmann::json report = nlohmann::json::parse(out);
  EXPECT_EQ(report["input_bytes"], 5 + 12);
  EXPECT_EQ(report["tokens"], 6);
  EXPECT_GT(report["mb_per_s"].get<double>(), 0.0);

  std::ofstream(dir + "/bad.jsonl") << "\"ok\"\n42\n";
  EXPECT_EQ(run_strata("tokenize --model " + v3_dir() + " --jsonl " + dir + "/bad.jsonl", out), 1);
  EXPECT_NE(out.find("line 2: expected a JSON string, found number"), std::string::npos) << out;
  EXPECT_EQ(run_strata("tokenize --model " + v3_dir(), out), 1);
  EXPECT_NE(out.find("give exactly one of --text, --text-file or --jsonl"), std::string::npos) << out;
  EXPECT_EQ(run_strata("tokenize --model /nonexistent --text x", out), 1);
  EXPECT_NE(out.find("--model /nonexistent: does not exist"), std::string::npos) << out;
  ASSERT_EQ(run_strata("tokenize --help", out), 0);
  EXPECT_NE(out.find("example"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::text
