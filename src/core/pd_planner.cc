#include "core/pd_planner.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/hashing.h"

namespace infera::core {
namespace {

constexpr uint64_t kRoomLimit = uint64_t{1} << 63;

// Distinct protocols of `pool`, in first-seen order.
std::vector<std::string_view> Protocols(std::span<const PdCandidate> candidates, Role mode) {
  std::vector<std::string_view> out;
  for (const PdCandidate& c : candidates) {
    if (c.mode == mode && std::find(out.begin(), out.end(), c.protocol) == out.end()) {
      out.push_back(c.protocol);
    }
  }
  return out;
}

std::string Join(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n.empty() ? std::string("(none)") : std::string(n);
  }
  return out;
}

}  // namespace

const char* PdPlanKindName(PdPlanKind kind) {
  switch (kind) {
    case PdPlanKind::kMixed:
      return "mixed";
    case PdPlanKind::kDisaggregated:
      return "disaggregated";
    case PdPlanKind::kDecodeOnly:
      return "decode-only";
  }
  return "mixed";
}

uint64_t AlignBootstrapRoom(uint64_t random, uint32_t rank, uint32_t dp_size) {
  const uint64_t size = dp_size == 0 ? 1 : dp_size;
  uint64_t room = random & (kRoomLimit - 1);
  room = room - room % size + rank % size;
  if (room >= kRoomLimit) room -= size;  // only when room was within dp_size of 2^63
  return room;
}

PdPlanner::PdPlanner(Selector& selector, const KvIndex& index, PdConfig config)
    : selector_(selector), index_(index), config_(config) {}

uint64_t PdPlanner::BestUncachedTokens(const RoutingInput& input,
                                       std::span<const TargetId> prefill) {
  const uint64_t prompt = input.tokens ? input.tokens->size() : input.estimated_tokens;
  // Text overlap is not trusted for image requests (Selector does the same).
  if (!input.tokens || !input.image_keys.empty() || prompt == 0) return prompt;
  uint64_t best = prompt;
  matches_.assign(1, MatchCounts{});
  size_t chain_block_size = 0;
  for (TargetId t : prefill) {
    const size_t bs = index_.BlockSize(t);
    if (bs == 0 || !input.OverlapTrusted(t)) continue;  // an untrusted view holds nothing
    if (bs != chain_block_size) {
      chain_.clear();
      AppendChain(*input.tokens, bs, 0, input.keys, chain_);
      chain_block_size = bs;
    }
    matches_[0] = MatchCounts{};
    index_.FindMatches(chain_, std::span<const TargetId>(&t, 1), matches_);
    // As the engines do: at least one prompt token is always computed.
    const uint64_t max_hit_blocks = (prompt - 1) / bs;
    const uint64_t hit_tokens = std::min<uint64_t>(matches_[0].total(), max_hit_blocks) * bs;
    best = std::min(best, prompt - hit_tokens);
  }
  return best;
}

void PdPlanner::Pin(Role pool, std::vector<TargetId>& candidates) {
  if (!pin_ || candidates.size() <= 1) return;
  pinned_ = candidates;
  pin_(pool, pinned_);
  if (!pinned_.empty()) candidates.swap(pinned_);
}

absl::StatusOr<PickResult> PdPlanner::PickDecode(const RoutingInput& input,
                                                 std::vector<TargetId>& decode) {
  Pin(Role::kDecode, decode);
  if (narrow_decode_) {
    std::vector<TargetId> narrowed = decode;
    narrow_decode_(input, narrowed);
    if (!narrowed.empty()) decode.swap(narrowed);
  }
  RoutingInput decode_input = input;
  decode_input.role = Role::kDecode;
  // The chooser weighs every candidate's cost (decode demand's ties): exact ones.
  if (choose_decode_) decode_input.exact_costs = true;
  absl::StatusOr<PickResult> pick = selector_.Pick(decode_input, decode);
  if (!pick.ok() || !choose_decode_) return pick;
  const std::optional<size_t> other = choose_decode_(decode_input, decode, *pick);
  if (!other || *other >= decode.size() || decode[*other] == pick->picked) return pick;
  pick->guard.Release();
  const TargetId chosen = decode[*other];
  return selector_.Pick(decode_input, std::span<const TargetId>(&chosen, 1));
}

