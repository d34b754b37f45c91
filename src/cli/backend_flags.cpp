#include "cli/backend_flags.h"

#include "core/error.h"

namespace strata::cli {

std::string backend_flags_help(int column) {
  const std::string pad(static_cast<size_t>(column), ' ');
  auto line = [&](std::string flag, const std::string& text) {
    flag = "  " + flag;
    if (flag.size() < pad.size()) flag += std::string(pad.size() - flag.size(), ' ');
    return flag + text + "\n";
  };
  return line("--precision P", "with --device cuda: bf16 (default), fp32, or fp8 (the checkpoint's FP8 matrices stay FP8)") +
         line("--cuda-graphs on|off", "with --device cuda: record decode steps once and replay them as CUDA graphs") +
         pad + "(default on; off runs every step eagerly, for comparisons)\n" +
         line("--cuda-op-times", "with --device cuda: time every backend op with CUDA events and print a table at") +
         pad + "exit (slows every step)\n";
}

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
  for (const char* option : {"precision", "cuda-graphs", "cuda-op-times"})
    if (args.has(option) && f.device != model::Device::Cuda)
      fail("option --", option, ": applies to --device cuda only (the CPU backend is always fp32, eager and untimed)");
  return f;
}

}  // namespace strata::cli
