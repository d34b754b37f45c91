// DeepSeek-V4 kernels (v4_kernels.h). First versions: fp32 arithmetic in the order of the CPU reference,
// correctness before speed; the GEMMs (cuBLASLt) carry the FLOPs.
//
// One file per concept for reading (the .cuh files below, each with the header of its name), one translation unit
// for building: each nvcc run has a fixed cost (the host compiler's passes over the CUDA headers, the fatbinary) of
// about 4 s of CPU on CI's machine, more than most of these kernels cost themselves. As seven translation units
// these files took 33 s of CPU to compile, as this one 8 s (src/backend/README.md). The .cuh files are never
// compiled on their own: CMakeLists.txt globs *.cu and *.cpp only.
#include "backend/cuda/linear.cuh"
#include "backend/cuda/mhc.cuh"
#include "backend/cuda/compressor.cuh"
#include "backend/cuda/indexer.cuh"
#include "backend/cuda/attention_keys.cuh"
#include "backend/cuda/router.cuh"
#include "backend/cuda/moe_experts.cuh"
#include "backend/cuda/device_copies.cuh"
