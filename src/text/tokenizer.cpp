#include "text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_set>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/detokenizer.h"

namespace strata::text {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, ": cannot open (expected a Hugging Face tokenizer file there)");
  std::string content(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(content.data(), static_cast<std::streamsize>(content.size()));
  if (!in) fail(path, ": cannot read");
  return content;
}

nlohmann::json read_json(const std::string& path) {
  const std::string content = read_file(path);
  try {
    return nlohmann::json::parse(content);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
}

// Reads tokenizer.json in one streaming pass: model.vocab and model.merges go straight into a BpeSpec, everything
// else becomes an ordinary JSON tree.
class TokenizerJsonReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit TokenizerJsonReader(std::string where) : where_(std::move(where)) {}
  nlohmann::json root;
  BpeSpec bpe;

  bool null() override { return scalar(nullptr); }
  bool boolean(bool v) override { return scalar(v); }
  bool number_integer(number_integer_t v) override { return scalar(v); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(v); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(v); }
  bool string(string_t& v) override {
    switch (mode()) {
      case Mode::kMerges: bpe.add_merge_line(v, merge_index_++, where_ + ": model"); return true;
      case Mode::kMergePair: pair_.push_back(std::move(v)); return true;
      default: return scalar(std::move(v));
    }
  }
  bool binary(binary_t&) override { return scalar(nullptr); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (mode() == Mode::kVocab || mode() == Mode::kMergePair) bad_value("an object");
    if (mode() == Mode::kMerges) fail(where_, ": model.merges[", merge_index_, "]: expected \"a b\" or [\"a\", \"b\"], found an object");
    if (at_model_member("vocab")) {
      bpe.has_vocab = true;
      stack_.push_back({nullptr, Mode::kVocab});
    } else {
      stack_.push_back({place(nlohmann::json::object()), Mode::kTree, stack_.size() == 1 && key_ == "model"});
    }
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode() == Mode::kVocab || mode() == Mode::kMergePair) bad_value("an array");
    if (mode() == Mode::kMerges) {
      pair_.clear();
      stack_.push_back({nullptr, Mode::kMergePair});
    } else if (at_model_member("merges")) {
      bpe.has_merges = true;
      stack_.push_back({nullptr, Mode::kMerges});
    } else {
      stack_.push_back({place(nlohmann::json::array()), Mode::kTree});
    }
    return true;
  }
  bool end_array() override {
    if (mode() == Mode::kMergePair) {
      if (pair_.size() != 2)
        fail(where_, ": model.merges[", merge_index_, "]: expected [\"a\", \"b\"], found ", pair_.size(), " strings");
      bpe.add_merge_pair(std::move(pair_[0]), std::move(pair_[1]));
      ++merge_index_;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail(where_, ": not valid JSON: ", e.what());
  }

 private:
  enum class Mode { kTree, kVocab, kMerges, kMergePair };
  struct Frame {
    nlohmann::json* node;
    Mode mode;
    bool is_model = false;  // the root's "model" object
  };
  Mode mode() const { return stack_.empty() ? Mode::kTree : stack_.back().mode; }
  bool at_model_member(const char* name) const { return !stack_.empty() && stack_.back().is_model && key_ == name; }
  [[noreturn]] void bad_value(const char* found) const {
    if (mode() == Mode::kVocab) fail(where_, ": model.vocab[\"", key_, "\"]: expected a non-negative integer id, found ", found);
    fail(where_, ": model.merges[", merge_index_, "]: expected [\"a\", \"b\"], found ", found, " inside");
  }
  nlohmann::json* place(nlohmann::json value) {
    if (stack_.empty()) {
      root = std::move(value);
      return &root;
    }
    nlohmann::json& parent = *stack_.back().node;
    if (parent.is_object()) {
      nlohmann::json& slot = parent[key_];
      slot = std::move(value);
      return &slot;
    }
    parent.push_back(std::move(value));
    return &parent.back();
  }
  bool scalar(nlohmann::json value) {
    switch (mode()) {
      case Mode::kVocab:
        if (!value.is_number_integer()) bad_value(value.type_name());
        bpe.vocab.emplace_back(std::move(key_), value.get<int64_t>());
        return true;
      case Mode::kMerges:
        fail(where_, ": model.merges[", merge_index_, "]: expected \"a b\" or [\"a\", \"b\"], found ", value.dump());
      case Mode::kMergePair:
        bad_value(value.type_name());
      case Mode::kTree:
        place(std::move(value));
        return true;
    }
    return true;
  }

  std::string where_;
  std::vector<Frame> stack_;
  std::string key_;
  std::vector<std::string> pair_;
  size_t merge_index_ = 0;
};

