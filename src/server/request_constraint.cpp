#include "server/request_constraint.h"

#include "text/chat_encoding.h"
#include "text/dsml.h"
#include "text/grammar/ebnf_parser.h"
#include "text/tool_call_grammar.h"

namespace strata::server {

namespace {

// The DSML token: the one added token that every DSML tag holds ("<" + it + "invoke" ...).
std::optional<int32_t> dsml_token(const text::Tokenizer& tokenizer) {
  return tokenizer.token_id(text::v4_tokens::kDsml);
}

std::shared_ptr<const text::grammar::CompiledGrammar> compiled(text::grammar::GrammarCache& grammars,
                                                               text::grammar::SourceKind kind,
                                                               const std::string& source, const std::string& param) {
  try {
    return grammars.get(kind, source);
  } catch (const text::grammar::GrammarError& e) {
    throw RequestError(400, param, cat(param, ": ", e.what()));
  }
}

}  // namespace

std::unique_ptr<text::grammar::GrammarCache> make_grammar_cache(const text::Tokenizer& tokenizer,
                                                                 text::grammar::GrammarCacheLimits limits) {
  using text::grammar::TokenVocabulary;
  auto plain = std::make_shared<const TokenVocabulary>(TokenVocabulary::from_tokenizer(tokenizer));
  std::shared_ptr<const TokenVocabulary> markup;
  if (dsml_token(tokenizer))
    markup = std::make_shared<const TokenVocabulary>(
        TokenVocabulary::from_tokenizer(tokenizer, {text::v4_tokens::kDsml}));
  return std::make_unique<text::grammar::GrammarCache>(std::move(plain), std::move(markup), limits);
}

bool needs_grammars(const CompletionRequest& r) {
  return r.grammar || (r.endpoint == Endpoint::kChatCompletions && !r.chat_options.tool_names.empty());
}

std::shared_ptr<const engine::OutputConstraint> request_constraint(const CompletionRequest& r,
                                                                   const text::Tokenizer& tokenizer,
                                                                   text::grammar::GrammarCache& grammars) {
  auto c = std::make_shared<engine::OutputConstraint>();
  const bool chat = r.endpoint == Endpoint::kChatCompletions;
  if (chat) {
    const text::ChatRequestOptions& o = r.chat_options;
    const std::optional<int32_t> dsml = dsml_token(tokenizer);
    // Thinking mode: the completion starts inside the reasoning, which stays free text; the answer's grammar
    // starts after "</think>".
    if (o.thinking) c->starts_after = tokenizer.token_id(text::v4_tokens::kThinkEnd);
    const bool forced = o.tool_choice == text::ToolChoice::kRequired || o.tool_choice == text::ToolChoice::kFunction;
    if (forced && r.grammar)
      throw RequestError(400, "tool_choice", cat("tool_choice: a forced tool call and ", r.grammar->param,
                                                 " cannot both hold; leave one out"));
    // tool_choice "none" with tools declared: the model was shown them, so the markup is banned outright.
    if (o.tool_choice == text::ToolChoice::kNone && !o.tool_names.empty() && dsml) c->banned.push_back(*dsml);
    // A tokenizer without the DSML token (not a V4 one) cannot spell the markup as the model does: "auto" stays
    // free there, and a forced call is refused.
    if (forced && !dsml)
      throw RequestError(400, "tool_choice", "tool_choice: the tokenizer has no DSML token, so a tool call cannot be forced");
    if (!o.tool_names.empty() && o.tool_choice != text::ToolChoice::kNone && !r.grammar && dsml) {
      text::ToolCallGrammarOptions options;
      options.choice = o.tool_choice == text::ToolChoice::kAuto       ? text::ToolCallGrammarOptions::kAuto
                       : o.tool_choice == text::ToolChoice::kRequired ? text::ToolCallGrammarOptions::kRequired
                                                                     : text::ToolCallGrammarOptions::kFunction;
      options.function = o.tool_choice_function;
      options.parallel = r.parallel_tool_calls;
      std::string ebnf;
      try {
        ebnf = text::tool_call_ebnf(r.chat.at("tools"), options);
      } catch (const text::grammar::GrammarError& e) {
        throw RequestError(400, "tools", cat("tools: ", e.what()));
      }
      c->grammar = compiled(grammars, text::grammar::SourceKind::kMarkupEbnf, ebnf, "tools");
    }
  }
  if (r.grammar) c->grammar = compiled(grammars, r.grammar->kind, r.grammar->source, r.grammar->param);
  if (!c->grammar && c->banned.empty()) return nullptr;
  if (!c->grammar) c->starts_after.reset();
  return c;
}

}  // namespace strata::server
