#include "text/bpe.h"

#include <cstdio>
#include <queue>

#include "core/error.h"
#include "text/byte_level.h"

namespace strata::text {

namespace {

constexpr uint64_t kEmptyKey = ~0ull;
constexpr size_t kMaxCachedWordBytes = 256;        // longer pre-tokens are rare and not worth keeping
constexpr size_t kMaxCacheEntries = 1u << 18;
constexpr size_t kMaxCacheIds = 1u << 22;

uint64_t mix(uint64_t key) { return key * 0x9E3779B97F4A7C15ull; }

size_t utf8_length(uint8_t lead) { return lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1; }

bool optional_flag(const nlohmann::json& spec, const char* key, const std::string& where) {
  if (!spec.contains(key) || spec[key].is_null()) return false;
  if (!spec[key].is_boolean()) fail(where, ".", key, ": expected true or false, found ", spec[key].dump());
  return spec[key].get<bool>();
}

}  // namespace

void BpeModel::MergeTable::build(const std::vector<std::pair<uint64_t, uint64_t>>& entries) {
  size_t capacity = 16;
  while (capacity < entries.size() * 2) capacity <<= 1;
  keys_.assign(capacity, kEmptyKey);
  values_.assign(capacity, 0);
  mask_ = capacity - 1;
  for (const auto& [key, value] : entries) {
    size_t slot = mix(key) >> 40 & mask_;
    while (keys_[slot] != kEmptyKey && keys_[slot] != key) slot = (slot + 1) & mask_;
    keys_[slot] = key;  // a repeated pair keeps its last rank, as HF's map does
    values_[slot] = value;
  }
}

const uint64_t* BpeModel::MergeTable::find(uint64_t key) const {
  if (keys_.empty()) return nullptr;
  size_t slot = mix(key) >> 40 & mask_;
  while (true) {
    if (keys_[slot] == key) return &values_[slot];
    if (keys_[slot] == kEmptyKey) return nullptr;
    slot = (slot + 1) & mask_;
  }
}

void BpeSpec::add_merge_line(std::string_view line, size_t index, const std::string& where) {
  if (line.rfind("#version", 0) == 0) return;
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
    fail(where, ".merges[", index, "]: expected two tokens separated by one space, found \"", line, "\"");
  merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
}

BpeModel BpeModel::from_json(const nlohmann::json& spec, const std::string& where) {
  if (!spec.is_object()) fail(where, ": expected an object");
  BpeSpec parts;
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    if (it.key() == "vocab") {
      parts.has_vocab = it.value().is_object();
      if (!parts.has_vocab) continue;
      for (auto v = it.value().begin(); v != it.value().end(); ++v) {
        if (!v.value().is_number_integer())
          fail(where, ".vocab[\"", v.key(), "\"]: expected a non-negative integer id, found ", v.value().dump());
        parts.vocab.emplace_back(v.key(), v.value().get<int64_t>());
      }
    } else if (it.key() == "merges") {
      parts.has_merges = it.value().is_array();
      if (!parts.has_merges) continue;
      for (size_t i = 0; i < it.value().size(); ++i) {
        const nlohmann::json& merge = it.value()[i];
        if (merge.is_string()) {
          parts.add_merge_line(merge.get_ref<const std::string&>(), i, where);
        } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
          parts.add_merge_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
        } else {
          fail(where, ".merges[", i, "]: expected \"a b\" or [\"a\", \"b\"], found ", merge.dump());
        }
      }
    } else {
      parts.options[it.key()] = it.value();
    }
  }
  return from_spec(std::move(parts), where);
}

