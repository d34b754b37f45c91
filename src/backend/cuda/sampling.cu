// Random picks on the device: engine::sample_token's temperature, top-k, min-p and top-p, and its draw, for rows
// whose request needs neither penalties nor logprobs. One block of 1024 threads per row; nothing is sorted but a
// few small slices of the vocabulary.
//
// The host sampler's order is "most likely first, ties by id"; its kept set is a prefix of that order (top-k, then
// min-p), top-p cuts a shorter prefix, and the draw walks the kept set (in id order when nothing was filtered out
// and top-p is off, else in likelihood order) to the first token whose running mass passes u · total. Each of
// those is a search for the place in the order where a running count or mass first reaches a value, so:
//   1. Every finite logit goes into one of 4095 buckets, linear in the logit over [min, max] of the row (monotone: a
//      more likely token never lands in a later bucket; -inf, a masked token, has the 4096th to itself). The buckets follow the logits' spread, so a bucket holds a few
//      hundred tokens of a 129k vocabulary and the shared-memory histograms see few collisions.
//   2. A count histogram gives the bucket where the top-k / min-p cut falls; a mass histogram of the kept buckets
//      gives the bucket where top-p's mass, then the draw, falls. Only that one bucket is then gathered into
//      shared memory, sorted (bitonic, ≤ 4096 entries) and walked. Cost per row: 3 passes over the row (max/min,
//      counts, masses: O(V), one exp per kept token), plus one gathering pass and one small sort per bucket
//      visited (at most 3), plus block scans over the 4096 buckets. No full sort for any parameter set.
//   3. Probabilities are the host's, p = exp((logit − max) · (1/T)) in double (the top token gets exactly 1), and
//      masses are summed exactly, as integers: p rounded to a multiple of 2⁻⁴⁶ (fixed point in 64 bits; the
//      vocabulary must stay under 2¹⁷ tokens so the sum cannot overflow). Integer sums do not depend on the order
//      of the atomics, so a row's pick is deterministic and depends only on its own logits and parameters.
// Where the device and the host can differ: the host adds doubles one by one in its walk order, the device adds
// exact fixed-point values, and CUDA's exp may differ from glibc's by one ulp. A pick can differ only when a
// running mass lies within their disagreement of the target it is compared with (the top-p mass top_p · total or
// the draw u · total): at most V · 2⁻⁴⁷ of the top token's probability plus the host's own rounding (≈ V · 2⁻⁵³ of
// the total), in practice ~1e-12; or when a token's probability is within one ulp of min_p. Rows the method cannot
// take come back as kPickOnHost and the backend runs the host sampler on them: a row without a finite maximum,
// or a bucket that must be walked holding more than 4096 tokens (thousands of nearly equal logits at the cut).
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling.h"

