#pragma once
// Memory that two engine processes on one host both address: a prefill replica writes a state's floats into one, a
// decode replica opens it by its handle and copies them straight into its slot — GPU to GPU on CUDA (IPC memory
// handles: device memory of one process mapped into another), host to host on the CPU (POSIX shared memory) — so
// only the state's skeleton (counts, offsets, checksums) crosses the socket (docs/disaggregation.md "Same host").
#include <cstdint>
#include <string>

namespace strata::model {

class SharedRegion {
 public:
  virtual ~SharedRegion() = default;  // the maker's frees the memory; an opener's unmaps it
  // `floats()` floats of the model's device memory (device addresses on a GPU).
  virtual float* data() const = 0;
  virtual int64_t floats() const = 0;
  // Printable, and all another process needs to open the region (Model::open_shared_region).
  virtual std::string handle() const = 0;
};

}  // namespace strata::model
