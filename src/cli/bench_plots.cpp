#include "cli/bench_plots.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace strata::cli {

namespace {

using nlohmann::json;

// A gnuplot string in double quotes ("\n" breaks the line), shown as written (the titles go out noenhanced).
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A file name in single quotes, where only '' needs care.
std::string file_name(const std::string& path) {
  std::string out = "'";
  for (const char c : path) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A path for sh, in single quotes ('\'' for a quote inside).
std::string shell_quoted(const std::string& path) {
  std::string out = "'";
  for (const char c : path) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump(); }

// What ran where and when, the first line under every plot's title.
std::string run_title(const json& run) {
  const json& c = run.value("config", json::object());
  const json& d = run.value("device", json::object());
  std::string model = text_of(c.value("model", json(c.value("preset", "?")))) + ", " +
                      text_of(c.value("num_hidden_layers", json("?"))) + " layers";
  if (c.contains("precision")) model += ", " + text_of(c["precision"]);
  const std::string device = d.contains("gpu") ? text_of(d["gpu"]) : text_of(d.value("cpu", json("?")));
  return model + " on " + device + " (" + text_of(run.value("date", json(""))).substr(0, 10) + ", " +
         text_of(run.value("commit", json(""))).substr(0, 8) + ")";
}

// The rows of one context's batched decode that ran (a batch that did not fit has an "error").
std::vector<const json*> decode_rows(const json& context) {
  std::vector<const json*> rows;
  const auto decode = context.find("decode");
  if (decode == context.end() || !decode->is_array()) return rows;
  for (const json& r : *decode)
    if (!r.contains("error")) rows.push_back(&r);
  return rows;
}

std::string png_terminal(const std::string& png, int width) {
  return "set terminal pngcairo size " + std::to_string(width) + ",600 font \",10\"\nset output " + file_name(png) +
         "\nset grid\nset key top left\n";
}

void pareto(const json& run, const std::string& png, std::ostringstream& s) {
  std::string plots;
  int n = 0;
  for (const json& context : run["batched_decode"]) {
    const std::vector<const json*> rows = decode_rows(context);
    if (rows.empty()) continue;
    const std::string block = "$pareto" + std::to_string(n);
    s << block << " << EOD\n";
    for (const json* r : rows)
      s << (*r)["tokens_per_s_per_user"].get<double>() << " " << (*r)["tokens_per_s"].get<double>() << " "
        << (*r)["batch"].get<int64_t>() << "\n";
    s << "EOD\n";
    plots += std::string(n ? ", " : "") + block + " using 1:2 with linespoints pointtype 7 title " +
             quoted("context " + text_of(context["context"]));
    if (n == 0)  // batch sizes on the first curve only: the others share them
      plots += ", " + block + " using 1:2:(sprintf(\"B=%d\", $3)) with labels offset 1.5,0.8 font \",8\" notitle";
    ++n;
  }
  s << png_terminal(png, 900) << "set logscale xy\n"
    << "set title " << quoted("Batched decode\n" + run_title(run)) << " noenhanced\n"
    << "set xlabel \"tokens/s per user (1 / step time)\"\nset ylabel \"tokens/s per device (batch / step time)\"\n"
    << "plot " << plots << "\nunset output\nreset\n";
}

void floor_ratios(const json& run, bool decode, bool prefill, const std::string& png, std::ostringstream& s) {
  s << png_terminal(png, decode && prefill ? 1300 : 700);
  const json& d = run["device"];
  std::ostringstream ceilings;
  ceilings << std::fixed;
  ceilings.precision(0);
  ceilings << "floor: " << d.value("copy_bandwidth_gbs", 0.0) << " GB/s copy, " << d.value("bf16_gemm_tflops", 0.0)
           << " TFLOP/s bf16";
  s << "set multiplot layout 1," << (decode && prefill ? 2 : 1) << " title "
    << quoted(run_title(run) + "\n" + ceilings.str()) << " noenhanced\n"
    << "set logscale xy\nset logscale x 2\nset ylabel \"measured / floor (1 = at the hardware floor)\"\n";
  if (decode) {
    std::string plots;
    int n = 0;
    for (const json& context : run["batched_decode"]) {
      const std::vector<const json*> rows = decode_rows(context);
      if (rows.empty() || !rows[0]->contains("measured_over_floor")) continue;
      const std::string block = "$floor" + std::to_string(n);
      s << block << " << EOD\n";
      for (const json* r : rows) s << (*r)["batch"].get<int64_t>() << " " << (*r)["measured_over_floor"].get<double>() << "\n";
      s << "EOD\n";
      plots += std::string(n++ ? ", " : "") + block + " using 1:2 with linespoints pointtype 7 title " +
               quoted("context " + text_of(context["context"]));
    }
    s << "set title \"decode step / floor\"\nset xlabel \"batch size\"\nplot " << plots << ", 1 with lines lc black notitle\n";
  }
  if (prefill) {
    s << "$prefill << EOD\n";
    for (const json& r : run["prefill_lengths"])
      if (r.contains("measured_over_floor"))
        s << r["tokens"].get<int64_t>() << " " << r["measured_over_floor"].get<double>() << " "
          << text_of(r.value("floor_bound", json("?"))) << "\n";
    s << "EOD\nset title \"prefill / floor\"\nset xlabel \"prompt tokens\"\n"
      << "plot $prefill using 1:2 with linespoints pointtype 7 title \"prefill\", "
         "$prefill using 1:2:3 with labels offset 1.5,0.8 font \",8\" notitle, 1 with lines lc black notitle\n";
  }
  s << "unset multiplot\nunset output\nreset\n";
}

// --cache-ttft: time to first token against prompt length, one curve per way the prompt was served.
void cache_ttft(const json& run, const std::string& png, std::ostringstream& s) {
  s << "$ttft << EOD\n";
  for (const json& r : run["cache_ttft"]) {
    const json& t = r["ttft_s"];
    s << r["prompt_tokens"].get<int64_t>();
    for (const char* k : {"no_cache", "cold_with_cache", "host_hit", "disk_hit", "replay_mode_host_hit"})
      s << " " << t.value(k, 0.0) * 1e3;
    s << "\n";
  }
  s << "EOD\n" << png_terminal(png, 800) << "set logscale xy\nset logscale x 2\n"
    << "set title " << quoted("Time to first token, cold and from the prefix cache\n" + run_title(run)) << " noenhanced\n"
    << "set xlabel \"prompt tokens\"\nset ylabel \"time to first token (ms)\"\n"
    << "plot $ttft using 1:2 with linespoints pointtype 7 title \"cold, no cache\", "
       "$ttft using 1:3 with linespoints pointtype 7 title \"cold, cache saving\", "
       "$ttft using 1:4 with linespoints pointtype 7 title \"hit: host memory\", "
       "$ttft using 1:5 with linespoints pointtype 7 title \"hit: cache directory (page cache dropped)\", "
       "$ttft using 1:($6 > 0 ? $6 : 1/0) with linespoints pointtype 7 title \"hit: host memory, replay mode\"\n"
    << "unset output\nreset\n";
}

}  // namespace

BenchPlotScript bench_plot_script(const json& run, const std::string& json_path) {
  const std::filesystem::path p(json_path);
  const std::string stem = (p.parent_path() / p.stem()).string();
  BenchPlotScript out;
  std::ostringstream s;
  s.precision(9);
  bool any_decode = false, decode_floor = false, prefill_floor = false;
  for (const json& context : run.value("batched_decode", json::array())) {
    const std::vector<const json*> rows = decode_rows(context);
    any_decode = any_decode || !rows.empty();
    decode_floor = decode_floor || (!rows.empty() && rows[0]->contains("measured_over_floor"));
  }
  for (const json& r : run.value("prefill_lengths", json::array()))
    prefill_floor = prefill_floor || r.contains("measured_over_floor");
  if (any_decode) {
    out.pngs.push_back(stem + "_pareto.png");
    pareto(run, out.pngs.back(), s);
  }
  if (decode_floor || prefill_floor) {
    out.pngs.push_back(stem + "_floor.png");
    floor_ratios(run, decode_floor, prefill_floor, out.pngs.back(), s);
  }
  if (run.contains("cache_ttft") && !run["cache_ttft"].empty()) {
    out.pngs.push_back(stem + "_cache_ttft.png");
    cache_ttft(run, out.pngs.back(), s);
  }
  if (!out.pngs.empty()) out.script = s.str();
  return out;
}

BenchPlotScript latency_cdf_script(const std::map<std::string, std::vector<double>>& series_ms, const std::string& title,
                                   const std::string& json_path) {
  const std::filesystem::path p(json_path);
  BenchPlotScript out;
  std::ostringstream s;
  s.precision(9);
  std::string plots;
  int n = 0;
  for (auto [name, values] : series_ms) {
    if (values.empty()) continue;
    std::sort(values.begin(), values.end());
    const std::string block = "$cdf" + std::to_string(n);
    s << block << " << EOD\n";
    for (size_t i = 0; i < values.size(); ++i)
      s << values[i] << " " << static_cast<double>(i + 1) / static_cast<double>(values.size()) << "\n";
    s << "EOD\n";
    plots += std::string(n++ ? ", " : "") + block + " using 1:2 with steps linewidth 2 title " + quoted(name);
  }
  if (n == 0) return out;
  out.pngs.push_back((p.parent_path() / p.stem()).string() + "_latency.png");
  s << png_terminal(out.pngs.back(), 900) << "set key bottom right\nset logscale x\nset yrange [0:1]\n"
    << "set title " << quoted("Serving latency, cumulative\n" + title) << " noenhanced\n"
    << "set xlabel \"milliseconds\"\nset ylabel \"share at or below (of requests; of token gaps for ITL)\"\nplot " << plots
    << "\nunset output\nreset\n";
  out.script = s.str();
  return out;
}

std::vector<std::string> run_gnuplot(const BenchPlotScript& plot, const std::string& json_path) {
  if (plot.pngs.empty()) return {};
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    fail("gnuplot is not installed (Debian: apt-get install gnuplot-nox; scripts/setup.sh installs it)");
  const std::string script = json_path + ".gnuplot", log = json_path + ".gnuplot.log";
  {
    std::ofstream f(script);
    f << plot.script;
    if (!f) fail("plots: cannot write '", script, "'");
  }
  const std::string command = "gnuplot " + shell_quoted(script) + " >" + shell_quoted(log) + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream said(log);
  const std::string output((std::istreambuf_iterator<char>(said)), std::istreambuf_iterator<char>());
  std::error_code ignored;
  std::filesystem::remove(script, ignored);
  std::filesystem::remove(log, ignored);
  if (status != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("plots: gnuplot failed on the script for '", json_path, "': ", output);
  return plot.pngs;
}

}  // namespace strata::cli
