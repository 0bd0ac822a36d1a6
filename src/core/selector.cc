#include "core/selector.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/hashing.h"

namespace infera::core {
namespace {

// Costs within this relative distance are a tie (sums of doubles are not exact).
bool Less(double a, double b) { return a < b - 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)}); }

// Python's float repr for the values weights take: 1.0, 0.5, 20.0, 1e-05.
std::string PyFloat(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kKvAware:
      return "kv-aware";
    case Policy::kRoundRobin:
      return "round-robin";
    case Policy::kRandom:
      return "random";
    case Policy::kLeastLoad:
      return "least-load";
    case Policy::kDynamo:
      return "dynamo";
    case Policy::kLmetric:
      return "lmetric";
    case Policy::kLlmD:
      return "llm-d";
    case Policy::kSglang:
      return "sglang";
  }
  return "kv-aware";
}

absl::StatusOr<Policy> ParsePolicy(std::string_view name) {
  for (Policy p : {Policy::kKvAware, Policy::kRoundRobin, Policy::kRandom, Policy::kLeastLoad,
                   Policy::kDynamo, Policy::kLmetric, Policy::kLlmD, Policy::kSglang}) {
    if (name == PolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown router policy '", std::string(name),
      "' (expected kv-aware, round-robin, random, least-load, dynamo, lmetric, llm-d or sglang)"));
}

double PolicyConfig::OverlapWeight(Role role) const {
  switch (role) {
    case Role::kPrefill:
      return prefill_overlap_weight.value_or(overlap_weight);
    case Role::kDecode:
      return decode_overlap_weight.value_or(overlap_weight);
    case Role::kMixed:
      break;
  }
  return overlap_weight;
}

LoadOptions PolicyConfig::Load() const {
  return LoadOptions{.term = load_term,
                     .recent_decay = recent_decay,
                     .kv_pressure_threshold = kv_pressure_threshold,
                     .kv_pressure_slope = kv_pressure_slope,
                     .decode_load_blocks = decode_load_blocks,
                     .seq_wait_blocks = seq_wait_blocks,
                     .timed_prefill = timed_prefill,
                     .timed_prefill_floor = timed_prefill_floor,
                     .prefill_rate_blocks_per_s = prefill_rate};
}

