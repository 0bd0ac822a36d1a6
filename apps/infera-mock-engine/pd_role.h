// PdRole: how infera-mock-engine behaves as a prefill or decode worker of one PD
// protocol (doc/pd.md "Mock engine roles"; wire facts in architecture §9).
//
// A prefill worker (--role prefill) computes the prompt (one output token, whatever
// max_tokens says) and then holds the prompt's KV for its decode worker under a key:
//   sglang-bootstrap  body's bootstrap_room (a u64 < 2^63, with bootstrap_host and
//                     bootstrap_port); the DP rank is room % dp_size (SGLang's
//                     follow-bootstrap-room), an X-Data-Parallel-Rank that disagrees is 400
//   vllm-nixl         requires kv_transfer_params.do_remote_decode = true; the key is a
//                     fresh remote_request_id; a non-streamed response carries
//                     kv_transfer_params {do_remote_prefill: true, do_remote_decode: false,
//                     remote_engine_id, remote_block_ids, remote_host, remote_port,
//                     remote_request_id, tp_size} (a streamed one cannot, as in vLLM)
//   vllm-mooncake     requires kv_transfer_params {do_remote_decode: true, transfer_id}
// The held KV is served once on the bootstrap listener (`GET /pd/kv?key=K&wait_ms=W`:
// long-polls up to W ms for the key to appear, then 404), and dropped after
// --pd-kv-hold-ms.
//
// A decode worker (--role decode) given a request with PD fields fetches the KV from
// the prefill worker they name (sglang: bootstrap_host:bootstrap_port + room; nixl:
// remote_host:remote_port + remote_request_id; mooncake: remote_bootstrap_addr +
// transfer_id), checks that the prefill computed the same prompt, the same engine id
// and block count, waits the transfer time (prompt tokens it does not cache itself,
// KvTransferModel, --speedup), then decodes with the prompt's KV in place. Missing
// or inconsistent fields → 400; KV that never appears, a different prompt or engine →
// 500 "KV transfer failed: ...", before any response byte. A request without any PD
// field is computed locally (conditional disaggregation).
//
// Thread-safety: all methods may be called from any loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/types.h"
#include "discovery/disagg_meta.h"
#include "http/client.h"
#include "http/io_pool.h"
#include "http/server.h"
#include "sim/kv_transfer.h"

namespace infera::mock {

struct PdOptions {
  discovery::DisaggMode role = discovery::DisaggMode::kMixed;
  discovery::PdProtocol protocol = discovery::PdProtocol::kNone;
  std::string engine_id;  // vLLM kv_transfer_config.engine_id
  std::string advertise_host = "127.0.0.1";
  uint16_t bootstrap_port = 0;  // the bootstrap listener's bound port (set after Listen)
  size_t block_size = 16;
  double speedup = 1;
  sim::KvTransferModel transfer;
  int64_t kv_wait_ms = 5000;   // decode: how long the prefill's KV may take to appear
  int64_t kv_hold_ms = 60000;  // prefill: how long held KV waits for its decode
};

// What one generation request asks of this worker.
struct PdLeg {
  enum class Kind : uint8_t { kLocal, kPrefill, kDecode };
  Kind kind = Kind::kLocal;
  std::string key;                      // room, remote_request_id or transfer_id
  std::optional<uint32_t> dp_rank;      // sglang prefill: room % dp_size
  http::Endpoint source;                // decode: the prefill's bootstrap listener
  std::string remote_engine_id;         // decode (vLLM): the prefill's engine id
  std::optional<size_t> remote_blocks;  // decode (nixl): len(remote_block_ids)
};

class PdRole {
 public:
  // `pool` gives each loop its HTTP client (decode fetches); it must outlive this.
  PdRole(PdOptions options, http::IoPool& pool);

  const PdOptions& options() const { return options_; }
  void set_bootstrap_port(uint16_t port) { options_.bootstrap_port = port; }

  // The leg a request body describes. InvalidArgument (→ 400) for incomplete or
  // inconsistent PD fields.
  absl::StatusOr<PdLeg> Classify(const nlohmann::json& body, uint32_t dp_size,
                                 std::optional<uint32_t> header_rank) const;

  // Prefill: the prompt is computed; hold its KV. Returns the fields to add to a
  // non-streamed response (nixl: {"kv_transfer_params": {...}}; else null).
  nlohmann::json Hold(const PdLeg& leg, std::span<const core::TokenId> prompt);

  // Decode: fetch the prompt's KV from the prefill and wait out the transfer of the
  // tokens this worker does not cache (`local_cached_tokens`).
  http::Awaitable<absl::Status> Receive(const PdLeg& leg, std::span<const core::TokenId> prompt,
                                        size_t local_cached_tokens);

  // The bootstrap listener: GET /pd/kv?key=K&wait_ms=W.
  http::Awaitable<void> HandleBootstrap(http::Request& request, http::ResponseWriter& writer);

  // Counters for /metrics.
  std::string MetricsText() const;

 private:
  struct Held {
    uint64_t prompt_hash = 0;
    size_t prompt_tokens = 0;
    int64_t expires_ms = 0;
  };
  std::optional<Held> Take(const std::string& key);

  PdOptions options_;
  http::IoPool& pool_;
  std::vector<std::unique_ptr<http::Client>> clients_;  // by loop index
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Held> held_;  // guarded by mu_
  uint64_t next_request_ = 1;                    // guarded by mu_
  std::atomic<uint64_t> held_total_{0}, served_total_{0}, received_total_{0}, failed_total_{0};
};

}  // namespace infera::mock
