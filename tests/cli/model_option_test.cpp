// What the commands that read a checkpoint say about a bad --model, a config.json that leaves out a weight size, a
// CUDA request on a machine without one; `model info` on the default model; and `model init` leaving nothing
// behind when its tokenizer source is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/run_strata.h"
#include "test_util.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;

fs::path demo_model_dir() { return (fs::path(STRATA_FIXTURES) / ".." / ".." / "models" / "demo").lexically_normal(); }

TEST(ModelOption, AFileOrAMissingFolderIsNamedAsSuch) {
  const std::string dir = temp_dir("model_option");
  const std::string file = dir + "/model.safetensors";
  std::ofstream(file) << "not a checkpoint";
  const std::vector<std::vector<std::string>> commands = {
      {"generate", "--prompt-ids", "5"},
      {"generate", "--input", "-", "--output", "-"},
      {"model", "info"},
      {"bench", "--decode-tokens", "1"},
      {"serve", "--port", "0"},
      {"tokenize", "--text", "hi"},
  };
  for (std::vector<std::string> args : commands) {
    const size_t at = args[0] == "model" ? 2 : 1;
    args.insert(args.begin() + static_cast<std::ptrdiff_t>(at), {"--model", file});
    Outcome r = run_strata(args);
    EXPECT_EQ(r.code, 1) << args[0];
    EXPECT_NE(r.err.find("--model " + file + ": must be a directory"), std::string::npos) << args[0] << ": " << r.err;
    args[at + 1] = dir + "/missing";
    r = run_strata(args);
    EXPECT_EQ(r.code, 1) << args[0];
    EXPECT_NE(r.err.find("--model " + dir + "/missing: does not exist"), std::string::npos) << args[0] << ": " << r.err;
  }
}

TEST(ModelOption, AMissingWeightSizeIsNamed) {
  const std::string dir = temp_dir("model_missing_size");
  ASSERT_EQ(run_strata({"model", "init", "--preset", "tiny", "--out", dir}).code, 0);
  nlohmann::json config;
  std::ifstream(dir + "/config.json") >> config;
  config.erase("hidden_size");
  std::ofstream(dir + "/config.json") << config.dump(2);
  const Outcome r = run_strata({"model", "info", "--model", dir});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("config.json: field 'hidden_size': missing"), std::string::npos) << r.err;
  config["hidden_size"] = 64;
  config["eos_token_id"] = config["vocab_size"];
  std::ofstream(dir + "/config.json") << config.dump(2);
  const Outcome eos = run_strata({"model", "info", "--model", dir});
  EXPECT_EQ(eos.code, 1);
  EXPECT_NE(eos.err.find("field 'eos_token_id': value"), std::string::npos) << eos.err;
  EXPECT_NE(eos.err.find("is outside the vocabulary"), std::string::npos) << eos.err;
}

TEST(ModelOption, ModelInfoDefaultsToTheDemoModel) {
  const Outcome r = run_strata({"model", "info"});
  if (!fs::exists(demo_model_dir() / "config.json")) {
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("no --model DIR given, and the default model"), std::string::npos) << r.err;
    return;
  }
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("DeepSeek-V4: 4 layers"), std::string::npos) << r.out;
}

// The same message as generate and serve give, whichever part of bench touches the device first.
TEST(ModelOption, BenchOnCudaWithoutAGpuSaysSoCleanly) {
  const Outcome r = run_strata({"bench", "--preset", "tiny", "--device", "cuda", "--decode-tokens", "1"});
  if (r.code == 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("strata bench: error: --device cuda: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find(".cu"), std::string::npos) << "no source paths: " << r.err;
  const Outcome gen = run_strata({"generate", "--prompt-ids", "5", "--device", "cuda"});
  const std::string reason = r.err.substr(r.err.find("--device cuda: "));
  EXPECT_NE(gen.err.find(reason), std::string::npos) << "generate: " << gen.err << "bench: " << r.err;
}

TEST(ModelInit, AFailingTokenizerLeavesNoCheckpoint) {
  const std::string dir = temp_dir("model_init");
  const Outcome missing =
      run_strata({"model", "init", "--preset", "tiny", "--tokenizer-from", dir + "/nowhere", "--out", dir + "/a"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("option --tokenizer-from: no tokenizer.json in '" + dir + "/nowhere'"), std::string::npos)
      << missing.err;
  EXPECT_NE(missing.err.find("scripts/fetch_test_data.sh"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(dir + "/a"));
  // Files that are there but are not DeepSeek-V3's tokenizer: found out after the weights are written, which must
  // then not be left behind, nor the staging folder.
  fs::create_directories(dir + "/not_v3");
  std::ofstream(dir + "/not_v3/tokenizer.json") << R"({"added_tokens": []})";
  std::ofstream(dir + "/not_v3/tokenizer_config.json") << "{}";
  const Outcome wrong =
      run_strata({"model", "init", "--preset", "tiny", "--tokenizer-from", dir + "/not_v3", "--out", dir + "/b/"});
  EXPECT_EQ(wrong.code, 1);
  EXPECT_NE(wrong.err.find("expected the DeepSeek-V3 tokenizer"), std::string::npos) << wrong.err;
  std::vector<std::string> left;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"not_v3"});
  // A successful init into an existing folder moves every file in.
  fs::create_directories(dir + "/c");
  ASSERT_EQ(run_strata({"model", "init", "--preset", "tiny", "--out", dir + "/c"}).code, 0);
  EXPECT_TRUE(fs::exists(dir + "/c/config.json"));
  EXPECT_EQ(run_strata({"model", "info", "--model", dir + "/c"}).code, 0);
}

}  // namespace
}  // namespace strata::test
