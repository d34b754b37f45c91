#pragma once
// Kernels of indexer.h: the Lightning Indexer's scores and its top-k selection.
// Compiled once, through v4_kernels.cu (one nvcc translation unit for every V4 kernel: see there).
#include "backend/cuda/indexer.h"
#include "backend/cuda/v4_device.cuh"

namespace strata::cuda {

namespace {

// Scores of row r against its visible entries: block (r, b) takes entries [b·per_block, (b+1)·per_block), so a
// decode step's few rows still fill the GPU (per_block small), while a prefill's many rows load each row's queries
// into shared memory fewer times (per_block large). A warp takes an entry at a time, its key staged in shared memory;
// lanes take heads (each adding its head's channels in order, the queries' rows padded so lanes read different
// banks), then the heads' weighted ReLU scores are summed across the warp.
__global__ void indexer_scores_kernel(const float* q, const float* head_w, EntryTable t, StepLayout L, int64_t rate,
                                      int64_t heads, int64_t hd, int64_t max_visible, int64_t per_block,
                                      float* scores) {
  extern __shared__ float qs[];  // [heads][hd + 1], then the heads' weights [heads], then a key per warp [hd]
  const int64_t ld = hd + 1;
  float* hw = qs + heads * ld;
  const int64_t r = blockIdx.x, chunk = L.chunk[r];
  const int64_t closed = (L.pos0[chunk] + L.count[chunk]) / rate;
  const int64_t visible = min(static_cast<int64_t>(L.position[r] + 1) / rate, closed);
  const int64_t e0 = static_cast<int64_t>(blockIdx.y) * per_block, e1 = min(e0 + per_block, visible);
  if (e0 >= e1) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t h = warp; h < heads; h += warps)
    for (int64_t c = lane; c < hd; c += 32) qs[h * ld + c] = q[(r * heads + h) * hd + c];
  for (int64_t h = threadIdx.x; h < heads; h += blockDim.x) hw[h] = head_w[r * heads + h];
  float* key = hw + heads + warp * hd;
  __syncthreads();
  const float softmax_scale = rsqrtf(static_cast<float>(hd)), weights_scale = rsqrtf(static_cast<float>(heads));
  for (int64_t e = e0 + warp; e < e1; e += warps) {
    const float* k = entry_address(t, chunk, e);
    for (int64_t c = lane; c < hd; c += 32) key[c] = k[c];
    __syncwarp();
    float score = 0.0f;
    for (int64_t h = lane; h < heads; h += 32) {
      const float* qh = qs + h * ld;
      float acc = 0.0f;
      for (int64_t c = 0; c < hd; ++c) acc += qh[c] * key[c];
      score += (fmaxf(acc, 0.0f) * softmax_scale) * (hw[h] * weights_scale);
    }
    for (int o = 16; o > 0; o >>= 1) score += __shfl_xor_sync(0xffffffffu, score, o);
    if (lane == 0) scores[r * max_visible + e] = score;
    __syncwarp();  // the key is read by every lane before the next one lands
  }
}

// Top-k per row, one block per row, in three steps: (1) a radix select of the k-th best score over an
// order-preserving 32-bit key, a byte at a time from the top, counted in a shared-memory histogram; (2) every entry
// above that key plus the lowest-index entries equal to it, k in all, gathered into shared memory; (3) a bitonic
// sort of just those k, best first. "Better" is a higher score, then (equal scores, -0.0 == 0.0) a lower index: a
// total order, so the picks are those of any exact sort. A warp takes a contiguous run of the row, kSelectCached
// entries a lane held in registers between the passes (a decode row of up to 8,192 entries is read once).
constexpr int kSelectThreads = 512, kSelectWarps = kSelectThreads / 32, kSelectCached = 16;
constexpr int kSelectBatch = 8;                          // entries past the cached ones: loads in flight a lane
constexpr int kSelectMax = 4096;                         // topk < kSelectMax: the sort holds ≤ 8 entries a thread
constexpr int kSortPer = kSelectMax / kSelectThreads;

// Larger key = larger score; -0.0 takes +0.0's key, so the two tie as they do under ==. Never 0 for a non-NaN
// score (-inf is 0x007fffff), so 0 marks "no entry".
__device__ uint32_t order_key(float s) {
  uint32_t u = __float_as_uint(s);
  if ((u << 1) == 0) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// An entry as one 64-bit word, larger = better: key above, then the bitwise-inverted index.
__device__ uint64_t sort_word(uint32_t key, int64_t e) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(e));
}

