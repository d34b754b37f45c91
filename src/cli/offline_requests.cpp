#include "cli/offline_requests.h"

#include <variant>

#include "text/chat_encoding.h"
#include "text/tokenizer.h"

namespace strata::cli {

namespace {

using ojson = nlohmann::ordered_json;
using server::RequestError;

std::string dump(const ojson& value) { return value.dump(-1, ' ', false, ojson::error_handler_t::replace); }

RequestError bad_line(std::string param, const std::string& message) {
  return RequestError(400, std::move(param), message);
}

// Takes the id the line carries ("custom_id" or "id") out of `object`.
ojson take_custom_id(ojson& object) {
  ojson id;
  for (const char* key : {"custom_id", "id"}) {
    const auto it = object.find(key);
    if (it == object.end()) continue;
    if (!it->is_string() && !it->is_number() && !it->is_null())
      throw bad_line(key, cat(key, ": expected a string or a number"));
    if (!id.is_null() && !it->is_null()) throw bad_line(key, "give custom_id or id, not both");
    if (!it->is_null()) id = *it;
    object.erase(it);
  }
  return id;
}

// The endpoint and body of a line: a bare request body, or an OpenAI batch-API line {custom_id, method, url, body}.
std::pair<server::Endpoint, ojson> split_line(ojson& line) {
  if (!line.contains("body")) {
    const server::Endpoint endpoint =
        line.contains("messages") ? server::Endpoint::kChatCompletions : server::Endpoint::kCompletions;
    return {endpoint, std::move(line)};
  }
  server::Endpoint endpoint = server::Endpoint::kChatCompletions;
  ojson body;
  for (auto& [key, value] : line.items()) {
    if (key == "method") {
      if (value != "POST") throw bad_line("method", "method: expected \"POST\"");
    } else if (key == "url") {
      if (value == "/v1/chat/completions") endpoint = server::Endpoint::kChatCompletions;
      else if (value == "/v1/completions") endpoint = server::Endpoint::kCompletions;
      else throw bad_line("url", "url: expected \"/v1/chat/completions\" or \"/v1/completions\"");
    } else if (key == "body") {
      if (!value.is_object()) throw bad_line("body", "body: expected a JSON object (the request body)");
      body = std::move(value);
    } else {
      throw bad_line(key, cat(key, ": unknown field of a batch line (it takes custom_id, method, url and body)"));
    }
  }
  if (!line.contains("url")) throw bad_line("url", "url: missing (a line with a body names its endpoint in url)");
  return {endpoint, std::move(body)};
}

// Tokenizes the prompts and applies the server's context rules (Server::prepare does the same for HTTP bodies).
void tokenize(OfflineRequest& out, const text::Tokenizer& tokenizer, const OfflineLimits& limits) {
  server::CompletionRequest& r = out.request;
  const bool chat = r.endpoint == server::Endpoint::kChatCompletions;
  if (!r.model.empty() && r.model != limits.served_model_name)
    throw RequestError(404, "model",
                       cat("the model '", r.model, "' does not exist (this server serves '", limits.served_model_name, "')"),
                       "invalid_request_error", "model_not_found");
  if (r.stream) throw bad_line("stream", "stream: offline mode writes whole responses; leave stream out or false");
  if (chat) {
    std::vector<text::PromptPiece> pieces;
    try {
      pieces = text::encode_chat_v4(r.chat);
    } catch (const Error& e) {
      throw server::as_request_error(e);
    }
    out.prompts.push_back(text::prompt_ids(tokenizer, pieces));
  } else {
    for (size_t p = 0; p < r.prompts.size(); ++p) {
      const std::string name = r.prompts.size() > 1 ? cat("prompt[", p, "]") : "prompt";
      if (const auto* prompt_text = std::get_if<std::string>(&r.prompts[p])) {
        try {
          out.prompts.push_back(tokenizer.encode(*prompt_text, /*parse_special=*/true,
                                                 /*add_bos=*/r.add_special_tokens && tokenizer.add_bos()));
        } catch (const Error& e) {
          throw RequestError(400, name, cat(name, ": ", e.what()));
        }
        if (r.echo) out.echo.push_back(*prompt_text);
      } else {
        const auto& ids = std::get<std::vector<int32_t>>(r.prompts[p]);
        for (int32_t id : ids)
          if (id >= limits.protocol.vocab_size)
            throw RequestError(400, name, cat(name, ": token id ", id, " is outside the vocabulary [0, ",
                                              limits.protocol.vocab_size, ")"));
        out.prompts.push_back(ids);
        if (r.echo) out.echo.push_back(tokenizer.decode(ids, r.skip_special_tokens));
      }
    }
  }
  const int64_t context = limits.max_model_len;
  const std::string prompt_param = chat ? "messages" : "prompt";
  for (size_t p = 0; p < out.prompts.size(); ++p) {
    const auto length = static_cast<int64_t>(out.prompts[p].size());
    const std::string name = !chat && out.prompts.size() > 1 ? cat("prompt[", p, "]") : prompt_param;
    if (length == 0) throw bad_line(name, cat(name, ": the prompt is empty"));
    if (length >= context)
      throw bad_line(name, cat(name, ": the prompt has ", length, " tokens, which leaves no room in the context of ",
                               context, " tokens (--max-model-len)"));
    if (r.max_tokens_given && length + r.sampling.max_tokens > context)
      throw bad_line(r.max_tokens_param,
                     cat(r.max_tokens_param, ": the prompt has ", length, " tokens and the context is ", context,
                         " tokens, so at most ", context - length, " can be generated; found ", r.sampling.max_tokens));
    // Unset: chat generates until the context is full (as vLLM does); completions default to 16 (OpenAI).
    out.max_tokens.push_back(r.max_tokens_given ? r.sampling.max_tokens
                                                : chat ? context - length : std::min<int64_t>(16, context - length));
  }
}

}  // namespace

OfflineRequest prepare_offline_request(int64_t line, std::string_view text, const text::Tokenizer& tokenizer,
                                       const OfflineLimits& limits) {
  OfflineRequest out;
  out.line = line;
  try {
    ojson parsed;
    try {
      parsed = ojson::parse(text);
    } catch (const ojson::exception& e) {
      throw bad_line("", cat("the line is not valid JSON (", e.what(), ")"));
    }
    if (!parsed.is_object()) throw bad_line("", "the line must be a JSON object (a request body)");
    out.custom_id = take_custom_id(parsed);
    auto [endpoint, body] = split_line(parsed);
    if (body.contains("custom_id") || body.contains("id")) {
      const ojson inner = take_custom_id(body);
      if (!out.custom_id.is_null() && !inner.is_null()) throw bad_line("custom_id", "custom_id: given twice");
      if (out.custom_id.is_null()) out.custom_id = inner;
    }
    out.request = server::parse_completion_request(endpoint, dump(body), limits.protocol);
    tokenize(out, tokenizer, limits);
  } catch (const RequestError& e) {
    out.error = e;
  } catch (const std::exception& e) {
    out.error = RequestError(500, "", cat("internal error: ", e.what()), "server_error");
  }
  return out;
}

std::string success_record(int64_t line, const ojson& custom_id, const std::string& response_body) {
  return cat("{\"line\":", line, ",\"custom_id\":", dump(custom_id), ",\"response\":{\"status_code\":200,\"body\":",
             response_body, "},\"error\":null}");
}

std::string error_record(int64_t line, const ojson& custom_id, const RequestError& error) {
  const std::string body = server::error_body(error);
  const ojson parsed = ojson::parse(body);
  return cat("{\"line\":", line, ",\"custom_id\":", dump(custom_id), ",\"response\":{\"status_code\":", error.status(),
             ",\"body\":", body, "},\"error\":", dump(parsed.at("error")), "}");
}

}  // namespace strata::cli
