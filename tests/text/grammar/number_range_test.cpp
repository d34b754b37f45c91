// Numeric bounds (number_range.h, JSON Schema minimum / maximum / exclusive...): every integer in a window is
// accepted exactly when it is in range, for fixed, random, one-sided, negative, fractional and huge bounds; every
// decimal of a grid likewise for number bounds; bounds nothing satisfies are errors naming them.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "grammar_test_util.h"
#include "text/grammar/ebnf_parser.h"
#include "text/grammar/number_range.h"
#include "text/grammar/json_schema_to_grammar.h"

namespace strata::text::grammar {
namespace {

using testing::accepts;
using testing::byte_vocab;

std::shared_ptr<const CompiledGrammar> schema(std::string_view json) {
  return CompiledGrammar::from_ebnf(json_schema_to_ebnf(json), byte_vocab());
}

std::shared_ptr<const CompiledGrammar> range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  auto big = [](std::optional<int64_t> v) {
    return v ? std::optional<BigInteger>(BigInteger::parse(std::to_string(*v))) : std::nullopt;
  };
  const std::optional<std::string> expr = integer_range_ebnf(big(lo), big(hi));
  if (!expr) return nullptr;
  return CompiledGrammar::from_ebnf("root ::= " + *expr + "\n", byte_vocab());
}

// Every integer in [from, to] is accepted iff it lies in [lo, hi].
void expect_exact(const std::shared_ptr<const CompiledGrammar>& g, std::optional<int64_t> lo, std::optional<int64_t> hi,
                  int64_t from, int64_t to, int64_t step = 1) {
  // Open sides as the extreme values (GCC's -O3 maybe-uninitialized misfires on optionals read in the loop).
  const int64_t low = lo.value_or(std::numeric_limits<int64_t>::min());
  const int64_t high = hi.value_or(std::numeric_limits<int64_t>::max());
  for (int64_t v = from; v <= to; v += step) {
    const bool in = v >= low && v <= high;
    ASSERT_EQ(accepts(g, std::to_string(v)), in)
        << v << " in [" << (lo ? std::to_string(*lo) : "-inf") << ", " << (hi ? std::to_string(*hi) : "inf") << "]";
  }
}

TEST(GrammarNumberRange, SchemaRangeAcceptsExactlyItsIntegers) {
  const auto g = schema(R"({"type": "integer", "minimum": -37, "maximum": 1205})");
  expect_exact(g, -37, 1205, -2000, 2000);
  for (const char* spelling : {"-0", "007", "+5", "1.0", "1e2", "", "-", "12 "}) {
    EXPECT_FALSE(accepts(g, spelling)) << spelling;  // canonical spellings only, like json-integer
  }
}

TEST(GrammarNumberRange, RandomRangesAndOneSidedBoundsAreExact) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> pick(-1500, 1500);
  for (int i = 0; i < 30; ++i) {
    int64_t lo = pick(rng), hi = pick(rng);
    if (lo > hi) std::swap(lo, hi);
    const int64_t step = 1 + i % 3;
    if (i % 5 == 3) {
      expect_exact(range(std::nullopt, hi), std::nullopt, hi, -2100, 2100, step);
    } else if (i % 5 == 4) {
      expect_exact(range(lo, std::nullopt), lo, std::nullopt, -2100, 2100, step);
    } else {
      expect_exact(range(lo, hi), lo, hi, -2100, 2100, step);
    }
  }
  // Bounds on digit-count boundaries and around zero.
  for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 0}, {0, 9}, {1, 10}, {9, 10}, {10, 99}, {99, 100}, {100, 999}, {-1, 0}, {-10, -1}, {-100, 100},
           {-999, -100}, {-9, 9}, {5, 5}, {-5, -5}, {0, 1000}, {1, 1999}}) {
    expect_exact(range(lo, hi), lo, hi, -2100, 2100);
  }
  for (int64_t bound : {-1000, -101, -100, -99, -10, -1, 0, 1, 9, 10, 99, 100, 101, 1000}) {
    expect_exact(range(bound, std::nullopt), bound, std::nullopt, -2100, 2100);
    expect_exact(range(std::nullopt, bound), std::nullopt, bound, -2100, 2100);
  }
  EXPECT_EQ(range(3, 2), nullptr);
}

