// The cache's store below the engine: host memory and a directory, with TTLs on a fake clock, LRU budgets,
// restarts, damaged and foreign files, a directory shared by two stores, and a disk that refuses writes.
#include "cache/kv_store.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace strata::cache {
namespace {

namespace fs = std::filesystem;

const model::ModelFingerprint kModel{0x1111, 0x2222};
const model::ModelFingerprint kOtherModel{0x3333, 0x4444};

EntryKey block_key(uint64_t n) { return {EntryKind::Block, {n, n * 7 + 1}}; }
std::string payload(uint64_t n, size_t size = 100) { return std::string(size, static_cast<char>('a' + n % 26)); }

class KvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir("kv_store_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  StoreConfig config(int64_t host = 1 << 20, int64_t disk = 1 << 20) {
    StoreConfig c;
    c.dir = dir_;
    c.host_bytes = host;
    c.disk_bytes = disk;
    c.clock = [this] { return now_; };
    c.writer_thread = false;
    return c;
  }
  std::string file_of(const KvStore& s, const EntryKey& k) { return s.model_dir() + "/" + entry_relative_path(k); }

  std::string dir_;
  int64_t now_ = 1'000'000;
};

TEST_F(KvStoreTest, KeepsEntriesInHostMemoryAndOnDiskAcrossARestart) {
  {
    KvStore s(kModel, config());
    s.store(block_key(1), payload(1), 60);
    EXPECT_EQ(s.find(block_key(1)), Tier::Host);
    EXPECT_EQ(*s.load(block_key(1), 60), payload(1));
    EXPECT_EQ(s.find(block_key(2)), Tier::None);
    EXPECT_EQ(s.stats().disk.entries, 1);
  }
  KvStore restarted(kModel, config());
  EXPECT_EQ(restarted.stats().disk.entries, 1);
  EXPECT_EQ(restarted.find(block_key(1)), Tier::Disk);
  EXPECT_EQ(*restarted.load(block_key(1), 60), payload(1));
  EXPECT_EQ(restarted.find(block_key(1)), Tier::Host);  // promoted on the hit
  EXPECT_EQ(restarted.stats().disk_loads, 1);
}

TEST_F(KvStoreTest, TheWriterThreadWritesOffTheCallersPath) {
  StoreConfig c = config();
  c.writer_thread = true;
  {
    KvStore s(kModel, c);
    for (uint64_t i = 0; i < 20; ++i) s.store(block_key(i), payload(i), 60);
    s.flush();
    EXPECT_EQ(s.stats().disk.entries, 20);
    EXPECT_EQ(s.stats().pending_writes, 0);
  }
  KvStore restarted(kModel, config());
  EXPECT_EQ(*restarted.load(block_key(7), 60), payload(7));
}

TEST_F(KvStoreTest, ExpiredEntriesAreNeverServedAndAreCollected) {
  KvStore s(kModel, config());
  s.store(block_key(1), payload(1), 10);
  s.store(block_key(2), payload(2), 10);
  now_ += 8;
  ASSERT_NE(s.load(block_key(2), 10), nullptr);  // a use restarts its time to live
  now_ += 5;                                      // 13 s after the store, 5 after the use
  EXPECT_EQ(s.find(block_key(1)), Tier::None);
  EXPECT_EQ(s.load(block_key(1), 10), nullptr);
  EXPECT_EQ(s.find(block_key(2)), Tier::Host);
  now_ += 20;
  s.collect_expired();
  EXPECT_EQ(s.find(block_key(2)), Tier::None);
  EXPECT_GE(s.stats().expirations, 2);
  EXPECT_EQ(s.stats().disk.entries, 0);
  EXPECT_FALSE(fs::exists(file_of(s, block_key(2))));
  KvStore restarted(kModel, config());  // nothing expired comes back after a restart either
  EXPECT_EQ(restarted.find(block_key(1)), Tier::None);
}

TEST_F(KvStoreTest, AnExpiredFileIsDroppedAtStartUp) {
  { KvStore(kModel, config()).store(block_key(1), payload(1), 10); }
  now_ += 11;
  KvStore restarted(kModel, config());
  EXPECT_EQ(restarted.stats().disk.entries, 0);
  EXPECT_EQ(restarted.stats().expirations, 1);
  EXPECT_EQ(restarted.find(block_key(1)), Tier::None);
}

TEST_F(KvStoreTest, HostMemoryAndTheDirectoryEvictTheLeastRecentlyUsed) {
  KvStore s(kModel, config(/*host=*/250, /*disk=*/3 * (100 + kEntryHeaderBytes)));
  for (uint64_t i = 0; i < 3; ++i) {
    s.store(block_key(i), payload(i), 60);
    ++now_;
  }
  const StoreStats st = s.stats();
  EXPECT_EQ(st.host.entries, 2);
  EXPECT_EQ(st.host.evictions, 1);
  EXPECT_EQ(s.find(block_key(0)), Tier::Disk);  // out of host memory, still on disk
  ASSERT_NE(s.load(block_key(0), 60), nullptr);  // used again: now the most recent
  ++now_;
  s.store(block_key(3), payload(3), 60);  // the directory is over budget: the oldest use goes (block 1)
  EXPECT_EQ(s.stats().disk.evictions, 2);  // down to 90% of the budget: two of four files
  EXPECT_FALSE(fs::exists(file_of(s, block_key(1))));
  EXPECT_TRUE(fs::exists(file_of(s, block_key(0))));
  EXPECT_TRUE(fs::exists(file_of(s, block_key(3))));
}

