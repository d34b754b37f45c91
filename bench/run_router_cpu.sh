#!/usr/bin/env bash
# The router's benchmarks on the CPU (docs/router.md "Measured"). Writes bench/results/router_cpu_demo.json and
# bench/results/router_cpu_demo.png (policies), bench/results/router_overhead_cpu.json (overhead).
#
#   1. Policies: two `strata serve` replicas of the demo model (models/demo/) behind `strata route`, for each of
#      round_robin, least_load and cache_aware (fresh replicas each time, so no policy inherits another's cache),
#      driven by `strata bench serve` on two datasets:
#        shared-prefix    NUM_PREFIXES (25) groups of a 1024-token prefix, 4 requests per group, each with 32 tokens
#                         of its own (the case where a prefix computed on one replica is wasted work on the other);
#        growing-history  multi-turn: 7 conversations of 6 turns, each turn resending the whole history
#                         (512 tokens, then 64 new tokens a turn).
#      The group counts are odd on purpose: request i belongs to group i mod N, so with an even N round robin's
#      alternation would send every group to one replica and look cache-aware by accident.
#      Reported per run: TTFT / TPOT / E2E, goodput (TTFT ≤ 1 s and TPOT ≤ 100 ms), the prefix-cache hit rate the
#      replicas' usage reported, and the router's decisions by reason.
#   2. Overhead: what the router adds per request at 1,000 requests/s. A replica of a 1-layer tiny model
#      (OVERHEAD_THREADS model threads, default 8, so that it comes near 1,000/s; a comma list runs each) is loaded
#      with 5,000 one-token requests (128-token prompts: one block to hash) at a
#      Poisson rate of 1,000/s, once directly and once through `strata route --policy cache_aware` (the costliest
#      policy: it parses, hashes and consults the index), each after a warm-up run of 1,000. Two measures:
#        internal   the router's own time per request, from its /metrics summary: request read → last byte
#                   written to the replica, plus the replica's first byte read → handed to the client connection
#                   (the parse, the policy, the index, the upstream write; not the kernel's loopback hop);
#        external   TTFT through the router minus TTFT direct, at the median and the p99 (includes the extra
#                   loopback hop and the router's CPU competing with the replica and the client for two cores).
#      Each is run REPEATS times (default 3), alternating direct and routed; the run with the median routed p99
#      is kept in full and every run's numbers are listed.
# Usage (repo root, after scripts/setup.sh and a build): bash bench/run_router_cpu.sh [BUILD_DIR] [OUT_JSON]
# OUT_JSON is the policies' file; OVERHEAD_OUT the overhead's (default bench/results/router_overhead_cpu.json).
# ROUTER_ARGS: options added to the overhead run's router (e.g. --spare-connections 0).
# OVERHEAD_RATE: the offered rate (default 1000 requests/s; lower it on a machine too small to offer that).
# PARTS: policies,overhead (default both; bench/results/ has the policies from this machine's 2 cores and the
# overhead from a 16-core host, where the replica, the router and the client each have cores of their own).
# COMMIT: the commit BUILD_DIR was built from (default: scripts/provenance.sh --commit). A quick trial run:
# REPEATS=1 NUM_PREFIXES=4 OVERHEAD_PROMPTS=500 (the defaults are what the results file records).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-bench/results/router_cpu_demo.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
commit=${COMMIT:-$(bash scripts/provenance.sh --commit)}
"$build/strata" model init --preset tiny --layers 1 --seed 0 --tokenizer-from .deps/tokenizer-deepseek_v3 \
  --out "$work/tiny1" >/dev/null

python3 - "$build/strata" "$work" "$out" "$commit" "${PORT:-18100}" <<'EOF'
import json, os, re, subprocess, sys, time, urllib.request
strata, work, out, commit, port = sys.argv[1:]
port = int(port)
repeats = int(os.environ.get("REPEATS", "3"))
num_prefixes = int(os.environ.get("NUM_PREFIXES", "25"))
parts = os.environ.get("PARTS", "policies,overhead").split(",")
router_args = os.environ.get("ROUTER_ARGS", "").split()  # extra options of the overhead run's router

def start(args, log, env=None):
    f = open(log, "w")
    p = subprocess.Popen([strata, *args], stderr=f, stdout=f, env=env)
    return p

def wait_up(url, proc, log, seconds=120):
    for _ in range(int(seconds * 10)):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return
        except Exception:
            if proc.poll() is not None:
                sys.exit("exited early: " + open(log).read())
            time.sleep(0.1)
    sys.exit("did not come up: " + open(log).read())

def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill(); p.wait()

