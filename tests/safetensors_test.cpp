// The safetensors reader and writer: round trips of several dtypes, and every kind of broken file TensorStore must
// reject by name (truncated header or data, bad JSON, bad dtype, wrong byte counts, overlaps, broken shard indexes).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using model::OwnedTensor;
using model::TensorStore;

// A file laid out by hand: u64 little-endian header length, the header text, then `data`.
void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data,
               uint64_t header_len_override = 0) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = header_len_override ? header_len_override : header.size();
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(len >> (8 * i));
  out.write(reinterpret_cast<const char*>(le), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The message of the strata::Error that opening `path` throws ("" and a test failure when none is thrown).
std::string open_error(const std::string& path) {
  try {
    TensorStore::open(path);
    ADD_FAILURE() << "expected an error opening " << path;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

OwnedTensor bf16_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  OwnedTensor t;
  t.name = name;
  t.dtype = DType::BF16;
  t.shape = std::move(shape);
  for (float v : values) {
    const uint16_t h = f32_to_bf16(v);
    t.bytes.push_back(static_cast<uint8_t>(h & 0xff));
    t.bytes.push_back(static_cast<uint8_t>(h >> 8));
  }
  return t;
}

OwnedTensor i64_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  OwnedTensor t;
  t.name = name;
  t.dtype = DType::I64;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * 8);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

std::vector<OwnedTensor> sample_tensors() {
  return {model::make_f32_tensor("a.weight", {2, 3}, {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f}),
          bf16_tensor("b.bias", {4}, {1.0f, -0.5f, 2.0f, 0.15625f}),
          i64_tensor("c.ids", {3, 1}, {0, -1, int64_t{1} << 40}),
          model::make_f32_tensor("d.scalar", {}, {42.0f})};
}

void expect_sample(const TensorStore& store) {
  ASSERT_EQ(store.tensors().size(), 4u);
  const model::TensorView* a = store.find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(test::floats_of(*a), (std::vector<float>{1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f}));

  const model::TensorView* b = store.find("b.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::BF16);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{4}));
  ASSERT_EQ(b->nbytes, 8u);
  std::vector<float> bv;
  for (int i = 0; i < 4; ++i) {
    uint16_t h;
    std::memcpy(&h, b->data + 2 * i, 2);
    bv.push_back(bf16_to_f32(h));
  }
  EXPECT_EQ(bv, (std::vector<float>{1.0f, -0.5f, 2.0f, 0.15625f}));

  const model::TensorView* c = store.find("c.ids");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::I64);
  EXPECT_EQ(c->shape, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(test::int64s_of(*c), (std::vector<int64_t>{0, -1, int64_t{1} << 40}));

  const model::TensorView* d = store.find("d.scalar");
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->shape.empty());
  EXPECT_EQ(d->numel(), 1);
  EXPECT_EQ(test::floats_of(*d), (std::vector<float>{42.0f}));

  EXPECT_EQ(store.find("missing"), nullptr);
}

TEST(Safetensors, RoundTripFile) {
  const std::string dir = test::temp_dir("st_roundtrip_file");
  const std::string path = dir + "/weights.safetensors";
  model::write_safetensors(path, sample_tensors(), {{"format", "pt"}, {"producer", "test"}});

  // The header is 8-byte aligned so that the data section is too.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);

  const TensorStore store = TensorStore::open(path);
  expect_sample(store);
  EXPECT_EQ(store.metadata().at("format"), "pt");
  EXPECT_EQ(store.metadata().at("producer"), "test");
  EXPECT_EQ(store.find("a.weight")->file, path);
}

TEST(Safetensors, RoundTripDirectory) {
  const std::string dir = test::temp_dir("st_roundtrip_dir");
  model::write_safetensors(dir + "/model.safetensors", sample_tensors());
  expect_sample(TensorStore::open(dir));

  // Without model.safetensors, any *.safetensors files of the directory are read.
  const std::string other = test::temp_dir("st_roundtrip_dir_other");
  auto tensors = sample_tensors();
  model::write_safetensors(other + "/part-a.safetensors", {tensors[0], tensors[1]});
  model::write_safetensors(other + "/part-b.safetensors", {tensors[2], tensors[3]});
  expect_sample(TensorStore::open(other));
}

TEST(Safetensors, StreamingWriterMatchesSpecs) {
  const std::string dir = test::temp_dir("st_streaming");
  const std::string path = dir + "/s.safetensors";
  const std::vector<model::TensorSpec> specs = {{"x", DType::F32, {2, 2}}, {"y", DType::I64, {3}}};
  model::write_safetensors_streaming(path, specs, [&](size_t i, std::vector<uint8_t>& bytes) {
    bytes.assign(specs[i].nbytes(), static_cast<uint8_t>(i + 1));
  });
  const TensorStore store = TensorStore::open(path);
  ASSERT_NE(store.find("x"), nullptr);
  ASSERT_NE(store.find("y"), nullptr);
  EXPECT_EQ(store.find("x")->nbytes, 16u);
  EXPECT_EQ(store.find("y")->nbytes, 24u);
  EXPECT_EQ(store.find("y")->data[0], 2);

  // A fill callback that produces the wrong number of bytes is an error naming the tensor.
  try {
    model::write_safetensors_streaming(dir + "/bad.safetensors", specs,
                                       [&](size_t, std::vector<uint8_t>& bytes) { bytes.assign(3, 0); });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "'x'")) << e.what();
  }
}

