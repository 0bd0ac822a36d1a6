// PickPlan: where one attempt of a request goes, and the holds it takes.
//
// A mixed (or decode-only) plan has one leg. A disaggregated plan has two, prefill
// first, and names the transfer protocol of the pair (dispatch/pd/pd_pair.h). The guards
// release every hold of the attempt exactly once (pick_guards.h); the prefill leg's
// holds are apart, since they may go before the request ends (--pd-prefill-guard-release).
//
// Thread-safety: owned by one request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "core/types.h"
#include "discovery/disagg_meta.h"
#include "router/plan/fleet.h"
#include "router/plan/pick_guards.h"

namespace infera::router {

struct PickLeg {
  core::Role role = core::Role::kMixed;
  std::shared_ptr<const FleetWorker> worker;
  core::TargetId target = 0;
  std::optional<uint32_t> dp_rank;  // data_parallel_rank for workers with dp_size > 1
  // The cached tokens the router's view predicts the worker will report
  // (core::PredictedHitTokens of the pick); nullopt when the pick made no prediction
  // (not kv-aware, no token ids, or images: the text overlap was not consulted).
  std::optional<uint64_t> predicted_cached_tokens;
};

struct PickPlan {
  absl::InlinedVector<PickLeg, 2> legs;
  // How the legs cooperate: the pair's disagg_protocol (discovery's one table of PD
  // protocols, disagg_meta.h); kNone: one worker does prefill and decode.
  discovery::PdProtocol protocol = discovery::PdProtocol::kNone;
  PickGuards guards;          // the last leg's holds (mixed, or decode)
  PickGuards prefill_guards;  // a disaggregated plan's prefill-leg holds
};

}  // namespace infera::router
