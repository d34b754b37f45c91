#pragma once
// The BPE model of a tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked merges, and the merge
// loop of HF tokenizers (lowest rank first, leftmost among equal ranks), with a cache of results per pre-token.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::text {

// tokenizer.json's "model" with its two large members held apart from the JSON tree: building a tree for 128k
// vocabulary entries and merges is most of a load's time, so Tokenizer::load streams them straight in here.
struct BpeSpec {
  nlohmann::json options = nlohmann::json::object();          // the other members: "type", "unk_token", ...
  std::vector<std::pair<std::string, int64_t>> vocab;          // token → id, in file order
  std::vector<std::pair<std::string, std::string>> merges;     // by rank
  bool has_vocab = false, has_merges = false;

  // One element of "merges": a legacy "a b" line (a "#version" line is skipped) or an ["a", "b"] pair. `index`
  // is its position in the array, for errors.
  void add_merge_line(std::string_view line, size_t index, const std::string& where);
  void add_merge_pair(std::string left, std::string right) { merges.emplace_back(std::move(left), std::move(right)); }
};

class BpeModel {
 public:
  // `spec` is tokenizer.json's "model"; `where` names it in errors ("tokenizer.json: model").
  static BpeModel from_json(const nlohmann::json& spec, const std::string& where);
  static BpeModel from_spec(BpeSpec spec, const std::string& where);

  // Appends the ids of one pre-token. With byte_level, `word` is raw bytes, each read as its byte-level
  // character; otherwise `word` is UTF-8 and each code point is a starting symbol.
  void encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_id(std::string_view token) const;
  const std::string* token_text(int32_t id) const;  // nullptr when `id` is not in the vocabulary
  int32_t vocab_entries() const { return static_cast<int32_t>(vocab_.size()); }  // HF's get_vocab_size()
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Open-addressing map from a symbol pair (left << 32 | right) to (rank << 32 | merged id).
  class MergeTable {
   public:
    void build(const std::vector<std::pair<uint64_t, uint64_t>>& entries);
    const uint64_t* find(uint64_t key) const;

   private:
    std::vector<uint64_t> keys_, values_;
    uint64_t mask_ = 0;
  };
  // Pre-token → ids. Results live in one arena; cleared wholesale when full.
  struct Cache {
    std::mutex mutex;
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> index;
    std::vector<int32_t> ids;
  };

  void merge(std::vector<int32_t>& symbols) const;
  void start_symbols(std::string_view word, bool byte_level, std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> id_present_;
  MergeTable merges_;
  int32_t byte_ids_[256] = {};  // vocabulary id of each byte's byte-level character, -1 when absent
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace strata::text