absl::Status PolicyConfig::Validate() const {
  auto check = [](const char* flag, double v) -> absl::Status {
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " must be a finite number >= 0, got ", v));
    }
    return absl::OkStatus();
  };
  for (auto [flag, v] : {std::pair{"--kv-overlap-weight", overlap_weight},
                         std::pair{"--kv-host-hit-weight", host_hit_weight},
                         std::pair{"--kv-disk-hit-weight", disk_hit_weight},
                         std::pair{"multimodal weight factor", mm_weight_factor},
                         std::pair{"--kv-pressure-slope", kv_pressure_slope},
                         std::pair{"--kv-decode-load", decode_load_blocks},
                         std::pair{"--kv-seq-wait-load", seq_wait_blocks},
                         std::pair{"--kv-inflight-credit", inflight_credit}}) {
    if (absl::Status s = check(flag, v); !s.ok()) return s;
  }
  if (prefill_overlap_weight) {
    if (absl::Status s = check("--kv-prefill-overlap-weight", *prefill_overlap_weight); !s.ok()) {
      return s;
    }
  }
  if (decode_overlap_weight) {
    if (absl::Status s = check("--kv-decode-overlap-weight", *decode_overlap_weight); !s.ok()) {
      return s;
    }
  }
  if (!std::isfinite(prefill_rate) || prefill_rate <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-prefill-rate must be a finite number > 0, got ", prefill_rate));
  }
  if (!(timed_prefill_floor >= 0 && timed_prefill_floor <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-timed-prefill-floor must be in [0, 1], got ", timed_prefill_floor));
  }
  if (!(recent_decay >= 0 && recent_decay <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-recent-decay must be in [0, 1], got ", recent_decay));
  }
  if (!(kv_pressure_threshold >= 0 && kv_pressure_threshold <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-pressure-threshold must be in [0, 1], got ", kv_pressure_threshold));
  }
  return absl::OkStatus();
}

std::optional<double> RunnerUpCost(std::span<const double> costs, double cost) {
  if (costs.size() < 2) return std::nullopt;
  bool skipped = false;
  double best = std::numeric_limits<double>::infinity();
  for (double c : costs) {
    if (!skipped && c == cost) {
      skipped = true;
      continue;
    }
    best = std::min(best, c);
  }
  return best;
}

std::string FormatPickLog(const PickResult& r) {
  if (r.policy == Policy::kRoundRobin || r.policy == Policy::kRandom) {
    return absl::StrCat("pick policy=", PolicyName(r.policy), " role=", RoleName(r.role),
                        " picked=", r.picked_name);
  }
  return absl::StrCat("pick policy=", PolicyName(r.policy), " role=", RoleName(r.role),
                      " request_id=", r.request_id, " picked=", r.picked_name,
                      " cache_hits=", r.cache_hits, " request_blocks=", r.request_blocks,
                      " active_blocks=", r.active_blocks, " w_overlap=", PyFloat(r.w_overlap),
                      " mm_images=", r.mm_images, " mm_affinity_hits=", r.mm_affinity_hits);
}

Selector::Selector(const PolicyConfig& config, const KvIndex& index, const Clock* clock)
    : config_(config),
      index_(index),
      clock_(clock),
      load_(config.Load()),
      images_(ImageAffinity::kDefaultCapacity),
      random_(config.random_seed) {
  if (config.policy == Policy::kSglang) {
    // No expiry (SGLang evicts by size only): the logical clock never reaches the ttl.
    sglang_tree_ = std::make_unique<ApproxCache>(
        ApproxConfig{.ttl_ns = std::numeric_limits<int64_t>::max(),
                     .max_blocks = std::max<size_t>(1, config.sglang.max_tree_blocks)});
  }
}

std::optional<TargetId> Selector::ReadBlockSizes(std::span<const TargetId> candidates) {
  block_sizes_.resize(candidates.size());
  chains_used_ = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    block_sizes_[i] = static_cast<uint32_t>(index_.BlockSize(candidates[i]));
    if (block_sizes_[i] == 0) return candidates[i];
  }
  return std::nullopt;
}

const std::vector<BlockHash>& Selector::ChainFor(const RoutingInput& input, size_t block_size) {
  for (size_t i = 0; i < chains_used_; ++i) {
    if (chains_[i].first == block_size) return chains_[i].second;
  }
  if (chains_used_ == chains_.size()) chains_.emplace_back();
  auto& [size, chain] = chains_[chains_used_++];
  size = block_size;
  chain.clear();
  AppendChain(*input.tokens, block_size, 0, input.keys, chain);
  return chain;
}

absl::StatusOr<PickResult> Selector::Pick(const RoutingInput& input,
                                          std::span<const TargetId> candidates) {
  if (candidates.empty()) return absl::InvalidArgumentError("no candidate targets");
  if (std::optional<TargetId> dead = ReadBlockSizes(candidates)) {
    return absl::FailedPreconditionError(absl::StrCat("candidate ", *dead, " is not a live target"));
  }
  now_ns_ = Now();
  PickResult result;
  double missed = -1;  // < 0: the whole prompt
  switch (config_.policy) {
    case Policy::kKvAware:
      result = PickKvAware(input, candidates);
      missed = result.request_blocks - result.credited;
      break;
    case Policy::kRoundRobin:
      result.picked = candidates[PickRoundRobin(candidates)];
      break;
    case Policy::kRandom:
      result.picked = candidates[random_.Uniform(candidates.size())];
      break;
    case Policy::kLeastLoad: {
      const size_t best = PickLeastLoad(input, candidates);
      result.picked = candidates[best];
      result.cost = result.load = costs_scratch_[best];
      break;
    }
    case Policy::kDynamo:
    case Policy::kLmetric:
    case Policy::kLlmD:
    case Policy::kSglang:
      result = PickPeer(input, candidates);
      // Dynamo and LMetric charge the blocks they believe uncached; the others the
      // whole prompt (their pending prefill is bookkeeping: llm-d counts entries).
      if (config_.policy == Policy::kDynamo || config_.policy == Policy::kLmetric) {
        missed = result.request_blocks - result.credited;
      }
      break;
  }
  Finish(input, result.picked, missed, result);
  return result;
}

double Selector::Settle(std::span<const TargetId> candidates, bool from_views, bool decay,
                        bool terms) {
  if (decay && config_.load_term == LoadTerm::kSpec) load_.DecayRecent();
  if (terms) terms_.resize(candidates.size());
  double prefilling = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const TargetId t = candidates[i];
    load_.ObserveCachedBlocks(t, index_.BlockCount(t));
    if (config_.settle_from_views && from_views && load_.MaySettle(t)) {
      load_.Settle(
          t, index_.ViewVersion(t),
          [&](BlockHash h) {
            for (Tier tier : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
              if (index_.Holds(t, h, tier)) return true;
            }
            return false;
          },
          clock_ != nullptr ? std::optional<int64_t>(now_ns_) : std::nullopt);
    }
    prefilling += static_cast<double>(load_.PrefillingRequests(t));
    // Settling t changes no other target's load: its terms are final here.
    if (terms) terms_[i] = load_.TermsOf(t, request_blocks_[i], now_ns_);
  }
  return prefilling;
}