TEST(Safetensors, HeaderLengthBeyondFileSize) {
  const std::string dir = test::temp_dir("st_header_len");
  const std::string path = dir + "/h.safetensors";
  write_raw(path, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0}, 1000);
  const std::string msg = open_error(path);
  EXPECT_TRUE(has(msg, "truncated")) << msg;
  EXPECT_TRUE(has(msg, path)) << msg;

  // Fewer than 8 bytes: not even a header length.
  const std::string tiny = dir + "/tiny.safetensors";
  std::ofstream(tiny, std::ios::binary) << "abc";
  const std::string msg2 = open_error(tiny);
  EXPECT_TRUE(has(msg2, "truncated")) << msg2;
}

TEST(Safetensors, DataSectionCutShort) {
  const std::string dir = test::temp_dir("st_data_short");
  const std::string path = dir + "/d.safetensors";
  std::vector<float> big(64, 1.0f);
  model::write_safetensors(path, {model::make_f32_tensor("first", {4}, {1, 2, 3, 4}),
                                  model::make_f32_tensor("zz.last", {64}, big)});
  ASSERT_NO_THROW(TensorStore::open(path));
  fs::resize_file(path, fs::file_size(path) - 10);
  const std::string msg = open_error(path);
  EXPECT_TRUE(has(msg, "truncated")) << msg;
  EXPECT_TRUE(has(msg, "zz.last")) << msg;
}

TEST(Safetensors, HeaderNotJson) {
  const std::string dir = test::temp_dir("st_not_json");
  const std::string path = dir + "/j.safetensors";
  write_raw(path, R"({"a": {"dtype": "F32", "shape": [1], )", {0, 0, 0, 0});
  const std::string msg = open_error(path);
  EXPECT_TRUE(has(msg, "not valid JSON")) << msg;

  const std::string array = dir + "/array.safetensors";
  write_raw(array, "[1, 2, 3]", {});
  const std::string msg2 = open_error(array);
  EXPECT_TRUE(has(msg2, "JSON object")) << msg2;
}

