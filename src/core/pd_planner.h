// PdPlanner: the pools and picks of prefill/decode disaggregation (spec "Tuning
// prefill vs decode separately (PD)", architecture §9, doc/pd.md).
//
// Each candidate target carries its worker's disagg_mode (as a Role) and PD protocol.
// Plan():
//  1. Pools: prefill P, decode D, mixed M. A *complete pair* is a protocol that some
//     prefill and some decode candidate both speak.
//  2. With a complete pair: the prefill pick is Selector::Pick(role = prefill) over
//     the prefill candidates whose protocol has a decode counterpart (prefill
//     overlap weight, image affinity); the decode pick is Selector::Pick(role =
//     decode) over the decode candidates of the picked prefill worker's protocol
//     (decode overlap weight, load). Mixed candidates are not used.
//  3. Without a complete pair, the mixed candidates serve alone (role = mixed).
//  4. Without mixed candidates: only one pool present → Unavailable (the router's
//     503) naming the missing pool; both pools but no shared protocol →
//     Unimplemented (the router's 501) naming the protocols; no candidate at all →
//     InvalidArgument (as Selector::Pick).
//  Conditional disaggregation (--pd-min-uncached-tokens N, 0 = off): when the prefill
//  candidate with the longest cached prefix would still compute fewer than N
//  uncached prompt tokens, there is no prefill leg: the decode pick (role = decode)
//  serves the whole request (kind kDecodeOnly). The check hashes the prompt only
//  when N > 0.
//
// Seam for decode input demand and session affinity (issue 14): `narrow_decode`, when
// set, may shrink the decode candidates (never to empty) before the decode pick.
// `pin` (session affinity), when set, may shrink a pool's candidates (never to empty)
// before that pool is used: prefill (also for the conditional-disaggregation check),
// mixed, and decode (before `narrow_decode`).
// `choose_decode` (decode input demand, decode_demand.h), when set, sees the decode
// candidates and the original decode pick (with every candidate's exact cost, whatever
// the input's exact_costs) and may name another candidate by position: the pick is
// then made over that one candidate, so the chosen target keeps the normal block/cache
// bookkeeping (the original pick's guard is released first). Prefill and mixed picks
// never consult it.
//
// Both picks use the same RoutingInput, so the prompt is rendered and tokenized once.
//
// Thread-safety: as Selector (the caller serialises Plan and guard releases).
//
// Example:
//   PdPlanner planner(selector, index, {.min_uncached_tokens = 0});
//   absl::StatusOr<PdPlan> plan = planner.Plan(input, candidates);
//   if (plan->kind == PdPlanKind::kDisaggregated) { ... plan->prefill, plan->decode ... }
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kv_index.h"
#include "core/selector.h"
#include "core/types.h"

namespace infera::core {

struct PdCandidate {
  TargetId target = 0;
  Role mode = Role::kMixed;   // the worker's disagg_mode
  std::string_view protocol;  // its disagg_meta.protocol ("" for plain mixed workers)
};

struct PdConfig {
  uint64_t min_uncached_tokens = 0;  // --pd-min-uncached-tokens (0: always disaggregate)
};

enum class PdPlanKind : uint8_t {
  kMixed,          // one pick among the mixed workers
  kDisaggregated,  // a prefill pick and a decode pick
  kDecodeOnly,     // conditional disaggregation: the decode pick does the whole request
};
// "mixed", "disaggregated", "decode-only".
const char* PdPlanKindName(PdPlanKind kind);

struct PdPlan {
  PdPlanKind kind = PdPlanKind::kMixed;
  std::optional<PickResult> prefill;  // kDisaggregated only
  PickResult main;                    // the decode pick, or the mixed pick
  std::string_view protocol;          // kDisaggregated / kDecodeOnly: the legs' protocol
  // Conditional disaggregation: the fewest uncached prompt tokens a prefill candidate
  // would compute (only computed when min_uncached_tokens > 0).
  std::optional<uint64_t> best_uncached_tokens;
};

// A bootstrap room for SGLang: uniform-ish in [0, 2^63) with room % dp_size == rank
// (SGLang's prefill DP controller sends the request to workers[room % dp_size], and
// the decode side computes target_dp_group = room % prefill dp_size).
// REQUIRES: dp_size >= 1, rank < dp_size.
uint64_t AlignBootstrapRoom(uint64_t random, uint32_t rank, uint32_t dp_size);

class PdPlanner {
 public:
  using NarrowFn = std::function<void(const RoutingInput&, std::vector<TargetId>&)>;
  using PinFn = std::function<void(Role pool, std::vector<TargetId>&)>;
  // Position in `decode` of the target to use instead of `original.picked`; nullopt
  // (or original's position) keeps the original pick.
  using ChooseFn = std::function<std::optional<size_t>(
      const RoutingInput&, std::span<const TargetId> decode, const PickResult& original)>;

  // `selector` and `index` must outlive the planner.
  PdPlanner(Selector& selector, const KvIndex& index, PdConfig config = {});

  absl::StatusOr<PdPlan> Plan(const RoutingInput& input, std::span<const PdCandidate> candidates);

  void set_narrow_decode(NarrowFn fn) { narrow_decode_ = std::move(fn); }
  void set_pin(PinFn fn) { pin_ = std::move(fn); }
  void set_choose_decode(ChooseFn fn) { choose_decode_ = std::move(fn); }
  const PdConfig& config() const { return config_; }

 private:
  uint64_t BestUncachedTokens(const RoutingInput& input, std::span<const TargetId> prefill);
  absl::StatusOr<PickResult> PickDecode(const RoutingInput& input, std::vector<TargetId>& decode);
  void Pin(Role pool, std::vector<TargetId>& candidates);

  Selector& selector_;
  const KvIndex& index_;
  PdConfig config_;
  NarrowFn narrow_decode_;
  PinFn pin_;
  ChooseFn choose_decode_;
  // Scratch.
  std::vector<TargetId> prefill_, decode_, mixed_, pinned_;
  std::vector<BlockHash> chain_;
  std::vector<MatchCounts> matches_;
};

}  // namespace infera::core
