#pragma once
// The prefill replica's endpoint, POST /strata/v1/prefill. A decode replica sends a prompt's tokens — all of them but
// the last, whose logits pick the first token and are computed where the sampling happens — and the prefix-cache
// options it would use itself; the prefill replica computes them and answers the state they leave: Model::snapshot
// bytes (a header section, then one section per layer, each with its checksum; model/deepseek_v4/state_snapshot.h)
// as application/octet-stream, with how many tokens the state holds and how many of them its prefix cache had. The
// body is chunked, a layer's section per chunk as each comes off the prefill replica's device, so the decode replica
// restores early layers while later ones are still being read and sent.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::disagg {

inline constexpr std::string_view kPrefillPath = "/strata/v1/prefill";
inline constexpr std::string_view kStateTokensHeader = "X-Strata-State-Tokens";
inline constexpr std::string_view kCachedTokensHeader = "X-Strata-Cached-Tokens";
// Sent by the router with a completion request to a decode replica: the prefill replica to use (http://HOST:PORT).
inline constexpr std::string_view kPrefillPeerHeader = "X-Strata-Prefill";
// Same-host transfer: the prefill response's header naming the shared region the state's floats are in (the body is
// then the state's skeleton), and the endpoint where the decode replica says it is done with it.
inline constexpr std::string_view kSharedFloatsHeader = "X-Strata-Shared-Floats";
inline constexpr std::string_view kReleasePath = "/strata/v1/prefill/release";

struct PrefillOrder {
  std::string request_id;       // the decode replica's, for logs
  std::vector<int32_t> tokens;  // the prompt but its last token
  bool cache = true;            // use the prefix cache (restore and save), when the prefill replica has one
  std::string cache_scope;      // the prefix cache's isolation scope (engine::CacheOptions::scope)
  int64_t cache_ttl_seconds = 0;
  // Same host: put the state's floats in a shared region (CUDA IPC memory, POSIX shared memory) rather than in the
  // body, and keep it for the decode replica up to `lease_ms` or until released (POST kReleasePath).
  bool shared_floats = false;
  int64_t lease_ms = 60000;
};

std::string to_json(const PrefillOrder& order);
// Throws strata::Error naming the field that is missing or wrong.
PrefillOrder parse_prefill_order(std::string_view body);
// The release's body, {"handle": "..."}, and its parse (throws naming what is wrong).
std::string release_json(const std::string& handle);
std::string parse_release(std::string_view body);

// What a prefill replica answered, beside the state's bytes (which went into the caller's engine::StateStream).
struct PrefilledState {
  int64_t tokens = 0;         // the tokens the state holds (the order's)
  int64_t cached_tokens = 0;  // of them, restored from the prefill replica's prefix cache
  int64_t bytes = 0;          // the state's
};

}  // namespace strata::disagg
