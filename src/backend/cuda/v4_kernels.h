#pragma once
// DeepSeek-V4 kernels of the CUDA backend (v4_kernels.cu): each is the device form of one CpuBackend op (or part of
// one) and has the same meaning; cuda_backend.cpp strings them together. Pointers are device pointers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace strata::cuda {

// Where a compressor's entries are: entry n of chunk c is at
//   arena + pages[c · max_pages + n / per_page] · page_floats + (n % per_page) · dim.
struct EntryTable {
  const float* arena = nullptr;
  const int32_t* pages = nullptr;
  int64_t max_pages = 0, page_floats = 0, per_page = 0, dim = 0;
};

// Per-step rows: position and chunk of every row; first row, first position and row count of every chunk.
struct StepLayout {
  const int32_t* position = nullptr;
  const int32_t* chunk = nullptr;
  const int32_t* first = nullptr;
  const int32_t* pos0 = nullptr;
  const int32_t* count = nullptr;
  int64_t rows = 0, chunks = 0;
};

// y[i] = x[i] as `type` (bf16 rounds; fp32 copies) for i < n: activations into GEMM operands.
void to_gemm_input(const float* x, void* y, int64_t n, GemmType type, cudaStream_t stream);
// out[r, h·d + c] = table[tokens[r], c] for h < copies; the table's elements are of `type`.
void embed(const void* table, GemmType type, const int32_t* tokens, float* out, int64_t rows, int64_t d,
           int64_t copies, cudaStream_t stream);

// Floats of scratch hc_pre / hyper_head need for `rows` rows of `n` mixes over streams of `width` (per-slice sums).
int64_t mix_partial_floats(int64_t rows, int64_t n, int64_t width);
// mHC pre: from streams [rows, hc·d]: mix = fn · rmsnorm(streams), pre/post/comb (Sinkhorn), collapsed = Σ pre·stream.
// mix_out: [rows, hc + hc·hc] (post, then comb row-major). `partial`: mix_partial_floats(rows, (2 + hc)·hc, hc·d).
// `mixes` (optional): the products fn · streams [rows, (2 + hc)·hc] made by the caller (an fp32 GEMM, for many
// rows: the slice kernel's block reductions cost 2.5 ms at 4,096 rows); only the rows' Σx² are then taken here.
void hc_pre(const float* streams, const float* fn, const float* base, const float* scale, float* collapsed,
            float* mix_out, int64_t rows, int64_t hc, int64_t d, float norm_eps, float hc_eps, int64_t sinkhorn_iters,
            float* partial, cudaStream_t stream, const float* mixes = nullptr);
// streams[k] ← post[k] · block_out + Σ_j comb[j][k] · streams[j]  (in place).
void hc_post(const float* mix, const float* block_out, float* streams, int64_t rows, int64_t hc, int64_t d,
             cudaStream_t stream);
// The HyperHead's collapse of the streams of rows[i] into y[i].
// `partial`: mix_partial_floats(n, hc, hc·d).
void hyper_head(const float* streams, const int32_t* rows, const float* fn, const float* base, const float* scale,
                float* y, int64_t n, int64_t hc, int64_t d, float norm_eps, float hc_eps, float* partial,
                cudaStream_t stream);

// One compressor's step (CpuBackend::compress). `work` lists (chunk, window) pairs of the windows that close in
// this step; `state` holds each chunk's pending/overlap buffers (pending_kv, pending_gate [rate, width],
// overlap_kv, overlap_gate [rate, dim]) at state[c] + offset.
struct CompressorStep {
  const float* kv = nullptr;    // this step's projections [rows, width]
  const float* gate = nullptr;  // [rows, width]
  const float* ape = nullptr;   // [rate, width]
  const float* norm = nullptr;  // [dim]
  float* const* state = nullptr;  // per chunk: its sequence's fixed-state base
  int64_t pending_kv = 0, pending_gate = 0, overlap_kv = 0, overlap_gate = 0;  // offsets in floats
  int64_t rate = 0, width = 0, dim = 0;
  bool overlap = false;
  const float* inv_freq = nullptr;  // compress RoPE [half]
  int64_t rope_half = 0;
  float rope_scaling = 1.0f, eps = 1e-6f;
  EntryTable entries;
  float* entries_out = nullptr;  // == entries.arena, writable
};
void compress(const CompressorStep& c, const StepLayout& rows, const int32_t* work, int64_t n_work,
              cudaStream_t stream);

// Lightning Indexer: scores of every visible entry, then the top-k (score desc, index asc) per row.
// picks [rows, topk], pick_count [rows]. `scratch` holds rows · max_visible floats.
void indexer_topk(const float* q, const float* head_w, const EntryTable& entries, const StepLayout& rows,
                  int64_t rate, int64_t heads, int64_t head_dim, int64_t topk, int64_t max_visible, float* scratch,
                  int32_t* picks, int32_t* pick_count, cudaStream_t stream);
// The selection alone (indexer_topk's second step, and what ops_check times): the top-k of each row's visible
// scores, already in `scores` [rows, max_visible]. topk < 4096.
void indexer_select(const float* scores, const StepLayout& rows, int64_t rate, int64_t max_visible, int64_t topk,
                    int32_t* picks, int32_t* pick_count, cudaStream_t stream);

// Each row's key pointers for sparse_attention: its window (this step's kv rows, older ones from the ring at
// ring[c] + ring_offset), then entries (all closed ones, or the picked ones).
enum class KeyEntries { None, All, Picked };
void attention_keys(const float* kv, float* const* ring, int64_t ring_offset, int64_t window, int64_t head_dim,
                    KeyEntries mode, const EntryTable& entries, int64_t rate, const int32_t* picks,
                    const int32_t* pick_count, int64_t topk, const StepLayout& rows, int64_t max_keys,
                    const float** keys, int32_t* key_count, cudaStream_t stream);
// The last `window` kv rows of each chunk into its ring.
void update_window(const float* kv, float* const* ring, int64_t ring_offset, int64_t window, int64_t head_dim,
                   const StepLayout& rows, cudaStream_t stream);

// Router: logits [rows, experts] (scores written to `scores`) → per row k expert ids and weights (score function, hash or biased
// top-k selection, normalisation, routed scaling).
void route(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens, int64_t rows,
           int64_t experts, int64_t k, int scoring_func, float routed_scaling, float* scores, int32_t* ids,
           float* weights, cudaStream_t stream);
// y[i] = x[index[i]] as `type`, rows of d, for i < n.
void gather_rows(const float* x, const int32_t* index, void* y, int64_t n, int64_t d, GemmType type,
                 cudaStream_t stream);
// h = silu(min(gate, L)) · clamp(up, −L, L) as `type`, for [n, inter].
void swiglu(const float* gate, const float* up, void* h, int64_t n, float limit, GemmType type, cudaStream_t stream);
// out[r] = base[r] + Σ_j weight[r, j] · routed[slot[r, j]] over j < k (base may be null).
void moe_combine(const float* base, const float* routed, const int32_t* slot, const float* weight, float* out,
                 int64_t rows, int64_t k, int64_t d, cudaStream_t stream);

}  // namespace strata::cuda
