// State snapshots (state_snapshot.h): a state restored into another Model instance of the same checkpoint — fresh, or
// a reused slot of a bounded pool — continues with the same logits bit for bit; every kind of bad input is refused
// with an error that says what and where, and leaves the target state reset.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/deepseek_v4/fingerprint.h"
#include "model/state_pool.h"
#include "model/deepseek_v4/state_snapshot.h"
#include "tiny_model.h"

namespace strata {
namespace {

using model::v4::Model;
using model::SequenceState;
using model::v4::SnapshotReader;
using model::v4::SnapshotWriter;
using model::StatePool;
using model::StatePoolLimits;

std::vector<int32_t> tokens(int64_t n, int64_t salt) { return test::token_ids(n, salt); }

// The tiny preset's checkpoint written once per seed; each call loads a new Model instance from it.
std::unique_ptr<Model> load_tiny(uint64_t seed) {
  static std::map<uint64_t, std::string> dirs;
  if (!dirs.count(seed)) {
    dirs[seed] = test::temp_dir("state_snapshot_" + std::to_string(seed));
    model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dirs[seed], seed, DType::F32);
  }
  return std::make_unique<Model>(model::v4::load_model(dirs[seed]));
}

StatePoolLimits pool_limits(const Model& m, int64_t sequences, int64_t blocks) {
  StatePoolLimits limits;
  limits.max_sequences = sequences;
  limits.blocks = blocks >= 0 ? blocks : sequences * m.blocks_for_tokens(400);
  return limits;
}

void expect_bit_identical(const Mat& a, const Mat& b, const std::string& what) {
  ASSERT_EQ(a.v.size(), b.v.size()) << what;
  EXPECT_TRUE(test::same_finite_bits(a.v.data(), b.v.data(), a.v.size())) << what;
}

using test::error_of;

// Tiny preset: window 128, CSA every 4 tokens (layers 1, 3, with an indexer), HCA every 128 (layer 2). 5 tokens:
// the window part full; 256: 128-aligned (no token pending anywhere, two HCA entries); 300: unaligned (CSA and HCA
// windows open).
class StateSnapshotAt : public ::testing::TestWithParam<int64_t> {};

TEST_P(StateSnapshotAt, RestoresIntoAnotherModelAndPoolSlotBitIdentically) {
  const int64_t len = GetParam();
  const auto a = load_tiny(21), b = load_tiny(21);  // two instances of one checkpoint
  ASSERT_EQ(a->fingerprint(), b->fingerprint());
  SequenceState original = a->new_sequence();
  a->forward(tokens(len, 1), original, false);
  const std::string bytes = a->snapshot(original);

  SequenceState fresh = b->new_sequence();
  b->restore(bytes, fresh);
  // A slot that held another, longer sequence before: stale rows must not matter.
  StatePool pool(*b, pool_limits(*b, 1, -1));
  SequenceState* slot = pool.acquire();
  b->forward(tokens(350, 9), *slot, false);
  pool.release(slot);
  slot = pool.acquire();
  b->restore(bytes, *slot);
  EXPECT_EQ(slot->num_tokens, len);
  // The bytes are a function of the prefix: the restored states write the very same snapshot.
  EXPECT_EQ(b->snapshot(fresh), bytes);
  EXPECT_EQ(b->snapshot(*slot), bytes);

  for (int step = 0; step < 12; ++step) {  // crosses CSA windows (and, from 5 tokens on, more of the window)
    const std::vector<int32_t> next = tokens(1, 100 + step);
    ASSERT_TRUE(pool.reserve(*slot, 1));
    const Mat want = a->forward(next, original, false);
    expect_bit_identical(want, b->forward(next, fresh, false), "fresh state, step " + std::to_string(step));
    expect_bit_identical(want, b->forward(next, *slot, false), "pool slot, step " + std::to_string(step));
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, StateSnapshotAt, ::testing::Values(5, 256, 300));

TEST(StateSnapshot, StreamsPieceByPiece) {
  const auto m = load_tiny(21);
  SequenceState original = m->new_sequence();
  m->forward(tokens(300, 2), original, false);
  const SnapshotWriter writer(*m, original);
  std::string stream = writer.header();
  for (int64_t l = 0; l < writer.layers(); ++l) stream += writer.layer(l);
  EXPECT_EQ(stream, m->snapshot(original));
  // 300 tokens of the tiny preset, in bytes. Header: preamble, section frame, body (fingerprint, "cpu fp32", 4
  // numbers, 4 layers × 2 compressors × 3 shape numbers, the MTP layer count: 0). Every layer: frame, index, row count, a full window of
  // 128 × 64 floats. CSA layers (1, 3), rate 4: none pending, so the raw rows of the previous window (4 rows of
  // kv and gate, 2·64 wide: the next entry's overlap) and 75 entries of 64 floats; the same for the indexer's
  // 32-wide compressor. The HCA layer (2), rate 128: 44 raw rows of the open window, 2 entries.
  const size_t header = 16 + 16 + (16 + 16 + 4 * 8 + 4 * 2 * 3 * 8 + 8), window = 16 + 16 + 128 * 64 * 4;
  const size_t csa = window + (16 + 2 * 4 * 128 * 4 + 75 * 64 * 4) + (16 + 2 * 4 * 64 * 4 + 75 * 32 * 4);
  const size_t hca = window + 16 + 2 * 44 * 64 * 4 + 2 * 64 * 4;
  EXPECT_EQ(stream.size(), header + window + 2 * csa + hca);
  EXPECT_EQ(stream.size(), 224504u);

  // The bytes arrive in 1000-byte chunks; the reader takes each piece once it is whole.
  SequenceState into = m->new_sequence();
  SnapshotReader reader(*m, into);
  std::string buffered;
  for (size_t at = 0; at < stream.size(); at += 1000) {
    buffered += stream.substr(at, 1000);
    for (auto size = reader.next_piece_bytes(buffered); size && *size <= buffered.size();
         size = reader.next_piece_bytes(buffered)) {
      reader.take(std::string_view(buffered).substr(0, *size));
      buffered.erase(0, *size);
      if (reader.complete()) break;
    }
  }
  EXPECT_TRUE(reader.complete());
  EXPECT_TRUE(buffered.empty());
  EXPECT_EQ(into.num_tokens, 300);
  EXPECT_EQ(m->snapshot(into), stream);
}

TEST(StateSnapshot, ABrokenOffStreamLeavesTheStateReset) {
  const auto m = load_tiny(21);
  SequenceState original = m->new_sequence();
  m->forward(tokens(300, 3), original, false);
  const SnapshotWriter writer(*m, original);
  StatePool pool(*m, pool_limits(*m, 1, -1));
  SequenceState* slot = pool.acquire();
  {
    SnapshotReader reader(*m, *slot);
    reader.take(writer.header());
    reader.take(writer.layer(0));
    reader.take(writer.layer(1));
    EXPECT_GT(pool.used_blocks(), 0);
  }
  EXPECT_EQ(slot->num_tokens, 0);
  EXPECT_EQ(pool.used_blocks(), 0);
}

// Model::begin_restore / snapshot_pieces: the bytes fed in any split — here one byte at a time, then sizes that
// straddle sections — into a slot whose blocks were reserved before the bytes came, which keeps them.
TEST(StateSnapshot, ARestoreFedAnySplitUsesTheBlocksReservedForIt) {
  const auto m = load_tiny(21);
  SequenceState original = m->new_sequence();
  m->forward(tokens(300, 5), original, false);
  std::vector<std::string> pieces;
  m->snapshot_pieces(original, [&](std::string piece) { pieces.push_back(std::move(piece)); }, nullptr);
  ASSERT_EQ(pieces.size(), 1 + static_cast<size_t>(m->config().num_hidden_layers));
  std::string bytes;
  for (const std::string& p : pieces) bytes += p;
  ASSERT_EQ(bytes, m->snapshot(original));

  StatePool pool(*m, pool_limits(*m, 1, -1));
  for (const size_t split : {size_t{1}, size_t{4093}, bytes.size()}) {
    SequenceState* slot = pool.acquire();
    ASSERT_TRUE(pool.reserve(*slot, 301));  // the prompt's blocks, taken before any byte arrives
    const std::vector<int32_t> reserved = slot->blocks;
    {
      const auto restore = m->begin_restore(*slot, nullptr);
      EXPECT_EQ(restore->num_tokens(), -1);
      for (size_t at = 0; at < bytes.size(); at += split) {
        EXPECT_FALSE(restore->complete());
        restore->feed(std::string_view(bytes).substr(at, split));
        if (at + split >= pieces[0].size()) {
          EXPECT_EQ(restore->num_tokens(), 300);
        }
      }
      EXPECT_TRUE(restore->complete());
      EXPECT_EQ(restore->layers_restored(), m->config().num_hidden_layers);
      EXPECT_THROW(restore->feed("x"), Error) << "bytes past the end";
    }
    EXPECT_EQ(slot->blocks, reserved) << "split " << split;
    EXPECT_EQ(slot->num_tokens, 300);
    EXPECT_EQ(m->snapshot(*slot), bytes) << "split " << split;
    pool.release(slot);
    EXPECT_EQ(pool.used_blocks(), 0);
  }

  // A damaged byte in layer 1: the restore fails there, refuses more bytes, and the slot is reset.
  SequenceState* slot = pool.acquire();
  std::string damaged = bytes;
  damaged[pieces[0].size() + pieces[1].size() + pieces[2].size() / 2] ^= 1;
  const auto restore = m->begin_restore(*slot, nullptr);
  EXPECT_NE(error_of([&] { restore->feed(damaged); }).find("checksum mismatch in layer 1"), std::string::npos);
  EXPECT_NE(error_of([&] { restore->feed("more"); }).find("after the restore failed"), std::string::npos);
  EXPECT_EQ(slot->num_tokens, 0);
  EXPECT_EQ(pool.used_blocks(), 0);
}

// A same-host transfer's snapshot: the floats in a shared region (POSIX shared memory on the CPU), the pieces only
// a skeleton of offsets; opened by its handle, it restores the same state. A skeleton without its region, or with
// a region too small for its offsets, is refused by name.
TEST(StateSnapshot, ASkeletonAndItsSharedRegionRestoreTheSameState) {
  const auto m = load_tiny(21);
  SequenceState original = m->new_sequence();
  m->forward(tokens(300, 6), original, false);
  const std::string inline_bytes = m->snapshot(original);
  const int64_t floats = m->snapshot_floats(original);
  EXPECT_GT(floats, 0);
  const auto region = m->make_shared_region(floats);
  std::string skeleton;
  m->snapshot_pieces(original, [&](std::string piece) { skeleton += piece; }, region.get());
  EXPECT_LT(skeleton.size() * 20, inline_bytes.size());

  const auto opened = m->open_shared_region(region->handle());
  EXPECT_EQ(opened->floats(), floats);
  SequenceState into = m->new_sequence();
  m->begin_restore(into, opened.get())->feed(skeleton);
  EXPECT_EQ(into.num_tokens, 300);
  EXPECT_EQ(m->snapshot(into), inline_bytes);

  SequenceState other = m->new_sequence();
  EXPECT_NE(error_of([&] { m->begin_restore(other, nullptr)->feed(skeleton); }).find("shared region"), std::string::npos);
  const auto small = m->make_shared_region(floats / 2);
  EXPECT_NE(error_of([&] { m->begin_restore(other, small.get())->feed(skeleton); }).find("outside the shared region"),
            std::string::npos);
  EXPECT_EQ(other.num_tokens, 0);
  // Inline bytes restore as ever, a region given or not.
  m->begin_restore(other, opened.get())->feed(inline_bytes);
  EXPECT_EQ(other.num_tokens, 300);

  for (const std::string bad : {"cuda-ipc:0:4:00", "shm:/no-such-strata-region:16", "shm:/x:many", "shm:/a/b:4"})
    EXPECT_NE(error_of([&] { m->open_shared_region(bad); }).find("shared memory"), std::string::npos) << bad;
}

class StateSnapshotErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = load_tiny(21);
    SequenceState s = m_->new_sequence();
    m_->forward(tokens(300, 4), s, false);
    const SnapshotWriter writer(*m_, s);
    header_ = writer.header();
    for (int64_t l = 0; l < writer.layers(); ++l) layer_sizes_.push_back(writer.layer(l).size());
    bytes_ = writer.all();
    pool_ = std::make_unique<StatePool>(*m_, pool_limits(*m_, 1, -1));
    slot_ = pool_->acquire();
  }
  size_t layer_start(size_t l) const {
    size_t at = header_.size();
    for (size_t i = 0; i < l; ++i) at += layer_sizes_[i];
    return at;
  }
  // Restores `bytes` into the pool's slot, expecting an error; checks that the slot was left reset.
  std::string restore_error(const std::string& bytes) {
    const std::string e = error_of([&] { m_->restore(bytes, *slot_); });
    EXPECT_EQ(slot_->num_tokens, 0) << e;
    EXPECT_EQ(pool_->used_blocks(), 0) << e;
    return e;
  }

