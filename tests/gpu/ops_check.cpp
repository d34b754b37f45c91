// Every CUDA op against its CPU counterpart on fresh random inputs (never zeros), outputs poisoned before each run,
// error as ‖gpu − cpu‖ / ‖cpu‖ against the tolerance of the arithmetic (METHOD.md: fp32 far under 1e-3; bf16
// operands with fp32 accumulation ≈ 1e-6 against a reference that rounds its inputs the same way; FP8 below).
// Runs on the GPU machine (tests/gpu/run.sh); prints one row per check and exits non-zero on any failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/sampling.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_copies.h"
#include "backend/cuda/fp8.h"
#include "backend/cuda/gemm_fixed_order.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_gemm.h"
#include "backend/cuda/moe_mma.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/v4_kernels.h"
#include "core/dtype.h"
#include "engine/sampler.h"
#include "model/logits_stage.h"

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
    // Also catches the NaN poison of unwritten elements; the reference is checked too, so a NaN there fails
    // `err <= limit` as +inf rather than slipping through a comparison that NaN makes false.
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return INFINITY;
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

// Milliseconds `run` takes on the GPU, the median of `reps` runs after one warm-up (CUDA events around each).
template <typename Run>
float median_ms(int reps, const Run& run) {
  cudaEvent_t start, stop;
  STRATA_CUDA_CHECK(cudaEventCreate(&start));
  STRATA_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int rep = 0; rep <= reps; ++rep) {
    STRATA_CUDA_CHECK(cudaEventRecord(start));
    run();
    STRATA_CUDA_CHECK(cudaEventRecord(stop));
    STRATA_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (rep > 0) ms.push_back(t);
  }
  STRATA_CUDA_CHECK(cudaEventDestroy(start));
  STRATA_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
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

// The MTP layer's input streams (CpuBackend::join_streams: out[r, k·d + j] = per_stream[r·hc + k, j] + shared[r, j])
// and the rows a step keeps (keep_rows' gather): one float add or copy each, so exact.
void check_join_and_gather(int64_t rows, int64_t hc, int64_t d) {
  const auto per_stream = randn(static_cast<size_t>(rows * hc * d)), shared = randn(static_cast<size_t>(rows * d));
  std::vector<float> want(static_cast<size_t>(rows * hc * d));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < hc; ++k)
      for (int64_t j = 0; j < d; ++j)
        want[static_cast<size_t>((r * hc + k) * d + j)] =
            per_stream[static_cast<size_t>((r * hc + k) * d + j)] + shared[static_cast<size_t>(r * d + j)];
  DeviceBuffer<float> dp(per_stream), ds(shared), dout(want.size());
  dout.fill_bytes(0xff);
  strata::cuda::join_streams(dp.data(), ds.data(), dout.data(), rows, hc, d, nullptr);
  const std::string shape = std::to_string(rows) + "x" + std::to_string(hc) + "x" + std::to_string(d);
  report("join_streams", shape, rel_error(dout.download(), want), 0);
  // Rows in a shuffled order, one twice.
  std::vector<int32_t> picked;
  for (int64_t i = 0; i < rows; ++i) picked.push_back(static_cast<int32_t>((i * 7 + 3) % rows));
  picked.push_back(picked.front());
  std::vector<float> gathered_want;
  for (int32_t r : picked)
    gathered_want.insert(gathered_want.end(), want.begin() + r * hc * d, want.begin() + (r + 1) * hc * d);
  DeviceBuffer<int32_t> drows(picked);
  DeviceBuffer<float> dg(gathered_want.size());
  dg.fill_bytes(0xff);
  strata::cuda::gather_rows(dout.data(), hc * d, drows.data(), static_cast<int64_t>(picked.size()), dg.data(), nullptr);
  report("gather_rows", shape + " rows " + std::to_string(picked.size()), rel_error(dg.download(), gathered_want), 0);
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
  // The CPU's attention of these rows over given q and key values (the inputs, or copies rounded as a kernel does).
  auto reference = [&](const std::vector<float>& qv, const std::vector<float>& kv) {
    std::vector<float> out(qv.size(), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const float* qh = qv.data() + (r * heads + h) * hd;
        std::vector<float> p(static_cast<size_t>(count[r] + 1));
        for (int32_t j = 0; j < count[r]; ++j)
          p[j] = strata::cpu::dot(qh, kv.data() + index[static_cast<size_t>(r * max_keys + j)] * hd, hd) * scale;
        p[static_cast<size_t>(count[r])] = sinks[static_cast<size_t>(h)];
        strata::cpu::softmax(p.data(), count[r] + 1);
        for (int32_t j = 0; j < count[r]; ++j)
          for (int64_t c = 0; c < hd; ++c)
            out[static_cast<size_t>((r * heads + h) * hd + c)] +=
                p[j] * kv[static_cast<size_t>(index[static_cast<size_t>(r * max_keys + j)] * hd + c)];
      }
    return out;
  };
  const std::vector<float> ref = reference(q, keys);
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
  // The prefill variant on tensor cores rounds q, the keys and the probabilities to fp16: against the same sums over
  // fp16-rounded q and keys in fp32, what is left is the probabilities' rounding (2⁻¹² relative each, averaging out).
  if (!strata::cuda::attention_mma_supported(hd)) return;
  auto rounded = [](std::vector<float> v) {
    for (float& x : v) x = static_cast<float>(static_cast<_Float16>(x));
    return v;
  };
  const std::vector<float> ref_f16 = reference(rounded(q), rounded(keys));
  dout.fill_bytes(0xff);
  strata::cuda::sparse_attention_mma(dq.data(), dp.data(), dc.data(), max_keys, ds.data(), dout.data(), rows, heads,
                                     hd, scale, nullptr);
  const std::vector<float> got = dout.download();
  report("attention_mma", shape + " vs fp16 q,k", rel_error(got, ref_f16), 1e-3);
  report("attention_mma", shape + " vs fp32", rel_error(got, ref), 2e-3);
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

// The routed experts' output per grouped pair on the CPU, in double: pair p (rows_of[p], its expert e by the plan's
// expert starts `first`) gets W2_e · h with h = SwiGLU(W1_e·x, W3_e·x) clamped at `limit` and rounded to bf16 as
// the kernels store it. w1/w3/w2: each expert's weights as the kernel multiplies them.
using ExpertWeights = std::vector<std::vector<float>>;
std::vector<float> moe_reference(const std::vector<float>& x, int64_t hidden, int64_t inter,
                                 const std::vector<int32_t>& rows_of, const std::vector<int32_t>& first,
                                 const ExpertWeights& w1, const ExpertWeights& w3, const ExpertWeights& w2, float limit) {
  const auto experts = static_cast<int64_t>(w1.size());
  std::vector<float> ref(rows_of.size() * static_cast<size_t>(hidden));
  for (int64_t e = 0; e < experts; ++e)
    for (int32_t p = first[static_cast<size_t>(e)]; p < first[static_cast<size_t>(e) + 1]; ++p) {
      const float* xr = x.data() + rows_of[static_cast<size_t>(p)] * hidden;
      std::vector<float> h(static_cast<size_t>(inter));
      for (int64_t n = 0; n < inter; ++n) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < hidden; ++c) {
          g += static_cast<double>(w1[e][static_cast<size_t>(n * hidden + c)]) * xr[c];
          u += static_cast<double>(w3[e][static_cast<size_t>(n * hidden + c)]) * xr[c];
        }
        const float gf = std::min(static_cast<float>(g), limit), uf = std::clamp(static_cast<float>(u), -limit, limit);
        h[static_cast<size_t>(n)] = strata::bf16_to_f32(strata::f32_to_bf16(gf / (1.0f + std::exp(-gf)) * uf));
      }
      for (int64_t o = 0; o < hidden; ++o) {
        double acc = 0;
        for (int64_t n = 0; n < inter; ++n)
          acc += static_cast<double>(w2[e][static_cast<size_t>(o * inter + n)]) * h[static_cast<size_t>(n)];
        ref[static_cast<size_t>(p * hidden + o)] = static_cast<float>(acc);
      }
    }
  return ref;
}

