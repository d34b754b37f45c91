#pragma once
// Regular expressions (the JSON-Schema `pattern` subset of ECMA-262) as EBNF expressions, so a regex compiles like
// any grammar and a schema can embed one. Supported: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \/ and
// escaped metacharacters), classes [a-z] [^...] with \d \w \s \D \W \S inside and outside, `.` (any character but
// \n and \r), groups ( ) and (?: ), alternation |, quantifiers * + ? {m} {m,} {m,n} (lazy forms too: the language
// is the same), and anchors ^ $ at the ends. Backreferences, lookaround, named groups and anchors in the middle are
// errors naming the construct and its column.
#include <string>
#include <string_view>
#include <vector>

namespace strata::text::grammar {

struct RegexOptions {
  // Match the whole string (a `regex` request) or, as JSON Schema's `pattern` does, anywhere in it: an unanchored
  // side may then have any text.
  bool search = false;
  // The text is the body of a JSON string: `"`, `\` and control characters are produced as JSON escapes.
  bool json_string = false;
};

// An EBNF expression (ebnf_parser.h) for the regex; throws GrammarError ("regex: column N: ...").
std::string regex_to_ebnf(std::string_view regex, const RegexOptions& options = {});

// `root ::= <the expression>`, for compiling a regex alone.
std::string regex_grammar(std::string_view regex);

// A grammar accepting exactly one of `choices` (vLLM's `choice`), e.g. ["yes", "no"]. Empty lists and empty
// strings are errors.
std::string choice_grammar(const std::vector<std::string>& choices);

}  // namespace strata::text::grammar
