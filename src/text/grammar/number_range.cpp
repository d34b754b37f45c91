#include "text/grammar/number_range.h"

#include <stdexcept>
#include <vector>

namespace strata::text::grammar {
namespace {

// Magnitudes are digit strings without leading zeros.
int compare_magnitude(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : a.compare(b) > 0 ? 1 : 0;
}

std::string increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}

std::string decrement(std::string s) {  // s >= 1
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  const size_t first = s.find_first_not_of('0');
  return first == std::string::npos ? "0" : s.substr(first);
}

std::string literal(const std::string& digits) { return digits.empty() ? "" : "\"" + digits + "\""; }

std::string digit_class(char first, char last) {
  return first == last ? literal(std::string(1, first)) : std::string("[") + first + "-" + last + "]";
}

std::string any_digits(size_t n) {
  if (n == 0) return "";
  return n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

std::string join(std::initializer_list<std::string> items) {
  std::string out;
  for (const std::string& item : items) {
    if (!item.empty()) out += (out.empty() ? "" : " ") + item;
  }
  return out;
}

using Alternatives = std::vector<std::string>;

// `prefix` followed by the digit strings of s's length that are >= s (ge) or <= s (le), as flat alternatives: s
// itself, and for each position i where s can be beaten, s's first i digits, a larger (smaller) digit, any digits.
void at_least(const std::string& prefix, const std::string& s, Alternatives& out) {
  out.push_back(join({prefix, literal(s)}));
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '9') continue;
    out.push_back(join({prefix, literal(s.substr(0, i)), digit_class(static_cast<char>(s[i] + 1), '9'),
                        any_digits(s.size() - i - 1)}));
  }
}

void at_most(const std::string& prefix, const std::string& s, Alternatives& out) {
  out.push_back(join({prefix, literal(s)}));
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '0') continue;
    out.push_back(join({prefix, literal(s.substr(0, i)), digit_class('0', static_cast<char>(s[i] - 1)),
                        any_digits(s.size() - i - 1)}));
  }
}

// Digit strings of one length between lo and hi (lo <= hi): the common prefix, then lo's digit with the rest >= lo's
// rest, hi's digit with the rest <= hi's rest, and any digit strictly between with any rest.
void same_length(const std::string& lo, const std::string& hi, Alternatives& out) {
  size_t k = 0;
  while (k < lo.size() && lo[k] == hi[k]) ++k;
  if (k == lo.size()) {
    out.push_back(literal(lo));
    return;
  }
  const std::string common = lo.substr(0, k);
  at_least(literal(common + lo[k]), lo.substr(k + 1), out);
  at_most(literal(common + hi[k]), hi.substr(k + 1), out);
  if (lo[k] + 1 <= hi[k] - 1) {
    out.push_back(join({literal(common), digit_class(static_cast<char>(lo[k] + 1), static_cast<char>(hi[k] - 1)),
                        any_digits(lo.size() - k - 1)}));
  }
}

// Magnitudes in [lo, hi] (hi empty: unbounded), lo <= hi, in canonical spelling.
void magnitudes(std::string lo, const std::optional<std::string>& hi, Alternatives& out) {
  if (lo == "0") {
    out.push_back("\"0\"");
    if (hi && *hi == "0") return;
    lo = "1";
  }
  const size_t n = lo.size();
  if (hi && hi->size() == n) {
    same_length(lo, *hi, out);
    return;
  }
  same_length(lo, std::string(n, '9'), out);
  if (!hi) {
    out.push_back("[1-9] [0-9]{" + std::to_string(n) + ",}");
    return;
  }
  const size_t m = hi->size();
  if (m - n >= 2) {  // every length strictly between: [1-9] then n .. m-2 more digits
    out.push_back("[1-9] [0-9]{" + std::to_string(n) + (m - 2 > n ? "," + std::to_string(m - 2) : "") + "}");
  }
  same_length("1" + std::string(m - 1, '0'), *hi, out);
}

