// DeepSeek-V4 kernels (v4_kernels.h). First versions: fp32 arithmetic in the order of the CPU reference,
// correctness before speed; the GEMMs (cuBLASLt) carry the FLOPs.
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_element.cuh"
#include "backend/cuda/v4_kernels.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n, int threads = kThreads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the total.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

__device__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ const float* entry_address(const EntryTable& t, int64_t chunk, int64_t n) {
  const int32_t page = t.pages[chunk * t.max_pages + n / t.per_page];
  return t.arena + static_cast<int64_t>(page) * t.page_floats + (n % t.per_page) * t.dim;
}


template <typename T>
__global__ void to_gemm_input_kernel(const float* x, T* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = from_float<T>(x[i]);
}

template <typename T>
__global__ void embed_kernel(const T* table, const int32_t* tokens, float* out, int64_t d, int64_t copies) {
  const int64_t r = blockIdx.x;
  const T* src = table + static_cast<int64_t>(tokens[r]) * d;
  for (int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < d; c += gridDim.y * blockDim.x) {
    const float v = to_float(src[c]);
    for (int64_t h = 0; h < copies; ++h) out[(r * copies + h) * d + c] = v;
  }
}

// mHC mixes in two steps, so a decode step of a few rows still spreads over the GPU. Step 1: block (r, g, s) takes
// columns [s·kMixSplit, (s+1)·kMixSplit) of row r's streams and returns that slice's Σx² and its dot products with
// fn rows [g·kMixGroup, (g+1)·kMixGroup); step 2 adds the slices in a fixed order (deterministic, batch-invariant).
constexpr int64_t kMixSplit = 512, kMixGroup = 8;

int64_t mix_splits(int64_t width) { return (width + kMixSplit - 1) / kMixSplit; }

// partial[r, s, 0] = Σx² of the slice; partial[r, s, 1 + i] = fn[i] · x over the slice. `rows` (optional) maps
// the grid's row to a streams row.
__global__ void mix_partials_kernel(const float* streams, const int32_t* rows, const float* fn, int64_t width,
                                    int64_t n, float* partial) {
  const int64_t r = blockIdx.x, g = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const float* x = streams + (rows ? static_cast<int64_t>(rows[r]) : r) * width;
  const int64_t c0 = split * kMixSplit, c1 = min(c0 + kMixSplit, width);
  const int64_t i0 = g * kMixGroup, i1 = min(i0 + kMixGroup, n);
  float ss = 0.0f, acc[kMixGroup] = {};
  for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
    const float v = x[c];
    ss += v * v;
#pragma unroll
    for (int64_t i = 0; i < kMixGroup; ++i)
      if (i0 + i < i1) acc[i] += fn[(i0 + i) * width + c] * v;
  }
  float* out = partial + (r * splits + split) * (1 + n);
  ss = block_sum(ss);
  if (g == 0 && threadIdx.x == 0) out[0] = ss;
  for (int64_t i = 0; i < kMixGroup && i0 + i < i1; ++i) {
    const float total = block_sum(acc[i]);
    if (threadIdx.x == 0) out[1 + i0 + i] = total;
  }
}

// The same one-slice layout from products already made (a GEMM over many rows): partial[r, 0, 0] = Σx² of row r,
// partial[r, 0, 1 + i] = mixes[r, i].
__global__ void mix_from_products_kernel(const float* streams, const float* mixes, int64_t width, int64_t n,
                                         float* partial) {
  const int64_t r = blockIdx.x;
  const float* x = streams + r * width;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) ss += x[c] * x[c];
  ss = block_sum(ss);
  float* out = partial + r * (1 + n);
  if (threadIdx.x == 0) out[0] = ss;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[1 + i] = mixes[r * n + i];
}

