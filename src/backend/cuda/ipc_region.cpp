#include "backend/cuda/ipc_region.h"

#include <cuda_runtime.h>

#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
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

// A region of device memory under an IPC handle, and what its end does with the memory.
class IpcRegion : public model::SharedRegion {
 public:
  enum class AtEnd { Free, Close, Keep };  // the maker's allocation; an opened handle; a range of an opened arena
  IpcRegion(float* data, int64_t floats, std::string handle, AtEnd at_end)
      : data_(data), floats_(floats), handle_(std::move(handle)), at_end_(at_end) {}
  ~IpcRegion() override {
    if (at_end_ == AtEnd::Free) cudaFree(data_);
    else if (at_end_ == AtEnd::Close) cudaIpcCloseMemHandle(data_);
  }
  IpcRegion(const IpcRegion&) = delete;
  IpcRegion& operator=(const IpcRegion&) = delete;
  float* data() const override { return data_; }
  int64_t floats() const override { return floats_; }
  std::string handle() const override { return handle_; }

 private:
  float* data_;
  int64_t floats_;
  std::string handle_;
  AtEnd at_end_;
};

// One exported allocation per process and device, kept for the process's life: each transfer's region is a range
// of it, so a transfer costs a sub-allocation here and nothing on the decode side (which keeps the arena open),
// instead of cudaMalloc + cudaIpcGetMemHandle + cudaFree here and cudaIpcOpenMemHandle + close there. A state that
// finds no room gets an allocation of its own, exported alone.
class IpcArena {
 public:
  static constexpr int64_t kFloats = int64_t{64} << 20;  // 256 MiB
  static constexpr int64_t kAlign = 64;                  // floats: 256-byte aligned ranges

  static IpcArena* of_device(int device) {
    static std::mutex mu;
    static std::map<int, std::unique_ptr<IpcArena>> arenas;
    std::lock_guard lock(mu);
    auto& a = arenas[device];
    if (!a) {
      float* d = nullptr;
      if (cudaMalloc(&d, static_cast<size_t>(kFloats) * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;  // no room for it: every region is then its own allocation
      }
      cudaIpcMemHandle_t h{};
      if (cudaIpcGetMemHandle(&h, d) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(d);
        return nullptr;
      }
      a = std::unique_ptr<IpcArena>(new IpcArena(d, device, hex(&h, sizeof h)));
    }
    return a.get();
  }

  // A range of `floats`, or -1 when none is free.
  int64_t take(int64_t floats) {
    const int64_t n = std::max<int64_t>(kAlign, (floats + kAlign - 1) / kAlign * kAlign);
    std::lock_guard lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= n) {
        const int64_t at = it->first, left = it->second - n;
        free_.erase(it);
        if (left > 0) free_[at + n] = left;
        taken_[at] = n;
        return at;
      }
    return -1;
  }
  void give_back(int64_t at) {
    std::lock_guard lock(mu_);
    const auto t = taken_.find(at);
    if (t == taken_.end()) return;
    int64_t start = at, n = t->second;
    taken_.erase(t);
    // Merge with the free neighbours on both sides.
    if (const auto next = free_.find(start + n); next != free_.end()) {
      n += next->second;
      free_.erase(next);
    }
    if (auto prev = free_.lower_bound(start); prev != free_.begin()) {
      --prev;
      if (prev->first + prev->second == start) {
        start = prev->first;
        n += prev->second;
        free_.erase(prev);
      }
    }
    free_[start] = n;
  }
  float* base() const { return base_; }
  int device() const { return device_; }
  const std::string& handle_hex() const { return hex_; }

 private:
  IpcArena(float* base, int device, std::string hex) : base_(base), device_(device), hex_(std::move(hex)) {
    free_[0] = kFloats;
  }
  float* base_;
  int device_;
  std::string hex_;
  std::mutex mu_;
  std::map<int64_t, int64_t> free_, taken_;  // offset → floats
};

// A range of the arena, given back when the maker is done with it.
class ArenaRegion : public model::SharedRegion {
 public:
  ArenaRegion(IpcArena& arena, int64_t at, int64_t floats) : arena_(arena), at_(at), floats_(floats) {}
  ~ArenaRegion() override { arena_.give_back(at_); }
  ArenaRegion(const ArenaRegion&) = delete;
  ArenaRegion& operator=(const ArenaRegion&) = delete;
  float* data() const override { return arena_.base() + at_; }
  int64_t floats() const override { return floats_; }
  std::string handle() const override {
    return cat(kPrefix, arena_.device(), ":", floats_, ":", arena_.handle_hex(), "@", at_);
  }

 private:
  IpcArena& arena_;
  int64_t at_, floats_;
};

}  // namespace

std::unique_ptr<model::SharedRegion> make_ipc_region(int64_t floats) {
  if (floats < 0) fail("CUDA IPC: a region of ", floats, " floats");
  int device = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&device));
  if (IpcArena* arena = IpcArena::of_device(device))
    if (const int64_t at = arena->take(floats); at >= 0) return std::make_unique<ArenaRegion>(*arena, at, floats);
  float* d = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(&d, static_cast<size_t>(std::max<int64_t>(1, floats)) * sizeof(float)));
  cudaIpcMemHandle_t h{};
  if (const cudaError_t e = cudaIpcGetMemHandle(&h, d); e != cudaSuccess) {
    cudaFree(d);
    fail("CUDA IPC: cannot export a memory handle: ", cudaGetErrorString(e));
  }
  return std::make_unique<IpcRegion>(d, floats, cat(kPrefix, device, ":", floats, ":", hex(&h, sizeof h)),
                                     IpcRegion::AtEnd::Free);
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
  // A range of the maker's arena: HEX@OFFSET.
  int64_t offset = -1;
  if (const size_t at = parts[2].find('@'); at != std::string::npos) {
    const std::string off = parts[2].substr(at + 1);
    if (std::from_chars(off.data(), off.data() + off.size(), offset).ec != std::errc() || offset < 0 ||
        offset > IpcArena::kFloats)
      return bad("a bad offset into the arena");
    parts[2].resize(at);
  }
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
  if (offset >= 0) {
    if (floats > IpcArena::kFloats - offset) return bad("a range past the arena's end");
    // Each arena is opened once and stays mapped (a process may not open one handle twice).
    static std::mutex mu;
    static std::map<std::string, float*> opened;
    std::lock_guard lock(mu);
    float*& base = opened[parts[2]];
    if (!base) {
      void* p = nullptr;
      if (const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
        cudaGetLastError();
        opened.erase(parts[2]);
        return bad(cat("cannot open the arena (made on device ", device, "): ", cudaGetErrorString(e)));
      }
      base = static_cast<float*>(p);
    }
    return std::make_unique<IpcRegion>(base + offset, floats, handle, IpcRegion::AtEnd::Keep);
  }
  void* p = nullptr;
  // Opened on this process's current device: the same GPU, or a peer of the maker's.
  if (const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
    cudaGetLastError();
    return bad(cat("cannot open it (made on device ", device, "): ", cudaGetErrorString(e)));
  }
  return std::make_unique<IpcRegion>(static_cast<float*>(p), floats, handle, IpcRegion::AtEnd::Close);
}

}  // namespace strata::cuda