size_t Selector::BlocksOf(const RoutingInput& input, size_t block_size) {
  return input.tokens.has_value() ? input.tokens->size() / block_size
                                  : input.estimated_tokens / block_size;
}

void Selector::MatchCandidates(const RoutingInput& input, std::span<const TargetId> candidates,
                               bool use_tokens) {
  const size_t n = candidates.size();
  matches_.resize(n);
  one_block_size_ = std::all_of(block_sizes_.begin(), block_sizes_.end(),
                                [&](uint32_t b) { return b == block_sizes_[0]; });
  if (one_block_size_) {
    // One block size (the usual fleet): one group, no per-candidate scratch.
    uint32_t blocks;
    if (use_tokens) {
      const std::vector<BlockHash>& chain = ChainFor(input, block_sizes_[0]);
      blocks = static_cast<uint32_t>(chain.size());
      index_.FindMatches(chain, candidates, matches_);
    } else {
      std::fill(matches_.begin(), matches_.end(), MatchCounts{});
      blocks = static_cast<uint32_t>(BlocksOf(input, block_sizes_[0]));
    }
    request_blocks_.assign(n, blocks);
    return;
  }
  matches_.assign(n, MatchCounts{});
  request_blocks_.assign(n, 0);
  grouped_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (grouped_[i]) continue;
    const size_t block_size = block_sizes_[i];
    group_.clear();
    group_ids_.clear();
    for (size_t j = i; j < n; ++j) {
      if (!grouped_[j] && block_sizes_[j] == block_size) {
        grouped_[j] = 1;
        group_.push_back(j);
        group_ids_.push_back(candidates[j]);
      }
    }
    uint32_t blocks;
    if (use_tokens) {
      const std::vector<BlockHash>& chain = ChainFor(input, block_size);
      blocks = static_cast<uint32_t>(chain.size());
      if (group_.size() == n) {
        index_.FindMatches(chain, candidates, matches_);
      } else {
        group_matches_.assign(group_.size(), MatchCounts{});
        index_.FindMatches(chain, group_ids_, group_matches_);
        for (size_t k = 0; k < group_.size(); ++k) matches_[group_[k]] = group_matches_[k];
      }
    } else if (input.tokens.has_value()) {
      blocks = static_cast<uint32_t>(input.tokens->size() / block_size);
    } else {
      blocks = static_cast<uint32_t>(input.estimated_tokens / block_size);
    }
    for (size_t k : group_) request_blocks_[k] = blocks;
  }
}

