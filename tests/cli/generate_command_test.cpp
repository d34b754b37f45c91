// `strata generate` with one prompt, as a process: a --chat file is read and refused exactly as the server reads
// a request body, its default max_tokens is the rest of the context (as the server's), max_tokens past the context
// is refused naming the limit, "--chat -" reads stdin, and options that do not go together say so.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli/run_strata.h"
#include "server/served_model.h"

namespace strata::test {
namespace {

class GenerateCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_tokenizer()) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
    dir_ = temp_dir("generate_command");
  }
  std::string request(const std::string& name, const std::string& body) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << body;
    return path;
  }
  Outcome chat(const std::string& body, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"generate", "--model", served_model_dir(), "--chat", request("req.json", body)};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_strata(args);
  }
  std::string dir_;
};

// The counts of the timing line on stderr: "prefill: P tokens ...; decode: D tokens ...".
std::pair<int, int> prefill_and_decode(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(prefill: (\d+) tokens.*decode: (\d+) tokens)"))) return {-1, -1};
  return {std::stoi(m[1]), std::stoi(m[2])};
}

TEST_F(GenerateCommand, ChatWithoutMaxTokensRunsToTheEndOfTheContext) {
  const Outcome r = chat(R"({"messages": [{"role": "user", "content": "Hi"}], "ignore_eos": true})",
                         {"--max-model-len", "40"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto [prefill, decode] = prefill_and_decode(r.err);
  EXPECT_GT(prefill, 0) << r.err;
  EXPECT_EQ(prefill + decode, 40) << r.err;  // not 16: the server's default, the rest of the context
  // --max-tokens still wins over the request.
  const Outcome capped = chat(R"({"messages": [{"role": "user", "content": "Hi"}], "ignore_eos": true, "max_tokens": 9})",
                              {"--max-tokens", "3"});
  ASSERT_EQ(capped.code, 0) << capped.err;
  EXPECT_EQ(prefill_and_decode(capped.err).second, 3) << capped.err;
}

TEST_F(GenerateCommand, ChatFilesAreCheckedAsTheServerChecksABody) {
  const std::string hi = R"("messages": [{"role": "user", "content": "Hi"}])";
  const struct {
    std::string body, error;
  } cases[] = {
      {"{" + hi + R"(, "temperature": -1})", "req.json: temperature: expected a number ≥ 0, found -1"},
      {"{" + hi + R"(, "frobnicate": 1})", "req.json: frobnicate: unknown parameter"},
      {"{" + hi + R"(, "stream": true})", "req.json: stream: strata generate prints the whole reply"},
      {"{" + hi + R"(, "n": 2})", "req.json: n: strata generate prints one reply, found n = 2"},
      {"{" + hi + R"(, "logprobs": true})", "req.json: logprobs: strata generate prints no logprobs"},
      {"{" + hi + R"(, "max_tokens": 5000})", "req.json: max_tokens: the prompt has"},
      {"{" + hi + R"(, "model": "gpt-4o"})", "req.json: the model 'gpt-4o' does not exist"},
      {R"({"messages": []})", "req.json: messages: empty"},
      {"{ nope", "req.json: the request body is not valid JSON"},
  };
  for (const auto& c : cases) {
    const Outcome r = chat(c.body);
    EXPECT_EQ(r.code, 1) << c.body;
    EXPECT_NE(r.err.find(c.error), std::string::npos) << c.body << "\n" << r.err;
  }
}

TEST_F(GenerateCommand, ChatRequestSettingsAreHonoured) {
  // A stop string ends the reply as the server ends it: the text is cut before it.
  const Outcome free_run = chat(R"({"messages": [{"role": "user", "content": "Hi"}], "ignore_eos": true,
                                    "max_tokens": 24, "temperature": 0})");
  ASSERT_EQ(free_run.code, 0) << free_run.err;
  // The random model's reply; a stop string taken from its middle (an ASCII character not seen before it) must cut
  // it there.
  const std::string content = nlohmann::json::parse(free_run.out)["content"];
  size_t at = 1;
  while (at < content.size() && (static_cast<unsigned char>(content[at]) >= 0x80 || content[at] < ' ' ||
                                 content.find(content[at]) < at))
    ++at;
  if (at >= content.size()) GTEST_SKIP() << "no character of the reply to cut it at: " << content;
  const std::string stop(1, content[at]);
  const Outcome stopped = chat(nlohmann::json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                              {"ignore_eos", true}, {"max_tokens", 24}, {"temperature", 0},
                                              {"stop", stop}}
                                   .dump());
  ASSERT_EQ(stopped.code, 0) << stopped.err;
  EXPECT_EQ(nlohmann::json::parse(stopped.out)["content"], content.substr(0, at));
}

