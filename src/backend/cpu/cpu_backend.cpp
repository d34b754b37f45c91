// CpuBackend's step (begin_step). Its ops are in one file per concept: linear.cpp, norm_rope.cpp, mhc.cpp,
// compressor.cpp, indexer.cpp, attention.cpp, moe.cpp (src/backend/README.md lists them); ops.cpp holds the numeric
// kernels they share.
#include "backend/cpu/cpu_backend.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace strata::cpu {

using namespace model::v4;

namespace {

// Every step allocates and frees the same temporaries (a few MB at batch 256). glibc's default keeps adjusting its
// thresholds so that it hands the top of the heap back to the kernel after a step, and the next step page-faults
// it in again: 10-20% of a tiny model's step. Once a CPU forward runs, the process keeps what it freed (up to
// 128 MiB) and serves blocks below 32 MiB (glibc's own ceiling for its adaptive threshold) from the heap.
void keep_freed_memory() {
#if defined(__GLIBC__)
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
    return true;
  }();
  (void)once;
#endif
}

}  // namespace

void CpuBackend::begin_step(const Step&) {
  keep_freed_memory();
  rope_rows_.clear();
}

}  // namespace strata::cpu
