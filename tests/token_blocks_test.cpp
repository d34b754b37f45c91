// Token blocks (state_layout.h, block_pool.h, token_blocks.h): the layout's block size and block counts, chained
// content hashes, reference counts, and sequences that share a prefix sharing its blocks and freeing them by count.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/state_pool.h"
#include "model/token_blocks.h"
#include "tiny_model.h"

namespace strata {
namespace {

using model::BlockHash;
using model::BlockPool;
using model::SequenceState;
using model::StatePool;

using test::error_of;
std::vector<int32_t> ids(int64_t n, int64_t salt) { return test::token_ids(n, salt); }

TEST(TokenBlocks, TheTinyLayoutHasOneBlockPer128TokensOfEveryCompressor) {
  const auto m = test::tiny_model("token_blocks_layout", 3);
  const model::StateLayout& l = m->state_layout();
  // Rates 4 (CSA and its indexer) and 128 (HCA): B = 128. Per block, per CSA layer (1, 3) 32 entries of 64 and 32
  // of 32, and the HCA layer's (2) one entry of 64.
  EXPECT_EQ(l.block_tokens, 128);
  EXPECT_EQ(l.block_floats, 2 * (32 * 64 + 32 * 32) + 64);
  EXPECT_EQ(l.window_rows, 128);  // max_rollback 1: the ring is the window
  EXPECT_EQ(l.blocks_for_tokens(0), 0);
  EXPECT_EQ(l.blocks_for_tokens(3), 0);    // no window closed yet
  EXPECT_EQ(l.blocks_for_tokens(4), 1);
  EXPECT_EQ(l.blocks_for_tokens(128), 1);
  EXPECT_EQ(l.blocks_for_tokens(131), 1);  // the window 128…131 is still open
  EXPECT_EQ(l.blocks_for_tokens(132), 2);
}

TEST(TokenBlocks, StateMemoryIsSplitIntoSlotsThenWholeBlocks) {
  const auto m = test::tiny_model("token_blocks_bytes", 4);
  const int64_t fixed = StatePool::fixed_bytes_per_sequence(*m);
  const int64_t block = m->state_layout().block_floats * static_cast<int64_t>(sizeof(float));
  EXPECT_EQ(fixed, m->fixed_state_floats() * 4);
  const model::StatePoolLimits l = StatePool::limits_for_bytes(*m, 2 * fixed + 3 * block + block / 2, 2);
  EXPECT_EQ(l.max_sequences, 2);
  EXPECT_EQ(l.blocks, 3);
  EXPECT_NE(error_of([&] { StatePool::limits_for_bytes(*m, 2 * fixed + block - 1, 2); }).find("plus one token block"),
            std::string::npos);
}

TEST(TokenBlocks, HashesChainOverThePrefixAndTheSalt) {
  const BlockHash salt{1, 2}, other_salt{1, 3};
  std::vector<int32_t> a = ids(300, 1);
  const auto ha = model::block_hashes(salt, a, 128);
  ASSERT_EQ(ha.size(), 2u);  // full blocks only
  EXPECT_NE(ha[0], ha[1]);
  EXPECT_EQ(model::block_hashes(salt, a, 128), ha);
  // A change in block 1 changes block 1's hash and leaves block 0's.
  std::vector<int32_t> b = a;
  b[200] += 1;
  const auto hb = model::block_hashes(salt, b, 128);
  EXPECT_EQ(hb[0], ha[0]);
  EXPECT_NE(hb[1], ha[1]);
  // A change in block 0 changes every later hash: a hash names the whole prefix.
  std::vector<int32_t> c = a;
  c[5] += 1;
  const auto hc = model::block_hashes(salt, c, 128);
  EXPECT_NE(hc[0], ha[0]);
  EXPECT_NE(hc[1], ha[1]);
  // Another model (salt) shares nothing.
  const auto hs = model::block_hashes(other_salt, a, 128);
  EXPECT_NE(hs[0], ha[0]);
  EXPECT_NE(hs[1], ha[1]);
  EXPECT_NE(error_of([&] { model::block_hashes(salt, a, 0); }).find("block size"), std::string::npos);
}

TEST(TokenBlocks, ThePoolCountsReferencesAndKeepsAFreedHashedBlockUntilItIsNeeded) {
  BlockPool pool(8, 2);
  const auto a = pool.allocate(), b = pool.allocate();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(pool.allocate());  // bounded
  pool.retain(*a);
  EXPECT_EQ(pool.references(*a), 2);
  pool.set_hash(*a, {7, 7});
  EXPECT_EQ(pool.find({7, 7}), a);
  pool.release(*a);
  EXPECT_EQ(pool.find({7, 7}), a) << "one reference left";
  pool.release(*a);
  // No references: free to allocate, but kept with its content and hash until a block is needed.
  EXPECT_EQ(pool.references(*a), 0);
  EXPECT_EQ(pool.find({7, 7}), a);
  EXPECT_EQ(pool.used_blocks(), 1);
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_EQ(pool.kept_blocks(), 1);
  EXPECT_NE(error_of([&] { pool.release(*a); }).find("not in use"), std::string::npos);
  // A sequence that finds it takes it back; released again, it is kept again.
  pool.retain(*a);
  EXPECT_EQ(pool.references(*a), 1);
  EXPECT_EQ(pool.kept_blocks(), 0);
  EXPECT_EQ(pool.used_blocks(), 2);
  pool.release(*a);
  // A block is needed: the kept one gives up its content.
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_FALSE(pool.find({7, 7}));
  EXPECT_EQ(pool.evicted_blocks(), 1);
  pool.release(*a);
  EXPECT_EQ(pool.kept_blocks(), 0) << "no hash: freed";
  EXPECT_NE(error_of([&] { pool.retain(5); }).find("not in use"), std::string::npos);
  pool.set_hash(*b, {1, 1});
  EXPECT_NE(error_of([&] { pool.set_hash(*b, {1, 2}); }).find("already has another content hash"), std::string::npos);
}

TEST(TokenBlocks, SharedPrefixSequencesShareBlocksAndFreeThemByReferenceCount) {
  const auto m = test::tiny_model("token_blocks_share", 5);
  StatePool pool(*m, {4, 12});
  SequenceState& source = *pool.acquire();
  m->forward(ids(300, 1), source, false);  // blocks 0 and 1 full, block 2 partial
  ASSERT_EQ(source.blocks.size(), 3u);
  EXPECT_EQ(pool.used_blocks(), 3);

  SequenceState& a = *pool.acquire();
  SequenceState& b = *pool.acquire();
  ASSERT_TRUE(m->fork_state(source, a));
  ASSERT_TRUE(m->fork_state(source, b));
  // The full blocks are shared three ways; each fork has its own copy of the partial one.
  EXPECT_EQ(pool.used_blocks(), 3 + 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a.blocks[static_cast<size_t>(i)], source.blocks[static_cast<size_t>(i)]);
    EXPECT_EQ(pool.blocks().references(source.blocks[static_cast<size_t>(i)]), 3);
  }
  EXPECT_NE(a.blocks[2], source.blocks[2]);
  EXPECT_NE(b.blocks[2], a.blocks[2]);

