#include "model/device.h"

#include "core/error.h"

namespace strata::model {

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") {
    if (!cuda_available()) fail("--device cuda: this strata was built without the CUDA backend (configure with -DSTRATA_CUDA=on)");
    return Device::Cuda;
  }
  fail("unknown device '", name, "' (expected cpu or cuda)");
}

const char* device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

Precision parse_precision(const std::string& name) {
  if (name == "bf16") return Precision::Bf16;
  if (name == "fp32") return Precision::Fp32;
  if (name == "fp8") return Precision::Fp8;
  fail("unknown precision '", name, "' (expected bf16, fp32 or fp8)");
}

const char* precision_name(Precision p) {
  return p == Precision::Fp32 ? "fp32" : p == Precision::Fp8 ? "fp8" : "bf16";
}

bool cuda_available() {
#ifdef STRATA_WITH_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef STRATA_WITH_CUDA
std::string cuda_device_name() { return ""; }
#endif

}  // namespace strata::model