// mix[i] = fn[i] · rmsnorm(x) of row r from its slices, by one warp (lanes over the n + 1 sums, each adding its
// slices in order: all loads in flight at once), into shared `mix` (n values); __syncwarp after.
__device__ void warp_mixes(const float* partial, int64_t r, int64_t splits, int64_t n, int64_t width, float eps,
                           float* mix) {
  const int lane = threadIdx.x % 32;
  const float* p = partial + r * splits * (1 + n);
  float inv = 0.0f;
  for (int64_t i0 = 0; i0 <= n; i0 += 32) {
    const int64_t i = i0 + lane;
    float v = 0.0f;
    if (i <= n) {
      // Eight loads issued before their sums: a plain loop would wait out one load's latency per slice.
      int64_t s = 0;
      for (; s + 8 <= splits; s += 8) {
        float part[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) part[u] = p[(s + u) * (1 + n) + i];
#pragma unroll
        for (int u = 0; u < 8; ++u) v += part[u];
      }
      for (; s < splits; ++s) v += p[s * (1 + n) + i];
    }
    if (i0 == 0) inv = rsqrtf(__shfl_sync(0xffffffffu, v, 0) / static_cast<float>(width) + eps);
    if (i >= 1 && i <= n) mix[i - 1] = v * inv;
  }
  __syncwarp();
}

// Step 2 of hc_pre, one warp per row: pre/post, comb by softmax and Sinkhorn (lanes own rows, then columns, of the
// hc×hc matrix). Step 3 (hc_collapse_kernel) spreads the collapse Σ_h pre[h] · stream h over the GPU.
__global__ void hc_pre_kernel(const float* partial, int64_t splits, const float* base, const float* scale,
                              float* mix_out, float* pre_out, int64_t hc, int64_t d, float norm_eps, float hc_eps,
                              int64_t sinkhorn_iters) {
  __shared__ float mix[(2 + 8) * 8];
  __shared__ float comb[8 * 8];  // the Sinkhorn iterations stay in shared memory
  const int64_t r = blockIdx.x, width = hc * d, mix_n = (2 + hc) * hc;
  warp_mixes(partial, r, splits, mix_n, width, norm_eps, mix);
  float* post = mix_out + r * (hc + hc * hc);
  const int lane = threadIdx.x;
  if (lane < hc) {
    pre_out[r * hc + lane] = sigmoidf(mix[lane] * scale[0] + base[lane]) + hc_eps;
    post[lane] = 2.0f * sigmoidf(mix[hc + lane] * scale[1] + base[hc + lane]);
    // Row `lane` of comb: softmax over its hc entries.
    float* row = comb + lane * hc;
    float m = -FLT_MAX, sum = 0.0f;
    for (int64_t j = 0; j < hc; ++j) row[j] = mix[2 * hc + lane * hc + j] * scale[2] + base[2 * hc + lane * hc + j];
    for (int64_t j = 0; j < hc; ++j) m = fmaxf(m, row[j]);
    for (int64_t j = 0; j < hc; ++j) sum += expf(row[j] - m);
    for (int64_t j = 0; j < hc; ++j) row[j] = expf(row[j] - m) / sum + hc_eps;
  }
  __syncwarp();
  const int64_t iters = sinkhorn_iters > 1 ? sinkhorn_iters : 1;
  if (hc * hc <= 32) {
    // Sinkhorn-Knopp in registers: lane i·hc + j holds comb[i][j] and gathers its row's or column's entries by
    // shuffles, adding them in the CPU reference's order (so the same sums as the shared-memory loop below).
    const int i = lane / static_cast<int>(hc), j = lane % static_cast<int>(hc);
    const bool mine = lane < hc * hc;
    float v = mine ? comb[lane] : 0.0f;
    for (int64_t it = 0; it < iters; ++it) {
      if (it > 0) {
        float sum = 0.0f;
        for (int jj = 0; jj < hc; ++jj) sum += __shfl_sync(0xffffffffu, v, mine ? i * static_cast<int>(hc) + jj : 0);
        v /= sum + hc_eps;
      }
      float sum = 0.0f;
      for (int ii = 0; ii < hc; ++ii) sum += __shfl_sync(0xffffffffu, v, mine ? ii * static_cast<int>(hc) + j : 0);
      v /= sum + hc_eps;
    }
    if (mine) post[hc + lane] = v;
    return;
  }
  // Sinkhorn-Knopp as the CPU reference: columns once, then (rows, columns) sinkhorn_iters − 1 times.
  for (int64_t it = 0; it < iters; ++it) {
    if (it > 0) {
      if (lane < hc) {
        float sum = 0.0f;
        for (int64_t j = 0; j < hc; ++j) sum += comb[lane * hc + j];
        for (int64_t j = 0; j < hc; ++j) comb[lane * hc + j] /= sum + hc_eps;
      }
      __syncwarp();
    }
    if (lane < hc) {
      float sum = 0.0f;
      for (int64_t i = 0; i < hc; ++i) sum += comb[i * hc + lane];
      for (int64_t i = 0; i < hc; ++i) comb[i * hc + lane] /= sum + hc_eps;
    }
    __syncwarp();
  }
  for (int64_t i = lane; i < hc * hc; i += 32) post[hc + i] = comb[i];
}

