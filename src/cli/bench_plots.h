#pragma once
// The pictures of a `strata bench` run, drawn with gnuplot (Debian's gnuplot-nox, which scripts/setup.sh installs),
// so nobody has to find matplotlib: PNGs beside the JSON that --out names.
//   NAME_pareto.png  batched decode (--batch): tokens/s per device against tokens/s per user, a curve per context
//                    length, a point per batch size
//   NAME_floor.png   measured time over the hardware floor (fields present on --device cuda or with --ceilings):
//                    per batch size for each context, and per prompt length for --prefill
//   NAME_cache_ttft.png  --cache-ttft: time to first token against prompt length, cold and from the prefix cache
// A run with neither (no --batch, no floors) has nothing to draw. `strata bench serve --out FILE.json` draws
//   NAME_latency.png the latency CDFs of the completed requests: TTFT, TPOT, E2E and the inter-token gaps (ms)
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::cli {

// The gnuplot script that draws `run` into PNGs named after `json_path` (FILE.json → FILE_pareto.png, ...), with
// the data inline; and the PNGs it writes. An empty script when there is nothing to draw.
struct BenchPlotScript {
  std::string script;
  std::vector<std::string> pngs;
};
BenchPlotScript bench_plot_script(const nlohmann::json& run, const std::string& json_path);

// The latency CDFs: one curve per named series of milliseconds (empty series are left out), FILE_latency.png.
BenchPlotScript latency_cdf_script(const std::map<std::string, std::vector<double>>& series_ms, const std::string& title,
                                   const std::string& json_path);

// Runs a script through `gnuplot` on PATH. Returns the PNGs written; without gnuplot, or when it fails, an error
// that says what to install or what gnuplot said.
std::vector<std::string> run_gnuplot(const BenchPlotScript& plot, const std::string& json_path);
inline std::vector<std::string> draw_bench_plots(const nlohmann::json& run, const std::string& json_path) {
  return run_gnuplot(bench_plot_script(run, json_path), json_path);
}

}  // namespace strata::cli
