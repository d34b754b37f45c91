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
  for (const char* option : {"precision", "cuda-graphs", "cuda-op-times"})
    if (args.has(option) && f.device != model::Device::Cuda)
      fail("option --", option, ": applies to --device cuda only (the CPU backend is always fp32, eager and untimed)");
  return f;
}

}  // namespace strata::cli