// out[i, k] = Σ_h pre[i, h] · streams[row_i, h·d + k], row_i = rows[i] (or i): blocks over (row, column slice).
__global__ void hc_collapse_kernel(const float* streams, const int32_t* rows, const float* pre, float* out,
                                   int64_t hc, int64_t d) {
  const int64_t i = blockIdx.x, k = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= d) return;
  const float* x = streams + (rows ? static_cast<int64_t>(rows[i]) : i) * hc * d;
  float acc = 0.0f;
  for (int64_t h = 0; h < hc; ++h) acc += pre[i * hc + h] * x[h * d + k];
  out[i * d + k] = acc;
}

// One block per row (rows may exceed the 65,535 limit of a grid's y dimension), threads over the hidden size.
__global__ void hc_post_kernel(const float* mix, const float* block_out, float* streams, int64_t hc, int64_t d) {
  const int64_t r = blockIdx.x;
  const float* post = mix + r * (hc + hc * hc);
  const float* comb = post + hc;
  float* x = streams + r * hc * d;
  // blockIdx.y: a slice of kThreads columns, so a decode step's few rows still spread over the GPU.
  for (int64_t e = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < d; e += gridDim.y * blockDim.x) {
    float old[8];  // hc ≤ 8 (checked by the launcher)
    for (int64_t j = 0; j < hc; ++j) old[j] = x[j * d + e];
    const float out = block_out[r * d + e];
    for (int64_t k = 0; k < hc; ++k) {
      float acc = 0.0f;
      for (int64_t j = 0; j < hc; ++j) acc += comb[j * hc + k] * old[j];
      x[k * d + e] = post[k] * out + acc;
    }
  }
}

// The HyperHead's pre weights, one warp per asked-for row (its collapse is hc_collapse_kernel).
__global__ void hyper_head_kernel(const float* partial, int64_t splits, const float* base, const float* scale,
                                  float* pre_out, int64_t hc, int64_t d, float norm_eps, float hc_eps) {
  __shared__ float pre[8];
  warp_mixes(partial, blockIdx.x, splits, hc, hc * d, norm_eps, pre);
  if (threadIdx.x < hc) pre_out[blockIdx.x * hc + threadIdx.x] = sigmoidf(pre[threadIdx.x] * scale[0] + base[threadIdx.x]) + hc_eps;
}

// --- Compressor -----------------------------------------------------------------------------------------------

// The (kv, gate) pair of window position j of window w, own half (`half_offset` = dim with overlap) or the
// next-window half (offset 0): from this step's rows when the token is in this step, else from the pending buffer
// (only the window open when the step began can have earlier tokens).
struct WindowSource {
  const CompressorStep& c;
  int64_t chunk, pos0, first;
  const float* state;
  __device__ void get(int64_t w, int64_t j, int64_t col, float& kv, float& gate) const {
    const int64_t q = w * c.rate + j;
    if (q >= pos0) {
      const int64_t row = first + q - pos0;
      kv = c.kv[row * c.width + col];
      gate = c.gate[row * c.width + col];
    } else {
      kv = state[c.pending_kv + j * c.width + col];
      gate = state[c.pending_gate + j * c.width + col];
    }
  }
};

