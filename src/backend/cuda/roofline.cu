#include "backend/cuda/roofline.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"

namespace strata::cuda {

namespace {

// Owned device memory for one measurement.
struct DeviceBlock {
  void* p = nullptr;
  explicit DeviceBlock(size_t bytes) { STRATA_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBlock() { cudaFree(p); }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
};

// Seconds per call of `launch` (which enqueues work on `stream`): batches of `per_batch` calls between two events,
// so the host's launch overhead hides behind the device's work; one warm-up batch; the median batch.
double median_seconds(const std::function<void()>& launch, cudaStream_t stream, int batches, int per_batch) {
  cudaEvent_t start, stop;
  STRATA_CUDA_CHECK(cudaEventCreate(&start));
  STRATA_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> seconds;
  for (int b = 0; b <= batches; ++b) {
    STRATA_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < per_batch; ++i) launch();
    STRATA_CUDA_CHECK(cudaEventRecord(stop, stream));
    STRATA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (b > 0) seconds.push_back(1e-3 * ms / per_batch);  // batch 0 warms up clocks, caches and plans
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

// Values in [-1, 1) from a hash of the index: zeros would flatter the product (less switching, lower power).
__global__ void fill_bf16(__nv_bfloat16* x, int64_t n, uint32_t salt) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ salt;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

}  // namespace

double measure_copy_bandwidth_gbs() {
  const size_t bytes = size_t{2} << 30;
  DeviceBlock src(bytes), dst(bytes);
  STRATA_CUDA_CHECK(cudaMemset(src.p, 1, bytes));
  cudaStream_t stream;
  STRATA_CUDA_CHECK(cudaStreamCreate(&stream));
  const double s = median_seconds(
      [&] { STRATA_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, stream)); }, stream, 7, 4);
  STRATA_CUDA_CHECK(cudaStreamDestroy(stream));
  return 2.0 * static_cast<double>(bytes) / s / 1e9;  // every byte is read once and written once
}

double measure_bf16_gemm_tflops() {
  const int64_t n = 8192;
  const size_t elements = static_cast<size_t>(n * n);
  DeviceBlock x(elements * sizeof(__nv_bfloat16)), w(elements * sizeof(__nv_bfloat16)), y(elements * sizeof(float));
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(x.p), n * n, 1u);
  STRATA_CUDA_CHECK_LAUNCH();
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(w.p), n * n, 2u);
  STRATA_CUDA_CHECK_LAUNCH();
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream;
  STRATA_CUDA_CHECK(cudaStreamCreate(&stream));
  double s = 0;
  {
    Gemm gemm;
    s = median_seconds(
        [&] {
          gemm.bf16(static_cast<const __nv_bfloat16*>(x.p), static_cast<const __nv_bfloat16*>(w.p),
                    static_cast<float*>(y.p), n, n, n, stream);
        },
        stream, 7, 5);
  }
  STRATA_CUDA_CHECK(cudaStreamDestroy(stream));
  return 2.0 * static_cast<double>(n) * n * n / s / 1e12;
}

}  // namespace strata::cuda
