// DeviceWeights (cuda_backend.h): every tensor of a ModelWeights uploaded once, as bf16, fp32 or stored FP8.
#include <algorithm>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8.h"
#include "core/dtype.h"
#include "core/error.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

DeviceWeights::DeviceWeights(const ModelWeights& w, GemmType type, const std::vector<const std::vector<float>*>& extra)
    : type_(type) {
  // The embedding is a row lookup and the head one product per step: both stay bf16 (dequantized if stored FP8).
  add(w.embed, false);
  add(w.head, false);
  add(w.draft_head, false);  // the MTP head's rows of a reduced draft vocabulary (fp32 on the host), as bf16
  for (const auto* v : {&w.norm, &w.hc_head_fn, &w.hc_head_base, &w.hc_head_scale}) add(*v);
  auto add_compressor = [&](const CompressorWeights& c) {
    add(c.wkv);
    add(c.wgate);
    add(c.ape);
    add(c.norm);
  };
  auto expert_fp8 = [&](const ExpertWeights& e) {
    return fp8_storable(e.w1) && fp8_storable(e.w2) && fp8_storable(e.w3);
  };
  auto add_expert = [&](const ExpertWeights& e, bool fp8) {
    add(e.w1, fp8);
    add(e.w2, fp8);
    add(e.w3, fp8);
  };
  auto add_layer = [&](const LayerWeights& l) {
    for (const HyperConnectionWeights* h : {&l.hc_attn, &l.hc_ffn})
      for (const auto* v : {&h->fn, &h->base, &h->scale}) add(*v);
    add(l.attn_norm);
    add(l.ffn_norm);
    const AttentionWeights& a = l.attn;
    for (const WeightRef* m : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) add(*m);
    // The grouped o-projection multiplies row block g of wo_a (rank rows) by column block g of its input (wo_a.cols
    // wide; groups = the heads' width over it): FP8 only when both are whole 128-blocks, so each group's block
    // scales are a sub-grid of the matrix's. V4-Flash: 8 groups of 1024 rows × 4096 columns.
    const bool groups_whole = a.wo_a.cols > 0 && a.wq_b.rows % a.wo_a.cols == 0 &&
                              a.wo_a.rows % (a.wq_b.rows / a.wo_a.cols) == 0 &&
                              (a.wo_a.rows / (a.wq_b.rows / a.wo_a.cols)) % kFp8Block == 0 &&
                              a.wo_a.cols % kFp8Block == 0;
    add(a.wo_a, groups_whole);
    for (const auto* v : {&a.q_norm, &a.kv_norm, &a.attn_sink}) add(*v);
    if (a.compressor) add_compressor(*a.compressor);
    if (a.indexer) {
      add(a.indexer->wq_b);
      add(a.indexer->weights_proj);
      add_compressor(a.indexer->compressor);
    }
    add(l.ffn.gate);
    add(l.ffn.gate_bias);
    // The grouped kernels take one weight type per layer's table: the routed experts are FP8 only all together.
    const bool routed_fp8 = std::all_of(l.ffn.experts.begin(), l.ffn.experts.end(), expert_fp8);
    for (const ExpertWeights& e : l.ffn.experts) add_expert(e, routed_fp8);
    if (l.ffn.shared) add_expert(*l.ffn.shared, expert_fp8(*l.ffn.shared));
    if (!l.ffn.tid2eid.empty() && !ints_.count(l.ffn.tid2eid.data())) {
      int32_t* d = nullptr;
      const size_t bytes = l.ffn.tid2eid.size() * sizeof(int32_t);
      STRATA_CUDA_CHECK(cudaMalloc(&d, bytes));
      STRATA_CUDA_CHECK(cudaMemcpy(d, l.ffn.tid2eid.data(), bytes, cudaMemcpyHostToDevice));
      allocations_.push_back(d);
      ints_[l.ffn.tid2eid.data()] = d;
      bytes_ += static_cast<int64_t>(bytes);
    }
  };
  // The MTP layers (docs/mtp.md): their own input projections, norms and head collapse, and a layer like the main
  // ones. The embedding and the vocabulary head are the main model's.
  std::vector<const LayerWeights*> all_layers;
  for (const LayerWeights& l : w.layers) all_layers.push_back(&l);
  for (const MtpWeights& m : w.mtp) {
    add(m.e_proj);
    add(m.h_proj);
    for (const auto* v : {&m.enorm, &m.hnorm, &m.norm, &m.hc_head_fn, &m.hc_head_base, &m.hc_head_scale}) add(*v);
    all_layers.push_back(&m.block);
  }
  for (const LayerWeights* l : all_layers) add_layer(*l);
  for (const std::vector<float>* v : extra) add(*v);
  for (const LayerWeights* layer : all_layers) {
    const LayerWeights& l = *layer;
    const std::vector<ExpertWeights>& ex = l.ffn.experts;
    if (ex.empty() || expert_tables_.count(ex.data())) continue;
    ExpertTables t;
    t.type = matrix(ex[0].w1).type;
    const ExpertWeights* shared = l.ffn.shared ? &*l.ffn.shared : nullptr;
    t.with_shared = shared && shared->w1.rows == ex[0].w1.rows && shared->w1.cols == ex[0].w1.cols &&
                    matrix(shared->w1).type == t.type;
    auto upload_table = [&](const std::vector<const void*>& table) {
      void* d = nullptr;
      const size_t bytes = table.size() * sizeof(const void*);
      STRATA_CUDA_CHECK(cudaMalloc(&d, bytes));
      STRATA_CUDA_CHECK(cudaMemcpy(d, table.data(), bytes, cudaMemcpyHostToDevice));
      allocations_.push_back(d);
      return static_cast<const void* const*>(d);
    };
    for (auto [member, dst, scales] :
         {std::tuple{&ExpertWeights::w1, &t.w1, &t.s1}, std::tuple{&ExpertWeights::w3, &t.w3, &t.s3},
          std::tuple{&ExpertWeights::w2, &t.w2, &t.s2}}) {
      std::vector<const void*> table, scale_table;
      for (const ExpertWeights& e : ex) {
        table.push_back(matrix(e.*member).data);
        scale_table.push_back(matrix(e.*member).scales);
      }
      if (t.with_shared) {
        table.push_back(matrix(shared->*member).data);
        scale_table.push_back(matrix(shared->*member).scales);
      }
      *dst = upload_table(table);
      if (t.type == GemmType::Fp8) *scales = reinterpret_cast<const float* const*>(upload_table(scale_table));
    }
    expert_tables_[ex.data()] = t;
  }
}