std::string choice(const Alternatives& alternatives) {
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + ")";
}

}  // namespace

BigInteger BigInteger::parse(const std::string& text) {
  BigInteger out;
  size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) out.negative = text[i++] == '-';
  if (i == text.size()) throw std::invalid_argument("not an integer: '" + text + "'");
  for (size_t k = i; k < text.size(); ++k) {
    if (text[k] < '0' || text[k] > '9') throw std::invalid_argument("not an integer: '" + text + "'");
  }
  const size_t first = text.find_first_not_of('0', i);
  out.digits = first == std::string::npos ? "0" : text.substr(first);
  if (out.digits == "0") out.negative = false;
  return out;
}

BigInteger BigInteger::plus_one() const {
  if (!negative) return {false, increment(digits)};
  const std::string m = decrement(digits);
  return {m != "0", m};
}

BigInteger BigInteger::minus_one() const {
  if (negative || digits == "0") return {true, increment(digits)};
  return {false, decrement(digits)};
}

int compare(const BigInteger& a, const BigInteger& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int m = compare_magnitude(a.digits, b.digits);
  return a.negative ? -m : m;
}

std::optional<std::string> integer_range_ebnf(const std::optional<BigInteger>& lo, const std::optional<BigInteger>& hi) {
  if (lo && hi && compare(*lo, *hi) > 0) return std::nullopt;
  Alternatives out;
  // Negative values: "-" and a magnitude in [max(1, -hi), -lo].
  if (!lo || lo->negative) {
    const std::string low = hi && hi->negative ? hi->digits : "1";
    const std::optional<std::string> high = lo ? std::optional<std::string>(lo->digits) : std::nullopt;
    Alternatives negative;
    magnitudes(low, high, negative);
    out.push_back("\"-\" " + choice(negative));
  }
  // Non-negative values: [max(lo, 0), hi].
  if (!hi || !hi->negative) {
    const std::string low = lo && !lo->negative ? lo->digits : "0";
    const std::optional<std::string> high = hi ? std::optional<std::string>(hi->digits) : std::nullopt;
    magnitudes(low, high, out);
  }
  return choice(out);
}

// ---- decimals ----

namespace {

// Fraction digits r (after the '.') against a bound's fraction digits f, compared as the values 0.r and 0.f. The
// digits_* functions give alternatives of digit strings that may be empty; fraction_part adds the '.'.
constexpr const char* kAnyDigits = "[0-9]*";
constexpr const char* kNonZeroTail = "[0-9]* [1-9] [0-9]*";  // some digit is not zero

// Digit strings r (possibly empty) with 0.r >= 0.f (> when exclusive); f has no trailing zeros.
void digits_at_least(const std::string& f, bool exclusive, Alternatives& out) {
  if (f.empty()) {
    out.push_back(exclusive ? kNonZeroTail : kAnyDigits);
    return;
  }
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '9') continue;
    out.push_back(join({literal(f.substr(0, i)), digit_class(static_cast<char>(f[i] + 1), '9'), kAnyDigits}));
  }
  out.push_back(join({literal(f), exclusive ? kNonZeroTail : kAnyDigits}));
}

// Digit strings r (possibly empty) with 0.r <= 0.f (< when exclusive); false when there are none.
bool digits_at_most(const std::string& f, bool exclusive, Alternatives& out) {
  if (f.empty()) {
    if (exclusive) return false;
    out.push_back("\"0\"*");
    return true;
  }
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '0') out.push_back(join({literal(f.substr(0, i)), digit_class('0', static_cast<char>(f[i] - 1)), kAnyDigits}));
    out.push_back(join({literal(f.substr(0, i)), "\"0\"*"}));  // a proper prefix of f, then zeros: below f
  }
  if (!exclusive) out.push_back(join({literal(f), "\"0\"*"}));
  return true;
}