bool flag(const nlohmann::json& obj, const char* key, bool fallback, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_boolean()) fail(where, ".", key, ": expected true or false, found ", obj[key].dump());
  return obj[key].get<bool>();
}

// Unicode White_Space (what Rust's regex \s, used by HF for lstrip / rstrip, matches).
bool is_white_space(uint32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Decodes the (valid) UTF-8 character starting at s[i]; sets its length.
uint32_t code_point_at(std::string_view s, size_t i, size_t& length) {
  const auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) {
    length = 1;
    return b;
  }
  length = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  uint32_t cp = b & (0x3F >> (length - 1));
  for (size_t k = 1; k < length; ++k) cp = cp << 6 | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

// Start of the run of white space that ends at `end` (HF's space_leftmost_at_end on text[..end]).
size_t white_space_run_start(std::string_view text, size_t end) {
  size_t start = end;
  while (start > 0) {
    size_t k = start - 1;
    while (k > 0 && (static_cast<uint8_t>(text[k]) & 0xC0) == 0x80) --k;
    size_t length = 0;
    if (!is_white_space(code_point_at(text, k, length))) break;
    start = k;
  }
  return start;
}

size_t white_space_run_end(std::string_view text, size_t start) {
  size_t end = start;
  while (end < text.size()) {
    size_t length = 0;
    if (!is_white_space(code_point_at(text, end, length))) break;
    end += length;
  }
  return end;
}

// tokenizer_config.json's bos_token / eos_token: a string, an AddedToken object, or null.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key, const std::string& where) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  fail(where, ": ", key, ": expected a string or an object with \"content\", found ", v.dump());
}

}  // namespace

void Tokenizer::Matcher::add(std::string_view spelling, int32_t token_index) {
  if (spelling.empty()) return;
  first_[static_cast<uint8_t>(spelling[0])] = true;
  int32_t node = 0;
  for (const char ch : spelling) {
    const auto b = static_cast<uint8_t>(ch);
    auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::pair<uint8_t, int32_t>{b, INT32_MIN});
    if (it != children.end() && it->first == b) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes_.size());
      children.insert(it, {b, child});
      nodes_.emplace_back();
      node = child;
    }
  }
  nodes_[node].token = token_index;
}

std::pair<size_t, int32_t> Tokenizer::Matcher::longest_at(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t k = pos; k < text.size(); ++k) {
    const auto b = static_cast<uint8_t>(text[k]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::pair<uint8_t, int32_t>{b, INT32_MIN});
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes_[node].token >= 0) best = {k - pos + 1, nodes_[node].token};
  }
  return best;
}

