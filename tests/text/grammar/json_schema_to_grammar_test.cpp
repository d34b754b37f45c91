// JSON Schema → grammar: documents that follow the schema are accepted, documents that break it are rejected, and
// unsupported keywords or bad schemas fail with every problem listed.
#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "text/grammar/ebnf_parser.h"
#include "text/grammar/json_schema_to_grammar.h"

namespace strata::text::grammar {
namespace {

using testing::accepts;
using testing::byte_vocab;

std::shared_ptr<const CompiledGrammar> schema(std::string_view json) {
  return CompiledGrammar::from_ebnf(json_schema_to_ebnf(json), byte_vocab());
}

TEST(GrammarJsonSchema, ObjectsWithRequiredOptionalAndNested) {
  const auto g = schema(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 8},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
      "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    },
    "required": ["name", "address"]
  })");
  EXPECT_TRUE(accepts(g, R"({"name": "Ann", "address": {"city": "Oslo"}})"));
  EXPECT_TRUE(accepts(g, R"({"name":"Ann","age":-3,"tags":["a",3],"address":{"city":""}})"));
  EXPECT_TRUE(accepts(g, "{\n  \"name\": \"A\",\n  \"address\": {\"city\": \"x\"}\n}"));
  EXPECT_FALSE(accepts(g, R"({"address": {"city": "Oslo"}})"));                      // name is required
  EXPECT_FALSE(accepts(g, R"({"name": "", "address": {"city": "Oslo"}})"));          // minLength 1
  EXPECT_FALSE(accepts(g, R"({"name": "123456789", "address": {"city": "O"}})"));    // maxLength 8
  EXPECT_FALSE(accepts(g, R"({"name": "A", "age": 1.5, "address": {"city": "O"}})")); // integer
  EXPECT_FALSE(accepts(g, R"({"name": "A", "tags": [], "address": {"city": "O"}})")); // minItems
  EXPECT_FALSE(accepts(g, R"({"name": "A", "tags": ["a","b","a"], "address": {"city": "O"}})"));
  EXPECT_FALSE(accepts(g, R"({"name": "A", "tags": ["c"], "address": {"city": "O"}})"));
  EXPECT_FALSE(accepts(g, R"({"name": "A", "address": {"city": "O"}, "extra": 1})"));  // no additionalProperties
  EXPECT_FALSE(accepts(g, R"({"name": "A", "address": {"city": "O"},})"));
}

TEST(GrammarJsonSchema, AdditionalPropertiesAnyOfRefAndTypeLists) {
  const auto extra = schema(R"({"properties": {"a": {"type": "boolean"}}, "additionalProperties": {"type": "number"}})");
  EXPECT_TRUE(accepts(extra, R"({})"));
  EXPECT_TRUE(accepts(extra, R"({"a": true, "x": 1, "y": 2e5})"));
  EXPECT_TRUE(accepts(extra, R"({"x": 1})"));
  EXPECT_FALSE(accepts(extra, R"({"x": "s"})"));
  const auto tree = schema(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": ["integer", "null"]},
                                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["v"]}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"const": "leaf"}]
  })");
  EXPECT_TRUE(accepts(tree, R"({"v": 1, "kids": [{"v": null}, {"v": 2, "kids": []}]})"));
  EXPECT_TRUE(accepts(tree, R"("leaf")"));
  EXPECT_FALSE(accepts(tree, R"({"v": "x"})"));
  EXPECT_FALSE(accepts(tree, R"("tree")"));
}