def metrics(url):
    """The router's decisions by reason and its overhead histogram (cumulative bucket counts by upper bound)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    decisions = {m.group(1): int(float(m.group(2)))
                 for m in re.finditer(r'^strata_router_decisions_total\{reason="([a-z_]+)"\} (\S+)$', text, re.M)}
    buckets = [(float("inf") if m.group(1) == "+Inf" else float(m.group(1)), int(float(m.group(2))))
               for m in re.finditer(r'^strata_router_overhead_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)]
    return decisions, buckets

def quantile_us(before, after, q):
    """The q-quantile of the requests between two scrapes, in microseconds: linear within its bucket (Prometheus's
    histogram_quantile), so it is exact at the bounds (200 us is one) and interpolated between them."""
    counts = [(le, a - b) for (le, a), (_, b) in zip(after, before)]
    total = counts[-1][1]
    rank, lower, below = q * total, 0.0, 0
    for le, n in counts:
        if n >= rank:
            if le == float("inf"):
                return lower * 1e6
            return (lower + (le - lower) * (rank - below) / max(1, n - below)) * 1e6
        lower, below = le, n
    return lower * 1e6

def bench(url, args, out_json):
    subprocess.run([strata, "bench", "serve", "--url", url, "--commit", commit, "--out", out_json, "--plots", "off",
                    *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.load(open(out_json))

def serve(model, p, extra=(), threads="1"):
    env = dict(os.environ, OMP_NUM_THREADS=threads)
    log = f"{work}/serve{p}.log"
    proc = start(["serve", "--model", model, "--port", str(p), "--served-model-name", "m", *extra], log, env)
    wait_up(f"http://127.0.0.1:{p}", proc, log)
    return proc

datasets = {
    "shared-prefix": ["--dataset", "shared-prefix", "--prefix-len", "1024", "--num-prefixes", str(num_prefixes),
                      "--input-len", "32", "--output-len", "16", "--num-prompts", str(4 * num_prefixes),
                      "--concurrency", "8"],
    "growing-history": ["--dataset", "growing-history", "--prefix-len", "512", "--num-prefixes", "7",
                        "--input-len", "64", "--output-len", "16", "--num-prompts", "42", "--concurrency", "8"],
}
slo = ["--slo-ttft-ms", "1000", "--slo-tpot-ms", "100"]
result = {"benchmark": "router", "commit": commit, "policies": {}}
keep = ("completed", "failed", "duration_s", "request_throughput", "output_token_throughput", "goodput",
        "prefix_cache_hit_rate", "ttft_ms", "tpot_ms", "e2e_ms")
for policy in ("round_robin", "least_load", "cache_aware") if "policies" in parts else ():
    result["policies"][policy] = {}
    for name, args in datasets.items():
        replicas = [serve("models/demo", port + 1), serve("models/demo", port + 2)]
        rlog = f"{work}/route.log"
        router = start(["route", "--port", str(port), "--policy", policy, "--backend", f"http://127.0.0.1:{port + 1}",
                        "--backend", f"http://127.0.0.1:{port + 2}", "--health-interval", "0.5"], rlog)
        try:
            wait_up(f"http://127.0.0.1:{port}", router, rlog)
            b = bench(f"http://127.0.0.1:{port}", [*args, *slo, "--model", "m", "--label", f"route {policy}"],
                      f"{work}/{policy}_{name}.json")
            decisions, _ = metrics(f"http://127.0.0.1:{port}")
        finally:
            stop([router, *replicas])
        result.update(device=b["device"], date=b["date"])
        result["policies"][policy][name] = {"results": {k: b["results"].get(k) for k in keep},
                                            "router_decisions": decisions, "bench_config": b["config"]}
        r = b["results"]
        print(f"{policy:12s} {name:16s} TTFT p50 {r['ttft_ms']['median']:.1f} ms p99 {r['ttft_ms']['p99']:.1f} ms, "
              f"TPOT p50 {r['tpot_ms']['median']:.1f} ms, goodput {r['goodput']}, hit rate {r.get('prefix_cache_hit_rate')}, "
              f"{decisions}", file=sys.stderr)

# Overhead at 1,000 requests/s: its own file (OVERHEAD_OUT), one entry per replica thread count in OVERHEAD_THREADS.
shape = ["--input-len", "128", "--output-len", "1", "--concurrency", "512", "--token-ids", "1000:30000", "--model", "m"]
rate = os.environ.get("OVERHEAD_RATE", "1000")
load = ["--rate", rate, "--num-prompts", os.environ.get("OVERHEAD_PROMPTS", "5000"), *shape, "--seed", "1"]
warm = ["--rate", rate, "--num-prompts", "1000", *shape, "--seed", "2"]  # opens the connections, faults in pages
overhead_runs = {}
direct = None
# The replica's model threads: enough that it nears 1,000/s (8 on 16 cores); a comma list runs each.
for threads in os.environ.get("OVERHEAD_THREADS", "8").split(",") if "overhead" in parts else ():
    runs = []
    for i in range(repeats):
        replica = serve(f"{work}/tiny1", port + 1, ["--max-num-seqs", "256", "--cache", "off"], threads)
        rlog = f"{work}/route.log"
        router = start(["route", "--port", str(port), "--policy", "cache_aware", "--model", "models/demo",
                        "--backend", f"http://127.0.0.1:{port + 1}", *router_args], rlog)
        try:
            wait_up(f"http://127.0.0.1:{port}", router, rlog)
            bench(f"http://127.0.0.1:{port + 1}", warm, f"{work}/warm.json")
            direct = bench(f"http://127.0.0.1:{port + 1}", load, f"{work}/direct.json")
            bench(f"http://127.0.0.1:{port}", warm, f"{work}/warm.json")
            _, before = metrics(f"http://127.0.0.1:{port}")
            routed = bench(f"http://127.0.0.1:{port}", load, f"{work}/routed.json")
            _, after = metrics(f"http://127.0.0.1:{port}")
        finally:
            stop([router, replica])
        d, r = direct["results"], routed["results"]
        # Between the two scrapes: the measured run's requests only (the warm-up run came before the first).
        run = {"replica_model_threads": int(threads),
               "internal_us": {"p50": round(quantile_us(before, after, 0.5), 1),
                               "p90": round(quantile_us(before, after, 0.9), 1),
                               "p99": round(quantile_us(before, after, 0.99), 1),
                               "requests": after[-1][1] - before[-1][1],
                               "histogram_cumulative": [{"le_us": round(le * 1e6) if le != float("inf") else "+Inf",
                                                         "count": a - b}
                                                        for (le, a), (_, b) in zip(after, before)]},
               "ttft_direct_ms": {k: d["ttft_ms"][k] for k in ("median", "p90", "p99")},
               "ttft_routed_ms": {k: r["ttft_ms"][k] for k in ("median", "p90", "p99")},
               "external_us": {"p50": round((r["ttft_ms"]["median"] - d["ttft_ms"]["median"]) * 1e3, 1),
                               "p99": round((r["ttft_ms"]["p99"] - d["ttft_ms"]["p99"]) * 1e3, 1)},
               "achieved_request_rate": {"direct": d["request_throughput"], "routed": r["request_throughput"]},
               "failed": {"direct": d["failed"], "routed": r["failed"]},
               "load_average_1m": os.getloadavg()[0]}
        runs.append(run)
        print(f"overhead, {threads} replica threads, run {i}: internal p50 {run['internal_us']['p50']:.0f} us "
              f"p99 {run['internal_us']['p99']:.0f} us; TTFT direct p50/p99 {d['ttft_ms']['median']:.2f}/"
              f"{d['ttft_ms']['p99']:.2f} ms, routed {r['ttft_ms']['median']:.2f}/{r['ttft_ms']['p99']:.2f} ms; "
              f"rate {d['request_throughput']:.0f}/{r['request_throughput']:.0f} req/s", file=sys.stderr)
    runs.sort(key=lambda x: x["internal_us"]["p99"])
    kept = dict(runs[len(runs) // 2])
    kept["all_runs"] = [{"internal_us_p50": x["internal_us"]["p50"], "internal_us_p99": x["internal_us"]["p99"],
                         "external_us_p50": x["external_us"]["p50"], "external_us_p99": x["external_us"]["p99"]}
                        for x in runs]
    overhead_runs[f"replica_threads_{threads}"] = kept
if overhead_runs:
    overhead = {"benchmark": "router_overhead", "device": direct["device"], "date": direct["date"], "commit": commit,
                "commands": {
                    "replica": "strata model init --preset tiny --layers 1 --seed 0 --tokenizer-from "
                               ".deps/tokenizer-deepseek_v3 --out T; OMP_NUM_THREADS=N strata serve --model T "
                               "--served-model-name m --max-num-seqs 256 --cache off",
                    "router": " ".join(["strata route --policy cache_aware --model models/demo --backend REPLICA", *router_args]),
                    "load": "strata bench serve " + " ".join(load) + ", directly and through the router, each after a "
                            "warm-up of " + " ".join(warm),
                    "internal": "the router's strata_router_overhead_seconds histogram, scraped before and after the "
                                "routed run; quantiles linear within a bucket (bench/run_router_cpu.sh quantile_us)",
                    "external": "TTFT through the router minus TTFT direct, same load",
                    "repeats": f"{repeats} per thread count, kept: the run with the median internal p99 (all_runs: each)",
                    "run_by": "PARTS=overhead bash bench/run_router_cpu.sh"},
                "runs": overhead_runs}
    overhead_out = os.environ.get("OVERHEAD_OUT", "bench/results/router_overhead_cpu.json")
    json.dump(overhead, open(overhead_out, "w"), indent=2)
    print("wrote " + overhead_out, file=sys.stderr)

if not result["policies"]:
    sys.exit(0)  # only the overhead ran: the policies' file is left as it is
result["commands"] = {"policies": "strata route --policy P --backend R1 --backend R2 --health-interval 0.5; "
                                  "strata bench serve --model m --slo-ttft-ms 1000 --slo-tpot-ms 100 + the dataset's flags",
                      "datasets": {k: " ".join(v) for k, v in datasets.items()},
                      "replicas": "OMP_NUM_THREADS=1 strata serve --model models/demo (defaults: cache on)"}
result = {k: result[k] for k in ("benchmark", "device", "date", "commit", "commands", "policies")}
json.dump(result, open(out, "w"), indent=2)
print("wrote " + out, file=sys.stderr)

if result.get("policies"):
    subprocess.run([sys.executable, "bench/plot_router.py", out], check=False)
EOF
