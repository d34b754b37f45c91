#pragma once
// EBNF in the GBNF / XGrammar dialect:
//
//   root   ::= object | "null"          # a rule: name ::= expression; `#` starts a comment
//   object ::= "{" ws pair ("," ws pair)* "}"
//   pair   ::= [a-z_] [a-z0-9_]{0,15} ":" ws value
//   ws     ::= [ \t\n]*
//
// Expressions: "literal" or 'literal' (escapes \n \r \t \\ \" \' \xHH \uHHHH \UHHHHHHHH, each a code point
// written as UTF-8), character classes [a-z], [^"\\], [\u4e00-\u9fff], `.` (any code point), rule names, grouping
// ( ... ), alternation |, and the postfix operators * + ? {m} {m,} {m,n}. Whitespace, newlines included, is
// insignificant: a rule ends where the next `name ::=` begins, so rules may span lines.
//
// Every error names the problem and its line:column; a grammar whose root can only produce the empty string, a
// reference to an undefined rule and a rule that can never finish are errors too (checked by byte_grammar.h's
// lowering, which every caller runs).
#include <string>
#include <string_view>

#include "core/error.h"
#include "text/grammar/grammar.h"

namespace strata::text::grammar {

// A grammar, regex or schema that cannot be compiled. line and column are 1-based (0: no position, e.g. a
// problem with the grammar as a whole).
class GrammarError : public Error {
 public:
  GrammarError(const std::string& message, int line, int column)
      : Error(message), line_(line), column_(column) {}
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_ = 0;
  int column_ = 0;
};

// Parses `text`; the rule named root_rule (default "root") is the start symbol.
Grammar parse_ebnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace strata::text::grammar
