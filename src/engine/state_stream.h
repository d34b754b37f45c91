#pragma once
// A sequence's state on its way between two engines (prefill/decode disaggregation), as bytes that arrive in
// chunks: a prefill engine appends its snapshot piece by piece as it reads them off the device, and its server
// sends each as it comes; a decode replica's transport appends what the socket delivers, and its engine restores
// each layer as soon as its bytes are whole (model/state_restore.h), while later layers are still on the way.
// Thread-safe: one producer thread; readers keep their own position (several sequences may read one stream).
// Every stream ends: finished (every byte is in) or failed (no more will come).
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model/shared_region.h"

namespace strata::engine {

class StateStream {
 public:
  // Producer side.
  // Of the state's tokens, those the producing engine's prefix cache held (what the usage reports as cached).
  void set_cached_tokens(int64_t tokens);
  void append(std::string bytes);
  void finish();
  void fail(std::string why);

  // Reader side: the chunks from index `from` on, and whether the stream has ended.
  struct Read {
    std::vector<std::shared_ptr<const std::string>> chunks;
    bool finished = false;
    std::optional<std::string> failed;
  };
  Read read_from(size_t from) const;
  int64_t cached_tokens() const;
  int64_t bytes() const;
  bool ended() const;

  // Same-host transfer (model/shared_region.h): the state's floats are in the region this handle names and the
  // bytes are its skeleton. Set by the producer before its first byte; `keep` (the maker's region, prefill side)
  // lives as long as the stream or until taken.
  void set_shared_floats(std::string handle, std::shared_ptr<model::SharedRegion> keep = nullptr);
  std::string shared_floats() const;  // "" : the floats are in the bytes
  std::shared_ptr<model::SharedRegion> take_shared_region();
  // The reader is done with the shared region (restored from it, gave up, or ended): its maker may free it, and
  // nothing reads it again. The first call runs `on_release` (set before); later ones do nothing.
  void release_shared();
  bool shared_released() const;
  void on_shared_released(std::function<void()> on_release);

  // Called on the producer's thread after each append, finish or fail (and at once when set on a stream that has
  // something): a reader that sleeps until there is more to read. It must be quick and must not call back into
  // the stream's producer side. Replaces the previous one; an empty function clears it.
  void on_change(std::function<void()> notify);

 private:
  void changed();

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const std::string>> chunks_;
  int64_t bytes_ = 0, cached_tokens_ = 0;
  bool finished_ = false;
  std::optional<std::string> failed_;
  std::shared_ptr<const std::function<void()>> notify_;
  std::string shared_handle_;
  std::shared_ptr<model::SharedRegion> shared_keep_;
  bool shared_released_ = false;
  std::function<void()> on_release_;
};

}  // namespace strata::engine