namespace strata::cuda {

namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kPerThread = 4;                    // items per thread in every block-wide scan
constexpr int kBuckets = kThreads * kPerThread;  // histogram buckets over [min, max] of the row's logits
constexpr int kBand = kThreads * kPerThread;     // the most tokens of one bucket that can be sorted and walked
constexpr double kFixedScale = 0x1p46;           // probabilities (≤ 1) as multiples of 2⁻⁴⁶ in 64-bit integers

struct Shared {
  union {
    uint32_t count[kBuckets];
    u64 mass[kBuckets];
  } hist;
  u64 band[kBand];  // (inverted logit key << 32 | id): ascending = most likely first, ties by id
  u64 warp_u64[32];
  float warp_f[32];
  u64 scan_total, found_cum;
  int found, band_n;
};

// Floats as unsigned keys in the same order.
__device__ inline uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ inline float key_value(uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }
__device__ inline u64 band_entry(float logit, int id) {
  return (static_cast<u64>(~order_key(logit)) << 32) | static_cast<uint32_t>(id);
}
__device__ inline float band_logit(u64 e) { return key_value(~static_cast<uint32_t>(e >> 32)); }
__device__ inline int band_id(u64 e) { return static_cast<int>(static_cast<uint32_t>(e)); }

// The host sampler's probability relative to the top token: the same double operations.
__device__ inline double probability(float logit, float top, double inv_t) {
  return exp((static_cast<double>(logit) - static_cast<double>(top)) * inv_t);
}
__device__ inline u64 fixed(double p) { return __double2ull_rn(p * kFixedScale); }
__device__ inline double to_double(u64 f) { return static_cast<double>(f) / kFixedScale; }

// prob ≥ min_p exactly as the host decides it, with the exp only for logits near the threshold.
__device__ inline bool passes_min_p(float logit, float top, double inv_t, double min_p, double log_min_p) {
  const double d = (static_cast<double>(logit) - static_cast<double>(top)) * inv_t;
  if (d >= log_min_p + 1e-9) return true;
  if (d <= log_min_p - 1e-9) return false;
  return exp(d) >= min_p;
}

// Finite logits fill buckets 0 … kBuckets - 2; the last bucket holds only -inf (and NaN). A masked row
// (structured outputs) has a crowd of -inf logits of probability 0: kept apart, they never share a bucket that a
// walk must gather (which could not hold them all and would send the row to the host).
struct Buckets {
  float top, range, scale;
  __device__ int of(float logit) const {
    const float d = top - logit;
    if (!(d <= range)) return kBuckets - 1;  // -inf (and NaN)
    return min(kBuckets - 2, static_cast<int>(d * scale));
  }
};

__device__ float block_max(float v, Shared& s, bool max) {
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = max ? fmaxf(v, w) : fminf(v, w);
  }
  if (threadIdx.x % 32 == 0) s.warp_f[threadIdx.x / 32] = v;
  __syncthreads();
  v = s.warp_f[threadIdx.x % 32];
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = max ? fmaxf(v, w) : fminf(v, w);
  }
  __syncthreads();
  return v;
}

__device__ u64 block_sum(u64 v, Shared& s) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) s.warp_u64[threadIdx.x / 32] = v;
  __syncthreads();
  v = s.warp_u64[threadIdx.x % 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

// The sum of the block's values before this thread's (threads in order).
__device__ u64 block_exclusive_scan(u64 v, Shared& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  u64 inclusive = v;
  for (int o = 1; o < 32; o *= 2) {
    const u64 w = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += w;
  }
  if (lane == 31) s.warp_u64[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    u64 w = s.warp_u64[lane];
    for (int o = 1; o < 32; o *= 2) {
      const u64 y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    s.warp_u64[lane] = w;
  }
  __syncthreads();
  const u64 before = inclusive - v + (warp > 0 ? s.warp_u64[warp - 1] : 0);
  __syncthreads();
  return before;
}

struct Found {
  int index;  // the first item whose running sum reaches the target, or -1
  u64 cum;    // the running sum there (base included), or base + all items when none
};

// Items in order, kPerThread per thread (thread t holds items t·kPerThread …): the first whose running sum from
// `base` satisfies `reached` (monotone in the sum). Exact integer sums: the same answer however the block runs.
template <class Reached>
__device__ Found find_first(const u64 (&v)[kPerThread], u64 base, Reached reached, Shared& s) {
  u64 mine = 0;
  for (int i = 0; i < kPerThread; ++i) mine += v[i];
  if (threadIdx.x == 0) s.found = INT_MAX;
  u64 run = base + block_exclusive_scan(mine, s);
  if (threadIdx.x == kThreads - 1) s.scan_total = run + mine;
  int first = -1;
  u64 first_cum = 0;
  for (int i = 0; i < kPerThread && first < 0; ++i) {
    run += v[i];
    if (reached(run)) {
      first = static_cast<int>(threadIdx.x) * kPerThread + i;
      first_cum = run;
    }
  }
  if (first >= 0) atomicMin(&s.found, first);
  __syncthreads();
  if (first >= 0 && first == s.found) s.found_cum = first_cum;
  __syncthreads();
  const Found f = s.found == INT_MAX ? Found{-1, s.scan_total} : Found{s.found, s.found_cum};
  __syncthreads();
  return f;
}

// Gathers bucket b's tokens into s.band, most likely first (ties by id). Their count, or -1 when over kBand.
__device__ int load_band(const float* x, int n, int b, const Buckets& buckets, Shared& s) {
  if (threadIdx.x == 0) s.band_n = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float logit = x[i];
    if (buckets.of(logit) != b) continue;
    const int at = atomicAdd(&s.band_n, 1);
    if (at < kBand) s.band[at] = band_entry(logit, i);
  }
  __syncthreads();
  const int count = s.band_n;
  if (count > kBand) return -1;
  int size = 1;
  while (size < count) size *= 2;
  for (int i = count + threadIdx.x; i < size; i += kThreads) s.band[i] = ~0ull;
  __syncthreads();
  for (int k = 2; k <= size; k *= 2)
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int partner = i ^ j;
        if (partner <= i) continue;
        const u64 a = s.band[i], c = s.band[partner];
        if ((a > c) == ((i & k) == 0)) {
          s.band[i] = c;
          s.band[partner] = a;
        }
      }
      __syncthreads();
    }
  return count;
}