PickResult Selector::PickKvAware(const RoutingInput& input, std::span<const TargetId> candidates) {
  PickResult result;
  const size_t n = candidates.size();
  const double w = config_.OverlapWeight(input.role) * input.overlap_weight_factor;
  const bool has_images = !input.image_keys.empty();
  KvAwareTerms k;
  // Text overlap is not trusted when images are present: the placeholder tokens are
  // the same for every image. Image affinity replaces it, in the prefill/mixed pool.
  k.use_tokens = input.tokens.has_value() && !has_images;
  k.use_images = has_images && input.role != Role::kDecode;
  k.w_overlap = result.w_overlap = k.use_tokens ? w : 0.0;
  k.w_mm = k.use_images ? config_.mm_weight_factor * w : 0.0;
  k.inflight_on = config_.inflight_credit != 0 && config_.inflight_credit_holders != 0 &&
                  k.use_tokens && input.role != Role::kDecode;

  MatchCandidates(input, candidates, k.use_tokens);
  if (k.inflight_on) k.inflight_on = InflightShareGate(input, n);
  if (k.inflight_on) {
    // No in-flight request anywhere starts with the prompt's first block: no candidate
    // has an in-flight run, and the pruned pick's bounds stay those without the credit.
    // (One block size: the usual fleet; else each candidate asks InflightRun.)
    const std::vector<BlockHash>& chain = ChainFor(input, block_sizes_[0]);
    if (one_block_size_ && (chain.empty() || !load_.AnyActiveFirst(chain.front()))) {
      k.inflight_on = false;
    }
  }

  // The pruned pick reads the load terms of the candidates it scores only.
  const bool pruned = !input.exact_costs;
  const double q = Settle(candidates, /*from_views=*/true, /*decay=*/true, /*terms=*/!pruned);
  // Load queue scaling: the load term divided by 1 + the candidates' mean requests not
  // past their prefill, i.e. a miss weighed by 1 / (1 − utilisation) (doc/selection.md).
  if (config_.load_queue_scaling && config_.load_term == LoadTerm::kWork) {
    k.discount = 1.0 + q / static_cast<double>(n);
  }
  // KV pressure steers a request to a target with room; when no candidate has any left
  // it only steers requests off their cache (doc/selection.md "KV pressure"). Decode
  // picks keep it: there it is the balance of the pool's memory.
  k.yield_pressure = config_.kv_pressure_yield && input.role != Role::kDecode &&
                     config_.load_term == LoadTerm::kWork && EveryCandidatePressed(candidates);
  size_t best = 0;
  Scored best_s;
  result.costs.resize(n);
  const size_t start = TieStart(input.role, n);
  if (pruned) {
    best = PickPruned(input, candidates, k, start, result, best_s);
  } else {
    // The two least costs (a repeated one counts twice): the runner-up is the least
    // but the winner's, RunnerUpCost(costs, cost) without a second pass.
    double least = std::numeric_limits<double>::infinity(), second = least;
    for (size_t j = 0; j < n; ++j) {
      const size_t i = (start + j) % n;
      const Scored s = ScoreOne(input, i, candidates[i], k, terms_[i]);
      result.costs[i] = s.cost;
      if (s.cost < second) {
        second = s.cost < least ? least : s.cost;
        least = std::min(least, s.cost);
      }
      if (j == 0 || Replaces(s, best_s)) {
        best = i;
        best_s = s;
      }
    }
    result.scored = n;
    if (n > 1) result.runner_up_cost = best_s.cost == least ? second : least;
  }
  const TargetId winner = candidates[best];
  result.picked = winner;
  result.cost = best_s.cost;
  result.load = best_s.load;
  result.credited = best_s.credited;
  result.request_blocks = request_blocks_[best];
  result.hits = matches_[best];
  result.cache_hits = matches_[best].total();
  result.inflight_hits = static_cast<uint32_t>(best_s.inflight);
  result.mm_images = static_cast<uint32_t>(input.image_keys.size());
  if (k.use_images) {
    result.mm_affinity_hits = static_cast<uint32_t>(images_.CountHeld(winner, input.image_keys));
    images_.Record(winner, input.image_keys);
  }
  return result;
}

Selector::Scored Selector::ScoreOne(const RoutingInput& input, size_t i, TargetId t,
                                    const KvAwareTerms& k, const LoadState::Terms& terms) {
  Scored s;
  const MatchCounts& m = matches_[i];
  // Image requests do not trust text overlap, nor does anyone a target that renders
  // differently: nothing is credited.
  const bool trusted = k.use_tokens && input.OverlapTrusted(t);
  s.inflight = trusted && k.inflight_on ? InflightRun(input, t, m.total()) : 0;
  s.credited =
      trusted ? predictions_.Trust(t) * (m.device_hits + config_.host_hit_weight * m.host_hits +
                                         config_.disk_hit_weight * m.disk_hits +
                                         config_.inflight_credit * static_cast<double>(s.inflight))
              : 0.0;
  // The sequence-slot wait is not prefill work queued ahead: not discounted, so a cold
  // engine wins once every warm one is at its max_num_seqs.
  const double slot_wait = terms.seq_wait;
  const double load = k.yield_pressure ? terms.load - terms.pressure : terms.load;
  s.load = (load - slot_wait) / k.discount + slot_wait;
  s.cost = k.w_overlap * (request_blocks_[i] - s.credited) + s.load;
  if (k.use_images) {
    const size_t held = images_.CountHeld(t, input.image_keys);
    s.cost += k.w_mm * static_cast<double>(input.image_keys.size() - held);
  }
  s.active = terms.active;
  return s;
}

