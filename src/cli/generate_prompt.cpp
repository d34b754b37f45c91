#include "cli/generate_prompt.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli/default_model.h"
#include "core/error.h"
#include "text/chat_encoding.h"
#include "text/output_parser.h"
#ifdef STRATA_WITH_SERVER
#include "server/openai_protocol.h"
#include "server/request_constraint.h"
#include "server/request_prompts.h"
#endif

namespace strata::cli {

namespace {

// The request body of --chat FILE ("-": stdin).
std::string read_chat_body(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::ifstream in(path);
  if (!in) fail("option --chat: cannot read '", path, "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

#ifdef STRATA_WITH_SERVER
// A --chat request through the server's own parser and prompt rules (server/openai_protocol.h,
// server/request_prompts.h), so a file is refused exactly where `strata serve` and `--input` refuse its body. What
// one printed reply cannot show (several choices, a stream, logprobs) is refused by name.
void read_chat(Prompt& p, const std::string& file, const std::string& dir, const model::ModelConfig& mc,
               int64_t context) {
  const std::string where = file == "-" ? "--chat (stdin)" : "--chat " + file;
  try {
    server::ProtocolLimits limits;
    limits.vocab_size = mc.vocab_size;
    const server::CompletionRequest r =
        server::parse_completion_request(server::Endpoint::kChatCompletions, read_chat_body(file), limits);
    if (r.sampling.n != 1)
      fail(where, ": n: strata generate prints one reply, found n = ", r.sampling.n,
           " (strata generate --input runs requests with n > 1)");
    if (r.stream) fail(where, ": stream: strata generate prints the whole reply at the end; leave stream out or false");
    if (r.logprobs)
      fail(where, ": logprobs: strata generate prints no logprobs (strata generate --input and strata serve do)");
    // The grammar cache of structured outputs / tool_choice, for this one request (the constraint keeps what it
    // compiled alive).
    std::unique_ptr<text::grammar::GrammarCache> grammars;
    if (server::needs_grammars(r)) grammars = server::make_grammar_cache(*p.tokenizer);
    const server::TokenizedPrompts t = server::tokenize_prompts(
        r, *p.tokenizer, {context, mc.vocab_size, default_served_model_name(dir), true, grammars.get()});
    p.ids = t.prompts.at(0);
    p.max_tokens = t.max_tokens.at(0);
    p.chat = r.chat_options;
    p.chat_sampling = r.sampling;
    p.chat_sampling->constraint = t.constraint;
    p.include_stop = r.include_stop_str_in_output;
    p.parallel_tool_calls = r.parallel_tool_calls;
  } catch (const server::RequestError& e) {
    fail(where, ": ", e.what());
  }
}
#else
// Without the server's OpenAI layer only what the chat encoder reads is checked, and max_tokens.
void read_chat(Prompt& p, const std::string& file, const std::string&, const model::ModelConfig&, int64_t context) {
  const nlohmann::ordered_json request = text::parse_chat_request_body(read_chat_body(file));
  p.chat = text::chat_request_options(request);
  p.ids = text::prompt_ids(*p.tokenizer, text::encode_chat_v4(request));
  p.max_tokens = context - static_cast<int64_t>(p.ids.size());
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (request.contains(key)) {
      if (!request[key].is_number_integer() || request[key].get<int64_t>() < 0)
        fail(file, ": \"", key, "\" must be a non-negative integer, found ", request[key].dump());
      p.max_tokens = request[key].get<int64_t>();
    }
}
#endif

}  // namespace

Prompt read_prompt(const Args& args, const std::string& dir, const model::ModelConfig& mc, int64_t context) {
  Prompt p;
  if (args.has("prompt-ids")) {
    p.ids = parse_id_list(args.str("prompt-ids"), "prompt-ids");
    return p;
  }
  p.tokenizer = text::Tokenizer::load(dir);
  if (args.has("prompt")) {
    p.mode = PromptMode::Text;
    p.option = "prompt";
    p.ids = p.tokenizer->encode(args.str("prompt"), args.has("parse-special"), true);
    return p;
  }
  p.mode = PromptMode::Chat;
  p.option = "chat";
  read_chat(p, args.str("chat"), dir, mc, context);
  return p;
}

// Shows the generated tokens as the prompt mode asks: ids, text, or the parsed chat message.
void print_output(const Prompt& p, const std::vector<int32_t>& generated, const std::string& text) {
  if (p.mode == PromptMode::Ids) {
    for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? "," : "", generated[i]);
    std::printf("\n");
    return;
  }
  if (p.mode == PromptMode::Text) {
    std::printf("%s\n", text.c_str());
    return;
  }
  text::OutputParser parser({.thinking = p.chat.thinking, .tools_enabled = !p.chat.tool_names.empty()});
  text::OutputDelta a = parser.push(text), b = parser.finish();
  nlohmann::ordered_json msg = {{"reasoning_content", a.reasoning_content + b.reasoning_content},
                                {"content", a.content + b.content},
                                {"tool_calls", nlohmann::ordered_json::array()}};
  for (const text::ParsedToolCall& call : parser.tool_calls()) {
    if (!p.parallel_tool_calls && !msg["tool_calls"].empty()) break;
    msg["tool_calls"].push_back({{"id", call.id}, {"type", "function"},
                                 {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  for (const std::string& w : parser.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::printf("%s\n", msg.dump(2).c_str());
}

ReplyText::ReplyText(const Prompt& p) : detok_(*p.tokenizer) {
#ifdef STRATA_WITH_SERVER
  if (p.chat_sampling && !p.chat_sampling->stop.empty()) matcher_.emplace(p.chat_sampling->stop, p.include_stop);
#endif
}

bool ReplyText::push(int32_t id) {
  const std::string piece = detok_.push(id);
#ifdef STRATA_WITH_SERVER
  if (matcher_) {
    text_ += matcher_->push(piece);
    return !matcher_->stopped();
  }
#endif
  text_ += piece;
  return true;
}

std::string ReplyText::finish() {
  const std::string rest = detok_.flush();
#ifdef STRATA_WITH_SERVER
  if (matcher_) {
    if (!matcher_->stopped()) text_ += matcher_->push(rest);
    if (!matcher_->stopped()) text_ += matcher_->flush();
    return text_;
  }
#endif
  return text_ + rest;
}

}  // namespace strata::cli
