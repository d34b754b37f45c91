// The backend flags every model command shares (cli/backend_flags.h), through the binary: --batch-invariant is
// taken on the CPU (whose backend is batch invariant by construction) and gives the run without it, token for
// token; the CUDA-only switches name themselves on the CPU, where --precision takes only `official`.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/run_strata.h"

namespace strata::test {
namespace {

TEST(BackendFlags, BatchInvariantOnTheCpuIsTakenAndChangesNothing) {
  const std::vector<std::string> run = {"generate", "--prompt-ids", "5,6,7", "--max-tokens", "6", "--temperature", "0.8",
                                        "--seed", "3"};
  std::vector<std::string> invariant = run;
  invariant.push_back("--batch-invariant");
  const Outcome plain = run_strata(run), with = run_strata(invariant);
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(with.code, 0) << with.err;
  EXPECT_EQ(with.out, plain.out);
}

TEST(BackendFlags, CudaOnlySwitchesOnTheCpuNameThemselves) {
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--cuda-graphs", "off"}, {"--cuda-op-times"}}) {
    std::vector<std::string> args = {"generate", "--prompt-ids", "5", "--max-tokens", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome r = run_strata(args);
    EXPECT_EQ(r.code, 1) << extra[0];
    EXPECT_NE(r.err.find("option " + extra[0] + ": applies to --device cuda only"), std::string::npos) << r.err;
  }
}

TEST(BackendFlags, OnTheCpuOnlyTheOfficialPrecisionApplies) {
  const Outcome fp8 = run_strata({"generate", "--prompt-ids", "5", "--max-tokens", "1", "--precision", "fp8"});
  EXPECT_EQ(fp8.code, 1);
  EXPECT_NE(fp8.err.find("option --precision: on the CPU only 'official'"), std::string::npos) << fp8.err;
  const Outcome official = run_strata({"generate", "--prompt-ids", "5,6,7", "--max-tokens", "4", "--precision", "official"});
  EXPECT_EQ(official.code, 0) << official.err;
}

}  // namespace
}  // namespace strata::test
