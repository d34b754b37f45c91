#pragma once
// SharedRegion for engines on a GPU: device memory of one process opened by another on the same host through a CUDA
// IPC memory handle (cudaIpcGetMemHandle / cudaIpcOpenMemHandle). Regions are ranges of one 256 MiB arena per
// process and device, exported once and opened once by each reader ("cuda-ipc:DEVICE:FLOATS:HEX@OFFSET"); a region
// that finds no room in it is an allocation of its own ("cuda-ipc:DEVICE:FLOATS:HEX", HEX the handle's 64 bytes). A process cannot open its own handles (CUDA refuses), so the two engines of a
// transfer are two processes; on one GPU or two GPUs of a host with peer access.
#include <memory>
#include <string>

#include "model/shared_region.h"

namespace strata::cuda {

std::unique_ptr<model::SharedRegion> make_ipc_region(int64_t floats);
// Throws strata::Error naming the handle and the cause.
std::unique_ptr<model::SharedRegion> open_ipc_region(const std::string& handle);

}  // namespace strata::cuda