// One block per closing window; thread t computes channel t (blockDim.x ≥ dim, a multiple of 32). The work list is
// padded to a bound that depends only on the step's shape (so a captured decode step replays whatever windows
// close): a negative chunk is padding.
__global__ void compress_entries_kernel(CompressorStep c, StepLayout L, const int32_t* work) {
  extern __shared__ float entry[];  // [dim]
  const int64_t chunk = work[2 * blockIdx.x], w = work[2 * blockIdx.x + 1];
  if (chunk < 0) return;  // the whole block: padding
  const int64_t pos0 = L.pos0[chunk], first = L.first[chunk];
  const WindowSource src{c, chunk, pos0, first, c.state[chunk]};
  const int64_t start_window = pos0 / c.rate;  // open when the step began
  const int64_t ch = threadIdx.x;
  float value = 0.0f;
  if (ch < c.dim) {
    const int64_t own = c.overlap ? c.dim : 0;
    // Online softmax over the (previous window's first half,) then this window's own half.
    float m = -FLT_MAX, s = 0.0f, acc = 0.0f;
    auto add = [&](float logit, float v) {
      const float m2 = fmaxf(m, logit);
      const float scale_old = expf(m - m2), e = expf(logit - m2);
      s = s * scale_old + e;
      acc = acc * scale_old + e * v;
      m = m2;
    };
    if (c.overlap && w > 0) {
      for (int64_t j = 0; j < c.rate; ++j) {
        float kv, gate;
        if (w - 1 < start_window) {  // closed before this step: kept in the overlap buffer (ape included)
          kv = src.state[c.overlap_kv + j * c.dim + ch];
          gate = src.state[c.overlap_gate + j * c.dim + ch];
        } else {
          src.get(w - 1, j, ch, kv, gate);
          gate += c.ape[j * c.width + ch];
        }
        add(gate, kv);
      }
    }
    for (int64_t j = 0; j < c.rate; ++j) {
      float kv, gate;
      src.get(w, j, own + ch, kv, gate);
      add(gate + c.ape[j * c.width + own + ch], kv);
    }
    value = acc / s;
  }
  const float inv = rsqrtf(block_sum(ch < c.dim ? value * value : 0.0f) / static_cast<float>(c.dim) + c.eps);
  if (ch < c.dim) entry[ch] = value * inv * c.norm[ch];
  __syncthreads();
  // RoPE on the trailing 2·half channels at the window's first position.
  const int64_t nope = c.dim - 2 * c.rope_half;
  float out = ch < c.dim ? entry[ch] : 0.0f;
  if (ch >= nope && ch < c.dim) {
    const int64_t pair = (ch - nope) / 2;
    const float angle = c.inv_freq[pair] * static_cast<float>(w * c.rate);
    const float cs = static_cast<float>(cos(static_cast<double>(angle))) * c.rope_scaling;
    const float sn = static_cast<float>(sin(static_cast<double>(angle))) * c.rope_scaling;
    const float a = entry[nope + 2 * pair], b = entry[nope + 2 * pair + 1];
    out = (ch - nope) % 2 == 0 ? a * cs - b * sn : b * cs + a * sn;
  }
  if (ch < c.dim) {
    const int32_t page = c.entries.pages[chunk * c.entries.max_pages + w / c.entries.per_page];
    c.entries_out[static_cast<int64_t>(page) * c.entries.page_floats + (w % c.entries.per_page) * c.dim + ch] = out;
  }
}

