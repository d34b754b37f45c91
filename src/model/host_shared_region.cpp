#include "model/host_shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <random>

#include "core/error.h"

namespace strata::model {

namespace {

class HostSharedRegion : public SharedRegion {
 public:
  HostSharedRegion(std::string name, int64_t floats, bool owner) : name_(std::move(name)), floats_(floats), owner_(owner) {
    const int fd = owner ? ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600) : ::shm_open(name_.c_str(), O_RDWR, 0);
    if (fd < 0) fail("shared memory ", name_, ": ", owner ? "cannot create it: " : "cannot open it: ", std::strerror(errno));
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, floats)) * sizeof(float);
    struct stat st{};
    if (owner && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int e = errno;
      ::close(fd);
      ::shm_unlink(name_.c_str());
      fail("shared memory ", name_, ": cannot size it to ", bytes, " bytes: ", std::strerror(e));
    }
    if (!owner && (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes)) {
      ::close(fd);
      fail("shared memory ", name_, ": holds ", st.st_size, " bytes, its handle says ", bytes);
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);  // the mapping keeps the object
    if (p == MAP_FAILED) {
      if (owner) ::shm_unlink(name_.c_str());
      fail("shared memory ", name_, ": cannot map it: ", std::strerror(e));
    }
    data_ = static_cast<float*>(p);
    bytes_ = bytes;
  }
  ~HostSharedRegion() override {
    ::munmap(data_, bytes_);
    if (owner_) ::shm_unlink(name_.c_str());
  }
  HostSharedRegion(const HostSharedRegion&) = delete;
  HostSharedRegion& operator=(const HostSharedRegion&) = delete;

  float* data() const override { return data_; }
  int64_t floats() const override { return floats_; }
  std::string handle() const override { return cat("shm:", name_, ":", floats_); }

 private:
  std::string name_;
  int64_t floats_;
  bool owner_;
  float* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<SharedRegion> make_host_shared_region(int64_t floats) {
  if (floats < 0) fail("shared memory: a region of ", floats, " floats");
  // Unique per process and call; the random part keeps a restarted process's names apart from leftovers.
  static std::atomic<uint64_t> next{0};
  static const uint64_t salt = std::random_device{}();
  const std::string name = cat("/strata-", ::getpid(), "-", salt % 1000000, "-", next++);
  return std::make_unique<HostSharedRegion>(name, floats, true);
}

std::unique_ptr<SharedRegion> open_host_shared_region(const std::string& handle) {
  // shm:NAME:FLOATS
  const size_t colon = handle.rfind(':');
  if (handle.rfind("shm:/", 0) != 0 || colon == std::string::npos || colon < 5)
    fail("shared memory handle '", handle, "': not of the form shm:/NAME:FLOATS (a state made on another kind of device?)");
  const std::string name = handle.substr(4, colon - 4), count = handle.substr(colon + 1);
  int64_t floats = -1;
  const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), floats);
  if (ec != std::errc() || end != count.data() + count.size() || floats < 0)
    fail("shared memory handle '", handle, "': '", count, "' is not a float count");
  if (name.find('/', 1) != std::string::npos) fail("shared memory handle '", handle, "': a name with a '/' inside");
  return std::make_unique<HostSharedRegion>(name, floats, false);
}

}  // namespace strata::model