// The tensor-core grouped experts (moe_mma.h) against the CPU: `rows` rows routed to `k` distinct experts of
// `experts`, plus the shared expert (number `experts`, every row), so that one expert holds more tokens than a pass
// takes (64) and widths leave partial channel blocks and operand slices. The reference multiplies the same bf16
// values in double and rounds h to bf16 as the kernel stores it; a last-ulp difference of h shows at ~1e-4.
void check_moe_mma(int64_t rows, int64_t k, int64_t experts, int64_t hidden, int64_t inter) {
  namespace sc = strata::cuda;
  auto bf16_values = [](std::vector<float> v, std::vector<uint16_t>& bits) {
    bits.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = strata::bf16_to_f32(bits[i] = strata::f32_to_bf16(v[i]));
    return v;
  };
  const int64_t all = experts + 1;  // with the shared expert
  std::vector<std::vector<uint16_t>> w1b(all), w3b(all), w2b(all);
  std::vector<std::vector<float>> w1(all), w3(all), w2(all);
  for (int64_t e = 0; e < all; ++e) {
    w1[e] = bf16_values(randn(static_cast<size_t>(inter * hidden), 0.06f), w1b[e]);
    w3[e] = bf16_values(randn(static_cast<size_t>(inter * hidden), 0.06f), w3b[e]);
    w2[e] = bf16_values(randn(static_cast<size_t>(hidden * inter), 0.08f), w2b[e]);
  }
  std::vector<uint16_t> xb;
  const std::vector<float> x = bf16_values(randn(static_cast<size_t>(rows * hidden)), xb);
  std::vector<int32_t> ids;
  std::vector<float> weights;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> pick(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) pick[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    std::shuffle(pick.begin(), pick.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids.push_back(pick[static_cast<size_t>(j)]), weights.push_back(0.5f);
  }
  std::vector<DeviceBuffer<uint16_t>> d1, d3, d2;
  std::vector<const void*> t1, t3, t2;
  for (int64_t e = 0; e < all; ++e) {
    d1.emplace_back(w1b[e]), d3.emplace_back(w3b[e]), d2.emplace_back(w2b[e]);
    t1.push_back(d1.back().data()), t3.push_back(d3.back().data()), t2.push_back(d2.back().data());
  }
  DeviceBuffer<const void*> dt1(t1), dt3(t3), dt2(t2);
  DeviceBuffer<uint16_t> dx(xb);
  DeviceBuffer<int32_t> dids(ids);
  DeviceBuffer<float> dweights(weights);
  const int64_t pairs = rows * (k + 1);
  DeviceBuffer<int32_t> pair_row(static_cast<size_t>(pairs)), start(static_cast<size_t>(all + 1)),
      active(static_cast<size_t>(all)), n_active(1), slot(static_cast<size_t>(pairs));
  DeviceBuffer<float> slot_weight(static_cast<size_t>(pairs));
  const sc::MoePlan plan{pair_row.data(), start.data(), active.data(), n_active.data(), slot.data(), slot_weight.data()};
  sc::moe_plan(dids.data(), dweights.data(), rows, k, experts, true, plan, nullptr);
  DeviceBuffer<uint16_t> dh(static_cast<size_t>(pairs * inter));
  DeviceBuffer<float> dy(static_cast<size_t>(pairs * hidden));
  const float limit = 2.5f;
  auto run = [&](sc::MoeMmaShape shape) {
    dh.fill_bytes(0xff), dy.fill_bytes(0xff);
    sc::moe_gate_up_mma(reinterpret_cast<const __nv_bfloat16*>(dx.data()), plan, all, dt1.data(), dt3.data(), hidden,
                        inter, limit, reinterpret_cast<__nv_bfloat16*>(dh.data()), nullptr, shape);
    sc::moe_down_mma(reinterpret_cast<const __nv_bfloat16*>(dh.data()), plan, all, dt2.data(), inter, hidden,
                     dy.data(), nullptr, shape);
    return dy.download();
  };
  const std::vector<float> ref = moe_reference(x, hidden, inter, pair_row.download(), start.download(), w1, w3, w2,
                                                limit);
  for (const sc::MoeMmaShape shape : sc::moe_mma_shapes())
    report("moe_mma " + std::to_string(shape.token_tiles) + "x" + std::to_string(shape.warps),
           std::to_string(rows) + " rows top-" + std::to_string(k) + "/" + std::to_string(experts) + "+1 " +
               std::to_string(hidden) + "x" + std::to_string(inter),
           rel_error(run(shape), ref), 1e-3);
}

// --- Lightning Indexer top-k --------------------------------------------------------------------------------------
// A step's rows for the selection alone: row r sees entries [0, visible_r) with visible_r = min((position + 1) /
// rate, (pos0 + count) / rate) of its chunk, as the kernels compute it, and scores [rows, max_visible] where the
// columns past a row's visible entries hold NaN (never read).
struct IndexerRows {
  std::vector<int32_t> position, chunk, first, pos0, count;
  std::vector<int64_t> visible;
  int64_t rate = 4;
  void add_chunk(int32_t start, int32_t n) {  // n rows at positions start .. start + n - 1, one chunk
    const auto c = static_cast<int32_t>(pos0.size());
    first.push_back(static_cast<int32_t>(position.size())), pos0.push_back(start), count.push_back(n);
    for (int32_t i = 0; i < n; ++i) {
      position.push_back(start + i), chunk.push_back(c);
      visible.push_back(std::min<int64_t>((start + i + 1) / rate, (start + n) / rate));
    }
  }
};

// Score kinds: 0 continuous, 1 five values (ties across the threshold), 2 mostly ±0.0 and ±1e-30 (equal keys of
// both signs of zero) with continuous values among them.
float indexer_score(int kind) {
  std::uniform_int_distribution<int> pick(0, 6);
  if (kind == 1) {
    const float values[] = {-1.5f, 0.25f, 2.0f, 3.0f, 7.5f};
    return values[pick(rng) % 5];
  }
  if (kind == 2 && pick(rng) < 5) {
    const float values[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f};
    return values[pick(rng) % 5];
  }
  return std::normal_distribution<float>(0.0f, 3.0f)(rng);
}

// indexer_select against std::sort by (score desc, index asc) with -0.0 == 0.0: every row's picks in order and
// its count, exactly; the picks past the count left as they were. Counts the rows that differ (limit 0).
void check_indexer_select(const IndexerRows& L, int64_t topk, int kind, const std::string& name) {
  const auto rows = static_cast<int64_t>(L.visible.size());
  const int64_t max_visible = std::max<int64_t>(1, *std::max_element(L.visible.begin(), L.visible.end()));
  std::vector<float> scores(static_cast<size_t>(rows * max_visible), NAN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < L.visible[static_cast<size_t>(r)]; ++e)
      scores[static_cast<size_t>(r * max_visible + e)] = indexer_score(kind);
  DeviceBuffer<float> ds(scores);
  DeviceBuffer<int32_t> dpos(L.position), dchunk(L.chunk), dfirst(L.first), dpos0(L.pos0), dcount(L.count);
  const strata::cuda::StepLayout layout{dpos.data(), dchunk.data(), dfirst.data(), dpos0.data(), dcount.data(), rows,
                                        static_cast<int64_t>(L.pos0.size())};
  DeviceBuffer<int32_t> picks(static_cast<size_t>(rows * topk)), count(static_cast<size_t>(rows));
  picks.fill_bytes(0x7f), count.fill_bytes(0x7f);
  strata::cuda::indexer_select(ds.data(), layout, L.rate, max_visible, topk, picks.data(), count.data(), nullptr);
  const std::vector<int32_t> got = picks.download(), got_count = count.download();
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = scores.data() + r * max_visible;
    std::vector<int32_t> order(static_cast<size_t>(L.visible[static_cast<size_t>(r)]));
    for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int32_t>(e);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    const int64_t k = std::min<int64_t>(topk, static_cast<int64_t>(order.size()));
    bool same = got_count[static_cast<size_t>(r)] == k;
    for (int64_t i = 0; i < topk; ++i)
      same = same && got[static_cast<size_t>(r * topk + i)] == (i < k ? order[static_cast<size_t>(i)] : 0x7f7f7f7f);
    wrong += !same;
  }
  const char* kinds[] = {"continuous", "ties", "+-0"};
  report("indexer_select", name + " top-" + std::to_string(topk) + " " + kinds[kind], static_cast<double>(wrong), 0);
}

