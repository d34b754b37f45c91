// The MTP draft layer (docs/mtp.md): its tensors in a checkpoint, its forward on the CPU against a plain-loop
// recomputation of DeepSeek's MTPBlock formula, and its per-sequence state (chunking, rollback, copies).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;
using model::DraftChunk;
using model::DraftOutput;
using model::LogitsStage;
using model::ModelConfig;
using model::SequenceState;
using model::TensorStore;
namespace v4 = model::v4;

ModelConfig tiny_mtp_config() {
  ModelConfig c = v4::preset_config("tiny");
  c.num_nextn_predict_layers = 1;
  return c;
}

std::string write_tiny_mtp(const std::string& tag, uint64_t seed, DType dtype = DType::F32) {
  const std::string dir = temp_dir(tag);
  v4::write_random_checkpoint(tiny_mtp_config(), dir, seed, dtype);
  return dir;
}

// `dir`'s checkpoint copied to a new directory with its tensors edited by `edit` (config.json as it is).
std::string rewrite_checkpoint(const std::string& dir, const std::string& tag,
                               const std::function<void(std::vector<model::OwnedTensor>&)>& edit) {
  const TensorStore store = TensorStore::open(dir);
  std::vector<model::OwnedTensor> tensors;
  for (const auto& [name, t] : store.tensors())
    tensors.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  edit(tensors);
  const std::string out = temp_dir(tag);
  fs::copy_file(fs::path(dir) / "config.json", fs::path(out) / "config.json", fs::copy_options::overwrite_existing);
  model::write_safetensors((fs::path(out) / "model.safetensors").string(), tensors);
  return out;
}

void drop(std::vector<model::OwnedTensor>& ts, const std::string& name) {
  const auto it = std::find_if(ts.begin(), ts.end(), [&](const model::OwnedTensor& t) { return t.name == name; });
  ASSERT_NE(it, ts.end()) << name;
  ts.erase(it);
}

// ---- checkpoint ------------------------------------------------------------------------------------------------

TEST(MtpCheckpoint, InitWritesOfficialNamesAndLoadLoadsThem) {
  const std::string dir = write_tiny_mtp("mtp_names", 1);
  const TensorStore store = TensorStore::open(dir);
  const ModelConfig c = tiny_mtp_config();
  const int64_t d = c.hidden_size, hc = c.hc_mult;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"mtp.0.e_proj.weight", {d, d}},        {"mtp.0.h_proj.weight", {d, d}},
      {"mtp.0.enorm.weight", {d}},            {"mtp.0.hnorm.weight", {d}},
      {"mtp.0.norm.weight", {d}},             {"mtp.0.hc_head_fn", {hc, hc * d}},
      {"mtp.0.hc_head_base", {hc}},           {"mtp.0.hc_head_scale", {1}},
      {"mtp.0.hc_attn_fn", {(2 + hc) * hc, hc * d}},
      {"mtp.0.attn.wq_a.weight", {c.q_lora_rank, d}},
      {"mtp.0.attn.attn_sink", {c.num_attention_heads}},
      {"mtp.0.ffn.gate.bias", {c.n_routed_experts}},
      {"mtp.0.ffn.experts.7.w2.weight", {d, c.moe_intermediate_size}},
      {"mtp.0.ffn.shared_experts.w1.weight", {c.moe_intermediate_size, d}}};
  for (const auto& [name, shape] : expected) {
    const model::TensorView* t = store.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
  }
  // Window-only attention and a score-based gate (DeepSeek's MTPBlock): no compressor, no tid2eid, and no copy of
  // the shared embedding or head.
  for (const char* absent : {"mtp.0.attn.compressor.ape", "mtp.0.attn.indexer.wq_b.weight", "mtp.0.ffn.gate.tid2eid",
                             "mtp.0.embed.weight", "mtp.0.head.weight"})
    EXPECT_EQ(store.find(absent), nullptr) << absent;

  const v4::Model m = v4::load_model(dir);
  ASSERT_EQ(m.mtp_layers(), 1);
  const v4::StateLayout& layout = m.state_layout();
  ASSERT_EQ(layout.mtp_layers.size(), 1u);
  EXPECT_EQ(layout.layers.size(), static_cast<size_t>(c.num_hidden_layers));  // the main layers as before
  EXPECT_EQ(layout.mtp_layers[0].swa + layout.window_rows * layout.head_dim, layout.fixed_floats);
  EXPECT_FALSE(layout.mtp_layers[0].compressor);
}

