// Checkpoint names (official ↔ transformers ↔ save_pretrained), loading a transformers-saved checkpoint and config,
// the errors load_model gives for every kind of broken checkpoint, and the `strata` CLI's handling of bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/checkpoint_names.h"
#include "model/config.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using model::name_aliases;
using model::OwnedTensor;
using model::saved_name;
using model::TensorStore;
using model::transformers_name;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---------------------------------------------------------------------------------------------------------------
// Name mapping

TEST(Checkpoint, TransformersNames) {
  EXPECT_EQ(transformers_name("layers.0.attn.wq_a.weight"), "layers.0.self_attn.q_a_proj.weight");
  EXPECT_EQ(transformers_name("layers.3.attn.indexer.compressor.norm.weight"),
            "layers.3.self_attn.compressor.indexer.kv_norm.weight");
  EXPECT_EQ(transformers_name("layers.3.attn.indexer.weights_proj.weight"),
            "layers.3.self_attn.compressor.indexer.scorer.weights_proj.weight");
  EXPECT_EQ(transformers_name("layers.2.ffn.gate.bias"), "layers.2.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(transformers_name("embed.weight"), "embed_tokens.weight");
  EXPECT_EQ(transformers_name("head.weight"), "lm_head.weight");
  EXPECT_EQ(transformers_name("hc_head_fn"), "hc_head.hc_fn");
  EXPECT_EQ(transformers_name("norm.weight"), "norm.weight");
  EXPECT_EQ(transformers_name("layers.1.attn.kv_norm.weight"), "layers.1.self_attn.kv_norm.weight");
  EXPECT_EQ(transformers_name("layers.1.attn.compressor.norm.weight"), "layers.1.self_attn.compressor.kv_norm.weight");
  EXPECT_EQ(transformers_name("layers.1.attn.wq_b.weight"), "layers.1.self_attn.q_b_proj.weight");
  EXPECT_EQ(transformers_name("layers.1.attn.indexer.wq_b.weight"),
            "layers.1.self_attn.compressor.indexer.q_b_proj.weight");
  EXPECT_EQ(transformers_name("layers.1.attn.compressor.ape"), "layers.1.self_attn.compressor.position_bias");
  EXPECT_EQ(transformers_name("layers.0.attn.attn_sink"), "layers.0.self_attn.sinks");
  EXPECT_EQ(transformers_name("layers.0.hc_attn_fn"), "layers.0.attn_hc.fn");
  EXPECT_EQ(transformers_name("layers.0.attn_norm.weight"), "layers.0.input_layernorm.weight");
  EXPECT_EQ(transformers_name("layers.0.ffn_norm.weight"), "layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(transformers_name("layers.0.ffn.shared_experts.w2.weight"), "layers.0.mlp.shared_experts.down_proj.weight");
}

TEST(Checkpoint, SavedNames) {
  EXPECT_EQ(saved_name("layers.1.attn.kv_norm.weight"), "model.layers.1.attn.norm.weight");
  EXPECT_EQ(saved_name("head.weight"), "head.weight");
  EXPECT_EQ(saved_name("embed.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(saved_name("hc_head_fn"), "model.hc_head.hc_fn");
  EXPECT_EQ(saved_name("norm.weight"), "model.norm.weight");
  EXPECT_EQ(saved_name("layers.1.attn.indexer.compressor.wkv.weight"),
            "model.layers.1.attn.indexer.compressor.wkv.weight");
  EXPECT_EQ(saved_name("layers.1.ffn.experts.0.w1.weight"), "model.layers.1.ffn.experts.0.w1.weight");
  EXPECT_EQ(saved_name("layers.1.attn.compressor.norm.weight"), "model.layers.1.attn.compressor.norm.weight");
}

TEST(Checkpoint, AliasesStartWithOfficialName) {
  const auto aliases = name_aliases("layers.1.attn.kv_norm.weight");
  ASSERT_FALSE(aliases.empty());
  EXPECT_EQ(aliases[0], "layers.1.attn.kv_norm.weight");
  EXPECT_NE(std::find(aliases.begin(), aliases.end(), "model.layers.1.attn.norm.weight"), aliases.end());
  EXPECT_NE(std::find(aliases.begin(), aliases.end(), "model.layers.1.self_attn.kv_norm.weight"), aliases.end());
  for (size_t i = 0; i < aliases.size(); ++i)
    for (size_t j = i + 1; j < aliases.size(); ++j) EXPECT_NE(aliases[i], aliases[j]);
}

// Every tensor transformers' save_pretrained wrote for a_hc4 is claimed by exactly one official name of that config,
// and load_model accepts the directory (so nothing is missing or unexpected).
TEST(Checkpoint, TransformersSavedNamesClaimedExactlyOnce) {
  const std::string dir = test::fixture("a_hc4");
  ASSERT_NO_THROW(model::v4::load_model(dir));

  // The official names of this config: what write_random_checkpoint writes for it.
  model::ModelConfig cfg = model::load_config(dir + "/config.json");
  // transformers' save_pretrained drops the MTP layers the config still declares (docs/mtp.md): compare without.
  cfg.num_nextn_predict_layers = 0;
  const std::string official_dir = test::temp_dir("ckpt_official_names");
  model::v4::write_random_checkpoint(cfg, official_dir, 0, DType::F32);
  const TensorStore official = TensorStore::open(official_dir);
  std::map<std::string, std::vector<std::string>> claimed_by;
  for (const auto& [name, t] : official.tensors())
    for (const std::string& alias : name_aliases(name)) claimed_by[alias].push_back(name);

  const TensorStore saved = TensorStore::open(dir + "/model.safetensors");
  ASSERT_GT(saved.tensors().size(), 100u);
  for (const auto& [name, t] : saved.tensors()) {
    const auto it = claimed_by.find(name);
    ASSERT_NE(it, claimed_by.end()) << name << " is not an alias of any official name";
    EXPECT_EQ(it->second.size(), 1u) << name << " is claimed by " << it->second.size() << " official names";
    EXPECT_EQ(saved_name(it->second[0]), name) << "official " << it->second[0];
  }
  // And the other way round: every official name is present under its saved name.
  EXPECT_EQ(saved.tensors().size(), official.tensors().size());
  for (const auto& [name, t] : official.tensors())
    EXPECT_NE(saved.find(saved_name(name)), nullptr) << name << " saved as " << saved_name(name);
}

// ---------------------------------------------------------------------------------------------------------------
// config.json written by transformers

TEST(Checkpoint, TransformersSavedConfigParses) {
  const model::ModelConfig c = model::load_config(test::fixture("transformers_saved_config.json"));
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.layer_types,
            (std::vector<model::AttentionType>{model::AttentionType::Sliding, model::AttentionType::CompressedSparse,
                                               model::AttentionType::HeavilyCompressed,
                                               model::AttentionType::CompressedSparse}));
  EXPECT_EQ(c.mlp_layer_types,
            (std::vector<model::MlpType>{model::MlpType::HashMoe, model::MlpType::Moe, model::MlpType::Moe,
                                         model::MlpType::Moe}));
  EXPECT_EQ(c.rope_compress.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 256);
  EXPECT_DOUBLE_EQ(c.rope_compress.rope_theta, 160000.0);
  EXPECT_EQ(c.rope_main.rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rope_main.rope_theta, 10000.0);
  EXPECT_EQ(c.csa_compress_rate, 4);
  EXPECT_EQ(c.hca_compress_rate, 128);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1}));
  EXPECT_FALSE(c.pad_token_id.has_value());
}

