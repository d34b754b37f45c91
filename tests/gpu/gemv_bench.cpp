// Times and checks the decode products of gemv.h on the GPU machine: the previous kernel (gemv_legacy) against the
// current one (gemv) on the shapes a V4-Flash decode step reads — the 64 MB matrices, the grouped o-projection
// (8 groups of 1024 × 4096, as linear.cpp lays it out), the small attention projections and the vocabulary
// head — at 1, 2, 4 and 8 rows; then one layer's seven attention-input projections of the same activation as seven
// gemv calls against one gemv_many.
// Checks: every output against a CPU double-precision reference (|y - ref| ≤ 1e-5 · Σ|w·x|), each row of an m-row
// product bit-identical to the 1-row product of that row, gemv_many bit-identical to the separate gemv calls.
// Timing: median of 25 launches after warm-up, each its own cudaEvent pair, each on the next of enough copies of the
// weights (≥ 256 MB in all, five times the L2) that none is still cached. (Flushing by writing a buffer instead leaves
// the L2 full of dirty lines whose write-back the timed kernel would pay for.)
// Usage: strata_gpu_gemv_bench [OUT.json [COMMIT]]   (JSON to stdout when no path is given; exit status 1 if a
// check fails)
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "cli/git_commit.h"
#include "run_provenance.h"

using strata::cuda::DeviceBuffer;
namespace sc = strata::cuda;

namespace {

constexpr int64_t kRows = 8;        // activation rows generated; an m-row product reads the first m
constexpr double kBound = 1e-5;     // relative to Σ|w·x|
constexpr double kRotationBytes = 256.0 * (1 << 20);

// Copies of `bytes` of weights to rotate through so that a launch finds none of its weights in the L2.
int64_t copies_for(double bytes) { return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(kRotationBytes / bytes))); }

// Random bf16 values of magnitude in [1/64, 1], either sign: never zero, so a skipped element always shows.
std::vector<__nv_bfloat16> random_bf16(size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> magnitude(1.0f / 64, 1.0f);
  std::vector<__nv_bfloat16> out(count);
  for (auto& v : out) v = __float2bfloat16(rng() % 2 ? magnitude(rng) : -magnitude(rng));
  return out;
}

std::vector<float> widen(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// ref[t · ldy + g · stride_y + r] = Σ_c x[t · ldx + g · stride_x + c] · w[g · stride_w + r · k + c] in double, and
// the same sum of magnitudes (the error's scale), for kRows rows; rows spread over the machine's threads.
struct Reference {
  std::vector<double> value, scale;
};
Reference reference(const std::vector<float>& x, int64_t ldx, int64_t stride_x, const std::vector<float>& w,
                    int64_t stride_w, int64_t ldy, int64_t stride_y, int64_t n, int64_t k, int64_t batch) {
  Reference ref{std::vector<double>(static_cast<size_t>(kRows * ldy)), std::vector<double>(static_cast<size_t>(kRows * ldy))};
  const int64_t total = n * batch;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int id = 0; id < threads; ++id)
    pool.emplace_back([&, id] {
      for (int64_t i = id; i < total; i += threads) {
        const int64_t g = i / n, r = i % n;
        const float* wr = w.data() + g * stride_w + r * k;
        for (int64_t t = 0; t < kRows; ++t) {
          const float* xr = x.data() + t * ldx + g * stride_x;
          double sum = 0, mag = 0;
          for (int64_t c = 0; c < k; ++c) {
            const double p = static_cast<double>(wr[c]) * static_cast<double>(xr[c]);
            sum += p, mag += std::fabs(p);
          }
          const auto at = static_cast<size_t>(t * ldy + g * stride_y + r);
          ref.value[at] = sum, ref.scale[at] = mag;
        }
      }
    });
  for (auto& th : pool) th.join();
  return ref;
}