TEST(MtpCheckpoint, AQuantizedCheckpointLoadsItsMtpLayer) {
  const v4::Model m = v4::load_model(write_tiny_mtp("mtp_fp4", 2, DType::F4_E2M1X2));
  EXPECT_EQ(m.mtp_layers(), 1);
  const TensorStore store = TensorStore::open(write_tiny_mtp("mtp_fp8", 2, DType::F8_E4M3));
  EXPECT_EQ(store.find("mtp.0.e_proj.weight")->dtype, DType::F8_E4M3);
  EXPECT_NE(store.find("mtp.0.e_proj.scale"), nullptr);
}

TEST(MtpCheckpoint, WithoutMtpTensorsTheModelHasNoMtpLayer) {
  // transformers' save_pretrained drops mtp.* but keeps num_nextn_predict_layers (the committed fixtures do): such
  // a checkpoint loads as before, with no MTP layer.
  const std::string dir = temp_dir("mtp_none");
  ModelConfig c = v4::preset_config("tiny");
  v4::write_random_checkpoint(c, dir, 3, DType::F32);
  {
    nlohmann::json j;
    std::ifstream(fs::path(dir) / "config.json") >> j;
    EXPECT_EQ(j["num_nextn_predict_layers"], 0);
    j["num_nextn_predict_layers"] = 1;
    std::ofstream(fs::path(dir) / "config.json") << j.dump(2);
  }
  const v4::Model m = v4::load_model(dir);
  EXPECT_EQ(m.config().num_nextn_predict_layers, 1);
  EXPECT_EQ(m.mtp_layers(), 0);
  EXPECT_TRUE(m.state_layout().mtp_layers.empty());
  SequenceState st = m.new_sequence();
  std::vector<DraftChunk> chunks(1);
  chunks[0].tokens = {1};
  chunks[0].streams = Mat(1, c.hc_mult * c.hidden_size);
  chunks[0].state = &st;
  EXPECT_NE(error_of([&] { m.run_draft(chunks, {}, 0); }).find("no MTP layer 0"), std::string::npos);
}

TEST(MtpCheckpoint, AMissingTensorIsNamed) {
  const std::string dir = write_tiny_mtp("mtp_missing_src", 4);
  for (const char* name : {"mtp.0.hnorm.weight", "mtp.0.e_proj.weight", "mtp.0.attn.wkv.weight",
                           "mtp.0.ffn.experts.3.w1.weight", "mtp.0.hc_head_fn"}) {
    const std::string bad = rewrite_checkpoint(dir, "mtp_missing", [&](auto& ts) { drop(ts, name); });
    const std::string err = error_of([&] { v4::load_model(bad); });
    EXPECT_NE(err.find(std::string("missing tensor '") + name + "'"), std::string::npos) << err;
  }
}

