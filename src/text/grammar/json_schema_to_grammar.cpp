#include "text/grammar/json_schema_to_grammar.h"

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/grammar/ebnf_parser.h"
#include "text/grammar/number_range.h"
#include "text/grammar/regex_to_grammar.h"

namespace strata::text::grammar {
namespace {

using Json = nlohmann::ordered_json;  // ordered: properties come out in the schema's order

constexpr const char* kWs = "[ \\n\\t]*";
constexpr int64_t kMaxCount = 1024;  // the EBNF repetition bound
// Sub-schemas are converted by recursion: a bound keeps a hostile schema from overflowing the stack.
constexpr int kMaxSchemaNesting = 128;

// The shared JSON rules. Whitespace is written inline at each use, not as a shared `ws` rule: then each run knows
// what may follow it, which keeps most tokens decidable by the mask cache (token_mask.h).
std::string base_rules() {
  const std::string w = kWs;
  return "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"\n"
         "json-object ::= \"{\" " + w + " ( json-string " + w + " \":\" " + w + " json-value " + w + " ( \",\" " + w +
         " json-string " + w + " \":\" " + w + " json-value " + w + " )* )? \"}\"\n"
         "json-array ::= \"[\" " + w + " ( json-value " + w + " ( \",\" " + w + " json-value " + w + " )* )? \"]\"\n"
         "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
         "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
         "json-number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
         "json-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]* )\n";
}

// Bytes as an EBNF literal: letters and digits as themselves, everything else as \U escapes of its code points.
std::string ebnf_literal(const std::string& bytes) {
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size();) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    const int extra = b < 0x80 ? 0 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
    uint32_t cp = extra == 0 ? b : b & (0x3F >> extra);
    for (int j = 1; j <= extra && i + static_cast<size_t>(j) < bytes.size(); ++j) {
      cp = (cp << 6) | (static_cast<unsigned char>(bytes[i + static_cast<size_t>(j)]) & 0x3F);
    }
    i += static_cast<size_t>(extra) + 1;
    if ((cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') || cp == ' ') {
      out += static_cast<char>(cp);
    } else {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\U%08X", cp);
      out += buf;
    }
  }
  return out + "\"";
}

// A value as the compact JSON text a model would write for it.
std::string json_literal(const Json& value) { return ebnf_literal(value.dump()); }

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly"};
  return k;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> k = {"type", "properties", "required", "additionalProperties", "enum", "const",
                                          "items", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref",
                                          "$defs", "definitions", "minLength", "maxLength", "pattern", "format",
                                          "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  return k;
}

// Formats whose language is regular, as anchored regexes over the string's text.
const std::map<std::string, std::string>& format_regexes() {
  // RFC 3339 full-date as validators check it: the days each month has, and 29 February only in a leap year (a
  // multiple of 4 that is not a century, or a multiple of 400: the last two digits, or the first two of a century).
  static const std::string leap_year = R"((\d\d(0[48]|[2468][048]|[13579][26])|(00|0[48]|[2468][048]|[13579][26])00))";
  static const std::string date = R"((\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|)"
                                  R"(02-(0[1-9]|1\d|2[0-8]))|)" + leap_year + "-02-29)";
  static const std::string time = R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  static const std::string label = R"([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)";
  static const std::map<std::string, std::string> k = {
      {"date", date},
      {"time", time},
      {"date-time", date + "T" + time},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"email", R"([a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,})"},
      {"ipv4", "(" + octet + R"(\.){3})" + octet},
      {"hostname", label + R"((\.)" + label + ")*"},
  };
  return k;
}

