#pragma once
// A step's rows and each compressor's entries (in token blocks) on the device, as the V4 kernels read them (begin_step,
// cuda_backend.cpp, uploads both).
#include <cstdint>

namespace strata::cuda {

// Where a compressor's entries are: entry n of chunk c is at
//   arena + pages[c · max_pages + n / per_page] · page_floats + (n % per_page) · dim,
// with pages = the chunks' token-block tables, arena = the block pool + this compressor's offset in a block and
// page_floats = a whole block's floats (model/state_layout.h).
struct EntryTable {
  const float* arena = nullptr;
  const int32_t* pages = nullptr;
  int64_t max_pages = 0, page_floats = 0, per_page = 0, dim = 0;
};

// Per-step rows: position and chunk of every row; first row, first position, row count and window floor of every
// chunk.
struct StepLayout {
  const int32_t* position = nullptr;
  const int32_t* chunk = nullptr;
  const int32_t* first = nullptr;
  const int32_t* pos0 = nullptr;
  const int32_t* count = nullptr;
  int64_t rows = 0, chunks = 0;
  const int32_t* window_floor = nullptr;  // per chunk: attention looks no further back (bounded replay; else 0)
};

}  // namespace strata::cuda
