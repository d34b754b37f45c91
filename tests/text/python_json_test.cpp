// Python's json.dumps(ensure_ascii=False), as the V4 reference encoder spells JSON in the prompt.
#include "text/python_json.h"

#include <gtest/gtest.h>

namespace strata::text {
namespace {

using ojson = nlohmann::ordered_json;

TEST(PythonJson, DumpsAsPythonDoes) {
  const auto dumps = [](const char* text) { return python_json_dumps(ojson::parse(text)); };
  EXPECT_EQ(dumps(R"({"b": 1, "a": [true, false, null], "c": {}, "d": []})"),
            R"({"b": 1, "a": [true, false, null], "c": {}, "d": []})");
  EXPECT_EQ(dumps(R"(["é中😀", "q\"b\\s/", "\n\r\t\b\f\u0001\u001f\u007f"])"),
            "[\"é中😀\", \"q\\\"b\\\\s/\", \"\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\"]");
  // float.__repr__
  EXPECT_EQ(dumps("[1.0, -0.0, 0.1, 1e-7, 1e16, 1e15, 0.0001, 0.00001, 2.5E+3, 123456789.125, 1.5e300, -2e-300]"),
            "[1.0, -0.0, 0.1, 1e-07, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 2500.0, 123456789.125, 1.5e+300, "
            "-2e-300]");
  EXPECT_EQ(dumps("[3.141592653589793, 1.7976931348623157e308, 5e-324, 100.0, 12345678901234567890, -9223372036854775808]"),
            "[3.141592653589793, 1.7976931348623157e+308, 5e-324, 100.0, 12345678901234567890, -9223372036854775808]");
}

}  // namespace
}  // namespace strata::text
