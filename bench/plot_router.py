"""Draws bench/run_router_cpu.sh's results: TTFT median and p99 per routing policy and dataset, with the prefix-cache
hit rate the replicas reported, into FILE.png beside FILE.json (gnuplot; without it, says so and exits 0).
Usage: python3 bench/plot_router.py bench/results/router_cpu_demo.json"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

path = sys.argv[1]
result = json.load(open(path))
if not shutil.which("gnuplot"):
    print("plot_router: no gnuplot here, no plot", file=sys.stderr)
    sys.exit(0)
png = path[:-5] + ".png"
policies = ("round_robin", "least_load", "cache_aware")
datasets = list(result["policies"][policies[0]])
with tempfile.TemporaryDirectory() as work:
    rows = []
    for name in datasets:
        for policy in policies:
            r = result["policies"][policy][name]["results"]
            hit = 100 * (r.get("prefix_cache_hit_rate") or 0)
            rows.append(f'"{name}\\n{policy}" {r["ttft_ms"]["median"]} {r["ttft_ms"]["p99"]} {hit}')
    data = os.path.join(work, "plot.dat")
    open(data, "w").write("\n".join(rows) + "\n")
    script = f"""set terminal pngcairo size 1100,520 font ",10" noenhanced
set output "{png}"
set title "strata route, 2 CPU replicas of the demo model ({result['date'][:10]}, {result['commit'][:12]})"
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set ylabel "TTFT (ms)"
set yrange [0:*]
set y2label "prefix-cache hit rate (%)"
set y2range [0:100]
set ytics nomirror
set y2tics
set xtics font ",8"
set key top left
plot "{data}" using 2:xtic(1) title "TTFT median", "" using 3 title "TTFT p99", "" using 4 axes x1y2 title "cache hit rate (right axis)"
"""
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
print("wrote " + png, file=sys.stderr)
