#include "cache/cache_directory.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "cache/entry_file.h"
#include "core/error.h"

namespace strata::cache {

namespace fs = std::filesystem;


DirectoryReport inspect_cache_directory(const std::string& dir, DirectoryAction action, int64_t now,
                                        std::optional<int64_t> max_bytes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("cache directory ", dir, ": does not exist or is not a directory");
  DirectoryReport report;
  struct Kept {
    fs::path path;
    int64_t last_use, bytes;
    ModelDirectoryReport* model;
    bool block;
  };
  std::vector<Kept> kept;
  const bool gc = action == DirectoryAction::Gc;
  for (const fs::directory_entry& sub : fs::directory_iterator(dir, ec)) {
    model::ModelFingerprint fp;
    const std::string name = sub.path().filename().string();
    if (!sub.is_directory(ec) || !parse_fingerprint_hex(name, fp)) {
      report.ignored.push_back(name);
      continue;
    }
    ModelDirectoryReport& m = report.models[name];
    for (fs::recursive_directory_iterator it(sub.path(), ec), end; it != end; it.increment(ec)) {
      if (ec) fail("cache directory ", sub.path().string(), ": cannot read it: ", ec.message());
      if (!it->is_regular_file(ec)) continue;
      const fs::path path = it->path();
      const std::string file = path.filename().string();
      const int64_t mtime = file_mtime_seconds(path.string());
      if (file.rfind(".tmp-", 0) == 0) {
        ++m.temporary;  // a write in progress, or one a crash cut short
        if (gc && now - mtime > kStaleTemporarySeconds) fs::remove(path, ec);
        continue;
      }
      EntryKey key;
      if (!parse_entry_name(file, key)) continue;
      EntryHeader h;
      ReadResult r = read_entry_header(path.string(), h);
      if (r.status == ReadStatus::Ok && (h.key != key || h.fingerprint != fp)) {
        r.status = ReadStatus::Corrupt;
        r.why = "its header names another entry or model than its path";
      }
      if (r.status == ReadStatus::Ok && action != DirectoryAction::Stats) r = read_entry_file(path.string(), key, fp);
      if (r.status != ReadStatus::Ok) {
        ++m.damaged;
        m.problems.push_back(path.string() + ": " + r.why);
        if (gc) fs::remove(path, ec);
        continue;
      }
      if (mtime + h.ttl_seconds <= now) {
        ++m.expired;
        if (gc) {
          fs::remove(path, ec);
          continue;
        }
      }
      const auto bytes = static_cast<int64_t>(kEntryHeaderBytes + h.payload_bytes);
      ++(key.kind == EntryKind::Block ? m.blocks : m.rows);
      m.bytes += bytes;
      kept.push_back({path, mtime, bytes, &m, key.kind == EntryKind::Block});
    }
  }
  if (gc && max_bytes) {
    int64_t total = 0;
    for (const Kept& k : kept) total += k.bytes;
    std::sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) { return a.last_use < b.last_use; });
    for (const Kept& k : kept) {
      if (total <= *max_bytes) break;
      fs::remove(k.path, ec);
      total -= k.bytes;
      ++k.model->evicted;
      k.model->evicted_bytes += k.bytes;
      k.model->bytes -= k.bytes;
      --(k.block ? k.model->blocks : k.model->rows);
    }
  }
  return report;
}

}  // namespace strata::cache