// Largest |y - ref| / Σ|w·x| over the first m rows (∞ for a NaN: an element never written).
double max_error(const std::vector<float>& y, const Reference& ref, int64_t m, int64_t ldy) {
  double worst = 0;
  for (size_t i = 0; i < static_cast<size_t>(m * ldy); ++i) {
    const double e = std::fabs(static_cast<double>(y[i]) - ref.value[i]) / std::max(ref.scale[i], 1e-30);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

bool same_bits(const float* a, const float* b, size_t count) { return std::memcmp(a, b, count * sizeof(float)) == 0; }

// Median time of one call (µs), each launch timed by its own events; once(i) runs on weight copy i mod copies.
double time_us(const std::function<void(int)>& once) {
  for (int i = 0; i < 3; ++i) once(i);
  cudaEvent_t t0, t1;
  STRATA_CUDA_CHECK(cudaEventCreate(&t0));
  STRATA_CUDA_CHECK(cudaEventCreate(&t1));
  std::vector<float> times;
  for (int i = 0; i < 25; ++i) {
    STRATA_CUDA_CHECK(cudaEventRecord(t0));
    once(i + 3);
    STRATA_CUDA_CHECK(cudaEventRecord(t1));
    STRATA_CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    times.push_back(ms);
  }
  STRATA_CUDA_CHECK(cudaEventDestroy(t0));
  STRATA_CUDA_CHECK(cudaEventDestroy(t1));
  std::sort(times.begin(), times.end());
  return 1e3 * static_cast<double>(times[times.size() / 2]);
}

struct Result {
  std::string name;
  int64_t m;
  double bytes, old_us, new_us, error;
  bool rows_identical;
};

// One line on stdout per case; the JSON collects them.
void print(const Result& r) {
  std::printf("%-22s m=%lld %9.2f MB  old %9.2f us %5.2f TB/s  new %9.2f us %5.2f TB/s  x%4.2f  err %.2e  %s\n",
              r.name.c_str(), static_cast<long long>(r.m), r.bytes / 1e6, r.old_us, r.bytes / r.old_us / 1e6, r.new_us,
              r.bytes / r.new_us / 1e6, r.old_us / r.new_us, r.error,
              r.error <= kBound && r.rows_identical ? "PASS" : "FAIL");
  std::fflush(stdout);
}

struct Shape {
  std::string name;
  int64_t n, k, batch;
};

// One gemv shape at m = 1, 2, 4, 8: checks, then old and new timed. x and y laid out as the grouped o-projection
// (linear.cpp): x [rows, batch·k] with group g at column g·k, y [rows, batch·n] with group g at column g·n.
void run_shape(const Shape& s, std::mt19937_64& rng, std::vector<Result>& results) {
  const int64_t ldx = s.batch * s.k, ldy = s.batch * s.n, stride_x = s.k, stride_y = s.n, stride_w = s.n * s.k;
  const auto hw = random_bf16(static_cast<size_t>(s.batch * s.n * s.k), rng);
  const auto hx = random_bf16(static_cast<size_t>(kRows * ldx), rng);
  const DeviceBuffer<__nv_bfloat16> x(hx);
  const auto size = hw.size();
  const int64_t copies = copies_for(2.0 * static_cast<double>(size));
  DeviceBuffer<__nv_bfloat16> w(size * static_cast<size_t>(copies));
  for (int64_t i = 0; i < copies; ++i)
    STRATA_CUDA_CHECK(cudaMemcpy(w.data() + static_cast<size_t>(i) * size, hw.data(), size * sizeof(__nv_bfloat16),
                                 cudaMemcpyHostToDevice));
  const Reference ref = reference(widen(hx), ldx, stride_x, widen(hw), stride_w, ldy, stride_y, s.n, s.k, s.batch);
  DeviceBuffer<float> y(static_cast<size_t>(kRows * ldy));
  if (!sc::gemv_applies(sc::GemmType::Bf16, x.data(), ldx, stride_x, w.data(), s.k, stride_w, 1, s.k))
    strata::fail("gemv_bench: gemv does not take ", s.name);
  auto product = [&](bool current, const __nv_bfloat16* xr, int64_t m, float* out, int copy = 0) {
    (current ? sc::gemv : sc::gemv_legacy)(sc::GemmType::Bf16, xr, ldx, stride_x,
                                           w.data() + static_cast<size_t>(copy % copies) * size, s.k, stride_w, out,
                                           ldy, stride_y, m, s.n, s.k, s.batch, nullptr);
  };
  // Each activation row alone: what every row of an m-row product must reproduce bit for bit.
  std::vector<float> single(static_cast<size_t>(kRows * ldy));
  for (int64_t t = 0; t < kRows; ++t) {
    y.fill_bytes(0xff);
    product(true, x.data() + t * ldx, 1, y.data());
    STRATA_CUDA_CHECK(cudaMemcpy(single.data() + t * ldy, y.data(), static_cast<size_t>(ldy) * sizeof(float),
                                 cudaMemcpyDeviceToHost));
  }
  for (const int64_t m : {1, 2, 4, 8}) {
    y.fill_bytes(0xff);
    product(true, x.data(), m, y.data());
    const auto out = y.download();
    y.fill_bytes(0xff);
    product(false, x.data(), m, y.data());
    const double old_error = max_error(y.download(), ref, m, ldy);
    if (!(old_error <= kBound)) std::printf("note: %s m=%lld: legacy kernel error %.2e\n", s.name.c_str(),
                                            static_cast<long long>(m), old_error);
    Result r{s.name, m, 2.0 * static_cast<double>(s.batch * s.n * s.k + m * ldx) + 4.0 * static_cast<double>(m * ldy),
             0, 0, max_error(out, ref, m, ldy), same_bits(out.data(), single.data(), static_cast<size_t>(m * ldy))};
    r.old_us = time_us([&](int i) { product(false, x.data(), m, y.data(), i); });
    r.new_us = time_us([&](int i) { product(true, x.data(), m, y.data(), i); });
    print(r);
    results.push_back(r);
  }
}

// A V4-Flash layer's attention inputs of one activation (k = 4096): wq_a 1024, wkv 512, the compressor's wkv and
// wgate (overlapping windows: 2 × 512 each), the indexer compressor's wkv and wgate (256 each), the indexer's
// weights_proj 64 — seven gemv calls (old) against one gemv_many (new), which must give the same bits.
void run_many(std::mt19937_64& rng, std::vector<Result>& results) {
  const int64_t k = 4096;
  const std::vector<int64_t> rows = {1024, 512, 1024, 1024, 256, 256, 64};
  const auto hx = random_bf16(static_cast<size_t>(kRows * k), rng);
  const DeviceBuffer<__nv_bfloat16> x(hx);
  const auto xf = widen(hx);
  std::vector<DeviceBuffer<__nv_bfloat16>> w;  // per target: `copies` copies of its matrix, one after another
  std::vector<DeviceBuffer<float>> y_many, y_each;
  std::vector<Reference> refs;
  std::vector<std::vector<__nv_bfloat16>> host;
  double weight_bytes = 0;
  for (const int64_t n : rows) {
    host.push_back(random_bf16(static_cast<size_t>(n * k), rng));
    refs.push_back(reference(xf, k, 0, widen(host.back()), 0, n, 0, n, k, 1));
    y_many.emplace_back(static_cast<size_t>(kRows * n));
    y_each.emplace_back(static_cast<size_t>(kRows * n));
    weight_bytes += 2.0 * static_cast<double>(n * k);
  }
  const int64_t copies = copies_for(weight_bytes);
  std::vector<std::vector<sc::GemvTarget>> targets(static_cast<size_t>(copies));  // per copy
  for (size_t j = 0; j < rows.size(); ++j) {
    const size_t size = host[j].size();
    w.emplace_back(size * static_cast<size_t>(copies));
    for (int64_t i = 0; i < copies; ++i) {
      STRATA_CUDA_CHECK(cudaMemcpy(w[j].data() + static_cast<size_t>(i) * size, host[j].data(),
                                   size * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
      targets[static_cast<size_t>(i)].push_back({w[j].data() + static_cast<size_t>(i) * size, rows[j], y_many[j].data()});
    }
  }
  const int count = static_cast<int>(rows.size());
  for (const int64_t m : {1, 4}) {
    if (!sc::gemv_many_applies(sc::GemmType::Bf16, x.data(), m, k, targets[0].data(), count))
      strata::fail("gemv_bench: gemv_many does not take the attention inputs");
    auto each = [&](bool current, int copy) {
      for (size_t j = 0; j < rows.size(); ++j)
        (current ? sc::gemv : sc::gemv_legacy)(sc::GemmType::Bf16, x.data(), k, 0,
                                               targets[static_cast<size_t>(copy % copies)][j].w, k, 0,
                                               y_each[j].data(), rows[j], 0, m, rows[j], k, 1, nullptr);
    };
    auto many = [&](int copy) {
      sc::gemv_many(sc::GemmType::Bf16, x.data(), m, k, targets[static_cast<size_t>(copy % copies)].data(), count,
                    nullptr);
    };
    for (size_t j = 0; j < rows.size(); ++j) y_each[j].fill_bytes(0xff), y_many[j].fill_bytes(0xff);
    each(true, 0);
    many(0);
    Result r{"attn_inputs_many", m, weight_bytes + 2.0 * static_cast<double>(m * k), 0, 0, 0, true};
    double rows_total = 0;
    for (size_t j = 0; j < rows.size(); ++j) {
      const auto a = y_many[j].download(), b = y_each[j].download();
      r.error = std::max(r.error, max_error(a, refs[j], m, rows[j]));
      r.rows_identical = r.rows_identical && same_bits(a.data(), b.data(), static_cast<size_t>(m * rows[j]));
      rows_total += 4.0 * static_cast<double>(m * rows[j]);
    }
    r.bytes += rows_total;
    const double legacy_us = time_us([&](int i) { each(false, i); });
    r.old_us = time_us([&](int i) { each(true, i); });
    r.new_us = time_us(many);
    std::printf("(7 gemv_legacy calls: %.2f us)\n", legacy_us);
    print(r);
    results.push_back(r);
  }
}

// fp32 operands (the reference precision) take other register budgets: checked against the reference, not timed.
bool check_fp32(int64_t m, int64_t n, int64_t k, std::mt19937_64& rng) {
  const auto hw = widen(random_bf16(static_cast<size_t>(n * k), rng)), hx = widen(random_bf16(static_cast<size_t>(kRows * k), rng));
  const DeviceBuffer<float> w(hw), x(hx);
  DeviceBuffer<float> y(static_cast<size_t>(kRows * n));
  y.fill_bytes(0xff);
  sc::gemv(sc::GemmType::Fp32, x.data(), k, 0, w.data(), k, 0, y.data(), n, 0, m, n, k, 1, nullptr);
  const double error = max_error(y.download(), reference(hx, k, 0, hw, 0, n, 0, n, k, 1), m, n);
  std::printf("fp32 %lldx%lldx%lld  err %.2e  %s\n", static_cast<long long>(m), static_cast<long long>(n),
              static_cast<long long>(k), error, error <= kBound ? "PASS" : "FAIL");
  return error <= kBound;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::mt19937_64 rng(11);
    std::vector<Result> results;
    const std::vector<Shape> shapes = {{"32768x1024", 32768, 1024, 1},   {"4096x8192", 4096, 8192, 1},
                                       {"8x(1024x4096)", 1024, 4096, 8}, {"1024x4096", 1024, 4096, 1},
                                       {"512x4096", 512, 4096, 1},       {"129280x4096", 129280, 4096, 1}};
    for (const Shape& s : shapes) run_shape(s, rng, results);
    run_many(rng, results);
    bool pass = true;
    for (const int64_t m : {1, 3, 5, 8}) pass = check_fp32(m, 1000, 2048, rng) && check_fp32(m, 4096, 1024, rng) && pass;
    std::FILE* out = argc > 1 ? std::fopen(argv[1], "w") : stdout;
    if (!out) strata::fail("gemv_bench: cannot write ", argv[1]);
    const strata::test::RunProvenance run = strata::test::run_provenance();
    std::fprintf(out,
                 "{\"benchmark\": \"cuda_gemv\", \"device\": {\"gpu\": \"%s\"}, \"date\": \"%s\", \"commit\": \"%s\",\n"
                 " \"config\": {\"timing\": \"median of 25 launches, each between its own events (~8 us of fixed cost per "
                 "launch included); weights rotated through copies of >= 256 MB so every launch reads them from DRAM\", "
                 "\"old\": \"gemv_legacy\", \"new\": \"gemv / gemv_many\"},\n \"cases\": [\n",
                 run.gpu.c_str(), run.date.c_str(), argc > 2 ? argv[2] : strata::cli::git_commit().c_str());
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      const bool ok = r.error <= kBound && r.rows_identical;
      pass = pass && ok;
      std::fprintf(out,
                   "  {\"case\": \"%s\", \"m\": %lld, \"bytes\": %.0f, \"old_us\": %.3f, \"old_tbps\": %.3f, "
                   "\"new_us\": %.3f, \"new_tbps\": %.3f, \"max_rel_error\": %.3e, \"bit_identical\": %s, "
                   "\"pass\": %s}%s\n",
                   r.name.c_str(), static_cast<long long>(r.m), r.bytes, r.old_us, r.bytes / r.old_us / 1e6, r.new_us,
                   r.bytes / r.new_us / 1e6, r.error, r.rows_identical ? "true" : "false", ok ? "true" : "false",
                   i + 1 < results.size() ? "," : "");
    }
    std::fprintf(out, "]}\n");
    if (out != stdout) std::fclose(out);
    std::printf("%s\n", pass ? "all checks PASS" : "some checks FAIL");
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 2;
  }
}
