#include "server/metrics.h"

#include <charconv>
#include <cmath>

namespace strata::server {

namespace {

// Latencies of a CPU reference backend and of a GPU serving many streams fall in the same decades; the buckets
// span 1 ms .. ~10 min at roughly 2–2.5× steps.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 60, 120, 300, 600};
}
std::vector<double> tpot_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5, 10};
}
std::vector<double> e2e_buckets() { return {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600}; }

std::string escape_label(const std::string& v) {
  std::string out;
  for (const char ch : v) {
    if (ch == '\\') out += "\\\\";
    else if (ch == '"') out += "\\\"";
    else if (ch == '\n') out += "\\n";
    else out += ch;
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string model_label) : model_(std::move(model_label)) {}

  void header(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, double value, const std::string& extra_labels = "") {
    out_ += name + "{model_name=\"" + model_ + "\"" + (extra_labels.empty() ? "" : "," + extra_labels) + "} " +
            prometheus_number(value) + "\n";
  }
  void single(const std::string& name, const char* type, const char* help, double value) {
    header(name, type, help);
    sample(name, value);
  }
  void histogram(const std::string& name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    for (size_t i = 0; i < h.bounds().size(); ++i)
      sample(name + "_bucket", static_cast<double>(h.counts()[i]), "le=\"" + prometheus_number(h.bounds()[i]) + "\"");
    sample(name + "_bucket", static_cast<double>(h.count()), "le=\"+Inf\"");
    sample(name + "_sum", h.sum());
    sample(name + "_count", static_cast<double>(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string model_, out_;
};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

void Histogram::observe(double value) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (value <= bounds_[i]) ++counts_[i];
  ++count_;
  sum_ += value;
}

std::string prometheus_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

Metrics::Metrics(std::string model_name)
    : model_name_(std::move(model_name)), ttft_(ttft_buckets()), tpot_(tpot_buckets()), e2e_(e2e_buckets()) {
  for (const char* reason : {"stop", "length", "tool_calls", "abort"}) finished_by_reason_[reason] = 0;
}

void Metrics::request_received() {
  std::lock_guard lock(mu_);
  ++requests_received_;
}

void Metrics::request_finished(const std::vector<std::string>& finish_reasons, int64_t prompt_tokens,
                               int64_t generation_tokens) {
  std::lock_guard lock(mu_);
  for (const std::string& reason : finish_reasons) ++finished_by_reason_[reason];
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
}

void Metrics::request_failed(int status) {
  std::lock_guard lock(mu_);
  ++errors_by_status_[status];
}

void Metrics::observe_time_to_first_token(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
}

void Metrics::observe_time_per_output_token(double seconds) {
  std::lock_guard lock(mu_);
  tpot_.observe(seconds);
}

void Metrics::observe_e2e_latency(double seconds) {
  std::lock_guard lock(mu_);
  e2e_.observe(seconds);
}

namespace {

// The prefix cache (cache/prefix_cache.h): hits by the tier the blocks came from, the store's tiers, its faults.
void render_cache(Writer& w, const cache::PrefixCacheStats& c) {
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  w.header("strata_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens restored from the prefix cache, by the tier their token block came from.");
  for (int t = 0; t < cache::kTiers; ++t)
    w.sample("strata_prefix_cache_hit_tokens_total", d(c.hit_tokens[static_cast<size_t>(t)]),
             std::string("tier=\"") + cache::to_string(static_cast<cache::Tier>(t)) + "\"");
  w.single("strata_prefix_cache_miss_tokens_total", "counter", "Prompt tokens of cache-using requests that were computed.",
           d(c.miss_tokens));
  w.single("strata_prefix_cache_lookups_total", "counter", "Prompt lookups in the prefix cache.", d(c.lookups));
  w.single("strata_prefix_cache_hits_total", "counter", "Lookups that restored a prefix.", d(c.hits));
  w.single("strata_prefix_cache_restore_failures_total", "counter",
           "Restores abandoned (an entry vanished or failed its checks, or the state pool was full): computed instead.",
           d(c.restore_failures));
  w.single("strata_prefix_cache_saved_blocks_total", "counter", "Token blocks saved to the cache.", d(c.saved_blocks));
  w.single("strata_prefix_cache_saved_boundaries_total", "counter", "Boundary rows saved (resumable prefixes).",
           d(c.saved_rows));
  w.single("strata_prefix_cache_restore_seconds_total", "counter", "Engine-thread time restoring prefixes.",
           c.restore_seconds);
  w.single("strata_prefix_cache_save_seconds_total", "counter", "Engine-thread time saving prefixes (device copies).",
           c.save_seconds);
  const cache::StoreStats& s = c.store;
  w.header("strata_prefix_cache_bytes", "gauge", "Bytes held by each tier of the cache store.");
  w.sample("strata_prefix_cache_bytes", d(s.host.bytes), "tier=\"host\"");
  w.sample("strata_prefix_cache_bytes", d(s.disk.bytes), "tier=\"disk\"");
  w.header("strata_prefix_cache_entries", "gauge", "Entries (token blocks and boundary rows) in each tier.");
  w.sample("strata_prefix_cache_entries", d(s.host.entries), "tier=\"host\"");
  w.sample("strata_prefix_cache_entries", d(s.disk.entries), "tier=\"disk\"");
  w.header("strata_prefix_cache_evictions_total", "counter", "Entries evicted from a tier to stay within its budget.");
  w.sample("strata_prefix_cache_evictions_total", d(s.host.evictions), "tier=\"host\"");
  w.sample("strata_prefix_cache_evictions_total", d(s.disk.evictions), "tier=\"disk\"");
  w.single("strata_prefix_cache_disk_budget_bytes", "gauge", "The directory tier's budget (shrinks when the disk is full).",
           d(s.disk_budget));
  w.single("strata_prefix_cache_expirations_total", "counter", "Entries dropped because their time to live ran out.",
           d(s.expirations));
  w.header("strata_prefix_cache_bad_files_total", "counter", "Cache files that failed their checks (treated as misses).");
  w.sample("strata_prefix_cache_bad_files_total", d(s.corrupt_files), "kind=\"corrupt\"");
  w.sample("strata_prefix_cache_bad_files_total", d(s.foreign_files), "kind=\"foreign\"");
  w.single("strata_prefix_cache_write_failures_total", "counter", "Cache file writes that failed (full disk, permissions).",
           d(s.write_failures));
  w.single("strata_prefix_cache_pending_writes", "gauge", "Entries queued for the writer thread.", d(s.pending_writes));
  w.single("strata_prefix_cache_disk_load_seconds_total", "counter", "Time reading cache files.", s.disk_load_seconds);
  w.single("strata_prefix_cache_disk_load_bytes_total", "counter", "Bytes read from cache files.", d(s.disk_load_bytes));
  w.single("strata_prefix_cache_disk_write_seconds_total", "counter", "Time writing cache files (writer thread).",
           s.disk_write_seconds);
  w.single("strata_prefix_cache_disk_write_bytes_total", "counter", "Bytes written to cache files.", d(s.disk_write_bytes));
}

}  // namespace

std::string Metrics::render(const engine::EngineStats& stats, int64_t max_sequences, int64_t open_connections,
                            const cache::PrefixCacheStats* cache,
                            const text::grammar::GrammarCacheStats* grammars) const {
  std::lock_guard lock(mu_);
  Writer w(escape_label(model_name_));
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  w.single("strata_num_requests_running", "gauge", "Sequences in the engine's running batch.", d(stats.running));
  w.single("strata_num_requests_waiting", "gauge", "Sequences waiting to be scheduled.", d(stats.waiting));
  w.single("strata_state_pool_used_slots", "gauge", "Sequence slots of the state pool in use.", d(stats.used_slots));
  w.single("strata_state_pool_total_slots", "gauge", "Sequence slots of the state pool.", d(max_sequences));
  w.single("strata_state_pool_used_blocks", "gauge", "Token blocks (128 tokens of compressed entries, every layer) of the state pool in use.", d(stats.used_blocks));
  w.single("strata_state_pool_total_blocks", "gauge", "Token blocks of the state pool.", d(stats.total_blocks));
  w.single("strata_state_pool_kept_blocks", "gauge",
           "Token blocks no sequence holds, kept for prefix-cache hits until a block is needed (counted as free).",
           d(stats.kept_blocks));
  w.single("strata_state_pool_kept_block_evictions_total", "counter", "Kept token blocks given up for new ones.",
           d(stats.evicted_kept_blocks));
  w.single("strata_state_pool_usage_ratio", "gauge", "Fraction of the state pool's token blocks in use (0..1).",
           stats.total_blocks > 0 ? d(stats.used_blocks) / d(stats.total_blocks) : 0.0);
  w.single("strata_num_preemptions_total", "counter", "Sequences preempted (state freed, recomputed later).",
           d(stats.preemptions));
  w.single("strata_engine_steps_total", "counter", "Engine steps run.", d(stats.steps));
  {
    // Speculative decoding (docs/mtp.md, "Accounting"): true counts; the figures derived from them (acceptance
    // rate, mean accepted length) are the dashboard's division.
    const engine::SpeculativeCounts& sp = stats.speculative;
    w.single("strata_spec_decode_draft_tokens_total", "counter", "Tokens the MTP layer drafted.", d(sp.drafted));
    w.single("strata_spec_decode_verified_tokens_total", "counter", "Draft tokens put into a verification forward.",
             d(sp.verified));
    w.single("strata_spec_decode_accepted_tokens_total", "counter", "Verified draft tokens accepted.", d(sp.accepted));
    w.single("strata_spec_decode_verify_steps_total", "counter",
             "Sequence-steps that verified at least one draft (each also yields one bonus or corrected token).",
             d(sp.verify_steps));
    w.single("strata_spec_decode_emitted_tokens_total", "counter",
             "Tokens those steps emitted, after truncation at EOS, stop ids and max_tokens.", d(sp.emitted));
    w.single("strata_spec_decode_truncated_tokens_total", "counter",
             "Tokens those steps produced past a sequence's end (never emitted).", d(sp.truncated));
    w.header("strata_spec_decode_verified_by_position_total", "counter", "Verified drafts by draft position (0: first).");
    for (size_t j = 0; j < sp.verified_at.size(); ++j)
      w.sample("strata_spec_decode_verified_by_position_total", d(sp.verified_at[j]), "position=\"" + std::to_string(j) + "\"");
    w.header("strata_spec_decode_accepted_by_position_total", "counter", "Accepted drafts by draft position (0: first).");
    for (size_t j = 0; j < sp.accepted_at.size(); ++j)
      w.sample("strata_spec_decode_accepted_by_position_total", d(sp.accepted_at[j]), "position=\"" + std::to_string(j) + "\"");
  }
  w.single("strata_grammar_masks_total", "counter",
           "Allowed-token masks built for constrained sequences (structured outputs, tool_choice).", d(stats.grammar_masks));
  w.single("strata_grammar_mask_seconds_total", "counter",
           "Engine-thread wall time building those masks, before each forward.", stats.grammar_mask_seconds);
  w.single("strata_http_connections", "gauge", "Open HTTP connections.", d(open_connections));
  w.single("strata_requests_received_total", "counter", "Completion requests admitted to the engine.",
           d(requests_received_));
  w.single("strata_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", d(prompt_tokens_));
  w.single("strata_generation_tokens_total", "counter", "Generated tokens of finished requests.", d(generation_tokens_));
  w.header("strata_request_success_total", "counter", "Finished choices by finish reason.");
  for (const auto& [reason, count] : finished_by_reason_)
    w.sample("strata_request_success_total", d(count), "finished_reason=\"" + escape_label(reason) + "\"");
  w.header("strata_http_errors_total", "counter", "HTTP error responses by status code.");
  for (const auto& [status, count] : errors_by_status_)
    w.sample("strata_http_errors_total", d(count), "status=\"" + std::to_string(status) + "\"");
  w.histogram("strata_time_to_first_token_seconds", "Time from request arrival to its first generated token.", ttft_);
  w.histogram("strata_time_per_output_token_seconds", "Mean time between generated tokens, per choice.", tpot_);
  w.histogram("strata_e2e_request_latency_seconds", "Time from request arrival to its last token.", e2e_);
  if (cache) render_cache(w, *cache);
  w.header("strata_pd_transfers_total", "counter",
           "Prompt states requested from a prefill replica, by result (ok, or why it failed and the prompt was computed here).");
  w.sample("strata_pd_transfers_total", d(transfers_ok_), "result=\"ok\"");
  for (const auto& [kind, count] : transfers_failed_)
    w.sample("strata_pd_transfers_total", d(count), "result=\"" + escape_label(kind) + "\"");
  w.single("strata_pd_transfer_bytes_total", "counter", "Bytes of prompt states received from prefill replicas.",
           d(transfer_bytes_));
  w.single("strata_pd_transfer_seconds_total", "counter",
           "Wall time of successful transfers, order sent to state received (the remote prefill included).",
           transfer_seconds_);
  w.single("strata_pd_imported_states_total", "counter", "Received states restored into a sequence at admission.",
           d(stats.imported_states));
  w.single("strata_pd_import_failures_total", "counter",
           "Received states that could not be restored (their prompts were computed here).", d(stats.import_failures));
  w.single("strata_pd_exported_states_total", "counter", "Prompt states computed here for a decode replica.",
           d(stats.exported_states));
  w.single("strata_pd_exported_state_bytes_total", "counter", "Bytes of those states.", d(stats.exported_state_bytes));
  w.single("strata_pd_export_seconds_total", "counter",
           "Engine-thread time writing the exported states (device copies included).", stats.state_export_seconds);
  w.single("strata_pd_restore_seconds_total", "counter",
           "Engine-thread time restoring received states as their bytes arrive (device copies included).",
           stats.state_restore_seconds);
  if (grammars) {
    w.single("strata_grammar_cache_hits_total", "counter", "Grammar compile-cache hits.", d(grammars->hits));
    w.single("strata_grammar_cache_misses_total", "counter", "Grammars compiled (or refused) for the cache.",
             d(grammars->misses));
    w.single("strata_grammar_cache_entries", "gauge", "Compiled grammars (and cached failures) held.", d(grammars->entries));
    w.single("strata_grammar_compile_seconds_total", "counter", "Time compiling grammars, on the request workers.",
             grammars->compile_seconds);
  }
  return w.take();
}

void Metrics::transfer_succeeded(int64_t bytes, double seconds) {
  std::lock_guard lock(mu_);
  ++transfers_ok_;
  transfer_bytes_ += bytes;
  transfer_seconds_ += seconds;
}

void Metrics::transfer_failed(const std::string& kind) {
  std::lock_guard lock(mu_);
  ++transfers_failed_[kind];
}

}  // namespace strata::server
