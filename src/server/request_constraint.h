#pragma once
// What a request's output must follow, for the engine (engine/output_constraint.h): the grammar of its
// response_format or structured_outputs, the tool-call grammar its tool_choice forces, the DSML markup that
// tool_choice "none" bans, and, in thinking mode, the "</think>" after which the grammar starts. One source for
// the server and `strata generate --input`.
#include <memory>

#include "engine/output_constraint.h"
#include "server/openai_protocol.h"
#include "text/grammar/grammar_cache.h"
#include "text/tokenizer.h"

namespace strata::server {

// The vocabularies a server's grammar cache compiles against: `text` with every added token excluded, `markup`
// with the DSML token matchable too (tool-call grammars; null when the tokenizer has no DSML token).
std::unique_ptr<text::grammar::GrammarCache> make_grammar_cache(const text::Tokenizer& tokenizer,
                                                                 text::grammar::GrammarCacheLimits limits = {});

// Whether the request may need the grammar cache (a grammar, or tools whose calls follow one).
bool needs_grammars(const CompletionRequest& request);

// Null when nothing is constrained. Throws RequestError (400) for a grammar, regex, schema or choice list that
// does not compile (the grammar engine's message, with its line:column or the JSON pointers) or is over a limit
// of the cache, naming the field it came from.
std::shared_ptr<const engine::OutputConstraint> request_constraint(const CompletionRequest& request,
                                                                   const text::Tokenizer& tokenizer,
                                                                   text::grammar::GrammarCache& grammars);

}  // namespace strata::server
