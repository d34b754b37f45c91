#pragma once
// Python's json.dumps, spelled byte for byte: the V4 reference encoder (encoding_dsv4.py) writes tool schemas,
// response formats and non-string tool-call arguments into the prompt with json.dumps, so the prompt Strata
// renders must serialize JSON exactly as Python does — nlohmann's dump() differs (no spaces after ':' and ',',
// other float spellings, escapes of non-ASCII when asked).
#include <string>

#include <nlohmann/json.hpp>

namespace strata::text {

// `value` serialized exactly as Python's json.dumps(value, ensure_ascii=False) does with default separators
// (", " and ": "), keys in their order, floats as Python's repr ("1e-05", "1.0", "NaN"), UTF-8 copied as is.
// Takes ordered_json so keys keep the order the client wrote them.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace strata::text