// After the entries: when a window closed, the overlap buffer takes the last closed window's first half (+ ape).
__global__ void compress_overlap_kernel(CompressorStep c, StepLayout L) {
  const int64_t chunk = blockIdx.x, pos0 = L.pos0[chunk], end = pos0 + L.count[chunk];
  const int64_t e0 = pos0 / c.rate, e1 = end / c.rate;
  if (e1 == e0) return;
  float* state = c.state[chunk];
  const WindowSource src{c, chunk, pos0, L.first[chunk], state};
  for (int64_t i = threadIdx.x; i < c.rate * c.dim; i += blockDim.x) {
    const int64_t j = i / c.dim, ch = i % c.dim;
    float kv, gate;
    src.get(e1 - 1, j, ch, kv, gate);
    state[c.overlap_kv + i] = kv;
    state[c.overlap_gate + i] = gate + c.ape[j * c.width + ch];
  }
}

// Last: tokens of the window still open at the end of the step go to the pending buffer.
__global__ void compress_pending_kernel(CompressorStep c, StepLayout L) {
  const int64_t r = blockIdx.x, chunk = L.chunk[r], pos = L.position[r];
  const int64_t end = L.pos0[chunk] + L.count[chunk];
  if (pos < end / c.rate * c.rate) return;
  float* state = c.state[chunk];
  const int64_t j = pos % c.rate;
  for (int64_t col = threadIdx.x; col < c.width; col += blockDim.x) {
    state[c.pending_kv + j * c.width + col] = c.kv[r * c.width + col];
    state[c.pending_gate + j * c.width + col] = c.gate[r * c.width + col];
  }
}

// --- Lightning Indexer ---------------------------------------------------------------------------------------

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

// --- Attention keys and the window ring ---------------------------------------------------------------------------

__global__ void attention_keys_kernel(const float* kv, float* const* ring, int64_t ring_offset, int64_t window,
                                      int64_t hd, KeyEntries mode, EntryTable t, int64_t rate, const int32_t* picks,
                                      const int32_t* pick_count, int64_t topk, StepLayout L, int64_t max_keys,
                                      const float** keys, int32_t* key_count) {
  const int64_t r = blockIdx.x, chunk = L.chunk[r], pos = L.position[r];
  const int64_t pos0 = L.pos0[chunk], first = L.first[chunk];
  const int64_t lo = pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int64_t n_window = pos - lo + 1;
  const float** out = keys + r * max_keys;
  for (int64_t i = threadIdx.x; i < n_window; i += blockDim.x) {
    const int64_t j = lo + i;
    out[i] = j >= pos0 ? kv + (first + j - pos0) * hd : ring[chunk] + ring_offset + (j % window) * hd;
  }
  int64_t n_entries = 0;
  if (mode == KeyEntries::Picked) {
    n_entries = pick_count[r];
    for (int64_t i = threadIdx.x; i < n_entries; i += blockDim.x)
      out[n_window + i] = entry_address(t, chunk, picks[r * topk + i]);
  } else if (mode == KeyEntries::All) {
    const int64_t closed = (pos0 + L.count[chunk]) / rate;
    n_entries = min((pos + 1) / rate, closed);
    for (int64_t i = threadIdx.x; i < n_entries; i += blockDim.x) out[n_window + i] = entry_address(t, chunk, i);
  }
  if (threadIdx.x == 0) key_count[r] = static_cast<int32_t>(n_window + n_entries);
}

__global__ void update_window_kernel(const float* kv, float* const* ring, int64_t ring_offset, int64_t window,
                                     int64_t hd, StepLayout L) {
  const int64_t r = blockIdx.x, chunk = L.chunk[r];
  if (r - L.first[chunk] < L.count[chunk] - window) return;
  float* dst = ring[chunk] + ring_offset + (L.position[r] % window) * hd;
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) dst[c] = kv[r * hd + c];
}

// --- MoE ------------------------------------------------------------------------------------------------------