std::string escape_pointer_token(const std::string& key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

class SchemaConverter {
 public:
  explicit SchemaConverter(const Json& root) : root_(root) {}

  std::string run() {
    const std::string body = expr(root_, "");
    if (!problems_.empty()) {
      std::string list;
      for (const std::string& p : problems_) list += (list.empty() ? "" : "; ") + p;
      throw GrammarError(cat("json schema: ", list), 0, 0);
    }
    if (!unsupported_.empty()) {
      std::string list;
      for (const std::string& p : unsupported_) list += (list.empty() ? "" : ", ") + p;
      throw GrammarError(cat("json schema: unsupported keywords: ", list), 0, 0);
    }
    std::string out = "root ::= " + body + "\n";
    for (const std::string& r : rules_) out += r + "\n";
    return out + base_rules();
  }

 private:
  std::string new_rule(const std::string& body) {
    const std::string name = "s" + std::to_string(rules_.size());
    rules_.push_back(name + " ::= " + body);
    return name;
  }

  // Reserves a rule name before its body exists (for $ref recursion).
  size_t reserve_rule(std::string& name) {
    name = "s" + std::to_string(rules_.size());
    rules_.emplace_back();
    return rules_.size() - 1;
  }

  void problem(const std::string& pointer, const std::string& message) {
    problems_.push_back(cat(pointer.empty() ? "/" : pointer, ": ", message));
  }

  std::string ref_rule(const std::string& ref, const std::string& pointer) {
    const auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') {
      problem(pointer + "/$ref", cat("only local references (#, #/$defs/...) are supported, not '", ref, "'"));
      return "json-value";
    }
    Json::json_pointer target;
    try {
      target = Json::json_pointer(ref.substr(1));
    } catch (const nlohmann::json::exception&) {
      problem(pointer + "/$ref", cat("'", ref, "' is not a valid JSON pointer"));
      return "json-value";
    }
    if (!root_.contains(target)) {
      problem(pointer + "/$ref", cat("'", ref, "' points to nothing in the schema"));
      return "json-value";
    }
    std::string name;
    const size_t index = reserve_rule(name);
    ref_rules_.emplace(ref, name);
    const std::string body = expr(root_.at(target), ref.substr(1));
    rules_[index] = name + " ::= " + body;
    return name;
  }

  std::string expr(const Json& schema, const std::string& pointer) {
    if (depth_ >= kMaxSchemaNesting) {
      problem(pointer, cat("schemas nest deeper than ", kMaxSchemaNesting, " levels"));
      return "json-value";
    }
    ++depth_;
    std::string out = expr_at_depth(schema, pointer);
    --depth_;
    return out;
  }

  std::string expr_at_depth(const Json& schema, const std::string& pointer) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) problem(pointer, "the schema false accepts no value");
      return "json-value";
    }
    if (!schema.is_object()) {
      problem(pointer, cat("a schema must be an object or a boolean, found ", schema.type_name()));
      return "json-value";
    }
    std::vector<std::string> constraints;  // keywords other than annotations and definitions
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      const std::string& key = it.key();
      if (annotations().count(key)) continue;
      if (!supported_keywords().count(key)) {
        unsupported_.push_back(pointer + "/" + escape_pointer_token(key));
        continue;
      }
      if (key != "$defs" && key != "definitions") constraints.push_back(key);
    }
    auto only = [&](std::initializer_list<const char*> allowed, const char* what) {
      for (const std::string& key : constraints) {
        bool ok = false;
        for (const char* a : allowed) ok = ok || key == a;
        if (!ok) unsupported_.push_back(cat(pointer, "/", key, " (alongside ", what, ")"));
      }
    };
    if (schema.contains("$ref")) {
      only({"$ref"}, "$ref");
      if (!schema["$ref"].is_string()) {
        problem(pointer + "/$ref", "must be a string");
        return "json-value";
      }
      return ref_rule(schema["$ref"].get<std::string>(), pointer);
    }
    if (schema.contains("const")) {
      only({"const", "type"}, "const");
      return json_literal(schema["const"]);
    }
    if (schema.contains("enum")) {
      only({"enum", "type"}, "enum");
      const Json& values = schema["enum"];
      if (!values.is_array() || values.empty()) {
        problem(pointer + "/enum", "must be a non-empty array");
        return "json-value";
      }
      std::string out = "(";
      for (size_t i = 0; i < values.size(); ++i) out += (i ? " | " : "") + json_literal(values[i]);
      return out + ")";
    }
    for (const char* combiner : {"anyOf", "oneOf", "allOf"}) {
      if (!schema.contains(combiner)) continue;
      only({combiner}, combiner);
      const Json& members = schema[combiner];
      const std::string at = pointer + "/" + combiner;
      if (!members.is_array() || members.empty()) {
        problem(at, "must be a non-empty array of schemas");
        return "json-value";
      }
      if (std::string(combiner) == "allOf") {
        if (members.size() != 1) unsupported_.push_back(at + " (with more than one schema)");
        return expr(members[0], at + "/0");
      }
      std::string out = "(";
      for (size_t i = 0; i < members.size(); ++i) {
        out += (i ? " | " : "") + rule_for(members[i], at + "/" + std::to_string(i));
      }
      return out + ")";
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& e : t) {
          if (e.is_string()) types.push_back(e.get<std::string>());
          else problem(pointer + "/type", "a type list holds type names");
        }
      } else {
        problem(pointer + "/type", "must be a type name or a non-empty list of them");
      }
    } else if (schema.contains("properties") || schema.contains("additionalProperties") || schema.contains("required")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems")) {
      types.push_back("array");
    } else if (schema.contains("minLength") || schema.contains("maxLength") || schema.contains("pattern") ||
               schema.contains("format")) {
      types.push_back("string");
    } else if (schema.contains("minimum") || schema.contains("maximum") || schema.contains("exclusiveMinimum") ||
               schema.contains("exclusiveMaximum")) {
      types.push_back("number");
    } else {
      return "json-value";
    }
    if (types.size() == 1) return typed(schema, types[0], pointer);
    std::string out = "(";
    for (size_t i = 0; i < types.size(); ++i) out += (i ? " | " : "") + typed(schema, types[i], pointer);
    return out + ")";
  }

  // A rule standing for a sub-schema (keeps the generated text linear in the schema's size).
  std::string rule_for(const Json& schema, const std::string& pointer) { return new_rule(expr(schema, pointer)); }

  std::optional<int64_t> count(const Json& schema, const char* key, const std::string& pointer) {
    if (!schema.contains(key)) return std::nullopt;
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      problem(pointer + "/" + key, "must be a non-negative integer");
      return std::nullopt;
    }
    if (v.get<int64_t>() > kMaxCount) {
      unsupported_.push_back(cat(pointer, "/", key, " (over ", kMaxCount, ")"));
      return kMaxCount;
    }
    return v.get<int64_t>();
  }

  std::string typed(const Json& schema, const std::string& type, const std::string& pointer) {
    if (type == "object") return object_expr(schema, pointer);
    if (type == "array") return array_expr(schema, pointer);
    if (type == "string") return string_expr(schema, pointer);
    if (type == "number") return number_expr(schema, pointer);
    if (type == "integer") return integer_expr(schema, pointer);
    if (type == "boolean") return "(\"true\" | \"false\")";
    if (type == "null") return "\"null\"";
    problem(pointer + "/type", cat("unknown type '", type, "' (object, array, string, number, integer, boolean, null)"));
    return "json-value";
  }

  // The integer bound a keyword sets (lower: the least integer allowed; upper: the greatest), or nullopt: the
  // keyword's decimal value (decimal_bound) rounded inward, in decimal digits (a double such as 1e30 is past the
  // integers a double can step through).
  std::optional<BigInteger> integer_bound(const Json& schema, const char* key, bool lower, bool exclusive,
                                          const std::string& pointer) {
    const std::optional<DecimalBound> d = decimal_bound(schema, key, exclusive, pointer);
    if (!d) return std::nullopt;
    const BigInteger whole = BigInteger::parse((d->negative ? "-" : "") + d->integer);  // truncated toward zero
    if (d->fraction.empty()) {
      if (!exclusive) return whole;
      return lower ? whole.plus_one() : whole.minus_one();
    }
    // A fraction: the nearest integer inside is one step from the truncation, on the side away from the bound.
    if (lower) return d->negative ? whole : whole.plus_one();
    return d->negative ? whole.minus_one() : whole;
  }

  // Draft 4 wrote exclusive bounds as booleans beside minimum / maximum.
  bool draft4_exclusive(const Json& schema, const char* flag, const char* bound, const std::string& pointer) {
    if (!schema.contains(flag) || !schema[flag].is_boolean()) return false;
    if (schema[flag].get<bool>() && !schema.contains(bound)) {
      problem(pointer + "/" + flag, cat("true (draft 4) needs ", bound, " beside it"));
    }
    return schema[flag].get<bool>();
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum on an integer: exactly the integers in range
  // (number_range.h); when a bound is given twice the tighter one holds.
  std::string integer_expr(const Json& schema, const std::string& pointer) {
    const bool min_exclusive = draft4_exclusive(schema, "exclusiveMinimum", "minimum", pointer);
    const bool max_exclusive = draft4_exclusive(schema, "exclusiveMaximum", "maximum", pointer);
    std::optional<BigInteger> lo = integer_bound(schema, "minimum", true, min_exclusive, pointer);
    std::optional<BigInteger> hi = integer_bound(schema, "maximum", false, max_exclusive, pointer);
    if (auto b = integer_bound(schema, "exclusiveMinimum", true, true, pointer); b && (!lo || compare(*b, *lo) > 0)) lo = b;
    if (auto b = integer_bound(schema, "exclusiveMaximum", false, true, pointer); b && (!hi || compare(*b, *hi) < 0)) hi = b;
    if (!lo && !hi) return "json-integer";
    const std::optional<std::string> range = integer_range_ebnf(lo, hi);
    if (!range) {
      problem(pointer, cat("no integer is within the bounds (at least ", lo->to_string(), ", at most ",
                           hi->to_string(), ")"));
      return "json-integer";
    }
    return new_rule(*range);
  }

  // The decimal bound a keyword sets, or nullopt. A double comes back as its shortest round-trip decimal (what the
  // schema's author wrote, for any bound a double holds exactly as written).
  std::optional<DecimalBound> decimal_bound(const Json& schema, const char* key, bool exclusive,
                                            const std::string& pointer) {
    if (!schema.contains(key)) return std::nullopt;
    const Json& v = schema[key];
    if (v.is_boolean()) return std::nullopt;  // draft 4's exclusiveMinimum: true, read with minimum
    if (!v.is_number()) {
      problem(pointer + "/" + key, cat("must be a number, found ", v.type_name()));
      return std::nullopt;
    }
    return DecimalBound::parse(v.dump(), exclusive);
  }

  // minimum / maximum / exclusive... on a number: exactly the values in range, spelled without an exponent
  // (number_range.h says why); when a bound is given twice the tighter one holds.
  std::string number_expr(const Json& schema, const std::string& pointer) {
    const bool min_exclusive = draft4_exclusive(schema, "exclusiveMinimum", "minimum", pointer);
    const bool max_exclusive = draft4_exclusive(schema, "exclusiveMaximum", "maximum", pointer);
    std::optional<DecimalBound> lo = decimal_bound(schema, "minimum", min_exclusive, pointer);
    std::optional<DecimalBound> hi = decimal_bound(schema, "maximum", max_exclusive, pointer);
    if (auto b = decimal_bound(schema, "exclusiveMinimum", true, pointer); b && (!lo || compare(*b, *lo) >= 0)) lo = b;
    if (auto b = decimal_bound(schema, "exclusiveMaximum", true, pointer); b && (!hi || compare(*b, *hi) <= 0)) hi = b;
    if (!lo && !hi) return "json-number";
    const std::optional<std::string> range = decimal_range_ebnf(lo, hi);
    if (!range) {
      problem(pointer, cat("no number is within the bounds (", lo ? (lo->exclusive ? "above " : "at least ") : "",
                           lo ? schema_number(*lo) : "", lo && hi ? ", " : "", hi ? (hi->exclusive ? "below " : "at most ") : "",
                           hi ? schema_number(*hi) : "", ")"));
      return "json-number";
    }
    return new_rule(*range);
  }

  static std::string schema_number(const DecimalBound& b) {
    return (b.negative ? "-" : "") + b.integer + (b.fraction.empty() ? "" : "." + b.fraction);
  }

  std::string object_expr(const Json& schema, const std::string& pointer) {
    const std::string w = kWs;
    std::vector<std::pair<std::string, std::string>> props;  // key literal, value rule
    std::set<std::string> required;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) problem(pointer + "/required", "must be an array of property names");
      for (const Json& name : r.is_array() ? r : Json::array()) {
        if (name.is_string()) required.insert(name.get<std::string>());
        else problem(pointer + "/required", "must be an array of property names");
      }
    }
    std::vector<bool> is_required;
    if (schema.contains("properties")) {
      const Json& p = schema["properties"];
      if (!p.is_object()) problem(pointer + "/properties", "must be an object of schemas");
      for (auto it = p.begin(); p.is_object() && it != p.end(); ++it) {
        const std::string at = pointer + "/properties/" + escape_pointer_token(it.key());
        props.emplace_back(json_literal(Json(it.key())), rule_for(it.value(), at));
        is_required.push_back(required.erase(it.key()) > 0);
      }
    }
    for (const std::string& missing : required) {
      problem(pointer + "/required", cat("'", missing, "' is required but has no schema in properties"));
    }
    std::string extra_value;  // empty: no extra members
    if (schema.contains("additionalProperties")) {
      const Json& a = schema["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        extra_value = a.is_boolean() ? "json-value" : rule_for(a, pointer + "/additionalProperties");
      }
    }
    auto member = [&](const std::string& key, const std::string& value) {
      return key + " " + w + " \":\" " + w + " " + value + " " + w;
    };
    // after[i]: members i.. once something was written (each starts with a comma); first[i]: nothing written yet.
    const size_t n = props.size();
    std::vector<std::string> after(n + 1), first(n + 1);
    if (extra_value.empty()) {
      after[n] = "\"\"";
      first[n] = "\"\"";
    } else {
      const std::string extra = member("json-string", extra_value);
      after[n] = new_rule("( \",\" " + w + " " + extra + " )*");
      first[n] = new_rule("( " + extra + " " + after[n] + " )?");
    }
    for (size_t k = n; k-- > 0;) {
      const std::string m = member(props[k].first, props[k].second);
      if (is_required[k]) {
        after[k] = new_rule("\",\" " + w + " " + m + " " + after[k + 1]);
        first[k] = new_rule(m + " " + after[k + 1]);
      } else {
        after[k] = new_rule("( \",\" " + w + " " + m + " )? " + after[k + 1]);
        first[k] = new_rule(m + " " + after[k + 1] + " | " + first[k + 1]);
      }
    }
    return "\"{\" " + w + " " + first[0] + " \"}\"";
  }

  std::string array_expr(const Json& schema, const std::string& pointer) {
    const std::string w = kWs;
    std::string item = "json-value";
    if (schema.contains("items")) {
      if (schema["items"].is_array()) {
        unsupported_.push_back(pointer + "/items (as a list: tuple validation)");
      } else {
        item = rule_for(schema["items"], pointer + "/items");
      }
    }
    const int64_t min = count(schema, "minItems", pointer).value_or(0);
    const std::optional<int64_t> max = count(schema, "maxItems", pointer);
    if (max && *max < min) {
      problem(pointer + "/maxItems", "is below minItems: no array fits");
      return "json-value";
    }
    if (max && *max == 0) return "\"[\" " + w + " \"]\"";
    const std::string more = "( \",\" " + w + " " + item + " " + w + " ){" + std::to_string(std::max<int64_t>(min - 1, 0)) +
                             "," + (max ? std::to_string(*max - 1) : "") + "}";
    const std::string elements = item + " " + w + " " + more;
    return "\"[\" " + w + " " + (min == 0 ? "( " + elements + " )?" : elements) + " \"]\"";
  }

  std::string string_expr(const Json& schema, const std::string& pointer) {
    const std::optional<int64_t> min = count(schema, "minLength", pointer);
    const std::optional<int64_t> max = count(schema, "maxLength", pointer);
    const bool has_pattern = schema.contains("pattern"), has_format = schema.contains("format");
    if ((min || max) + has_pattern + has_format > 1) {
      unsupported_.push_back(pointer + " (pattern, format and minLength/maxLength together)");
      return "json-string";
    }
    if (has_pattern || has_format) {
      const char* key = has_pattern ? "pattern" : "format";
      if (!schema[key].is_string()) {
        problem(pointer + "/" + key, "must be a string");
        return "json-string";
      }
      std::string regex = schema[key].get<std::string>();
      RegexOptions options;
      options.json_string = true;
      options.search = has_pattern;  // JSON Schema patterns match anywhere; formats are whole strings
      if (has_format) {
        const auto it = format_regexes().find(regex);
        if (it == format_regexes().end()) {
          unsupported_.push_back(cat(pointer, "/format (\"", regex, "\")"));
          return "json-string";
        }
        regex = it->second;
      }
      try {
        return "\"\\\"\" " + new_rule(regex_to_ebnf(regex, options)) + " \"\\\"\"";
      } catch (const GrammarError& e) {
        problem(pointer + "/" + key, e.what());
        return "json-string";
      }
    }
    if (min || max) {
      if (max && min && *max < *min) problem(pointer + "/maxLength", "is below minLength: no string fits");
      return "\"\\\"\" json-char{" + std::to_string(min.value_or(0)) + "," + (max ? std::to_string(*max) : "") +
             "} \"\\\"\"";
    }
    return "json-string";
  }

  const Json& root_;
  int depth_ = 0;
  std::vector<std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  std::vector<std::string> unsupported_;
  std::vector<std::string> problems_;
};

}  // namespace

std::string json_schema_to_ebnf(std::string_view schema_json) {
  Json schema;
  try {
    schema = Json::parse(schema_json);
  } catch (const nlohmann::json::parse_error& e) {
    int line = 1, column = 1;
    for (size_t i = 0; i + 1 < e.byte && i < schema_json.size(); ++i) {
      if (schema_json[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw GrammarError(cat("json schema: ", line, ":", column, ": not valid JSON (", e.what(), ")"), line, column);
  } catch (const nlohmann::json::exception& e) {  // e.g. a number past a double's range: out_of_range, no position
    throw GrammarError(cat("json schema: not valid JSON (", e.what(), ")"), 0, 0);
  }
  return SchemaConverter(schema).run();
}

std::string json_object_ebnf() { return "root ::= json-object\n" + base_rules(); }
std::string json_value_ebnf() { return "root ::= json-value\n" + base_rules(); }

}  // namespace strata::text::grammar