TEST(MtpCheckpoint, AMisshapedTensorIsNamedWithBothShapes) {
  const std::string dir = write_tiny_mtp("mtp_shape_src", 5);
  const std::string bad = rewrite_checkpoint(dir, "mtp_shape", [](auto& ts) {
    drop(ts, "mtp.0.enorm.weight");
    ts.push_back(model::make_f32_tensor("mtp.0.enorm.weight", {65}, std::vector<float>(65, 1.0f)));
  });
  const std::string err = error_of([&] { v4::load_model(bad); });
  EXPECT_NE(err.find("'mtp.0.enorm.weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("expected shape [64], found [65]"), std::string::npos) << err;

  const std::string bad_proj = rewrite_checkpoint(dir, "mtp_shape2", [](auto& ts) {
    drop(ts, "mtp.0.h_proj.weight");
    ts.push_back(model::make_f32_tensor("mtp.0.h_proj.weight", {64, 128}, std::vector<float>(64 * 128, 0.0f)));
  });
  const std::string err2 = error_of([&] { v4::load_model(bad_proj); });
  EXPECT_NE(err2.find("expected shape [64, 64], found [64, 128]"), std::string::npos) << err2;
}

TEST(MtpCheckpoint, ExtraMtpLayersAreUnexpectedButSharedCopiesAreNot) {
  const std::string dir = write_tiny_mtp("mtp_extra_src", 6);
  const std::string extra = rewrite_checkpoint(dir, "mtp_extra", [](auto& ts) {
    ts.push_back(model::make_f32_tensor("mtp.1.enorm.weight", {64}, std::vector<float>(64, 1.0f)));
  });
  const std::string err = error_of([&] { v4::load_model(extra); });
  EXPECT_NE(err.find("unexpected tensor 'mtp.1.enorm.weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("num_nextn_predict_layers is 1"), std::string::npos) << err;

  // DeepSeek's convert.py drops MTP copies of the shared embedding and head; a checkpoint that keeps them loads.
  const std::string copies = rewrite_checkpoint(dir, "mtp_copies", [](auto& ts) {
    ts.push_back(model::make_f32_tensor("mtp.0.emb.tok_emb.weight", {512, 64}, std::vector<float>(512 * 64, 0.0f)));
    ts.push_back(model::make_f32_tensor("mtp.0.head.weight", {512, 64}, std::vector<float>(512 * 64, 0.0f)));
  });
  EXPECT_EQ(v4::load_model(copies).mtp_layers(), 1);
}

TEST(MtpCheckpoint, RandomWeightsInMemoryHaveTheMtpLayer) {
  const v4::ModelWeights w = v4::random_weights(tiny_mtp_config(), 7, DType::BF16);
  ASSERT_EQ(w.mtp.size(), 1u);
  EXPECT_EQ(w.mtp[0].e_proj.rows, 64);
  EXPECT_FALSE(w.mtp[0].block.attn.compressor);
  EXPECT_TRUE(w.mtp[0].block.ffn.tid2eid.empty());
}

// ---- the forward against DeepSeek's formula ------------------------------------------------------------------

// DeepSeek's MTPBlock (inference/model.py; docs/mtp.md) in plain loops over the checkpoint's F32 tensors, read by
// name: nothing of src/model or src/backend is used but the file reader.
class Reference {
 public:
  explicit Reference(const std::string& dir) : store_(TensorStore::open(dir)), c_(tiny_mtp_config()) {}

  // Draft logits of MTP positions 0 … n-1 from the main streams `h` (rows 0 … n-1 of [≥ n, hc·d]) and the n next
  // tokens.
  std::vector<std::vector<float>> logits(const Mat& h, const std::vector<int32_t>& next) {
    const int64_t n = static_cast<int64_t>(next.size()), hc = c_.hc_mult, d = c_.hidden_size;
    if (h.rows < n) ADD_FAILURE() << "reference: " << h.rows << " hidden rows for " << n << " tokens";
    // x = e_proj(enorm(embed(t))) broadcast over the copies + h_proj(hnorm(h)).
    std::vector<std::vector<float>> x(static_cast<size_t>(n));
    const auto embed = t("embed.weight");
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> e(embed.begin() + next[i] * d, embed.begin() + (next[i] + 1) * d);
      const std::vector<float> ep = matvec(t("mtp.0.e_proj.weight"), norm(e, t("mtp.0.enorm.weight")));
      for (int64_t k = 0; k < hc; ++k) {
        std::vector<float> hk(h.row(i) + k * d, h.row(i) + (k + 1) * d);
        const std::vector<float> hp = matvec(t("mtp.0.h_proj.weight"), norm(hk, t("mtp.0.hnorm.weight")));
        for (int64_t j = 0; j < d; ++j) x[i].push_back(hp[j] + ep[j]);
      }
    }
    // Block.forward: attention then MoE, each between hc_pre and hc_post.
    std::vector<Mix> mixes;
    std::vector<std::vector<float>> a(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      mixes.push_back(hc_pre(x[i], "mtp.0.hc_attn"));
      a[i] = norm(mixes.back().y, t("mtp.0.attn_norm.weight"));
    }
    const std::vector<std::vector<float>> att = attention(a);
    for (int64_t i = 0; i < n; ++i) hc_post(x[i], mixes[i], att[i]);
    for (int64_t i = 0; i < n; ++i) {
      const Mix m = hc_pre(x[i], "mtp.0.hc_ffn");
      hc_post(x[i], m, moe(norm(m.y, t("mtp.0.ffn_norm.weight"))));
    }
    // ParallelHead with the MTP block's hc_head_* and norm, the shared head.
    std::vector<std::vector<float>> out;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<float> fn = t("mtp.0.hc_head_fn"), base = t("mtp.0.hc_head_base");
      const float scale = t("mtp.0.hc_head_scale")[0], r = rsqrt_mean_square(x[i]);
      std::vector<float> y(static_cast<size_t>(d), 0.0f);
      for (int64_t k = 0; k < hc; ++k) {
        const float pre = sigmoid(dot(fn.data() + k * hc * d, x[i].data(), hc * d) * r * scale + base[k]) + 1e-6f;
        for (int64_t j = 0; j < d; ++j) y[j] += pre * x[i][k * d + j];
      }
      out.push_back(matvec(t("head.weight"), norm(y, t("mtp.0.norm.weight"))));
    }
    return out;
  }

 private:
  struct Mix {
    std::vector<float> y, post, comb;  // comb[i·hc + j]: stream i → j
  };

  std::vector<float> t(const std::string& name) const { return floats_of(*store_.find(name)); }
  static float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
  static float dot(const float* a, const float* b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    return static_cast<float>(s);
  }
  static float rsqrt_mean_square(const std::vector<float>& v) {
    return 1.0f / std::sqrt(dot(v.data(), v.data(), static_cast<int64_t>(v.size())) / static_cast<float>(v.size()) + 1e-6f);
  }
  static std::vector<float> norm(std::vector<float> v, const std::vector<float>& w) {
    const float r = rsqrt_mean_square(v);
    for (size_t i = 0; i < v.size(); ++i) v[i] *= r * (w.empty() ? 1.0f : w[i]);
    return v;
  }
  static std::vector<float> matvec(const std::vector<float>& w, const std::vector<float>& x) {
    const int64_t cols = static_cast<int64_t>(x.size()), rows = static_cast<int64_t>(w.size()) / cols;
    std::vector<float> y(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) y[r] = dot(w.data() + r * cols, x.data(), cols);
    return y;
  }

  Mix hc_pre(const std::vector<float>& x, const std::string& site) const {
    const int64_t hc = c_.hc_mult, d = c_.hidden_size;
    const std::vector<float> fn = t(site + "_fn"), base = t(site + "_base"), scale = t(site + "_scale");
    const float r = rsqrt_mean_square(x), eps = 1e-6f;
    std::vector<float> mix(static_cast<size_t>((2 + hc) * hc));
    for (size_t m = 0; m < mix.size(); ++m) mix[m] = dot(fn.data() + m * hc * d, x.data(), hc * d) * r;
    Mix out;
    out.y.assign(static_cast<size_t>(d), 0.0f);
    for (int64_t k = 0; k < hc; ++k) {
      const float pre = sigmoid(mix[k] * scale[0] + base[k]) + eps;
      out.post.push_back(2.0f * sigmoid(mix[hc + k] * scale[1] + base[hc + k]));
      for (int64_t j = 0; j < d; ++j) out.y[j] += pre * x[k * d + j];
    }
    // Sinkhorn: row softmax + eps, a column normalisation, then (iters − 1) × (rows, columns), each over sum + eps.
    std::vector<float>& cm = out.comb;
    for (int64_t i = 0; i < hc * hc; ++i) cm.push_back(mix[2 * hc + i] * scale[2] + base[2 * hc + i]);
    for (int64_t i = 0; i < hc; ++i) {
      const float mx = *std::max_element(cm.begin() + i * hc, cm.begin() + (i + 1) * hc);
      float s = 0;
      for (int64_t j = 0; j < hc; ++j) s += (cm[i * hc + j] = std::exp(cm[i * hc + j] - mx));
      for (int64_t j = 0; j < hc; ++j) cm[i * hc + j] = cm[i * hc + j] / s + eps;
    }
    auto columns = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float s = 0;
        for (int64_t i = 0; i < hc; ++i) s += cm[i * hc + j];
        for (int64_t i = 0; i < hc; ++i) cm[i * hc + j] /= s + eps;
      }
    };
    auto rows = [&] {
      for (int64_t i = 0; i < hc; ++i) {
        float s = 0;
        for (int64_t j = 0; j < hc; ++j) s += cm[i * hc + j];
        for (int64_t j = 0; j < hc; ++j) cm[i * hc + j] /= s + eps;
      }
    };
    columns();
    for (int64_t it = 1; it < c_.hc_sinkhorn_iters; ++it) {
      rows();
      columns();
    }
    return out;
  }

  void hc_post(std::vector<float>& x, const Mix& m, const std::vector<float>& block_out) const {
    const int64_t hc = c_.hc_mult, d = c_.hidden_size;
    std::vector<float> y(x.size());
    for (int64_t j = 0; j < hc; ++j)
      for (int64_t e = 0; e < d; ++e) {
        float s = m.post[j] * block_out[e];
        for (int64_t i = 0; i < hc; ++i) s += m.comb[i * hc + j] * x[i * d + e];
        y[j * d + e] = s;
      }
    x = y;
  }

  // Interleaved RoPE on the trailing rope_dim channels of a head: pairs (2i, 2i+1) turned by pos · θ^(−2i/rope_dim).
  void rope(float* head, int64_t pos, bool inverse) const {
    const int64_t hd = c_.head_dim, rd = c_.qk_rope_head_dim;
    for (int64_t i = 0; i < rd / 2; ++i) {
      const float freq = 1.0f / std::pow(static_cast<float>(c_.rope_main.rope_theta), static_cast<float>(2 * i) / rd);
      const double angle = static_cast<double>(freq * static_cast<float>(pos));
      const float cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle)) * (inverse ? -1 : 1);
      float* p = head + hd - rd + 2 * i;
      const float a = p[0], b = p[1];
      p[0] = a * cs - b * sn;
      p[1] = a * sn + b * cs;
    }
  }

  // Window-only MQA with sinks (MTPBlock's Attention: compress_ratio 0), positions 0 … n-1.
  std::vector<std::vector<float>> attention(const std::vector<std::vector<float>>& x) const {
    const int64_t n = static_cast<int64_t>(x.size()), heads = c_.num_attention_heads, hd = c_.head_dim;
    const std::vector<float> sink = t("mtp.0.attn.attn_sink");
    std::vector<std::vector<float>> q(static_cast<size_t>(n)), kv(static_cast<size_t>(n)), out;
    for (int64_t i = 0; i < n; ++i) {
      q[i] = matvec(t("mtp.0.attn.wq_b.weight"),
                    norm(matvec(t("mtp.0.attn.wq_a.weight"), x[i]), t("mtp.0.attn.q_norm.weight")));
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<float> head(q[i].begin() + h * hd, q[i].begin() + (h + 1) * hd);
        head = norm(head, {});
        rope(head.data(), i, false);
        std::copy(head.begin(), head.end(), q[i].begin() + h * hd);
      }
      kv[i] = norm(matvec(t("mtp.0.attn.wkv.weight"), x[i]), t("mtp.0.attn.kv_norm.weight"));
      rope(kv[i].data(), i, false);
    }
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> o(static_cast<size_t>(heads * hd), 0.0f);
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<float> s;
        const int64_t from = std::max<int64_t>(0, i - c_.sliding_window + 1);
        for (int64_t j = from; j <= i; ++j) s.push_back(dot(q[i].data() + h * hd, kv[j].data(), hd) / std::sqrt(static_cast<float>(hd)));
        const float mx = std::max(*std::max_element(s.begin(), s.end()), sink[h]);
        float den = std::exp(sink[h] - mx);  // the sink: in the denominator only
        for (float& v : s) den += (v = std::exp(v - mx));
        for (int64_t j = from; j <= i; ++j)
          for (int64_t e = 0; e < hd; ++e) o[h * hd + e] += s[j - from] / den * kv[j][e];
        rope(o.data() + h * hd, i, true);
      }
      // Grouped output projection: group g's heads through wo_a's rows of group g, then wo_b.
      const int64_t groups = c_.o_groups, rank = c_.o_lora_rank, in = heads * hd / groups;
      const std::vector<float> wo_a = t("mtp.0.attn.wo_a.weight");
      std::vector<float> low;
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t r = 0; r < rank; ++r) low.push_back(dot(wo_a.data() + (g * rank + r) * in, o.data() + g * in, in));
      out.push_back(matvec(t("mtp.0.attn.wo_b.weight"), low));
    }
    return out;
  }

  std::vector<float> expert(const std::string& p, const std::vector<float>& x, float weight) const {
    const float limit = static_cast<float>(c_.swiglu_limit);
    std::vector<float> g = matvec(t(p + ".w1.weight"), x);
    const std::vector<float> u = matvec(t(p + ".w3.weight"), x);
    for (size_t i = 0; i < g.size(); ++i) {
      const float gate = std::min(g[i], limit);
      g[i] = weight * gate / (1.0f + std::exp(-gate)) * std::clamp(u[i], -limit, limit);
    }
    return matvec(t(p + ".w2.weight"), g);
  }

  // Gate: sqrt(softplus) scores, top-k of score + bias, weights = scores / their sum × route scale; + shared expert.
  std::vector<float> moe(const std::vector<float>& x) const {
    const int64_t e = c_.n_routed_experts, k = c_.num_experts_per_tok;
    std::vector<float> score = matvec(t("mtp.0.ffn.gate.weight"), x);
    for (float& s : score) s = std::sqrt(std::log1p(std::exp(s)));
    const std::vector<float> bias = t("mtp.0.ffn.gate.bias");
    std::vector<int64_t> idx(static_cast<size_t>(e));
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return score[a] + bias[a] > score[b] + bias[b]; });
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += score[idx[j]];
    std::vector<float> y = expert("mtp.0.ffn.shared_experts", x, 1.0f);
    for (int64_t j = 0; j < k; ++j) {
      const std::vector<float> r = expert("mtp.0.ffn.experts." + std::to_string(idx[j]), x,
                                          score[idx[j]] / sum * static_cast<float>(c_.routed_scaling_factor));
      for (size_t i = 0; i < y.size(); ++i) y[i] += r[i];
    }
    return y;
  }

  TensorStore store_;
  ModelConfig c_;
};

