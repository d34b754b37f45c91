#pragma once
// The tiers below the engine's own state pool: host memory, then files in a directory (a local disk, or a shared
// one that several servers mount). Entries are token blocks and boundary rows (entry_file.h), content-addressed by
// the prefix hash, so two servers that share a directory agree on every name and need no coordination: a file is
// written whole under a temporary name and renamed, and any server may read, refresh or evict it.
//
// Host memory is an LRU of at most host_bytes; the directory is an LRU (by the files' mtimes, which record the last
// use) of at most disk_bytes. Every entry lives ttl_seconds past its last use, then is never served and is deleted
// in the background. Disk writes run on a writer thread, off the serving path. A file that fails its checks is a
// miss (counted and deleted), never a wrong answer; a full disk shrinks the directory's budget instead of failing.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "cache/entry_file.h"

namespace strata::cache {

using Clock = std::function<int64_t()>;  // seconds since the epoch
int64_t system_clock_seconds();

enum class Tier { Gpu = 0, Host = 1, Disk = 2, None = 3 };
inline constexpr int kTiers = 3;
const char* to_string(Tier t);  // "gpu", "host", "disk", "none"

struct StoreConfig {
  std::string dir;                            // the directory tier's root; empty: no directory tier
  int64_t host_bytes = int64_t{8} << 30;      // host-memory tier budget (0: none)
  int64_t disk_bytes = int64_t{200} << 30;    // directory tier budget
  Clock clock;                                // unset: the system clock
  bool writer_thread = true;                  // false: store() writes files itself (tests)
  int64_t gc_interval_seconds = 60;           // how often the writer thread collects expired entries
};

struct TierStats {
  int64_t bytes = 0, entries = 0, evictions = 0;
};
struct StoreStats {
  TierStats host, disk;
  int64_t disk_budget = 0;  // the directory's budget now (shrinks after a full disk)
  int64_t expirations = 0, corrupt_files = 0, foreign_files = 0, write_failures = 0, pending_writes = 0;
  int64_t disk_loads = 0, disk_load_bytes = 0, disk_writes = 0, disk_write_bytes = 0;
  double disk_load_seconds = 0, disk_write_seconds = 0;
  std::string last_write_failure;
};

class KvStore {
 public:
  // Scans `config.dir`/<fingerprint hex>/ (made if missing) and indexes the files there, so a restarted server
  // hits what it saved; bad files are counted and deleted. Throws if the directory cannot be made or read.
  KvStore(const model::ModelFingerprint& fingerprint, StoreConfig config);
  ~KvStore();  // finishes queued writes
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // Where `key` is, without loading it (None: absent or expired). A key unknown here may have been written by
  // another server sharing the directory: its file is looked for.
  Tier find(const EntryKey& key);
  // The entry's bytes (null on a miss, or a file that fails its checks), brought to host memory; its last use is
  // now and it lives `ttl_seconds` more (at least).
  std::shared_ptr<const std::string> load(const EntryKey& key, int64_t ttl_seconds);
  // Keeps `payload` under `key` for `ttl_seconds` past its last use: in host memory now, in the directory soon.
  void store(const EntryKey& key, std::string payload, int64_t ttl_seconds);

  void collect_expired();  // also runs on the writer thread every gc_interval_seconds
  void flush();            // returns when every queued write is done
  StoreStats stats() const;
  const std::string& model_dir() const { return model_dir_; }  // empty without a directory tier

 private:
  struct HostEntry {
    std::shared_ptr<const std::string> payload;
    int64_t expires = 0, ttl = 0;
    std::list<EntryKey>::iterator lru;
  };
  struct DiskEntry {
    int64_t bytes = 0, last_use = 0, ttl = 0;
  };
  struct Write {
    EntryKey key;
    std::shared_ptr<const std::string> payload;
    int64_t ttl = 0;
  };

  int64_t now() const { return clock_(); }
  std::string path_of(const EntryKey& key) const;
  void scan_directory();
  void host_insert(const EntryKey& key, std::shared_ptr<const std::string> payload, int64_t ttl, int64_t now);
  void host_erase(const EntryKey& key);
  void disk_erase(const EntryKey& key, bool remove_file);
  void disk_trim(int64_t budget);  // LRU files out until the directory holds at most `budget` bytes
  bool disk_index_file(const EntryKey& key, int64_t now);  // looks for a file another server wrote
  void touch_file(const EntryKey& key, int64_t when) const;
  void write_one(const Write& w);
  void writer_loop();

  model::ModelFingerprint fingerprint_;
  StoreConfig cfg_;
  Clock clock_;
  std::string model_dir_;

  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::unordered_map<EntryKey, HostEntry, EntryKeyHash> host_;
  std::list<EntryKey> host_lru_;  // most recent first
  std::unordered_map<EntryKey, DiskEntry, EntryKeyHash> disk_;
  std::deque<Write> writes_;
  std::unordered_set<EntryKey, EntryKeyHash> queued_;
  bool writing_ = false, stopping_ = false;
  StoreStats stats_;
  std::thread writer_;
};

}  // namespace strata::cache