Tokenizer Tokenizer::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string tokenizer_path = (fs::path(model_dir) / "tokenizer.json").string();
  const std::string config_path = (fs::path(model_dir) / "tokenizer_config.json").string();
  TokenizerJsonReader reader(tokenizer_path);
  nlohmann::json::sax_parse(read_file(tokenizer_path), &reader);
  const nlohmann::json& spec = reader.root;
  const nlohmann::json config = read_json(config_path);
  if (!spec.is_object()) fail(tokenizer_path, ": expected a JSON object");
  if (!config.is_object()) fail(config_path, ": expected a JSON object");

  Tokenizer t;
  const std::string& where = tokenizer_path;
  for (const char* key : {"truncation", "padding"})
    if (spec.contains(key) && !spec[key].is_null())
      fail(where, ": ", key, ": not supported (expected null), found ", spec[key].dump().substr(0, 200));
  if (spec.contains("normalizer") && !spec["normalizer"].is_null()) {
    const nlohmann::json& n = spec["normalizer"];
    const bool identity = n.is_object() && n.value("type", "") == "Sequence" && n.contains("normalizers") &&
                          n["normalizers"].is_array() && n["normalizers"].empty();
    if (!identity) fail(where, ": normalizer: only none (null or an empty Sequence) is supported, found ", n.dump().substr(0, 200));
  }
  if (!spec.contains("decoder") || !spec["decoder"].is_object() || spec["decoder"].value("type", "") != "ByteLevel")
    fail(where, ": decoder: expected {\"type\": \"ByteLevel\", ...}, found ", spec.value("decoder", nlohmann::json()).dump().substr(0, 200));
  if (!spec.contains("model") || !spec["model"].is_object()) fail(where, ": model: expected an object");
  reader.bpe.options = spec["model"];
  t.model_ = BpeModel::from_spec(std::move(reader.bpe), where + ": model");
  t.pre_tokenizer_ = PreTokenizer::from_json(spec.value("pre_tokenizer", nlohmann::json()), where + ": pre_tokenizer");

  // Added tokens get their ids the way HF's AddedVocabulary::add_tokens gives them: a spelling already in the
  // vocabulary keeps that id, the others are numbered after the vocabulary in file order.
  std::unordered_set<std::string> special_contents;
  std::unordered_map<int32_t, AddedToken> by_id;
  int32_t next_id = t.model_.vocab_entries();
  if (spec.contains("added_tokens") && !spec["added_tokens"].is_null()) {
    const nlohmann::json& list = spec["added_tokens"];
    if (!list.is_array()) fail(where, ": added_tokens: expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = cat(where, ": added_tokens[", i, "]");
      const nlohmann::json& e = list[i];
      if (!e.is_object() || !e.contains("content") || !e["content"].is_string())
        fail(at, ": expected an object with a string \"content\"");
      AddedToken token;
      token.content = e["content"].get<std::string>();
      if (token.content.empty()) continue;
      token.special = flag(e, "special", false, at);
      token.normalized = flag(e, "normalized", !token.special, at);
      token.lstrip = flag(e, "lstrip", false, at);
      token.rstrip = flag(e, "rstrip", false, at);
      if (flag(e, "single_word", false, at)) fail(at, ": single_word=true is not supported");
      if (find_invalid_utf8(token.content) != std::string_view::npos) fail(at, ": content is not valid UTF-8");
      int32_t id;
      if (const auto known = t.added_by_content_.find(token.content); known != t.added_by_content_.end()) {
        id = known->second;
      } else if (const auto in_vocab = t.model_.token_id(token.content)) {
        id = *in_vocab;
      } else {
        id = next_id++;
      }
      if (e.contains("id") && !(e["id"].is_number_integer() && e["id"].get<int64_t>() == id))
        fail(at, " (\"", token.content, "\"): the file gives id ", e["id"].dump(), " but HF tokenizers assigns ", id,
             " (an added token keeps its vocabulary id, else ids follow the vocabulary in file order)");
      token.id = id;
      t.added_by_content_[token.content] = id;
      if (token.special) special_contents.insert(token.content);
      by_id[id] = token;
    }
  }
  std::vector<int32_t> ids;
  for (const auto& [id, token] : by_id) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const int32_t id : ids) {
    t.added_by_id_[id] = t.added_.size();
    t.added_.push_back(by_id[id]);
  }
  for (size_t i = 0; i < t.added_.size(); ++i)
    (t.added_[i].normalized ? t.normalized_matcher_ : t.raw_matcher_).add(t.added_[i].content, static_cast<int32_t>(i));

  t.vocab_size_ = std::max(t.model_.max_id() + 1, ids.empty() ? 0 : ids.back() + 1);
  t.id_bytes_.resize(static_cast<size_t>(t.vocab_size_));
  t.id_kind_.assign(static_cast<size_t>(t.vocab_size_), 0);
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  for (int32_t id = 0; id < t.vocab_size_; ++id) {
    const auto added = t.added_by_id_.find(id);
    const std::string* text = added != t.added_by_id_.end() ? &t.added_[added->second].content : t.model_.token_text(id);
    if (!text) continue;
    alphabet.decode_token(*text, t.id_bytes_[id]);
    t.id_kind_[id] = special_contents.count(*text) ? 2 : 1;
  }

  t.add_bos_ = flag(config, "add_bos_token", false, config_path);
  for (const auto& [key, slot] : {std::pair{"bos_token", &t.bos_id_}, std::pair{"eos_token", &t.eos_id_}}) {
    if (const auto content = config_token(config, key, config_path)) {
      *slot = t.token_id(*content);
      if (!*slot) fail(config_path, ": ", key, ": \"", *content, "\" is not a token of ", tokenizer_path);
    }
  }
  if (t.add_bos_ && !t.bos_id_) fail(config_path, ": add_bos_token is true but there is no bos_token");
  return t;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end()) return it->second;
  return model_.token_id(token);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string unknown;
  if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_[it->second].content;
  const std::string* text = model_.token_text(id);
  return text ? *text : unknown;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size_ && id_kind_[id] == 2;
}