std::string strip_zeros(std::string s) {
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

// Bounds on a magnitude (a non-negative value): integer digits, fraction digits, exclusive.
struct Magnitude {
  std::string integer = "0", fraction;
  bool exclusive = false;
};

// What may follow an integer part whose fractions 0.r are the digit strings r of `digits` (alternatives that may
// match the empty string): "." and a non-empty r, or nothing when r = "" is allowed (`whole`).
std::string fraction_part(Alternatives digits, bool whole) {
  for (std::string& alternative : digits) {  // the only alternatives that can be empty are bare repetitions
    if (alternative == kAnyDigits) alternative = "[0-9]+";
    if (alternative == "\"0\"*") alternative = "\"0\"+";
  }
  return "( \".\" " + choice(digits) + " )" + (whole ? "?" : "");
}

// Digit strings r with lo < or <= 0.r < or <= hi (fractions of one integer part); false when there are none.
bool digits_between(const Magnitude& lo, const Magnitude& hi, Alternatives& out) {
  const size_t n = std::max(lo.fraction.size(), hi.fraction.size());
  const std::string a = lo.fraction + std::string(n - lo.fraction.size(), '0');
  const std::string b = hi.fraction + std::string(n - hi.fraction.size(), '0');
  if (a > b) return false;
  if (a == b) {  // one value: both ends must include it
    if (lo.exclusive || hi.exclusive) return false;
    out.push_back(join({literal(lo.fraction), "\"0\"*"}));
    return true;
  }
  size_t k = 0;
  while (a[k] == b[k]) ++k;
  const std::string common = a.substr(0, k);
  // Shorter than the common prefix and a digit: only lo's own value (its fraction, then zeros) fits.
  if (!lo.exclusive && lo.fraction.size() <= k) out.push_back(join({literal(lo.fraction), "\"0\"*"}));
  Alternatives rest;
  digits_at_least(strip_zeros(a.substr(k + 1)), lo.exclusive, rest);
  for (const std::string& r : rest) out.push_back(join({literal(common + a[k]), r}));
  if (a[k] + 1 <= b[k] - 1) {
    out.push_back(join({literal(common), digit_class(static_cast<char>(a[k] + 1), static_cast<char>(b[k] - 1)), kAnyDigits}));
  }
  rest.clear();
  if (digits_at_most(strip_zeros(b.substr(k + 1)), hi.exclusive, rest)) {
    for (const std::string& r : rest) out.push_back(join({literal(common + b[k]), r}));
  }
  return true;
}

// Spellings of the magnitudes (non-negative values) within the bounds (hi absent: unbounded above).
void decimal_magnitudes(const Magnitude& lo, const std::optional<Magnitude>& hi, Alternatives& out) {
  const std::string& li = lo.integer;
  if (hi && compare_magnitude(li, hi->integer) > 0) return;
  if (hi && li == hi->integer) {
    Alternatives digits;
    if (digits_between(lo, *hi, digits)) {
      out.push_back(join({literal(li), fraction_part(digits, lo.fraction.empty() && !lo.exclusive)}));
    }
    return;
  }
  Alternatives digits;
  digits_at_least(lo.fraction, lo.exclusive, digits);
  out.push_back(join({literal(li), fraction_part(digits, lo.fraction.empty() && !lo.exclusive)}));
  const std::string first = increment(li);  // integer parts strictly between: any fraction
  if (!hi || compare_magnitude(first, hi->integer) < 0) {
    Alternatives integers;
    magnitudes(first, hi ? std::optional<std::string>(decrement(hi->integer)) : std::nullopt, integers);
    out.push_back(choice(integers) + " ( \".\" [0-9]+ )?");
  }
  if (hi) {
    digits.clear();
    if (digits_at_most(hi->fraction, hi->exclusive, digits)) {
      out.push_back(join({literal(hi->integer), fraction_part(digits, true)}));
    }
  }
}

Magnitude magnitude_of(const DecimalBound& b) { return {b.integer, b.fraction, b.exclusive}; }

}  // namespace