bool Selector::EveryCandidatePressed(std::span<const TargetId> candidates) const {
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!(load_.KvPressure(candidates[i], request_blocks_[i]) > 0)) return false;
  }
  return !candidates.empty();
}

bool Selector::Replaces(const Scored& s, const Scored& best) {
  // Ties: the lower load, then the fewer in-flight blocks (the engine whose decode
  // steps are lighter), then the scan order.
  const bool tie = !Less(s.cost, best.cost) && !Less(best.cost, s.cost);
  return Less(s.cost, best.cost) ||
         (tie && (Less(s.load, best.load) || (!Less(best.load, s.load) && s.active < best.active)));
}

bool Selector::ShareUnderGate(BlockHash first, size_t candidates) const {
  const size_t window = config_.inflight_share_window;
  if (window == 0) return true;
  if (recent_first_.size() < window) return false;  // no share measured yet
  auto it = recent_count_.find(first);
  const size_t count = (it == recent_count_.end() ? 0 : it->second) + 1;  // with this one
  return SmallShare(count, candidates, window);
}

bool Selector::InflightShareGate(const RoutingInput& input, size_t candidates) {
  const size_t window = config_.inflight_share_window;
  if (window == 0) return true;
  const std::vector<BlockHash>& chain = ChainFor(input, block_sizes_[0]);
  if (chain.empty()) return false;  // no full block: nothing in flight to join
  const BlockHash first = chain.front();
  if (recent_first_.size() < window) {
    recent_first_.push_back(first);
  } else {
    BlockHash& slot = recent_first_[recent_next_];
    auto it = recent_count_.find(slot);
    if (--it->second == 0) recent_count_.erase(it);
    slot = first;
    recent_next_ = (recent_next_ + 1) % window;
  }
  return SmallShare(++recent_count_[first], candidates, window);
}

size_t Selector::InflightRun(const RoutingInput& input, TargetId t, size_t view_hits) {
  const uint32_t holders = config_.inflight_credit_holders;
  if (config_.inflight_credit == 0 || holders == 0) return 0;
  const std::vector<BlockHash>& chain = ChainFor(input, index_.BlockSize(t));
  if (view_hits >= chain.size()) return 0;
  const size_t held = load_.ActiveHolders(t, chain.front());
  if (held == 0 || held >= holders) return 0;
  return load_.ActiveRun(t, chain, view_hits);
}

