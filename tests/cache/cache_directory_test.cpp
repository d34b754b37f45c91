// `strata cache stats|verify|gc` on a directory two "servers" wrote: counts by kind, expired and damaged files,
// gc's deletions and its LRU trim to a byte budget; and the duration spellings the TTL flags take.
#include "cache/cache_directory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cache/duration.h"
#include "cache/kv_store.h"
#include "test_util.h"

namespace strata::cache {
namespace {

namespace fs = std::filesystem;

TEST(CacheDirectory, StatsVerifyAndGc) {
  const std::string dir = test::temp_dir("cache_directory");
  fs::remove_all(dir);
  int64_t now = 5'000'000;
  StoreConfig c;
  c.dir = dir;
  c.clock = [&] { return now; };
  c.writer_thread = false;
  const model::ModelFingerprint a{1, 2}, b{3, 4};
  std::string a_dir;
  {
    KvStore sa(a, c), sb(b, c);
    a_dir = sa.model_dir();
    for (uint64_t i = 0; i < 4; ++i) {
      sa.store({EntryKind::Block, {i, i}}, std::string(1000, 'x'), 100);
      ++now;
    }
    sa.store({EntryKind::Rows, {9, 9}}, std::string(500, 'r'), 10);
    sb.store({EntryKind::Block, {7, 7}}, std::string(300, 'y'), 100);
  }
  now += 20;  // the rows entry (TTL 10) has expired
  // Damage one payload byte: only verify (which reads payloads) sees it.
  {
    std::fstream f(a_dir + "/" + entry_relative_path({EntryKind::Block, {0, 0}}), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kEntryHeaderBytes) + 3);
    f.put('!');
  }
  std::ofstream(dir + "/README") << "not a model folder";

  DirectoryReport stats = inspect_cache_directory(dir, DirectoryAction::Stats, now);
  const std::string ka = a.hex(), kb = b.hex();
  ASSERT_EQ(stats.models.size(), 2u);
  EXPECT_EQ(stats.models[ka].blocks, 4);
  EXPECT_EQ(stats.models[ka].rows, 1);
  EXPECT_EQ(stats.models[ka].expired, 1);
  EXPECT_EQ(stats.models[ka].damaged, 0);
  EXPECT_EQ(stats.models[kb].blocks, 1);
  EXPECT_EQ(stats.ignored, std::vector<std::string>{"README"});

  DirectoryReport verify = inspect_cache_directory(dir, DirectoryAction::Verify, now);
  EXPECT_EQ(verify.models[ka].damaged, 1);
  ASSERT_EQ(verify.models[ka].problems.size(), 1u);
  EXPECT_NE(verify.models[ka].problems[0].find("payload checksum mismatch"), std::string::npos);

  // gc: the damaged and the expired file go, then the least recently used until 2.5 blocks' worth fit.
  const int64_t block_file = 1000 + static_cast<int64_t>(kEntryHeaderBytes);
  DirectoryReport gc = inspect_cache_directory(dir, DirectoryAction::Gc, now, 2 * block_file + block_file / 2);
  EXPECT_EQ(gc.models[ka].damaged, 1);
  EXPECT_EQ(gc.models[ka].expired, 1);
  EXPECT_EQ(gc.models[ka].evicted, 1);  // blocks 1, 2, 3 and b's block: the oldest (block 1) goes
  EXPECT_FALSE(fs::exists(a_dir + "/" + entry_relative_path({EntryKind::Block, {1, 1}})));
  EXPECT_TRUE(fs::exists(a_dir + "/" + entry_relative_path({EntryKind::Block, {3, 3}})));
  DirectoryReport after = inspect_cache_directory(dir, DirectoryAction::Verify, now);
  EXPECT_EQ(after.models[ka].blocks, 2);
  EXPECT_EQ(after.models[ka].rows + after.models[ka].damaged + after.models[ka].expired, 0);
  EXPECT_NE(test::error_of([&] { inspect_cache_directory(dir + "/missing", DirectoryAction::Stats, now); })
                .find("does not exist"),
            std::string::npos);
}

TEST(CacheDuration, SpellingsAndErrors) {
  EXPECT_EQ(parse_duration_seconds("90"), 90);
  EXPECT_EQ(parse_duration_seconds("90s"), 90);
  EXPECT_EQ(parse_duration_seconds("45m"), 2700);
  EXPECT_EQ(parse_duration_seconds("24h"), 86400);
  EXPECT_EQ(parse_duration_seconds("7d"), 604800);
  for (const char* bad : {"", "d", "7w", "1.5h", "-3d", "3 d", "7dd"})
    EXPECT_NE(test::error_of([&] { parse_duration_seconds(bad); }).find("expected a duration"), std::string::npos)
        << bad;
  EXPECT_NE(test::error_of([&] { parse_duration_seconds("0s"); }).find("at least 1s"), std::string::npos);
  EXPECT_EQ(format_duration(604800), "7d");
  EXPECT_EQ(format_duration(5400), "90m");
  EXPECT_EQ(format_duration(61), "61s");
}

}  // namespace
}  // namespace strata::cache