  std::unique_ptr<Model> m_;
  std::string header_, bytes_;
  std::vector<size_t> layer_sizes_;
  std::unique_ptr<StatePool> pool_;
  SequenceState* slot_ = nullptr;
};

TEST_F(StateSnapshotErrors, ACorruptedByteNamesTheChecksumAndTheLayer) {
  std::string bad = bytes_;
  bad[layer_start(2) + 100] ^= 0x01;
  EXPECT_NE(restore_error(bad).find("checksum mismatch in layer 2's section"), std::string::npos) << restore_error(bad);
  bad = bytes_;
  bad[30] ^= 0x40;  // inside the header's body
  EXPECT_NE(restore_error(bad).find("checksum mismatch in the header"), std::string::npos) << restore_error(bad);
}

TEST_F(StateSnapshotErrors, WrongMagicAndUnknownVersion) {
  EXPECT_NE(restore_error("{\"not\": \"a snapshot\", \"really\": true}").find("not a Strata state snapshot"),
            std::string::npos);
  std::string bad = bytes_;
  bad[8] = 7;  // the version's low byte
  EXPECT_NE(restore_error(bad).find("unknown format version 7"), std::string::npos) << restore_error(bad);
}

TEST_F(StateSnapshotErrors, TruncatedBytesNameTheSection) {
  for (const auto& [cut, where] : std::vector<std::pair<size_t, std::string>>{
           {0, "the header"}, {4, "the header"}, {20, "the header"}, {header_.size() - 1, "the header"},
           {header_.size(), "layer 0's section"}, {layer_start(1) + 3, "layer 1's section"},
           {layer_start(3) + 500, "layer 3's section"}, {bytes_.size() - 1, "layer 3's section"}}) {
    const std::string e = restore_error(bytes_.substr(0, cut));
    EXPECT_NE(e.find("truncated in " + where), std::string::npos) << "cut at " << cut << ": " << e;
  }
  EXPECT_NE(restore_error(bytes_ + "xyz").find("3 unexpected bytes after the last layer"), std::string::npos);
}

