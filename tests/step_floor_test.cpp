// The benchmark's hardware floor (src/bench/step_floor.h): bytes and FLOPs of one step of the tiny preset, counted
// here by hand from its shapes.
#include "bench/step_floor.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/deepseek_v4/presets.h"

namespace strata {
namespace {

// tiny: vocab 512, hidden 64, 4 heads of 64, q_lora 32, o_groups 2 × o_lora 32, 8 experts of 32 (top-2) + 1
// shared, indexer 16 heads of 32 (top-8), window 128, CSA rate 4, HCA rate 128, hc 4 (mix = 6·4 = 24).
// Layers: 0 sliding + hash MoE, 1 CSA, 2 HCA, 3 CSA (top-k MoE).
//
// Matrix parameters per layer:
//   attention  wq_a 32·64 + wq_b 256·32 + wkv 64·64 + wo_a 64·128 + wo_b 64·64 = 26624
//   router 8·64 = 512, shared expert 3·32·64 = 6144                                   → every layer 33280
//   CSA: compressor 2·128·64 = 16384, indexer wq_b 512·32 = 16384, weights_proj 16·64 = 1024,
//        indexer compressor 2·64·64 = 8192                                              → + 41984 = 75264
//   HCA: compressor 2·64·64 = 8192                                                      → + 8192 = 41472
//   all layers: 33280 + 75264 + 41472 + 75264 = 225280; the head 512·64 = 32768; one expert 6144.
// fp32 floats per layer: mHC 2·(24·256 + 24 + 3) = 12342, norms 64 + 64, q_norm 32, kv_norm 64, sinks 4 = 12570;
//   + correction bias 8 (layers 1–3); CSA + ape 4·128 + norm 64 + indexer ape 4·64 + norm 32 = 864;
//   HCA + ape 128·64 + norm 64 = 8256. Sum 12570 + 13442 + 20834 + 13442 = 60288; the ends: norm 64, hc_head_fn
//   4·256, base 4, scale 1 = 1093.
TEST(StepFloor, TinyDecodeStepByHand) {
  const model::ModelConfig c = model::v4::preset_config("tiny");
  // One sequence with 256 tokens of context decodes one token; each layer ran its 2 experts.
  const bench::StepWork w = bench::step_floor(c, {{256, 1}}, {2, 2, 2, 2}, {2.0, 2.0});
  // Weights: (225280 + 32768)·2 + 4 layers · 2 experts · 6144 · 2 + one embedding row 64·2
  //          + (60288 + 1093)·4 + the hash layer's tid2eid row 2·4 = 516096 + 98304 + 128 + 245524 + 8.
  EXPECT_DOUBLE_EQ(w.weight_bytes, 860060);
  // State: 4 windows of 128 keys · 64 · 4 = 131072; CSA (257/4 = 64 entries): 64 indexer keys · 32 · 4 + 8 picked
  // · 64 · 4 = 10240, twice; HCA (257/128 = 2 entries): 2 · 64 · 4 = 512.
  EXPECT_DOUBLE_EQ(w.state_bytes, 131072 + 2 * 10240 + 512);
  // FLOPs: 2 · (225280 + 4 · 2 · 6144) matrices + 4 · 2 · 12288 mHC + 2 · 4 · 256 HyperHead + 2 · 32768 head
  // = 548864 + 98304 + 2048 + 65536; attention at position 256, 4 heads · 4 · 64 = 1024 per key: sliding 128
  // keys, CSA 128 + 8 keys + indexer 2 · 64 · 16 · 32, HCA 128 + 2 keys:
  // 131072 + 2 · (139264 + 65536) + 133120 = 673792.
  EXPECT_DOUBLE_EQ(w.flops, 548864 + 98304 + 2048 + 65536 + 673792);
  EXPECT_DOUBLE_EQ(w.bytes(), 860060 + 152064);
}

TEST(StepFloor, BatchSharesWeightsNotState) {
  const model::ModelConfig c = model::v4::preset_config("tiny");
  const bench::StepWork one = bench::step_floor(c, {{256, 1}}, {2, 2, 2, 2}, {2.0, 2.0});
  const bench::StepWork two = bench::step_floor(c, {{256, 1}, {256, 1}}, {2, 2, 2, 2}, {2.0, 2.0});
  // A second sequence reads its own state and its embedding row and tid2eid row, not the weights again.
  EXPECT_DOUBLE_EQ(two.state_bytes, 2 * one.state_bytes);
  EXPECT_DOUBLE_EQ(two.weight_bytes, one.weight_bytes + 64 * 2 + 2 * 4);
  EXPECT_DOUBLE_EQ(two.flops, 2 * one.flops);
  // Routed experts count by use: 3 more distinct experts in layer 1 cost 3 · 6144 · 2 bytes.
  const bench::StepWork more = bench::step_floor(c, {{256, 1}, {256, 1}}, {2, 5, 2, 2}, {2.0, 2.0});
  EXPECT_DOUBLE_EQ(more.weight_bytes - two.weight_bytes, 3 * 6144 * 2);
}

TEST(StepFloor, PrefillChunkAttendsCausally) {
  const model::ModelConfig c = model::v4::preset_config("tiny", 1);  // one sliding layer
  // 4 fresh tokens: query p sees p + 1 keys, 1 + 2 + 3 + 4 = 10 keys · 1024 FLOPs; no state before the chunk.
  const bench::StepWork w = bench::step_floor(c, {{0, 4}}, {2}, {2.0, 2.0});
  EXPECT_DOUBLE_EQ(w.state_bytes, 0);
  const double matrices = 33280 + 2 * 6144, mhc = 12288;
  EXPECT_DOUBLE_EQ(w.flops, 2 * (matrices + mhc) * 4 + 10 * 1024 + 2 * (32768 + 1024));
}

// FP8 weights: the layers' matrices at 1 byte plus a 4-byte scale per 128×128 block, the ends (embedding rows and
// vocabulary head) still bf16; fp32 doubles everything. Only the weight bytes change, not state or FLOPs.
TEST(StepFloor, WeightBytesFollowTheDevicePrecision) {
  const model::ModelConfig c = model::v4::preset_config("tiny");
  const bench::WeightBytes fp8 = bench::device_weight_bytes("fp8");
  EXPECT_DOUBLE_EQ(fp8.matrix, 1.0 + 4.0 / 16384.0);
  EXPECT_DOUBLE_EQ(fp8.ends, 2.0);
  const bench::StepWork bf16 = bench::step_floor(c, {{256, 1}}, {2, 2, 2, 2}, bench::device_weight_bytes("bf16"));
  const bench::StepWork f8 = bench::step_floor(c, {{256, 1}}, {2, 2, 2, 2}, fp8);
  // Layer matrices and experts: 225280 + 4 · 2 · 6144 = 274432 parameters (the by-hand test above), the head
  // 32768 and one embedding row 64 stay at 2 bytes.
  EXPECT_DOUBLE_EQ(bf16.weight_bytes - f8.weight_bytes, 274432 * (2.0 - fp8.matrix));
  EXPECT_DOUBLE_EQ(f8.state_bytes, bf16.state_bytes);
  EXPECT_DOUBLE_EQ(f8.flops, bf16.flops);
  const bench::StepWork f32 = bench::step_floor(c, {{256, 1}}, {2, 2, 2, 2}, bench::device_weight_bytes("fp32"));
  EXPECT_DOUBLE_EQ(f32.weight_bytes - bf16.weight_bytes, (274432 + 32768 + 64) * 2.0);
  EXPECT_THROW(bench::device_weight_bytes("fp4"), Error);
}

TEST(StepFloor, FloorIsTheSlowerOfMemoryAndCompute) {
  bench::StepWork w;
  w.weight_bytes = 3e9;  // 1 ms at 3000 GB/s
  w.flops = 2e12;        // 2 ms at 1000 TFLOP/s
  EXPECT_DOUBLE_EQ(bench::floor_seconds(w, 3000, 1000), 2e-3);
  EXPECT_DOUBLE_EQ(bench::floor_seconds(w, 3000, 4000), 1e-3);
}

TEST(StepFloor, RejectsRoutedCountsOfTheWrongLength) {
  EXPECT_THROW(bench::step_floor(model::v4::preset_config("tiny"), {{0, 1}}, {2, 2}, {2.0, 2.0}), Error);
}

}  // namespace
}  // namespace strata
