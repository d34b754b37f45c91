#pragma once
// The DeepSeek tokenizer: byte-level BPE loaded from a model directory's tokenizer.json + tokenizer_config.json,
// producing the same ids as HF tokenizers (the oracle: tests/reference/tokenizer_parity.py).
//
// encode(text) runs HF's pipeline: added tokens are cut out of the text first (leftmost-longest; tokens with
// normalized=false in a first pass, normalized=true in a second — the DeepSeek normalizer is the identity), the
// rest goes through the pre-tokenizer (Split regexes, ByteLevel) and BPE. decode(ids) is HF's ByteLevel decoder
// followed by a lossy UTF-8 conversion (invalid bytes become U+FFFD).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/bpe.h"
#include "text/pretokenizer.h"

namespace strata::text {

// One entry of tokenizer.json's "added_tokens".
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = true;
  bool lstrip = false;
  bool rstrip = false;
};

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and DIR/tokenizer_config.json. Errors name the file and the field.
  static Tokenizer load(const std::string& model_dir);

  // parse_special=true: the spellings of added tokens (special or not, e.g. "<｜User｜>", "<think>") become those
  // tokens, as HF's Tokenizer.encode does. parse_special=false: every added-token spelling is plain text and
  // encodes to the tokens of its characters (HF with encode_special_tokens=True after marking every added token
  // special) — the mode for text that comes from a user. add_bos prepends the BOS token when the config's
  // add_bos_token is true. Text that is not valid UTF-8 is a strata::Error.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = false, bool add_bos = false) const;

  // HF's decode: ids not in the vocabulary are dropped; skip_special drops special tokens (not the non-special
  // added ones such as "<｜User｜>" in the V3 file).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  std::optional<int32_t> token_id(std::string_view token) const;  // exact added-token or vocabulary lookup
  const std::string& token_text(int32_t id) const;                // added-token content or raw vocabulary string
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_; }
  int32_t vocab_size() const { return vocab_size_; }  // max id + 1
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // The bytes token `id` stands for (empty for unknown ids, and for special ones when skip_special). The
  // incremental detokenizer builds on this.
  std::string_view token_bytes(int32_t id, bool skip_special) const;

 private:
  // Leftmost-longest search for a set of added-token spellings (HF uses an Aho-Corasick automaton with the
  // same semantics).
  class Matcher {
   public:
    void add(std::string_view spelling, int32_t token_index);
    bool empty() const { return nodes_.size() <= 1; }
    // Longest spelling that starts at text[pos]: its length and token index, or {0, -1}.
    std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;
    bool may_start(uint8_t b) const { return first_[b]; }

   private:
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;
    };
    std::vector<Node> nodes_{Node{}};
    bool first_[256] = {};
  };
  struct Segment {
    std::string_view text;
    int32_t token = -1;  // an added token's id, or -1 for text still to encode
  };
  void cut_added(const Matcher& matcher, std::vector<Segment>& segments) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

  BpeModel model_;
  PreTokenizer pre_tokenizer_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, int32_t> added_by_content_;  // content → id
  std::unordered_map<int32_t, size_t> added_by_id_;             // id → index in added_
  Matcher raw_matcher_, normalized_matcher_;
  std::vector<std::string> id_bytes_;   // decoded bytes per id
  std::vector<uint8_t> id_kind_;        // 0 unknown, 1 normal, 2 special
  std::optional<int32_t> bos_id_, eos_id_;
  bool add_bos_ = false;
  int32_t vocab_size_ = 0;
};

}  // namespace strata::text
