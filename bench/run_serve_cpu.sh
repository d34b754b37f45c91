#!/usr/bin/env bash
# Engine + HTTP overhead on the CPU, with models so small that serving, not the model, is what is measured.
# Writes bench/results/serve_overhead_cpu_tiny.json.
#
# Models: `strata model init --preset tiny --layers 1 --seed 0` (one sliding-window attention layer with hash MoE,
# hidden 64, vocab 512, f32) with a tokenizer written below whose 512 ids all decode to ASCII text (so every
# sampled token streams as one chunk of text, as with a real model); and the same weights with a cheaper
# config.json (sliding_window 16, hc_sinkhorn_iters 1: no tensor shape changes), to see how serving scales when the
# model costs less.
#   1. offline: `strata generate --input`, 512 requests (32-token prompts, 128 generated tokens, ignore_eos) at
#      --max-num-seqs 256: the engine's own time per step (planning, batch assembly, sampling) vs the model's;
#   2. online: `strata serve --max-num-seqs 256` driven by `strata bench serve --concurrency 256`, 1024 streamed
#      requests of that shape after 256 warm-up ones: streamed tokens/s in total, latencies, and the CPU time of
#      every server thread and of the client per streamed token (from /proc).
# Each is repeated (REPEATS, default 3): online the fastest run is kept in full (other jobs share the two cores),
# offline the median; every run's headline number is listed.
# Usage (repo root, after scripts/setup.sh): bash bench/run_serve_cpu.sh [BUILD_DIR] [OUT_JSON]
# SERVE_OMP_THREADS (default 1): the server's model threads; 1 leaves the second core to HTTP and the client.
# COMMIT: the commit BUILD_DIR was built from (default: scripts/provenance.sh --commit, "-dirty" when the tree was).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-bench/results/serve_overhead_cpu_tiny.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
"$build/strata" model init --preset tiny --layers 1 --seed 0 --out "$work/tiny1" >/dev/null

commit=${COMMIT:-$(bash scripts/provenance.sh --commit)}  # COMMIT: when BUILD_DIR was built from another checkout
python3 - "$build/strata" "$work" "$out" "$commit" "${SERVE_OMP_THREADS:-1}" "${PORT:-18080}" <<'EOF'
import itertools, json, os, random, resource, shutil, subprocess, sys, time
strata, work, out, commit, serve_threads, port = sys.argv[1:]

