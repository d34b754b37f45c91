#include "cache/duration.h"

#include <cctype>

#include "core/error.h"

namespace strata::cache {

int64_t parse_duration_seconds(std::string_view text) {
  auto bad = [&] {
    fail("expected a duration such as 90s, 45m, 24h or 7d, found '", std::string(text), "'");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 12 || text.size() > digits + 1) bad();
  const int64_t n = std::stoll(std::string(text.substr(0, digits)));
  int64_t unit = 1;
  if (text.size() == digits + 1) {
    switch (text[digits]) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default: bad();
    }
  }
  if (n < 1) fail("a duration must be at least 1s, found '", std::string(text), "'");
  return n * unit;
}

std::string format_duration(int64_t seconds) {
  for (const auto& [unit, name] : {std::pair{int64_t{86400}, 'd'}, {3600, 'h'}, {60, 'm'}})
    if (seconds % unit == 0) return std::to_string(seconds / unit) + name;
  return std::to_string(seconds) + "s";
}

}  // namespace strata::cache
