#include "backend/cuda/ipc_region.h"

#include <cuda_runtime.h>

#include <charconv>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace strata::cuda {

namespace {

constexpr const char* kPrefix = "cuda-ipc:";

std::string hex(const void* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(bytes)[i];
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

class IpcRegion : public model::SharedRegion {
 public:
  IpcRegion(float* data, int64_t floats, int device, std::string handle, bool owner)
      : data_(data), floats_(floats), device_(device), handle_(std::move(handle)), owner_(owner) {}
  ~IpcRegion() override {
    if (owner_) cudaFree(data_);
    else cudaIpcCloseMemHandle(data_);
  }
  IpcRegion(const IpcRegion&) = delete;
  IpcRegion& operator=(const IpcRegion&) = delete;
  float* data() const override { return data_; }
  int64_t floats() const override { return floats_; }
  std::string handle() const override { return handle_; }

 private:
  float* data_;
  int64_t floats_;
  int device_;
  std::string handle_;
  bool owner_;
};

}  // namespace

std::unique_ptr<model::SharedRegion> make_ipc_region(int64_t floats) {
  if (floats < 0) fail("CUDA IPC: a region of ", floats, " floats");
  int device = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&device));
  float* d = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(&d, static_cast<size_t>(std::max<int64_t>(1, floats)) * sizeof(float)));
  cudaIpcMemHandle_t h{};
  if (const cudaError_t e = cudaIpcGetMemHandle(&h, d); e != cudaSuccess) {
    cudaFree(d);
    fail("CUDA IPC: cannot export a memory handle: ", cudaGetErrorString(e));
  }
  return std::make_unique<IpcRegion>(d, floats, device, cat(kPrefix, device, ":", floats, ":", hex(&h, sizeof h)), true);
}

std::unique_ptr<model::SharedRegion> open_ipc_region(const std::string& handle) {
  const auto bad = [&](const std::string& why) -> std::unique_ptr<model::SharedRegion> {
    fail("CUDA IPC handle '", handle.substr(0, 60), "': ", why);
  };
  if (handle.rfind(kPrefix, 0) != 0) return bad("not of the form cuda-ipc:DEVICE:FLOATS:HEX (a state made on another kind of device?)");
  std::vector<std::string> parts;
  for (size_t at = std::strlen(kPrefix);;) {
    const size_t colon = handle.find(':', at);
    parts.push_back(handle.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  if (parts.size() != 3) return bad("expected three fields after 'cuda-ipc:'");
  int device = -1;
  int64_t floats = -1;
  if (std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), device).ec != std::errc() || device < 0)
    return bad("a bad device number");
  if (std::from_chars(parts[1].data(), parts[1].data() + parts[1].size(), floats).ec != std::errc() || floats < 0)
    return bad("a bad float count");
  cudaIpcMemHandle_t h{};
  if (parts[2].size() != 2 * sizeof h) return bad(cat("the handle has ", parts[2].size() / 2, " bytes, not ", sizeof h));
  for (size_t i = 0; i < sizeof h; ++i) {
    unsigned v = 0;
    if (std::from_chars(parts[2].data() + 2 * i, parts[2].data() + 2 * i + 2, v, 16).ec != std::errc())
      return bad("the handle is not hex");
    reinterpret_cast<unsigned char*>(&h)[i] = static_cast<unsigned char>(v);
  }
  void* p = nullptr;
  // Opened on this process's current device: the same GPU, or a peer of the maker's.
  if (const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
    cudaGetLastError();
    return bad(cat("cannot open it (made on device ", device, "): ", cudaGetErrorString(e)));
  }
  return std::make_unique<IpcRegion>(static_cast<float*>(p), floats, device, handle, false);
}

}  // namespace strata::cuda
