#include "cli/offline_progress.h"

#include "core/error.h"

namespace strata::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                               static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%02lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

double per_second(int64_t count, double seconds) { return seconds > 0 ? static_cast<double>(count) / seconds : 0.0; }

}  // namespace

OfflineProgress::OfflineProgress(std::FILE* stream, bool tty, int64_t total, double interval_s)
    : stream_(stream), tty_(tty), total_(total), interval_s_(interval_s), start_(Clock::now()), last_(start_) {}

std::string OfflineProgress::line(int64_t done, int64_t generated_tokens, double elapsed_s) const {
  const double rate = per_second(generated_tokens, elapsed_s);
  const double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  char tail[160];
  std::snprintf(tail, sizeof tail, "%lld/%lld requests, %.0f generated tokens/s, %s elapsed",
                static_cast<long long>(done), static_cast<long long>(total_), rate, clock_text(elapsed_s).c_str());
  if (!tty_) return cat("generate: ", tail);
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::string eta;
  if (done > 0 && done < total_)
    eta = ", eta " + clock_text(elapsed_s * static_cast<double>(total_ - done) / static_cast<double>(done));
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3.0f%%", 100.0 * fraction);
  return cat("[", bar, "] ", pct, " ", tail, eta);
}

void OfflineProgress::start() { start_ = last_ = Clock::now(); }

void OfflineProgress::update(int64_t done, int64_t generated_tokens) {
  const Clock::time_point now = Clock::now();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (since_last < (tty_ ? 0.1 : interval_s_)) return;
  if (!tty_ && done == last_done_ && since_last < 6 * interval_s_) return;  // quiet while nothing finishes
  last_ = now;
  last_done_ = done;
  const std::string text = line(done, generated_tokens, std::chrono::duration<double>(now - start_).count());
  if (tty_) std::fprintf(stream_, "\r%s\x1b[K", text.c_str());  // \x1b[K clears what a longer line left
  else std::fprintf(stream_, "%s\n", text.c_str());
  std::fflush(stream_);
}

void OfflineProgress::finish(const OfflineSummary& summary) {
  const std::string text = line(summary.requests, summary.generated_tokens, summary.wall_s);
  if (tty_) std::fprintf(stream_, "\r%s\x1b[K\n", text.c_str());
  else std::fprintf(stream_, "%s\n", text.c_str());
  std::fputs(format_summary(summary).c_str(), stream_);
  std::fflush(stream_);
}

std::string format_summary(const OfflineSummary& s) {
  const engine::EngineStats& e = s.engine;
  const double outside = e.step_seconds - e.model_seconds;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "requests:          %lld (%lld succeeded, %lld failed)\n"
                "prompt tokens:     %lld\n"
                "generated tokens:  %lld\n"
                "wall time:         %.3f s\n"
                "throughput:        %.2f requests/s, %.1f generated tokens/s, %.1f total tokens/s\n"
                "engine:            %lld steps, %.1f tokens/step, %lld preemptions; %.3f s in steps, %.3f s of it in the "
                "model: %.2f%% (%.1f us/step) outside the model\n",
                static_cast<long long>(s.requests), static_cast<long long>(s.succeeded),
                static_cast<long long>(s.failed), static_cast<long long>(s.prompt_tokens),
                static_cast<long long>(s.generated_tokens), s.wall_s, per_second(s.succeeded, s.wall_s),
                per_second(s.generated_tokens, s.wall_s), per_second(s.prompt_tokens + s.generated_tokens, s.wall_s),
                static_cast<long long>(e.steps),
                e.steps ? static_cast<double>(e.prompt_tokens + e.generated_tokens) / static_cast<double>(e.steps) : 0.0,
                static_cast<long long>(e.preemptions), e.step_seconds, e.model_seconds,
                e.step_seconds > 0 ? 100.0 * outside / e.step_seconds : 0.0,
                e.steps ? 1e6 * outside / static_cast<double>(e.steps) : 0.0);
  std::string out = buf;
  if (e.grammar_masks > 0) {
    std::snprintf(buf, sizeof buf, "grammar masks:     %lld, %.1f us each on the engine thread, %.0f%% of it hidden by the device\n",
                  static_cast<long long>(e.grammar_masks), 1e6 * e.grammar_mask_seconds / static_cast<double>(e.grammar_masks),
                  e.grammar_mask_seconds > 0 ? 100.0 * e.grammar_mask_hidden_seconds / e.grammar_mask_seconds : 0.0);
    out += buf;
  }
  if (const engine::SpeculativeCounts& c = e.speculative; c.verify_steps > 0 || c.drafted > 0) {
    std::snprintf(buf, sizeof buf,
                  "speculative:       %lld drafted, %lld verified, %lld accepted (%.1f%%), %lld verify steps, mean "
                  "accepted length %.2f, %lld emitted, %lld dropped past an end; %.3f s drafting\n",
                  static_cast<long long>(c.drafted), static_cast<long long>(c.verified), static_cast<long long>(c.accepted),
                  100.0 * c.acceptance_rate(), static_cast<long long>(c.verify_steps), c.mean_accepted_length(),
                  static_cast<long long>(c.emitted), static_cast<long long>(c.truncated), e.draft_seconds);
    out += buf;
  }
  return out;
}

