// `strata bench` with random weights made in memory (--preset) and the prefill sweep (--prefill), run as the
// binary; the checkpoint path (--model, --batch) is covered in checkpoint_test.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"

namespace strata {
namespace {

struct BenchRun {
  int exit_code = -1;
  std::string out;  // stdout, with stderr appended when `merge`
};

BenchRun bench(const std::string& args, const std::string& tag, bool merge) {
  const std::string out = test::temp_dir("bench_cmd_" + tag) + "/out.txt";
  const std::string cmd = "'" + std::string(STRATA_BINARY) + "' bench " + args + " >'" + out + "'" +
                          (merge ? " 2>&1" : " 2>/dev/null");
  const int status = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream s;
  s << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, s.str()};
}

// The JSON records what ran: --commit when given (the GPU machine's copy of the tree has no .git), else git's commit
// with "-dirty" for uncommitted changes, and outside a repository "unknown" — never an empty field or a commit that
// did not run. No environment variable decides it.
TEST(BenchCommand, RecordsTheCommitItRanAt) {
  const std::string dir = test::temp_dir("bench_cmd_commit");
  const std::string run = "'" + std::string(STRATA_BINARY) +
                          "' bench --preset tiny --layers 1 --prompt-len 4 --decode-tokens 1 --repeats 1";
  auto commit_of = [&](const std::string& prefix, const std::string& flags) {
    const std::string out = dir + "/out.json";
    const int status =
        std::system(("cd '" + dir + "' && " + prefix + run + flags + " 2>/dev/null >'" + out + "'").c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << prefix;
    std::ifstream in(out);
    return nlohmann::json::parse(in)["commit"].get<std::string>();
  };
  EXPECT_EQ(commit_of("GIT_DIR=/nonexistent ", " --commit 0123abc-dirty"), "0123abc-dirty");
  EXPECT_EQ(commit_of("STRATA_COMMIT=0123abc GIT_DIR=/nonexistent ", ""), "unknown");
}

TEST(BenchCommand, RandomPresetAndPrefillSweep) {
  const BenchRun r = bench("--preset tiny --layers 2 --dtype fp8 --seed 3 --prompt-len 8 --decode-tokens 2 --repeats 1 "
                      "--prefill 4,9 --chunk 4",
                      "preset", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["source"], "random");
  EXPECT_EQ(j["config"]["preset"], "tiny");
  EXPECT_EQ(j["config"]["dtype"], "fp8");
  EXPECT_EQ(j["config"]["num_hidden_layers"], 2);
  EXPECT_GE(j["config"]["weights_seconds"].get<double>(), 0.0);
  ASSERT_EQ(j["prefill_lengths"].size(), 2u);
  EXPECT_EQ(j["prefill_lengths"][1]["tokens"], 9);
  EXPECT_EQ(j["prefill_lengths"][1]["chunk"], 4);
  for (const auto& row : j["prefill_lengths"]) {
    EXPECT_GT(row["tokens_per_s"].get<double>(), 0.0);
    EXPECT_FALSE(row.contains("floor_seconds")) << "floors are measured on the CUDA backend only";
  }
  EXPECT_FALSE(j["device"].contains("copy_bandwidth_gbs"));
}

// With the device's ceilings given, every prefill length and decode point gets its floor (as on CUDA, where
// they are measured).
TEST(BenchCommand, FloorsFromGivenCeilings) {
  const BenchRun r = bench("--preset tiny --prompt-len 8 --decode-tokens 2 --repeats 1 --prefill 200 --chunk 64 "
                           "--batch 1,2 --context 300 --ceilings 4000,700",
                           "floors", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"]["copy_bandwidth_gbs"], 4000.0);
  EXPECT_EQ(j["device"]["bf16_gemm_tflops"], 700.0);
  const auto& prefill = j["prefill_lengths"][0];
  EXPECT_GT(prefill["bytes_floor"].get<double>(), 0.0);
  EXPECT_GT(prefill["flops_floor"].get<double>(), 0.0);
  EXPECT_NEAR(prefill["measured_over_floor"].get<double>() * prefill["floor_seconds"].get<double>(),
              prefill["seconds_median"].get<double>(), 1e-9);
  const auto& decode = j["batched_decode"][0]["decode"];
  ASSERT_EQ(decode.size(), 2u);
  for (const auto& row : decode) {
    EXPECT_NEAR(row["bytes_floor"].get<double>(),
                row["weight_bytes_floor"].get<double>() + row["state_bytes_floor"].get<double>(), 1e-6);
    EXPECT_GE(row["routed_experts_mean"].get<double>(), 1.0);
    EXPECT_LE(row["routed_experts_mean"].get<double>(), 8.0);
    EXPECT_EQ(row["floor_bound"], "memory");  // a tiny model's step is far from compute-bound
  }
  // Two sequences read twice the state.
  EXPECT_NEAR(decode[1]["state_bytes_floor"].get<double>(), 2 * decode[0]["state_bytes_floor"].get<double>(), 1e-6);
  const BenchRun bad = bench("--preset tiny --ceilings 4000", "ceilings_bad", true);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("--ceilings"), std::string::npos) << bad.out;
}

// --out FILE.json also draws FILE_pareto.png and FILE_floor.png with gnuplot (scripts/setup.sh installs it).
TEST(BenchCommand, DrawsItsPlotsBesideTheJson) {
  const std::string dir = test::temp_dir("bench_plots");
  const BenchRun r = bench("--preset tiny --layers 1 --prompt-len 8 --decode-tokens 1 --repeats 1 --prefill 16,32 "
                           "--batch 1,2,4 --context 16,24 --ceilings 4000,700 --out '" + dir + "/run.json'",
                           "plots", true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  if (r.out.find("gnuplot is not installed") != std::string::npos) GTEST_SKIP() << "no gnuplot (scripts/setup.sh)";
  for (const char* name : {"run_pareto.png", "run_floor.png"}) {
    std::ifstream png(dir + "/" + name, std::ios::binary);
    char magic[8] = {};
    png.read(magic, 8);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << name << "\n" << r.out;
    EXPECT_NE(r.out.find(std::string("plot: ") + dir + "/" + name), std::string::npos) << r.out;
  }
  // Without --batch and floors there is nothing to draw; --plots off draws nothing either.
  const BenchRun plain = bench("--preset tiny --layers 1 --prompt-len 8 --decode-tokens 1 --repeats 1 --out '" + dir +
                               "/plain.json' --plots off", "plots_off", true);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(plain.out.find("plot"), std::string::npos) << plain.out;
  const BenchRun bad = bench("--preset tiny --plots maybe --out '" + dir + "/x.json'", "plots_bad", true);
  EXPECT_NE(bad.out.find("option --plots: expected on or off, found 'maybe'"), std::string::npos) << bad.out;
}

// --cache-ttft: the same prompt cold and from the prefix cache (host memory, then the directory after a restart).
TEST(BenchCommand, CacheTtftTimesColdAndCachedFirstTokens) {
  const std::string dir = test::temp_dir("bench_cache_ttft");
  const BenchRun r = bench("--preset tiny --layers 3 --prompt-len 8 --decode-tokens 1 --repeats 1 --cache-ttft 300 "
                           "--chunk 128 --cache-dir '" + dir + "/cache' --out '" + dir + "/run.json'",
                           "cache_ttft", true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(dir + "/run.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& row = j["cache_ttft"][0];
  EXPECT_EQ(row["prompt_tokens"], 300);
  EXPECT_EQ(row["cached_tokens"]["host_hit"], 256);  // the last 128-token block boundary short of the end
  EXPECT_EQ(row["cached_tokens"]["disk_hit"], 256);
  EXPECT_EQ(row["cached_tokens"]["replay_mode_host_hit"], 256 - 140);  // the default replay of 140 tokens
  for (const char* k : {"no_cache", "cold_with_cache", "host_hit", "disk_hit", "replay_mode_host_hit"})
    EXPECT_GT(row["ttft_s"][k].get<double>(), 0) << k;
  EXPECT_LT(row["stored_bytes"]["replay_mode"].get<int64_t>(), row["stored_bytes"]["exact_mode"].get<int64_t>());
  EXPECT_GT(row["cost"]["disk_read_bytes"].get<int64_t>(), 0);
  EXPECT_FALSE(std::filesystem::exists(dir + "/cache"));  // emptied after the run
  if (r.out.find("gnuplot is not installed") == std::string::npos) {
    EXPECT_NE(r.out.find("plot: " + dir + "/run_cache_ttft.png"), std::string::npos) << r.out;
  }
}

// --cache-replay: replay mode's logits against cold ones on a text. A replay longer than the window's reach through
// every layer (3 layers × 127 earlier positions) rebuilds the state exactly; the default 140 tokens do not.
TEST(BenchCommand, CacheReplayMeasuresTheLogitDeltaOfAReplayAgainstCold) {
  const std::string dir = test::temp_dir("bench_cache_replay");
  {
    std::ofstream ids(dir + "/ids.txt");
    for (int i = 0; i < 600; ++i) ids << (i ? "," : "") << (i * 7919 + 11) % 500 + 2;
    ids << "\n";
  }
  const BenchRun r = bench("--preset tiny --layers 3 --prompt-len 8 --decode-tokens 1 --repeats 1 --cache-replay '" +
                               dir + "/ids.txt' --replay-lengths 300,520 --replay-tokens 140,400 --out '" + dir + "/run.json'",
                           "cache_replay", true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(dir + "/run.json");
  const nlohmann::json j = nlohmann::json::parse(in)["cache_replay"];
  EXPECT_EQ(j["text_tokens"], 600);
  const nlohmann::json& storage = j["storage"];
  EXPECT_GT(storage["boundary_rows_bytes"].get<int64_t>(), 0);
  for (const nlohmann::json& p : storage["prompts"]) EXPECT_LT(p["replay_over_exact"].get<double>(), 1.0);
  const nlohmann::json& short_prompt = j["accuracy"][0];
  EXPECT_EQ(short_prompt["cached_prefix_tokens"], 256);
  ASSERT_EQ(short_prompt["replays"].size(), 1u);  // 400 > 256: no such replay
  const nlohmann::json& long_prompt = j["accuracy"][1]["replays"];
  ASSERT_EQ(long_prompt.size(), 2u);
  EXPECT_GT(long_prompt[0]["max_abs_logit_delta"].get<double>(), 0.0);
  EXPECT_EQ(long_prompt[1]["max_abs_logit_delta"].get<double>(), 0.0);
  EXPECT_EQ(long_prompt[1]["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(long_prompt[1]["greedy_tokens_equal_before_first_difference"], 32);
  const BenchRun bad = bench("--preset tiny --layers 3 --cache-replay '" + dir + "/ids.txt' --replay-tokens 100",
                             "cache_replay_bad", true);
  EXPECT_NE(bad.out.find("fewer than the sliding window"), std::string::npos) << bad.out;
}

TEST(BenchCommand, ModelOrPresetExactlyOnce) {
  const BenchRun neither = bench("--prompt-len 4", "neither", true);
  EXPECT_NE(neither.exit_code, 0);
  EXPECT_NE(neither.out.find("found neither"), std::string::npos) << neither.out;
  const BenchRun both = bench("--model /nonexistent --preset tiny", "both", true);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.out.find("found both"), std::string::npos) << both.out;
  const BenchRun layers = bench("--model /nonexistent --layers 2", "layers", true);
  EXPECT_NE(layers.exit_code, 0);
  EXPECT_NE(layers.out.find("--layers"), std::string::npos) << layers.out;
  const BenchRun dtype = bench("--preset tiny --dtype fp4", "dtype", true);
  EXPECT_NE(dtype.exit_code, 0);
  EXPECT_NE(dtype.out.find("bf16 or fp8"), std::string::npos) << dtype.out;
  const BenchRun preset = bench("--preset huge", "unknown", true);
  EXPECT_NE(preset.exit_code, 0);
  EXPECT_NE(preset.out.find("huge"), std::string::npos) << preset.out;
}

}  // namespace
}  // namespace strata
