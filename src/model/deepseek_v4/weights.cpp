#include "model/deepseek_v4/weights.h"

#include <array>
#include <cstring>
#include <set>

#include "core/error.h"
#include "model/checkpoint_names.h"

namespace strata::model::v4 {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Finds tensors by official name under any alias, checks shapes and dtypes, and remembers what it used so that
// anything left over can be reported as unexpected.
class Loader {
 public:
  Loader(const TensorStore& store, ModelWeights& out, const ModelConfig& c) : store_(store), out_(out) {
    if (c.quantization && c.quantization->weight_block_size.size() == 2)
      fp8_block_ = {c.quantization->weight_block_size[0], c.quantization->weight_block_size[1]};
  }

  const TensorView* try_find(const std::string& official) {
    for (const std::string& alias : name_aliases(official))
      if (const TensorView* t = store_.find(alias)) {
        used_.insert(alias);
        return t;
      }
    return nullptr;
  }

  const TensorView& find(const std::string& official) {
    if (const TensorView* t = try_find(official)) return *t;
    std::string tried;
    for (const std::string& alias : name_aliases(official)) tried += (tried.empty() ? "'" : ", '") + alias + "'";
    fail("checkpoint: missing tensor '", official, "' (looked for ", tried, ")");
  }

  static void check_shape(const TensorView& t, const std::vector<int64_t>& shape) {
    if (t.shape != shape)
      fail("checkpoint: tensor '", t.name, "' in ", t.file, ": expected shape ", shape_str(shape), ", found ",
           t.shape_str());
  }

  WeightRef matrix_of(const TensorView& t, const std::string& official_base, int64_t rows, int64_t cols) {
    WeightRef w;
    w.dtype = t.dtype;
    w.data = t.data;
    w.rows = rows;
    w.cols = cols;
    // MXFP4 (DeepSeek's FP4 experts): [rows, cols/2] bytes of packed E2M1 pairs, one UE8M0 scale per 1×32 block.
    const bool packed_fp4 = (t.dtype == DType::I8 || t.dtype == DType::U8) && cols % 32 == 0 &&
                            t.shape == std::vector<int64_t>{rows, cols / 2};
    if (packed_fp4) {
      w.dtype = DType::F4_E2M1X2;
      attach_block_scales(t, official_base, w, 1, 32);
      return w;
    }
    check_shape(t, {rows, cols});
    switch (t.dtype) {
      case DType::F32:
      case DType::BF16:
      case DType::F16:
        return w;
      case DType::F8_E4M3:
        attach_block_scales(t, official_base, w, fp8_block_[0], fp8_block_[1]);
        return w;
      default:
        fail("checkpoint: tensor '", t.name, "' has dtype ", dtype_name(t.dtype),
             "; weights must be F32, BF16, F16, F8_E4M3 (with block scales) or packed FP4 (I8/U8 [rows, cols/2] "
             "with 1x32 scales)");
    }
  }

  // `official` names a Linear's weight, e.g. "layers.0.attn.wq_a.weight".
  WeightRef matrix(const std::string& official, int64_t rows, int64_t cols) {
    const std::string base = official.substr(0, official.size() - std::string(".weight").size());
    return matrix_of(find(official), base, rows, cols);
  }

  std::vector<float> floats(const std::string& official, const std::vector<int64_t>& shape) {
    const TensorView& t = find(official);
    check_shape(t, shape);
    return to_floats(t);
  }

  std::vector<int32_t> ints(const std::string& official, const std::vector<int64_t>& shape, int64_t limit) {
    const TensorView& t = find(official);
    check_shape(t, shape);
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t x;
      if (t.dtype == DType::I64) {
        std::memcpy(&x, t.data + i * 8, 8);
      } else if (t.dtype == DType::I32) {
        int32_t y;
        std::memcpy(&y, t.data + i * 4, 4);
        x = y;
      } else {
        fail("checkpoint: tensor '", t.name, "' has dtype ", dtype_name(t.dtype), ", expected I64 or I32");
      }
      if (x < 0 || x >= limit)
        fail("checkpoint: tensor '", t.name, "' element ", i, " is ", x, ", outside [0, ", limit, ")");
      v[i] = static_cast<int32_t>(x);
    }
    return v;
  }

