#include "cache/entry_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace strata::cache {

static_assert(std::endian::native == std::endian::little, "cache files are written little-endian");

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'K', 'V'};
constexpr uint32_t kVersion = 1;
constexpr size_t kChecksummedBytes = kEntryHeaderBytes - 8;

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T get(std::string_view bytes, size_t& at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

std::string hex(const model::BlockHash& h) {
  char out[33];
  std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(h.high),
                static_cast<unsigned long long>(h.low));
  return out;
}

bool parse_hex64(std::string_view s, uint64_t& v) {
  v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return true;
}

// Reads up to n bytes; fewer only at the end of the file.
bool read_fully(int fd, char* dst, size_t n, size_t& got) {
  got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, dst + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

const char* to_string(EntryKind k) { return k == EntryKind::Block ? "block" : "rows"; }

std::string entry_relative_path(const EntryKey& key) {
  const std::string h = hex(key.hash);
  return h.substr(0, 2) + "/" + (key.kind == EntryKind::Block ? "b" : "r") + h + ".kv";
}

bool parse_entry_name(std::string_view name, EntryKey& key) {
  if (name.size() != 1 + 32 + 3 || name.substr(33) != ".kv") return false;
  if (name[0] == 'b') key.kind = EntryKind::Block;
  else if (name[0] == 'r') key.kind = EntryKind::Rows;
  else return false;
  return parse_hex64(name.substr(1, 16), key.hash.high) && parse_hex64(name.substr(17, 16), key.hash.low);
}

bool parse_fingerprint_hex(std::string_view name, model::ModelFingerprint& fp) {
  return name.size() == 32 && parse_hex64(name.substr(0, 16), fp.high) && parse_hex64(name.substr(16), fp.low);
}

std::string encode_header(const EntryHeader& h) {
  std::string out(kMagic, sizeof kMagic);
  put(out, kVersion);
  put(out, static_cast<uint32_t>(h.key.kind));
  put(out, h.fingerprint.low);
  put(out, h.fingerprint.high);
  put(out, h.key.hash.low);
  put(out, h.key.hash.high);
  put(out, h.ttl_seconds);
  put(out, h.payload_bytes);
  put(out, h.payload_checksum);
  put(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

bool decode_header(std::string_view bytes, EntryHeader& h, std::string& why) {
  if (bytes.size() < kEntryHeaderBytes) {
    why = "truncated header (" + std::to_string(bytes.size()) + " of " + std::to_string(kEntryHeaderBytes) + " bytes)";
    return false;
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    why = "not a Strata cache file (no \"STRATAKV\" magic)";
    return false;
  }
  size_t at = sizeof kMagic;
  const auto version = get<uint32_t>(bytes, at);
  if (version != kVersion) {
    why = "format version " + std::to_string(version) + ", this strata reads " + std::to_string(kVersion);
    return false;
  }
  const auto kind = get<uint32_t>(bytes, at);
  h.fingerprint.low = get<uint64_t>(bytes, at);
  h.fingerprint.high = get<uint64_t>(bytes, at);
  h.key.hash.low = get<uint64_t>(bytes, at);
  h.key.hash.high = get<uint64_t>(bytes, at);
  h.ttl_seconds = get<int64_t>(bytes, at);
  h.payload_bytes = get<uint64_t>(bytes, at);
  h.payload_checksum = get<uint64_t>(bytes, at);
  const auto stored = get<uint64_t>(bytes, at);
  if (stored != XXH3_64bits(bytes.data(), kChecksummedBytes)) {
    why = "header checksum mismatch";
    return false;
  }
  if (kind != 1 && kind != 2) {
    why = "unknown entry kind " + std::to_string(kind);
    return false;
  }
  h.key.kind = static_cast<EntryKind>(kind);
  why.clear();
  return true;
}

std::string write_entry_file(const std::string& path, const EntryHeader& header, std::string_view payload) {
  static std::atomic<uint64_t> counter{0};
  const auto slash = path.rfind('/');
  const std::string tmp = path.substr(0, slash + 1) + ".tmp-" + std::to_string(::getpid()) + "-" +
                          std::to_string(counter++) + "-" + path.substr(slash + 1);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + tmp + ": " + std::strerror(errno);
  const std::string head = encode_header(header);
  std::string why;
  for (std::string_view part : {std::string_view(head), payload}) {
    while (!part.empty() && why.empty()) {
      const ssize_t w = ::write(fd, part.data(), part.size());
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) why = "cannot write " + tmp + ": " + std::strerror(w < 0 ? errno : EIO);
      else part.remove_prefix(static_cast<size_t>(w));
    }
  }
  if (why.empty() && ::fsync(fd) != 0) why = "cannot fsync " + tmp + ": " + std::strerror(errno);
  if (::close(fd) != 0 && why.empty()) why = "cannot close " + tmp + ": " + std::strerror(errno);
  if (why.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    why = "cannot rename " + tmp + ": " + std::strerror(errno);
  if (!why.empty()) ::unlink(tmp.c_str());
  return why;
}

int64_t file_mtime_seconds(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtim.tv_sec) : -1;
}

ReadResult read_entry_header(const std::string& path, EntryHeader& header) {
  ReadResult r;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    r.status = ReadStatus::Missing;
    return r;
  }
  char head[kEntryHeaderBytes];
  size_t got = 0;
  const bool ok = read_fully(fd, head, sizeof head, got);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  if (!ok) {
    r.status = ReadStatus::Corrupt;
    r.why = "unreadable";
    return r;
  }
  if (!decode_header(std::string_view(head, got), header, r.why)) {
    r.status = ReadStatus::Corrupt;
    return r;
  }
  if (size < 0 || static_cast<uint64_t>(size) != kEntryHeaderBytes + header.payload_bytes) {
    r.status = ReadStatus::Corrupt;
    r.why = "size " + std::to_string(size) + " bytes, its header says " +
            std::to_string(kEntryHeaderBytes + header.payload_bytes);
    return r;
  }
  r.status = ReadStatus::Ok;
  return r;
}

ReadResult read_entry_file(const std::string& path, const EntryKey& key, const model::ModelFingerprint& fingerprint) {
  ReadResult r;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return r;  // Missing: never written, or evicted by another server sharing the folder
  char head[kEntryHeaderBytes];
  size_t got = 0;
  EntryHeader h;
  auto corrupt = [&](std::string why) {
    ::close(fd);
    r.status = ReadStatus::Corrupt;
    r.payload.clear();
    r.why = std::move(why);
    return r;
  };
  if (!read_fully(fd, head, sizeof head, got)) return corrupt("unreadable header");
  if (!decode_header(std::string_view(head, got), h, r.why)) return corrupt(r.why);
  if (h.fingerprint != fingerprint) {
    ::close(fd);
    r.status = ReadStatus::Foreign;
    r.why = "made by model " + h.fingerprint.hex() + ", this one is " + fingerprint.hex();
    return r;
  }
  if (h.key != key) return corrupt("holds another entry than its name says");
  if (h.payload_bytes > (uint64_t{1} << 40)) return corrupt("impossible payload size");
  r.payload.resize(h.payload_bytes);
  if (!read_fully(fd, r.payload.data(), r.payload.size(), got)) return corrupt("unreadable payload");
  if (got != h.payload_bytes)
    return corrupt("truncated: " + std::to_string(got) + " of " + std::to_string(h.payload_bytes) + " payload bytes");
  char extra;
  size_t more = 0;
  if (read_fully(fd, &extra, 1, more) && more != 0) return corrupt("bytes past the payload");
  if (XXH3_64bits(r.payload.data(), r.payload.size()) != h.payload_checksum) return corrupt("payload checksum mismatch");
  ::close(fd);
  r.status = ReadStatus::Ok;
  return r;
}

}  // namespace strata::cache