// The main model's last-layer streams (before the HyperHead) of `tokens`, from a forward of its own.
Mat main_streams(const v4::Model& m, const std::vector<int32_t>& tokens) {
  SequenceState st = m.new_sequence();
  Mat hidden;
  m.forward(tokens, st, false, [&](int64_t l, const Mat& s) {
    if (l == m.config().num_hidden_layers - 1) hidden = s;
  });
  return hidden;
}

LogitsStage raw_rows(int64_t n) {
  LogitsStage stage;
  for (int64_t r = 0; r < n; ++r) stage.rows.push_back({r, true, {}, std::nullopt, nullptr});
  return stage;
}

// Draft rows [from, from + count) of `h` / `next` on `state`, every row's logits home.
DraftOutput draft(const v4::Model& m, SequenceState& state, const Mat& h, const std::vector<int32_t>& next,
                  int64_t from, int64_t count) {
  std::vector<DraftChunk> chunks(1);
  chunks[0].streams = Mat(count, h.cols);
  std::copy(h.row(from), h.row(from) + count * h.cols, chunks[0].streams.v.begin());
  chunks[0].tokens.assign(next.begin() + from, next.begin() + from + count);
  chunks[0].state = &state;
  chunks[0].all_logits = true;
  return m.run_draft(chunks, raw_rows(count), 0);
}