// ---------------------------------------------------------------------------------------------------------------
// Broken checkpoints

// A fresh tiny random checkpoint and its tensors as owned copies, to be edited and rewritten.
struct TinyCheckpoint {
  std::string dir;
  std::vector<OwnedTensor> tensors;
};

TinyCheckpoint make_tiny(const std::string& tag) {
  TinyCheckpoint t;
  t.dir = test::temp_dir(tag + "_orig");
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), t.dir, 1, DType::F32);
  const TensorStore store = TensorStore::open(t.dir);
  for (const auto& [name, v] : store.tensors()) {
    OwnedTensor o;
    o.name = name;
    o.dtype = v.dtype;
    o.shape = v.shape;
    o.bytes.assign(v.data, v.data + v.nbytes);
    t.tensors.push_back(std::move(o));
  }
  return t;
}

// A copy of `orig` (config.json included) whose model.safetensors holds `tensors`.
std::string write_copy(const TinyCheckpoint& orig, const std::string& tag, const std::vector<OwnedTensor>& tensors) {
  const std::string dir = test::temp_dir(tag);
  fs::copy_file(orig.dir + "/config.json", dir + "/config.json");
  model::write_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

OwnedTensor& tensor_named(std::vector<OwnedTensor>& tensors, const std::string& name) {
  for (auto& t : tensors)
    if (t.name == name) return t;
  throw std::runtime_error("test: no tensor " + name);
}

std::string load_error(const std::string& dir) {
  try {
    model::v4::load_model(dir);
    ADD_FAILURE() << "expected an error loading " << dir;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, RandomTinyCheckpointLoads) {
  const TinyCheckpoint t = make_tiny("ckpt_ok");
  ASSERT_NO_THROW(model::v4::load_model(t.dir));
  // A faithful rewrite loads too, so the broken copies below fail only because of their edit.
  const std::string copy = write_copy(t, "ckpt_ok_copy", t.tensors);
  ASSERT_NO_THROW(model::v4::load_model(copy));
}

TEST(Checkpoint, MissingTensor) {
  TinyCheckpoint t = make_tiny("ckpt_missing");
  const std::string name = "layers.2.attn.compressor.wkv.weight";
  std::vector<OwnedTensor> tensors;
  for (auto& x : t.tensors)
    if (x.name != name) tensors.push_back(x);
  ASSERT_EQ(tensors.size() + 1, t.tensors.size());
  const std::string msg = load_error(write_copy(t, "ckpt_missing_copy", tensors));
  EXPECT_TRUE(has(msg, "missing tensor")) << msg;
  EXPECT_TRUE(has(msg, "'" + name + "'")) << msg;
  // It lists the spellings it tried, the saved one included.
  EXPECT_TRUE(has(msg, "model.layers.2.attn.compressor.wkv.weight")) << msg;
}

TEST(Checkpoint, MissingHead) {
  TinyCheckpoint t = make_tiny("ckpt_missing_head");
  std::vector<OwnedTensor> tensors;
  for (auto& x : t.tensors)
    if (x.name != "head.weight") tensors.push_back(x);
  const std::string msg = load_error(write_copy(t, "ckpt_missing_head_copy", tensors));
  EXPECT_TRUE(has(msg, "missing tensor 'head.weight'")) << msg;
}

TEST(Checkpoint, WrongShape) {
  TinyCheckpoint t = make_tiny("ckpt_shape");
  const std::string name = "layers.1.attn.wq_b.weight";
  OwnedTensor& w = tensor_named(t.tensors, name);
  ASSERT_EQ(w.shape.size(), 2u);
  std::swap(w.shape[0], w.shape[1]);  // same byte count, transposed shape
  const std::string msg = load_error(write_copy(t, "ckpt_shape_copy", t.tensors));
  EXPECT_TRUE(has(msg, name)) << msg;
  EXPECT_TRUE(has(msg, "expected shape")) << msg;
  EXPECT_TRUE(has(msg, "[256, 32]")) << msg;
  EXPECT_TRUE(has(msg, "[32, 256]")) << msg;
}

TEST(Checkpoint, WrongShapeOfVector) {
  TinyCheckpoint t = make_tiny("ckpt_shape_vec");
  const std::string name = "layers.0.attn.attn_sink";
  OwnedTensor& w = tensor_named(t.tensors, name);
  w = model::make_f32_tensor(name, {5}, {1, 2, 3, 4, 5});
  const std::string msg = load_error(write_copy(t, "ckpt_shape_vec_copy", t.tensors));
  EXPECT_TRUE(has(msg, name)) << msg;
  EXPECT_TRUE(has(msg, "expected shape [4]")) << msg;
}

TEST(Checkpoint, UnexpectedTensor) {
  TinyCheckpoint t = make_tiny("ckpt_extra");
  t.tensors.push_back(model::make_f32_tensor("layers.0.attn.bogus.weight", {2}, {1, 2}));
  const std::string msg = load_error(write_copy(t, "ckpt_extra_copy", t.tensors));
  EXPECT_TRUE(has(msg, "unexpected tensor")) << msg;
  EXPECT_TRUE(has(msg, "layers.0.attn.bogus.weight")) << msg;
}

TEST(Checkpoint, SameTensorUnderTwoSpellings) {
  // The official name and the saved name of one tensor: one is used, the other is left over and reported.
  TinyCheckpoint t = make_tiny("ckpt_two_spellings");
  OwnedTensor dup = tensor_named(t.tensors, "layers.0.attn.kv_norm.weight");
  dup.name = "model.layers.0.attn.norm.weight";
  t.tensors.push_back(dup);
  const std::string msg = load_error(write_copy(t, "ckpt_two_spellings_copy", t.tensors));
  EXPECT_TRUE(has(msg, "unexpected tensor 'model.layers.0.attn.norm.weight'")) << msg;
}

TEST(Checkpoint, WeightInIntegerDtype) {
  TinyCheckpoint t = make_tiny("ckpt_dtype");
  const std::string name = "layers.0.attn.wq_a.weight";
  OwnedTensor& w = tensor_named(t.tensors, name);
  ASSERT_EQ(w.dtype, DType::F32);
  w.dtype = DType::I32;  // same element size, so the byte count still matches
  const std::string msg = load_error(write_copy(t, "ckpt_dtype_copy", t.tensors));
  EXPECT_TRUE(has(msg, name)) << msg;
  EXPECT_TRUE(has(msg, "I32")) << msg;
}

TEST(Checkpoint, NormInIntegerDtype) {
  TinyCheckpoint t = make_tiny("ckpt_dtype_norm");
  const std::string name = "layers.0.attn_norm.weight";
  OwnedTensor& w = tensor_named(t.tensors, name);
  w.dtype = DType::I32;
  const std::string msg = load_error(write_copy(t, "ckpt_dtype_norm_copy", t.tensors));
  EXPECT_TRUE(has(msg, name)) << msg;
  EXPECT_TRUE(has(msg, "I32")) << msg;
}

TEST(Checkpoint, Tid2eidOutOfRange) {
  TinyCheckpoint t = make_tiny("ckpt_tid2eid");
  const std::string name = "layers.0.ffn.gate.tid2eid";
  OwnedTensor& w = tensor_named(t.tensors, name);
  ASSERT_EQ(w.dtype, DType::I64);
  const int64_t bad = 8;  // tiny has 8 routed experts: ids 0..7
  std::memcpy(w.bytes.data() + 8 * 5, &bad, 8);
  const std::string msg = load_error(write_copy(t, "ckpt_tid2eid_copy", t.tensors));
  EXPECT_TRUE(has(msg, name)) << msg;
  EXPECT_TRUE(has(msg, "element 5")) << msg;

  const int64_t negative = -1;
  std::memcpy(w.bytes.data() + 8 * 5, &negative, 8);
  const std::string msg2 = load_error(write_copy(t, "ckpt_tid2eid_copy2", t.tensors));
  EXPECT_TRUE(has(msg2, name)) << msg2;
}

TEST(Checkpoint, Tid2eidAsFloat) {
  TinyCheckpoint t = make_tiny("ckpt_tid2eid_f");
  const std::string name = "layers.0.ffn.gate.tid2eid";
  OwnedTensor& w = tensor_named(t.tensors, name);
  w.dtype = DType::F32;
  w.shape.push_back(2);  // I64 → F32 halves the element size: [512, 2] I64 has the bytes of [512, 2, 2] F32
  const std::string msg = load_error(write_copy(t, "ckpt_tid2eid_f_copy", t.tensors));
  EXPECT_TRUE(has(msg, name)) << msg;
}

// A copy of the tiny checkpoint whose config.json has been edited by `edit`.
std::string copy_with_config(const TinyCheckpoint& t, const std::string& tag,
                             const std::function<void(nlohmann::json&)>& edit) {
  const std::string dir = test::temp_dir(tag);
  fs::copy_file(t.dir + "/model.safetensors", dir + "/model.safetensors");
  nlohmann::json j;
  {
    std::ifstream in(t.dir + "/config.json");
    j = nlohmann::json::parse(in);
  }
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
  return dir;
}

TEST(Checkpoint, BadConfigValues) {
  const TinyCheckpoint t = make_tiny("ckpt_config");
  {
    const std::string msg = load_error(copy_with_config(t, "ckpt_config_act", [](nlohmann::json& j) {
      j["hidden_act"] = "gelu";
    }));
    EXPECT_TRUE(has(msg, "hidden_act")) << msg;
    EXPECT_TRUE(has(msg, "gelu")) << msg;
  }
  {
    const std::string msg = load_error(copy_with_config(t, "ckpt_config_types", [](nlohmann::json& j) {
      ASSERT_TRUE(j.contains("layer_types"));
      j["layer_types"][1] = "full_attention";
    }));
    EXPECT_TRUE(has(msg, "layer_types[1]")) << msg;
    EXPECT_TRUE(has(msg, "full_attention")) << msg;
  }
  {
    const std::string msg = load_error(copy_with_config(t, "ckpt_config_mlp", [](nlohmann::json& j) {
      j["mlp_layer_types"] = {"moe", "moe"};
    }));
    EXPECT_TRUE(has(msg, "mlp_layer_types")) << msg;
  }
  {
    const std::string msg = load_error(copy_with_config(t, "ckpt_config_hidden", [](nlohmann::json& j) {
      j["hidden_size"] = "64";
    }));
    EXPECT_TRUE(has(msg, "hidden_size")) << msg;
  }
  {
    // A config that is fine by itself but disagrees with the tensors: a shape error naming a tensor.
    const std::string msg = load_error(copy_with_config(t, "ckpt_config_vocab", [](nlohmann::json& j) {
      j["vocab_size"] = 1024;
    }));
    EXPECT_TRUE(has(msg, "expected shape")) << msg;
    EXPECT_TRUE(has(msg, "embed.weight")) << msg;
  }
}

TEST(Checkpoint, TruncatedSafetensors) {
  const TinyCheckpoint t = make_tiny("ckpt_truncated");
  const std::string dir = write_copy(t, "ckpt_truncated_copy", t.tensors);
  const std::string file = dir + "/model.safetensors";
  fs::resize_file(file, fs::file_size(file) / 2);
  const std::string msg = load_error(dir);
  EXPECT_TRUE(has(msg, "truncated")) << msg;
  EXPECT_TRUE(has(msg, "model.safetensors")) << msg;
}

TEST(Checkpoint, MissingConfig) {
  const TinyCheckpoint t = make_tiny("ckpt_no_config");
  const std::string dir = test::temp_dir("ckpt_no_config_copy");
  fs::copy_file(t.dir + "/model.safetensors", dir + "/model.safetensors");
  const std::string msg = load_error(dir);
  EXPECT_TRUE(has(msg, "config.json")) << msg;
}

// ---------------------------------------------------------------------------------------------------------------
// The strata CLI

struct RunResult {
  int exit_code = -1;
  std::string out;   // stdout (stderr too when merged)
  std::string err;   // stderr when kept apart
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Runs `strata <args>`; stdout and stderr go to separate files unless `merge`.
RunResult run_strata(const std::string& args, const std::string& tag, bool merge) {
  const std::string dir = test::temp_dir("cli_" + tag);
  const std::string out = dir + "/out.txt", err = dir + "/err.txt";
  std::string cmd = quoted(STRATA_BINARY) + " " + args + " >" + quoted(out);
  cmd += merge ? " 2>&1" : " 2>" + quoted(err);
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  if (!merge) r.err = read_text(err);
  return r;
}

TEST(Checkpoint, CliUnknownPreset) {
  const std::string out = test::temp_dir("cli_preset_out");
  const RunResult r = run_strata("model init --preset enormous --out " + quoted(out + "/ckpt"), "preset", true);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "enormous")) << r.out;
  EXPECT_TRUE(has(r.out, "preset")) << r.out;
}

TEST(Checkpoint, CliBadPromptIds) {
  const TinyCheckpoint t = make_tiny("cli_prompt");
  const RunResult r = run_strata("generate --model " + quoted(t.dir) + " --prompt-ids 1,x,3", "prompt", true);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--prompt-ids")) << r.out;
  EXPECT_TRUE(has(r.out, "'x'")) << r.out;
}

TEST(Checkpoint, CliPromptIdOutsideVocab) {
  const TinyCheckpoint t = make_tiny("cli_vocab");
  const RunResult r = run_strata("generate --model " + quoted(t.dir) + " --prompt-ids 1,512", "vocab", true);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--prompt-ids")) << r.out;
  EXPECT_TRUE(has(r.out, "512")) << r.out;
}

TEST(Checkpoint, CliGenerateGreedy) {
  const TinyCheckpoint t = make_tiny("cli_generate");
  const std::string args =
      "generate --model " + quoted(t.dir) + " --prompt-ids 5,6,7 --max-tokens 3 --temperature 0 --ignore-eos";
  const RunResult r = run_strata(args, "generate", false);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string line = r.out;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  ASSERT_EQ(line.find('\n'), std::string::npos) << "stdout should be one line: " << r.out;
  std::vector<int64_t> ids;
  std::stringstream s(line);
  for (std::string item; std::getline(s, item, ',');) {
    ASSERT_FALSE(item.empty()) << line;
    ASSERT_EQ(item.find_first_not_of("0123456789"), std::string::npos) << line;
    ids.push_back(std::stoll(item));
  }
  ASSERT_EQ(ids.size(), 3u) << line;
  for (int64_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 512);
  }
  EXPECT_TRUE(has(r.err, "prefill")) << r.err;

  // Greedy decoding is deterministic.
  const RunResult again = run_strata(args, "generate_again", false);
  EXPECT_EQ(again.out, r.out);
}

