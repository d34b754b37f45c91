"""Draws bench/run_speculative_flash_gpu.sh's results as a Pareto plot: tokens/s per GPU against tokens/s per user,
one curve per draft length N over the batch sizes, the true accounting solid and DeepSeek's full-acceptance
accounting (1 + N tokens per verify step, whatever was accepted) dashed beside it, so the gap between the two is
what the published charts leave out. Writes FILE_pareto.png beside FILE.json (gnuplot; without it, says so and
exits 0). Usage: python3 bench/plot_speculative.py bench/results/speculative_h100_flash.json"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

FULL = "full_acceptance_tokens_per_s_per_user (DeepSeek's accounting, not measured)"

path = sys.argv[1]
result = json.load(open(path))
if not shutil.which("gnuplot"):
    print("plot_speculative: no gnuplot here, no plot", file=sys.stderr)
    sys.exit(0)
png = path[:-5] + "_pareto.png"
ns = sorted({r["speculative_tokens"] for r in result["runs"]})
with tempfile.TemporaryDirectory() as work:
    plots = []
    for n in ns:
        runs = sorted((r for r in result["runs"] if r["speculative_tokens"] == n), key=lambda r: r["batch"])
        true_file = os.path.join(work, f"true{n}.dat")
        with open(true_file, "w") as f:
            for r in runs:
                f.write(f'{r["tokens_per_s_per_user"]} {r["tokens_per_s_per_gpu"]} "{r["batch"]}"\n')
        label = "off" if n == 0 else f"N = {n}"
        plots.append(f'"{true_file}" using 1:2 with linespoints lw 2 lc {n + 1} title "{label}, true"')
        plots.append(f'"{true_file}" using 1:2:3 with labels offset 0.8,0.6 font ",8" notitle')
        if n:
            full_file = os.path.join(work, f"full{n}.dat")
            with open(full_file, "w") as f:
                for r in runs:
                    per_user = r[FULL]
                    f.write(f"{per_user} {per_user * r['batch']}\n")
            plots.append(f'"{full_file}" using 1:2 with linespoints dt 2 lc {n + 1} '
                         f'title "{label}, full-acceptance accounting (not measured)"')
    c = result["config"]
    script = f"""set terminal pngcairo size 1000,640 font ",10" noenhanced
set output "{png}"
set title "Speculative decoding, {c['model']}\\nacceptance forced to {c['acceptance'].split()[2]} per draft; {result['device'].split(';')[0]}, {result['date'][:10]}, {result['commit'][:12]}; labels: batch"
set xlabel "tokens/s per user"
set ylabel "tokens/s per GPU"
set logscale xy
set grid
set key outside bottom center horizontal maxrows 4 font ",9"
plot {", ".join(plots)}
"""
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
print("wrote " + png, file=sys.stderr)