TEST_F(KvStoreTest, DamagedTruncatedAndForeignFilesAreMissesNeverData) {
  {
    KvStore s(kModel, config());
    for (uint64_t i = 0; i < 4; ++i) s.store(block_key(i), payload(i), 60);
  }
  KvStore probe(kModel, config(0));  // no host memory: every load reads the file
  const std::string damaged = file_of(probe, block_key(0)), truncated = file_of(probe, block_key(1));
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kEntryHeaderBytes + 10);
    f.put('!');
  }
  fs::resize_file(truncated, kEntryHeaderBytes + 50);
  // A file of another model copied under this model's name.
  {
    StoreConfig other = config();
    other.dir = dir_ + "_other";
    KvStore foreign(kOtherModel, other);
    foreign.store(block_key(2), payload(9), 60);
    fs::copy_file(foreign.model_dir() + "/" + entry_relative_path(block_key(2)), file_of(probe, block_key(2)),
                  fs::copy_options::overwrite_existing);
  }
  EXPECT_EQ(probe.load(block_key(0), 60), nullptr);
  EXPECT_EQ(probe.load(block_key(1), 60), nullptr);
  EXPECT_EQ(probe.load(block_key(2), 60), nullptr);
  EXPECT_EQ(*probe.load(block_key(3), 60), payload(3));
  const StoreStats st = probe.stats();
  EXPECT_EQ(st.corrupt_files, 2);
  EXPECT_EQ(st.foreign_files, 1);
  EXPECT_FALSE(fs::exists(damaged));
  EXPECT_EQ(probe.find(block_key(0)), Tier::None);

  // At start-up: a truncated file and a torn temporary file are not indexed.
  { KvStore(kModel, config()).store(block_key(5), payload(5), 60); }
  fs::resize_file(file_of(probe, block_key(5)), 30);
  std::ofstream(probe.model_dir() + "/.tmp-1-0-torn.kv") << "half a file";
  KvStore restarted(kModel, config());
  EXPECT_EQ(restarted.stats().corrupt_files, 1);
  EXPECT_EQ(restarted.find(block_key(5)), Tier::None);
  EXPECT_EQ(restarted.stats().disk.entries, 1);  // block 3 only
}

TEST_F(KvStoreTest, TwoStoresShareOneDirectory) {
  KvStore a(kModel, config()), b(kModel, config());
  a.store(block_key(1), payload(1), 60);
  EXPECT_EQ(b.find(block_key(1)), Tier::Disk);  // written by a after b started
  EXPECT_EQ(*b.load(block_key(1), 60), payload(1));
  b.store(block_key(2), payload(2), 60);
  EXPECT_EQ(*a.load(block_key(2), 60), payload(2));
}

TEST_F(KvStoreTest, AFullDiskShrinksTheCacheInsteadOfFailing) {
  KvStore s(kModel, config());
  s.store(block_key(1), payload(1), 60);
  // The kernel refuses writes past 1000 bytes per file (RLIMIT_FSIZE), as a full disk or a quota would.
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  EXPECT_NO_THROW(s.store(block_key(2), payload(2, 5000), 60));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  const StoreStats st = s.stats();
  EXPECT_EQ(st.write_failures, 1);
  EXPECT_NE(st.last_write_failure.find("cannot write"), std::string::npos) << st.last_write_failure;
  EXPECT_LE(st.disk_budget, st.disk.bytes);
  EXPECT_EQ(*s.load(block_key(2), 60), payload(2, 5000));  // still served from host memory
  for (const auto& e : fs::recursive_directory_iterator(s.model_dir()))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp-", 0), std::string::npos) << "left behind: " << e.path();
}

TEST(EntryFile, NamesRoundTripAndHeadersCheckThemselves) {
  const EntryKey k{EntryKind::Rows, {0x0123456789abcdefULL, 0xfedcba9876543210ULL}};
  const std::string rel = entry_relative_path(k);
  EXPECT_EQ(rel, "fe/rfedcba98765432100123456789abcdef.kv");
  EntryKey back;
  ASSERT_TRUE(parse_entry_name(rel.substr(3), back));
  EXPECT_EQ(back, k);
  EXPECT_FALSE(parse_entry_name("xfedcba98765432100123456789abcdef.kv", back));
  EntryHeader h{k, kModel, 60, 5, 99};
  std::string bytes = encode_header(h);
  EXPECT_EQ(bytes.size(), kEntryHeaderBytes);
  EntryHeader out;
  std::string why;
  ASSERT_TRUE(decode_header(bytes, out, why)) << why;
  EXPECT_EQ(out.key, k);
  EXPECT_EQ(out.ttl_seconds, 60);
  bytes[40] ^= 1;
  EXPECT_FALSE(decode_header(bytes, out, why));
  EXPECT_EQ(why, "header checksum mismatch");
}

}  // namespace
}  // namespace strata::cache
