#include "cli/offline_requests.h"

#include <variant>

#include "server/request_prompts.h"
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

// Tokenizes the prompts under the server's own rules (server/request_prompts.h), without streaming.
void tokenize(OfflineRequest& out, const text::Tokenizer& tokenizer, const OfflineLimits& limits) {
  server::TokenizedPrompts tokenized = server::tokenize_prompts(
      out.request, tokenizer,
      {limits.max_model_len, limits.protocol.vocab_size, limits.served_model_name, /*streaming=*/false,
       limits.grammars && server::needs_grammars(out.request) ? &limits.grammars() : nullptr});
  out.prompts = std::move(tokenized.prompts);
  out.constraint = std::move(tokenized.constraint);
  out.max_tokens = std::move(tokenized.max_tokens);
  out.echo = std::move(tokenized.echo);
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