// One thread per row (experts ≤ a few hundred, k ≤ 16): the CPU's scoring and selection, in its order.
// One warp per row: lanes score their experts (e ≡ lane mod 32), then k rounds of a warp-wide argmax pick the
// experts in the CPU's order (higher biased score first, lower index on ties).
constexpr int kMaxExpertsPerToken = 16;
__global__ void route_kernel(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens,
                             int64_t rows, int64_t experts, int64_t k, int scoring_func, float routed_scaling,
                             float* scores, int32_t* ids, float* weights) {
  const int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // the whole warp
  const float* in = logits + r * experts;
  float* s = scores + r * experts;
  if (scoring_func == 2) {  // softmax
    float m = -FLT_MAX, sum = 0.0f;
    for (int64_t e = lane; e < experts; e += 32) m = fmaxf(m, in[e]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    for (int64_t e = lane; e < experts; e += 32) sum += expf(in[e] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int64_t e = lane; e < experts; e += 32) s[e] = expf(in[e] - m) / sum;
  } else {
    for (int64_t e = lane; e < experts; e += 32) {
      const float x = in[e];
      s[e] = scoring_func == 0 ? sqrtf(x > 20.0f ? x : log1pf(expf(x))) : 1.0f / (1.0f + expf(-x));
    }
  }
  __syncwarp();
  int32_t* chosen = ids + r * k;
  int32_t mine[kMaxExpertsPerToken];
  if (tid2eid) {
    for (int64_t j = 0; j < k; ++j) mine[j] = tid2eid[static_cast<int64_t>(tokens[r]) * k + j];
  } else {
    for (int64_t j = 0; j < k; ++j) {
      float best_v = -FLT_MAX;
      int32_t best = INT32_MAX;
      for (int64_t e = lane; e < experts; e += 32) {
        bool taken = false;
        for (int64_t p = 0; p < j; ++p) taken |= mine[p] == e;
        const float v = s[e] + (bias ? bias[e] : 0.0f);
        if (!taken && (best == INT32_MAX || v > best_v)) best = static_cast<int32_t>(e), best_v = v;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
        const int32_t oe = __shfl_xor_sync(0xffffffffu, best, o);
        if (oe != INT32_MAX && (best == INT32_MAX || ov > best_v || (ov == best_v && oe < best))) best = oe, best_v = ov;
      }
      mine[j] = best;
    }
  }
  if (lane == 0) {
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += s[mine[j]];
    for (int64_t j = 0; j < k; ++j) {
      chosen[j] = mine[j];
      weights[r * k + j] = s[mine[j]] / (sum + 1e-20f) * routed_scaling;
    }
  }
}

template <typename T>
__global__ void gather_rows_kernel(const float* x, const int32_t* index, T* y, int64_t d) {
  const float* src = x + static_cast<int64_t>(index[blockIdx.x]) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) y[blockIdx.x * d + c] = from_float<T>(src[c]);
}

template <typename T>
__global__ void swiglu_kernel(const float* gate, const float* up, T* h, int64_t n, float limit) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
  h[i] = from_float<T>(g / (1.0f + expf(-g)) * u);
}

// Blocks over (row, column slice): a decode step's one row still spreads over the GPU.
__global__ void moe_combine_kernel(const float* base, const float* routed, const int32_t* slot, const float* weight,
                                   float* out, int64_t k, int64_t d) {
  const int64_t r = blockIdx.x, c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= d) return;
  float acc = 0.0f;
  for (int64_t j = 0; j < k; ++j) acc += routed[static_cast<int64_t>(slot[r * k + j]) * d + c] * weight[r * k + j];
  out[r * d + c] = acc + (base ? base[r * d + c] : 0.0f);
}

}  // namespace

void to_gemm_input(const float* x, void* y, int64_t n, GemmType type, cudaStream_t stream) {
  if (n == 0) return;
  if (type == GemmType::Bf16)
    to_gemm_input_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, static_cast<__nv_bfloat16*>(y), n);
  else
    to_gemm_input_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, static_cast<float*>(y), n);
  STRATA_CUDA_CHECK_LAUNCH();
}