// One bitonic step: position i keeps the better of its word and its partner's when both sit on the same side of
// the step (best first within an ascending run of `size`, worst first within a descending one).
__device__ uint64_t bitonic_keep(uint64_t mine, uint64_t other, int i, int size, int stride) {
  const bool keep_better = ((i & stride) == 0) == ((i & size) == 0);
  return keep_better ? max(mine, other) : min(mine, other);
}

// A step whose partner is in the same thread: positions j·kSelectThreads + tid, partner j ^ S (S = 1, 2, 4).
template <int S>
__device__ void bitonic_in_thread(uint64_t (&v)[kSortPer], int per, int size) {
#pragma unroll
  for (int j = 0; j < kSortPer; ++j) {
    const int jp = j ^ S;
    if (jp > j && jp < per) {
      const int i = j * kSelectThreads + static_cast<int>(threadIdx.x);
      const uint64_t a = v[j], b = v[jp];
      v[j] = bitonic_keep(a, b, i, size, S * kSelectThreads);
      v[jp] = bitonic_keep(b, a, i + S * kSelectThreads, size, S * kSelectThreads);
    }
  }
}

// The whole network for n = N ≤ kSelectThreads words, one a thread (threads ≥ N hold padding and only meet the
// barriers): every step's stride and run size known at compile time, so a step is a handful of instructions.
template <int N>
__device__ uint64_t bitonic_sort_small(uint64_t v, uint64_t* exchange, int sort_cap) {
  const int tid = static_cast<int>(threadIdx.x);
  int buffer = 1;
#pragma unroll
  for (int size = 2; size <= N; size <<= 1)
#pragma unroll
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      if (stride >= 32) {
        uint64_t* x = exchange + buffer * sort_cap;
        if (tid < N) x[tid] = v;
        __syncthreads();
        if (tid < N) v = bitonic_keep(v, x[tid ^ stride], tid, size, stride);
        buffer ^= 1;
      } else if (tid < N) {
        v = bitonic_keep(v, __shfl_xor_sync(0xffffffffu, v, stride), tid, size, stride);
      }
    }
  return v;
}