TEST(GrammarJsonSchema, StringFormatsAndPatterns) {
  const auto g = schema(R"({"type": "object", "properties": {
      "d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "date-time"},
      "u": {"type": "string", "format": "uuid"}, "e": {"type": "string", "format": "email"},
      "p": {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"}, "q": {"type": "string", "pattern": "ab"}}})");
  EXPECT_TRUE(accepts(g, R"({"d": "2024-02-29", "t": "2024-02-29T23:59:60.5+01:00",
      "u": "123e4567-e89b-12d3-a456-426614174000", "e": "a.b@example.com", "p": "AB-12", "q": "xxabyy"})"));
  EXPECT_FALSE(accepts(g, R"({"d": "2024-13-01"})"));
  // A date as validators check it: the month's days, and 29 February in leap years only.
  for (const char* ok : {"2023-01-31", "2023-12-31", "2023-04-30", "2023-02-28", "2000-02-29", "1996-02-29", "0000-02-29"})
    EXPECT_TRUE(accepts(g, std::string(R"({"d": ")") + ok + "\"}")) << ok;
  for (const char* bad : {"1271-11-31", "2023-04-31", "2023-02-29", "1900-02-29", "2023-02-30", "2023-00-10", "2023-01-00"})
    EXPECT_FALSE(accepts(g, std::string(R"({"d": ")") + bad + "\"}")) << bad;
  EXPECT_FALSE(accepts(g, R"({"t": "2023-06-31T10:00:00Z"})"));
  EXPECT_FALSE(accepts(g, R"({"t": "2024-02-29 23:59:60Z"})"));
  EXPECT_FALSE(accepts(g, R"({"u": "123e4567e89b12d3a456426614174000"})"));
  EXPECT_FALSE(accepts(g, R"({"e": "nobody"})"));
  EXPECT_FALSE(accepts(g, R"({"p": "ab-12"})"));
  EXPECT_FALSE(accepts(g, R"({"q": "a b"})"));
}

TEST(GrammarJsonSchema, GenericJsonObject) {
  const auto g = CompiledGrammar::from_ebnf(json_object_ebnf(), byte_vocab());
  EXPECT_TRUE(accepts(g, R"({"a": [1, -0.5e+3, true, false, null, "\u00e9\n"], "b": {}})"));
  EXPECT_FALSE(accepts(g, R"([1])"));
  EXPECT_FALSE(accepts(g, R"({"a": 01})"));
  EXPECT_FALSE(accepts(g, "{\"a\": \"raw\nnewline\"}"));
  const auto any = CompiledGrammar::from_ebnf(json_value_ebnf(), byte_vocab());
  EXPECT_TRUE(accepts(any, "[1]"));
  EXPECT_TRUE(accepts(any, "\"s\""));
}

void expect_error(std::string_view json, const std::string& message) {
  try {
    json_schema_to_ebnf(json);
    ADD_FAILURE() << "no error for " << json;
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(GrammarJsonSchema, UnsupportedKeywordsAreListedNeverIgnored) {
  expect_error(R"({"type": "object", "properties": {"n": {"type": "number", "minimum": 0, "multipleOf": 2}},
                  "patternProperties": {}})",
               "unsupported keywords: /patternProperties, /properties/n/multipleOf");
  expect_error(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "/allOf (with more than one schema)");
  expect_error(R"({"type": "string", "format": "uri"})", "/format (\"uri\")");
  expect_error(R"({"type": "string", "pattern": "a", "maxLength": 3})", "pattern, format and minLength/maxLength together");
  expect_error(R"({"type": "array", "items": [{"type": "string"}]})", "/items (as a list: tuple validation)");
}

TEST(GrammarJsonSchema, BadSchemasNameTheProblem) {
  expect_error("{\"type\": \"object\",\n \"properties\": {,}}", "json schema: 2:17: not valid JSON");
  expect_error(R"({"type": "strnig"})", "/type: unknown type 'strnig'");
  expect_error(R"({"$ref": "#/$defs/missing"})", "'#/$defs/missing' points to nothing");
  expect_error(R"({"$ref": "https://example.com/s.json"})", "only local references");
  expect_error(R"({"properties": {"a": {}}, "required": ["b"]})", "'b' is required but has no schema in properties");
  expect_error(R"({"type": "array", "minItems": 3, "maxItems": 2})", "/maxItems: is below minItems");
  expect_error(R"({"type": "string", "pattern": "(a"})", "/pattern: regex: column 1: group is not closed");
  expect_error(R"(false)", "the schema false accepts no value");
  expect_error(R"({"properties": {"a": 3}})", "/properties/a: a schema must be an object or a boolean");
  // A number past a double's range is nlohmann's out_of_range, not a parse_error: it escaped the converter as a
  // foreign exception (found by json_schema_grammar_fuzz with '1e31305').
  expect_error(R"({"type": "integer", "minimum": 1e31305})", "json schema: not valid JSON ([json.exception.out_of_range.406]");
}

// Sub-schemas nested past the bound are an error, not a stack overflow of the request worker.
TEST(GrammarJsonSchema, DeepNestingIsAnErrorNotACrash) {
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}" + std::string(5000, '}');
  expect_error(deep, "schemas nest deeper than 128 levels");
  std::string ok;
  for (int i = 0; i < 100; ++i) ok += R"({"type": "array", "items": )";
  ok += R"({"type": "integer"})" + std::string(100, '}');
  const auto g = schema(ok);
  EXPECT_TRUE(accepts(g, std::string(100, '[') + "7" + std::string(100, ']')));
  EXPECT_FALSE(accepts(g, std::string(99, '[') + "7" + std::string(99, ']')));
}

}  // namespace
}  // namespace strata::text::grammar