class MtpForward : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(write_tiny_mtp("mtp_forward", 11));
    model_ = new v4::Model(v4::load_model(*dir_, model::Device::Cpu, model::Precision::Bf16, {}, 4));
    tokens_ = {17, 3, 400, 99, 5, 250, 77, 1, 311, 42, 8, 160};
    hidden_ = new Mat(main_streams(*model_, tokens_));
    next_.assign(tokens_.begin() + 1, tokens_.end());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete hidden_;
    delete dir_;
  }
  static int64_t n() { return static_cast<int64_t>(next_.size()); }

  static inline std::string* dir_ = nullptr;
  static inline v4::Model* model_ = nullptr;
  static inline Mat* hidden_ = nullptr;
  static inline std::vector<int32_t> tokens_, next_;
};

TEST_F(MtpForward, MatchesDeepSeeksFormulaInPlainLoops) {
  SequenceState st = model_->new_sequence();
  const DraftOutput out = draft(*model_, st, *hidden_, next_, 0, n());
  ASSERT_EQ(out.logits.raw.rows, n());
  EXPECT_EQ(st.mtp_tokens[0], n());
  EXPECT_EQ(st.num_tokens, 0);  // the main state's positions are the main forward's
  Reference ref(*dir_);
  const std::vector<std::vector<float>> want = ref.logits(*hidden_, next_);
  auto worst_and_scale = [&](int64_t r, const std::vector<float>& ref_row) {
    const float* got = out.logits.raw.row(r);
    double worst = 0, scale = 0;
    for (int64_t v = 0; v < out.logits.raw.cols; ++v) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[v]) - ref_row[v]));
      scale = std::max(scale, std::fabs(static_cast<double>(ref_row[v])));
    }
    return std::pair{worst, scale};
  };
  double worst_rel = 0;
  for (int64_t r = 0; r < n(); ++r) {
    const auto [worst, scale] = worst_and_scale(r, want[r]);
    EXPECT_GT(scale, 0.1) << "row " << r << ": logits too small to tell anything apart";
    EXPECT_LT(worst, 1e-4 * std::max(1.0, scale)) << "row " << r << " (largest logit " << scale << ")";
    worst_rel = std::max(worst_rel, worst / std::max(1.0, scale));
  }
  RecordProperty("worst_relative_difference", std::to_string(worst_rel));
  // The comparison can tell: the reference with another next token (the embedding path) is far off.
  std::vector<int32_t> other = next_;
  for (int32_t& t : other) t = (t + 1) % 512;
  const std::vector<std::vector<float>> wrong = ref.logits(*hidden_, other);
  const auto [off, off_scale] = worst_and_scale(n() - 1, wrong[static_cast<size_t>(n() - 1)]);
  EXPECT_GT(off, 1e-2 * std::max(1.0, off_scale));
  // The output streams of each row come home for the next draft position.
  EXPECT_EQ(out.streams.rows, n());
  EXPECT_EQ(out.streams.cols, hidden_->cols);
}

