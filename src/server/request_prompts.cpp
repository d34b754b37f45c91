#include "server/request_prompts.h"

#include <algorithm>
#include <variant>

#include "text/chat_encoding.h"

namespace strata::server {

TokenizedPrompts tokenize_prompts(const CompletionRequest& r, const text::Tokenizer& tokenizer,
                                  const PromptRules& rules) {
  const bool chat = r.endpoint == Endpoint::kChatCompletions;
  if (!r.model.empty() && r.model != rules.served_model_name)
    throw RequestError(404, "model",
                       cat("the model '", r.model, "' does not exist (this server serves '", rules.served_model_name,
                           "')"),
                       "invalid_request_error", "model_not_found");
  if (r.stream && !rules.streaming)
    throw RequestError(400, "stream", "stream: offline mode writes whole responses; leave stream out or false");
  TokenizedPrompts out;
  if (chat) {
    std::vector<text::PromptPiece> pieces;
    try {
      pieces = text::encode_chat_v4(r.chat);
    } catch (const Error& e) {
      throw as_request_error(e);
    }
    out.prompts.push_back(text::prompt_ids(tokenizer, pieces));  // an Error here is the server's (500)
  } else {
    for (size_t p = 0; p < r.prompts.size(); ++p) {
      const std::string name = r.prompts.size() > 1 ? cat("prompt[", p, "]") : "prompt";
      if (const auto* text = std::get_if<std::string>(&r.prompts[p])) {
        // Completions prompts are raw model input: special-token spellings become those tokens and the BOS is
        // added, as HF's tokenizer(prompt) and vLLM do.
        try {
          out.prompts.push_back(tokenizer.encode(*text, /*parse_special=*/true,
                                                 /*add_bos=*/r.add_special_tokens && tokenizer.add_bos()));
        } catch (const Error& e) {
          throw RequestError(400, name, cat(name, ": ", e.what()));
        }
        if (r.echo) out.echo.push_back(*text);
      } else {
        const auto& ids = std::get<std::vector<int32_t>>(r.prompts[p]);
        for (int32_t id : ids)
          if (id >= rules.vocab_size)
            throw RequestError(400, name, cat(name, ": token id ", id, " is outside the vocabulary [0, ",
                                              rules.vocab_size, ")"));
        out.prompts.push_back(ids);
        if (r.echo) out.echo.push_back(tokenizer.decode(ids, r.skip_special_tokens));
      }
    }
  }
  const int64_t context = rules.max_model_len;
  const std::string prompt_param = chat ? "messages" : "prompt";
  for (size_t p = 0; p < out.prompts.size(); ++p) {
    const auto length = static_cast<int64_t>(out.prompts[p].size());
    const std::string name = !chat && out.prompts.size() > 1 ? cat("prompt[", p, "]") : prompt_param;
    if (length == 0) throw RequestError(400, name, cat(name, ": the prompt is empty"));
    if (length >= context)
      throw RequestError(400, name, cat(name, ": the prompt has ", length,
                                        " tokens, which leaves no room in the context of ", context,
                                        " tokens (--max-model-len)"));
    if (r.max_tokens_given && length + r.sampling.max_tokens > context)
      throw RequestError(400, r.max_tokens_param,
                         cat(r.max_tokens_param, ": the prompt has ", length, " tokens and the context is ", context,
                             " tokens, so at most ", context - length, " can be generated; found ",
                             r.sampling.max_tokens));
    // Unset: chat generates until the context is full (as vLLM does); completions default to 16 (OpenAI).
    out.max_tokens.push_back(r.max_tokens_given ? r.sampling.max_tokens
                                                : chat ? context - length : std::min<int64_t>(16, context - length));
  }
  if (rules.grammars)
    out.constraint = request_constraint(r, tokenizer, *rules.grammars);
  else if (r.grammar)
    throw RequestError(400, r.grammar->param, cat(r.grammar->param, ": structured outputs are not available here"));
  return out;
}

}  // namespace strata::server
