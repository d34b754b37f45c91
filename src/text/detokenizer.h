#pragma once
// Streaming detokenization: ids in one at a time, text out that is always complete UTF-8.
//
// A byte-level token can end in the middle of a character (a CJK character or an emoji is often split over two
// or three tokens), so the bytes of an unfinished character wait until the token that completes it arrives. The
// concatenation of everything push() and flush() return equals Tokenizer::decode of all the ids: invalid bytes
// become U+FFFD exactly as in HF's lossy conversion (one per maximal invalid subpart).
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::text {

class Tokenizer;

// Appends `bytes` to `out` as UTF-8, each maximal invalid subpart replaced by U+FFFD (Rust's from_utf8_lossy).
// With final=false, a trailing sequence that is incomplete but could still become valid is left alone; returns
// the number of bytes consumed.
size_t append_utf8_lossy(std::string_view bytes, bool final, std::string& out);

// Byte offset of the first invalid UTF-8 sequence in `text`, or npos when it is all valid.
size_t find_invalid_utf8(std::string_view text);

// One per generated sequence; the tokenizer must outlive it.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);  // newly completed text (may be empty)
  std::string flush();           // what is pending at the end (an unfinished character as U+FFFD)

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an unfinished character
};

}  // namespace strata::text