  static std::vector<float> to_floats(const TensorView& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      switch (t.dtype) {
        case DType::F32: std::memcpy(&v[i], t.data + i * 4, 4); break;
        case DType::BF16: {
          uint16_t h;
          std::memcpy(&h, t.data + i * 2, 2);
          v[i] = bf16_to_f32(h);
          break;
        }
        case DType::F16: {
          uint16_t h;
          std::memcpy(&h, t.data + i * 2, 2);
          v[i] = f16_to_f32(h);
          break;
        }
        case DType::F8_E8M0: v[i] = e8m0_to_f32(t.data[i]); break;
        default:
          fail("checkpoint: tensor '", t.name, "' has dtype ", dtype_name(t.dtype), ", expected a float type");
      }
    }
    return v;
  }

  bool has_prefix(const std::string& prefix) const {
    for (const auto& [name, t] : store_.tensors())
      if (name.rfind(prefix, 0) == 0) return true;
    return false;
  }

  // Names in the store that no lookup claimed. DeepSeek's release may carry copies of the shared embedding and
  // head inside an MTP layer (its convert.py drops `mtp.*` names containing "emb" or ending in "head.weight"):
  // those are the main model's and are skipped. Any other MTP tensor left over is an error.
  void check_nothing_unexpected(int64_t mtp_layers) const {
    for (const auto& [name, t] : store_.tensors()) {
      if (used_.count(name)) continue;
      const bool mtp = name.rfind("mtp.", 0) == 0 || name.rfind("model.mtp.", 0) == 0;
      const bool shared_copy = name.find("emb") != std::string::npos ||
                               (name.size() >= 11 && name.compare(name.size() - 11, 11, "head.weight") == 0);
      if (mtp && shared_copy) continue;
      fail("checkpoint: unexpected tensor '", name, "' in ", t.file, " (not part of this config's model",
           mtp ? "; num_nextn_predict_layers is " + std::to_string(mtp_layers) : std::string(), ")");
    }
  }

 private:
  void attach_block_scales(const TensorView& t, const std::string& official_base, WeightRef& w, int64_t br,
                           int64_t bc) {
    const TensorView* s = try_find(official_base + ".scale");
    if (!s) s = try_find(official_base + ".weight_scale_inv");
    if (!s) fail("checkpoint: ", dtype_name(w.dtype), " tensor '", t.name, "' has no block-scale tensor ('",
                 official_base, ".scale' or '", official_base, ".weight_scale_inv')");
    const std::vector<int64_t> want = {(w.rows + br - 1) / br, (w.cols + bc - 1) / bc};
    check_shape(*s, want);
    auto scales = std::make_shared<std::vector<float>>(to_floats(*s));
    w.block_scales = scales->data();
    w.block_rows = br;
    w.block_cols = bc;
    out_.owned_scales.push_back(std::move(scales));
  }

  const TensorStore& store_;
  ModelWeights& out_;
  std::array<int64_t, 2> fp8_block_ = {128, 128};  // quantization_config.weight_block_size
  std::set<std::string> used_;
};

ExpertWeights load_expert(Loader& ld, const std::string& prefix, int64_t inter, int64_t hidden) {
  return {ld.matrix(prefix + ".w1.weight", inter, hidden), ld.matrix(prefix + ".w2.weight", hidden, inter),
          ld.matrix(prefix + ".w3.weight", inter, hidden)};
}