TEST_F(GenerateCommand, ChatFromStdin) {
  const std::string body = request("stdin.json", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})");
  const Outcome r = run_strata({"generate", "--model", served_model_dir(), "--chat", "-"}, body);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"content\""), std::string::npos) << r.out;
  const Outcome bad = run_strata({"generate", "--model", served_model_dir(), "--chat", "-"}, "/dev/null");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--chat (stdin): the request body is not valid JSON"), std::string::npos) << bad.err;
}

TEST_F(GenerateCommand, MaxTokensPastTheContextIsRefusedNamingTheLimit) {
  const Outcome r = run_strata({"generate", "--model", served_model_dir(), "--prompt-ids", "5,6,7", "--max-tokens", "100000"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("option --max-tokens: the prompt has 3 tokens and the context is 4096 tokens (--max-model-len; "
                       "the model's max_position_embeddings is 4096), so at most 4093 can be generated; found 100000"),
            std::string::npos)
      << r.err;
  const Outcome len = run_strata({"generate", "--model", served_model_dir(), "--prompt-ids", "5,6,7", "--max-model-len", "5000"});
  EXPECT_EQ(len.code, 1);
  EXPECT_NE(len.err.find("option --max-model-len: expected 2..4096"), std::string::npos) << len.err;
  const Outcome prompt = run_strata({"generate", "--model", served_model_dir(), "--prompt-ids", "5,6,7,8", "--max-model-len", "4"});
  EXPECT_EQ(prompt.code, 1);
  EXPECT_NE(prompt.err.find("option --prompt-ids: the prompt has 4 tokens, which leaves no room"), std::string::npos) << prompt.err;
  // Up to the limit runs; the default of 16 shrinks to what is left.
  const Outcome fits = run_strata({"generate", "--model", served_model_dir(), "--prompt-ids", "5,6,7", "--max-model-len", "8",
                                   "--ignore-eos"});
  ASSERT_EQ(fits.code, 0) << fits.err;
  EXPECT_EQ(prefill_and_decode(fits.err), std::make_pair(3, 5)) << fits.err;
}

TEST(GenerateOptions, IncompatibleOptionsSaySo) {
  const Outcome r = run_strata({"generate", "--input", "x.jsonl", "--output", "-", "--prompt-ids", "5"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("options --input and --prompt-ids do not go together"), std::string::npos) << r.err;
  const Outcome t = run_strata({"generate", "--temperature", "0.5", "--input", "x.jsonl"});
  EXPECT_NE(t.err.find("options --input and --temperature do not go together"), std::string::npos) << t.err;
  const Outcome both = run_strata({"generate", "--model", "/tmp", "--prompt-ids", "5", "--prompt", "x"});
  EXPECT_NE(both.err.find("give exactly one of --prompt-ids, --prompt and --chat"), std::string::npos) << both.err;
}

TEST(GenerateOptions, SpeculativePlannerAndVerifyOptionsAreChecked) {
  const Outcome alone = run_strata({"generate", "--prompt-ids", "5", "--speculative-step-cost", "64"});
  EXPECT_EQ(alone.code, 1);
  EXPECT_NE(alone.err.find("option --speculative-step-cost: needs --speculative-tokens N with N ≥ 1"), std::string::npos)
      << alone.err;
  const Outcome negative =
      run_strata({"generate", "--prompt-ids", "5", "--speculative-tokens", "2", "--speculative-step-cost", "-1"});
  EXPECT_NE(negative.err.find("option --speculative-step-cost: expected a number of rows ≥ 0 or \"inf\", found '-1'"),
            std::string::npos)
      << negative.err;
  const Outcome word =
      run_strata({"generate", "--prompt-ids", "5", "--speculative-tokens", "2", "--speculative-step-cost", "many"});
  EXPECT_NE(word.err.find("option --speculative-step-cost: expected a number, found 'many'"), std::string::npos) << word.err;
  const Outcome verify =
      run_strata({"generate", "--prompt-ids", "5", "--speculative-tokens", "2", "--speculative-verify", "exact"});
  EXPECT_NE(verify.err.find("option --speculative-verify: expected match or rejection, found 'exact'"), std::string::npos)
      << verify.err;
}

}  // namespace
}  // namespace strata::test