  // Each continues differently, exactly as an unshared copy would (copy_state: blocks of its own).
  SequenceState reference = m->new_sequence();
  m->forward(ids(300, 1), reference, false);
  for (SequenceState* s : {&a, &b}) {
    SequenceState copy = m->new_sequence();
    ASSERT_TRUE(m->copy_state(reference, copy));
    const int64_t salt = s == &a ? 10 : 20;
    for (int step = 0; step < 140; ++step) {  // past the shared blocks' span into blocks 3 and 4
      const std::vector<int32_t> t = ids(1, salt + step);
      const Mat x = m->forward(t, *s, false), y = m->forward(t, copy, false);
      ASSERT_EQ(x.v.size(), y.v.size());
      ASSERT_TRUE(test::same_finite_bits(x.v.data(), y.v.data(), x.v.size())) << "step " << step;
    }
  }
  EXPECT_EQ(pool.blocks().references(source.blocks[0]), 3) << "the shared blocks never change hands";

  // Released one by one, the shared blocks go back with the last reference.
  const int32_t shared = source.blocks[0];
  pool.release(&source);
  EXPECT_EQ(pool.blocks().references(shared), 2);
  pool.release(&a);
  EXPECT_EQ(pool.blocks().references(shared), 1);
  pool.release(&b);
  EXPECT_EQ(pool.blocks().references(shared), 0);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(TokenBlocks, FullBlocksArePublishedUnderTheirHashAndFoundByASequenceWithTheSamePrefix) {
  const auto m = test::tiny_model("token_blocks_hash", 6);
  StatePool pool(*m, {2, 8});
  const BlockHash salt{m->fingerprint().low, m->fingerprint().high};
  SequenceState& s = *pool.acquire();
  const std::vector<int32_t> tokens = ids(300, 2);
  m->forward(std::vector<int32_t>(tokens.begin(), tokens.begin() + 200), s, false);
  s.hash_full_blocks(salt, tokens.data(), 200);
  ASSERT_EQ(s.block_hashes.size(), 1u);  // block 1 is not full yet
  m->forward(std::vector<int32_t>(tokens.begin() + 200, tokens.end()), s, false);
  s.hash_full_blocks(salt, tokens.data(), static_cast<int64_t>(tokens.size()));
  const auto want = model::block_hashes(salt, tokens, 128);
  ASSERT_EQ(s.block_hashes, want);
  // Another request with the same first 256 tokens finds both blocks by hash; one differing in block 1 finds block 0.
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(pool.blocks().find(want[i]), s.blocks[i]);
  std::vector<int32_t> other = tokens;
  other[150] += 1;
  const auto theirs = model::block_hashes(salt, other, 128);
  EXPECT_EQ(pool.blocks().find(theirs[0]), s.blocks[0]);
  EXPECT_FALSE(pool.blocks().find(theirs[1]));
  EXPECT_NE(error_of([&] { s.hash_full_blocks(salt, tokens.data(), 10); }).find("10 tokens given"), std::string::npos);
  // Released, the full blocks stay findable (kept) until allocations need them, the least recently released first.
  const int32_t block0 = s.blocks[0];
  pool.release(&s);
  EXPECT_EQ(pool.blocks().kept_blocks(), 2);
  EXPECT_EQ(pool.blocks().find(want[0]), block0);
  std::vector<int32_t> taken;
  for (int i = 0; i < 7; ++i) taken.push_back(*pool.blocks().allocate());  // 6 never-hashed blocks, then 1 kept
  EXPECT_EQ(pool.blocks().kept_blocks(), 1);
  EXPECT_FALSE(pool.blocks().find(want[0])) << "block 0 was released first";
  EXPECT_TRUE(pool.blocks().find(want[1]));
  taken.push_back(*pool.blocks().allocate());
  EXPECT_FALSE(pool.blocks().find(want[1]));
  EXPECT_FALSE(pool.blocks().allocate());
  EXPECT_EQ(pool.blocks().evicted_blocks(), 2);
  for (int32_t b : taken) pool.blocks().release(b);
}

}  // namespace
}  // namespace strata