TEST(GrammarNumberRange, ExclusiveFractionalAndDraft4Bounds) {
  expect_exact(schema(R"({"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 40})"), -2, 39, -100, 100);
  expect_exact(schema(R"({"type": "integer", "minimum": 2.5, "maximum": 9.99})"), 3, 9, -100, 100);
  expect_exact(schema(R"({"type": "integer", "minimum": -2.5, "exclusiveMaximum": 7.0})"), -2, 6, -100, 100);
  expect_exact(schema(R"({"type": "integer", "exclusiveMinimum": 2.0, "maximum": 4.0})"), 3, 4, -100, 100);
  expect_exact(schema(R"({"type": "integer", "minimum": 3, "exclusiveMinimum": true, "maximum": 8,
                          "exclusiveMaximum": false})"), 4, 8, -100, 100);
  // Both forms given: the tighter bound holds.
  expect_exact(schema(R"({"type": "integer", "minimum": 5, "exclusiveMinimum": 9, "maximum": 50,
                          "exclusiveMaximum": 60})"), 10, 50, -100, 100);
  // With a type list the integer member gets the bounds and the string member ignores them, as the spec says.
  const auto mixed = schema(R"({"type": ["integer", "string"], "minimum": 10})");
  EXPECT_TRUE(accepts(mixed, "10"));
  EXPECT_FALSE(accepts(mixed, "9"));
  EXPECT_TRUE(accepts(mixed, R"("9")"));
}

TEST(GrammarNumberRange, HugeBounds) {
  const auto g = schema(R"({"type": "integer", "minimum": 18446744073709551615})");
  EXPECT_TRUE(accepts(g, "18446744073709551615"));
  EXPECT_TRUE(accepts(g, "18446744073709551616"));
  EXPECT_TRUE(accepts(g, "123456789012345678901234567890"));
  EXPECT_FALSE(accepts(g, "18446744073709551614"));
  EXPECT_FALSE(accepts(g, "9999999999999999999"));
  EXPECT_FALSE(accepts(g, "-18446744073709551616"));
  // 1e30 is 10^30 as written (the double nearest it is 1000000000000000019884624838656, and a double cannot step
  // by one there: exclusiveMaximum 1e30 once let 10^30 + 19884624838656 through when the step was taken in double).
  const auto wide = schema(R"({"type": "integer", "minimum": -1e30, "exclusiveMaximum": 1e30})");
  const std::string ten30 = "1" + std::string(30, '0');
  EXPECT_TRUE(accepts(wide, std::string(30, '9')));
  EXPECT_FALSE(accepts(wide, ten30));
  EXPECT_FALSE(accepts(wide, "1000000000000000019884624838656"));
  EXPECT_TRUE(accepts(wide, "-" + ten30));
  EXPECT_FALSE(accepts(wide, "-1" + std::string(29, '0') + "1"));
  EXPECT_TRUE(accepts(wide, "0"));
  const auto low = schema(R"({"type": "integer", "maximum": -9223372036854775808})");
  EXPECT_TRUE(accepts(low, "-9223372036854775808"));
  EXPECT_TRUE(accepts(low, "-99999999999999999999"));
  EXPECT_FALSE(accepts(low, "-9223372036854775807"));
}

TEST(GrammarNumberRange, BigIntegerSteps) {
  EXPECT_EQ(BigInteger::parse("-1").plus_one().to_string(), "0");
  EXPECT_EQ(BigInteger::parse("0").minus_one().to_string(), "-1");
  EXPECT_EQ(BigInteger::parse("-0099").minus_one().to_string(), "-100");
  EXPECT_EQ(BigInteger::parse("1000").minus_one().to_string(), "999");
  EXPECT_EQ(BigInteger::parse("-1000").plus_one().to_string(), "-999");
  EXPECT_EQ(BigInteger::parse("-0").to_string(), "0");
  EXPECT_LT(compare(BigInteger::parse("-12"), BigInteger::parse("-3")), 0);
  EXPECT_GT(compare(BigInteger::parse("100"), BigInteger::parse("99")), 0);
  EXPECT_THROW(BigInteger::parse("1.5"), std::invalid_argument);
}