nlohmann::ordered_json summary_json(const OfflineSummary& s) {
  const engine::EngineStats& e = s.engine;
  nlohmann::ordered_json j;
  j["requests"] = s.requests;
  j["succeeded"] = s.succeeded;
  j["failed"] = s.failed;
  j["prompt_tokens"] = s.prompt_tokens;
  j["generated_tokens"] = s.generated_tokens;
  j["wall_s"] = s.wall_s;
  j["requests_per_s"] = per_second(s.succeeded, s.wall_s);
  j["generated_tokens_per_s"] = per_second(s.generated_tokens, s.wall_s);
  j["total_tokens_per_s"] = per_second(s.prompt_tokens + s.generated_tokens, s.wall_s);
  j["engine"] = {{"steps", e.steps},
                 {"tokens_per_step", e.steps ? static_cast<double>(e.prompt_tokens + e.generated_tokens) /
                                                   static_cast<double>(e.steps)
                                             : 0.0},
                 {"preemptions", e.preemptions},
                 {"step_seconds", e.step_seconds},
                 {"model_seconds", e.model_seconds},
                 {"draft_seconds", e.draft_seconds},
                 {"outside_model_fraction", e.step_seconds > 0 ? (e.step_seconds - e.model_seconds) / e.step_seconds : 0.0},
                 {"outside_model_us_per_step",
                  e.steps ? 1e6 * (e.step_seconds - e.model_seconds) / static_cast<double>(e.steps) : 0.0},
                 // Structured outputs: the masks built on the engine thread and their cost per constrained token;
                 // of that time, what the device hid (EngineStats::grammar_mask_hidden_seconds, a lower bound).
                 {"grammar_masks", e.grammar_masks},
                 {"grammar_mask_seconds", e.grammar_mask_seconds},
                 {"grammar_mask_hidden_seconds", e.grammar_mask_hidden_seconds},
                 {"draft_grammar_masks", e.draft_grammar_masks},
                 {"grammar_mask_us_per_token",
                  e.grammar_masks ? 1e6 * e.grammar_mask_seconds / static_cast<double>(e.grammar_masks) : 0.0}};
  // Speculative decoding: the counts themselves, then the two figures derived from them. "mean_accepted_length" is
  // accepted drafts per verify step; "tokens_per_verify_step" adds the bonus token before truncation.
  const engine::SpeculativeCounts& c = e.speculative;
  j["engine"]["speculative"] = {
      {"drafted", c.drafted},
      {"verified", c.verified},
      {"accepted", c.accepted},
      {"verify_steps", c.verify_steps},
      {"emitted", c.emitted},
      {"truncated", c.truncated},
      {"verified_by_position", c.verified_at},
      {"accepted_by_position", c.accepted_at},
      {"acceptance_rate", c.acceptance_rate()},
      {"mean_accepted_length", c.mean_accepted_length()},
      {"tokens_per_verify_step",
       c.verify_steps ? static_cast<double>(c.accepted + c.verify_steps) / static_cast<double>(c.verify_steps) : 0.0}};
  return j;
}

}  // namespace strata::cli
