#include "cache/kv_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace strata::cache {

namespace fs = std::filesystem;

int64_t system_clock_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* to_string(Tier t) {
  switch (t) {
    case Tier::Gpu: return "gpu";
    case Tier::Host: return "host";
    case Tier::Disk: return "disk";
    case Tier::None: break;
  }
  return "none";
}

KvStore::KvStore(const model::ModelFingerprint& fingerprint, StoreConfig config)
    : fingerprint_(fingerprint), cfg_(std::move(config)), clock_(cfg_.clock ? cfg_.clock : Clock(system_clock_seconds)) {
  if (cfg_.host_bytes < 0) fail("cache: host memory budget must be ≥ 0, got ", cfg_.host_bytes);
  if (cfg_.disk_bytes < 0) fail("cache: disk budget must be ≥ 0, got ", cfg_.disk_bytes);
  stats_.disk_budget = cfg_.dir.empty() ? 0 : cfg_.disk_bytes;
  if (!cfg_.dir.empty()) {
    model_dir_ = (fs::path(cfg_.dir) / fingerprint_.hex()).string();
    std::error_code ec;
    fs::create_directories(model_dir_, ec);
    if (ec) fail("cache directory ", model_dir_, ": cannot create it: ", ec.message());
    scan_directory();
    disk_trim(stats_.disk_budget);
  }
  if (cfg_.writer_thread) writer_ = std::thread([this] { writer_loop(); });
}

KvStore::~KvStore() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string KvStore::path_of(const EntryKey& key) const { return model_dir_ + "/" + entry_relative_path(key); }

void KvStore::scan_directory() {
  std::error_code ec;
  fs::recursive_directory_iterator it(model_dir_, ec), end;
  if (ec) fail("cache directory ", model_dir_, ": cannot read it: ", ec.message());
  const int64_t t = now();
  for (; it != end; it.increment(ec)) {
    if (ec) fail("cache directory ", model_dir_, ": cannot read it: ", ec.message());
    if (!it->is_regular_file(ec)) continue;
    const std::string path = it->path().string(), name = it->path().filename().string();
    if (name.rfind(".tmp-", 0) == 0) {
      if (t - file_mtime_seconds(path) > kStaleTemporarySeconds) fs::remove(it->path(), ec);
      continue;
    }
    EntryKey key;
    if (!parse_entry_name(name, key)) continue;  // not ours: left alone
    EntryHeader h;
    const ReadResult r = read_entry_header(path, h);
    if (r.status != ReadStatus::Ok || h.key != key || h.fingerprint != fingerprint_) {
      ++(h.fingerprint != fingerprint_ && r.status == ReadStatus::Ok ? stats_.foreign_files : stats_.corrupt_files);
      fs::remove(it->path(), ec);
      continue;
    }
    const int64_t last_use = file_mtime_seconds(path);
    if (last_use + h.ttl_seconds <= t) {
      ++stats_.expirations;
      fs::remove(it->path(), ec);
      continue;
    }
    disk_[key] = DiskEntry{static_cast<int64_t>(kEntryHeaderBytes + h.payload_bytes), last_use, h.ttl_seconds};
    stats_.disk.bytes += disk_[key].bytes;
    ++stats_.disk.entries;
  }
}

void KvStore::host_insert(const EntryKey& key, std::shared_ptr<const std::string> payload, int64_t ttl, int64_t t) {
  const auto bytes = static_cast<int64_t>(payload->size());
  if (bytes > cfg_.host_bytes) return;  // would not fit even alone
  while (stats_.host.bytes + bytes > cfg_.host_bytes && !host_lru_.empty()) {
    host_erase(host_lru_.back());
    ++stats_.host.evictions;
  }
  host_lru_.push_front(key);
  host_[key] = HostEntry{std::move(payload), t + ttl, ttl, host_lru_.begin()};
  stats_.host.bytes += bytes;
  ++stats_.host.entries;
}

void KvStore::host_erase(const EntryKey& key) {
  const auto it = host_.find(key);
  if (it == host_.end()) return;
  stats_.host.bytes -= static_cast<int64_t>(it->second.payload->size());
  --stats_.host.entries;
  host_lru_.erase(it->second.lru);
  host_.erase(it);
}

void KvStore::disk_erase(const EntryKey& key, bool remove_file) {
  const auto it = disk_.find(key);
  if (it != disk_.end()) {
    stats_.disk.bytes -= it->second.bytes;
    --stats_.disk.entries;
    disk_.erase(it);
  }
  if (remove_file) {
    std::error_code ec;
    fs::remove(path_of(key), ec);
  }
}