TEST(Safetensors, BadDtype) {
  const std::string dir = test::temp_dir("st_bad_dtype");
  const std::string path = dir + "/t.safetensors";
  write_raw(path, R"({"w.weight":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0});
  const std::string msg = open_error(path);
  EXPECT_TRUE(has(msg, "w.weight")) << msg;
  EXPECT_TRUE(has(msg, "F33")) << msg;
  EXPECT_TRUE(has(msg, "dtype")) << msg;

  const std::string lower = dir + "/lower.safetensors";
  write_raw(lower, R"({"w.weight":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0});
  const std::string msg2 = open_error(lower);
  EXPECT_TRUE(has(msg2, "f32")) << msg2;
}

TEST(Safetensors, MissingHeaderFields) {
  const std::string dir = test::temp_dir("st_missing_fields");
  const std::string path = dir + "/t.safetensors";
  write_raw(path, R"({"w.weight":{"dtype":"F32","shape":[1]}})", {0, 0, 0, 0});
  const std::string msg = open_error(path);
  EXPECT_TRUE(has(msg, "w.weight")) << msg;
  EXPECT_TRUE(has(msg, "data_offsets")) << msg;

  const std::string neg = dir + "/neg.safetensors";
  write_raw(neg, R"({"w.weight":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", {0, 0, 0, 0});
  const std::string msg2 = open_error(neg);
  EXPECT_TRUE(has(msg2, "w.weight")) << msg2;
  EXPECT_TRUE(has(msg2, "shape")) << msg2;

  const std::string backwards = dir + "/backwards.safetensors";
  write_raw(backwards, R"({"w.weight":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", {0, 0, 0, 0});
  const std::string msg3 = open_error(backwards);
  EXPECT_TRUE(has(msg3, "w.weight")) << msg3;
}

TEST(Safetensors, ByteCountNotMatchingShape) {
  const std::string dir = test::temp_dir("st_byte_count");
  const std::string path = dir + "/t.safetensors";
  // F32 [2, 3] needs 24 bytes; the offsets give 20.
  write_raw(path, R"({"w.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::vector<uint8_t>(24, 0));
  const std::string msg = open_error(path);
  EXPECT_TRUE(has(msg, "w.weight")) << msg;
  EXPECT_TRUE(has(msg, "20 bytes")) << msg;
  EXPECT_TRUE(has(msg, "24")) << msg;

  // BF16 [3] needs 6 bytes, not 12 (as if it were F32).
  const std::string bf = dir + "/bf.safetensors";
  write_raw(bf, R"({"b":{"dtype":"BF16","shape":[3],"data_offsets":[0,12]}})", std::vector<uint8_t>(12, 0));
  const std::string msg2 = open_error(bf);
  EXPECT_TRUE(has(msg2, "'b'")) << msg2;
  EXPECT_TRUE(has(msg2, "BF16")) << msg2;
}

// A shape whose byte count overflows size_t (2^62 F32 elements = 2^64 bytes, which wraps to 0) must not pass the
// "byte count matches dtype × shape" check with an empty data range: a reader trusting numel() would then read
// 2^62 floats from a zero-byte region.
TEST(Safetensors, ByteCountOverflowIsRejected) {
  const std::string dir = test::temp_dir("st_byte_overflow");
  const std::string path = dir + "/t.safetensors";
  write_raw(path, R"({"huge":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", {});
  try {
    const TensorStore store = TensorStore::open(path);
    const model::TensorView* t = store.find("huge");
    ADD_FAILURE() << "accepted: 'huge' has numel " << (t ? t->numel() : -1) << " F32 elements in "
                  << (t ? t->nbytes : 0) << " bytes";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "huge")) << e.what();
  }
}

TEST(Safetensors, OverlappingTensors) {
  const std::string dir = test::temp_dir("st_overlap");
  const std::string path = dir + "/t.safetensors";
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::vector<uint8_t>(12, 0));
  const std::string msg = open_error(path);
  EXPECT_TRUE(has(msg, "overlap")) << msg;

  // Adjacent ranges and zero-byte tensors are fine.
  const std::string ok = dir + "/ok.safetensors";
  write_raw(ok,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
            R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
            std::vector<uint8_t>(12, 0));
  const TensorStore store = TensorStore::open(ok);
  EXPECT_EQ(store.tensors().size(), 3u);
}

TEST(Safetensors, MissingPath) {
  const std::string dir = test::temp_dir("st_missing_path");
  const std::string msg = open_error(dir + "/nope.safetensors");
  EXPECT_TRUE(has(msg, "nope.safetensors")) << msg;

  // A directory without any safetensors file.
  const std::string msg2 = open_error(dir);
  EXPECT_TRUE(has(msg2, "no model.safetensors")) << msg2;
}