PickResult Selector::PickPeer(const RoutingInput& input, std::span<const TargetId> candidates) {
  PickResult result;
  const size_t n = candidates.size();
  const Policy policy = config_.policy;
  // Like kv-aware: text overlap only with token ids and without images.
  const bool use_tokens = input.tokens.has_value() && input.image_keys.empty();
  MatchCandidates(input, candidates, use_tokens && policy != Policy::kSglang);
  // Dynamo holds a request's prefill load until its first token (no view settling).
  Settle(candidates, /*from_views=*/policy != Policy::kDynamo);
  signals_.assign(n, PeerSignals{});
  for (size_t i = 0; i < n; ++i) {
    const TargetId t = candidates[i];
    PeerSignals& s = signals_[i];
    s.request_blocks = request_blocks_[i];
    if (input.OverlapTrusted(t)) s.hits = matches_[i];
    s.pending_prefill_blocks = load_.PendingPrefillBlocks(t) + load_.RemotePendingPrefillBlocks(t);
    s.active_blocks = load_.ActiveBlocks(t) + load_.RemoteActiveBlocks(t);
    s.requests = load_.Requests(t);
    s.prefilling = load_.PrefillingRequests(t);
    s.capacity_blocks = load_.CapacityBlocks(t);
    if (policy == Policy::kDynamo && input.tokens.has_value()) {
      s.new_active_blocks = load_.NewActiveBlocks(t, ChainFor(input, index_.BlockSize(t)));
    } else if (policy == Policy::kDynamo) {
      s.new_active_blocks = request_blocks_[i];
    }
    if (policy == Policy::kSglang) {
      s.approx_blocks = sglang_tree_->BlockCount(t);
      if (use_tokens) {
        for (BlockHash h : ChainFor(input, index_.BlockSize(t))) {
          if (!sglang_tree_->Holds(t, h)) break;
          ++s.approx_hits;
        }
      }
    }
  }
  const size_t start = TieStart(input.role, n);
  result.costs.resize(n);
  size_t best = start;
  if (policy == Policy::kSglang) {
    best = SglangChoose(signals_, config_.sglang, start);
    for (size_t i = 0; i < n; ++i) result.costs[i] = static_cast<double>(signals_[i].requests);
  } else {
    if (policy == Policy::kLlmD) {
      LlmdScores(signals_, config_.llmd, result.costs);
      for (double& c : result.costs) c = -c;  // lower is better, as every cost
    } else {
      for (size_t i = 0; i < n; ++i) {
        result.costs[i] = policy == Policy::kDynamo
                              ? DynamoCost(signals_[i], input.role, config_.dynamo)
                              : LmetricCost(signals_[i], config_.dynamo);
      }
    }
    for (size_t k = 1; k < n; ++k) {
      const size_t i = (start + k) % n;
      if (Less(result.costs[i], result.costs[best])) best = i;
    }
  }
  const TargetId winner = candidates[best];
  result.picked = winner;
  result.cost = result.costs[best];
  result.runner_up_cost = RunnerUpCost(result.costs, result.cost);
  result.request_blocks = request_blocks_[best];
  result.hits = signals_[best].hits;
  result.cache_hits = signals_[best].hits.total();
  result.credited = DynamoCredit(signals_[best], config_.dynamo);
  result.load = load_.Load(winner, request_blocks_[best], now_ns_);
  if (policy == Policy::kSglang && use_tokens) {
    // The tree learns every routed request (SGLang inserts it whichever branch chose).
    std::vector<BlockHash> removed;
    sglang_tree_->Record(winner, ChainFor(input, index_.BlockSize(winner)), ++sglang_clock_,
                         removed);
    result.cache_hits = static_cast<uint32_t>(signals_[best].approx_hits);
  }
  return result;
}

size_t Selector::PickRoundRobin(std::span<const TargetId> candidates) {
  uint64_t& next =
      rotations_.try_emplace(std::vector<TargetId>(candidates.begin(), candidates.end()), 0)
          .first->second;
  return next++ % candidates.size();
}

size_t Selector::PickLeastLoad(const RoutingInput& input, std::span<const TargetId> candidates) {
  Settle(candidates);
  const size_t n = candidates.size();
  costs_scratch_.resize(n);
  const size_t start = TieStart(input.role, n);
  size_t best = start;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    costs_scratch_[i] = load_.Load(candidates[i], BlocksOf(input, block_sizes_[i]), now_ns_);
    if (k > 0 && Less(costs_scratch_[i], costs_scratch_[best])) best = i;
  }
  return best;
}

void Selector::Finish(const RoutingInput& input, TargetId picked, double missed_blocks,
                      PickResult& result) {
  result.policy = config_.policy;
  result.role = input.role;
  result.request_id = std::string(input.request_id);
  result.picked = picked;
  result.picked_name = index_.Key(picked).ToString();
  if (result.policy != Policy::kKvAware) {
    result.mm_images = static_cast<uint32_t>(input.image_keys.size());
  }
  const size_t block_size = index_.BlockSize(picked);
  result.active_blocks = load_.ActiveBlocks(picked);
  PendingPrefill prefill;
  if (input.tokens.has_value()) {
    const std::vector<BlockHash>& chain = ChainFor(input, block_size);
    result.request_blocks = static_cast<uint32_t>(chain.size());
    if (!chain.empty()) prefill.last_block = chain.back();
  } else {
    result.request_blocks = static_cast<uint32_t>(input.estimated_tokens / block_size);
  }
  prefill.blocks = missed_blocks < 0 ? result.request_blocks : missed_blocks;
  prefill.dispatched_ns = now_ns_;
  // kv-aware: the prefill starts after the consecutive hits; other policies did not
  // look, so its progress is counted from block 0 (blocks cached already count as done).
  // The credited in-flight run is not computed here either.
  prefill.first_block = missed_blocks < 0 ? 0 : result.cache_hits + result.inflight_hits;
  if (result.policy == Policy::kKvAware) {
    load_.ChargeRecent(picked, prefill.blocks, prefill.last_block);
  }
  if (input.tokens.has_value()) {
    result.guard = load_.AddActive(picked, ChainFor(input, block_size), 0, prefill);
  } else {
    result.guard = load_.AddActive(picked, {}, result.request_blocks, prefill);
  }
}

