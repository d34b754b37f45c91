#pragma once
// Where a model computes and with which arithmetic: chosen by flags (cli/backend_flags.h), the same for every model
// of the family.
#include <string>

namespace strata::model {

enum class Device { Cpu, Cuda };
// The arithmetic of a GPU backend's matrix products. Bf16: weights and activations rounded to bf16, fp32
// accumulation (the product). Fp32: fp32 weights and activations, fp32 arithmetic — the CPU reference's numbers up
// to summation order, so whole-model checks can demand agreement even where a discrete choice (the indexer's
// top-k, the router's top-k) sits on a near-tie that bf16 rounding would flip. Fp8: matrices the checkpoint stores
// as e4m3 with 128×128 block scales stay so on the device (half the bytes of bf16); prefill-sized products quantize
// their activations per row and 128 columns to e4m3 (DeepSeek's recipe), decode-sized ones dequantize the weights
// in registers against bf16 activations; every other matrix is bf16. The CPU backend computes these three in fp32.
// Official: DeepSeek's own numerics (docs/official_numerics.md): activations held in bf16 between ops, quantized to
// FP8 in 1×128 blocks with power-of-two scales before every FP8/FP4 product, FP8 KV entries, FP4 indexer queries
// and keys — emulated on the CPU backend; the CUDA backend does not run it yet.
enum class Precision { Bf16, Fp32, Fp8, Official };
// Switches of the CUDA backend, set by flags (--cuda-graphs, --cuda-op-times, --batch-invariant), never by the environment.
struct CudaSwitches {
  bool graphs = true;     // decode steps recorded once and replayed as CUDA graphs (step_graphs.h)
  bool op_times = false;  // CUDA events around every backend op, a table at exit (op_clock.h); slows every step
  // Every row's numbers depend on that row's inputs alone (docs/batch_invariance.md): one kernel per op whatever
  // the step's row count, each summing in an order fixed by the reduction length, so a sequence gets the same bits
  // in any batch, at any place in it, and prefilled in any chunks. The CPU backend always is.
  bool batch_invariant = false;
};
Precision parse_precision(const std::string& name);  // "bf16", "fp32", "fp8" or "official"
const char* precision_name(Precision p);
// "cpu" or "cuda"; anything else is an error naming the value. "cuda" in a build without CUDA is an error too.
Device parse_device(const std::string& name);
const char* device_name(Device d);
bool cuda_available();  // this build has the CUDA backend
std::string cuda_device_name();  // the GPU the CUDA backend uses ("" without one)

}  // namespace strata::model
