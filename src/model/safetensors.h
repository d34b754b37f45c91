#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata::model {

// A tensor inside a memory-mapped safetensors file: no copy is made at load time.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // which file holds it, for error messages

  int64_t numel() const;
  std::string shape_str() const;  // "[4, 8]"
};

// One read-only mapping of a whole file; unmapped when the last owner goes away.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// All tensors of a checkpoint: a single `model.safetensors`, any single `*.safetensors` file, or a sharded set
// described by `model.safetensors.index.json`. Every header is validated when opened (offsets inside the file,
// byte counts matching dtype × shape, no overlaps), so a truncated or corrupt file fails here, by name.
class TensorStore {
 public:
  static TensorStore open(const std::string& path);  // a directory or one .safetensors file
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Adds a tensor whose bytes live in memory that `owner` keeps alive: a checkpoint made in memory (random weights
  // for a benchmark) rather than mapped from a file, so it loads through the same checks as one on disk.
  void add_in_memory(TensorView view, std::shared_ptr<const void> owner);

 private:
  void add_file(const std::string& path);
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::vector<std::shared_ptr<const void>> buffers_;  // owners of add_in_memory's tensors
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `bytes` holds numel × dtype_size bytes in little-endian row-major order.
struct OwnedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

OwnedTensor make_f32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);

// Streams a safetensors file: the header comes from the names, dtypes and shapes, then `fill(i, bytes)` is asked
// for tensor i's bytes one tensor at a time, so a checkpoint larger than memory can be written.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t nbytes() const;
};
void write_safetensors_streaming(const std::string& path, const std::vector<TensorSpec>& specs,
                                 const std::function<void(size_t, std::vector<uint8_t>&)>& fill,
                                 const std::map<std::string, std::string>& metadata = {});

// Writes the safetensors format: u64 header length, JSON header (8-byte aligned), then the data.
void write_safetensors(const std::string& path, const std::vector<OwnedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace strata::model
