#pragma once
// A model's fingerprint: a 128-bit XXH3 hash of everything that decides its numbers — the config, every checkpoint
// tensor and the backend that computes. Two engines whose fingerprints agree produce the same logits bit for bit
// from the same state, so a state snapshot (state_snapshot.h) made by one restores into the other; any other pair
// is refused.
#include <cstdint>
#include <mutex>
#include <string>

#include "model/config.h"
#include "model/model_fingerprint.h"
#include "model/safetensors.h"

namespace strata::model::v4 {

using model::ModelFingerprint;


// The backend's part of a fingerprint, e.g. "cpu fp32" or "cuda bf16 NVIDIA H200": device, the arithmetic of its
// matrix products and, on a GPU, the device name (kernels and their summation order differ by architecture).
// The CPU backend computes bf16, fp32 and fp8 alike in fp32, so they share one label; `official` has its own.
std::string backend_label(const std::string& device, const std::string& precision, const std::string& gpu_name);

// Hashes, in this order: a scheme tag; the canonical config.json (config_to_json) less the fields that change no
// number (token ids, initializer_range); each tensor of `weights` in name order: its name, dtype, shape and the
// XXH3-128 of its bytes; then `backend`. Tensors are hashed in parallel (OpenMP), the digests combined in order,
// so the result does not depend on the thread count.
ModelFingerprint fingerprint_of(const ModelConfig& config, const TensorStore& weights, const std::string& backend);

// A Model's fingerprint, computed on first use and kept (model.h: Model::fingerprint).
struct LazyFingerprint {
  std::once_flag once;
  ModelFingerprint value;
  std::string backend;  // backend_label's, kept for error messages
};

}  // namespace strata::model::v4