void check_indexer_select_all() {
  for (const int64_t topk : {512, 64})
    for (int kind = 0; kind < 3; ++kind) {
      for (const int64_t visible : {0, 1, 5, 511, 512, 513, 1000, 1024, 4095, 4096, 4097, 8192, 20000}) {
        IndexerRows L;
        for (int r = 0; r < 3; ++r) L.add_chunk(static_cast<int32_t>(visible * L.rate + r), 1);  // visible each
        check_indexer_select(L, topk, kind, "3x" + std::to_string(visible));
      }
      // A prefill step: chunks of many rows whose visible entries grow row by row (and stop at the chunk's end).
      IndexerRows L;
      L.add_chunk(1990, 300);
      L.add_chunk(0, 70);
      L.add_chunk(16370, 40);
      check_indexer_select(L, topk, kind, "prefill 410 rows");
    }
}

// Time of the selection for `rows` rows of `visible` entries each, top-512 (CUDA events, median of 20).
void time_indexer_select(int64_t visible, int64_t rows) {
  IndexerRows L;
  for (int64_t r = 0; r < rows; ++r) L.add_chunk(static_cast<int32_t>(visible * L.rate), 1);
  DeviceBuffer<float> ds(randn(static_cast<size_t>(rows * visible), 3.0f));
  DeviceBuffer<int32_t> dpos(L.position), dchunk(L.chunk), dfirst(L.first), dpos0(L.pos0), dcount(L.count);
  const strata::cuda::StepLayout layout{dpos.data(), dchunk.data(), dfirst.data(), dpos0.data(), dcount.data(), rows,
                                        rows};
  const int64_t topk = 512;
  DeviceBuffer<int32_t> picks(static_cast<size_t>(rows * topk)), count(static_cast<size_t>(rows));
  const float ms = median_ms(20, [&] {
    strata::cuda::indexer_select(ds.data(), layout, L.rate, visible, topk, picks.data(), count.data(), nullptr);
  });
  std::printf("%-18s %-34s %.1f us (timing, no bar)\n", "indexer_select",
              (std::to_string(rows) + " rows x " + std::to_string(visible) + " top-512").c_str(), 1000 * ms);
}

// --- FP8 ---------------------------------------------------------------------------------------------------------
// Weights: random e4m3 codes with random fp32 scales per 128×128 block; every reference multiplies their exact
// dequantized values (WeightRef::row_f32, in cpu::linear). The bounds:
//   - the activation quantizer against the same arithmetic on the CPU (round to nearest even, as the device's
//     conversion): equal up to a tie rounded the other way, so ≤ 1e-6;
//   - FP8 GEMM against a reference fed the identically quantized activations: only accumulation differs (the
//     tensor cores' FP8 accumulation inside a 128-block keeps fewer bits than fp32) and, where cuBLASLt has no
//     fp32 output, bf16 rounding of the output: ≤ 1e-3 (fp32 out), ≤ 5e-3 (bf16 out);
//   - FP8 GEMM against unquantized activations: the e4m3 rounding of the activations (3 mantissa bits: relative
//     error up to 2^-4 per element, ≈ 2.5% rms, which a dot product carries over): ≤ 5e-2;
//   - weight-only GEMV (bf16 activations, weights dequantized in registers): as the bf16 GEMV, ≤ 1e-5.

// e4m3 of f rounded to nearest, ties to even, saturating at ±448 (the device's __nv_cvt_float_to_fp8 with
// __NV_SATFINITE). core's f32_to_fp8_e4m3 breaks ties toward zero, fine for making weights but not to compare
// against the device's quantizer.
uint8_t fp8_rne(float f) {
  static const std::vector<float> values = [] {
    std::vector<float> v(127);
    for (int code = 0; code < 127; ++code) v[static_cast<size_t>(code)] = strata::fp8_e4m3_decode(static_cast<uint8_t>(code));
    return v;
  }();
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  const auto hi = std::lower_bound(values.begin(), values.end(), a);
  if (hi == values.end()) return static_cast<uint8_t>(126 | sign);
  auto code = static_cast<int>(hi - values.begin());
  if (code > 0) {
    const float below = a - values[static_cast<size_t>(code - 1)], above = values[static_cast<size_t>(code)] - a;
    if (below < above || (below == above && (code - 1) % 2 == 0)) --code;
  }
  return static_cast<uint8_t>(code | sign);
}

struct Fp8Weights {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  strata::WeightRef ref;
};

Fp8Weights random_fp8_weights(int64_t n, int64_t k) {
  Fp8Weights w;
  const std::vector<float> v = randn(static_cast<size_t>(n * k), 100.0f);
  w.codes.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) w.codes[i] = strata::f32_to_fp8_e4m3(v[i]);
  std::uniform_real_distribution<float> scale(0.5e-3f, 2e-3f);
  w.scales.resize(static_cast<size_t>(((n + 127) / 128) * ((k + 127) / 128)));
  for (float& x : w.scales) x = scale(rng);
  w.ref = strata::WeightRef{strata::DType::F8_E4M3, w.codes.data(), n, k, w.scales.data()};
  return w;
}

// Activations whose rows differ in magnitude by up to e^±3, so per-row scales matter.
std::vector<float> varied_rows(int64_t m, int64_t k) {
  std::vector<float> x = randn(static_cast<size_t>(m * k));
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  for (int64_t r = 0; r < m; ++r) {
    const float f = std::exp(exponent(rng));
    for (int64_t c = 0; c < k; ++c) x[static_cast<size_t>(r * k + c)] *= f;
  }
  return x;
}

void check_gemm_fp8(strata::cuda::Gemm& gemm, int64_t m, int64_t n, int64_t k) {
  const Fp8Weights w = random_fp8_weights(n, k);
  const std::vector<float> x = varied_rows(m, k);
  const int64_t kb = (k + 127) / 128, mp = strata::cuda::fp8_padded_rows(m);
  // The CPU's quantization: per row and 128-column block, scale = max(amax, 1e-30)/448.
  strata::Mat xq(m, k), xf(m, k);
  xf.v = x;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < kb; ++b) {
      const int64_t c0 = b * 128, c1 = std::min(k, c0 + 128);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * k + c)]));
      const float scale = std::max(amax, 1e-30f) / 448.0f;
      for (int64_t c = c0; c < c1; ++c)
        xq.at(r, c) = strata::fp8_e4m3_decode(fp8_rne(x[static_cast<size_t>(r * k + c)] / scale)) * scale;
    }
  DeviceBuffer<float> dx(x), dxs(static_cast<size_t>(kb * mp)), dy(static_cast<size_t>(m * n));
  DeviceBuffer<uint8_t> dxq(static_cast<size_t>(mp * k)), dw(w.codes);
  DeviceBuffer<float> dws(w.scales);
  dxq.fill_bytes(0x7f);  // e4m3 NaN
  dxs.fill_bytes(0xff);
  strata::cuda::quantize_fp8_rows(dx.data(), k, m, k, dxq.data(), dxs.data(), nullptr);
  const std::vector<uint8_t> codes = dxq.download();
  const std::vector<float> scales = dxs.download();
  std::vector<float> gpu_xq(x.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c)
      gpu_xq[static_cast<size_t>(r * k + c)] = strata::fp8_e4m3_decode(codes[static_cast<size_t>(r * k + c)]) *
                                               scales[static_cast<size_t>((c / 128) * mp + r)];
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  report("quantize_fp8", std::to_string(m) + "x" + std::to_string(k), rel_error(gpu_xq, xq.v), 1e-6);

  const std::string out = gemm.fp8_output(m, n, k, k, k, n);
  if (out == "none") {
    // Whole 128-blocks of k and n are what the FP8 path claims; such a shape without an algorithm is a failure.
    if (k % 128 == 0 && n % 128 == 0) report("gemm_fp8", shape + " no algorithm", INFINITY, 0);
    return;
  }
  dy.fill_bytes(0xff);
  gemm.fp8(dxq.data(), k, dxs.data(), dw.data(), k, dws.data(), dy.data(), n, m, n, k, nullptr);
  const std::vector<float> got = dy.download();
  report("gemm_fp8", shape + " D " + out + " vs same quant", rel_error(got, strata::cpu::linear(xq, w.ref).v),
         out == "fp32" ? 1e-3 : 5e-3);
  report("gemm_fp8", shape + " vs fp32 acts", rel_error(got, strata::cpu::linear(xf, w.ref).v), 5e-2);
}