void expect_error(std::string_view json, const std::string& message) {
  try {
    json_schema_to_ebnf(json);
    ADD_FAILURE() << "no error for " << json;
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(GrammarNumberRange, BoundsThatCannotHoldAreErrors) {
  expect_error(R"({"type": "integer", "minimum": 10, "maximum": 9})",
               "json schema: /: no integer is within the bounds (at least 10, at most 9)");
  expect_error(R"({"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 2})", "at least 2, at most 1");
  expect_error(R"({"type": "integer", "minimum": "5"})", "/minimum: must be a number, found string");
  expect_error(R"({"type": "integer", "exclusiveMinimum": true})", "/exclusiveMinimum: true (draft 4) needs minimum");
  expect_error(R"({"properties": {"x": {"type": "number", "minimum": 1.5, "exclusiveMaximum": 1.5}}})",
               "json schema: /properties/x: no number is within the bounds (at least 1.5, below 1.5)");
  expect_error(R"({"type": "number", "exclusiveMinimum": 2, "maximum": -0.25})", "(above 2, at most -0.25)");
  expect_error(R"({"maximum": []})", "/maximum: must be a number, found array");
}

// Numbers on a grid (integer parts 0..12, fractions from the list below, both signs), scaled by 10^4 for an exact
// oracle independent of the code under test.
std::vector<std::pair<std::string, int64_t>> decimal_grid() {
  std::vector<std::pair<std::string, int64_t>> out;
  const std::vector<std::string> fractions = {"", "0", "00", "0001", "05", "1", "25", "2500", "2501", "249", "5",
                                              "4999", "5001", "75", "9", "99", "9999"};
  for (int i = 0; i <= 12; ++i) {
    for (const std::string& f : fractions) {
      std::string padded = f + std::string(4 - f.size(), '0');
      const int64_t scaled = i * 10000 + std::stoll(padded);
      const std::string text = std::to_string(i) + (f.empty() ? "" : "." + f);
      out.emplace_back(text, scaled);
      if (scaled != 0) out.emplace_back("-" + text, -scaled);
    }
  }
  return out;
}

struct Bound {
  int64_t scaled;
  bool exclusive;
};

void expect_decimal_exact(const std::string& schema_text, std::optional<Bound> lo, std::optional<Bound> hi) {
  const auto g = schema(schema_text);
  for (const auto& [text, v] : decimal_grid()) {
    const bool in = (!lo || (lo->exclusive ? v > lo->scaled : v >= lo->scaled)) &&
                    (!hi || (hi->exclusive ? v < hi->scaled : v <= hi->scaled));
    ASSERT_EQ(accepts(g, text), in) << text << " under " << schema_text;
  }
}

TEST(GrammarNumberRange, DecimalBoundsAreExactOnAGrid) {
  expect_decimal_exact(R"({"type": "number", "minimum": 0, "maximum": 1})", Bound{0, false}, Bound{10000, false});
  expect_decimal_exact(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})", Bound{0, true},
                       Bound{10000, true});
  expect_decimal_exact(R"({"type": "number", "minimum": 2.25, "maximum": 10.5})", Bound{22500, false},
                       Bound{105000, false});
  expect_decimal_exact(R"({"type": "number", "exclusiveMinimum": 2.25, "exclusiveMaximum": 10.5})", Bound{22500, true},
                       Bound{105000, true});
  expect_decimal_exact(R"({"type": "number", "minimum": 2.25, "maximum": 2.5001})", Bound{22500, false},
                       Bound{25001, false});  // one integer part: the fraction between two bounds
  expect_decimal_exact(R"({"type": "number", "exclusiveMinimum": 2.249, "exclusiveMaximum": 2.25})", Bound{22490, true},
                       Bound{22500, true});
  expect_decimal_exact(R"({"type": "number", "minimum": 5, "maximum": 5})", Bound{50000, false}, Bound{50000, false});
  expect_decimal_exact(R"({"type": "number", "minimum": -3.75, "maximum": 4.0001})", Bound{-37500, false},
                       Bound{40001, false});
  expect_decimal_exact(R"({"type": "number", "exclusiveMinimum": -10.5, "exclusiveMaximum": -0.25})",
                       Bound{-105000, true}, Bound{-2500, true});
  expect_decimal_exact(R"({"type": "number", "minimum": -0.0001})", Bound{-1, false}, std::nullopt);
  expect_decimal_exact(R"({"type": "number", "exclusiveMaximum": 0})", std::nullopt, Bound{0, true});
  expect_decimal_exact(R"({"type": "number", "maximum": 0})", std::nullopt, Bound{0, false});
  expect_decimal_exact(R"({"exclusiveMinimum": 7.5})", Bound{75000, true}, std::nullopt);  // type inferred
  expect_decimal_exact(R"({"type": "number", "minimum": 1, "exclusiveMinimum": true, "maximum": 9.9999})",
                       Bound{10000, true}, Bound{99999, false});
}

TEST(GrammarNumberRange, DecimalSpellings) {
  const auto g = schema(R"({"type": "number", "minimum": -1, "maximum": 1e2})");
  for (const char* ok : {"0", "0.0", "100", "100.000", "-1", "-0.5", "99.99", "1.5"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  // No exponent, no "-0" for zero, no leading zeros or bare points: the value set is whole, one family of spellings.
  for (const char* bad : {"1e1", "-0", "-0.0", "01", ".5", "5.", "100.01", "-1.0001", "+1"}) {
    EXPECT_FALSE(accepts(g, bad)) << bad;
  }
  EXPECT_EQ(DecimalBound::parse("1e-07", false).fraction, "0000001");
  EXPECT_EQ(DecimalBound::parse("-12.500", false).fraction, "5");
  EXPECT_EQ(DecimalBound::parse("1.5e3", false).integer, "1500");
  EXPECT_EQ(DecimalBound::parse("-0.0", false).negative, false);
  const auto tiny = schema(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1e-7})");
  EXPECT_TRUE(accepts(tiny, "0.0000001"));
  EXPECT_TRUE(accepts(tiny, "0.00000001"));
  EXPECT_FALSE(accepts(tiny, "0.00000011"));
  EXPECT_FALSE(accepts(tiny, "0.0"));
}

}  // namespace
}  // namespace strata::text::grammar