DecimalBound DecimalBound::parse(const std::string& text, bool exclusive) {
  DecimalBound out;
  out.exclusive = exclusive;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') {
    out.negative = true;
    ++i;
  }
  std::string digits;
  long long point = -1;  // digits before the decimal point
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.' && point < 0) {
      point = static_cast<long long>(digits.size());
    } else if (text[i] >= '0' && text[i] <= '9') {
      digits += text[i];
    } else {
      throw std::invalid_argument("not a number: '" + text + "'");
    }
  }
  if (digits.empty()) throw std::invalid_argument("not a number: '" + text + "'");
  if (point < 0) point = static_cast<long long>(digits.size());
  if (i < text.size()) {
    const std::string exponent = text.substr(i + 1);
    if (exponent.empty() || exponent.size() > 6) throw std::invalid_argument("exponent out of range: '" + text + "'");
    point += std::stoll(exponent);
  }
  if (point > 400 || point < -400) throw std::invalid_argument("exponent out of range: '" + text + "'");
  if (point < 0) {
    digits = std::string(static_cast<size_t>(-point), '0') + digits;
    point = 0;
  }
  if (point > static_cast<long long>(digits.size())) digits += std::string(static_cast<size_t>(point) - digits.size(), '0');
  const std::string integer = digits.substr(0, static_cast<size_t>(point));
  const size_t first = integer.find_first_not_of('0');
  out.integer = first == std::string::npos ? "0" : integer.substr(first);
  out.fraction = strip_zeros(digits.substr(static_cast<size_t>(point)));
  if (out.integer == "0" && out.fraction.empty()) out.negative = false;
  return out;
}

int compare(const DecimalBound& a, const DecimalBound& b) {
  const bool a_zero = a.integer == "0" && a.fraction.empty(), b_zero = b.integer == "0" && b.fraction.empty();
  const bool a_neg = a.negative && !a_zero, b_neg = b.negative && !b_zero;
  if (a_neg != b_neg) return a_neg ? -1 : 1;
  int m = compare_magnitude(a.integer, b.integer);
  if (m == 0) {
    const size_t n = std::max(a.fraction.size(), b.fraction.size());
    const std::string fa = a.fraction + std::string(n - a.fraction.size(), '0');
    const std::string fb = b.fraction + std::string(n - b.fraction.size(), '0');
    m = fa < fb ? -1 : fa > fb ? 1 : 0;
  }
  return a_neg ? -m : m;
}

std::optional<std::string> decimal_range_ebnf(const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi) {
  if (lo && hi) {
    const int c = compare(*lo, *hi);
    if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive))) return std::nullopt;
  }
  const DecimalBound zero;
  Alternatives out;
  // Negative values: "-" and a magnitude in (max(0, -hi), -lo]; zero is never spelled "-0" here.
  if (!lo || compare(*lo, zero) < 0) {
    Magnitude low{"0", "", true};
    if (hi && compare(*hi, zero) < 0) low = magnitude_of(*hi);
    const std::optional<Magnitude> high = lo ? std::optional<Magnitude>(magnitude_of(*lo)) : std::nullopt;
    Alternatives negative;
    decimal_magnitudes(low, high, negative);
    if (!negative.empty()) out.push_back("\"-\" " + choice(negative));
  }
  // Non-negative values: [max(lo, 0), hi].
  if (!hi || compare(*hi, zero) > 0 || (compare(*hi, zero) == 0 && !hi->exclusive)) {
    Magnitude low;
    if (lo && compare(*lo, zero) >= 0) low = magnitude_of(*lo);
    const std::optional<Magnitude> high = hi ? std::optional<Magnitude>(magnitude_of(*hi)) : std::nullopt;
    decimal_magnitudes(low, high, out);
  }
  if (out.empty()) return std::nullopt;
  return choice(out);
}

}  // namespace strata::text::grammar