// Weight-only FP8 products of decode size, single and grouped (`groups` products over column blocks of x and row
// blocks of w, as the o-projection); with one group also the fallback's dequantization kernel.
// The CPU's grouped product: x row t·groups + g is the group-g slice of token t, w [groups·n, k]; the result
// [m, groups·n] keeps the matching blocks of the full product.
std::vector<float> grouped_reference(const strata::Mat& x, const strata::WeightRef& w, int64_t m, int64_t n,
                                     int64_t groups) {
  const strata::Mat full = strata::cpu::linear(x, w);
  std::vector<float> ref(static_cast<size_t>(m * groups * n));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t j = 0; j < n; ++j)
        ref[static_cast<size_t>(t * groups * n + g * n + j)] = full.at(t * groups + g, g * n + j);
  return ref;
}

void check_gemv_fp8(int64_t m, int64_t n, int64_t k, int64_t groups) {
  const Fp8Weights w = random_fp8_weights(groups * n, k);
  std::vector<uint16_t> xh(static_cast<size_t>(m * groups * k));
  strata::Mat x(m * groups, k);  // row t·groups + g: the group-g slice of token t's activations
  const std::vector<float> xv = randn(xh.size());
  for (size_t i = 0; i < xh.size(); ++i) x.v[i] = strata::bf16_to_f32(xh[i] = strata::f32_to_bf16(xv[i]));
  const std::vector<float> ref = grouped_reference(x, w.ref, m, n, groups);
  DeviceBuffer<uint16_t> dx(xh);
  DeviceBuffer<uint8_t> dw(w.codes);
  DeviceBuffer<float> dws(w.scales), dy(ref.size());
  const int64_t scale_cols = (k + 127) / 128, stride_s = groups > 1 ? n / 128 * scale_cols : 0;
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                            (groups > 1 ? " " + std::to_string(groups) + " groups" : "");
  if (!strata::cuda::gemv_fp8_applies(dx.data(), groups * k, k, dw.data(), k, n * k, m, k)) {
    report("gemv_fp8", shape + " not taken", INFINITY, 0);
    return;
  }
  dy.fill_bytes(0xff);
  strata::cuda::gemv_fp8(reinterpret_cast<const __nv_bfloat16*>(dx.data()), groups * k, k, dw.data(), k, n * k,
                         dws.data(), scale_cols, stride_s, dy.data(), groups * n, n, m, n, k, groups, nullptr);
  report("gemv_fp8", shape, rel_error(dy.download(), ref), 1e-5);
  if (groups == 1) {
    // bf16 of the exact values on both sides: equal.
    std::vector<float> want(static_cast<size_t>(n * k)), row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      w.ref.row_f32(r, row.data());
      for (int64_t c = 0; c < k; ++c)
        want[static_cast<size_t>(r * k + c)] = strata::bf16_to_f32(strata::f32_to_bf16(row[static_cast<size_t>(c)]));
    }
    DeviceBuffer<uint16_t> dd(static_cast<size_t>(n * k));
    dd.fill_bytes(0xff);
    strata::cuda::dequantize_fp8(dw.data(), dws.data(), n, k, reinterpret_cast<__nv_bfloat16*>(dd.data()), nullptr);
    const std::vector<uint16_t> got_h = dd.download();
    std::vector<float> got(got_h.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = strata::bf16_to_f32(got_h[i]);
    report("dequantize_fp8", std::to_string(n) + "x" + std::to_string(k), rel_error(got, want), 1e-7);
  }
}

// The fixed-order products of --batch-invariant (gemm_fixed_order.h), bf16 and FP8 weights, `groups` products at
// strides: both kernels against the CPU, then bit for bit against each other and against the same rows computed
// in batches of other sizes and at other positions (rows r0 .. r0+b of the full batch run as a batch of b alone).
void check_fixed_order(int64_t m, int64_t n, int64_t k, int64_t groups, bool fp8) {
  using strata::cuda::FixedOrderKernel;
  std::vector<uint16_t> xh(static_cast<size_t>(m * groups * k));
  strata::Mat x(m * groups, k);  // row t·groups + g: the group-g slice of token t's activations
  const std::vector<float> xv = randn(xh.size());
  for (size_t i = 0; i < xh.size(); ++i) x.v[i] = strata::bf16_to_f32(xh[i] = strata::f32_to_bf16(xv[i]));
  Fp8Weights w8;
  std::vector<uint16_t> wh;
  strata::WeightRef ref_w;
  if (fp8) {
    w8 = random_fp8_weights(groups * n, k);
    ref_w = w8.ref;
  } else {
    const std::vector<float> wv = randn(static_cast<size_t>(groups * n * k), 0.05f);
    wh.resize(wv.size());
    for (size_t i = 0; i < wv.size(); ++i) wh[i] = strata::f32_to_bf16(wv[i]);
    ref_w = strata::WeightRef{strata::DType::BF16, reinterpret_cast<const uint8_t*>(wh.data()), groups * n, k};
  }
  const std::vector<float> ref = grouped_reference(x, ref_w, m, n, groups);
  DeviceBuffer<uint16_t> dx(xh);
  DeviceBuffer<uint8_t> dw8(fp8 ? w8.codes : std::vector<uint8_t>(1));
  DeviceBuffer<uint16_t> dwb(fp8 ? std::vector<uint16_t>(8) : wh);
  DeviceBuffer<float> dws(fp8 ? w8.scales : std::vector<float>(1)), dy(ref.size());
  const auto type = fp8 ? strata::cuda::GemmType::Fp8 : strata::cuda::GemmType::Bf16;
  const void* w = fp8 ? static_cast<const void*>(dw8.data()) : static_cast<const void*>(dwb.data());
  const int64_t scale_cols = (k + 127) / 128, stride_s = n / 128 * scale_cols;
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                            (groups > 1 ? " " + std::to_string(groups) + " groups" : "") + (fp8 ? " fp8" : "");
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(dx.data());
  DeviceBuffer<float> scratch(static_cast<size_t>(std::max<int64_t>(1, strata::cuda::fixed_order_split_floats(16, n, k, groups))));
  auto run = [&](int64_t r0, int64_t rows, FixedOrderKernel kernel) {
    dy.fill_bytes(0xff);
    strata::cuda::fixed_order_product(type, xb + r0 * groups * k, groups * k, k, w, k, n * k, dws.data(), scale_cols,
                                      stride_s, dy.data(), groups * n, n, rows, n, k, groups, scratch.data(), nullptr,
                                      kernel);
    std::vector<float> y = dy.download();
    y.resize(static_cast<size_t>(rows * groups * n));
    return y;
  };
  const std::vector<float> few = run(0, m, FixedOrderKernel::FewRows), many = run(0, m, FixedOrderKernel::ManyRows);
  report("fixed_order few", shape, rel_error(few, ref), 1e-5);
  report("fixed_order many", shape, rel_error(many, ref), 1e-5);
  // Bit for bit: the kernels against each other, then sub-batches (every kernel) against the full batch's rows.
  auto differing = [](const std::vector<float>& a, const float* b) {
    int64_t d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += a[i] != a[i] || std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
  };
  int64_t differ = differing(few, many.data()), compared = static_cast<int64_t>(few.size());
  for (const auto& [r0, rows] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {m - 1, 1}, {m / 2, 3}, {1, 16},
                                                                          {3, 17}, {0, 100}, {m / 3, m - m / 3}}) {
    if (r0 < 0 || rows < 1 || r0 + rows > m) continue;
    for (const FixedOrderKernel kernel : {FixedOrderKernel::FewRows, FixedOrderKernel::ManyRows,
                                          FixedOrderKernel::SplitChunks, FixedOrderKernel::Auto}) {
      if (kernel == FixedOrderKernel::SplitChunks && rows > 16) continue;
      const std::vector<float> part = run(r0, rows, kernel);
      differ += differing(part, few.data() + r0 * groups * n);
      compared += static_cast<int64_t>(part.size());
    }
  }
  report("fixed_order bits", shape + " " + std::to_string(compared) + " el", static_cast<double>(differ), 0);
}