TEST_F(StateSnapshotErrors, ADifferentModelIsRefusedByFingerprint) {
  const auto other = load_tiny(22);  // same shapes, other weights
  ASSERT_NE(other->fingerprint(), m_->fingerprint());
  SequenceState into = other->new_sequence();
  const std::string e = error_of([&] { other->restore(bytes_, into); });
  EXPECT_NE(e.find("snapshot was made by model fingerprint " + m_->fingerprint().hex() + " (cpu fp32), this model is " +
                   other->fingerprint().hex()),
            std::string::npos)
      << e;
  EXPECT_EQ(into.num_tokens, 0);
}

TEST_F(StateSnapshotErrors, TooFewBlocksFailsAndLeavesTheStateReset) {
  StatePool small(*m_, pool_limits(*m_, 1, 2));  // 300 tokens need 3 token blocks of 128
  SequenceState* slot = small.acquire();
  const std::string e = error_of([&] { m_->restore(bytes_, *slot); });
  EXPECT_NE(e.find("out of token blocks"), std::string::npos) << e;
  EXPECT_EQ(slot->num_tokens, 0);
  EXPECT_EQ(small.used_blocks(), 0);
}

TEST(ModelFingerprint, CoversConfigWeightsAndBackend) {
  const auto a = load_tiny(21), b = load_tiny(21), other = load_tiny(22);
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint(), other->fingerprint());
  EXPECT_EQ(a->fingerprint().hex().size(), 32u);

  // The config counts where it changes numbers, not where it only names tokens.
  const model::TensorStore store;  // no tensors: the config and the backend alone
  model::ModelConfig cfg = model::v4::preset_config("tiny");
  const std::string cpu = model::v4::backend_label("cpu", "bf16", "");
  const auto base = model::v4::fingerprint_of(cfg, store, cpu);
  model::ModelConfig renamed = cfg;
  renamed.eos_token_ids = {7};
  EXPECT_EQ(model::v4::fingerprint_of(renamed, store, cpu), base);
  model::ModelConfig rescaled = cfg;
  rescaled.routed_scaling_factor = 2.0;
  EXPECT_NE(model::v4::fingerprint_of(rescaled, store, cpu), base);

  // The CPU computes in fp32 whatever it is told; a GPU's precision and device change the numbers.
  EXPECT_EQ(cpu, model::v4::backend_label("cpu", "fp8", ""));
  const auto on = [&](const char* precision, const char* gpu) {
    return model::v4::fingerprint_of(cfg, store, model::v4::backend_label("cuda", precision, gpu));
  };
  EXPECT_NE(on("bf16", "NVIDIA H200"), base);
  EXPECT_NE(on("bf16", "NVIDIA H200"), on("fp8", "NVIDIA H200"));
  EXPECT_NE(on("bf16", "NVIDIA H200"), on("fp32", "NVIDIA H200"));
  EXPECT_NE(on("bf16", "NVIDIA H200"), on("bf16", "NVIDIA B200"));
}

}  // namespace
}  // namespace strata
