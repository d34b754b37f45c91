#pragma once
// JSON Schema → EBNF (ebnf_parser.h), and the generic JSON grammar of `response_format: json_object`.
//
// Supported: type (object, array, string, number, integer, boolean, null, and lists of them); properties,
// required, additionalProperties (false, true or a schema); enum and const; items, minItems, maxItems; anyOf and
// oneOf (as alternatives: oneOf's "exactly one" is not enforced); allOf with a single member; $ref to "#", to
// "#/$defs/..." and "#/definitions/..." (recursion allowed); string minLength / maxLength, pattern (regex_to_grammar.h,
// unanchored as JSON Schema says) and the regular formats date, time, date-time, uuid, email, ipv4, hostname;
// boolean schemas true / false-free; minimum, maximum, exclusiveMinimum, exclusiveMaximum (draft 4's boolean
// exclusive forms too) as exact digit ranges (number_range.h). Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored; every other keyword is an error that lists
// them all with their JSON pointers.
//
// Policies (docs/grammar.md):
// - Whitespace: any run of spaces, tabs and newlines where JSON allows whitespace (as XGrammar's default), so models
//   that pretty-print still match; output length is bounded by max_tokens, not by the grammar.
// - Objects: declared properties in the schema's order, then (when additionalProperties allows) extra members with
//   any other string key. A missing additionalProperties means false, as in OpenAI's strict mode and XGrammar.
// - Bounded numbers: integers in canonical form, other numbers without an exponent (every value keeps a spelling),
//   zero never as "-0".
#include <string>
#include <string_view>

namespace strata::text::grammar {

// The schema as JSON text; throws GrammarError (bad JSON: with line:column; bad or unsupported schema: naming the
// JSON pointer of each problem).
std::string json_schema_to_ebnf(std::string_view schema_json);

// Any JSON value whose top level is an object (`response_format: {"type": "json_object"}`).
std::string json_object_ebnf();
// Any JSON value.
std::string json_value_ebnf();

}  // namespace strata::text::grammar
