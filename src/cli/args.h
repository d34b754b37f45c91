#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace strata::cli {

// `--name value` / `--flag` options of one subcommand. Unknown options, missing values and malformed numbers are
// errors that name the option.
class Args {
 public:
  // `valued` take a value, `flags` don't.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued, const std::set<std::string>& flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback = "") const;
  std::string required(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  double number(const std::string& name, double fallback) const;

 private:
  std::map<std::string, std::string> values_;
};

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& option);

// "2GiB", "512M", "1000000": binary suffixes K/Ki, M/Mi, G/Gi, T/Ti (powers of 1024), an optional trailing B.
int64_t parse_byte_count(const std::string& text, const std::string& option);

// The integer option `name`, which must be ≥ 1.
int64_t positive_integer(const Args& args, const std::string& name, int64_t fallback);

}  // namespace strata::cli
