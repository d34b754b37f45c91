// `strata chat-template`: the exact DeepSeek-V4 prompt (or its token ids) for an OpenAI chat-completions request.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "text/chat_encoding.h"
#include "text/tokenizer.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata chat-template — render the DeepSeek-V4 prompt for an OpenAI chat-completions request.

options:
  --model DIR      model directory; with --ids its tokenizer.json and tokenizer_config.json are loaded (without
                   --ids the prompt depends on the request only and --model may be left out)
  --request F      the request body as JSON: messages, tools, tool_choice, response_format, reasoning_effort,
                   chat_template_kwargs.thinking (other fields, such as sampling settings, are ignored);
                   "-" reads standard input
  --ids            print the prompt's token ids (comma-separated, as generate --prompt-ids takes them) instead of
                   its text; special-token spellings inside the conversation stay plain text
  --pieces         print the prompt as a JSON array of pieces, {"text": ..., "control": true|false}: control
                   pieces are the tokens the encoder inserted, everything else is text from the request
  --encoding E     v4 (default: DeepSeek-V4's encoding_dsv4) or v4.1 (DeepSeek-V4.1's encoding_dsv41: the
                   <｜System｜> token, a numeric reasoning_effort — low, high, xhigh, max or 1-100, default high =
                   50 — and spaced DSML tags; docs/chat_encoding_v41.md)

Without --ids or --pieces, prints the prompt exactly (UTF-8, no newline added).

examples (from the repository root):
  echo '{"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"thinking": true}}' > /tmp/req.json
  strata chat-template --request /tmp/req.json
  strata chat-template --request /tmp/req.json --encoding v4.1
  strata chat-template --model models/demo --request /tmp/req.json --ids
)";

std::string read_request(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("option --request: cannot open '", path, "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

int chat_template_command(const std::vector<std::string>& argv) {
  const Args args(argv, {"model", "request", "encoding"}, {"help", "ids", "pieces"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (args.has("ids") && args.has("pieces")) fail("options --ids and --pieces: choose one");
  const std::string path = args.required("request");
  if (args.has("ids") && !args.has("model")) fail("option --ids needs --model DIR (the tokenizer comes from there)");

  text::ChatEncoding encoding = text::ChatEncoding::kV4;
  if (args.has("encoding")) {
    const std::string name = args.str("encoding");
    if (name == "v4.1") encoding = text::ChatEncoding::kV41;
    else if (name != "v4") fail("option --encoding: expected v4 or v4.1, found '", name, "'");
  }
  const std::string body = read_request(path);
  std::vector<text::PromptPiece> pieces;
  try {
    pieces = text::encode_chat(text::parse_chat_request_body(body), encoding);
  } catch (const Error& e) {
    fail(path == "-" ? "standard input" : path, ": ", e.what());
  }

  if (args.has("ids")) {
    const text::Tokenizer tokenizer = text::Tokenizer::load(args.str("model"));
    const std::vector<int32_t> ids = text::prompt_ids(tokenizer, pieces);
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("\n");
  } else if (args.has("pieces")) {
    std::printf("[\n");
    for (size_t i = 0; i < pieces.size(); ++i) {
      const nlohmann::ordered_json piece = {{"text", pieces[i].text}, {"control", pieces[i].control}};
      std::printf("  %s%s\n", piece.dump().c_str(), i + 1 < pieces.size() ? "," : "");
    }
    std::printf("]\n");
  } else {
    const std::string prompt = text::render_prompt(pieces);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  }
  return 0;
}

}  // namespace strata::cli
