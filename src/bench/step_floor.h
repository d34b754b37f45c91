#pragma once
// The least one forward step of DeepSeek-V4 must move and compute: the bytes it has to read from device memory and
// the FLOPs it has to do, whatever the kernels. Divided by the device's measured copy bandwidth and bf16 GEMM peak,
// they give the step's hardware floor, which `strata bench` puts next to every measured step time.
//
// Counted from the config alone (plus which routed experts the step ran), so a test can check it by hand:
//   bytes = weights touched + sequence state read
//     weights: every non-routed matrix once (attention projections, compressor and indexer, router gate, shared
//              expert, the vocabulary head when a row needs logits), the distinct routed experts the step ran,
//              the embedding rows of its tokens, the fp32 vectors (norms, mHC mappings, sinks, position biases,
//              correction bias) and the hash layers' tid2eid rows of its tokens;
//     state:   per sequence and layer, the sliding-window keys already in the state and the compressed entries
//              read: HCA all closed entries, CSA every indexer key (all are scored) plus the entries picked.
//   flops = 2 × parameters used per token × tokens (+ the head for logits rows) + attention: per query and
//           attended key, QKᵀ and PV over every head (K = V, dim head_dim), plus the indexer's scoring.
// Matrices count at the device's storage bytes per parameter (WeightBytes); vectors, keys and entries at fp32 (as
// stored today).
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace strata::bench {

// Bytes per parameter as the CUDA backend stores weights in a precision ("bf16", "fp32" or "fp8"): the layers'
// matrices, and the ends (embedding rows, vocabulary head). With fp8 the layers' matrices keep the checkpoint's
// e4m3 codes plus one fp32 scale per 128×128 block (1 + 4/16384 bytes) while the ends stay bf16; this assumes an
// FP8 checkpoint (strata model init --dtype fp8, as the benchmarks use). FP4 experts are dequantized on upload.
struct WeightBytes {
  double matrix = 2.0;
  double ends = 2.0;
};
WeightBytes device_weight_bytes(const std::string& precision);

// One sequence's part of a step: `context` tokens already in its state, `tokens` new ones this step. Each sequence
// gets one row of logits (the last token's), as in a decode step or a prefill chunk without all_logits.
struct SequenceStep {
  int64_t context = 0;
  int64_t tokens = 1;
};

struct StepWork {
  double weight_bytes = 0;  // parameters read (matrices, vectors, tid2eid rows, embedding rows)
  double state_bytes = 0;   // sliding-window keys and compressed entries read
  double flops = 0;
  double bytes() const { return weight_bytes + state_bytes; }
};

// `routed_experts[l]`: distinct routed experts layer l ran in the step (Model::routed_experts_last_forward()).
StepWork step_floor(const model::ModelConfig& config, const std::vector<SequenceStep>& sequences,
                    const std::vector<int64_t>& routed_experts, const WeightBytes& bytes_per_param);

// The time no implementation can beat on a device that reads `bandwidth_gbs` GB/s and computes `peak_tflops`.
double floor_seconds(const StepWork& work, double bandwidth_gbs, double peak_tflops);

}  // namespace strata::bench
