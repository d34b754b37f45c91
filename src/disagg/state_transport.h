#pragma once
// How a decode replica gets a prompt's state from a prefill replica. One call per prompt: the order goes out, the
// state streams back, within a deadline. TCP (tcp_state_transport.h) is what runs now; a GPU-to-GPU transport on one
// host (CUDA IPC, NCCL send/recv) or an RDMA one (UCX) implements the same call, moving the state's sections
// directly between the two engines' memories instead of through sockets.
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

#include "disagg/prefill_order.h"
#include "engine/state_stream.h"

namespace strata::disagg {

// Why a transfer failed (the decode replica then prefills the prompt itself).
class TransferError : public std::runtime_error {
 public:
  enum class Kind { Connect, Timeout, Cancelled, Refused, Protocol };
  TransferError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};
const char* to_string(TransferError::Kind kind);  // "connect", "timeout", "cancelled", "refused", "protocol"

struct TransferControl {
  std::chrono::steady_clock::time_point deadline;
  std::function<bool()> cancelled;  // polled while waiting (e.g. the client went away); may be empty
  std::string authorization;        // sent as the Authorization header when not empty (the client's API key)
  int64_t max_state_bytes = int64_t{64} << 30;
};

class StateTransport {
 public:
  virtual ~StateTransport() = default;
  // Has the prefill replica at `peer` (http://HOST:PORT) compute `order`, and appends its state's bytes to `into`
  // as they arrive (setting its cached tokens before the first), so the decode engine restores layers while later
  // ones are on the way. Returns once every byte is in, without finishing `into` (the caller ends it); throws
  // TransferError, and then `into` may hold part of the state.
  virtual PrefilledState prefill(const std::string& peer, const PrefillOrder& order, const TransferControl& control,
                                 engine::StateStream& into) = 0;
  // Same-host transfer: tells the prefill replica that its shared region `handle` has been read (it frees it; it
  // would at the lease's end anyway). Throws TransferError.
  virtual void release(const std::string& peer, const std::string& handle, const TransferControl& control) = 0;
};

}  // namespace strata::disagg
