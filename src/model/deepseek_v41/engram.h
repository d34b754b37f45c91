#pragma once
// DeepSeek-V4.1's Engram (docs/deepseek_v4_1_reference.md §2): a hashed n-gram memory added to the hyper-connection
// streams before a layer's block. Each token's last 2, 3 and 4 (normalised) token ids are hashed by a rolling XOR of
// token × multiplier, each n-gram hash taken modulo 8 distinct primes: 24 rows per token of that layer's table,
// which a projection turns into a key per stream and one value; a signed-square-root gate per stream adds the value.
// This file holds the table layout, the hashing and the CPU reference of the injection.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace strata::model::v41 {

// The token-history value of a position that takes no part in n-grams (padding); every n-gram reaching it, or past
// the sequence start, uses the pad code instead (sticky: all longer n-grams too).
constexpr int64_t kDeadToken = -1;

struct EngramSettings {
  std::vector<int64_t> layer_ids;   // engram_layer_ids (the release: 1 and 14)
  int64_t vocab_size = 16000000;    // engram_vocab_size: the primes are the first ones at or above it
  int64_t max_ngram = 4;            // engram_max_ngram_size: n-grams of 2..max_ngram tokens
  int64_t heads = 8;                // engram_n_heads: primes per n-gram size
  int64_t head_dim = 256;           // engram_head_dim: channels of a table row
  int64_t compressed_vocab = 99092; // engram_compressed_vocab_size: the normalised vocabulary's size
};

// One Engram layer's addressing: primes[g][h] for n-gram size g + 2, the offset of each of the (max_ngram − 1)·heads
// ranges in the layer's table (columns ordered 2-gram heads, 3-gram heads, …), its rows, and the hash multipliers
// of shifts 0..max_ngram−1 (odd: 2·draw + 1).
struct EngramLayerLayout {
  int64_t layer = 0;
  std::vector<std::vector<int64_t>> primes;
  std::vector<int64_t> offsets;
  int64_t rows = 0;
  std::vector<int64_t> multipliers;
  int64_t token_limit = 0;  // the normalised vocabulary's size: history ids (and the pad code) lie below it
};

// The layout of every Engram layer: primes drawn in order (layer, n-gram size, head) as the smallest unused prime
// above vocab_size − 1, the search restarting there for each n-gram size (so the primes are consecutive); the
// multipliers from NumPy's default_rng(10007 · layer) below bound = max(1, (INT64_MAX / compressed_vocab) / 2), so
// that token · multiplier stays inside int64. Throws naming a bad setting.
std::vector<EngramLayerLayout> make_engram_layout(const EngramSettings& s);

// The 24 (for the release) table rows of position `pos` given the normalised token ids of positions 0..pos
// (`history`, kDeadToken for a dead one) and the pad code (the normalised id of engram_pad_id). Throws for an id
// outside the normalised vocabulary (its product with a multiplier could leave int64).
std::vector<int64_t> engram_row_ids(const EngramLayerLayout& layer, std::span<const int64_t> history, int64_t pos,
                                    int64_t pad_code);

// The injection on rows of a step (CPU reference, fp32): streams [rows, hc·d]; rows_of [rows, ids·head_dim] the
// table rows of each position in engram_row_ids order (dequantised); wkv [(hc + 1)·d, ids·head_dim] (no bias);
// qk [hc, d] = q_weight ⊙ k_weight. key = the first hc·d outputs, value the last d; per stream k:
// dot = Σ h·qk·key · rsqrt(mean h² + eps) · rsqrt(mean key² + eps) / √d,
// gate = sigmoid(sign(dot) · √max(|dot|, 1e-6)), h += gate · value.
void engram_inject(Mat& streams, const Mat& rows_of, const Mat& wkv, const Mat& qk, int64_t hc, float eps);

}  // namespace strata::model::v41
