// The batch-invariance check of the device (tests/gpu/invariance_check.cpp) on the CPU backend, which is batch
// invariant by construction: random mixes and the prefix-cache, PD and speculative paths, every row bit for bit
// against solo — and the check itself shown to see a changed bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "invariance_mixes.h"
#include "tiny_model.h"

namespace strata {
namespace {

using namespace test::invariance;

constexpr int64_t kMaxPrompt = 160;  // longer than two of the tiny preset's token blocks

TEST(BatchInvariance, CpuMixesAndPathsMatchSoloBitForBit) {
  const auto m = test::tiny_model("batch_invariance", 21, kMaxDrafts);
  std::mt19937_64 rng(3);
  const std::vector<Sequence> seqs = make_sequences(*m, 10, kMaxPrompt, rng);
  const MixResult mixes = run_mixes(*m, seqs, 20, 7);
  EXPECT_GT(mixes.rows, 0);
  EXPECT_GT(mixes.mixed_steps, 0);
  EXPECT_EQ(mixes.differing, 0);
  const Paths paths = run_paths(*m, seqs, 11);
  for (const PathResult* r : {&paths.cache, &paths.pd, &paths.spec}) {
    EXPECT_GT(r->runs, 0);
    EXPECT_GT(r->rows, 0);
    EXPECT_EQ(r->differing, 0);
  }
}

TEST(BatchInvariance, TheCheckSeesOneChangedBit) {
  const auto m = test::tiny_model("batch_invariance_bit", 22, kMaxDrafts);
  std::mt19937_64 rng(4);
  std::vector<Sequence> seqs = make_sequences(*m, 4, kMaxPrompt, rng);
  // One bit of every sequence's last solo row (a decode row every mix and path compares).
  for (Sequence& s : seqs) {
    float* last = s.logits.row(static_cast<int64_t>(s.tokens.size()) - 1);
    uint32_t bits = 0;
    std::memcpy(&bits, last, sizeof bits);
    bits ^= 1u;
    std::memcpy(last, &bits, sizeof bits);
  }
  EXPECT_GT(run_mixes(*m, seqs, 3, 7).differing, 0);
  const Paths paths = run_paths(*m, seqs, 11);
  EXPECT_GT(paths.pd.differing, 0);
  EXPECT_GT(paths.spec.differing, 0);
}

}  // namespace
}  // namespace strata
