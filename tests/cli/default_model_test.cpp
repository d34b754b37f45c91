// `strata generate` / `strata serve` without --model use the embedded default, the demo model in models/demo/
// (src/cli/default_model.h). Without that folder they fail with an error that says what is missing and how to get
// it; with it, generate runs on it.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace strata::test {
namespace {

struct Outcome {
  int code = -1;
  std::string out, err;
};

Outcome run_strata(const std::vector<std::string>& args) {
  const std::string dir = temp_dir("default_model_run");
  std::string cmd = std::string("'") + STRATA_BINARY + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " 2>'" + dir + "/err'";
  FILE* p = ::popen(cmd.c_str(), "r");
  Outcome r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(dir + "/err");
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return r;
}

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

TEST(DefaultModel, ServeWithoutModelSaysTheDemoModelIsMissing) {
  if (std::filesystem::exists(demo_model_dir() / "config.json"))
    GTEST_SKIP() << "models/demo/ is present: strata serve would start serving it";
  expect_missing_default_named(run_strata({"serve", "--port", "0"}));
}

TEST(DefaultModel, AnExplicitModelIsUsedAsGiven) {
  const Outcome r = run_strata({"generate", "--model", "/nonexistent/model", "--prompt-ids", "1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("default model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata::test
