// Every CUDA op against its CPU counterpart on fresh random inputs (never zeros), outputs poisoned before each run,
// error as ‖gpu − cpu‖ / ‖cpu‖ against the tolerance of the arithmetic (METHOD.md: fp32 far under 1e-3; bf16
// operands with fp32 accumulation ≈ 1e-6 against a reference that rounds its inputs the same way).
// Runs on the GPU machine (tests/gpu/run.sh); prints one row per check and exits non-zero on any failure.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/ops.h"
#include "core/dtype.h"

using strata::cuda::DeviceBuffer;

namespace {

int failures = 0;
std::mt19937_64 rng;

std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;  // also catches the NaN poison of unwritten elements
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

void report(const std::string& op, const std::string& shape, double err, double limit) {
  const bool ok = err <= limit;
  failures += !ok;
  std::printf("%-18s %-34s %10.2e %9.0e  %s\n", op.c_str(), shape.c_str(), err, limit, ok ? "PASS" : "FAIL");
}

void check_rms_norm(int64_t rows, int64_t cols, bool weighted) {
  const auto x = randn(static_cast<size_t>(rows * cols), 3.0f), w = randn(static_cast<size_t>(cols));
  strata::Mat ref(rows, cols);
  ref.v = x;
  strata::cpu::rms_norm_rows(ref, weighted ? w.data() : nullptr, 1e-6);
  DeviceBuffer<float> dx(x), dw(w), dy(x.size());
  dy.fill_bytes(0xff);
  strata::cuda::rms_norm(dx.data(), weighted ? dw.data() : nullptr, dy.data(), rows, cols, 1e-6f, nullptr);
  report("rms_norm", std::to_string(rows) + "x" + std::to_string(cols) + (weighted ? " weighted" : ""),
         rel_error(dy.download(), ref.v), 1e-6);
}

void check_rope(int64_t rows, int64_t heads, int64_t stride, int64_t half, bool inverse) {
  auto x = randn(static_cast<size_t>(rows * heads * stride));
  std::vector<float> cos(static_cast<size_t>(rows * half)), sin(cos.size());
  std::uniform_real_distribution<float> angle(-100.0f, 100.0f);
  for (size_t i = 0; i < cos.size(); ++i) {
    const float a = angle(rng);
    cos[i] = std::cos(a);
    sin[i] = std::sin(a);
  }
  const int64_t offset = stride - 2 * half;
  DeviceBuffer<float> dx(x), dc(cos), ds(sin);
  strata::cuda::rope_interleaved(dx.data(), rows, heads, stride, offset, half, dc.data(), ds.data(), inverse, nullptr);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      strata::cpu::rope_interleaved(x.data() + (r * heads + h) * stride + offset, half, cos.data() + r * half,
                                    sin.data() + r * half, inverse);
  report("rope", std::to_string(rows) + "x" + std::to_string(heads) + "x" + std::to_string(stride) +
                     (inverse ? " inverse" : ""),
         rel_error(dx.download(), x), 1e-6);
}

void check_attention(int64_t rows, int64_t heads, int64_t hd, int64_t pool, int64_t max_keys) {
  const auto q = randn(static_cast<size_t>(rows * heads * hd), 0.2f), keys = randn(static_cast<size_t>(pool * hd));
  const auto sinks = randn(static_cast<size_t>(heads));
  std::vector<int32_t> index(static_cast<size_t>(rows * max_keys), 0), count(static_cast<size_t>(rows));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(pool - 1));
  for (int64_t r = 0; r < rows; ++r) {
    count[r] = static_cast<int32_t>(1 + (r * 37) % max_keys);
    for (int32_t j = 0; j < count[r]; ++j) index[static_cast<size_t>(r * max_keys + j)] = pick(rng);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> ref(q.size(), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q.data() + (r * heads + h) * hd;
      std::vector<float> p(static_cast<size_t>(count[r] + 1));
      for (int32_t j = 0; j < count[r]; ++j)
        p[j] = strata::cpu::dot(qh, keys.data() + index[static_cast<size_t>(r * max_keys + j)] * hd, hd) * scale;
      p[static_cast<size_t>(count[r])] = sinks[static_cast<size_t>(h)];
      strata::cpu::softmax(p.data(), count[r] + 1);
      for (int32_t j = 0; j < count[r]; ++j)
        for (int64_t c = 0; c < hd; ++c)
          ref[static_cast<size_t>((r * heads + h) * hd + c)] += p[j] * keys[static_cast<size_t>(index[static_cast<size_t>(r * max_keys + j)] * hd + c)];
    }
  DeviceBuffer<float> dq(q), dk(keys), ds(sinks), dout(q.size());
  std::vector<const float*> pointers(index.size());
  for (size_t i = 0; i < index.size(); ++i) pointers[i] = dk.data() + static_cast<int64_t>(index[i]) * hd;
  DeviceBuffer<const float*> dp(pointers);
  DeviceBuffer<int32_t> dc(count);
  dout.fill_bytes(0xff);
  strata::cuda::sparse_attention(dq.data(), dp.data(), dc.data(), max_keys, ds.data(), dout.data(), rows, heads, hd,
                                 scale, nullptr);
  const std::string shape = std::to_string(rows) + "q " + std::to_string(heads) + "h " + std::to_string(hd) + "d " +
                            std::to_string(max_keys) + " keys";
  report("sparse_attention", shape, rel_error(dout.download(), ref), 1e-5);
  // The decode variant: keys split over blocks, then merged.
  DeviceBuffer<float> scratch(static_cast<size_t>(strata::cuda::attention_split_floats(rows, heads, hd, max_keys)));
  scratch.fill_bytes(0xff);
  dout.fill_bytes(0xff);
  strata::cuda::sparse_attention_split(dq.data(), dp.data(), dc.data(), max_keys, ds.data(), dout.data(), rows, heads,
                                       hd, scale, scratch.data(), nullptr);
  report("attention_split", shape, rel_error(dout.download(), ref), 1e-5);
}

void check_gemm(strata::cuda::Gemm& gemm, int64_t m, int64_t n, int64_t k) {
  // bf16 operands; the CPU reference multiplies the same bf16 values in fp32 (cpu::linear with a BF16 WeightRef).
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = strata::f32_to_bf16(v[i]);
    return h;
  };
  const auto xh = to_bf16(randn(static_cast<size_t>(m * k))), wh = to_bf16(randn(static_cast<size_t>(n * k), 0.05f));
  strata::Mat x(m, k);
  for (size_t i = 0; i < xh.size(); ++i) x.v[i] = strata::bf16_to_f32(xh[i]);
  const strata::WeightRef w{strata::DType::BF16, reinterpret_cast<const uint8_t*>(wh.data()), n, k};
  const strata::Mat ref = strata::cpu::linear(x, w);
  DeviceBuffer<uint16_t> dx(xh), dw(wh);
  DeviceBuffer<float> dy(static_cast<size_t>(m * n));
  dy.fill_bytes(0xff);
  gemm.bf16(reinterpret_cast<const __nv_bfloat16*>(dx.data()), reinterpret_cast<const __nv_bfloat16*>(dw.data()),
            dy.data(), m, n, k, nullptr);
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  report("gemm_bf16", shape, rel_error(dy.download(), ref.v), 1e-5);
  if (strata::cuda::gemv_applies(strata::cuda::GemmType::Bf16, dx.data(), k, 0, dw.data(), k, 0, m, k)) {
    dy.fill_bytes(0xff);
    strata::cuda::gemv(strata::cuda::GemmType::Bf16, dx.data(), k, 0, dw.data(), k, 0, dy.data(), n, 0, m, n, k, 1,
                       nullptr);
    report("gemv_bf16", shape, rel_error(dy.download(), ref.v), 1e-5);
  }
}

