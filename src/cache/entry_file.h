#pragma once
// One cached piece of a prefix on disk: a token block or a boundary's rows (cache/kv_store.h), in a file named by
// its content hash. Files are written to a temporary name, fsynced and renamed, so a reader sees a whole file or
// none; a torn, truncated, foreign or damaged file is detected here and becomes a miss, never a wrong answer.
//
// Format, version 1 (little-endian, as this machine writes it):
//   u8[8] magic "STRATAKV", u32 version (1), u32 kind (1 token block, 2 boundary rows)
//   u64 fingerprint low, u64 fingerprint high   the model whose numbers these are (model_fingerprint.h)
//   u64 hash low, u64 hash high                 the prefix's chained block hash (model/token_blocks.h)
//   i64 ttl_seconds                             kept this long after its last use (the file's mtime)
//   u64 payload_bytes, u64 XXH3-64 of the payload
//   u64 XXH3-64 of the 72 header bytes above
//   payload
#include <cstdint>
#include <string>
#include <string_view>

#include "model/model_fingerprint.h"
#include "model/token_blocks.h"

namespace strata::cache {

enum class EntryKind : uint32_t { Block = 1, Rows = 2 };
const char* to_string(EntryKind k);  // "block", "rows"

struct EntryKey {
  EntryKind kind = EntryKind::Block;
  model::BlockHash hash;
  bool operator==(const EntryKey&) const = default;
};
struct EntryKeyHash {
  size_t operator()(const EntryKey& k) const {
    return model::BlockHashKey{}(k.hash) ^ static_cast<size_t>(k.kind);
  }
};

struct EntryHeader {
  EntryKey key;
  model::ModelFingerprint fingerprint;
  int64_t ttl_seconds = 0;
  uint64_t payload_bytes = 0, payload_checksum = 0;
};
inline constexpr size_t kEntryHeaderBytes = 80;
// A temporary file (".tmp-…") older than this is a leftover of a crashed writer; a younger one may be a write in
// progress on another server sharing the directory, and is left alone.
inline constexpr int64_t kStaleTemporarySeconds = 3600;

// The file's name inside a model's folder: "<b|r><32 hex digits>.kv", under a folder of its first two hex digits.
std::string entry_relative_path(const EntryKey& key);
// Parses entry_relative_path's file name back (false for any other name).
bool parse_entry_name(std::string_view file_name, EntryKey& key);
// A model folder's name (ModelFingerprint::hex, 32 lower-case hex digits) back to the fingerprint.
bool parse_fingerprint_hex(std::string_view name, model::ModelFingerprint& fingerprint);

std::string encode_header(const EntryHeader& h);
// Decodes and checks the magic, version and the header's own checksum; empty `why` on success.
bool decode_header(std::string_view bytes, EntryHeader& h, std::string& why);

// Writes header + payload to `path` atomically (temporary name in the same folder, fsync, rename). Returns an
// empty string on success, else why not (a full disk, a permission): the caller counts it and goes on.
std::string write_entry_file(const std::string& path, const EntryHeader& header, std::string_view payload);

enum class ReadStatus { Ok, Missing, Corrupt, Foreign };
struct ReadResult {
  ReadStatus status = ReadStatus::Missing;
  std::string payload;
  std::string why;  // for Corrupt and Foreign
};
// Reads and checks a whole file: it must be `key`'s, made by `fingerprint`, complete, with matching checksums.
ReadResult read_entry_file(const std::string& path, const EntryKey& key, const model::ModelFingerprint& fingerprint);
// A file's mtime in seconds since the epoch (a cache file's last use), or -1 when it cannot be read.
int64_t file_mtime_seconds(const std::string& path);
// Only the header (for start-up scans and `strata cache stats`).
ReadResult read_entry_header(const std::string& path, EntryHeader& header);

}  // namespace strata::cache
