#pragma once
// Rollback checks shared by the CPU tests (state_rollback_test.cpp) and the GPU model check (gpu/model_check.cpp):
// a state that ran tokens it then dropped (Model::rollback) must continue exactly as one that never ran them.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <cmath>
#include <algorithm>
#include <vector>

#include "model/deepseek_v4/model.h"

namespace strata::test {

struct RollbackCase {
  std::vector<int32_t> prefix;    // run first, in one step
  std::vector<int32_t> staged;    // run next: kept tokens, then the dropped ones
  int64_t keep = 0;               // staged tokens kept
  std::vector<int32_t> continuation;  // decoded one by one afterwards, logits compared
  bool one_step = true;           // the staged tokens in one step (speculative verification) or one per step
};

struct RollbackResult {
  int64_t differing_steps = 0;  // continuation steps whose logits differ in any bit
  double max_rel_error = 0;     // the largest ‖a - b‖ / ‖b‖ of a continuation step's logits
};

// Bit-identical and finite (two rows of the same NaNs must not pass).
inline bool same_bits(const Mat& a, const Mat& b) {
  if (a.v.size() != b.v.size()) return false;
  for (size_t i = 0; i < a.v.size(); ++i)
    if (!std::isfinite(a.v[i]) || std::memcmp(&a.v[i], &b.v[i], sizeof(float)) != 0) return false;
  return true;
}

// `make_state` gives fresh states of `m` (a lone one, or a pool slot) with room for the case.
inline RollbackResult run_rollback_case(const model::v4::Model& m, const RollbackCase& c,
                                        const std::function<model::SequenceState*()>& make_state) {
  using model::SequenceState;
  auto feed = [&](const std::vector<int32_t>& tokens, SequenceState& s, bool one_step) {
    if (tokens.empty()) return;
    if (one_step) {
      m.forward(tokens, s, true);
      return;
    }
    for (int32_t t : tokens) m.forward({t}, s, false);
  };
  SequenceState& staged = *make_state();
  SequenceState& never = *make_state();
  m.forward(c.prefix, staged, false);
  m.forward(c.prefix, never, false);
  feed(c.staged, staged, c.one_step);
  m.rollback(staged, static_cast<int64_t>(c.prefix.size()) + c.keep);
  feed(std::vector<int32_t>(c.staged.begin(), c.staged.begin() + c.keep), never, c.one_step);
  RollbackResult r;
  for (int32_t t : c.continuation) {
    const Mat a = m.forward({t}, staged, false), b = m.forward({t}, never, false);
    r.differing_steps += !same_bits(a, b);
    double diff = 0, ref = 0;
    for (size_t i = 0; i < a.v.size() && i < b.v.size(); ++i) {
      const double d = static_cast<double>(a.v[i]) - b.v[i];
      diff += d * d;
      ref += static_cast<double>(b.v[i]) * b.v[i];
    }
    // NaN or Inf anywhere fails any bar.
    const double e = std::isfinite(diff) && std::isfinite(ref) ? std::sqrt(diff / std::max(ref, 1e-30)) : INFINITY;
    r.max_rel_error = std::max(r.max_rel_error, e);
  }
  return r;
}

// Cases over the tiny preset's boundaries (window 128, CSA rate 4, HCA rate 128, token blocks of 128): dropped
// tokens that close CSA windows, an HCA window and a block, from prefixes on and off those boundaries. Tokens are
// ids < `vocab`; every case drops at most `max_rollback` tokens.
inline std::vector<RollbackCase> rollback_cases(int64_t vocab, int64_t max_rollback) {
  auto ids = [&](int64_t n, int64_t salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 53 + salt * 17 + 7) % vocab);
    return t;
  };
  std::vector<RollbackCase> out;
  const int64_t prefixes[] = {1, 6, 125, 126, 130, 254, 300};
  // (staged, kept): drop one; drop all the state allows, keeping none; keep one and drop the rest.
  const std::pair<int64_t, int64_t> shapes[] = {{2, 1}, {max_rollback, 0}, {max_rollback + 1, 1}};
  for (const int64_t p : prefixes)
    for (const auto& [n, keep] : shapes)
      for (const bool one_step : {true, false}) {
        RollbackCase c;
        c.prefix = ids(p, p);
        c.staged = ids(n, 1000 + p);
        c.keep = keep;
        c.continuation = ids(6, 2000 + p);
        c.one_step = one_step;
        out.push_back(c);
      }
  return out;
}

}  // namespace strata::test