// The first of the loaded band's first `limit` tokens whose running mass from `base` satisfies `reached`.
template <class Reached>
__device__ Found walk_band(int limit, u64 base, float top, double inv_t, Reached reached, Shared& s) {
  u64 v[kPerThread];
  for (int i = 0; i < kPerThread; ++i) {
    const int j = static_cast<int>(threadIdx.x) * kPerThread + i;
    v[i] = j < limit ? fixed(probability(band_logit(s.band[j]), top, inv_t)) : 0;
  }
  return find_first(v, base, reached, s);
}

// The first of buckets 0 … last (bucket `last` holding `last_mass`) whose running mass satisfies `reached`.
template <class Reached>
__device__ Found walk_buckets(int last, u64 last_mass, Reached reached, Shared& s) {
  u64 v[kPerThread];
  for (int i = 0; i < kPerThread; ++i) {
    const int b = static_cast<int>(threadIdx.x) * kPerThread + i;
    v[i] = b < last ? s.hist.mass[b] : b == last ? last_mass : 0;
  }
  return find_first(v, 0, reached, s);
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const float* __restrict__ logits, int64_t cols,
                                                               const RowPick* __restrict__ picks,
                                                               int32_t* __restrict__ out) {
  extern __shared__ u64 shared_words[];
  Shared& s = *reinterpret_cast<Shared*>(shared_words);
  const RowPick pick = picks[blockIdx.x];
  const float* x = logits + static_cast<int64_t>(pick.row) * cols;
  const int n = static_cast<int>(cols);
  const double inv_t = pick.inv_temperature;
  auto answer = [&](int32_t id) {
    if (threadIdx.x == 0) out[blockIdx.x] = id;
  };

  // 1. The row's top logit and its lowest finite one: the bucket range.
  float top = -INFINITY, bottom = INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float logit = x[i];
    top = fmaxf(top, logit);
    if (logit > -INFINITY) bottom = fminf(bottom, logit);
  }
  top = block_max(top, s, true);
  bottom = block_max(bottom, s, false);
  if (!isfinite(top)) return answer(kPickOnHost);
  const float range = top - bottom > 0 ? top - bottom : 1.0f;
  const Buckets buckets{top, range, static_cast<float>(kBuckets - 2) / range};

  // 2. Counts per bucket, and how many tokens pass min_p: where the kept prefix (top-k, then min-p) ends.
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) s.hist.count[b] = 0;
  __syncthreads();
  const double log_min_p = pick.min_p > 0 ? log(pick.min_p) : 0.0;
  u64 in_last = 0, above_min_p = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float logit = x[i];
    const int b = buckets.of(logit);
    if (b == kBuckets - 1)
      ++in_last;  // often the crowd of -inf logits: counted in registers, not by one contended atomic
    else
      atomicAdd(&s.hist.count[b], 1u);
    if (pick.min_p > 0) above_min_p += passes_min_p(logit, top, inv_t, pick.min_p, log_min_p);
  }
  in_last = block_sum(in_last, s);
  above_min_p = block_sum(above_min_p, s);
  if (threadIdx.x == 0) s.hist.count[kBuckets - 1] += static_cast<uint32_t>(in_last);
  __syncthreads();
  u64 keep = static_cast<u64>(n);
  if (pick.top_k > 0 && static_cast<u64>(pick.top_k) < keep) keep = static_cast<u64>(pick.top_k);
  if (pick.min_p > 0 && above_min_p < keep) keep = above_min_p;
  if (keep < 1) keep = 1;
  u64 counts[kPerThread];
  for (int i = 0; i < kPerThread; ++i) counts[i] = s.hist.count[threadIdx.x * kPerThread + i];
  const Found cut = find_first(counts, 0, [keep](u64 c) { return c >= keep; }, s);
  const int cut_bucket = cut.index;  // always found: the counts add up to n ≥ keep
  const int cut_count = static_cast<int>(s.hist.count[cut_bucket]);
  const int cut_rank = static_cast<int>(keep - (cut.cum - static_cast<u64>(cut_count)));  // kept of the cut bucket
  const bool partial = cut_rank < cut_count;
  __syncthreads();  // the counts are read; the histogram becomes masses

  // 3. Masses of the wholly kept buckets (every token before the cut passes min-p: the kept set is a prefix).
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) s.hist.mass[b] = 0;
  __syncthreads();
  const int whole_end = partial ? cut_bucket : cut_bucket + 1;
  u64 last_mass = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float logit = x[i];
    const int b = buckets.of(logit);
    if (b >= whole_end) continue;
    const u64 m = fixed(probability(logit, top, inv_t));
    if (b == kBuckets - 1)
      last_mass += m;
    else
      atomicAdd(&s.hist.mass[b], m);
  }
  last_mass = block_sum(last_mass, s);
  if (threadIdx.x == 0) s.hist.mass[kBuckets - 1] += last_mass;
  __syncthreads();

  auto never = [](u64) { return false; };
  int band_bucket = -1, band_count = 0;  // which bucket s.band holds
  auto load = [&](int b) {
    if (b != band_bucket) {
      band_count = load_band(x, n, b, buckets, s);
      band_bucket = b;
    }
    return band_count >= 0;
  };
  // The kept set ends at token end_index (in likelihood order) of bucket end_bucket, which holds end_mass of it.
  const int end_bucket = cut_bucket;
  int end_index = cut_rank - 1;
  u64 end_mass = s.hist.mass[cut_bucket];
  if (partial) {
    if (!load(cut_bucket)) return answer(kPickOnHost);
    end_mass = walk_band(cut_rank, 0, top, inv_t, never, s).cum;
  }
  const u64 total = walk_buckets(end_bucket, end_mass, never, s).cum;

  if (keep == static_cast<u64>(n) && pick.top_p >= 1.0) {
    // Nothing filtered out: the draw walks the vocabulary in id order, a tile of 4096 ids at a time.
    const double target = pick.uniform * to_double(total);
    auto passes = [target](u64 c) { return to_double(c) > target; };
    u64 carry = 0;
    for (int start = 0; start < n; start += kBand) {
      u64 v[kPerThread];
      for (int i = 0; i < kPerThread; ++i) {
        const int id = start + static_cast<int>(threadIdx.x) * kPerThread + i;
        v[i] = id < n ? fixed(probability(x[id], top, inv_t)) : 0;
      }
      const Found f = find_first(v, carry, passes, s);
      if (f.index >= 0) return answer(start + f.index);
      carry = f.cum;
    }
    return answer(n - 1);  // rounding left the target past the total: the last token walked, as on the host
  }

  int last_bucket = end_bucket;  // the kept set after top-p: up to token last_index of bucket last_bucket
  int last_index = end_index;
  u64 last_bucket_mass = end_mass, kept_total = total;
  if (pick.top_p < 1.0) {
    // The smallest prefix whose mass reaches top_p · total: its bucket, then its token.
    const double target = pick.top_p * to_double(total);
    auto reaches = [target](u64 c) { return to_double(c) >= target; };
    const Found b = walk_buckets(end_bucket, end_mass, reaches, s);
    if (b.index >= 0) {
      const u64 bucket_mass = b.index == end_bucket ? end_mass : s.hist.mass[b.index];
      const u64 base = b.cum - bucket_mass;
      if (!load(b.index)) return answer(kPickOnHost);
      const Found t = walk_band(b.index == end_bucket ? end_index + 1 : band_count, base, top, inv_t, reaches, s);
      if (t.index < 0) return answer(kPickOnHost);  // cannot happen: the bucket's tokens sum to its mass exactly
      last_bucket = b.index;
      last_index = t.index;
      kept_total = t.cum;
      last_bucket_mass = t.cum - base;
    }
  }

  // The draw: the first kept token, in likelihood order, whose running mass passes u · kept_total.
  const double target = pick.uniform * to_double(kept_total);
  auto passes = [target](u64 c) { return to_double(c) > target; };
  const Found b = walk_buckets(last_bucket, last_bucket_mass, passes, s);
  if (b.index < 0) {  // rounding left the target past the total: the last kept token, as on the host
    if (!load(last_bucket)) return answer(kPickOnHost);
    return answer(band_id(s.band[last_index]));
  }
  const u64 bucket_mass = b.index == last_bucket ? last_bucket_mass : s.hist.mass[b.index];
  if (!load(b.index)) return answer(kPickOnHost);
  const Found t = walk_band(b.index == last_bucket ? last_index + 1 : band_count, b.cum - bucket_mass, top, inv_t,
                            passes, s);
  if (t.index < 0) return answer(kPickOnHost);
  return answer(band_id(s.band[t.index]));
}

}  // namespace