const DeviceWeights::ExpertTables& DeviceWeights::experts(const MoeWeights& w) const {
  const auto it = expert_tables_.find(w.experts.data());
  if (it == expert_tables_.end()) fail("CUDA backend: a layer's expert tables were not uploaded");
  return it->second;
}

DeviceWeights::~DeviceWeights() {
  for (void* p : allocations_) cudaFree(p);
}

bool DeviceWeights::fp8_storable(const WeightRef& w) const {
  return type_ == GemmType::Fp8 && w.dtype == DType::F8_E4M3 && w.block_scales && w.block_rows == kFp8Block &&
         w.block_cols == kFp8Block && w.scale_row_offset % kFp8Block == 0;
}

void DeviceWeights::add(const WeightRef& w, bool fp8) {
  if (!w.data || matrices_.count(w.data)) return;  // absent, or tied (the head shares the embedding)
  if (fp8 && fp8_storable(w)) {
    // The stored codes and the scale blocks of these rows, as they are (a row slice starts on a block boundary).
    const int64_t scale_rows = (w.rows + kFp8Block - 1) / kFp8Block, scale_cols = (w.cols + kFp8Block - 1) / kFp8Block;
    const size_t code_bytes = static_cast<size_t>(w.rows * w.cols),
                 scale_bytes = static_cast<size_t>(scale_rows * scale_cols) * sizeof(float);
    void *d = nullptr, *ds = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(code_bytes, 1)));
    STRATA_CUDA_CHECK(cudaMalloc(&ds, std::max<size_t>(scale_bytes, 1)));
    STRATA_CUDA_CHECK(cudaMemcpy(d, w.data, code_bytes, cudaMemcpyHostToDevice));
    STRATA_CUDA_CHECK(cudaMemcpy(ds, w.block_scales + (w.scale_row_offset / kFp8Block) * scale_cols, scale_bytes,
                                 cudaMemcpyHostToDevice));
    allocations_.push_back(d);
    allocations_.push_back(ds);
    bytes_ += static_cast<int64_t>(code_bytes + scale_bytes);
    matrices_[w.data] = {d, w.rows, w.cols, GemmType::Fp8, static_cast<const float*>(ds)};
    return;
  }
  const GemmType type = type_ == GemmType::Fp32 ? GemmType::Fp32 : GemmType::Bf16;
  const size_t count = static_cast<size_t>(w.rows * w.cols), bytes = count * gemm_type_size(type);
  std::vector<uint16_t> bf16(type == GemmType::Bf16 ? count : 0);
  std::vector<float> f32(type == GemmType::Fp32 ? count : 0);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(w.cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      w.row_f32(r, row.data());
      if (type == GemmType::Fp32)
        std::copy(row.begin(), row.end(), f32.begin() + r * w.cols);
      else
        for (int64_t c = 0; c < w.cols; ++c) bf16[static_cast<size_t>(r * w.cols + c)] = f32_to_bf16(row[c]);
    }
  }
  void* d = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
  const void* host = type == GemmType::Fp32 ? static_cast<const void*>(f32.data()) : bf16.data();
  STRATA_CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  allocations_.push_back(d);
  bytes_ += static_cast<int64_t>(bytes);
  matrices_[w.data] = {d, w.rows, w.cols, type};
}

void DeviceWeights::add(const std::vector<float>& v) {
  if (v.empty() || vectors_.count(v.data())) return;
  void* d = nullptr;
  const size_t bytes = v.size() * sizeof(float);
  STRATA_CUDA_CHECK(cudaMalloc(&d, bytes));
  STRATA_CUDA_CHECK(cudaMemcpy(d, v.data(), bytes, cudaMemcpyHostToDevice));
  allocations_.push_back(d);
  bytes_ += static_cast<int64_t>(bytes);
  vectors_[v.data()] = static_cast<const float*>(d);
}

const DeviceMatrix& DeviceWeights::matrix(const WeightRef& w) const {
  const auto it = matrices_.find(w.data);
  if (it == matrices_.end() || it->second.rows != w.rows) fail("CUDA backend: a weight matrix was not uploaded");
  return it->second;
}

const float* DeviceWeights::vec(const std::vector<float>& v) const {
  if (v.empty()) return nullptr;
  const auto it = vectors_.find(v.data());
  if (it == vectors_.end()) fail("CUDA backend: a weight vector was not uploaded");
  return it->second;
}

const int32_t* DeviceWeights::ints(const std::vector<int32_t>& v) const {
  if (v.empty()) return nullptr;
  const auto it = ints_.find(v.data());
  if (it == ints_.end()) fail("CUDA backend: an integer table was not uploaded");
  return it->second;
}

}  // namespace strata::cuda
