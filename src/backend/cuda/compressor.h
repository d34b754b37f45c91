#pragma once
// The compressor's step on the device (compressor.cuh): CSA/HCA windows closing into entries. CudaBackend::compress
// is in compressor.cpp. Pointers are device pointers.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/step_layout.h"

namespace strata::cuda {

// One compressor's step (CpuBackend::compress). `work` lists (chunk, window) pairs of the windows that close in
// this step; `state` holds each chunk's rings of raw projections (ring_kv, ring_gate [ring_rows, width], position p
// in row p % ring_rows: model/state_layout.h) at state[c] + offset.
struct CompressorStep {
  const float* kv = nullptr;    // this step's projections [rows, width]
  const float* gate = nullptr;  // [rows, width]
  const float* ape = nullptr;   // [rate, width]
  const float* norm = nullptr;  // [dim]
  float* const* state = nullptr;  // per chunk: its sequence's fixed-state base
  int64_t ring_kv = 0, ring_gate = 0, ring_rows = 0;  // offsets in floats, rows
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

}  // namespace strata::cuda