// The tiled plan and the tensor-core GEMM tiles of the grouped experts (moe_gemm.h), bf16 and FP8 weights, against
// the CPU: as check_moe_mma, with enough rows that the shared expert spans several 64-token tiles (the last one
// partial) and the plan several 128-row chunks. The tiled plan must equal the single-block plan exactly (same
// grouping, rows ascending within an expert). FP8: the reference multiplies the exact dequantized weights.
void check_moe_gemm(int64_t rows, int64_t k, int64_t experts, int64_t hidden, int64_t inter, bool fp8) {
  namespace sc = strata::cuda;
  const int64_t all = experts + 1, pairs = rows * (k + 1);
  // Reference weights (the values the kernel multiplies) and the device matrices, per expert and role.
  ExpertWeights ref_w[3];
  std::vector<DeviceBuffer<uint8_t>> stored;
  std::vector<DeviceBuffer<float>> scales;
  std::vector<const void*> table[3];
  std::vector<const float*> scale_table[3];
  for (int role = 0; role < 3; ++role)
    for (int64_t e = 0; e < all; ++e) {
      const int64_t n = role == 2 ? hidden : inter, c = role == 2 ? inter : hidden;
      std::vector<float> v;
      if (fp8) {
        const Fp8Weights q = random_fp8_weights(n, c);
        const int64_t kb = (c + 127) / 128;
        v.resize(q.codes.size());
        for (int64_t r = 0; r < n; ++r)
          for (int64_t i = 0; i < c; ++i)
            v[static_cast<size_t>(r * c + i)] = strata::fp8_e4m3_to_f32(q.codes[static_cast<size_t>(r * c + i)]) *
                                               q.scales[static_cast<size_t>((r / 128) * kb + i / 128)];
        stored.emplace_back(q.codes);
        scales.emplace_back(q.scales);
        scale_table[role].push_back(scales.back().data());
      } else {
        v = randn(static_cast<size_t>(n * c), role == 2 ? 0.08f : 0.06f);
        std::vector<uint8_t> bytes(v.size() * 2);
        for (size_t i = 0; i < v.size(); ++i) {
          const uint16_t b = strata::f32_to_bf16(v[i]);
          v[i] = strata::bf16_to_f32(b);
          std::memcpy(bytes.data() + 2 * i, &b, 2);
        }
        stored.emplace_back(bytes);
      }
      table[role].push_back(stored.back().data());
      ref_w[role].push_back(std::move(v));
    }
  std::vector<uint16_t> xb(static_cast<size_t>(rows * hidden));
  std::vector<float> x = randn(xb.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = strata::bf16_to_f32(xb[i] = strata::f32_to_bf16(x[i]));
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> pick(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) pick[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    std::shuffle(pick.begin(), pick.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids.push_back(pick[static_cast<size_t>(j)]), weights.push_back(weight(rng));
  }
  DeviceBuffer<const void*> d1(table[0]), d3(table[1]), d2(table[2]);
  DeviceBuffer<const float*> ds1(scale_table[0]), ds3(scale_table[1]), ds2(scale_table[2]);
  DeviceBuffer<uint16_t> dx(xb);
  DeviceBuffer<int32_t> dids(ids);
  DeviceBuffer<float> dweights(weights);
  struct PlanBuffers {
    DeviceBuffer<int32_t> pair_row, start, active, n_active, slot;
    DeviceBuffer<float> slot_weight;
    PlanBuffers(int64_t pairs, int64_t all)
        : pair_row(static_cast<size_t>(pairs)), start(static_cast<size_t>(all + 1)), active(static_cast<size_t>(all)),
          n_active(1), slot(static_cast<size_t>(pairs)), slot_weight(static_cast<size_t>(pairs)) {
      for (auto* b : {&pair_row, &start, &active, &n_active, &slot}) b->fill_bytes(0xff);
      slot_weight.fill_bytes(0xff);
    }
    sc::MoePlan plan() {
      return {pair_row.data(), start.data(), active.data(), n_active.data(), slot.data(), slot_weight.data()};
    }
  };
  PlanBuffers single(pairs, all), tiled(pairs, all);
  sc::moe_plan(dids.data(), dweights.data(), rows, k, experts, true, single.plan(), nullptr);
  const int64_t max_tiles = sc::moe_max_tiles(pairs, all, sc::kMoeGemmTileTokens);
  DeviceBuffer<int32_t> tile_expert(static_cast<size_t>(max_tiles)), tile_start(static_cast<size_t>(max_tiles)),
      tile_count(1), work(static_cast<size_t>(sc::moe_plan_work_ints(rows, experts)));
  const sc::MoeTiles tiles{tile_expert.data(), tile_start.data(), tile_count.data()};
  sc::moe_plan_tiled(dids.data(), dweights.data(), rows, k, experts, true, tiled.plan(), tiles, sc::kMoeGemmTileTokens,
                     work.data(), nullptr);
  const std::string shape = std::to_string(rows) + " rows top-" + std::to_string(k) + "/" + std::to_string(experts) +
                            "+1 " + std::to_string(hidden) + "x" + std::to_string(inter);
  if (!fp8) {
    const int32_t n_active = tiled.n_active.download()[0];
    bool same = n_active == single.n_active.download()[0] && tiled.pair_row.download() == single.pair_row.download() &&
                tiled.start.download() == single.start.download() && tiled.slot.download() == single.slot.download() &&
                tiled.slot_weight.download() == single.slot_weight.download();
    const auto a = tiled.active.download(), b = single.active.download();
    same = same && std::equal(a.begin(), a.begin() + n_active, b.begin());
    // Every expert's pairs cut into 64-token runs, in order.
    const auto first = tiled.start.download();
    const auto te = tile_expert.download(), ts = tile_start.download();
    int32_t t = 0;
    for (int64_t e = 0; e < all; ++e)
      for (int32_t p = first[static_cast<size_t>(e)]; p < first[static_cast<size_t>(e) + 1]; p += sc::kMoeGemmTileTokens, ++t)
        same = same && t < max_tiles && te[static_cast<size_t>(t)] == e && ts[static_cast<size_t>(t)] == p;
    same = same && tile_count.download()[0] == t;
    report("moe_plan_tiled", shape, same ? 0.0 : INFINITY, 0);
  }
  const float limit = 2.5f;
  const std::vector<float> ref = moe_reference(x, hidden, inter, tiled.pair_row.download(), tiled.start.download(),
                                                ref_w[0], ref_w[1], ref_w[2], limit);
  DeviceBuffer<uint16_t> dh(static_cast<size_t>(pairs * inter));
  DeviceBuffer<float> dy(static_cast<size_t>(pairs * hidden));
  dh.fill_bytes(0xff), dy.fill_bytes(0xff);
  const sc::GemmType type = fp8 ? sc::GemmType::Fp8 : sc::GemmType::Bf16;
  if (!sc::moe_gemm_supported(type, hidden, inter, max_tiles)) {
    report(fp8 ? "moe_gemm fp8" : "moe_gemm bf16", shape + " unsupported", INFINITY, 0);
    return;
  }
  sc::moe_gate_up_gemm(type, reinterpret_cast<const __nv_bfloat16*>(dx.data()), tiled.plan(), tiles, max_tiles,
                       d1.data(), d3.data(), fp8 ? ds1.data() : nullptr, fp8 ? ds3.data() : nullptr, hidden, inter,
                       limit, reinterpret_cast<__nv_bfloat16*>(dh.data()), nullptr);
  sc::moe_down_gemm(type, reinterpret_cast<const __nv_bfloat16*>(dh.data()), tiled.plan(), tiles, max_tiles,
                    d2.data(), fp8 ? ds2.data() : nullptr, inter, hidden, dy.data(), nullptr);
  report(fp8 ? "moe_gemm fp8" : "moe_gemm bf16", shape, rel_error(dy.download(), ref), 1e-3);
}

// A vocabulary row shaped like a language model's: kind 0 a spread of logits with a few strong candidates, 1 a
// nearly flat row (top_p 0.9 reaches deep), 2 half the vocabulary masked to -inf, 3 logits on a grid of 1/64 (many
// exact ties, so the order among equals is tested).
std::vector<float> sampling_row(int kind, int64_t vocab) {
  std::vector<float> row = randn(static_cast<size_t>(vocab), kind == 1 ? 0.5f : 2.0f);
  std::uniform_int_distribution<int64_t> any(0, vocab - 1);
  if (kind != 1)
    for (int i = 0; i < 8; ++i) row[static_cast<size_t>(any(rng))] += 8.0f + static_cast<float>(i);
  if (kind == 2)
    for (size_t i = 0; i < row.size(); i += 2) row[i] = -INFINITY;
  if (kind == 3)
    for (float& l : row) l = std::round(l * 64.0f) / 64.0f;
  return row;
}

// Whether the host sampler, with the draw, top_p or min_p moved by a relative 1e-9, picks `token`: a pick decided
// by float rounding at a boundary (sampling.cu says how close it must be), not a wrong one.
bool boundary_pick(const std::vector<float>& row, strata::model::TokenPick p, int32_t token) {
  for (const double f : {1 - 1e-9, 1 + 1e-9}) {
    strata::model::TokenPick q = p;
    q.uniform = std::min(p.uniform * f, std::nextafter(1.0, 0.0));
    if (strata::cpu::pick_token(row, q) == token) return true;
    q = p;
    q.top_p = std::min(p.top_p * f, 1.0);
    if (p.top_p < 1 && strata::cpu::pick_token(row, q) == token) return true;
    q = p;
    q.min_p = std::min(p.min_p * f, 1.0);
    if (p.min_p > 0 && strata::cpu::pick_token(row, q) == token) return true;
  }
  return false;
}

// The device's random picks (sampling.cu) against the host sampler's (cpu::pick_token, the same code as
// sample_token) on fresh random vocabulary rows of the V4 size, for every combination of temperature, top_k,
// top_p and min_p, several draws each: identical ids. A pick that differs must be a boundary case (above) — counted
// and bounded — and a row left to the host (kPickOnHost) is counted: none is expected on these rows. Run twice, in
// reversed order: the same ids (deterministic, and a row's pick does not depend on its neighbours).
void check_sample_rows(int64_t vocab, int rows_per_kind) {
  using strata::cuda::RowPick;
  std::vector<float> logits;
  std::vector<int> kind_of;
  for (int kind = 0; kind < 4; ++kind)
    for (int r = 0; r < rows_per_kind; ++r) {
      const std::vector<float> row = sampling_row(kind, vocab);
      logits.insert(logits.end(), row.begin(), row.end());
      kind_of.push_back(kind);
    }
  const int rows = static_cast<int>(kind_of.size());
  std::vector<strata::model::TokenPick> params;
  std::vector<RowPick> picks;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int r = 0; r < rows; ++r)
    for (const double t : {0.5, 1.0, 1.5})
      for (const int64_t k : {1, 20, 1000, 0})
        for (const double top_p : {0.1, 0.9, 1.0})
          for (const double min_p : {0.0, 0.02})
            for (int draw = 0; draw < 2; ++draw) {
              const double u = strata::engine::counter_uniform(rng(), static_cast<uint64_t>(draw));
              params.push_back({t, k, top_p, min_p, u});
              picks.push_back({1.0 / t, top_p, min_p, u, static_cast<int32_t>(k), r});
            }
  const size_t n = picks.size();
  DeviceBuffer<float> dx(logits);
  DeviceBuffer<RowPick> dp(picks);
  DeviceBuffer<int32_t> dout(n);
  dout.fill_bytes(0x7f);
  strata::cuda::sample_rows(dx.data(), vocab, dp.data(), static_cast<int64_t>(n), dout.data(), nullptr);
  const std::vector<int32_t> got = dout.download();
  std::vector<RowPick> reversed(picks.rbegin(), picks.rend());
  DeviceBuffer<RowPick> dr(reversed);
  dout.fill_bytes(0x7f);
  strata::cuda::sample_rows(dx.data(), vocab, dr.data(), static_cast<int64_t>(n), dout.data(), nullptr);
  const std::vector<int32_t> again = dout.download();

  int64_t wrong[4] = {}, boundary[4] = {}, on_host[4] = {}, unstable = 0, total[4] = {};
  for (size_t i = 0; i < n; ++i) {
    const int kind = kind_of[static_cast<size_t>(picks[i].row)];
    ++total[kind];
    unstable += again[n - 1 - i] != got[i];
    if (got[i] == strata::cuda::kPickOnHost) {
      ++on_host[kind];
      continue;
    }
    const std::vector<float> row(logits.begin() + picks[i].row * vocab, logits.begin() + (picks[i].row + 1) * vocab);
    const int32_t want = strata::cpu::pick_token(row, params[i]);
    if (got[i] == want) continue;
    if (got[i] >= 0 && got[i] < vocab && boundary_pick(row, params[i], got[i]))
      ++boundary[kind];
    else
      ++wrong[kind];
  }
  const char* names[4] = {"peaked", "flat", "half -inf", "ties"};
  for (int kind = 0; kind < 4; ++kind) {
    // A boundary pick needs a running mass within ~1e-12 of its target (odds ~1e-11 per pick): none expected,
    // one tolerated per case.
    const bool ok = wrong[kind] == 0 && on_host[kind] == 0 && boundary[kind] <= 1 && unstable == 0;
    failures += !ok;
    std::printf("%-18s %-34s %lld/%lld differ (%lld at a boundary), %lld left to host, %lld unstable  %s\n",
                "sample_rows", (std::to_string(vocab) + " vocab, " + names[kind]).c_str(),
                static_cast<long long>(wrong[kind] + boundary[kind]), static_cast<long long>(total[kind]),
                static_cast<long long>(boundary[kind]), static_cast<long long>(on_host[kind]),
                static_cast<long long>(unstable), ok ? "PASS" : "FAIL");
  }
}

// Rows the kernel must leave to the host: no finite logit, or a cut inside more than 4096 equal logits.
void check_sample_rows_on_host(int64_t vocab) {
  using strata::cuda::RowPick;
  std::vector<float> logits(static_cast<size_t>(2 * vocab), 1.5f);
  std::fill(logits.begin(), logits.begin() + vocab, -INFINITY);
  const std::vector<RowPick> picks = {{1.0, 1.0, 0.0, 0.3, 0, 0}, {1.0, 1.0, 0.0, 0.3, 20, 1}, {1.0, 1.0, 0.0, 0.3, 0, 1}};
  DeviceBuffer<float> dx(logits);
  DeviceBuffer<RowPick> dp(picks);
  DeviceBuffer<int32_t> dout(picks.size());
  dout.fill_bytes(0x7f);
  strata::cuda::sample_rows(dx.data(), vocab, dp.data(), 3, dout.data(), nullptr);
  const std::vector<int32_t> got = dout.download();
  // An all-equal row without filters is walked in id order (no bucket sorted), so the device takes it.
  const std::vector<float> equal(logits.begin() + vocab, logits.end());
  const bool ok = got[0] == strata::cuda::kPickOnHost && got[1] == strata::cuda::kPickOnHost &&
                  got[2] == strata::cpu::pick_token(equal, {1.0, 0, 1.0, 0.0, 0.3});
  failures += !ok;
  std::printf("%-18s %-34s picks %d, %d, %d  %s\n", "sample_rows", "all -inf; top_k in equal; equal", got[0], got[1],
              got[2], ok ? "PASS" : "FAIL");
}

// The sampling stage's penalties (sampling.cu) against the CPU reference op on the same rows: repetition over the
// seen ids (positive and negative logits), then subtracted amounts, several rows at once. Exact: the same IEEE
// float operations in the same order.
void check_penalties(int64_t vocab) {
  using strata::cuda::PenaltyEntry;
  std::mt19937 gen(31);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int rows = 4;
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (float& l : logits) l = normal(gen);
  std::vector<float> want = logits;
  std::vector<PenaltyEntry> repetition, subtract;
  for (int r = 0; r < rows; ++r) {
    strata::model::RowPenalties p;
    p.repetition = 1.0f + 0.37f * static_cast<float>(r + 1);
    for (int32_t id = r; id < vocab; id += 3 + r) p.seen.push_back(id);
    for (int32_t id = 2 * r; id < vocab; id += 5) p.subtract.emplace_back(id, 0.1f + 0.01f * static_cast<float>(id % 17));
    strata::cpu::apply_penalties({want.data() + r * vocab, static_cast<size_t>(vocab)}, p);
    for (int32_t id : p.seen) repetition.push_back({r, id, p.repetition});
    for (const auto& [id, amount] : p.subtract) subtract.push_back({r, id, amount});
  }
  DeviceBuffer<float> dx(logits);
  DeviceBuffer<PenaltyEntry> drep(repetition), dsub(subtract);
  strata::cuda::apply_penalties(dx.data(), vocab, drep.data(), static_cast<int64_t>(repetition.size()), dsub.data(),
                                static_cast<int64_t>(subtract.size()), nullptr);
  const std::vector<float> got = dx.download();
  const bool ok = std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
  failures += !ok;
  std::printf("%-18s %-34s %zu repetition + %zu subtracted entries, bit-identical to the CPU op: %s\n",
              "apply_penalties", (std::to_string(rows) + " rows of " + std::to_string(vocab)).c_str(),
              repetition.size(), subtract.size(), ok ? "PASS" : "FAIL");
}

// Structured outputs: the allowed-token mask kernel against cpu::apply_mask (bit-identical, -inf included) for masks
// from 3 tokens to all of them, and then the device picks on the masked rows against the host sampler's, with top_k
// cut to the allowed count as the model runner does: identical ids, all inside the mask, none left to the host
// (the -inf crowd has a bucket of its own). Timed for 64 rows.
void check_masked_sampling(int64_t vocab) {
  using strata::cuda::RowPick;
  std::mt19937 gen(47);
  const size_t words = static_cast<size_t>((vocab + 31) / 32);
  const double densities[] = {3.0 / static_cast<double>(vocab), 0.001, 0.01, 0.5, 1.0};
  const int rows = 5;
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row = sampling_row(r % 2, vocab);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<uint32_t> all_words;
  std::vector<int32_t> row_ids;
  std::vector<int64_t> allowed(rows, 0);
  std::vector<float> want = logits;
  for (int r = 0; r < rows; ++r) {
    strata::model::TokenMask m(words, 0u);
    std::bernoulli_distribution on(densities[r]);
    for (int64_t id = 0; id < vocab; ++id)
      if (on(gen) || id == 17 * (r + 1)) m[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
    for (int64_t id = 0; id < vocab; ++id) allowed[r] += (m[static_cast<size_t>(id / 32)] >> (id % 32)) & 1u;
    strata::cpu::apply_mask({want.data() + r * vocab, static_cast<size_t>(vocab)}, m);
    all_words.insert(all_words.end(), m.begin(), m.end());
    row_ids.push_back(r);
  }
  DeviceBuffer<float> dx(logits);
  DeviceBuffer<uint32_t> dw(all_words);
  DeviceBuffer<int32_t> drows(row_ids);
  strata::cuda::mask_rows(dx.data(), vocab, drows.data(), dw.data(), static_cast<int64_t>(words), rows, nullptr);
  const std::vector<float> masked = dx.download();
  bool ok = std::memcmp(masked.data(), want.data(), masked.size() * sizeof(float)) == 0;
  failures += !ok;
  std::printf("%-18s %-34s masks of 3 ids to all, bit-identical to the CPU op: %s\n", "mask_rows",
              (std::to_string(rows) + " rows of " + std::to_string(vocab)).c_str(), ok ? "PASS" : "FAIL");

  std::vector<strata::model::TokenPick> params;
  std::vector<RowPick> picks;
  for (int r = 0; r < rows; ++r)
    for (const double t : {0.7, 1.0})
      for (const int64_t k : {1, 20, 1000, 0})
        for (const double top_p : {0.5, 1.0})
          for (const double min_p : {0.0, 0.02})
            for (int draw = 0; draw < 2; ++draw) {
              const double u = strata::engine::counter_uniform(gen(), static_cast<uint64_t>(draw));
              const int64_t top_k = k > 0 ? std::min(k, allowed[r]) : 0;
              params.push_back({t, top_k, top_p, min_p, u});
              picks.push_back({1.0 / t, top_p, min_p, u, static_cast<int32_t>(top_k), r});
            }
  DeviceBuffer<RowPick> dp(picks);
  DeviceBuffer<int32_t> dout(picks.size());
  dout.fill_bytes(0x7f);
  strata::cuda::sample_rows(dx.data(), vocab, dp.data(), static_cast<int64_t>(picks.size()), dout.data(), nullptr);
  const std::vector<int32_t> got = dout.download();
  int64_t differ = 0, on_host = 0, outside = 0;
  for (size_t i = 0; i < picks.size(); ++i) {
    if (got[i] == strata::cuda::kPickOnHost) {
      ++on_host;
      continue;
    }
    const int r = picks[i].row;
    const std::vector<float> row(want.begin() + r * vocab, want.begin() + (r + 1) * vocab);
    outside += got[i] < 0 || got[i] >= vocab || std::isinf(row[static_cast<size_t>(got[i])]);
    differ += got[i] != strata::cpu::pick_token(row, params[i]) && !boundary_pick(row, params[i], got[i]);
  }
  ok = differ == 0 && on_host == 0 && outside == 0;
  failures += !ok;
  std::printf("%-18s %-34s %lld/%zu differ, %lld outside the mask, %lld left to host  %s\n", "sample_rows",
              (std::to_string(vocab) + " vocab, masked").c_str(), static_cast<long long>(differ), picks.size(),
              static_cast<long long>(outside), static_cast<long long>(on_host), ok ? "PASS" : "FAIL");

  const int timed = 64;
  std::vector<float> batch(static_cast<size_t>(timed * vocab), 0.5f);
  std::vector<uint32_t> batch_words;
  std::vector<int32_t> batch_rows;
  for (int r = 0; r < timed; ++r) {
    batch_words.insert(batch_words.end(), all_words.begin() + static_cast<std::ptrdiff_t>((r % rows) * words),
                       all_words.begin() + static_cast<std::ptrdiff_t>((r % rows + 1) * words));
    batch_rows.push_back(r);
  }
  DeviceBuffer<float> dbatch(batch);
  DeviceBuffer<uint32_t> dbw(batch_words);
  DeviceBuffer<int32_t> dbr(batch_rows);
  const float ms = median_ms(5, [&] {
    strata::cuda::mask_rows(dbatch.data(), vocab, dbr.data(), dbw.data(), static_cast<int64_t>(words), timed, nullptr);
  });
  std::printf("%-18s %-34s %.3f ms for %d rows (timing, no bar)\n", "mask_rows", "kernel only", ms, timed);
}

// Time of the device picks for a batch of 256 peaked rows, per parameter set (CUDA events, median of 5).
void time_sample_rows(int64_t vocab) {
  using strata::cuda::RowPick;
  const int rows = 256;
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row = sampling_row(0, vocab);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  DeviceBuffer<float> dx(logits);
  DeviceBuffer<int32_t> dout(static_cast<size_t>(rows));
  const struct {
    const char* name;
    double top_p, min_p;
    int32_t top_k;
  } sets[] = {{"temperature only", 1.0, 0.0, 0}, {"top_k 20", 1.0, 0.0, 20}, {"top_p 0.9", 0.9, 0.0, 0},
              {"top_k 1000 top_p 0.9 min_p", 0.9, 0.02, 1000}};
  for (const auto& set : sets) {
    std::vector<RowPick> picks;
    for (int r = 0; r < rows; ++r) picks.push_back({1.0, set.top_p, set.min_p, (r + 0.5) / rows, set.top_k, r});
    DeviceBuffer<RowPick> dp(picks);
    const float ms = median_ms(5, [&] { strata::cuda::sample_rows(dx.data(), vocab, dp.data(), rows, dout.data(), nullptr); });
    std::printf("%-18s %-34s %.3f ms for %d rows (timing, no bar)\n", "sample_rows", set.name, ms, rows);
  }
}

}  // namespace

// copy_device_runs (device_copies.h): runs of every length and alignment (a misaligned start takes the scalar path),
// more runs than one launch holds, into a poisoned destination; everything outside the runs must stay poisoned.
void check_device_runs() {
  const int64_t floats = 1 << 20;
  const std::vector<float> src_host = randn(static_cast<size_t>(floats));
  DeviceBuffer<float> src(src_host);
  DeviceBuffer<float> dst(std::vector<float>(static_cast<size_t>(floats), NAN));
  std::vector<float> want(static_cast<size_t>(floats), NAN);
  std::vector<strata::cuda::DeviceCopy> runs;
  std::uniform_int_distribution<int64_t> length(0, 3000), shift(0, 7);
  int64_t at = 0;
  while (runs.size() < 300 && at < floats - 4000) {
    const int64_t n = length(rng), from = (at * 7 + shift(rng)) % (floats - n), to = at + shift(rng);
    runs.push_back({dst.data() + to, src.data() + from, n});
    std::copy(src_host.begin() + from, src_host.begin() + from + n, want.begin() + to);
    at = to + n + shift(rng);
  }
  strata::cuda::copy_device_runs(runs, nullptr);
  std::vector<float> got = dst.download();
  int64_t wrong = 0;
  for (int64_t i = 0; i < floats; ++i) {
    const float g = got[static_cast<size_t>(i)], w = want[static_cast<size_t>(i)];
    wrong += std::isnan(w) ? !std::isnan(g) : std::memcmp(&g, &w, sizeof g) != 0;
  }
  report("copy_device_runs", std::to_string(runs.size()) + " runs, 0-3000 floats", static_cast<double>(wrong), 0);
}

int main() {
  const uint64_t seed = std::random_device{}();
  rng.seed(seed);
  std::printf("strata GPU op checks (seed %llu)\n%-18s %-34s %10s %9s\n", static_cast<unsigned long long>(seed), "op",
              "case", "rel.err", "limit");
  try {
    check_device_runs();
    check_rms_norm(37, 4096, true);
    check_rms_norm(5, 512, false);
    check_rms_norm(1, 16384, true);
    check_rope(19, 8, 512, 32, false);
    check_rope(19, 8, 512, 32, true);
    check_rope(3, 64, 128, 32, false);
    check_join_and_gather(7, 4, 4096);  // V4-Flash's hc and hidden
    check_join_and_gather(300, 4, 64);  // the tiny preset's, a prefill's rows
    check_attention(7, 16, 512, 300, 200);
    check_attention(33, 4, 512, 1000, 640);
    check_attention(2, 64, 128, 50, 16);
    check_attention(70, 64, 512, 2000, 700);  // V4-Flash's heads and head_dim; keys past a 32-key chunk's end
    check_attention(40, 4, 64, 300, 129);     // the tiny preset's: heads padded to a tile of 16
    check_attention(9, 80, 32, 100, 33);      // a second group of 64 heads, partly filled
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
    check_gemm_fp8(gemm, 128, 2048, 4096);
    check_gemm_fp8(gemm, 333, 1024, 512);
    check_gemm_fp8(gemm, 9, 512, 1024);
    check_gemm_fp8(gemm, 1024, 4096, 4096);
    check_gemm_fp8(gemm, 129, 1024, 512);
    check_gemm_fp8(gemm, 20, 256, 512);
    // The small preset's shapes. k = 256 is left out: cuBLASLt offered an algorithm for it whose results were
    // garbage, so Gemm::fp8_supported refuses it (gemm.cpp).
    check_gemm_fp8(gemm, 129, 128, 512);
    check_gemm_fp8(gemm, 144, 256, 512);
    check_gemm_fp8(gemm, 100, 200, 64);  // partial blocks: no FP8 GEMM (the backend dequantizes), quantizer only
    check_gemv_fp8(1, 4096, 4096, 1);
    check_gemv_fp8(3, 1000, 2048, 1);
    check_gemv_fp8(8, 4096, 1024, 1);
    check_gemv_fp8(5, 32, 64, 1);
    check_gemv_fp8(2, 1024, 4096, 8);
    for (const bool fp8 : {false, true}) {
      check_fixed_order(300, 4096, 1024, 1, fp8);
      check_fixed_order(700, 1024, 4096, 1, fp8);
      check_fixed_order(40, 1000, 512, 1, fp8);  // n not a multiple of 16
      check_fixed_order(130, 1024, 512, 8, fp8);   // grouped (V4's wo_a)
    }
    check_fixed_order(37, 200, 80, 1, false);  // k not a multiple of 32 or 128
    check_moe_mma(100, 2, 8, 256, 144);
    check_moe_mma(3, 6, 16, 512, 64);
    for (const bool fp8 : {false, true}) {
      check_moe_gemm(300, 2, 8, 256, 192, fp8);  // the shared expert: 4 full tiles and a partial one; 3 plan chunks
      check_moe_gemm(3, 6, 16, 512, 128, fp8);
      check_moe_gemm(700, 6, 64, 128, 256, fp8);
    }
    check_indexer_select_all();
    for (const int64_t visible : {1024, 8192, 65536})
      for (const int64_t rows : {1, 64}) time_indexer_select(visible, rows);
    check_sample_rows(129280, 6);
    check_sample_rows(1000, 4);
    check_sample_rows_on_host(129280);
    check_penalties(129280);
    check_masked_sampling(129280);
    check_masked_sampling(1000);
    time_sample_rows(129280);
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 2;
  }
  std::printf("%s: %d failing check(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