TEST_F(MtpForward, ChunkedDraftsEqualOneDraftBitForBit) {
  SequenceState whole = model_->new_sequence(), chunked = model_->new_sequence();
  const DraftOutput all = draft(*model_, whole, *hidden_, next_, 0, n());
  for (int64_t from = 0, step = 1; from < n(); from += step, step = step % 3 + 1) {
    const int64_t count = std::min(step, n() - from);
    const DraftOutput part = draft(*model_, chunked, *hidden_, next_, from, count);
    EXPECT_TRUE(same_finite_bits(part.logits.raw.row(0), all.logits.raw.row(from),
                                 static_cast<size_t>(count * all.logits.raw.cols)))
        << "rows from " << from;
  }
}

TEST_F(MtpForward, RollbackDropsSpeculativePositions) {
  SequenceState whole = model_->new_sequence(), st = model_->new_sequence();
  const DraftOutput all = draft(*model_, whole, *hidden_, next_, 0, n());
  draft(*model_, st, *hidden_, next_, 0, 6);
  // Three speculative positions (drafting ahead on wrong streams and tokens), then dropped.
  Mat wrong(3, hidden_->cols);
  for (size_t i = 0; i < wrong.v.size(); ++i) wrong.v[i] = static_cast<float>(i % 7) - 3.0f;
  draft(*model_, st, wrong, {9, 9, 9}, 0, 3);
  EXPECT_EQ(st.mtp_tokens[0], 9);
  st.rollback_mtp(0, 6);
  EXPECT_EQ(st.mtp_tokens[0], 6);
  const DraftOutput rest = draft(*model_, st, *hidden_, next_, 6, n() - 6);
  EXPECT_TRUE(same_finite_bits(rest.logits.raw.row(0), all.logits.raw.row(6),
                               static_cast<size_t>((n() - 6) * all.logits.raw.cols)));
  // Beyond max_rollback (4 here) the ring has overwritten what the kept positions need.
  EXPECT_NE(error_of([&] { st.rollback_mtp(0, 0); }).find("max_rollback"), std::string::npos);
  EXPECT_NE(error_of([&] { st.rollback_mtp(0, n() + 1); }).find("cannot keep"), std::string::npos);
  EXPECT_NE(error_of([&] { st.rollback_mtp(1, 0); }).find("no MTP layer 1"), std::string::npos);
}

