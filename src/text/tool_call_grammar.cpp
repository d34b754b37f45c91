#include "text/tool_call_grammar.h"

#include <cstdio>

#include "text/dsml.h"
#include "text/grammar/ebnf_parser.h"
#include "text/grammar/json_schema_to_grammar.h"

namespace strata::text {

namespace {

using ojson = nlohmann::ordered_json;
using grammar::GrammarError;

// An EBNF string literal holding `text` exactly.
std::string literal(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// `ebnf`'s rules renamed with `prefix` (so several schemas' grammars live in one), and the name of its root.
std::string prefixed_rules(const std::string& ebnf, const std::string& prefix, std::string& root) {
  grammar::Grammar g = grammar::parse_ebnf(ebnf);
  for (grammar::Rule& rule : g.rules) rule.name = prefix + rule.name;
  root = g.rules[g.root].name;
  return grammar::to_ebnf(g);
}

// One parameter's value: raw text (string="true") or JSON text following its schema (string="false").
std::string parameter_rule(const std::string& tool, const std::string& name, const ojson& schema,
                           const std::string& prefix, const dsml::Tags& tags, std::string& rules) {
  const bool is_string = schema.is_object() && schema.value("type", ojson()).is_string() && schema["type"] == "string";
  const std::string open = cat("\"", tags.parameter_open, " name=\\\"\" ", literal(name), " \"\\\" string=\\\"");
  const std::string close = cat(" \"", tags.parameter_close, "\\n\"");
  if (is_string) {
    std::string value = "raw-text";
    std::vector<std::string> values;
    if (schema.contains("const") && schema["const"].is_string()) values.push_back(schema["const"].get<std::string>());
    if (schema.contains("enum") && schema["enum"].is_array())
      for (const ojson& v : schema["enum"])
        if (v.is_string()) values.push_back(v.get<std::string>());
    if (!values.empty()) {
      value = "(";
      for (size_t i = 0; i < values.size(); ++i) value += (i ? " | " : "") + literal(values[i]);
      value += ")";
    }
    return open + "true\\\">\" " + value + close;
  }
  std::string root;
  try {
    rules += prefixed_rules(grammar::json_schema_to_ebnf(schema.dump()), prefix, root);
  } catch (const GrammarError& e) {
    throw GrammarError(cat("function ", tool, ", parameter ", name, ": ", e.what()), e.line(), e.column());
  }
  return open + "false\\\">\" " + root + close;
}

}  // namespace

std::string tool_call_ebnf(const ojson& tools, const ToolCallGrammarOptions& options) {
  const dsml::Tags& tags = options.encoding == ChatEncoding::kV41 ? dsml::kV41Tags : dsml::kV4Tags;
  std::string rules, invokes;
  int index = 0;
  for (const ojson& tool : tools) {
    const ojson& function = tool.at("function");
    const std::string name = function.at("name").get<std::string>();
    if (options.choice == ToolCallGrammarOptions::kFunction && name != options.function) continue;
    const std::string prefix = cat("t", index, "-");
    std::string body = cat("\"", tags.invoke_open, " name=\\\"\" ", literal(name), " \"\\\">\\n\"");
    const ojson parameters = function.value("parameters", ojson::object());
    const ojson properties = parameters.is_object() ? parameters.value("properties", ojson::object()) : ojson::object();
    std::vector<std::string> required;
    if (parameters.is_object() && parameters.contains("required") && parameters["required"].is_array())
      for (const ojson& r : parameters["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    if (!properties.is_object() || properties.empty()) body += " \"\\n\"";  // the encoder's empty invoke
    int p = 0;
    for (const auto& [key, schema] : properties.items()) {
      const std::string param = parameter_rule(name, key, schema, cat(prefix, "p", p++, "-"), tags, rules);
      const bool needed = std::find(required.begin(), required.end(), key) != required.end();
      body += needed ? " " + param : " (" + param + ")?";
    }
    body += cat(" \"", tags.invoke_close, "\"");
    rules += cat("tool-", index, " ::= ", body, "\n");
    invokes += cat(invokes.empty() ? "" : " | ", "tool-", index);
    ++index;
  }
  if (index == 0) throw GrammarError(cat("no function named \"", options.function, "\" among the tools"), 0, 0);
  std::string out;
  const std::string calls = options.parallel ? "invoke ( \"\\n\" invoke )*" : "invoke";
  if (options.choice == ToolCallGrammarOptions::kAuto)
    out += "root ::= raw-text ( \"\\n\\n\" calls )?\n";
  else
    out += "root ::= \"\\n\\n\"? calls\n";
  out += cat("calls ::= \"", tags.tool_calls_open, "\\n\" ", calls, " \"\\n", tags.tool_calls_close, "\"\n");
  out += "invoke ::= " + invokes + "\n";
  out += "raw-text ::= [^\\uff5c]*\n";
  return out + rules;
}

}  // namespace strata::text
