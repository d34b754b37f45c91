#include "cli/backend_flags.h"

#include "core/error.h"

namespace strata::cli {

BackendFlags read_backend_flags(const Args& args, const std::string& default_precision) {
  BackendFlags f;
  f.device = model::parse_device(args.str("device", "cpu"));
  f.precision = model::parse_precision(args.str("precision", default_precision));
  if (args.has("cuda-graphs")) {
    const std::string v = args.str("cuda-graphs");
    if (v != "on" && v != "off") fail("option --cuda-graphs: expected on or off, found '", v, "'");
    f.cuda.graphs = v == "on";
  }
  f.cuda.op_times = args.has("cuda-op-times");
  // Accepted on the CPU too: its backend is batch invariant by construction, so the flag's promise holds there.
  f.cuda.batch_invariant = args.has("batch-invariant");
  // The CPU backend computes bf16, fp32 and fp8 alike in fp32; `official` (DeepSeek's numerics) is its other mode.
  if (args.has("precision") && f.device != model::Device::Cuda && f.precision != model::Precision::Official)
    fail("option --precision: on the CPU only 'official' (DeepSeek's numerics) applies; bf16, fp32 and fp8 are "
         "--device cuda's (the CPU backend's own numbers are fp32)");
  for (const char* option : {"cuda-graphs", "cuda-op-times"})
    if (args.has(option) && f.device != model::Device::Cuda)
      fail("option --", option, ": applies to --device cuda only (the CPU backend is eager and untimed)");
  return f;
}

}  // namespace strata::cli
