// Batch invariance of the CUDA backend (--batch-invariant; docs/batch_invariance.md), on the GPU machine
// (tests/gpu/run.sh): random request mixes, each sequence's logits rows against its solo run, bit for bit.
//
// For each checkpoint and precision (bf16; bf16 and fp8 for an FP8 checkpoint): a pool of sequences, each a random
// prompt of 1–600 tokens and 4 decode tokens, is first run alone — the prompt in one chunk, then one token a step.
// Then MIXES random mixes: 1–8 sequences, each prefilled in random chunks (1 token to the whole rest), starting
// at random steps, so a step holds prefill chunks and decode rows of different sequences together, at every
// position in the batch; CUDA graphs on, as served. Every logits row of every mix must equal the solo row to the bit
// (NaN never passes). The same mixes then run once without the mode and report how many rows differ there: the
// check must be able to see what the mode removes. With the mode, the other paths a request can take (a prefix-cache
// hit, a PD restore, speculative verification with rollback; run_paths) are checked against the same solo rows.
// Exit status: 0 pass, 1 fail, 2 error.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "invariance_mixes.h"
#include "model/deepseek_v4/model.h"

using namespace strata;
using namespace strata::model::v4;

namespace {

using namespace strata::test::invariance;

constexpr int64_t kMaxPrompt = 600;

int failures = 0;

void check(const std::string& dir, const std::string& name, Precision precision, int sequences, int mixes) {
  model::CudaSwitches invariant;
  invariant.batch_invariant = true;
  // Rollback of up to kMaxDrafts tokens, for the speculative path.
  const Model on = load_model(dir, Device::Cuda, precision, invariant, kMaxDrafts);
  std::mt19937_64 rng(20261207);
  const std::vector<Sequence> seqs = make_sequences(on, sequences, kMaxPrompt, rng);
  const MixResult a = run_mixes(on, seqs, mixes, 7);
  const bool ok = a.differing == 0 && a.rows > 0;
  failures += !ok;
  std::printf("%-14s %-4s --batch-invariant: %d mixes of %d sequences, %lld steps (%lld mixing prefill and decode), "
              "%lld logits rows, %lld differ from solo  %s\n",
              name.c_str(), precision_name(precision), mixes, sequences, static_cast<long long>(a.steps),
              static_cast<long long>(a.mixed_steps), static_cast<long long>(a.rows),
              static_cast<long long>(a.differing), ok ? "PASS" : "FAIL");
  const Paths paths = run_paths(on, seqs, 11);
  for (const auto& [path, r] : {std::pair{"prefix-cache hit", paths.cache}, std::pair{"PD restore", paths.pd},
                                std::pair{"speculative verify", paths.spec}}) {
    const bool path_ok = r.differing == 0 && r.rows > 0;
    failures += !path_ok;
    std::printf("%-14s %-4s --batch-invariant, %s: %lld runs, %lld logits rows, %lld differ from solo  %s\n",
                name.c_str(), precision_name(precision), path, static_cast<long long>(r.runs),
                static_cast<long long>(r.rows), static_cast<long long>(r.differing), path_ok ? "PASS" : "FAIL");
  }
  // Without the mode (the solo runs too): the same kind of mixes, fewer, for what the mode changes.
  const Model off = load_model(dir, Device::Cuda, precision);
  std::mt19937_64 rng_off(20261207);
  const std::vector<Sequence> seqs_off = make_sequences(off, sequences, kMaxPrompt, rng_off);
  const MixResult b = run_mixes(off, seqs_off, std::max(1, mixes / 10), 7);
  std::printf("%-14s %-4s without the mode: %lld of %lld logits rows differ from solo (information, not judged)\n",
              name.c_str(), precision_name(precision), static_cast<long long>(b.differing),
              static_cast<long long>(b.rows));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: strata_gpu_invariance_check [--mixes N] CHECKPOINT_DIR...\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each result line as it is made (tee, a timeout)
  int mixes = 1000, first = 1;
  if (argc > 3 && std::string(argv[1]) == "--mixes") {
    mixes = std::atoi(argv[2]);
    first = 3;
  }
  try {
    for (int i = first; i < argc; ++i) {
      const std::string dir = argv[i], name = dir.substr(dir.find_last_of('/') + 1);
      const Model cpu = load_model(dir, Device::Cpu);
      if (cpu.config().quantization) {
        for (const Precision p : {Precision::Bf16, Precision::Fp8}) check(dir, name, p, 24, mixes / 2);
      } else {
        check(dir, name, Precision::Bf16, 24, mixes);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  std::printf("%s: %d failing\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