double Selector::MinLoad(std::span<const TargetId> candidates) {
  now_ns_ = Now();
  Settle(candidates, /*from_views=*/config_.policy != Policy::kDynamo, /*decay=*/false);
  double best = std::numeric_limits<double>::infinity();
  for (TargetId t : candidates) best = std::min(best, PendingPrefillOf(t));
  return candidates.empty() ? 0.0 : best;
}

double Selector::PendingPrefillOf(TargetId t) const {
  return load_.RemainingPrefillBlocks(t, now_ns_) + load_.RemotePendingPrefillBlocks(t);
}

bool Selector::AnyBelow(std::span<const TargetId> candidates, double threshold) {
  now_ns_ = Now();
  for (size_t i = 0; i < candidates.size(); ++i) {
    Settle(candidates.subspan(i, 1), /*from_views=*/config_.policy != Policy::kDynamo,
           /*decay=*/false);
    if (PendingPrefillOf(candidates[i]) < threshold) return true;
  }
  return false;
}

Selector::Hold Selector::AdviseHold(const RoutingInput& input,
                                    std::span<const TargetId> candidates, double threshold,
                                    double join_threshold, bool others_waiting) {
  if (candidates.empty()) return Hold::kOffer;
  const bool joinable = join_threshold > 0 && input.tokens.has_value() && input.image_keys.empty();
  // The usual case, a candidate under both thresholds and nobody waiting: the scan stops
  // at the first such candidate (O(1) at light load, whatever the pool's size).
  const bool under_join = joinable && AnyBelow(candidates, std::min(join_threshold, threshold));
  if (under_join && !others_waiting) return Hold::kOffer;
  if (!under_join && !AnyBelow(candidates, threshold)) return Hold::kWait;
  if (!joinable) return Hold::kOffer;
  if (ReadBlockSizes(candidates)) return Hold::kOffer;  // not live: the pick will say so
  MatchCandidates(input, candidates, /*use_tokens=*/true);
  // A candidate that renders the prompt differently is credited nothing (as in the pick).
  auto hits_on = [&](size_t i) -> size_t {
    return input.OverlapTrusted(candidates[i]) ? matches_[i].device_hits : 0;
  };
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (request_blocks_[i] > 0 && 2 * hits_on(i) >= request_blocks_[i]) return Hold::kBypass;
  }
  if (under_join) return Hold::kOffer;
  // Waiting pays when it can make the prompt half cached: some candidate's cached run
  // plus the blocks requests in flight there are computing past it reach half the prompt
  // (a shared first block alone, e.g. a system prompt everyone has, is not enough).
  const std::vector<BlockHash>& first = ChainFor(input, block_sizes_[0]);
  if (first.empty() || !load_.AnyActiveFirst(first.front())) return Hold::kOffer;
  // A prompt that is much of the traffic needs many homes, not one copy to join (the
  // in-flight credit's share gate): holding its duplicates behind its first copy would
  // keep it on one engine.
  if (!ShareUnderGate(first.front(), candidates.size())) return Hold::kOffer;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::vector<BlockHash>& chain = one_block_size_ ? first : ChainFor(input, block_sizes_[i]);
    if (!input.OverlapTrusted(candidates[i])) continue;
    const size_t hits = hits_on(i);
    if (2 * (hits + load_.ActiveRun(candidates[i], chain, hits)) >= request_blocks_[i]) {
      return Hold::kWait;
    }
  }
  return Hold::kOffer;
}

void Selector::RemoveTarget(TargetId target) {
  load_.RemoveTarget(target);
  if (sglang_tree_) sglang_tree_->RemoveTarget(target);
  images_.RemoveTarget(target);
  predictions_.RemoveTarget(target);
  absl::erase_if(rotations_, [&](const auto& entry) {
    return std::find(entry.first.begin(), entry.first.end(), target) != entry.first.end();
  });
}

}  // namespace infera::core