TEST_F(MtpForward, MainRollbackLeavesTheMtpStateAndCopiesCarryIt) {
  SequenceState whole = model_->new_sequence(), st = model_->new_sequence();
  const DraftOutput all = draft(*model_, whole, *hidden_, next_, 0, n());
  // The main state of the same sequence goes forward and back; the MTP layer's positions are its own.
  model_->forward(tokens_, st, false);
  draft(*model_, st, *hidden_, next_, 0, 5);
  model_->rollback(st, static_cast<int64_t>(tokens_.size()) - 2);
  EXPECT_EQ(st.mtp_tokens[0], 5);
  // A copy continues where the state is, MTP ring included.
  SequenceState copy = model_->new_sequence();
  ASSERT_TRUE(model_->copy_state(st, copy));
  EXPECT_EQ(copy.mtp_tokens[0], 5);
  for (SequenceState* s : {&st, &copy}) {
    const DraftOutput rest = draft(*model_, *s, *hidden_, next_, 5, n() - 5);
    EXPECT_TRUE(same_finite_bits(rest.logits.raw.row(0), all.logits.raw.row(5),
                                 static_cast<size_t>((n() - 5) * all.logits.raw.cols)));
  }
  copy.reset();
  EXPECT_EQ(copy.mtp_tokens[0], 0);
}

