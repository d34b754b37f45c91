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
  if (name == "official") return Precision::Official;
  fail("unknown precision '", name, "' (expected bf16, fp32, fp8 or official)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp8: return "fp8";
    case Precision::Official: return "official";
    case Precision::Bf16: break;
  }
  return "bf16";
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
