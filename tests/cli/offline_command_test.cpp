// `strata generate --input` as a process: a results file in input order, progress lines and the summary on a
// non-terminal stderr, stdout as the output, and errors in the options.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_strata.h"
#include "server/served_model.h"

namespace strata::test {
namespace {

using nlohmann::json;

std::vector<json> parse_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(OfflineCommand, HelpAndBadOptions) {
  const Outcome help = run_strata({"generate", "--input", "x", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("offline batch inference"), std::string::npos);
  EXPECT_NE(help.out.find("example (from the repository root"), std::string::npos);
  // A model folder that exists (a missing one is refused first, by name: ModelOption tests), so the options speak.
  const std::string model = temp_dir("offline_cli_options");
  const Outcome missing = run_strata({"generate", "--model", model, "--input", "/nonexistent/requests.jsonl", "--output", "-"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("option --input: cannot read '/nonexistent/requests.jsonl'"), std::string::npos) << missing.err;
  const Outcome no_output = run_strata({"generate", "--model", model, "--input", "/dev/null"});
  EXPECT_EQ(no_output.code, 1);
  EXPECT_NE(no_output.err.find("--output"), std::string::npos) << no_output.err;
  const Outcome seqs = run_strata({"generate", "--model", model, "--input", "-", "--output", "-", "--max-num-seqs", "0"});
  EXPECT_EQ(seqs.code, 1);
  EXPECT_NE(seqs.err.find("--max-num-seqs: expected a positive integer"), std::string::npos) << seqs.err;
}

TEST(OfflineCommand, WritesResultsProgressAndSummary) {
  if (!have_tokenizer()) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
  const std::string dir = temp_dir("offline_cli");
  {
    std::ofstream in(dir + "/requests.jsonl");
    for (int i = 0; i < 12; ++i)
      in << json{{"custom_id", i}, {"prompt", {5 + i, 6, 7}}, {"max_tokens", 4 + i}, {"ignore_eos", true}}.dump() << "\n";
    in << R"({"custom_id": "bad", "prompt": [5], "temperature": -1})" << "\n";
  }
  const Outcome r = run_strata({"generate", "--model", served_model_dir(), "--input", dir + "/requests.jsonl", "--output",
                     dir + "/results.jsonl", "--max-num-seqs", "4", "--progress-interval", "0.001", "--summary",
                     dir + "/summary.json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  std::ifstream results(dir + "/results.jsonl");
  const std::vector<json> records =
      parse_lines(std::string(std::istreambuf_iterator<char>(results), std::istreambuf_iterator<char>()));
  ASSERT_EQ(records.size(), 13u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(records[static_cast<size_t>(i)]["custom_id"], i);
    EXPECT_EQ(records[static_cast<size_t>(i)]["response"]["body"]["usage"]["completion_tokens"], 4 + i);
  }
  EXPECT_EQ(records[12]["error"]["param"], "temperature");
  // stderr is a file here: plain progress lines (no bar), then the summary.
  EXPECT_NE(r.err.find("generate: 13/13 requests"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  EXPECT_NE(r.err.find("requests:          13 (12 succeeded, 1 failed)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generated tokens:  114"), std::string::npos) << r.err;  // 4 + 5 + … + 15
  EXPECT_NE(r.err.find("generated tokens/s"), std::string::npos);
  EXPECT_NE(r.err.find("outside the model"), std::string::npos);
  std::ifstream summary_file(dir + "/summary.json");
  const json summary = json::parse(summary_file);
  EXPECT_EQ(summary["requests"], 13);
  EXPECT_EQ(summary["failed"], 1);
  EXPECT_EQ(summary["generated_tokens"], 114);
  EXPECT_GT(summary["engine"]["steps"].get<int64_t>(), 0);
  EXPECT_GE(summary["engine"]["step_seconds"].get<double>(), summary["engine"]["model_seconds"].get<double>());
  EXPECT_GT(summary["engine"]["model_seconds"].get<double>(), 0);

  // "-" writes the records to stdout.
  const Outcome to_stdout = run_strata({"generate", "--model", served_model_dir(), "--input", dir + "/requests.jsonl", "--output", "-"});
  ASSERT_EQ(to_stdout.code, 0) << to_stdout.err;
  EXPECT_EQ(parse_lines(to_stdout.out).size(), 13u);
}

}  // namespace
}  // namespace strata::test