// transformers keeps routed experts stacked: gate_up_proj [E, 2·inter, hidden] (gate rows first), down_proj
// [E, hidden, inter]. Each expert's matrices are contiguous row ranges of those tensors.
bool load_stacked_experts(Loader& ld, const std::string& ffn, const ModelConfig& c, std::vector<ExpertWeights>& out) {
  const TensorView* gate_up = ld.try_find(ffn + ".experts.gate_up_proj");
  const TensorView* down = ld.try_find(ffn + ".experts.down_proj");
  if (!gate_up && !down) return false;
  if (!gate_up || !down) fail("checkpoint: '", ffn, ".experts' has only one of gate_up_proj / down_proj");
  const int64_t e = c.n_routed_experts, inter = c.moe_intermediate_size, hidden = c.hidden_size;
  Loader::check_shape(*gate_up, {e, 2 * inter, hidden});
  Loader::check_shape(*down, {e, hidden, inter});
  for (const TensorView* t : {gate_up, down})
    if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
      fail("checkpoint: tensor '", t->name, "' has dtype ", dtype_name(t->dtype), "; stacked experts must be F32, BF16 or F16");
  for (int64_t i = 0; i < e; ++i) {
    ExpertWeights w;
    const WeightRef all_gate_up{gate_up->dtype, gate_up->data, e * 2 * inter, hidden};
    const WeightRef all_down{down->dtype, down->data, e * hidden, inter};
    w.w1 = all_gate_up.row_slice(i * 2 * inter, inter);
    w.w3 = all_gate_up.row_slice(i * 2 * inter + inter, inter);
    w.w2 = all_down.row_slice(i * hidden, hidden);
    out.push_back(w);
  }
  return true;
}

CompressorWeights load_compressor(Loader& ld, const std::string& prefix, const ModelConfig& c, int64_t rate,
                                  int64_t dim, bool overlap) {
  CompressorWeights w;
  w.rate = rate;
  w.dim = dim;
  w.overlap = overlap;
  const int64_t width = overlap ? 2 * dim : dim;
  w.wkv = ld.matrix(prefix + ".wkv.weight", width, c.hidden_size);
  w.wgate = ld.matrix(prefix + ".wgate.weight", width, c.hidden_size);
  w.wkv.fp32_product = w.wgate.fp32_product = true;
  w.ape = ld.floats(prefix + ".ape", {rate, width});
  w.norm = ld.floats(prefix + ".norm.weight", {dim});
  return w;
}

// One layer's tensors under `p` ("layers.<l>" or "mtp.<i>"): mHC sites, norms, attention of `type`, MoE.
LayerWeights load_layer(Loader& ld, const std::string& p, const ModelConfig& c, AttentionType type, MlpType mlp,
                        int64_t rate) {
  const int64_t d = c.hidden_size, hc = c.hc_mult, mix = (2 + hc) * hc, heads = c.num_attention_heads, hd = c.head_dim;
  LayerWeights lw;
  lw.hc_attn = {ld.floats(p + ".hc_attn_fn", {mix, hc * d}), ld.floats(p + ".hc_attn_base", {mix}),
                ld.floats(p + ".hc_attn_scale", {3})};
  lw.hc_ffn = {ld.floats(p + ".hc_ffn_fn", {mix, hc * d}), ld.floats(p + ".hc_ffn_base", {mix}),
               ld.floats(p + ".hc_ffn_scale", {3})};
  lw.attn_norm = ld.floats(p + ".attn_norm.weight", {d});
  lw.ffn_norm = ld.floats(p + ".ffn_norm.weight", {d});

  AttentionWeights& a = lw.attn;
  const std::string ap = p + ".attn";
  a.wq_a = ld.matrix(ap + ".wq_a.weight", c.q_lora_rank, d);
  a.q_norm = ld.floats(ap + ".q_norm.weight", {c.q_lora_rank});
  a.wq_b = ld.matrix(ap + ".wq_b.weight", heads * hd, c.q_lora_rank);
  a.wkv = ld.matrix(ap + ".wkv.weight", hd, d);
  a.kv_norm = ld.floats(ap + ".kv_norm.weight", {hd});
  a.wo_a = ld.matrix(ap + ".wo_a.weight", c.o_groups * c.o_lora_rank, heads * hd / c.o_groups);
  a.wo_b = ld.matrix(ap + ".wo_b.weight", d, c.o_groups * c.o_lora_rank);
  a.attn_sink = ld.floats(ap + ".attn_sink", {heads});
  if (type != AttentionType::Sliding) {
    const bool csa = type == AttentionType::CompressedSparse;
    a.compressor = load_compressor(ld, ap + ".compressor", c, rate, hd, csa);
    if (csa) {
      IndexerWeights iw;
      iw.wq_b = ld.matrix(ap + ".indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      iw.weights_proj = ld.matrix(ap + ".indexer.weights_proj.weight", c.index_n_heads, d);
      iw.compressor = load_compressor(ld, ap + ".indexer.compressor", c, rate, c.index_head_dim, true);
      a.indexer = std::move(iw);
    }
  }

  MoeWeights& f = lw.ffn;
  const std::string fp = p + ".ffn";
  f.gate = ld.matrix(fp + ".gate.weight", c.n_routed_experts, d);
  f.gate.fp32_product = true;
  if (mlp == MlpType::HashMoe) {
    f.tid2eid = ld.ints(fp + ".gate.tid2eid", {c.vocab_size, c.num_experts_per_tok}, c.n_routed_experts);
  } else {
    f.gate_bias = ld.floats(fp + ".gate.bias", {c.n_routed_experts});
  }
  if (!load_stacked_experts(ld, fp, c, f.experts))
    for (int64_t e = 0; e < c.n_routed_experts; ++e)
      f.experts.push_back(load_expert(ld, fp + ".experts." + std::to_string(e), c.moe_intermediate_size, d));
  if (c.n_shared_experts > 0) f.shared = load_expert(ld, fp + ".shared_experts", c.moe_intermediate_size, d);
  return lw;
}

}  // namespace

