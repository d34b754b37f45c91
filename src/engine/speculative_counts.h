#pragma once
// What speculative decoding did, counted honestly (docs/mtp.md, "Accounting"): per request (on its finishing
// TokenEvent) and for the whole engine (EngineStats). Nothing here is an estimate.
#include <cstdint>
#include <vector>

namespace strata::engine {

struct SpeculativeCounts {
  int64_t drafted = 0;       // tokens the MTP layer proposed (some are never verified: the planner took fewer)
  int64_t verified = 0;      // draft tokens put into a verification forward
  int64_t accepted = 0;      // of those, accepted (before any truncation)
  int64_t verify_steps = 0;  // sequence-steps that verified at least one draft
  // Tokens those verify steps emitted as events: accepted drafts plus the bonus or corrected token, after truncation
  // at EOS, a stop id or max_tokens. Before truncation a verify step yields accepted + 1; the difference is `truncated`.
  int64_t emitted = 0;
  int64_t truncated = 0;
  // Per draft position j (0-based: the first draft after the last sampled token is j = 0): verified and accepted.
  std::vector<int64_t> verified_at, accepted_at;

  void add_position(size_t j, bool accepted_here) {
    if (verified_at.size() <= j) {
      verified_at.resize(j + 1, 0);
      accepted_at.resize(j + 1, 0);
    }
    ++verified_at[j];
    if (accepted_here) ++accepted_at[j];
  }
  SpeculativeCounts& operator+=(const SpeculativeCounts& o) {
    drafted += o.drafted;
    verified += o.verified;
    accepted += o.accepted;
    verify_steps += o.verify_steps;
    emitted += o.emitted;
    truncated += o.truncated;
    if (verified_at.size() < o.verified_at.size()) {
      verified_at.resize(o.verified_at.size(), 0);
      accepted_at.resize(o.verified_at.size(), 0);
    }
    for (size_t j = 0; j < o.verified_at.size(); ++j) {
      verified_at[j] += o.verified_at[j];
      accepted_at[j] += o.accepted_at[j];
    }
    return *this;
  }
  // Mean accepted drafts per verify step (the true figure: truncation does not enter it).
  double mean_accepted_length() const { return verify_steps ? static_cast<double>(accepted) / static_cast<double>(verify_steps) : 0.0; }
  double acceptance_rate() const { return verified ? static_cast<double>(accepted) / static_cast<double>(verified) : 0.0; }
};

}  // namespace strata::engine