void check_gemm_fp32(strata::cuda::Gemm& gemm, int64_t m, int64_t n, int64_t k) {
  // The reference precision: fp32 operands in true fp32 arithmetic (no TF32, whose 10-bit mantissa would show
  // as ~1e-3 here), so only the summation order differs from the CPU.
  const std::vector<float> xv = randn(static_cast<size_t>(m * k)), wv = randn(static_cast<size_t>(n * k), 0.05f);
  strata::Mat x(m, k);
  x.v = xv;
  const strata::WeightRef w{strata::DType::F32, reinterpret_cast<const uint8_t*>(wv.data()), n, k};
  const strata::Mat ref = strata::cpu::linear(x, w);
  DeviceBuffer<float> dx(xv), dw(wv), dy(static_cast<size_t>(m * n));
  dy.fill_bytes(0xff);
  gemm.run(strata::cuda::GemmType::Fp32, dx.data(), k, dw.data(), k, dy.data(), n, m, n, k, nullptr);
  report("gemm_fp32", std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), rel_error(dy.download(), ref.v), 1e-6);
}

}  // namespace

int main() {
  const uint64_t seed = std::random_device{}();
  rng.seed(seed);
  std::printf("strata GPU op checks (seed %llu)\n%-18s %-34s %10s %9s\n", static_cast<unsigned long long>(seed), "op",
              "case", "rel.err", "limit");
  try {
    check_rms_norm(37, 4096, true);
    check_rms_norm(5, 512, false);
    check_rms_norm(1, 16384, true);
    check_rope(19, 8, 512, 32, false);
    check_rope(19, 8, 512, 32, true);
    check_rope(3, 64, 128, 32, false);
    check_attention(7, 16, 512, 300, 200);
    check_attention(33, 4, 512, 1000, 640);
    check_attention(2, 64, 128, 50, 16);
    strata::cuda::Gemm gemm;
    check_gemm(gemm, 1, 4096, 4096);
    check_gemm(gemm, 7, 1024, 512);
    check_gemm(gemm, 128, 2048, 4096);
    check_gemm(gemm, 333, 129, 64);
    check_gemm(gemm, 3, 1000, 2048);
    check_gemm(gemm, 8, 4096, 1024);
    check_gemm_fp32(gemm, 1, 4096, 4096);
    check_gemm_fp32(gemm, 128, 2048, 4096);
    check_gemm_fp32(gemm, 333, 129, 64);
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 2;
  }
  std::printf("%s: %d failing check(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