std::string_view Tokenizer::token_bytes(int32_t id, bool skip_special) const {
  if (id < 0 || id >= vocab_size_ || id_kind_[id] == 0 || (skip_special && id_kind_[id] == 2)) return {};
  return id_bytes_[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (const int32_t id : ids) bytes.append(token_bytes(id, skip_special));
  std::string out;
  append_utf8_lossy(bytes, true, out);
  return out;
}

// HF's AddedVocabulary::find_matches over every text segment: leftmost-longest spellings become their tokens
// (widened over white space on the left / right for lstrip / rstrip tokens), the rest stays text.
void Tokenizer::cut_added(const Matcher& matcher, std::vector<Segment>& segments) const {
  if (matcher.empty()) return;
  std::vector<Segment> out;
  out.reserve(segments.size());
  for (const Segment& segment : segments) {
    if (segment.token >= 0) {
      out.push_back(segment);
      continue;
    }
    const std::string_view text = segment.text;
    size_t start_offset = 0;
    for (size_t i = 0; i < text.size();) {
      if (!matcher.may_start(static_cast<uint8_t>(text[i]))) {
        ++i;
        continue;
      }
      const auto [length, index] = matcher.longest_at(text, i);
      if (index < 0) {
        ++i;
        continue;
      }
      const AddedToken& token = added_[index];
      size_t start = i, stop = i + length;
      if (token.lstrip) start = std::max(white_space_run_start(text, start), start_offset);
      if (token.rstrip) stop = white_space_run_end(text, stop);
      if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1});
      out.push_back({text.substr(start, stop - start), token.id});
      start_offset = stop;
      i = stop;
    }
    if (start_offset < text.size()) out.push_back({text.substr(start_offset), -1});
  }
  segments.swap(out);
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> pieces;
  std::deque<std::string> arena;
  pre_tokenizer_.split(text, pieces, arena);
  const bool byte_level = pre_tokenizer_.byte_level();
  for (const std::string_view piece : pieces) model_.encode_word(piece, byte_level, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special, bool add_bos) const {
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail("text to encode is not valid UTF-8 (byte offset ", bad, ")");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_bos && add_bos_ && bos_id_) out.push_back(*bos_id_);
  if (!parse_special) {
    encode_text(text, out);
    return out;
  }
  std::vector<Segment> segments{{text, -1}};
  cut_added(raw_matcher_, segments);
  cut_added(normalized_matcher_, segments);
  for (const Segment& segment : segments) {
    if (segment.token >= 0) out.push_back(segment.token);
    else encode_text(segment.text, out);
  }
  return out;
}

}  // namespace strata::text