BpeModel BpeModel::from_spec(BpeSpec parts, const std::string& where) {
  const nlohmann::json& spec = parts.options;
  const std::string type = spec.contains("type") && spec["type"].is_string() ? spec["type"].get<std::string>() : "";
  if (type != "BPE")
    fail(where, ".type: expected \"BPE\" (the only model supported), found ", spec.value("type", nlohmann::json()).dump());
  if (spec.contains("dropout") && !spec["dropout"].is_null() && spec["dropout"] != 0)
    fail(where, ".dropout: BPE dropout is not supported (expected null), found ", spec["dropout"].dump());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (spec.contains(key) && !spec[key].is_null() && spec[key] != "")
      fail(where, ".", key, ": not supported (expected null), found ", spec[key].dump());

  BpeModel m;
  if (!parts.has_vocab) fail(where, ".vocab: expected an object of token → id");
  m.vocab_.reserve(parts.vocab.size());
  int64_t max_id = -1;
  for (auto& [token, id64] : parts.vocab) {
    if (id64 < 0 || id64 > INT32_MAX)
      fail(where, ".vocab[\"", token, "\"]: expected a non-negative integer id, found ", id64);
    const auto id = static_cast<int32_t>(id64);
    m.vocab_[std::move(token)] = id;  // a repeated key keeps its last id, as a JSON object does
    max_id = std::max<int64_t>(max_id, id);
  }
  m.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  m.id_present_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [token, id] : m.vocab_) {
    if (m.id_present_[id]) fail(where, ".vocab: id ", id, " is given to both \"", m.id_to_token_[id], "\" and \"", token, "\"");
    m.id_to_token_[id] = token;
    m.id_present_[id] = 1;
  }

  if (!parts.has_merges) fail(where, ".merges: expected an array");
  std::vector<std::pair<uint64_t, uint64_t>> entries;
  entries.reserve(parts.merges.size());
  std::string merged;
  for (size_t rank = 0; rank < parts.merges.size(); ++rank) {
    // Named references, not a structured binding: clang 14 (the fuzz build) cannot capture bindings in lambdas.
    const auto& left = parts.merges[rank].first;
    const auto& right = parts.merges[rank].second;
    const auto id_of = [&](std::string_view token) {
      const auto it = m.vocab_.find(token);
      if (it == m.vocab_.end())
        fail(where, ".merges: merge ", rank, " (\"", left, " ", right, "\"): token \"", token, "\" is not in the vocabulary");
      return static_cast<uint32_t>(it->second);
    };
    merged.assign(left);
    merged.append(right);
    const uint64_t key = static_cast<uint64_t>(id_of(left)) << 32 | id_of(right);
    entries.emplace_back(key, static_cast<uint64_t>(rank) << 32 | id_of(merged));
  }
  m.merges_.build(entries);

  if (spec.contains("unk_token") && !spec["unk_token"].is_null()) {
    if (!spec["unk_token"].is_string()) fail(where, ".unk_token: expected a string or null");
    const auto it = m.vocab_.find(spec["unk_token"].get<std::string>());
    if (it == m.vocab_.end()) fail(where, ".unk_token: \"", spec["unk_token"].get<std::string>(), "\" is not in the vocabulary");
    m.unk_id_ = it->second;
  }
  m.fuse_unk_ = optional_flag(spec, "fuse_unk", where);
  m.byte_fallback_ = optional_flag(spec, "byte_fallback", where);
  m.ignore_merges_ = optional_flag(spec, "ignore_merges", where);

  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  for (int b = 0; b < 256; ++b) {
    const auto it = m.vocab_.find(alphabet.char_of(static_cast<uint8_t>(b)));
    m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }
  return m;
}

std::optional<int32_t> BpeModel::token_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_present_.size() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

