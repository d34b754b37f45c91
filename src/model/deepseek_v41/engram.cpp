#include "model/deepseek_v41/engram.h"

#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "model/deepseek_v41/numpy_random.h"

namespace strata::model::v41 {

namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d * d <= n; d += 2)
    if (n % d == 0) return false;
  return true;
}

}  // namespace

std::vector<EngramLayerLayout> make_engram_layout(const EngramSettings& s) {
  if (s.max_ngram < 2) fail("engram: engram_max_ngram_size ", s.max_ngram, " (expected ≥ 2: n-grams of 2 or more tokens)");
  if (s.heads < 1) fail("engram: engram_n_heads ", s.heads, " (expected ≥ 1)");
  if (s.head_dim < 1) fail("engram: engram_head_dim ", s.head_dim, " (expected ≥ 1)");
  if (s.vocab_size < 2) fail("engram: engram_vocab_size ", s.vocab_size, " (expected ≥ 2)");
  if (s.compressed_vocab < 1) fail("engram: engram_compressed_vocab_size ", s.compressed_vocab, " (expected ≥ 1)");
  const int64_t bound = std::max<int64_t>(1, std::numeric_limits<int64_t>::max() / s.compressed_vocab / 2);
  std::set<int64_t> seen;
  std::vector<EngramLayerLayout> out;
  for (int64_t layer : s.layer_ids) {
    if (layer < 0) fail("engram: engram_layer_ids holds ", layer, " (expected layer indices ≥ 0)");
    EngramLayerLayout l;
    l.layer = layer;
    l.token_limit = s.compressed_vocab;
    for (int64_t g = 0; g + 1 < s.max_ngram; ++g) {
      std::vector<int64_t> row;
      int64_t current = s.vocab_size - 1;
      for (int64_t h = 0; h < s.heads; ++h) {
        do ++current;
        while (!is_prime(current) || seen.count(current));
        seen.insert(current);
        row.push_back(current);
      }
      l.primes.push_back(std::move(row));
    }
    for (const auto& row : l.primes)
      for (int64_t p : row) {
        l.offsets.push_back(l.rows);
        l.rows += p;
      }
    NumpyDefaultRng rng(static_cast<uint64_t>(10007 * layer));
    for (int64_t v : rng.integers(0, bound, s.max_ngram)) l.multipliers.push_back(2 * v + 1);
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<int64_t> engram_row_ids(const EngramLayerLayout& layer, std::span<const int64_t> history, int64_t pos,
                                    int64_t pad_code) {
  if (pos < 0 || pos >= static_cast<int64_t>(history.size()))
    fail("engram: position ", pos, " outside a history of ", history.size(), " tokens");
  if (pad_code < 0 || pad_code >= layer.token_limit)
    fail("engram: pad code ", pad_code, " is outside the normalised vocabulary [0, ", layer.token_limit, ")");
  const auto shifts = static_cast<int64_t>(layer.multipliers.size());
  // Token s back (s = 0 is the position's own); once a look-back reaches the start or a dead token, it and every
  // longer one use the pad code.
  std::vector<int64_t> token(static_cast<size_t>(shifts));
  bool blocked = false;
  for (int64_t s = 0; s < shifts; ++s) {
    const int64_t src = history[static_cast<size_t>(std::max<int64_t>(pos - s, 0))];
    if (src != kDeadToken && (src < 0 || src >= layer.token_limit))
      fail("engram: token id ", src, " at position ", std::max<int64_t>(pos - s, 0), " is outside the normalised vocabulary [0, ",
           layer.token_limit, ")");
    blocked = blocked || pos < s || src == kDeadToken;
    token[static_cast<size_t>(s)] = blocked ? pad_code : src;
  }
  std::vector<int64_t> ids;
  int64_t hash = token[0] * layer.multipliers[0];
  for (int64_t g = 1; g < shifts; ++g) {
    hash ^= token[static_cast<size_t>(g)] * layer.multipliers[static_cast<size_t>(g)];
    const std::vector<int64_t>& primes = layer.primes[static_cast<size_t>(g - 1)];
    for (size_t h = 0; h < primes.size(); ++h)
      ids.push_back(hash % primes[h] + layer.offsets[static_cast<size_t>(g - 1) * primes.size() + h]);
  }
  return ids;
}

void engram_inject(Mat& streams, const Mat& rows_of, const Mat& wkv, const Mat& qk, int64_t hc, float eps) {
  const int64_t n = streams.rows, d = hc > 0 ? streams.cols / hc : 0;
  if (hc < 1 || streams.cols != hc * d) fail("engram: streams of ", streams.cols, " columns for ", hc, " streams");
  if (rows_of.rows != n) fail("engram: ", rows_of.rows, " rows of table entries for ", n, " positions");
  if (wkv.rows != (hc + 1) * d || wkv.cols != rows_of.cols)
    fail("engram: wkv is ", wkv.rows, " × ", wkv.cols, " (expected ", (hc + 1) * d, " × ", rows_of.cols, ")");
  if (qk.rows != hc || qk.cols != d) fail("engram: q_weight ⊙ k_weight is ", qk.rows, " × ", qk.cols, " (expected ", hc, " × ", d, ")");
  std::vector<float> kv(static_cast<size_t>((hc + 1) * d));
  for (int64_t r = 0; r < n; ++r) {
    const float* e = rows_of.row(r);
    for (int64_t o = 0; o < (hc + 1) * d; ++o) {
      const float* w = wkv.row(o);
      float acc = 0;
      for (int64_t c = 0; c < rows_of.cols; ++c) acc += e[c] * w[c];
      kv[static_cast<size_t>(o)] = acc;
    }
    const float* value = kv.data() + hc * d;
    float* h = streams.row(r);
    for (int64_t k = 0; k < hc; ++k) {
      float* hk = h + k * d;
      const float* key = kv.data() + k * d;
      const float* w = qk.row(k);
      float hh = 0, kk = 0, dot = 0;
      for (int64_t c = 0; c < d; ++c) {
        hh += hk[c] * hk[c];
        kk += key[c] * key[c];
        dot += hk[c] * w[c] * key[c];
      }
      const float rstd = 1.0f / std::sqrt(hh / static_cast<float>(d) + eps) / std::sqrt(kk / static_cast<float>(d) + eps);
      const float x = dot * rstd / std::sqrt(static_cast<float>(d));
      const float gate = 1.0f / (1.0f + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(x), 1e-6f)), x)));
      for (int64_t c = 0; c < d; ++c) hk[c] += gate * value[c];
    }
  }
}

}  // namespace strata::model::v41
