#pragma once
// The flags that choose how a model runs, shared by generate, serve and bench: --device, --precision, and the CUDA
// backend's switches --cuda-graphs on|off, --cuda-op-times and --batch-invariant (flags, not environment variables,
// so a command line says everything a run did). Each command lists them among its Args and in its --help.
#include <string>

#include "cli/args.h"
#include "model/model.h"

namespace strata::cli {

struct BackendFlags {
  model::Device device = model::Device::Cpu;
  model::Precision precision = model::Precision::Bf16;
  model::CudaSwitches cuda;
};

// Reads the flags (precision defaults to `default_precision`); a CUDA switch without --device cuda is an error
// naming it, as is any value other than on/off.
BackendFlags read_backend_flags(const Args& args, const std::string& default_precision = "bf16");

}  // namespace strata::cli