void embed(const void* table, GemmType type, const int32_t* tokens, float* out, int64_t rows, int64_t d,
           int64_t copies, cudaStream_t stream) {
  if (rows == 0) return;
  if (type == GemmType::Bf16)
    embed_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(table), tokens, out, d, copies);
  else
    embed_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(
        static_cast<const float*>(table), tokens, out, d, copies);
  STRATA_CUDA_CHECK_LAUNCH();
}

// The partial sums, then each row's hc pre weights after them.
int64_t mix_partial_floats(int64_t rows, int64_t n, int64_t width) { return rows * mix_splits(width) * (1 + n) + rows * 8; }

void hc_pre(const float* streams, const float* fn, const float* base, const float* scale, float* collapsed,
            float* mix_out, int64_t rows, int64_t hc, int64_t d, float norm_eps, float hc_eps, int64_t sinkhorn_iters,
            float* partial, cudaStream_t stream, const float* mixes) {
  if (rows == 0) return;
  if (hc > 8) fail("hc_pre: hc_mult ", hc, " above the CUDA backend's limit of 8");
  const int64_t n = (2 + hc) * hc, splits = mixes ? 1 : mix_splits(hc * d);
  float* pre = partial + rows * splits * (1 + n);
  if (mixes) {
    mix_from_products_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(streams, mixes, hc * d, n, partial);
  } else {
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((n + kMixGroup - 1) / kMixGroup),
                    static_cast<unsigned>(splits));
    mix_partials_kernel<<<grid, kThreads, 0, stream>>>(streams, nullptr, fn, hc * d, n, partial);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  hc_pre_kernel<<<static_cast<unsigned>(rows), 32, 0, stream>>>(partial, splits, base, scale, mix_out, pre, hc, d,
                                                                norm_eps, hc_eps, sinkhorn_iters);
  STRATA_CUDA_CHECK_LAUNCH();
  hc_collapse_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(streams, nullptr, pre,
                                                                                              collapsed, hc, d);
  STRATA_CUDA_CHECK_LAUNCH();
}

void hc_post(const float* mix, const float* block_out, float* streams, int64_t rows, int64_t hc, int64_t d,
             cudaStream_t stream) {
  if (rows == 0) return;
  if (hc > 8) fail("hc_post: hc_mult ", hc, " above the CUDA backend's limit of 8");
  hc_post_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(mix, block_out, streams,
                                                                                          hc, d);
  STRATA_CUDA_CHECK_LAUNCH();
}

void hyper_head(const float* streams, const int32_t* rows, const float* fn, const float* base, const float* scale,
                float* y, int64_t n, int64_t hc, int64_t d, float norm_eps, float hc_eps, float* partial,
                cudaStream_t stream) {
  if (n == 0) return;
  if (hc > 8) fail("hyper_head: hc_mult ", hc, " above the CUDA backend's limit of 8");
  const int64_t splits = mix_splits(hc * d);
  float* pre = partial + n * splits * (1 + hc);
  mix_partials_kernel<<<dim3(static_cast<unsigned>(n), 1, static_cast<unsigned>(splits)), kThreads, 0, stream>>>(
      streams, rows, fn, hc * d, hc, partial);
  STRATA_CUDA_CHECK_LAUNCH();
  hyper_head_kernel<<<static_cast<unsigned>(n), 32, 0, stream>>>(partial, splits, base, scale, pre, hc, d, norm_eps,
                                                                 hc_eps);
  STRATA_CUDA_CHECK_LAUNCH();
  hc_collapse_kernel<<<dim3(static_cast<unsigned>(n), blocks_for(d)), kThreads, 0, stream>>>(streams, rows, pre, y, hc,
                                                                                           d);
  STRATA_CUDA_CHECK_LAUNCH();
}