__global__ void __launch_bounds__(kSelectThreads)
    indexer_select_kernel(const float* scores, StepLayout L, int64_t rate, int64_t max_visible, int64_t topk,
                          int32_t* picks, int32_t* pick_count) {
  extern __shared__ uint64_t words[];  // [2][sort_cap]: the gathered entries, then the sort's exchange buffers
  __shared__ __align__(16) uint32_t hist[256];
  __shared__ uint32_t warp_ties[kSelectWarps];
  __shared__ uint32_t bin_digit, bin_need, bin_count, filled;
  const int64_t r = blockIdx.x, chunk = L.chunk[r];
  const int64_t closed = (L.pos0[chunk] + L.count[chunk]) / rate;
  const int64_t visible = min(static_cast<int64_t>(L.position[r] + 1) / rate, closed);
  const int64_t k = min(topk, visible);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  if (tid == 0) pick_count[r] = static_cast<int32_t>(k);
  if (k <= 0) return;
  const int sort_cap = max(32, 1 << (32 - __clz(static_cast<int>(topk) - 1)));  // power of two ≥ topk

  // Lane `lane` of warp w takes entries (w·per_lane + j)·32 + lane, j < per_lane: a contiguous run per warp, so
  // index order is (warp, j, lane) — what the tie break below needs.
  const float* row = scores + r * max_visible;
  const int64_t per_lane = (visible + kSelectThreads - 1) / kSelectThreads;
  const int64_t base = warp * per_lane * 32 + lane;
  auto key_at = [&](int64_t j) {
    const int64_t e = base + j * 32;
    return e < visible ? order_key(row[e]) : 0u;
  };
  uint32_t cached[kSelectCached];
#pragma unroll
  for (int j = 0; j < kSelectCached; ++j) cached[j] = j < per_lane ? key_at(j) : 0u;
  // Every key of this thread's run, in index order: fn(j, key), key 0 past the row's end. Warp-uniform trip count.
  auto for_each_key = [&](auto&& fn) {
#pragma unroll
    for (int j = 0; j < kSelectCached; ++j)
      if (j < per_lane) fn(j, cached[j]);
    for (int64_t j0 = kSelectCached; j0 < per_lane; j0 += kSelectBatch) {
      uint32_t batch[kSelectBatch];
#pragma unroll
      for (int u = 0; u < kSelectBatch; ++u) batch[u] = j0 + u < per_lane ? key_at(j0 + u) : 0u;
#pragma unroll
      for (int u = 0; u < kSelectBatch; ++u)
        if (j0 + u < per_lane) fn(j0 + u, batch[u]);
    }
  };
  if (tid < 256) hist[tid] = 0;
  if (tid == 0) filled = 0;
  __syncthreads();

  // (1) The selection is every key whose top bits (mask) exceed `prefix`, plus `need` of the `count` keys whose top
  // bits equal it. Each pass fixes the next byte of the k-th key; it stops early once the equal ones are all taken.
  uint32_t prefix = 0, mask = 0, need = static_cast<uint32_t>(k), count = static_cast<uint32_t>(visible);
  for (int shift = 24; shift >= 0 && count > need; shift -= 8) {
    for_each_key([&](int64_t, uint32_t key) {
      if (key != 0 && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    });
    __syncthreads();
    if (warp == 0) {
      // Lane l holds bins 8l .. 8l+7; `above` counts the keys in higher bins.
      uint32_t c[8];
      const uint4 lo = reinterpret_cast<const uint4*>(hist)[lane * 2];
      const uint4 hi = reinterpret_cast<const uint4*>(hist)[lane * 2 + 1];
      c[0] = lo.x, c[1] = lo.y, c[2] = lo.z, c[3] = lo.w, c[4] = hi.x, c[5] = hi.y, c[6] = hi.z, c[7] = hi.w;
      reinterpret_cast<uint4*>(hist)[lane * 2] = make_uint4(0, 0, 0, 0);
      reinterpret_cast<uint4*>(hist)[lane * 2 + 1] = make_uint4(0, 0, 0, 0);
      const uint32_t own = c[0] + c[1] + c[2] + c[3] + c[4] + c[5] + c[6] + c[7];
      uint32_t suffix = own;
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_down_sync(0xffffffffu, suffix, o);
        if (lane + o < 32) suffix += v;
      }
      uint32_t above = suffix - own;
#pragma unroll
      for (int b = 7; b >= 0; --b) {
        if (above < need && above + c[b] >= need) {
          bin_digit = static_cast<uint32_t>(lane * 8 + b);
          bin_need = need - above;
          bin_count = c[b];
        }
        above += c[b];
      }
    }
    __syncthreads();
    prefix |= bin_digit << shift;
    mask |= 255u << shift;
    need = bin_need;
    count = bin_count;
  }

  // (2) Gather: keys above the prefix anywhere in words[0, k - need); the equal ones, when only some are taken,
  // by index order into words[k - need, k) — a warp's rank among them is the ties of the warps before it plus its
  // own so far.
  const bool ordered = count > need;
  uint32_t rank = 0;
  if (ordered) {
    uint32_t mine = 0;
    for_each_key([&](int64_t, uint32_t key) { mine += __popc(__ballot_sync(0xffffffffu, key != 0 && key == prefix)); });
    if (lane == 0) warp_ties[warp] = mine;
    __syncthreads();
    uint32_t before = lane < warp ? warp_ties[lane] : 0u;
    for (int o = 16; o > 0; o >>= 1) before += __shfl_xor_sync(0xffffffffu, before, o);
    rank = before;
  }
  const uint32_t first_tie = static_cast<uint32_t>(k) - need;
  const unsigned lower_lanes = (1u << lane) - 1u;
  for_each_key([&](int64_t j, uint32_t key) {
    const bool tie = key != 0 && (key & mask) == prefix, above = key != 0 && (key & mask) > prefix;
    const int64_t e = base + j * 32;
    if (ordered) {
      const unsigned ties = __ballot_sync(0xffffffffu, tie);
      const uint32_t mine = rank + static_cast<uint32_t>(__popc(ties & lower_lanes));
      if (tie && mine < need) words[first_tie + mine] = sort_word(key, e);
      rank += static_cast<uint32_t>(__popc(ties));
    }
    const bool take = above || (tie && !ordered);
    const unsigned takers = __ballot_sync(0xffffffffu, take);
    if (takers == 0) return;
    uint32_t slot = 0;
    if (lane == 0) slot = atomicAdd(&filled, static_cast<uint32_t>(__popc(takers)));
    slot = __shfl_sync(0xffffffffu, slot, 0) + static_cast<uint32_t>(__popc(takers & lower_lanes));
    if (take) words[slot] = sort_word(key, e);
  });
  __syncthreads();

  // (3) Bitonic sort of n = max(32, power of two ≥ k) words, best first; the padding (0) sorts last. Position
  // i = j·kSelectThreads + tid: steps of stride < 32 by shuffles, < kSelectThreads through shared memory (two
  // buffers taken in turn, one barrier a step), larger ones inside the thread.
  int n = 32;
  while (n < k) n <<= 1;
  if (n <= kSelectThreads) {
    uint64_t w = tid < k ? words[tid] : 0;
    switch (n) {
      case 32: w = bitonic_sort_small<32>(w, words, sort_cap); break;
      case 64: w = bitonic_sort_small<64>(w, words, sort_cap); break;
      case 128: w = bitonic_sort_small<128>(w, words, sort_cap); break;
      case 256: w = bitonic_sort_small<256>(w, words, sort_cap); break;
      default: w = bitonic_sort_small<512>(w, words, sort_cap); break;
    }
    if (tid < k) picks[r * topk + tid] = static_cast<int32_t>(~static_cast<uint32_t>(w));
    return;
  }
  // Larger k (index_topk above 512): the same network with the steps chosen at run time.
  const int per = max(1, n / kSelectThreads);
  uint64_t v[kSortPer];
#pragma unroll
  for (int j = 0; j < kSortPer; ++j) {
    const int i = j * kSelectThreads + tid;
    v[j] = j < per && i < k ? words[i] : 0;
  }
  const bool active = tid < n;  // whole warps: n is a multiple of 32
  int buffer = 1;                // words[0, k) was just read: exchange through the other buffer first
  for (int size = 2; size <= n; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      if (stride >= kSelectThreads) {
        if (stride == kSelectThreads) bitonic_in_thread<1>(v, per, size);
        else if (stride == 2 * kSelectThreads) bitonic_in_thread<2>(v, per, size);
        else bitonic_in_thread<4>(v, per, size);
      } else if (stride >= 32) {
        uint64_t* x = words + buffer * sort_cap;
#pragma unroll
        for (int j = 0; j < kSortPer; ++j)
          if (j < per && active) x[j * kSelectThreads + tid] = v[j];
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kSortPer; ++j)
          if (j < per && active) {
            const int i = j * kSelectThreads + tid;
            v[j] = bitonic_keep(v[j], x[i ^ stride], i, size, stride);
          }
        buffer ^= 1;
      } else if (active) {
#pragma unroll
        for (int j = 0; j < kSortPer; ++j)
          if (j < per) {
            const int i = j * kSelectThreads + tid;
            v[j] = bitonic_keep(v[j], __shfl_xor_sync(0xffffffffu, v[j], stride), i, size, stride);
          }
      }
    }
