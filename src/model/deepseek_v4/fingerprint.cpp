#include "model/deepseek_v4/fingerprint.h"

#include <xxhash.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "core/error.h"
#include "model/deepseek_v4/model.h"

namespace strata::model::v4 {

namespace {

// Bumped whenever what goes into the hash changes, so old and new fingerprints never collide by accident.
constexpr char kScheme[] = "strata/deepseek_v4/fingerprint/1";

class Hasher {
 public:
  Hasher() : state_(XXH3_createState(), XXH3_freeState) {
    if (!state_ || XXH3_128bits_reset(state_.get()) != XXH_OK) fail("fingerprint: cannot start an XXH3 state");
  }
  void bytes(const void* data, size_t n) { XXH3_128bits_update(state_.get(), data, n); }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  void text(const std::string& s) {  // length first: ("ab", "c") and ("a", "bc") hash differently
    u64(s.size());
    bytes(s.data(), s.size());
  }
  ModelFingerprint digest() const {
    const XXH128_hash_t h = XXH3_128bits_digest(state_.get());
    return {h.low64, h.high64};
  }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state_;
};

// config.json as config_to_json writes it (keys sorted, numbers in shortest round-trip form), less the fields that
// change no number the model computes.
std::string numeric_config(const ModelConfig& config) {
  nlohmann::json j = config_to_json(config);
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "initializer_range"}) j.erase(key);
  return j.dump();
}

}  // namespace

std::string backend_label(const std::string& device, const std::string& precision, const std::string& gpu_name) {
  if (device == "cpu") return precision == "official" ? "cpu official" : "cpu fp32";
  return device + " " + precision + (gpu_name.empty() ? "" : " " + gpu_name);
}

// Every byte of every tensor is hashed. XXH3 runs at memory speed, so the cost is reading the weights once:
// measured on the 2-core development machine, the 1-layer `flash` preset in FP8 made in memory by random_weights
// (8.71 GB in 1,576 tensors) hashes in 1.1–1.4 s (6–8 GB/s). A whole V4-Flash checkpoint (~160 GB with FP4
// experts) would take ~25 s at that rate on 2 cores, less with more cores until memory bandwidth bounds it, and
// the disk bounds it when the pages are not cached. A sampled hash would be faster but would let a checkpoint that differs in one unsampled expert
// (a patched or fine-tuned one) pass as the same model, and the cost is paid once per process, on first use
// (Model::fingerprint), not at load: a server that ships states can call fingerprint() at start-up.
ModelFingerprint fingerprint_of(const ModelConfig& config, const TensorStore& weights, const std::string& backend) {
  std::vector<const TensorView*> tensors;
  for (const auto& [name, view] : weights.tensors()) tensors.push_back(&view);
  std::vector<XXH128_hash_t> digests(tensors.size());
  const int64_t count = static_cast<int64_t>(tensors.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i)
    digests[static_cast<size_t>(i)] = XXH3_128bits(tensors[static_cast<size_t>(i)]->data, tensors[static_cast<size_t>(i)]->nbytes);

  Hasher h;
  h.text(kScheme);
  h.text(numeric_config(config));
  h.u64(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = *tensors[i];
    h.text(t.name);
    h.text(dtype_name(t.dtype));
    h.u64(t.shape.size());
    for (int64_t d : t.shape) h.u64(static_cast<uint64_t>(d));
    h.u64(t.nbytes);
    h.u64(digests[i].low64);
    h.u64(digests[i].high64);
  }
  h.text(backend);
  return h.digest();
}

ModelFingerprint Model::fingerprint() const {
  std::call_once(fingerprint_->once, [this] {
    if (!parts_->w.store) fail("fingerprint: the model's weights carry no tensor store to hash");
    const bool gpu = device_ == Device::Cuda;
    fingerprint_->backend =
        backend_label(device_name(device_), precision_name(precision_), gpu ? cuda_device_name() : "");
    fingerprint_->value = fingerprint_of(parts_->cfg, *parts_->w.store, fingerprint_->backend);
  });
  return fingerprint_->value;
}

}  // namespace strata::model::v4