void KvStore::disk_trim(int64_t budget) {
  if (stats_.disk.bytes <= budget) return;
  std::vector<std::pair<int64_t, EntryKey>> by_age;
  by_age.reserve(disk_.size());
  for (const auto& [k, e] : disk_) by_age.emplace_back(e.last_use, k);
  std::sort(by_age.begin(), by_age.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Down to 90% of the budget, so a full directory is not trimmed again on every write.
  const int64_t target = budget - budget / 10;
  for (const auto& [age, k] : by_age) {
    if (stats_.disk.bytes <= target) break;
    disk_erase(k, true);
    ++stats_.disk.evictions;
  }
}

bool KvStore::disk_index_file(const EntryKey& key, int64_t t) {
  if (model_dir_.empty() || queued_.count(key)) return false;
  const std::string path = path_of(key);
  const int64_t last_use = file_mtime_seconds(path);
  if (last_use < 0) return false;
  EntryHeader h;
  if (read_entry_header(path, h).status != ReadStatus::Ok || h.key != key || h.fingerprint != fingerprint_) return false;
  if (last_use + h.ttl_seconds <= t) return false;  // the owner's collector deletes it
  disk_[key] = DiskEntry{static_cast<int64_t>(kEntryHeaderBytes + h.payload_bytes), last_use, h.ttl_seconds};
  stats_.disk.bytes += disk_[key].bytes;
  ++stats_.disk.entries;
  return true;
}

void KvStore::touch_file(const EntryKey& key, int64_t when) const {
  const struct timespec times[2] = {{when, 0}, {when, 0}};
  ::utimensat(AT_FDCWD, path_of(key).c_str(), times, 0);
}

Tier KvStore::find(const EntryKey& key) {
  std::lock_guard lock(mu_);
  const int64_t t = now();
  if (const auto it = host_.find(key); it != host_.end()) {
    if (it->second.expires > t) return Tier::Host;
    host_erase(key);
    ++stats_.expirations;
  }
  if (const auto it = disk_.find(key); it != disk_.end()) {
    if (it->second.last_use + it->second.ttl > t) return Tier::Disk;
    disk_erase(key, true);
    ++stats_.expirations;
    return Tier::None;
  }
  return disk_index_file(key, t) ? Tier::Disk : Tier::None;
}

std::shared_ptr<const std::string> KvStore::load(const EntryKey& key, int64_t ttl) {
  std::unique_lock lock(mu_);
  int64_t t = now();
  if (const auto it = host_.find(key); it != host_.end()) {
    if (it->second.expires > t) {
      HostEntry& e = it->second;
      host_lru_.splice(host_lru_.begin(), host_lru_, e.lru);
      e.ttl = std::max(e.ttl, ttl);
      e.expires = t + e.ttl;
      if (const auto d = disk_.find(key); d != disk_.end()) d->second.last_use = t;  // the file is touched below
      std::shared_ptr<const std::string> payload = e.payload;
      if (disk_.count(key)) {
        lock.unlock();
        touch_file(key, t);
      }
      return payload;
    }
    host_erase(key);
    ++stats_.expirations;
  }
  if (!disk_.count(key) && !disk_index_file(key, t)) return nullptr;
  const DiskEntry entry = disk_[key];
  if (entry.last_use + entry.ttl <= t) {
    disk_erase(key, true);
    ++stats_.expirations;
    return nullptr;
  }
  lock.unlock();
  const auto start = std::chrono::steady_clock::now();
  ReadResult r = read_entry_file(path_of(key), key, fingerprint_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.status == ReadStatus::Ok) touch_file(key, t);
  lock.lock();
  if (r.status != ReadStatus::Ok) {
    if (r.status == ReadStatus::Corrupt) ++stats_.corrupt_files;
    if (r.status == ReadStatus::Foreign) ++stats_.foreign_files;
    disk_erase(key, r.status != ReadStatus::Missing);
    return nullptr;
  }
  ++stats_.disk_loads;
  stats_.disk_load_bytes += static_cast<int64_t>(r.payload.size());
  stats_.disk_load_seconds += seconds;
  if (const auto d = disk_.find(key); d != disk_.end()) {
    d->second.last_use = t;
    d->second.ttl = std::max(d->second.ttl, ttl);
  }
  auto payload = std::make_shared<const std::string>(std::move(r.payload));
  if (!host_.count(key)) host_insert(key, payload, std::max(entry.ttl, ttl), t);
  return payload;
}

void KvStore::store(const EntryKey& key, std::string bytes, int64_t ttl) {
  if (ttl <= 0) fail("cache: a time to live must be positive, got ", ttl, " s");
  std::unique_lock lock(mu_);
  const int64_t t = now();
  if (const auto it = host_.find(key); it != host_.end() && it->second.expires > t) {
    host_lru_.splice(host_lru_.begin(), host_lru_, it->second.lru);
    it->second.ttl = std::max(it->second.ttl, ttl);
    it->second.expires = t + it->second.ttl;
    return;
  }
  host_erase(key);
  auto payload = std::make_shared<const std::string>(std::move(bytes));
  host_insert(key, payload, ttl, t);
  if (model_dir_.empty() || queued_.count(key)) return;
  if (const auto d = disk_.find(key); d != disk_.end() && d->second.last_use + d->second.ttl > t) {
    d->second.last_use = t;
    d->second.ttl = std::max(d->second.ttl, ttl);
    lock.unlock();
    touch_file(key, t);
    return;
  }
  Write w{key, std::move(payload), ttl};
  if (!cfg_.writer_thread) {
    lock.unlock();
    write_one(w);
    return;
  }
  queued_.insert(key);
  writes_.push_back(std::move(w));
  stats_.pending_writes = static_cast<int64_t>(writes_.size());
  lock.unlock();
  wake_.notify_one();
}

void KvStore::write_one(const Write& w) {
  const std::string path = path_of(w.key);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  EntryHeader h;
  h.key = w.key;
  h.fingerprint = fingerprint_;
  h.ttl_seconds = w.ttl;
  h.payload_bytes = w.payload->size();
  h.payload_checksum = XXH3_64bits(w.payload->data(), w.payload->size());
  const auto start = std::chrono::steady_clock::now();
  const std::string why = ec ? "cannot create " + fs::path(path).parent_path().string() + ": " + ec.message()
                             : write_entry_file(path, h, *w.payload);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t t = now();
  if (why.empty()) touch_file(w.key, t);
  std::lock_guard lock(mu_);
  if (!why.empty()) {
    // A full disk (or a quota) degrades to a smaller cache: the budget drops to what fits.
    ++stats_.write_failures;
    stats_.last_write_failure = why;
    stats_.disk_budget = std::min(stats_.disk_budget, stats_.disk.bytes);
    disk_trim(stats_.disk_budget);
    return;
  }
  ++stats_.disk_writes;
  stats_.disk_write_bytes += static_cast<int64_t>(kEntryHeaderBytes + w.payload->size());
  stats_.disk_write_seconds += seconds;
  disk_erase(w.key, false);
  disk_[w.key] = DiskEntry{static_cast<int64_t>(kEntryHeaderBytes + w.payload->size()), t, w.ttl};
  stats_.disk.bytes += disk_[w.key].bytes;
  ++stats_.disk.entries;
  disk_trim(stats_.disk_budget);
}

void KvStore::collect_expired() {
  std::lock_guard lock(mu_);
  const int64_t t = now();
  std::vector<EntryKey> gone;
  for (const auto& [k, e] : host_)
    if (e.expires <= t) gone.push_back(k);
  for (const EntryKey& k : gone) {
    host_erase(k);
    ++stats_.expirations;
  }
  gone.clear();
  for (const auto& [k, e] : disk_)
    if (e.last_use + e.ttl <= t) gone.push_back(k);
  for (const EntryKey& k : gone) {
    // Another server sharing the directory may have used it since: its mtime says.
    const int64_t last_use = file_mtime_seconds(path_of(k));
    if (last_use >= 0 && last_use + disk_[k].ttl > t) {
      disk_[k].last_use = last_use;
      continue;
    }
    disk_erase(k, true);
    ++stats_.expirations;
  }
}

void KvStore::flush() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return writes_.empty() && !writing_; });
}

StoreStats KvStore::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void KvStore::writer_loop() {
  auto next_gc = std::chrono::steady_clock::now() + std::chrono::seconds(cfg_.gc_interval_seconds);
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait_until(lock, next_gc, [&] { return stopping_ || !writes_.empty(); });
    if (!writes_.empty()) {
      Write w = std::move(writes_.front());
      writes_.pop_front();
      writing_ = true;
      lock.unlock();
      write_one(w);
      lock.lock();
      queued_.erase(w.key);
      writing_ = false;
      stats_.pending_writes = static_cast<int64_t>(writes_.size());
      if (writes_.empty()) idle_.notify_all();
      continue;
    }
    if (stopping_) break;
    if (std::chrono::steady_clock::now() >= next_gc) {
      lock.unlock();
      collect_expired();
      lock.lock();
      next_gc = std::chrono::steady_clock::now() + std::chrono::seconds(cfg_.gc_interval_seconds);
    }
  }
  idle_.notify_all();
}

}  // namespace strata::cache
