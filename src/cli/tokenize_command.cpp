// `strata tokenize`: text in, token ids out (JSON), with the model directory's tokenizer; --bench measures encode
// throughput instead.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "core/error.h"
#include "text/tokenizer.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata tokenize — encode text with a model directory's tokenizer (tokenizer.json + tokenizer_config.json).

options:
  --model DIR        directory with tokenizer.json and tokenizer_config.json
  --text S           the text to encode
  --text-file F      encode the whole content of file F (UTF-8)
  --jsonl F          encode every line of F, each a JSON string; prints one JSON array per line
  --parse-special    spellings of added tokens ("<｜User｜>", "<think>", ...) become those tokens, as HF tokenizers
                     does by default; without it they are plain text and encode to the tokens of their characters
  --add-bos          prepend the BOS token when tokenizer_config.json's add_bos_token is true
  --bench            instead of ids, print a JSON line with encode throughput (one thread): the inputs are
                     encoded once to warm up, then --repeats times; MB/s = input bytes / median seconds
  --repeats N        timed passes for --bench (default 5)

Prints the ids as a JSON array, e.g. [19923, 2058].

examples (from the repository root; scripts/setup.sh fetches .deps/tokenizer-deepseek_v3):
  strata tokenize --model .deps/tokenizer-deepseek_v3 --text 'Hello world'
  printf '%s\n' '"<｜begin▁of▁sentence｜>Hello"' '"2 + 2 = 4"' > /tmp/prompts.jsonl
  strata tokenize --model models/demo --parse-special --jsonl /tmp/prompts.jsonl
  strata tokenize --model models/demo --jsonl /tmp/prompts.jsonl --bench --repeats 5
)";

std::string read_file(const std::string& path, const std::string& option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("option --", option, ": cannot open '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Every line of a JSONL file, each a JSON string (a final empty line, after the last newline, is allowed).
std::vector<std::string> read_jsonl_strings(const std::string& path) {
  const std::string content = read_file(path, "jsonl");
  std::vector<std::string> texts;
  size_t start = 0, line = 1;
  while (start < content.size()) {
    size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    std::string_view text(content.data() + start, end - start);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      fail("option --jsonl: ", path, " line ", line, ": not valid JSON (", e.what(), ")");
    }
    if (!value.is_string()) fail("option --jsonl: ", path, " line ", line, ": expected a JSON string, found ", value.type_name());
    texts.push_back(value.get<std::string>());
    start = end + 1;
    ++line;
  }
  return texts;
}

void append_ids(const std::vector<int32_t>& ids, std::string& out) {
  out += '[';
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    const int n = std::snprintf(buf, sizeof buf, i ? ", %d" : "%d", ids[i]);
    out.append(buf, static_cast<size_t>(n));
  }
  out += "]\n";
}

}  // namespace

int tokenize_command(const std::vector<std::string>& argv) {
  const Args args(argv, {"model", "text", "text-file", "jsonl", "repeats"}, {"help", "parse-special", "add-bos", "bench"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const int sources = static_cast<int>(args.has("text")) + args.has("text-file") + args.has("jsonl");
  if (sources != 1) fail("give exactly one of --text, --text-file or --jsonl (found ", sources, "; see --help)");
  const std::string dir = checked_model_dir(args.required("model"));
  const bool parse_special = args.has("parse-special"), add_bos = args.has("add-bos");
  const int64_t repeats = args.integer("repeats", 5);
  if (repeats < 1) fail("option --repeats: expected a positive integer, found ", repeats);

  std::vector<std::string> texts;
  if (args.has("text")) texts.push_back(args.str("text"));
  else if (args.has("text-file")) texts.push_back(read_file(args.str("text-file"), "text-file"));
  else texts = read_jsonl_strings(args.str("jsonl"));

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const text::Tokenizer tokenizer = text::Tokenizer::load(dir);
  const double load_s = std::chrono::duration<double>(clock::now() - t0).count();

  if (!args.has("bench")) {
    std::string out;
    for (size_t i = 0; i < texts.size(); ++i) {
      try {
        append_ids(tokenizer.encode(texts[i], parse_special, add_bos), out);
      } catch (const Error& e) {
        if (args.has("jsonl")) fail("option --jsonl: line ", i + 1, ": ", e.what());
        throw;
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }

  size_t bytes = 0, tokens = 0;
  for (const std::string& t : texts) {
    bytes += t.size();
    tokens += tokenizer.encode(t, parse_special, add_bos).size();  // warm-up (fills the BPE cache, as HF's)
  }
  std::vector<double> seconds;
  for (int64_t r = 0; r < repeats; ++r) {
    const auto start = clock::now();
    size_t n = 0;
    for (const std::string& t : texts) n += tokenizer.encode(t, parse_special, add_bos).size();
    seconds.push_back(std::chrono::duration<double>(clock::now() - start).count());
    if (n != tokens) fail("internal: encode gave ", n, " tokens on pass ", r + 1, " but ", tokens, " on warm-up");
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const nlohmann::ordered_json report = {
      {"tool", "strata"},          {"texts", texts.size()},        {"input_bytes", bytes},
      {"tokens", tokens},          {"parse_special", parse_special}, {"repeats", repeats},
      {"threads", 1},              {"load_seconds", load_s},       {"seconds_median", median},
      {"seconds_all", seconds},    {"mb_per_s", static_cast<double>(bytes) / 1e6 / median},
      {"tokens_per_s", static_cast<double>(tokens) / median}};
  std::printf("%s\n", report.dump().c_str());
  return 0;
}

}  // namespace strata::cli
