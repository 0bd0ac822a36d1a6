// PdProtocol: what one PD transfer protocol adds to the two legs of a disaggregated
// request (doc/pd.md §3 and §6; the pure bodies are src/router/dispatch/pd/leg_bodies.h).
//
//   sglang-bootstrap (sglang_bootstrap.cc)  concurrent; bootstrap_host/port/room
//   vllm-nixl        (vllm_nixl.cc)         serial; the prefill answer's
//                                          kv_transfer_params go to the decode leg
//   vllm-mooncake    (vllm_mooncake.cc)     concurrent; transfer_id, remote
//                                          bootstrap address and engine id
// Each is registered by one line in protocols.cc. PdPair (pd_pair.h) sends the legs
// in the protocol's order.
//
// Thread-safety: leaves are stateless singletons; every method is pure.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/plan/pick_plan.h"

namespace infera::router {

// The facts of one disaggregated request a leaf may use.
struct PdLegInput {
  const PickLeg& prefill;
  const PickLeg& decode;
  const std::string& request_id;  // a failover's pair: "<request id>-<attempt>"
  uint64_t random = 0;            // per request, from the router's seeded source
};

class PdProtocol {
 public:
  virtual ~PdProtocol() = default;
  // Concurrent: both legs are sent at once. Serial: decode after prefill answered.
  virtual bool concurrent() const = 0;
  // `body`: the prefill leg's upstream body (the client's, data_parallel_rank set).
  virtual nlohmann::json PrefillBody(nlohmann::json body, const PdLegInput& in) const = 0;
  // `body`: the decode leg's upstream body; `prefill_answer`: the prefill leg's
  // parsed answer (serial protocols only; null for concurrent ones).
  // FailedPrecondition when the answer lacks what the decode leg needs.
  virtual absl::StatusOr<nlohmann::json> DecodeBody(nlohmann::json body, const PdLegInput& in,
                                                    const nlohmann::json* prefill_answer) const = 0;
};

const PdProtocol& SglangBootstrapProtocol();
const PdProtocol& VllmNixlProtocol();
const PdProtocol& VllmMooncakeProtocol();
// REQUIRES: protocol != kNone.
const PdProtocol& PdProtocolFor(discovery::PdProtocol protocol);

}  // namespace infera::router
