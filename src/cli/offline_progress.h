#pragma once
// What an offline batch shows on stderr: a progress bar redrawn in place when stderr is a terminal, a plain line
// every few seconds otherwise (logs, CI), and a throughput summary at the end.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/offline_batch.h"

namespace strata::cli {

class OfflineProgress {
 public:
  // `tty`: redraw one line in place, at most ten times a second; otherwise print a line every `interval_s`.
  OfflineProgress(std::FILE* stream, bool tty, int64_t total, double interval_s = 5.0);

  // Restarts the clock (the batch begins now, after the model has loaded).
  void start();
  // Requests finished so far (their records may wait for earlier lines) and tokens generated. Cheap when nothing is due.
  void update(int64_t done, int64_t generated_tokens);
  // The last progress line, then the summary.
  void finish(const OfflineSummary& summary);

 private:
  std::string line(int64_t done, int64_t generated_tokens, double elapsed_s) const;

  std::FILE* stream_;
  bool tty_;
  int64_t total_;
  double interval_s_;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t last_done_ = -1;
};

// The summary as printed: requests, tokens, wall time and throughput, engine steps and the engine's own time.
std::string format_summary(const OfflineSummary& summary);
// The same numbers as JSON (--summary FILE).
nlohmann::ordered_json summary_json(const OfflineSummary& summary);

}  // namespace strata::cli
