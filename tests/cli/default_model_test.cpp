// `strata generate` / `strata serve` without --model use the embedded default, the demo model in models/demo/
// (src/cli/default_model.h). Without that folder they fail with an error that says what is missing and how to get
// it; with it, generate runs on it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/run_strata.h"
#include "test_util.h"

namespace strata::test {
namespace {

// The repository's models/demo/ (the tests run from a build of this source tree).
std::filesystem::path demo_model_dir() {
  return (std::filesystem::path(STRATA_FIXTURES) / ".." / ".." / "models" / "demo").lexically_normal();
}

void expect_missing_default_named(const Outcome& r) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("no --model DIR given, and the default model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(demo_model_dir().string()), std::string::npos) << "the error names where it looked: " << r.err;
  EXPECT_NE(r.err.find("docs/demo_model.md"), std::string::npos) << r.err;
}

TEST(DefaultModel, GenerateWithoutModelUsesTheDemoModelOrSaysItIsMissing) {
  const Outcome ids = run_strata({"generate", "--prompt-ids", "1,2,3", "--max-tokens", "2"});
  if (std::filesystem::exists(demo_model_dir() / "config.json")) {
    EXPECT_EQ(ids.code, 0) << ids.err;
    EXPECT_FALSE(ids.out.empty());
    return;
  }
  expect_missing_default_named(ids);
  // The offline batch mode checks the same before reading anything else.
  expect_missing_default_named(run_strata({"generate", "--input", "/dev/null", "--output", "-"}));
}

// `strata serve` without --model resolves the default before it reads its other options. With models/demo/ there
// (the committed checkout) it gets past that to the first invalid option, so the error is about --port, not the
// model; without it, the error names the missing default. Either way the check runs: an invalid port makes serve
// exit before it would bind and serve.
TEST(DefaultModel, ServeWithoutModelUsesTheDemoModelOrSaysItIsMissing) {
  const Outcome r = run_strata({"serve", "--port", "70000"});
  if (std::filesystem::exists(demo_model_dir() / "config.json")) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("--port"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("default model"), std::string::npos) << "the default was found: " << r.err;
    return;
  }
  expect_missing_default_named(r);
}

// The README's main command: a question through the whole chat path on the embedded default. A --chat request's own
// max_tokens is honoured (this thinking-mode reply needs more than the 16-token default to reach its content).
TEST(DefaultModel, ChatRequestsAreAnsweredWithTheirOwnMaxTokens) {
  if (!std::filesystem::exists(demo_model_dir() / "config.json")) GTEST_SKIP() << "models/demo/ is absent";
  const std::string dir = temp_dir("default_model_chat");
  auto request = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir + "/" + name) << body;
    return dir + "/" + name;
  };
  const Outcome sum =
      run_strata({"generate", "--chat", request("sum.json", R"({"messages": [{"role": "user", "content": "What is 23 plus 45?"}]})")});
  EXPECT_EQ(sum.code, 0) << sum.err;
  EXPECT_NE(sum.out.find(R"("content": "68")"), std::string::npos) << sum.out;
  const Outcome thinking = run_strata(
      {"generate", "--chat",
       request("think.json", R"({"messages": [{"role": "user", "content": "What is the capital of Kenya?"}],
                                 "chat_template_kwargs": {"thinking": true}, "max_tokens": 64})")});
  EXPECT_EQ(thinking.code, 0) << thinking.err;
  EXPECT_NE(thinking.out.find(R"("content": "Nairobi")"), std::string::npos) << thinking.out;
  EXPECT_EQ(thinking.out.find(R"("reasoning_content": "")"), std::string::npos) << thinking.out;
  const Outcome bad = run_strata(
      {"generate", "--chat", request("bad.json", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": -1})")});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("bad.json: max_tokens: expected a count ≥ 0, found -1"), std::string::npos) << bad.err;
}

TEST(DefaultModel, AnExplicitModelIsUsedAsGiven) {
  const Outcome r = run_strata({"generate", "--model", "/nonexistent/model", "--prompt-ids", "1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("default model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata::test
