#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace strata::model {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(errno));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(path, ": mmap failed: ", std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

void TensorStore::add_file(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  if (file->size() < 8) fail(path, ": truncated safetensors file: ", file->size(), " bytes, expected at least 8");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file->data(), 8);
  if (header_len > file->size() - 8)
    fail(path, ": truncated safetensors file: header claims ", header_len, " bytes but only ", file->size() - 8,
         " follow");
  json header;
  try {
    header = json::parse(file->data() + 8, file->data() + 8 + header_len);
  } catch (const json::exception& e) {
    fail(path, ": safetensors header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) fail(path, ": safetensors header must be a JSON object");
  const uint8_t* base = file->data() + 8 + header_len;
  const size_t data_size = file->size() - 8 - header_len;

  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) fail(path, ": __metadata__ must be an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      fail(path, ": tensor '", name, "': header entry needs dtype, shape and data_offsets");
    TensorView v;
    v.name = name;
    v.file = path;
    if (!e["dtype"].is_string() || !parse_dtype(e["dtype"].get<std::string>(), &v.dtype))
      fail(path, ": tensor '", name, "': unsupported dtype ", e["dtype"].dump());
    if (!e["shape"].is_array()) fail(path, ": tensor '", name, "': shape must be an array");
    for (const json& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(path, ": tensor '", name, "': bad shape ", e["shape"].dump());
      v.shape.push_back(d.get<int64_t>());
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path, ": tensor '", name, "': data_offsets must be [begin, end]");
    const size_t begin = off[0].get<size_t>(), end = off[1].get<size_t>();
    if (begin > end) fail(path, ": tensor '", name, "': data_offsets begin ", begin, " > end ", end);
    if (end > data_size)
      fail(path, ": truncated safetensors file: tensor '", name, "' ends at byte ", end, " of the data section but only ",
           data_size, " bytes are present");
    v.nbytes = end - begin;
    // Multiply with overflow checks: a hostile shape must not wrap around to match the byte count.
    size_t expected = dtype_size(v.dtype);
    for (int64_t d : v.shape)
      if (__builtin_mul_overflow(expected, static_cast<size_t>(d), &expected))
        fail(path, ": tensor '", name, "': shape ", v.shape_str(), " is too large");
    if (expected != v.nbytes)
      fail(path, ": tensor '", name, "': ", v.nbytes, " bytes for ", dtype_name(v.dtype), v.shape_str(), ", expected ",
           expected);
    v.data = base + begin;
    if (v.nbytes) ranges.emplace_back(begin, end);
    if (tensors_.count(name)) fail(path, ": tensor '", name, "' also appears in ", tensors_[name].file);
    tensors_.emplace(name, std::move(v));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail(path, ": tensors overlap in the data section at byte ", ranges[i].first);
  files_.push_back(std::move(file));
}

TensorStore TensorStore::open(const std::string& path) {
  TensorStore store;
  if (!fs::exists(path)) fail(path, ": no such file or directory");
  if (!fs::is_directory(path)) {
    store.add_file(path);
    return store;
  }
  const fs::path dir(path);
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    json j;
    try {
      std::ifstream in(index);
      j = json::parse(in);
    } catch (const json::exception& e) {
      fail(index.string(), ": not valid JSON: ", e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail(index.string(), ": expected an object 'weight_map' {tensor name: file}");
    std::set<std::string> shard_names;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) fail(index.string(), ": weight_map['", it.key(), "'] must be a file name");
      shard_names.insert(it->get<std::string>());
    }
    for (const auto& shard : shard_names) {
      if (!fs::exists(dir / shard)) fail(index.string(), ": shard '", shard, "' is listed but missing");
      store.add_file((dir / shard).string());
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      const auto found = store.tensors_.find(it.key());
      if (found == store.tensors_.end())
        fail(index.string(), ": tensor '", it.key(), "' is mapped to '", it->get<std::string>(), "' but that file lacks it");
      if (fs::path(found->second.file).filename() != it->get<std::string>())
        fail(index.string(), ": tensor '", it.key(), "' is mapped to '", it->get<std::string>(), "' but found in ",
             found->second.file);
    }
    return store;
  }
  if (fs::exists(dir / "model.safetensors")) {
    store.add_file((dir / "model.safetensors").string());
    return store;
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  if (files.empty()) fail(path, ": no model.safetensors, model.safetensors.index.json or *.safetensors file");
  std::sort(files.begin(), files.end());
  for (const auto& f : files) store.add_file(f.string());
  return store;
}

const TensorView* TensorStore::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void TensorStore::add_in_memory(TensorView view, std::shared_ptr<const void> owner) {
  if (tensors_.count(view.name)) fail("tensor '", view.name, "' added twice to one checkpoint");
  if (view.file.empty()) view.file = "(memory)";
  if (buffers_.empty() || buffers_.back() != owner) buffers_.push_back(std::move(owner));
  const std::string name = view.name;
  tensors_.emplace(name, std::move(view));
}

OwnedTensor make_f32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  OwnedTensor t;
  t.name = name;
  t.dtype = DType::F32;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(float));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

size_t TensorSpec::nbytes() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return static_cast<size_t>(n) * dtype_size(dtype);
}

void write_safetensors_streaming(const std::string& path, const std::vector<TensorSpec>& specs,
                                 const std::function<void(size_t, std::vector<uint8_t>&)>& fill,
                                 const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : specs) {
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned, as HF's writer does
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(path, ": cannot open for writing");
  const uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < specs.size(); ++i) {
    bytes.clear();
    fill(i, bytes);
    if (bytes.size() != specs[i].nbytes())
      fail("write_safetensors: tensor '", specs[i].name, "' got ", bytes.size(), " bytes, expected ", specs[i].nbytes());
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  if (!out) fail(path, ": write failed");
}

void write_safetensors(const std::string& path, const std::vector<OwnedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  write_safetensors_streaming(path, specs, [&](size_t i, std::vector<uint8_t>& bytes) { bytes = tensors[i].bytes; },
                              metadata);
}

}  // namespace strata::model
