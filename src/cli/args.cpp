#include "cli/args.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace strata::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued, const std::set<std::string>& flags) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) fail("unexpected argument '", a, "' (options start with --; see --help)");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name)) {
      if (inline_value) fail("option --", name, " takes no value");
      values_[name] = "1";
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) fail("option --", name, " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      fail("unknown option --", name, " (see --help)");
    }
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::required(const std::string& name) const {
  if (!has(name)) fail("missing required option --", name, " (see --help)");
  return str(name);
}

int64_t Args::integer(const std::string& name, int64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string& s = values_.at(name);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno) fail("option --", name, ": expected an integer, found '", s, "'");
  return v;
}

double Args::number(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string& s = values_.at(name);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno) fail("option --", name, ": expected a number, found '", s, "'");
  return v;
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& option) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno || v < 0 || v > INT32_MAX)
      fail("option --", option, ": expected comma-separated token ids like 5,6,7, found '", item, "'");
    ids.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

int64_t parse_byte_count(const std::string& text, const std::string& option) {
  size_t end = 0;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  if (end == 0) fail("option --", option, ": expected a byte count such as 2GiB or 536870912, found '", text, "'");
  std::string suffix = text.substr(end);
  for (char& ch : suffix) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (!suffix.empty() && suffix.back() == 'B') suffix.pop_back();
  if (!suffix.empty() && suffix.back() == 'I') suffix.pop_back();
  int shift = 0;
  if (suffix == "K") shift = 10;
  else if (suffix == "M") shift = 20;
  else if (suffix == "G") shift = 30;
  else if (suffix == "T") shift = 40;
  else if (!suffix.empty()) fail("option --", option, ": unknown size suffix in '", text, "' (use K, M, G or T)");
  const long double value = std::stold(text.substr(0, end)) * static_cast<long double>(1ull << shift);
  if (value > 9.0e18L) fail("option --", option, ": '", text, "' is too large");
  return static_cast<int64_t>(value);
}

int64_t positive_integer(const Args& args, const std::string& name, int64_t fallback) {
  const int64_t v = args.integer(name, fallback);
  if (v < 1) fail("option --", name, ": expected a positive integer, found ", v);
  return v;
}

}  // namespace strata::cli