// LogitsStage::stream_rows: the chosen step rows' last-layer streams come home with the step, the very floats the
// layer observer sees after the last layer (what the MTP layer drafts from), in the order asked for.
TEST_F(MtpForward, StreamRowsAreTheLastLayersStreams) {
  SequenceState st = model_->new_sequence();
  std::vector<model::SequenceChunk> chunks{{tokens_, &st, false}};
  LogitsStage stage = raw_rows(1);
  stage.stream_rows = {11, 2, 5};
  const model::StepLogits out = model_->run_step(chunks, stage);
  ASSERT_EQ(out.streams.rows, 3);
  ASSERT_EQ(out.streams.cols, hidden_->cols);
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t r = stage.stream_rows[static_cast<size_t>(i)];
    EXPECT_TRUE(same_finite_bits(out.streams.row(i), hidden_->row(r), static_cast<size_t>(hidden_->cols))) << "row " << r;
  }
  // Without stream rows, none come home.
  SequenceState plain = model_->new_sequence();
  std::vector<model::SequenceChunk> plain_chunks{{tokens_, &plain, false}};
  EXPECT_EQ(model_->run_step(plain_chunks, raw_rows(1)).streams.rows, 0);
  // A row outside the step is refused before anything runs.
  SequenceState other = model_->new_sequence();
  std::vector<model::SequenceChunk> bad{{tokens_, &other, false}};
  stage.stream_rows = {12};
  EXPECT_NE(error_of([&] { model_->run_step(bad, stage); }).find("stream row 12 is outside the step's 12 rows"),
            std::string::npos);
  EXPECT_EQ(other.num_tokens, 0);
}

TEST_F(MtpForward, RejectsMalformedDrafts) {
  SequenceState st = model_->new_sequence();
  std::vector<DraftChunk> chunks(1);
  chunks[0].tokens = {1, 2};
  chunks[0].streams = Mat(1, hidden_->cols);
  chunks[0].state = &st;
  EXPECT_NE(error_of([&] { model_->run_draft(chunks, raw_rows(1), 0); }).find("hidden streams for 2 tokens"),
            std::string::npos);
  chunks[0].streams = Mat(2, hidden_->cols);
  chunks[0].tokens = {1, 512};
  EXPECT_NE(error_of([&] { model_->run_draft(chunks, raw_rows(1), 0); }).find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model_->run_draft(chunks, raw_rows(1), 1); }).find("no MTP layer 1"), std::string::npos);
  chunks[0].tokens = {1, 2};
  LogitsStage with_streams = raw_rows(1);
  with_streams.stream_rows = {0};
  EXPECT_NE(error_of([&] { model_->run_draft(chunks, with_streams, 0); }).find("DraftOutput::streams"),
            std::string::npos);
  const v4::Model other = v4::load_model(*dir_);
  SequenceState foreign = other.new_sequence();
  chunks[0].tokens = {1, 2};
  chunks[0].state = &foreign;
  EXPECT_NE(error_of([&] { model_->run_draft(chunks, raw_rows(1), 0); }).find("no state of this model"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::test