ModelWeights load_weights(const ModelConfig& c, std::shared_ptr<TensorStore> store) {
  ModelWeights mw;
  mw.store = store;
  Loader ld(*store, mw, c);
  const int64_t d = c.hidden_size, hc = c.hc_mult;
  mw.embed = ld.matrix("embed.weight", c.vocab_size, d);
  if (c.tie_word_embeddings && !ld.try_find("head.weight"))
    mw.head = mw.embed;
  else
    mw.head = ld.matrix("head.weight", c.vocab_size, d);
  mw.head.fp32_product = true;
  mw.norm = ld.floats("norm.weight", {d});
  mw.hc_head_fn = ld.floats("hc_head_fn", {hc, hc * d});
  mw.hc_head_base = ld.floats("hc_head_base", {hc});
  mw.hc_head_scale = ld.floats("hc_head_scale", {1});

  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    mw.layers.push_back(load_layer(ld, "layers." + std::to_string(l), c, c.layer_types[static_cast<size_t>(l)],
                                   c.mlp_layer_types[static_cast<size_t>(l)], c.compress_rate(l)));

  // MTP draft layers (docs/mtp.md): DeepSeek's MTPBlock is a Block whose attention is window-only (the trailing
  // compress_ratios entry of V4-Flash and V4-Pro is 0) and whose gate is score-based (its layer id is past the hash
  // layers). All of them or none: a checkpoint without any `mtp.*` tensor has none.
  if (ld.has_prefix("mtp.") || ld.has_prefix("model.mtp."))
    for (int64_t i = 0; i < c.num_nextn_predict_layers; ++i) {
      const std::string p = "mtp." + std::to_string(i);
      MtpWeights m;
      m.e_proj = ld.matrix(p + ".e_proj.weight", d, d);
      m.h_proj = ld.matrix(p + ".h_proj.weight", d, d);
      m.enorm = ld.floats(p + ".enorm.weight", {d});
      m.hnorm = ld.floats(p + ".hnorm.weight", {d});
      m.norm = ld.floats(p + ".norm.weight", {d});
      m.hc_head_fn = ld.floats(p + ".hc_head_fn", {hc, hc * d});
      m.hc_head_base = ld.floats(p + ".hc_head_base", {hc});
      m.hc_head_scale = ld.floats(p + ".hc_head_scale", {1});
      m.block = load_layer(ld, p, c, AttentionType::Sliding, MlpType::Moe, 0);
      mw.mtp.push_back(std::move(m));
    }
  ld.check_nothing_unexpected(c.num_nextn_predict_layers);
  return mw;
}

void dequantize_head(ModelWeights& w) {
  const WeightRef& head = w.head;
  if (head.dtype != DType::F8_E4M3 && head.dtype != DType::F4_E2M1X2) return;
  auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(head.rows * head.cols));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < head.rows; ++r) head.row_f32(r, values->data() + r * head.cols);
  WeightRef copy;
  copy.dtype = DType::F32;
  copy.data = reinterpret_cast<const uint8_t*>(values->data());
  copy.rows = head.rows;
  copy.cols = head.cols;
  copy.fp32_product = head.fp32_product;
  w.head = copy;
  w.head_f32 = std::move(values);
}

}  // namespace strata::model::v4
