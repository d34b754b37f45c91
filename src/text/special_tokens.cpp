#include "text/special_tokens.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::text {

// Where the list comes from (public sources, read 2026-11):
//  - deepseek-ai's reference chat encoder for V4, `encoding/encoding_dsv4.py` (shipped with the V4 checkpoints;
//    copies e.g. in github.com/supermy/ds4rs): the spellings "<think>", "</think>", "｜DSML｜" (DSML tags are
//    "<｜DSML｜invoke ...>" etc.), "<｜latest_reminder｜>" and the task tokens "<｜action｜>", "<｜query｜>",
//    "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>";
//  - the ids: a table of the V4.1-Flash tokenizer.json's added tokens in a public Swift port (DeepSeek4_1
//    ModelConfiguration.specialTokens), and token-count scripts that check "<think>" = 128821, "</think>" =
//    128822, "｜DSML｜" = 128825, "<｜latest_reminder｜>" = 128828 against both deepseek-recipe's
//    static/tokenizers/v4 and v41 tokenizer.json, and "<｜System｜>" = 128799.
// The "special" flags are not in those sources. We follow V3, where the chat-structure tokens ("<｜User｜>",
// "<｜tool▁calls▁begin｜>", ...) are special=false / normalized=true, so decode(skip_special=true) keeps them:
// every token below is non-special. V4.1's multimodal tokens (129262–129279) are not part of V4.
const std::vector<V4AddedToken>& v4_added_tokens() {
  static const std::vector<V4AddedToken> tokens = {
      {128799, "<｜System｜>", false},
      {128815, "<｜begin▁of▁repo▁name｜>", false},
      {128816, "<｜end▁of▁repo▁name｜>", false},
      {128817, "<｜begin▁of▁file▁name｜>", false},
      {128818, "<｜end▁of▁file▁name｜>", false},
      {128819, "<｜begin▁of▁file｜>", false},
      {128820, "<｜end▁of▁file｜>", false},
      {128821, "<think>", false},
      {128822, "</think>", false},
      {128823, "<｜place▁holder▁for▁copy｜>", false},
      {128824, "<｜place▁holder▁for▁pointer▁replace｜>", false},
      {128825, "｜DSML｜", false},
      {128826, "<｜begin▁sys｜>", false},
      {128827, "<｜end▁sys｜>", false},
      {128828, "<｜latest_reminder｜>", false},
      {128829, "<｜action｜>", false},
      {128830, "<｜query｜>", false},
      {128831, "<｜authority｜>", false},
      {128832, "<｜domain｜>", false},
      {128833, "<｜task｜>", false},
      {128834, "<｜political｜>", false},
      {128835, "<｜entity｜>", false},
      {128836, "<｜title｜>", false},
      {128837, "<｜safety｜>", false},
      {128838, "<｜answer｜>", false},
      {128839, "<｜search｜>", false},
      {128840, "<dsml:", false},
      {128841, "</dsml:", false},
      {128842, "<｜search▁begin｜>", false},
      {128843, "<｜search▁end｜>", false},
      {128844, "<｜extracted_url｜>", false},
      {128845, "<｜read_url｜>", false},
      {128846, "<｜end_of_query｜>", false},
  };
  return tokens;
}

namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::parse_error& e) {
    fail(path.string(), ": not valid JSON: ", e.what());
  }
}

void write_json(const std::filesystem::path& path, const nlohmann::json& value) {
  std::ofstream out(path, std::ios::binary);
  out << value.dump(1) << "\n";
  if (!out) fail(path.string(), ": cannot write");
}

nlohmann::json added_token(int32_t id, std::string_view content, bool special) {
  return {{"id", id},          {"content", std::string(content)}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", !special},          {"special", special}};
}

}  // namespace

void write_test_tokenizer(const std::string& base_dir, const std::string& out_dir) {
  namespace fs = std::filesystem;
  const fs::path base_json = fs::path(base_dir) / "tokenizer.json", base_config = fs::path(base_dir) / "tokenizer_config.json";
  nlohmann::json spec = read_json(base_json);
  nlohmann::json config = read_json(base_config);
  if (!spec.is_object() || !spec.contains("added_tokens") || !spec["added_tokens"].is_array())
    fail(base_json.string(), ": added_tokens: expected an array");
  nlohmann::json& added = spec["added_tokens"];

  // The base must be DeepSeek-V3's: its added tokens end at "<｜tool▁sep｜>" = 128814, with a placeholder at 128799.
  const auto find = [&](int32_t id) -> nlohmann::json* {
    for (auto& t : added)
      if (t.is_object() && t.value("id", -1) == id) return &t;
    return nullptr;
  };
  nlohmann::json* last = find(128814);
  nlohmann::json* slot = find(128799);
  if (!last || last->value("content", "") != "<｜tool▁sep｜>" || !slot || find(128815))
    fail(base_json.string(), ": added_tokens: expected the DeepSeek-V3 tokenizer (\"<｜tool▁sep｜>\" = 128814 as the "
         "last added token, a placeholder at 128799)");

  for (const V4AddedToken& t : v4_added_tokens()) {
    if (t.id == 128799) *slot = added_token(t.id, t.content, t.special);
    else added.push_back(added_token(t.id, t.content, t.special));
  }
  config.erase("chat_template");  // V3's template does not describe V4 prompts (see src/text/chat_encoding.h)
  config["model_max_length"] = 1048576;

  fs::create_directories(out_dir);
  write_json(fs::path(out_dir) / "tokenizer.json", spec);
  write_json(fs::path(out_dir) / "tokenizer_config.json", config);
}

}  // namespace strata::text