TEST(Checkpoint, CliUnknownOption) {
  const TinyCheckpoint t = make_tiny("cli_option");
  const RunResult r =
      run_strata("generate --model " + quoted(t.dir) + " --prompt-ids 1 --frobnicate 3", "option", true);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--frobnicate")) << r.out;
}

TEST(Checkpoint, CliBrokenCheckpoint) {
  TinyCheckpoint t = make_tiny("cli_broken");
  t.tensors.push_back(model::make_f32_tensor("layers.0.attn.bogus.weight", {2}, {1, 2}));
  const std::string dir = write_copy(t, "cli_broken_copy", t.tensors);
  const RunResult r = run_strata("model info --model " + quoted(dir), "broken", true);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "layers.0.attn.bogus.weight")) << r.out;
}

// strata bench --batch: forks a prefilled sequence into B and times batched decode steps; one row per (context,
// batch) with positive timings, and B / step tokens per second.
TEST(Checkpoint, CliBenchBatchedDecode) {
  const TinyCheckpoint t = make_tiny("cli_bench");
  const RunResult r = run_strata("bench --model " + quoted(t.dir) +
                                     " --prompt-len 8 --decode-tokens 2 --repeats 1 --batch 1,3 --context 9,140 --chunk 64",
                                 "bench", false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["batched_decode"].size(), 2u);
  for (const auto& ctx : j["batched_decode"]) {
    ASSERT_EQ(ctx["decode"].size(), 2u);
    for (const auto& row : ctx["decode"]) {
      EXPECT_GT(row["step_ms_median"].get<double>(), 0.0);
      EXPECT_NEAR(row["tokens_per_s"].get<double>(),
                  row["batch"].get<double>() * row["tokens_per_s_per_user"].get<double>(), 1e-6);
    }
  }
  EXPECT_EQ(j["batched_decode"][1]["context"], 140);
  const RunResult bad = run_strata("bench --model " + quoted(t.dir) + " --batch 0", "bench_bad", true);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(has(bad.out, "--batch")) << bad.out;
}

}  // namespace
}  // namespace strata
