#pragma once
// A cache directory as a whole, without a model (`strata cache stats|verify|gc`): per model fingerprint, how many
// token blocks and boundary rows it holds, how many bytes, how many have expired; `verify` reads every file through
// its checksums; `gc` deletes expired, damaged and leftover temporary files, then the least recently used ones
// above a byte budget.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::cache {

enum class DirectoryAction { Stats, Verify, Gc };

struct ModelDirectoryReport {
  int64_t blocks = 0, rows = 0, bytes = 0;  // files kept (after gc: what is left)
  int64_t expired = 0, damaged = 0, temporary = 0;  // found (gc: deleted)
  int64_t evicted = 0, evicted_bytes = 0;           // gc over the byte budget
  std::vector<std::string> problems;                // a line per damaged file (what is wrong)
};

struct DirectoryReport {
  std::map<std::string, ModelDirectoryReport> models;  // by fingerprint hex (the sub-folder's name)
  std::vector<std::string> ignored;                    // entries that are not a model folder
};

// `now`: seconds since the epoch (expiry is the file's mtime + its time to live). `max_bytes`: gc's budget for the
// whole directory. Throws if `dir` does not exist or cannot be read.
DirectoryReport inspect_cache_directory(const std::string& dir, DirectoryAction action, int64_t now,
                                        std::optional<int64_t> max_bytes = std::nullopt);

}  // namespace strata::cache
