// DecodeDemandRouting: the router's decode input-demand routing (spec "Optional Decode
// input-demand routing" and "Request-count weight"; doc/decode-demand.md) around
// core::DecodeDemand.
//
// PickPlanner owns one and calls it under its pick mutex, so selection and
// reservation share one short critical section:
//   Begin(ctx)       before a PD plan: this request's demand = input tokens × n (the
//                    router's token ids, else the bytes/4 estimate) and whether the
//                    count is an estimate (multimodal, not tokenized);
//   Choose(...)      core::PdPlanner's choose_decode seam, for every decode pick
//                    (disaggregated or decode-only; prefill and mixed picks never):
//                    the projected cost of each candidate, the original choice, the
//                    suggestion; kOn names the suggestion, kShadow keeps the original;
//   Book(pick, ...)  the decode pick's Reservation (moved into the plan's PickGuards),
//                    the decisions counter and the `decode_demand` debug event.
// Mode kOff: PickPlanner never calls it (no counting, no reservations).
//
// A worker whose render parity diverged (FleetWorker::renders_differently) makes the
// count an estimate for it; no worker is marked until render parity is built.
//
// Thread-safety: none; the pick mutex serialises every call and every release.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/decode_demand.h"
#include "core/selector.h"
#include "router/plan/fleet.h"
#include "router/request/request_context.h"

namespace infera::router {

class RouterMetrics;

struct DemandOptions {
  core::DemandMode mode = core::DemandMode::kOff;  // --decode-input-demand
  double request_weight = 0;                       // --decode-request-weight
};

// --decode-input-demand / --decode-request-weight, each the flag's value or, when the
// flag is absent, INFERA_DECODE_INPUT_DEMAND / INFERA_DECODE_REQUEST_WEIGHT (nullopt:
// neither given). InvalidArgument with the message the router exits with: an unknown
// mode, a mode other than off without --router-policy kv-aware, a weight that is not a
// finite number >= 0, or a weight without --decode-input-demand shadow|on.
absl::StatusOr<DemandOptions> ParseDemandOptions(const std::optional<std::string>& mode,
                                                 const std::optional<std::string>& weight,
                                                 core::Policy policy);

class DecodeDemandRouting {
 public:
  using OwnerFn = std::function<const FleetWorker*(core::TargetId)>;

  DecodeDemandRouting(DemandOptions options, RouterMetrics& metrics);
  DecodeDemandRouting(const DecodeDemandRouting&) = delete;
  DecodeDemandRouting& operator=(const DecodeDemandRouting&) = delete;

  core::DemandMode mode() const { return options_.mode; }
  bool enabled() const { return options_.mode != core::DemandMode::kOff; }

  void Begin(const RequestContext& ctx);
  // `owner_of` maps a candidate to its worker (alive for the plan).
  std::optional<size_t> Choose(std::span<const core::TargetId> decode,
                               const core::PickResult& original, const OwnerFn& owner_of);
  core::DecodeDemand::Reservation Book(const core::PickResult& pick, const FleetWorker& owner);
  // The worker left discovery: its targets' entries are detached (live reservations
  // release into them; a recreated worker starts from zero).
  void Forget(const FleetWorker& worker);

  uint64_t Tokens(const std::string& key) const { return demand_.Tokens(key); }
  uint64_t Requests(const std::string& key) const { return demand_.Requests(key); }
  uint64_t LiveReservations() const { return demand_.LiveReservations(); }
  // Other router replicas' demand on the target (doc/replica-sync.md).
  void SetRemote(const std::string& key, uint64_t tokens, uint64_t requests) {
    demand_.SetRemote(key, tokens, requests);
  }

 private:
  static std::string KeyOf(const FleetWorker& worker, core::TargetId target);

  DemandOptions options_;
  RouterMetrics& metrics_;
  core::DecodeDemand demand_;
  // This plan's request and decision (Begin .. Book).
  std::string request_id_;
  uint64_t demand_tokens_ = 0;
  bool request_estimated_ = false;
  bool decided_ = false;
  core::DemandDecision decision_;
  std::vector<std::string> keys_;
  std::vector<double> loads_;
};

}  // namespace infera::router