// The first symbols of a word: one per character, as HF's BPE::merge_word makes them (unknown characters become
// <0xXX> byte tokens with byte_fallback, else the unk token, else nothing).
void BpeModel::start_symbols(std::string_view word, bool byte_level, std::vector<int32_t>& symbols) const {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::optional<int32_t> pending_unk;
  for (size_t i = 0; i < word.size();) {
    std::string_view ch;
    int32_t id = -1;
    if (byte_level) {
      id = byte_ids_[static_cast<uint8_t>(word[i])];
      ch = alphabet.char_of(static_cast<uint8_t>(word[i]));
      i += 1;
    } else {
      const size_t n = std::min(utf8_length(static_cast<uint8_t>(word[i])), word.size() - i);
      ch = word.substr(i, n);
      i += n;
      const auto it = vocab_.find(ch);
      if (it != vocab_.end()) id = it->second;
    }
    if (id >= 0) {
      if (pending_unk) symbols.push_back(*pending_unk);
      pending_unk.reset();
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (const char c : ch) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(static_cast<uint8_t>(c)));
        const auto it = vocab_.find(std::string_view(name));
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == ch.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk) symbols.push_back(*pending_unk);
}

// HF's Word::merge_all: a queue of (rank, position) candidates, lowest rank first and leftmost among equals; a
// candidate whose pair has changed since it was queued is dropped unless the pair now there merges into the
// same token.
void BpeModel::merge(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  const auto pair_key = [&](int32_t a, int32_t b) {
    return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
  };
  std::vector<Candidate> heap_storage;
  heap_storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>{}, std::move(heap_storage));
  for (size_t i = 0; i + 1 < n; ++i)
    if (const uint64_t* m = merges_.find(pair_key(symbols[i], symbols[i + 1])))
      queue.push({static_cast<uint32_t>(*m >> 32), static_cast<uint32_t>(i), static_cast<int32_t>(*m & 0xFFFFFFFF)});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const uint32_t pos = top.pos;
    if (!alive[pos] || next[pos] < 0) continue;
    const auto right = static_cast<uint32_t>(next[pos]);
    const uint64_t* current = merges_.find(pair_key(symbols[pos], symbols[right]));
    if (!current || static_cast<int32_t>(*current & 0xFFFFFFFF) != top.merged) continue;
    symbols[pos] = top.merged;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = static_cast<int32_t>(pos);
    if (prev[pos] >= 0) {
      const auto left = static_cast<uint32_t>(prev[pos]);
      if (const uint64_t* m = merges_.find(pair_key(symbols[left], symbols[pos])))
        queue.push({static_cast<uint32_t>(*m >> 32), left, static_cast<int32_t>(*m & 0xFFFFFFFF)});
    }
    if (next[pos] >= 0) {
      if (const uint64_t* m = merges_.find(pair_key(symbols[pos], symbols[next[pos]])))
        queue.push({static_cast<uint32_t>(*m >> 32), pos, static_cast<int32_t>(*m & 0xFFFFFFFF)});
    }
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

void BpeModel::encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (byte_level && word.size() == 1 && byte_ids_[static_cast<uint8_t>(word[0])] >= 0) {
    out.push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    const auto it = cache_->index.find(word);
    if (it != cache_->index.end()) {
      const int32_t* ids = cache_->ids.data() + it->second.first;
      out.insert(out.end(), ids, ids + it->second.second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  bool whole = false;
  if (ignore_merges_) {  // a word that is itself a token is not merged piece by piece
    std::string spelled;
    if (byte_level) ByteLevelAlphabet::get().encode(word, spelled);
    const auto it = vocab_.find(byte_level ? std::string_view(spelled) : word);
    if (it != vocab_.end()) {
      symbols.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    symbols.reserve(word.size());
    start_symbols(word, byte_level, symbols);
    merge(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    if (cache_->index.size() >= kMaxCacheEntries || cache_->ids.size() + symbols.size() > kMaxCacheIds) {
      cache_->index.clear();
      cache_->ids.clear();
    }
    const auto offset = static_cast<uint32_t>(cache_->ids.size());
    cache_->ids.insert(cache_->ids.end(), symbols.begin(), symbols.end());
    cache_->index.emplace(std::string(word), std::pair{offset, static_cast<uint32_t>(symbols.size())});
  }
}

}  // namespace strata::text
