#pragma once
// Kernels of compressor.h: a compressor's closing windows and its ring of raw projections.
// Compiled once, through v4_kernels.cu (one nvcc translation unit for every V4 kernel: see there).
#include "backend/cuda/compressor.h"
#include "backend/cuda/v4_device.cuh"

namespace strata::cuda {

namespace {

// The (kv, gate) pair of window position j of window w, own half (`half_offset` = dim with overlap) or the
// next-window half (offset 0): from this step's rows when the token is in this step, else from the ring of raw
// projections (position q in row q % ring_rows; state_layout.h keeps every position an entry still needs).
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
      const int64_t row = q % c.ring_rows;
      kv = state[c.ring_kv + row * c.width + col];
      gate = state[c.ring_gate + row * c.width + col];
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
        src.get(w - 1, j, ch, kv, gate);
        add(gate + c.ape[j * c.width + ch], kv);
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

// After the entries: every token's raw projections go to the ring, the last ring_rows of each chunk (earlier ones
// would be overwritten within the chunk, and no later step needs them).
__global__ void compress_ring_kernel(CompressorStep c, StepLayout L) {
  const int64_t r = blockIdx.x, chunk = L.chunk[r];
  if (r - L.first[chunk] < L.count[chunk] - c.ring_rows) return;
  float* state = c.state[chunk];
  const int64_t row = L.position[r] % c.ring_rows;
  for (int64_t col = threadIdx.x; col < c.width; col += blockDim.x) {
    state[c.ring_kv + row * c.width + col] = c.kv[r * c.width + col];
    state[c.ring_gate + row * c.width + col] = c.gate[r * c.width + col];
  }
}

}  // namespace

void compress(const CompressorStep& c, const StepLayout& rows, const int32_t* work, int64_t n_work,
              cudaStream_t stream) {
  if (c.dim > 1024) fail("compress: entry width ", c.dim, " above the CUDA backend's limit of 1024");
  if (n_work > 0) {
    const int threads = static_cast<int>((c.dim + 31) / 32 * 32);
    compress_entries_kernel<<<static_cast<unsigned>(n_work), threads, static_cast<size_t>(c.dim) * sizeof(float),
                              stream>>>(c, rows, work);
    STRATA_CUDA_CHECK_LAUNCH();
  }
  if (rows.rows > 0) {
    compress_ring_kernel<<<static_cast<unsigned>(rows.rows), kThreads, 0, stream>>>(c, rows);
    STRATA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace strata::cuda
