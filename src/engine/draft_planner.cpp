#include "engine/draft_planner.h"

#include <algorithm>
#include <tuple>

namespace strata::engine {

std::vector<int64_t> plan_drafts(const std::vector<std::vector<float>>& probs, int64_t base_rows, int64_t base_tokens,
                                 double step_cost_rows) {
  // Every draft row with its expected acceptance: the running product along its chain, which only falls, so taking
  // candidates in decreasing order (ties: earlier sequence, earlier position) takes a prefix of each chain.
  std::vector<std::tuple<double, size_t, size_t>> rows;
  for (size_t i = 0; i < probs.size(); ++i) {
    double cumulative = 1;
    for (size_t j = 0; j < probs[i].size(); ++j) rows.emplace_back(cumulative *= probs[i][j], i, j);
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
    return std::tie(std::get<1>(a), std::get<2>(a)) < std::tie(std::get<1>(b), std::get<2>(b));
  });
  std::vector<int64_t> take(probs.size(), 0);
  double tokens = static_cast<double>(base_tokens), cost = step_cost_rows + static_cast<double>(base_rows);
  // A row raises tokens / cost exactly when its expected acceptance is above the current ratio; the candidates fall,
  // so the first one that does not ends the plan.
  for (const auto& [expected, i, j] : rows) {
    if (!(expected > tokens / cost)) break;
    tokens += expected;
    cost += 1;
    take[i] = static_cast<int64_t>(j) + 1;
  }
  return take;
}

}  // namespace strata::engine