void sample_rows(const float* x, int64_t cols, const RowPick* picks, int64_t count, int32_t* out, cudaStream_t stream) {
  if (count == 0) return;
  static std::once_flag attribute_set;
  std::call_once(attribute_set, [] {
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(sizeof(Shared))));
  });
  sample_rows_kernel<<<static_cast<unsigned>(count), kThreads, sizeof(Shared), stream>>>(x, cols, picks, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

namespace {

// One thread an entry; a row's ids are distinct within one launch, so no two threads touch one logit. The division
// and product are IEEE float operations (no fast-math), the same bits as the host's backend/cpu/sampling.cpp.
__global__ void penalty_kernel(float* __restrict__ logits, int64_t cols, const PenaltyEntry* __restrict__ entries,
                               int64_t count, bool repetition) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const PenaltyEntry e = entries[i];
  float& l = logits[static_cast<int64_t>(e.row) * cols + e.id];
  if (repetition)
    l = l > 0 ? l / e.value : l * e.value;
  else
    l -= e.value;
}

// One thread a logit, consecutive threads on consecutive columns (coalesced), each reading its 32-bit word.
__global__ void mask_kernel(float* __restrict__ logits, int64_t cols, const int32_t* __restrict__ rows,
                            const uint32_t* __restrict__ words, int64_t n_words) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const uint32_t word = col / 32 < n_words ? words[static_cast<int64_t>(blockIdx.y) * n_words + col / 32] : 0u;
  if (!((word >> (col % 32)) & 1u)) logits[static_cast<int64_t>(rows[blockIdx.y]) * cols + col] = -INFINITY;
}

}  // namespace

