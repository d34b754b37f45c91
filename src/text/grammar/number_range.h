#pragma once
// Numeric ranges as grammars, for JSON Schema's minimum / maximum / exclusiveMinimum / exclusiveMaximum.
//
// Integer ranges: the canonical decimal spellings (-?(0|[1-9][0-9]*), no "-0") of exactly the integers
// in [lo, hi], either side open, for JSON Schema's minimum / maximum / exclusiveMinimum / exclusiveMaximum on
// integers. The set of spellings of a range is regular; it is built digit by digit (the classic "numbers between
// 37 and 1205" expansion): one alternative per digit position of each partial length, and one [1-9][0-9]{a,b} for
// every length strictly between the bounds' lengths, so the expression is linear in the bounds' digit count and
// bounds of any size (1e300 as much as 5) cost nothing special.
#include <optional>
#include <string>

namespace strata::text::grammar {

// An integer of any size: sign and decimal magnitude without leading zeros ("0" for zero, never negative).
struct BigInteger {
  bool negative = false;
  std::string digits = "0";

  // From a canonical or non-canonical decimal ("-0012" → -12); throws std::invalid_argument for anything else.
  static BigInteger parse(const std::string& text);
  std::string to_string() const { return (negative ? "-" : "") + digits; }
  BigInteger plus_one() const;
  BigInteger minus_one() const;
};
int compare(const BigInteger& a, const BigInteger& b);  // <0, 0, >0

// An EBNF expression (ebnf_parser.h) for the integers in [lo, hi] (nullopt: unbounded on that side), or nullopt
// when the range is empty.
std::optional<std::string> integer_range_ebnf(const std::optional<BigInteger>& lo, const std::optional<BigInteger>& hi);

// Decimal ranges: the JSON numbers between two decimal bounds, written without an exponent
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?, no "-0" spelling of zero). Every value keeps a spelling (a number with an exponent
// has one without), and comparing a bound against a mantissa and an exponent of any length is not a regular
// language, so the grammar drops exponents rather than values. Built like the integer ranges: the integer part
// equal to a bound's, with the fraction compared digit by digit (at least / at most / between), or strictly
// between the bounds' integer parts with any fraction.
struct DecimalBound {
  bool negative = false;
  std::string integer = "0";  // canonical digits
  std::string fraction;       // digits without trailing zeros ("" for a whole number)
  bool exclusive = false;

  // From a JSON number's text ("-12.50", "1e-07", "3"); throws std::invalid_argument otherwise.
  static DecimalBound parse(const std::string& text, bool exclusive);
};
// Compares the values (exclusivity aside).
int compare(const DecimalBound& a, const DecimalBound& b);

// An EBNF expression for the numbers in the range (nullopt: unbounded on that side), or nullopt when none is.
std::optional<std::string> decimal_range_ebnf(const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi);

}  // namespace strata::text::grammar
