#pragma once
// The TCP transport: the order as an HTTP/1.1 POST to the prefill replica's /strata/v1/prefill, the state as the
// response body (chunked or not), handed on to the decode engine as it arrives, over a plain socket with a deadline on every wait (connect, send, the prefill itself, receive) and
// a poll of the caller's cancellation every 50 ms. Closing the connection early makes the prefill replica abort the
// work. One connection per transfer: its set-up is microseconds on a host or a LAN next to a prefill.
#include "disagg/state_transport.h"

namespace strata::disagg {

class TcpStateTransport : public StateTransport {
 public:
  PrefilledState prefill(const std::string& peer, const PrefillOrder& order, const TransferControl& control,
                         engine::StateStream& into) override;
  void release(const std::string& peer, const std::string& handle, const TransferControl& control) override;
};

}  // namespace strata::disagg