#pragma unroll
  for (int j = 0; j < kSortPer; ++j) {
    const int i = j * kSelectThreads + tid;
    if (j < per && i < k) picks[r * topk + i] = static_cast<int32_t>(~static_cast<uint32_t>(v[j]));
  }
}

}  // namespace

void indexer_topk(const float* q, const float* head_w, const EntryTable& entries, const StepLayout& rows, int64_t rate,
                  int64_t heads, int64_t head_dim, int64_t topk, int64_t max_visible, float* scratch, int32_t* picks,
                  int32_t* pick_count, cudaStream_t stream) {
  if (rows.rows == 0) return;
  const size_t shared = static_cast<size_t>(heads * (head_dim + 1) + heads + kThreads / 32 * head_dim) * sizeof(float);
  if (shared > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
  if (max_visible > 0) {
    const int64_t per_block = rows.rows * ((max_visible + 31) / 32) <= 4096 ? 32 : 256;
    const dim3 grid(static_cast<unsigned>(rows.rows), static_cast<unsigned>((max_visible + per_block - 1) / per_block));
    indexer_scores_kernel<<<grid, kThreads, shared, stream>>>(q, head_w, entries, rows, rate, heads, head_dim,
                                                              max_visible, per_block, scratch);
    STRATA_CUDA_CHECK_LAUNCH();
  }
  indexer_select(scratch, rows, rate, max_visible, topk, picks, pick_count, stream);
}

void indexer_select(const float* scores, const StepLayout& rows, int64_t rate, int64_t max_visible, int64_t topk,
                    int32_t* picks, int32_t* pick_count, cudaStream_t stream) {
  if (rows.rows == 0) return;
  if (topk >= kSelectMax) fail("indexer: index_topk ", topk, " above the selection's limit of ", kSelectMax - 1);
  int sort_cap = 32;
  while (sort_cap < topk) sort_cap <<= 1;
  const size_t shared = 2 * static_cast<size_t>(sort_cap) * sizeof(uint64_t);
  if (shared > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(indexer_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
  indexer_select_kernel<<<static_cast<unsigned>(rows.rows), kSelectThreads, shared, stream>>>(
      scores, rows, rate, max_visible, topk, picks, pick_count);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
