#include "cli/bench_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "cache/prefix_cache.h"
#include "core/error.h"
#include "engine/engine.h"

namespace strata::cli {

namespace {

using clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Seconds from submitting `prompt` to its first token, on a fresh engine with `cache` (or none); the engine's
// state pool holds one such sequence.
double time_to_first_token(const model::Model& m, const std::vector<int32_t>& prompt, int64_t chunk,
                           std::shared_ptr<cache::PrefixCache> cache, int64_t* cached_tokens) {
  engine::EngineConfig ec;
  ec.scheduler.max_num_seqs = 1;
  ec.scheduler.max_num_batched_tokens = chunk;
  ec.pool = {1, m.blocks_for_tokens(static_cast<int64_t>(prompt.size()) + 2)};
  ec.max_model_len = static_cast<int64_t>(prompt.size()) + 1;
  ec.cache = std::move(cache);
  engine::Engine e(m, ec);
  engine::SamplingParams p;
  p.max_tokens = 1;
  p.temperature = 0;
  const auto start = clock::now();
  e.add_request("r", prompt, p);
  double seconds = -1;
  while (e.has_unfinished())
    for (const engine::TokenEvent& ev : e.step())
      if (ev.token && seconds < 0) {
        seconds = std::chrono::duration<double>(clock::now() - start).count();
        if (cached_tokens) *cached_tokens = ev.cached_tokens;
      }
  return seconds;
}

// Drops the directory's files from the page cache (clean pages only; they were fsynced), so reading them is disk I/O.
void evict_from_page_cache(const std::string& dir) {
  std::error_code ec;
  for (const auto& f : fs::recursive_directory_iterator(dir, ec)) {
    if (!f.is_regular_file(ec)) continue;
    const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double per_second(int64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0; }

}  // namespace

nlohmann::json cache_ttft(const model::Model& m, const std::vector<int64_t>& lengths, int64_t chunk,
                          const std::string& dir, int64_t repeats) {
  nlohmann::json out = nlohmann::json::array();
  const int64_t vocab = m.config().vocab_size;
  for (const int64_t len : lengths) {
    std::vector<int32_t> prompt(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i)
      prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + len * 31 + 3) % (vocab - 2) + 2);
    std::vector<double> none_s, cold_s, host_s, disk_s, replay_s;
    int64_t host_cached = 0, disk_cached = 0, replay_cached = 0, replay_bytes = 0;
    nlohmann::json costs;
    for (int64_t r = 0; r <= repeats; ++r) {  // r == 0: warm-up
      fs::remove_all(dir);
      cache::CacheConfig cc;
      cc.store.dir = dir;
      const double none = time_to_first_token(m, prompt, chunk, nullptr, nullptr);
      auto warm = std::make_shared<cache::PrefixCache>(m, cc);
      const double cold = time_to_first_token(m, prompt, chunk, warm, nullptr);
      const double host = time_to_first_token(m, prompt, chunk, warm, &host_cached);
      warm->store().flush();
      const cache::PrefixCacheStats ws = warm->stats();
      warm.reset();
      evict_from_page_cache(dir);
      auto restarted = std::make_shared<cache::PrefixCache>(m, cc);
      const double disk = time_to_first_token(m, prompt, chunk, restarted, &disk_cached);
      const cache::PrefixCacheStats rs = restarted->stats();
      restarted.reset();
      // Replay mode from host memory: blocks only, the prefix's last replay_tokens tokens computed again.
      cache::CacheConfig rc;
      rc.mode = cache::ReuseMode::Replay;
      auto replay = std::make_shared<cache::PrefixCache>(m, rc);
      time_to_first_token(m, prompt, chunk, replay, nullptr);
      const double replay_hit = time_to_first_token(m, prompt, chunk, replay, &replay_cached);
      replay_bytes = replay->stats().store.host.bytes;
      if (r == 0) continue;
      replay_s.push_back(replay_hit);
      none_s.push_back(none);
      cold_s.push_back(cold);
      host_s.push_back(host);
      disk_s.push_back(disk);
      costs = {{"saved_bytes", ws.store.host.bytes},
               {"saved_blocks", ws.saved_blocks},
               {"saved_boundaries", ws.saved_rows},
               {"save_seconds", ws.save_seconds},
               {"save_device_to_host_gbs", per_second(ws.store.host.bytes, ws.save_seconds) / 1e9},
               {"host_restore_seconds", ws.restore_seconds},
               {"host_restore_gbs", per_second(ws.store.host.bytes, ws.restore_seconds) / 1e9},
               {"disk_write_gbs", per_second(ws.store.disk_write_bytes, ws.store.disk_write_seconds) / 1e9},
               {"disk_restore_seconds", rs.restore_seconds},
               {"disk_read_bytes", rs.store.disk_load_bytes},
               // Bytes read over the restore's wall time (reads run in parallel: their summed time is not it).
               {"disk_read_gbs", per_second(rs.store.disk_load_bytes, rs.restore_seconds) / 1e9}};
    }
    fs::remove_all(dir);
    const double none = median(none_s), host = median(host_s), disk = median(disk_s);
    out.push_back({{"prompt_tokens", len},
                   {"chunk", chunk},
                   {"ttft_s",
                    {{"no_cache", none},
                     {"cold_with_cache", median(cold_s)},
                     {"host_hit", host},
                     {"disk_hit", disk},
                     {"replay_mode_host_hit", median(replay_s)}}},
                   {"cached_tokens", {{"host_hit", host_cached}, {"disk_hit", disk_cached}, {"replay_mode_host_hit", replay_cached}}},
                   {"speedup_vs_no_cache",
                    {{"host_hit", none / host}, {"disk_hit", none / disk}, {"replay_mode_host_hit", none / median(replay_s)}}},
                   {"stored_bytes", {{"exact_mode", costs.value("saved_bytes", int64_t{0})}, {"replay_mode", replay_bytes}}},
                   {"cost", costs}});
  }
  return out;
}

}  // namespace strata::cli
