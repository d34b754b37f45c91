#pragma once
// tool_choice as a grammar: the DSML tool-call markup a DeepSeek-V4 completion may (or must) end with, restricted to
// the request's tools, each call's parameters to its function's JSON Schema. The markup is the chat encoder's
// (text/chat_encoding.cpp, render_tool_call; text/dsml.h describes it):
//
//   {content}\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n
//   <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n
//   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>
//
// The EBNF names the DSML token by its bytes ("｜DSML｜"), so it compiles against a vocabulary where that token is
// matchable (TokenVocabulary::from_tokenizer's markup list).
//
// Policies: free text (the content before a call, string parameter values) never holds the fullwidth bar U+FF5C
// that every DSML tag starts with, so text cannot open markup the grammar does not know. Parameters come in the
// schema's property order, the required ones always, the others optionally. A "type": "string" parameter is raw
// text (string="true"), one of its enum / const values when it has them; every other parameter is JSON text
// (string="false") following its schema (text/grammar/json_schema_to_grammar.h; unsupported keywords are errors).
#include <string>

#include <nlohmann/json.hpp>

#include "text/chat_request.h"

namespace strata::text {

struct ToolCallGrammarOptions {
  enum Choice { kAuto, kRequired, kFunction };
  Choice choice = kAuto;  // auto: text, then optionally calls; required / function: a call block only
  std::string function;   // kFunction: the one function that may be called
  bool parallel = true;   // false: exactly one call in the block
  ChatEncoding encoding = ChatEncoding::kV4;  // the tags' spelling: V4's, or DeepSeek-V4.1's spaced ones
};

// `tools`: the request's tools array ([{"type": "function", "function": {"name", "parameters"}}], checked by
// text/chat_request.h). Throws grammar::GrammarError naming the tool and the schema problem.
std::string tool_call_ebnf(const nlohmann::ordered_json& tools, const ToolCallGrammarOptions& options);

}  // namespace strata::text
