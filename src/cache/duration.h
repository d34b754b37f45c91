#pragma once
// Times to live as people write them: "90s", "45m", "24h", "7d" (a whole number and a unit; a bare number is
// seconds).
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::cache {

// Seconds in `text`; throws strata::Error saying what is expected (e.g. "expected a duration such as 90s, 45m, 24h
// or 7d, found 'soon'").
int64_t parse_duration_seconds(std::string_view text);
// The shortest exact spelling: 604800 → "7d", 5400 → "90m".
std::string format_duration(int64_t seconds);

}  // namespace strata::cache