absl::StatusOr<PdPlan> PdPlanner::Plan(const RoutingInput& input,
                                       std::span<const PdCandidate> candidates) {
  if (candidates.empty()) return absl::InvalidArgumentError("no candidate targets");
  const std::vector<std::string_view> prefill_protocols = Protocols(candidates, Role::kPrefill);
  const std::vector<std::string_view> decode_protocols = Protocols(candidates, Role::kDecode);
  std::vector<std::string_view> shared;
  for (std::string_view p : prefill_protocols) {
    if (std::find(decode_protocols.begin(), decode_protocols.end(), p) != decode_protocols.end()) {
      shared.push_back(p);
    }
  }
  auto speaks_shared = [&](const PdCandidate& c) {
    return std::find(shared.begin(), shared.end(), c.protocol) != shared.end();
  };
  prefill_.clear();
  mixed_.clear();
  for (const PdCandidate& c : candidates) {
    if (c.mode == Role::kMixed) mixed_.push_back(c.target);
    if (c.mode == Role::kPrefill && speaks_shared(c)) prefill_.push_back(c.target);
  }

  Pin(Role::kPrefill, prefill_);
  PdPlan plan;
  if (shared.empty()) {
    if (!mixed_.empty()) {
      Pin(Role::kMixed, mixed_);
      RoutingInput mixed_input = input;
      mixed_input.role = Role::kMixed;
      auto pick = selector_.Pick(mixed_input, mixed_);
      if (!pick.ok()) return pick.status();
      plan.kind = PdPlanKind::kMixed;
      plan.main = *std::move(pick);
      return plan;
    }
    if (decode_protocols.empty()) {
      return absl::UnavailableError(
          absl::StrCat("no decode worker available for this model (", prefill_protocols.size(),
                       prefill_protocols.size() == 1 ? " prefill protocol" : " prefill protocols",
                       " present: ", Join(prefill_protocols), "); PD needs both pools"));
    }
    if (prefill_protocols.empty()) {
      return absl::UnavailableError(
          absl::StrCat("no prefill worker available for this model (decode workers speak ",
                       Join(decode_protocols), "); PD needs both pools"));
    }
    return absl::UnimplementedError(
        absl::StrCat("prefill and decode workers speak different PD protocols (prefill: ",
                     Join(prefill_protocols), "; decode: ", Join(decode_protocols), ")"));
  }

  if (config_.min_uncached_tokens > 0) {
    const uint64_t uncached = BestUncachedTokens(input, prefill_);
    plan.best_uncached_tokens = uncached;
    if (uncached < config_.min_uncached_tokens) {
      // Every decode worker of a shared protocol can serve the request alone.
      decode_.clear();
      for (const PdCandidate& c : candidates) {
        if (c.mode == Role::kDecode && speaks_shared(c)) decode_.push_back(c.target);
      }
      auto pick = PickDecode(input, decode_);
      if (!pick.ok()) return pick.status();
      plan.kind = PdPlanKind::kDecodeOnly;
      for (const PdCandidate& c : candidates) {
        if (c.target == pick->picked) plan.protocol = c.protocol;
      }
      plan.main = *std::move(pick);
      return plan;
    }
  }

  RoutingInput prefill_input = input;
  prefill_input.role = Role::kPrefill;
  auto prefill = selector_.Pick(prefill_input, prefill_);
  if (!prefill.ok()) return prefill.status();
  for (const PdCandidate& c : candidates) {
    if (c.target == prefill->picked) plan.protocol = c.protocol;
  }
  decode_.clear();
  for (const PdCandidate& c : candidates) {
    if (c.mode == Role::kDecode && c.protocol == plan.protocol) decode_.push_back(c.target);
  }
  auto decode = PickDecode(input, decode_);
  if (!decode.ok()) return decode.status();  // the prefill guard releases on return
  plan.kind = PdPlanKind::kDisaggregated;
  plan.prefill = *std::move(prefill);
  plan.main = *std::move(decode);
  return plan;
}

}  // namespace infera::core
