#pragma once
// Batch invariance checked the way a user would see it: random request mixes and the other paths a request can
// take (a prefix-cache hit, a PD restore, speculative verification), every logits row against the sequence's solo
// run, bit for bit. Used by the device check (tests/gpu/invariance_check.cpp, CUDA with --batch-invariant) and by
// CPU CI (batch_invariance_test.cpp), whose backend is invariant by construction.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/deepseek_v4/model.h"
#include "model/state_pool.h"

namespace strata::test::invariance {

using model::SequenceState;
using model::v4::Model;

constexpr int64_t kDecodeTokens = 4;
constexpr int64_t kMaxDrafts = 3;  // the speculative path's; the model needs max_rollback ≥ this

struct Sequence {
  std::vector<int32_t> tokens;  // prompt, then the decode tokens
  int64_t prompt = 0;
  Mat logits;                   // [tokens, vocab] of the solo run
};

// Bitwise equality of two logits rows; a NaN is never equal (memcmp would call two NaNs of one pattern equal).
inline bool same_bits(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != a[i] || std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  return true;
}

// `count` sequences of 1–max_prompt prompt tokens and kDecodeTokens decode tokens, each run alone on `solo`.
inline std::vector<Sequence> make_sequences(const Model& solo, int count, int64_t max_prompt, std::mt19937_64& rng) {
  const int64_t vocab = solo.config().vocab_size;
  std::vector<Sequence> out;
  for (int i = 0; i < count; ++i) {
    Sequence s;
    s.prompt = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_prompt));
    for (int64_t t = 0; t < s.prompt + kDecodeTokens; ++t) s.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    SequenceState st = solo.new_sequence(nullptr, s.prompt + kDecodeTokens);
    const Mat first = solo.forward({s.tokens.begin(), s.tokens.begin() + s.prompt}, st, true);
    s.logits = Mat(s.prompt + kDecodeTokens, vocab);
    std::memcpy(s.logits.row(0), first.row(0), sizeof(float) * first.v.size());
    for (int64_t t = s.prompt; t < s.prompt + kDecodeTokens; ++t) {
      const Mat row = solo.forward({s.tokens[static_cast<size_t>(t)]}, st, true);
      std::memcpy(s.logits.row(t), row.row(0), sizeof(float) * vocab);
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Blocks for `tokens` more tokens of `state`, or an error naming the pool (`what`).
inline void reserve(model::StatePool& pool, SequenceState& state, int64_t tokens, const char* what = "state pool") {
  if (!pool.reserve(state, tokens)) throw std::runtime_error(std::string("the ") + what + " could not reserve token blocks");
}

inline int64_t longest_sequence(const std::vector<Sequence>& seqs) {
  int64_t n = 1;
  for (const Sequence& s : seqs) n = std::max(n, static_cast<int64_t>(s.tokens.size()));
  return n;
}

struct MixResult {
  int64_t rows = 0, differing = 0, steps = 0, mixed_steps = 0;
};

// `mixes` random mixes of the sequences on `model`; rows compared against each sequence's solo logits.
inline MixResult run_mixes(const Model& model, const std::vector<Sequence>& seqs, int mixes, uint64_t seed) {
  const int64_t longest = longest_sequence(seqs);
  std::mt19937_64 rng(seed);
  const int64_t vocab = model.config().vocab_size;
  MixResult r;
  for (int m = 0; m < mixes; ++m) {
    const int b = 1 + static_cast<int>(rng() % std::min<uint64_t>(8, seqs.size()));  // distinct sequences
    std::vector<size_t> pick;
    while (static_cast<int>(pick.size()) < b) {
      const size_t q = rng() % seqs.size();
      bool taken = false;
      for (const size_t p : pick) taken = taken || p == q;
      if (!taken) pick.push_back(q);
    }
    // A batch's sequences share one block pool (a StatePool's), as the engine's do.
    model::StatePoolLimits limits;
    limits.max_sequences = b;
    limits.blocks = b * model.blocks_for_tokens(longest);
    model::StatePool pool(model, limits);
    std::vector<SequenceState*> states;
    std::vector<int64_t> at(pick.size(), 0), start(pick.size());
    for (size_t i = 0; i < pick.size(); ++i) {
      states.push_back(pool.acquire());
      start[i] = static_cast<int64_t>(rng() % 3);  // joins at step 0, 1 or 2
    }
    for (int64_t step = 0;; ++step) {
      std::vector<model::SequenceChunk> chunks;
      std::vector<size_t> who;
      std::vector<int64_t> from;
      bool prefill = false, decode = false;
      for (size_t i = 0; i < pick.size(); ++i) {
        const Sequence& s = seqs[pick[i]];
        const int64_t total = static_cast<int64_t>(s.tokens.size());
        if (step < start[i] || at[i] >= total) continue;
        int64_t n = 1;
        if (at[i] < s.prompt) {
          const int64_t rest = s.prompt - at[i];
          n = rng() % 4 == 0 ? rest : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(rest));
          prefill = true;
        } else {
          decode = true;
        }
        reserve(pool, *states[i], n);
        chunks.push_back({{s.tokens.begin() + at[i], s.tokens.begin() + at[i] + n}, states[i], true});
        who.push_back(i);
        from.push_back(at[i]);
        at[i] += n;
      }
      if (chunks.empty()) {
        bool done = true;
        for (size_t i = 0; i < pick.size(); ++i) done = done && at[i] >= static_cast<int64_t>(seqs[pick[i]].tokens.size());
        if (done) break;
        continue;
      }
      const std::vector<Mat> out = model.forward_batch(chunks);
      r.steps += 1;
      r.mixed_steps += prefill && decode;
      for (size_t c = 0; c < chunks.size(); ++c) {
        const Sequence& s = seqs[pick[who[c]]];
        for (int64_t row = 0; row < out[c].rows; ++row) {
          r.rows += 1;
          r.differing += !same_bits(out[c].row(row), s.logits.row(from[c] + row), vocab);
        }
      }
    }
  }
  return r;
}

// The paths a request can take besides a cold colocated run, each with the mode on, every logits row it returns
// against the sequence's solo row:
//  - cache: a prefix-cache hit (exact mode): the prompt's whole blocks run in one state, then restored into another
//    (boundary rows, blocks alternately shared in the pool and copied from host memory), the rest run batched
//    with another sequence's cold prefill;
//  - pd: prefill/decode disaggregation: the prefilled state's snapshot restored into a second pool (the decode
//    replica's), the decode tokens run there;
//  - spec: speculative verification: two sequences decode together in chunks of the next token and 1–3 drafts
//    (each the true next token with probability 0.6, else a wrong one); the rows up to the first wrong draft are
//    compared, then the state is rolled back to them (Model::rollback).
struct PathResult {
  int64_t rows = 0, differing = 0, runs = 0;
};

struct Paths {
  PathResult cache, pd, spec;
};

inline int64_t compare_rows(const Mat& got, const Sequence& s, int64_t from, int64_t rows, int64_t vocab) {
  int64_t d = 0;
  for (int64_t r = 0; r < rows; ++r) d += !same_bits(got.row(r), s.logits.row(from + r), vocab);
  return d;
}

inline Paths run_paths(const Model& model, const std::vector<Sequence>& seqs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t vocab = model.config().vocab_size, B = model.state_layout().block_tokens;
  const int64_t per_seq = model.blocks_for_tokens(longest_sequence(seqs));
  model::StatePoolLimits limits;
  limits.max_sequences = 8;
  limits.blocks = 8 * per_seq;
  model::StatePool pool(model, limits), decode_pool(model, limits);
  Paths out;
  auto tokens = [](const Sequence& s, int64_t a, int64_t b) {
    return std::vector<int32_t>(s.tokens.begin() + a, s.tokens.begin() + b);
  };
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    const Sequence& other = seqs[(i + 1) % seqs.size()];
    const int64_t total = static_cast<int64_t>(s.tokens.size());
    // Cache hit.
    if (s.prompt > B) {
      const int64_t P = (s.prompt - 1) / B * B;
      SequenceState* a = pool.acquire();
      reserve(pool, *a, P);
      model.forward(tokens(s, 0, P), *a, false);
      const std::string rows = model.boundary_rows(*a);
      std::vector<std::vector<float>> host(a->blocks.size());
      std::vector<Model::PrefixBlock> blocks;
      for (size_t b = 0; b < a->blocks.size(); ++b) {
        if (b % 2 == 0) {
          blocks.push_back({a->blocks[b], nullptr});
        } else {
          host[b].resize(static_cast<size_t>(model.state_layout().block_floats));
          model.read_block(*a, static_cast<int64_t>(b), host[b].data());
          blocks.push_back({-1, host[b].data()});
        }
      }
      SequenceState* c = pool.acquire();
      SequenceState* n = pool.acquire();
      model.restore_prefix(blocks, rows, *c);
      pool.release(a);  // the shared blocks stay referenced by c
      reserve(pool, *c, s.prompt - P);
      reserve(pool, *n, other.prompt);
      std::vector<model::SequenceChunk> chunks = {{tokens(s, P, s.prompt), c, true}, {tokens(other, 0, other.prompt), n, true}};
      const std::vector<Mat> first = model.forward_batch(chunks);
      out.cache.differing += compare_rows(first[0], s, P, s.prompt - P, vocab);
      out.cache.rows += s.prompt - P;
      for (int64_t t = s.prompt; t < total; ++t) {
        reserve(pool, *c, 1);
        const Mat row = model.forward({s.tokens[static_cast<size_t>(t)]}, *c, true);
        out.cache.differing += compare_rows(row, s, t, 1, vocab);
        out.cache.rows += 1;
      }
      out.cache.runs += 1;
      pool.release(c);
      pool.release(n);
    }
    // Prefill/decode disaggregation.
    {
      SequenceState* a = pool.acquire();
      reserve(pool, *a, s.prompt);
      const Mat prefill = model.forward(tokens(s, 0, s.prompt), *a, true);
      out.pd.differing += compare_rows(prefill, s, 0, s.prompt, vocab);
      const std::string snapshot = model.snapshot(*a);
      pool.release(a);
      SequenceState* d = decode_pool.acquire();
      model.restore(snapshot, *d);
      for (int64_t t = s.prompt; t < total; ++t) {
        reserve(decode_pool, *d, 1, "decode pool");
        const Mat row = model.forward({s.tokens[static_cast<size_t>(t)]}, *d, true);
        out.pd.differing += compare_rows(row, s, t, 1, vocab);
      }
      out.pd.rows += total;
      out.pd.runs += 1;
      decode_pool.release(d);
    }
  }
  // Speculative verification, two sequences at a time.
  for (size_t i = 0; i + 1 < seqs.size(); i += 2) {
    const Sequence* pair[2] = {&seqs[i], &seqs[i + 1]};
    SequenceState* st[2] = {pool.acquire(), pool.acquire()};
    int64_t at[2];
    for (int j = 0; j < 2; ++j) {
      // Prefill all but the prompt's last token; verification starts from it.
      at[j] = pair[j]->prompt - 1;
      if (at[j] > 0) {
        reserve(pool, *st[j], at[j]);
        model.forward(tokens(*pair[j], 0, at[j]), *st[j], false);
      }
    }
    for (;;) {
      std::vector<model::SequenceChunk> chunks;
      std::vector<int> who;
      std::vector<int64_t> accepted;
      for (int j = 0; j < 2; ++j) {
        const Sequence& s = *pair[j];
        const int64_t left = static_cast<int64_t>(s.tokens.size()) - at[j];
        if (left <= 0) continue;
        const int64_t drafts = std::min<int64_t>(left - 1, 1 + static_cast<int64_t>(rng() % 3));
        std::vector<int32_t> chunk = {s.tokens[static_cast<size_t>(at[j])]};
        int64_t good = 0;
        bool wrong = false;
        for (int64_t d = 1; d <= drafts; ++d) {
          const int32_t truth = s.tokens[static_cast<size_t>(at[j] + d)];
          const bool right = rng() % 10 < 6;
          chunk.push_back(right ? truth : static_cast<int32_t>((truth + 1 + rng() % (vocab - 1)) % vocab));
          if (!right) wrong = true;
          if (!wrong) good += 1;
        }
        reserve(pool, *st[j], static_cast<int64_t>(chunk.size()));
        chunks.push_back({chunk, st[j], true});
        who.push_back(j);
        accepted.push_back(good);
      }
      if (chunks.empty()) break;
      const std::vector<Mat> got = model.forward_batch(chunks);
      for (size_t c = 0; c < chunks.size(); ++c) {
        const int j = who[c];
        const int64_t keep = accepted[c] + 1;  // the fed token's row and the accepted drafts'
        out.spec.differing += compare_rows(got[c], *pair[j], at[j], keep, vocab);
        out.spec.rows += keep;
        at[j] += keep;
        if (static_cast<int64_t>(chunks[c].tokens.size()) > keep) model.rollback(*st[j], at[j]);
      }
    }
    out.spec.runs += 1;
    pool.release(st[0]);
    pool.release(st[1]);
  }
  return out;
}

}  // namespace strata::test::invariance
