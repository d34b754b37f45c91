#!/usr/bin/env bash
# PD transfer probe on one GPU: a prefill replica and two decode replicas (tcp; --transfer shared, CUDA IPC) of the
# demo model; sequential requests, wall time each: the prefill endpoint with and without shared_floats, then a
# one-token completion through each decode replica. Needs build-gpu (tests/gpu/run.sh). Usage: OUT=DIR bash THIS
# (bench/results/pd_shared_probe_h200.json holds one run's lines, parsed).
set -u
S=./build-gpu/strata
common="--model models/demo --device cuda --max-model-len 4096 --state-memory 4GiB --max-num-seqs 32 --served-model-name demo"
$S serve $common --role prefill --port 8101 > /tmp/p.log 2>&1 &
$S serve $common --role decode --port 8102 --prefill-peer http://127.0.0.1:8101 > /tmp/d.log 2>&1 &
$S serve $common --role decode --port 8104 --prefill-peer http://127.0.0.1:8101 --transfer shared > /tmp/ds.log 2>&1 &
for p in 8101 8102 8104; do for i in $(seq 1 60); do curl -sf localhost:$p/health > /dev/null && break; sleep 0.5; done; done
python3 - <<'PY' >> $OUT/summary.txt 2>&1
import json, time, urllib.request, random
def post(port, path, body, headers=False):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t = time.perf_counter(); r = urllib.request.urlopen(req, timeout=60); data = r.read(); dt = time.perf_counter() - t
    return dt, dict(r.headers), data
rng = random.Random(1)
for n in (2048, 512):
    toks = [rng.randrange(1000, 30000) for _ in range(n)]
    for mode in ("tcp", "shared", "tcp", "shared", "shared"):
        body = {"tokens": toks[:-1], "cache": False}
        if mode == "shared": body.update({"shared_floats": True, "lease_ms": 5000})
        dt, h, data = post(8101, "/strata/v1/prefill", body)
        print(f"direct prefill {n} {mode}: {dt*1000:.1f} ms, body {len(data)} bytes, shared header {h.get('X-Strata-Shared-Floats','-')[:40]}...{h.get('X-Strata-Shared-Floats','')[-12:]}")
    for port in (8102, 8104, 8102, 8104):
        dt, h, data = post(port, "/v1/completions", {"prompt": toks, "max_tokens": 1, "temperature": 0})
        print(f"completion {n} via {port}: {dt*1000:.1f} ms")
PY
for p in 8102 8104; do curl -s localhost:$p/metrics | grep -E "^strata_pd_(transfer|import)" >> $OUT/summary.txt; done
tail -5 /tmp/ds.log /tmp/p.log >> $OUT/summary.txt
kill %1 %2 %3; wait
