#pragma once
// DeepSeek-V4 kernels of the CUDA backend, one header per concept (the kernels in the .cuh file of the same name,
// all compiled through v4_kernels.cu): each is the device form of one CpuBackend op (or part of one) and has the
// same meaning; the CudaBackend op files (mhc.cpp, compressor.cpp, …) string them together. Pointers are device
// pointers.
#include "backend/cuda/attention_keys.h"
#include "backend/cuda/compressor.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/linear.h"
#include "backend/cuda/mhc.h"
#include "backend/cuda/moe_experts.h"
#include "backend/cuda/router.h"
#include "backend/cuda/step_layout.h"
