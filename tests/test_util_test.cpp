// The tests' own comparison helpers (test_util.h) must fail on NaN and infinity, or a broken forward that writes
// NaN would pass every check built on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "test_util.h"

namespace strata::test {
namespace {

TEST(TestUtil, RowRelErrorIsInfiniteForANanOrInfiniteElement) {
  const std::vector<float> ref = {1.0f, -2.0f, 0.5f, 4.0f};
  EXPECT_EQ(row_rel_error(ref.data(), ref.data(), 4), 0.0);
  for (const float poison : {NAN, INFINITY, -INFINITY}) {
    for (size_t at = 0; at < ref.size(); ++at) {
      std::vector<float> bad = ref;
      bad[at] = poison;
      EXPECT_EQ(row_rel_error(bad.data(), ref.data(), 4), INFINITY) << poison << " at " << at << " (computed)";
      EXPECT_EQ(row_rel_error(ref.data(), bad.data(), 4), INFINITY) << poison << " at " << at << " (reference)";
    }
  }
}

TEST(TestUtil, ANanRowFailsABarAndSurvivesARunningMax) {
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f};
  const std::vector<float> nan_row(3, NAN);
  const double err = row_rel_error(nan_row.data(), ref.data(), 3);
  EXPECT_FALSE(err <= 1e-4);
  // The fixture checks keep the worst of all rows with std::max; NaN would be dropped there, +inf is kept.
  EXPECT_FALSE(std::max(0.0, err) <= 1e-4);
  EXPECT_FALSE(std::max(err, 0.0) <= 1e-4);
}

TEST(TestUtil, SameFiniteBitsRejectsEqualNanRows) {
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  std::vector<float> b = a;
  EXPECT_TRUE(same_finite_bits(a.data(), b.data(), 3));
  b[1] = std::nextafter(2.0f, 3.0f);
  EXPECT_FALSE(same_finite_bits(a.data(), b.data(), 3));
  // Rows with the same NaN (or infinity) bits are memcmp-equal, yet no bit-identity check may pass on them.
  for (const float poison : {NAN, INFINITY, -INFINITY}) {
    const std::vector<float> p = {1.0f, poison, 3.0f};
    EXPECT_FALSE(same_finite_bits(p.data(), p.data(), 3)) << poison;
  }
}

}  // namespace
}  // namespace strata::test
