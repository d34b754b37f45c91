// State snapshots with MTP layers (state_snapshot.h, format version 3; docs/mtp.md): each MTP layer's position count
// and the window rows its next step reads travel with the main layers' sections — inline, piece by piece, and as a
// same-host skeleton — so a restored state drafts the very logits the original drafts; the bytes are a function of
// what was consumed; version 2 (no MTP sections) still restores, with its MTP layers empty.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "model/deepseek_v4/state_snapshot.h"
#include "model/state_pool.h"
#include "test_util.h"

namespace strata::test {
namespace {

using model::DraftChunk;
using model::DraftOutput;
using model::LogitsStage;
using model::SequenceChunk;
using model::SequenceState;
using model::StatePool;
using model::StatePoolLimits;
using model::v4::Model;

// The tiny preset with one MTP layer, written once; each call loads a new Model instance of it.
std::unique_ptr<Model> load_tiny_mtp() {
  static const std::string dir = [] {
    const std::string d = temp_dir("mtp_snapshot");
    model::ModelConfig c = model::v4::preset_config("tiny");
    c.num_nextn_predict_layers = 1;
    model::v4::write_random_checkpoint(c, d, 31, DType::F32);
    return d;
  }();
  return std::make_unique<Model>(model::v4::load_model(dir));
}

LogitsStage raw_rows(int64_t n) {
  LogitsStage stage;
  for (int64_t r = 0; r < n; ++r) stage.rows.push_back({r, true, {}, std::nullopt, nullptr});
  return stage;
}

// `tokens` through the main model, keeping every row's last-layer streams; then the MTP layer over positions
// 0 … n-2 (stream of p, token p + 1) in chunks of `chunk`. Returns the streams.
Mat run_prefix(const Model& m, SequenceState& st, const std::vector<int32_t>& tokens, int64_t chunk) {
  const auto n = static_cast<int64_t>(tokens.size());
  LogitsStage stage = raw_rows(1);
  for (int64_t r = 0; r < n; ++r) stage.stream_rows.push_back(r);
  std::vector<SequenceChunk> chunks{{tokens, &st, false}};
  const Mat streams = m.run_step(chunks, stage).streams;
  for (int64_t p = 0; p < n - 1; p += chunk) {
    const int64_t count = std::min(chunk, n - 1 - p);
    std::vector<DraftChunk> d(1);
    d[0].streams = Mat(count, streams.cols);
    std::copy(streams.row(p), streams.row(p) + count * streams.cols, d[0].streams.v.begin());
    d[0].tokens.assign(tokens.begin() + p + 1, tokens.begin() + p + 1 + count);
    d[0].state = &st;
    m.run_draft(d, raw_rows(1), 0);
  }
  return streams;
}

// One draft position from row `r` of `streams` with `token`: its logits row and output streams.
DraftOutput draft_one(const Model& m, SequenceState& st, const Mat& streams, int64_t r, int32_t token) {
  std::vector<DraftChunk> d(1);
  d[0].streams = Mat(1, streams.cols);
  std::copy(streams.row(r), streams.row(r) + streams.cols, d[0].streams.v.begin());
  d[0].tokens = {token};
  d[0].state = &st;
  return m.run_draft(d, raw_rows(1), 0);
}

// A section's bytes: length, body, checksum (state_snapshot.h).
size_t mtp_section_bytes(int64_t rows, int64_t head_dim) {
  return 8 + (3 * 8 + static_cast<size_t>(rows * head_dim) * 4) + 8;
}

class MtpSnapshotAt : public ::testing::TestWithParam<int64_t> {};

// 5 tokens: 4 MTP positions, the ring part full; 300: 299, the ring of 128 rows wrapped.
TEST_P(MtpSnapshotAt, RestoredStatesDraftTheSameLogitsBitForBit) {
  const int64_t len = GetParam();
  const auto a = load_tiny_mtp(), b = load_tiny_mtp();
  const std::vector<int32_t> prompt = token_ids(len, 1);
  SequenceState original = a->new_sequence();
  const Mat streams = run_prefix(*a, original, prompt, 64);
  ASSERT_EQ(original.mtp_tokens[0], len - 1);
  const std::string bytes = a->snapshot(original);

  // The MTP section is there, with exactly the window rows its next step reads.
  SequenceState main_only = a->new_sequence();
  a->forward(prompt, main_only, false);
  const int64_t rows = std::min<int64_t>(len - 1, a->config().sliding_window);
  EXPECT_EQ(bytes.size() - a->snapshot(main_only).size(),
            mtp_section_bytes(rows, a->config().head_dim) - mtp_section_bytes(0, a->config().head_dim));

  SequenceState fresh = b->new_sequence();
  b->restore(bytes, fresh);
  EXPECT_EQ(fresh.num_tokens, len);
  EXPECT_EQ(fresh.mtp_tokens[0], len - 1);
  // A slot that drafted a longer, other sequence before: its stale MTP rows must not matter.
  StatePoolLimits limits;
  limits.max_sequences = 1;
  limits.blocks = b->blocks_for_tokens(400);
  StatePool pool(*b, limits);
  SequenceState* slot = pool.acquire();
  run_prefix(*b, *slot, token_ids(350, 9), 100);
  pool.release(slot);
  slot = pool.acquire();
  b->restore(bytes, *slot);
  EXPECT_EQ(slot->mtp_tokens[0], len - 1);
  // Byte determinism: the restored states write the very same snapshot.
  EXPECT_EQ(b->snapshot(fresh), bytes);
  EXPECT_EQ(b->snapshot(*slot), bytes);

  // Drafting on: the next position (the last main position's streams with the next token), then main steps and
  // drafts alternating, each drafting from a fixed row of the prefix's streams.
  for (int step = 0; step < 6; ++step) {
    const int32_t next = token_ids(1, 100 + step)[0];
    const int64_t row = step == 0 ? len - 1 : (step * 37) % len;
    const DraftOutput want = draft_one(*a, original, streams, row, next);
    for (SequenceState* s : {&fresh, slot}) {
      const DraftOutput got = draft_one(*b, *s, streams, row, next);
      EXPECT_TRUE(same_finite_bits(got.logits.raw.v.data(), want.logits.raw.v.data(), want.logits.raw.v.size()))
          << "step " << step;
      EXPECT_TRUE(same_finite_bits(got.streams.v.data(), want.streams.v.data(), want.streams.v.size())) << "step " << step;
    }
    ASSERT_TRUE(pool.reserve(*slot, 1));
    const Mat main_want = a->forward({next}, original, false);
    for (SequenceState* s : {&fresh, slot}) {
      const Mat got = b->forward({next}, *s, false);
      EXPECT_TRUE(same_finite_bits(got.v.data(), main_want.v.data(), main_want.v.size())) << "main, step " << step;
    }
  }
  EXPECT_EQ(fresh.mtp_tokens[0], original.mtp_tokens[0]);
}

INSTANTIATE_TEST_SUITE_P(Lengths, MtpSnapshotAt, ::testing::Values(5, 300));

// The streaming restore (Model::snapshot_pieces / begin_restore) and the same-host skeleton carry the MTP sections.
TEST(MtpSnapshot, PiecesAndSkeletonCarryTheMtpRing) {
  const auto m = load_tiny_mtp();
  SequenceState original = m->new_sequence();
  const Mat streams = run_prefix(*m, original, token_ids(300, 2), 128);
  const std::string bytes = m->snapshot(original);
  std::vector<std::string> pieces;
  m->snapshot_pieces(original, [&](std::string piece) { pieces.push_back(std::move(piece)); }, nullptr);
  ASSERT_EQ(static_cast<int64_t>(pieces.size()), 1 + m->config().num_hidden_layers + 1);  // header, layers, MTP layer
  std::string joined;
  for (const std::string& p : pieces) joined += p;
  EXPECT_EQ(joined, bytes);

  SequenceState streamed = m->new_sequence();
  {
    const auto restore = m->begin_restore(streamed, nullptr);
    for (size_t at = 0; at < bytes.size(); at += 777) {
      EXPECT_FALSE(restore->complete());
      restore->feed(std::string_view(bytes).substr(at, 777));
    }
    EXPECT_TRUE(restore->complete());
    EXPECT_EQ(restore->layers_restored(), m->config().num_hidden_layers + 1);
  }
  EXPECT_EQ(streamed.mtp_tokens[0], 299);
  EXPECT_EQ(m->snapshot(streamed), bytes);

  // The skeleton's floats include the MTP ring's rows.
  SequenceState main_only = m->new_sequence();
  m->forward(token_ids(300, 2), main_only, false);
  const int64_t floats = m->snapshot_floats(original);
  EXPECT_EQ(floats - m->snapshot_floats(main_only), m->config().sliding_window * m->config().head_dim);
  const auto region = m->make_shared_region(floats);
  std::string skeleton;
  m->snapshot_pieces(original, [&](std::string piece) { skeleton += piece; }, region.get());
  const auto opened = m->open_shared_region(region->handle());
  SequenceState shared = m->new_sequence();
  m->begin_restore(shared, opened.get())->feed(skeleton);
  EXPECT_EQ(shared.mtp_tokens[0], 299);
  EXPECT_EQ(m->snapshot(shared), bytes);
  const DraftOutput want = draft_one(*m, original, streams, 299, 7);
  for (SequenceState* s : {&streamed, &shared}) {
    const DraftOutput got = draft_one(*m, *s, streams, 299, 7);
    EXPECT_TRUE(same_finite_bits(got.logits.raw.v.data(), want.logits.raw.v.data(), want.logits.raw.v.size()));
  }
}

// `bytes` (version 3) as version 2 wrote them: no MTP count in the header, no MTP sections.
std::string as_version_2(const std::string& bytes, size_t mtp_sections_bytes) {
  std::string v2 = bytes.substr(0, 16);
  v2[8] = 2;
  uint64_t body_bytes = 0;
  std::memcpy(&body_bytes, bytes.data() + 16, 8);
  const std::string body = bytes.substr(24, body_bytes - 8);  // without the trailing i64 mtp_layer_count
  const uint64_t n = body.size(), sum = XXH3_64bits(body.data(), body.size());
  v2.append(reinterpret_cast<const char*>(&n), 8);
  v2 += body;
  v2.append(reinterpret_cast<const char*>(&sum), 8);
  const size_t layers_from = 24 + body_bytes + 8;
  v2 += bytes.substr(layers_from, bytes.size() - layers_from - mtp_sections_bytes);
  return v2;
}

TEST(MtpSnapshot, Version2StillRestoresWithItsMtpLayersEmpty) {
  const auto m = load_tiny_mtp();
  SequenceState original = m->new_sequence();
  run_prefix(*m, original, token_ids(200, 3), 199);
  const std::string bytes = m->snapshot(original);
  const std::string v2 = as_version_2(bytes, mtp_section_bytes(128, m->config().head_dim));
  SequenceState into = m->new_sequence();
  m->restore(v2, into);
  EXPECT_EQ(into.num_tokens, 200);
  EXPECT_EQ(into.mtp_tokens[0], 0);  // as every version-2 restore left it
  // The main layers are whole: the next main step is the original's.
  const Mat want = m->forward({5}, original, false), got = m->forward({5}, into, false);
  EXPECT_TRUE(same_finite_bits(got.v.data(), want.v.data(), want.v.size()));

  std::string future = bytes;
  future[8] = 4;
  SequenceState other = m->new_sequence();
  const std::string e = error_of([&] { m->restore(future, other); });
  EXPECT_NE(e.find("unknown format version 4 (this strata reads versions 2 to 3)"), std::string::npos) << e;
}

TEST(MtpSnapshot, ADamagedOrTruncatedMtpSectionIsNamed) {
  const auto m = load_tiny_mtp();
  SequenceState original = m->new_sequence();
  run_prefix(*m, original, token_ids(40, 4), 39);
  const std::string bytes = m->snapshot(original);
  const size_t mtp_at = bytes.size() - mtp_section_bytes(39, m->config().head_dim);
  SequenceState into = m->new_sequence();
  std::string bad = bytes;
  bad[mtp_at + 40] ^= 0x10;
  std::string e = error_of([&] { m->restore(bad, into); });
  EXPECT_NE(e.find("checksum mismatch in MTP layer 0's section"), std::string::npos) << e;
  EXPECT_EQ(into.num_tokens, 0);
  EXPECT_EQ(into.mtp_tokens[0], 0);
  e = error_of([&] { m->restore(bytes.substr(0, mtp_at + 100), into); });
  EXPECT_NE(e.find("truncated in MTP layer 0's section"), std::string::npos) << e;
  // Cut right after the main layers: the MTP section is missing, and named.
  e = error_of([&] { m->restore(bytes.substr(0, mtp_at), into); });
  EXPECT_NE(e.find("truncated in MTP layer 0's section"), std::string::npos) << e;
}

// Boundary rows (the prefix cache) carry no MTP sections: a restored prefix's MTP layers start empty.
TEST(MtpSnapshot, BoundaryRowsLeaveTheMtpLayersEmpty) {
  const auto m = load_tiny_mtp();
  SequenceState original = m->new_sequence();
  run_prefix(*m, original, token_ids(128, 5), 127);
  const std::string rows = m->boundary_rows(original);
  std::vector<std::vector<float>> host(original.blocks.size(), std::vector<float>(static_cast<size_t>(m->state_layout().block_floats)));
  std::vector<model::Model::PrefixBlock> blocks;
  for (size_t i = 0; i < host.size(); ++i) {
    m->read_block(original, static_cast<int64_t>(i), host[i].data());
    blocks.push_back({-1, host[i].data()});
  }
  SequenceState into = m->new_sequence();
  m->restore_prefix(blocks, rows, into);
  EXPECT_EQ(into.num_tokens, 128);
  EXPECT_EQ(into.mtp_tokens[0], 0);
}

}  // namespace
}  // namespace strata::test