void mask_rows(float* x, int64_t cols, const int32_t* rows, const uint32_t* words, int64_t n_words, int64_t count,
               cudaStream_t stream) {
  if (count == 0) return;
  constexpr int kMaskThreads = 256;
  const dim3 grid(static_cast<unsigned>((cols + kMaskThreads - 1) / kMaskThreads), static_cast<unsigned>(count));
  mask_kernel<<<grid, kMaskThreads, 0, stream>>>(x, cols, rows, words, n_words);
  STRATA_CUDA_CHECK_LAUNCH();
}

void apply_penalties(float* x, int64_t cols, const PenaltyEntry* repetition, int64_t n_repetition,
                     const PenaltyEntry* subtract, int64_t n_subtract, cudaStream_t stream) {
  constexpr int kPenaltyThreads = 256;
  // Repetition first, then the subtracted amounts: an id in both gets them in the host's order.
  for (auto [entries, n, is_repetition] : {std::tuple{repetition, n_repetition, true}, std::tuple{subtract, n_subtract, false}}) {
    if (n == 0) continue;
    penalty_kernel<<<static_cast<unsigned>((n + kPenaltyThreads - 1) / kPenaltyThreads), kPenaltyThreads, 0, stream>>>(
        x, cols, entries, n, is_repetition);
    STRATA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace strata::cuda