def write_ascii_tokenizer(model):
    # A byte-level BPE tokenizer whose 512 ids all fit the preset's vocabulary and all decode to ASCII text, so
    # that every token a random-weight model samples is streamed as one chunk of text (as with a real model):
    # ids 0-94 the printable ASCII characters, 95-509 two-letter merges, 510/511 BOS/EOS.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    char = {b: chr(c) for b, c in zip(bs, cs)}  # the ByteLevel alphabet: each byte as one printable character
    vocab = {char[b]: i for i, b in enumerate(range(32, 127))}
    merges = []
    for x, y in itertools.product("etaoinshrdlucmfwypvbgkjqxz", repeat=2):
        if len(vocab) == 510:
            break
        vocab[x + y] = len(vocab)
        merges.append(f"{x} {y}")
    special = dict(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    spec = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [dict(id=510, content="<｜begin▁of▁sentence｜>", **special),
                             dict(id=511, content="<｜end▁of▁sentence｜>", **special)],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": merges}}
    json.dump(spec, open(f"{model}/tokenizer.json", "w"), ensure_ascii=False)
    json.dump({"add_bos_token": False, "bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
              open(f"{model}/tokenizer_config.json", "w"), ensure_ascii=False)

repeats = int(os.environ.get("REPEATS", "3"))
tiny1, cheap = f"{work}/tiny1", f"{work}/tiny1-w16"
write_ascii_tokenizer(tiny1)
shutil.copytree(tiny1, cheap)
config = json.load(open(f"{cheap}/config.json"))
config.update(sliding_window=16, hc_sinkhorn_iters=1)
json.dump(config, open(f"{cheap}/config.json", "w"), indent=2)
models = {
    "tiny1": {"made_by": "strata model init --preset tiny --layers 1 --seed 0",
              "layers": "1 (sliding-window attention, hash MoE)", "hidden_size": 64, "vocab_size": 512, "dtype": "f32",
              "sliding_window": 128, "hc_sinkhorn_iters": 20,
              "tokenizer": "byte-level BPE, 510 ASCII tokens + BOS/EOS: every id streams as text (bench/run_serve_cpu.sh)"},
    "tiny1-w16": {"made_by": "tiny1 with config.json sliding_window 16 and hc_sinkhorn_iters 1 (same tensors)",
                  "sliding_window": 16, "hc_sinkhorn_iters": 1},
}

r = random.Random(0)
with open(f"{work}/requests.jsonl", "w") as f:
    for i in range(512):
        f.write(json.dumps({"custom_id": i, "prompt": [r.randrange(0, 510) for _ in range(32)], "max_tokens": 128,
                            "temperature": 0, "ignore_eos": True}) + "\n")

def offline(model):  # the median run (by the fraction outside the model) of `repeats`
    runs = []
    for _ in range(repeats):
        subprocess.run([strata, "generate", "--model", model, "--input", f"{work}/requests.jsonl", "--output",
                        f"{work}/results.jsonl", "--max-num-seqs", "256", "--summary", f"{work}/offline.json"],
                       check=True, stderr=subprocess.DEVNULL)
        s = json.load(open(f"{work}/offline.json"))
        e = s["engine"]
        runs.append({"steps": e["steps"], "tokens_per_step": e["tokens_per_step"],
                     "step_ms": 1e3 * e["step_seconds"] / e["steps"],
                     "model_ms_per_step": 1e3 * e["model_seconds"] / e["steps"],
                     "outside_model_us_per_step": e["outside_model_us_per_step"],
                     "outside_model_fraction": e["outside_model_fraction"],
                     "generated_tokens_per_s": s["generated_tokens_per_s"]})
    runs.sort(key=lambda r: r["outside_model_fraction"])
    median = dict(runs[len(runs) // 2])
    median["outside_model_fraction_all_runs"] = [round(r["outside_model_fraction"], 4) for r in runs]
    return median

def online(name, model):
    env = dict(os.environ, OMP_NUM_THREADS=serve_threads)
    log = open(f"{work}/serve.log", "w")
    server = subprocess.Popen([strata, "serve", "--model", model, "--port", port, "--max-num-seqs", "256",
                               "--served-model-name", name], env=env, stderr=log)
    try:
        for _ in range(300):
            if "listening" in open(f"{work}/serve.log").read(): break
            time.sleep(0.1)
        else:
            sys.exit("strata serve did not start: " + open(f"{work}/serve.log").read())
        def thread_cpu():  # user + system seconds per server thread
            tick, cpu = os.sysconf("SC_CLK_TCK"), {}
            for tid in os.listdir(f"/proc/{server.pid}/task"):
                fields = open(f"/proc/{server.pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                cpu[tid] = (int(fields[11]) + int(fields[12])) / tick
            return cpu
        common = ["--url", f"http://127.0.0.1:{port}", "--model", name, "--token-ids", "0:510", "--input-len", "32",
                  "--output-len", "128", "--concurrency", "256"]
        # Warm-up: the first requests fault in the state pool's pages.
        subprocess.run([strata, "bench", "serve", *common, "--num-prompts", "256"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        runs = []
        for _ in range(repeats):
            before, load = thread_cpu(), os.getloadavg()[0]
            client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([strata, "bench", "serve", *common, "--num-prompts", "1024", "--commit", commit,
                            "--label", f"strata serve, {name}", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50",
                            "--out", f"{work}/online.json"], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            client_after, after = resource.getrusage(resource.RUSAGE_CHILDREN), thread_cpu()
            b = json.load(open(f"{work}/online.json"))
            tokens = b["results"]["output_tokens"]
            threads = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)
            client = (client_after.ru_utime - client_before.ru_utime) + (client_after.ru_stime - client_before.ru_stime)
            runs.append((b, {"load_average_1m_at_start": round(load, 2),
                             "streamed_tokens_per_s": b["results"]["output_token_throughput"],
                             # SSE chunks that carried text, per generated token (1 when every token streams).
                             "chunks_per_token": round((b["results"]["itl_ms"]["count"] + b["results"]["completed"])
                                                       / tokens, 3),
                             "cpu_us_per_streamed_token": {
                                 "server_threads_busiest_first": [round(1e6 * t / tokens, 2) for t in threads if t > 0.005],
                                 "server_total": round(1e6 * sum(threads) / tokens, 2),
                                 "client": round(1e6 * client / tokens, 2)},
                             "results": b["results"]}))
    finally:
        server.terminate()
        server.wait()
    # Other jobs share this machine's two cores: the best run is the one they disturbed least; all are listed.
    runs.sort(key=lambda r: r[1]["streamed_tokens_per_s"], reverse=True)
    best_bench, best = runs[0]
    best["streamed_tokens_per_s_all_runs"] = [round(r[1]["streamed_tokens_per_s"]) for r in runs]
    best["load_average_1m_all_runs"] = [r[1]["load_average_1m_at_start"] for r in runs]
    return best_bench, best

result = {"benchmark": "serve_overhead", "commit": commit,
          "commands": {
              "offline": "strata generate --input REQUESTS --output FILE --max-num-seqs 256 (512 requests: 32 random "
                         "prompt ids in [0, 510), max_tokens 128, temperature 0, ignore_eos)",
              "online": f"OMP_NUM_THREADS={serve_threads} strata serve --max-num-seqs 256; strata bench serve "
                        "--concurrency 256 --num-prompts 1024 --input-len 32 --output-len 128 --token-ids 0:510 "
                        "--slo-ttft-ms 1000 --slo-tpot-ms 50 (after 256 warm-up requests)",
              "repeats": f"{repeats} runs each; online: the fastest run in full (the machine is shared), offline: the "
                         "median run"},
          "models": models, "runs": {}}
for name, model in (("tiny1", tiny1), ("tiny1-w16", cheap)):
    engine = offline(model)
    bench, run = online(name, model)
    result.update(device=bench["device"], date=bench["date"])
    run["engine_overhead_batch_256"] = engine
    run["bench_config"] = bench["config"]
    result["runs"][name] = run
    print("%s: %.0f streamed tokens/s; engine outside the model at batch 256: %.2f%% (%.0f us/step); "
          "CPU us/token: server threads %s, client %.1f; load %.1f" %
          (name, run["streamed_tokens_per_s"], 100 * engine["outside_model_fraction"], engine["outside_model_us_per_step"],
           run["cpu_us_per_streamed_token"]["server_threads_busiest_first"], run["cpu_us_per_streamed_token"]["client"],
           run["load_average_1m_at_start"]), file=sys.stderr)
result = {k: result[k] for k in ("benchmark", "device", "date", "commit", "commands", "models", "runs")}
json.dump(result, open(out, "w"), indent=2)
print("wrote " + out, file=sys.stderr)
EOF