void compress(const CompressorStep& c, const StepLayout& rows, const int32_t* work, int64_t n_work,
              cudaStream_t stream) {
  if (c.dim > 1024) fail("compress: entry width ", c.dim, " above the CUDA backend's limit of 1024");
  if (n_work > 0) {
    const int threads = static_cast<int>((c.dim + 31) / 32 * 32);
    compress_entries_kernel<<<static_cast<unsigned>(n_work), threads, static_cast<size_t>(c.dim) * sizeof(float),
                              stream>>>(c, rows, work);
    STRATA_CUDA_CHECK_LAUNCH();
  }
  if (c.overlap && rows.chunks > 0) {
    compress_overlap_kernel<<<static_cast<unsigned>(rows.chunks), kThreads, 0, stream>>>(c, rows);
    STRATA_CUDA_CHECK_LAUNCH();
  }
  if (rows.rows > 0) {
    compress_pending_kernel<<<static_cast<unsigned>(rows.rows), kThreads, 0, stream>>>(c, rows);
    STRATA_CUDA_CHECK_LAUNCH();
  }
}

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

void attention_keys(const float* kv, float* const* ring, int64_t ring_offset, int64_t window, int64_t head_dim,
                    KeyEntries mode, const EntryTable& entries, int64_t rate, const int32_t* picks,
                    const int32_t* pick_count, int64_t topk, const StepLayout& rows, int64_t max_keys,
                    const float** keys, int32_t* key_count, cudaStream_t stream) {
  if (rows.rows == 0) return;
  attention_keys_kernel<<<static_cast<unsigned>(rows.rows), kThreads, 0, stream>>>(
      kv, ring, ring_offset, window, head_dim, mode, entries, rate, picks, pick_count, topk, rows, max_keys, keys,
      key_count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void update_window(const float* kv, float* const* ring, int64_t ring_offset, int64_t window, int64_t head_dim,
                   const StepLayout& rows, cudaStream_t stream) {
  if (rows.rows == 0) return;
  update_window_kernel<<<static_cast<unsigned>(rows.rows), kThreads, 0, stream>>>(kv, ring, ring_offset, window,
                                                                                  head_dim, rows);
  STRATA_CUDA_CHECK_LAUNCH();
}

void route(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens, int64_t rows,
           int64_t experts, int64_t k, int scoring_func, float routed_scaling, float* scores, int32_t* ids,
           float* weights, cudaStream_t stream) {
  if (rows == 0) return;
  if (k > kMaxExpertsPerToken) fail("route: ", k, " experts per token above the CUDA backend's limit of ", kMaxExpertsPerToken);
  route_kernel<<<blocks_for(rows * 32, kThreads), kThreads, 0, stream>>>(logits, bias, tid2eid, tokens, rows, experts, k,
                                                                        scoring_func, routed_scaling, scores, ids,
                                                                        weights);
  STRATA_CUDA_CHECK_LAUNCH();
}

void gather_rows(const float* x, const int32_t* index, void* y, int64_t n, int64_t d, GemmType type,
                 cudaStream_t stream) {
  if (n == 0) return;
  if (type == GemmType::Bf16)
    gather_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, index, static_cast<__nv_bfloat16*>(y), d);
  else
    gather_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, index, static_cast<float*>(y), d);
  STRATA_CUDA_CHECK_LAUNCH();
}

void swiglu(const float* gate, const float* up, void* h, int64_t n, float limit, GemmType type, cudaStream_t stream) {
  if (n == 0) return;
  if (type == GemmType::Bf16)
    swiglu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, static_cast<__nv_bfloat16*>(h), n, limit);
  else
    swiglu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, static_cast<float*>(h), n, limit);
  STRATA_CUDA_CHECK_LAUNCH();
}

void moe_combine(const float* base, const float* routed, const int32_t* slot, const float* weight, float* out,
                 int64_t rows, int64_t k, int64_t d, cudaStream_t stream) {
  if (rows == 0) return;
  moe_combine_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(base, routed, slot,
                                                                                             weight, out, k, d);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