// Two shards and an index, as save_pretrained writes them for a large model.
void write_shards(const std::string& dir, const std::string& index_json) {
  model::write_safetensors(dir + "/model-00001-of-00002.safetensors",
                           {model::make_f32_tensor("a.weight", {2}, {1, 2}), model::make_f32_tensor("b.weight", {1}, {3})});
  model::write_safetensors(dir + "/model-00002-of-00002.safetensors",
                           {i64_tensor("c.ids", {2}, {7, 8})});
  std::ofstream(dir + "/model.safetensors.index.json") << index_json;
}

TEST(Safetensors, ShardedDirectory) {
  const std::string dir = test::temp_dir("st_sharded");
  write_shards(dir, R"({"metadata": {"total_size": 28}, "weight_map": {
      "a.weight": "model-00001-of-00002.safetensors",
      "b.weight": "model-00001-of-00002.safetensors",
      "c.ids": "model-00002-of-00002.safetensors"}})");
  const TensorStore store = TensorStore::open(dir);
  EXPECT_EQ(store.tensors().size(), 3u);
  ASSERT_NE(store.find("a.weight"), nullptr);
  ASSERT_NE(store.find("c.ids"), nullptr);
  EXPECT_EQ(test::floats_of(*store.find("a.weight")), (std::vector<float>{1, 2}));
  EXPECT_EQ(test::floats_of(*store.find("b.weight")), (std::vector<float>{3}));
  EXPECT_EQ(test::int64s_of(*store.find("c.ids")), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(fs::path(store.find("a.weight")->file).filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(fs::path(store.find("c.ids")->file).filename(), "model-00002-of-00002.safetensors");
}

TEST(Safetensors, ShardListedButMissing) {
  const std::string dir = test::temp_dir("st_shard_missing");
  write_shards(dir, R"({"weight_map": {
      "a.weight": "model-00001-of-00002.safetensors",
      "c.ids": "model-00002-of-00002.safetensors",
      "d.weight": "model-00003-of-00003.safetensors"}})");
  const std::string msg = open_error(dir);
  EXPECT_TRUE(has(msg, "model-00003-of-00003.safetensors")) << msg;
  EXPECT_TRUE(has(msg, "missing")) << msg;
}

TEST(Safetensors, WeightMapNamesTensorItsFileLacks) {
  const std::string dir = test::temp_dir("st_shard_lacks");
  write_shards(dir, R"({"weight_map": {
      "a.weight": "model-00001-of-00002.safetensors",
      "c.ids": "model-00002-of-00002.safetensors",
      "ghost.weight": "model-00002-of-00002.safetensors"}})");
  const std::string msg = open_error(dir);
  EXPECT_TRUE(has(msg, "ghost.weight")) << msg;
  EXPECT_TRUE(has(msg, "model-00002-of-00002.safetensors")) << msg;
}

TEST(Safetensors, WeightMapNamesWrongShard) {
  const std::string dir = test::temp_dir("st_shard_wrong");
  write_shards(dir, R"({"weight_map": {
      "a.weight": "model-00002-of-00002.safetensors",
      "c.ids": "model-00002-of-00002.safetensors",
      "b.weight": "model-00001-of-00002.safetensors"}})");
  const std::string msg = open_error(dir);
  EXPECT_TRUE(has(msg, "a.weight")) << msg;
}

TEST(Safetensors, BadIndexJson) {
  const std::string dir = test::temp_dir("st_bad_index");
  write_shards(dir, R"({"weight_map": )");
  const std::string msg = open_error(dir);
  EXPECT_TRUE(has(msg, "model.safetensors.index.json")) << msg;

  const std::string dir2 = test::temp_dir("st_bad_index2");
  write_shards(dir2, R"({"metadata": {}})");
  const std::string msg2 = open_error(dir2);
  EXPECT_TRUE(has(msg2, "weight_map")) << msg2;
}

TEST(Safetensors, SameTensorInTwoFiles) {
  const std::string dir = test::temp_dir("st_duplicate");
  model::write_safetensors(dir + "/x.safetensors", {model::make_f32_tensor("dup", {1}, {1})});
  model::write_safetensors(dir + "/y.safetensors", {model::make_f32_tensor("dup", {1}, {2})});
  const std::string msg = open_error(dir);
  EXPECT_TRUE(has(msg, "dup")) << msg;
}

}  // namespace
}  // namespace strata
