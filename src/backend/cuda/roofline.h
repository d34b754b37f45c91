#pragma once
// The CUDA device's two ceilings, measured rather than taken from a datasheet, so a benchmark can say how far each
// step is from the hardware floor (src/bench/step_floor.h). Plain C++: callers need no CUDA headers. Defined only
// in builds with CUDA (STRATA_WITH_CUDA); run them before the model takes the device memory (they borrow ~4.5 GiB).
namespace strata::cuda {

// Device-to-device copy bandwidth in GB/s (1e9 bytes), counting bytes read plus bytes written: cudaMemcpy of 2 GiB
// after a warm-up, the median of several timed batches (CUDA events).
double measure_copy_bandwidth_gbs();

// Dense bf16 matrix product in TFLOP/s: cuBLASLt 8192 × 8192 × 8192 with fp32 accumulation, through the backend's
// Gemm (the same descriptors the model's products use), the median of several timed batches after a warm-up.
double measure_bf16_gemm_tflops();

}  // namespace strata::cuda
