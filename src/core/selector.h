// Selector: picks the target for one request (doc/selection.md).
//
// Policies:
//  * kv-aware:  cost(t) = w × (request_blocks − credited_hits(t)) + load(t), lowest
//    wins; ties go to the lower load, then the fewer in-flight blocks, then rotate (the
//    scan starts one candidate further on every pick), never to a fixed index.
//      w = the role's overlap weight (prefill/decode) when set, else overlap_weight.
//      credited_hits = trust(t) × (device hits + host_hit_weight × host hits
//                      + disk_hit_weight × disk hits (consecutive prefix, KvIndex)
//                      + inflight_credit × the in-flight run: mixed and prefill
//                      picks of a prompt whose first block is at most 1/candidates
//                      of the recent picks' (the share gate))
//      trust(t) = PredictionTracker::Trust: 1, less for a target whose predicted
//      hits drift from what its engine reports; 0 for a target listed in
//      RoutingInput::overlap_untrusted (render parity diverged): its cost is then a
//      cold target's, w × request_blocks + load, so its view's hits draw nothing.
//      load(t) = LoadState::Load(t, request_blocks): --load-term work (default):
//        pending prefill blocks + KV pressure (+ decode load, --kv-decode-load, off by
//        default), divided by 1 + the candidates' mean requests in prefill
//        (--load-queue-scaling), + the sequence-slot wait (--kv-seq-wait-load, not
//        divided; on engines whose max_num_seqs is known: LoadState::SetMaxSeqs);
//        with --kv-timed-prefill the pending prefill is what is left after the time
//        since each dispatch at the target's learned rate (the injected clock's now);
//        spec: active blocks + recent blocks.
//    Requests without token ids have no cache term (w_overlap = 0).
//    Requests with images (mixed/prefill roles): w_overlap = 0 and an image term
//    w_mm × images_not_held(t), w_mm = mm_weight_factor × w; the winner records the
//    images. Decode picks of image requests route by load alone.
//    Before scoring: every target's recent blocks decay (spec term), and each
//    candidate's pending prefills and recent charges whose last block its view now
//    holds are settled (LoadState::Settle); its learned capacity is updated from the
//    view's block count. The winner's pending prefill (and, spec term, its recent
//    charge) is the blocks it missed.
//  * round-robin: one rotation per distinct candidate list, so prefill and decode
//    pools (and any other subsets) rotate independently.
//  * random: uniform over the candidates (seeded core::Random).
//  * least-load: lowest load(t) (settled as above, no cache term: the pending
//    prefill it adds is the whole prompt); ties rotate.
//  * dynamo, lmetric, llm-d, sglang: the peers' policies (core/peer_policies.h,
//    doc/peers.md), scored from the same index and load state; dynamo is not settled
//    from the views (its prefill load counts until the first token, as Dynamo's);
//    sglang matches against its own approximate tree of what it routed, not the
//    events' view.
// Every policy adds the request's blocks to the winner's active blocks and returns
// the guard that releases them.
//
// The request is hashed (with its extra keys, RoutingInput::keys) once per distinct
// block size among the candidates (block size is per target, KvIndex::BlockSize), and
// only when the policy needs it.
//
// Thread-safety: none. The server calls Pick (and releases guards, and calls
// RemoveTarget) under one mutex, and holds the KvIndex read-side while picking; the
// offline simulator calls it from its single thread in virtual time.
//
// Example:
//   Selector selector(config, index);
//   RoutingInput input{.role = Role::kMixed, .request_id = "r1", .tokens = ids};
//   absl::StatusOr<PickResult> pick = selector.Pick(input, candidates);
//   spdlog::info("{}", FormatPickLog(*pick));
//   ... proxy to pick->picked; pick->guard releases the active blocks at scope exit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/approx_cache.h"
#include "core/clock.h"
#include "core/hashing.h"
#include "core/image_affinity.h"
#include "core/kv_index.h"
#include "core/load_state.h"
#include "core/peer_policies.h"
#include "core/prediction_tracker.h"
#include "core/types.h"

namespace infera::core {

enum class Policy : uint8_t {
  kKvAware,
  kRoundRobin,
  kRandom,
  kLeastLoad,
  kDynamo,
  kLmetric,
  kLlmD,
  kSglang,
};

// "kv-aware", "round-robin", "random", "least-load", "dynamo", "lmetric", "llm-d",
// "sglang".
const char* PolicyName(Policy policy);
// Parses a --router-policy value (the names above).
absl::StatusOr<Policy> ParsePolicy(std::string_view name);

struct PolicyConfig {
  Policy policy = Policy::kKvAware;
  double overlap_weight = 1.0;                   // --kv-overlap-weight
  std::optional<double> prefill_overlap_weight;  // --kv-prefill-overlap-weight
  std::optional<double> decode_overlap_weight;   // --kv-decode-overlap-weight
  double host_hit_weight = 0.75;                 // --kv-host-hit-weight
  double disk_hit_weight = 0.25;                 // --kv-disk-hit-weight
  double recent_decay = 0.97;                    // --kv-recent-decay (0 = off; spec term)
  LoadTerm load_term = LoadTerm::kWork;          // --load-term work|spec
  double kv_pressure_threshold = 0.8;            // fraction of a target's KV capacity
  double kv_pressure_slope = 1.0;                // cost per in-flight block past it
  // kv-aware, work term: a mixed or prefill pick drops the KV-pressure term when every
  // candidate is past its threshold (--kv-pressure-yield; doc/selection.md).
  bool kv_pressure_yield = false;
  double decode_load_blocks = 0;                 // --kv-decode-load (0 = off)
  double seq_wait_blocks = 256;                  // --kv-seq-wait-load (0 = off)
  // work term: pending prefill less its elapsed time's progress at the target's learned
  // prefill rate (--kv-timed-prefill), seeded by prefill_rate (--kv-prefill-rate,
  // blocks per second). Needs the selector's clock.
  bool timed_prefill = true;
  double prefill_rate = 3000;
  // The share of a dispatched prefill counted until it is confirmed, however long ago it
  // was dispatched (--kv-timed-prefill-floor; LoadOptions::timed_prefill_floor).
  double timed_prefill_floor = 0.3;
  // kv-aware: credit a candidate's in-flight run (the chain's blocks past its view's
  // hits that its in-flight requests hold) as hits, × this weight (--kv-inflight-credit;
  // 0 = off), while fewer than `inflight_credit_holders` in-flight requests on it hold
  // the chain's first block (--kv-inflight-holders), on mixed and prefill picks, and
  // (the share gate, --kv-inflight-share-window W; 0 = no gate) only while the chain's
  // first block was that of at most W / candidates of the last W such picks with
  // tokens, this one included: a prompt that one engine can serve joins the computation
  // of its copy in flight; a hot prompt, which needs many homes, does not.
  double inflight_credit = 0.5;
  uint32_t inflight_credit_holders = 8;
  uint32_t inflight_share_window = 32;
  double mm_weight_factor = 48.0;  // w_mm = factor × w
  uint64_t random_seed = 0;        // the random policy's seed
  // Settle pending prefills and recent charges when a view shows their last block.
  // Approximate mode (approx_cache.h) turns it off: its views are the router's own
  // predictions, written at the pick, so they say nothing about a prefill's progress.
  bool settle_from_views = true;
  // kv-aware, work term: divide the load term by 1 + the candidates' mean requests not
  // past their prefill (a miss weighed by 1 / (1 − utilisation), doc/selection.md).
  bool load_queue_scaling = true;  // --load-queue-scaling
  // The peers' defaults (doc/peers.md); used only by their policies.
  DynamoConfig dynamo;
  LlmdConfig llmd;
  SglangConfig sglang;

  // The overlap weight for `role`: the per-role weight when set, else the global one.
  double OverlapWeight(Role role) const;
  LoadOptions Load() const;
  // InvalidArgument for negative or non-finite weights, a decay or threshold outside
  // [0, 1], or a prefill rate that is not > 0.
  absl::Status Validate() const;
};

// What the selector needs to know about one request.
struct RoutingInput {
  Role role = Role::kMixed;
  std::string_view request_id;
  // The prompt's token ids; nullopt when the router could not tokenize (then there
  // is no cache term, and `estimated_tokens` sizes the load the request adds).
  std::optional<std::span<const TokenId>> tokens;
  // The extra keys its blocks hash with (doc/hashing.md "Extra keys"): its cache_salt
  // and LoRA adapter. Requests with other keys never share a predicted hit.
  HashKeys keys{};
  size_t estimated_tokens = 0;
  // ImageKey() of each image/audio/document reference the request carries.
  std::span<const uint64_t> image_keys;
  // Targets whose KV overlap is not trusted (their worker renders prompts differently,
  // doc/render-parity.md): none of their cached blocks is credited. Usually empty.
  std::span<const TargetId> overlap_untrusted;
  // Per-request factor on the kv-aware overlap weight (the text and image terms):
  // the client's cache-retention hints (router/cache_control.h); 1 = none.
  double overlap_weight_factor = 1.0;
  // kv-aware: false lets the pick skip the full score of candidates that provably
  // cannot win nor be the runner-up (the pruned pick, doc/selection.md "Pruned pick"):
  // the winner, its fields and PickResult::runner_up_cost are the same, but
  // PickResult::costs holds, for a skipped candidate, a lower bound of its cost, not
  // the cost. true (default): every cost is exact.
  bool exact_costs = true;

  bool OverlapTrusted(TargetId t) const {
    for (TargetId u : overlap_untrusted) {
      if (u == t) return false;
    }
    return true;
  }
};

struct PickResult {
  Policy policy = Policy::kKvAware;
  Role role = Role::kMixed;
  std::string request_id;
  TargetId picked = 0;
  std::string picked_name;  // TargetKey::ToString() of `picked` (the router shows TargetName)
  // The picked target's consecutive-prefix hits, all tiers (cache_hits) and split.
  uint32_t cache_hits = 0;
  MatchCounts hits;
  // Full blocks of the prompt in the picked target's block size (from the estimate
  // when there are no tokens).
  uint32_t request_blocks = 0;
  // The picked target's active blocks before this request was added.
  size_t active_blocks = 0;
  double load = 0;      // the picked target's load term, before this request
  double credited = 0;  // kv-aware: the picked target's credited hits (blocks)
  // kv-aware, --kv-inflight-credit: the picked target's credited in-flight run (blocks
  // after cache_hits that its in-flight requests are computing).
  uint32_t inflight_hits = 0;
  double w_overlap = 0;
  uint32_t mm_images = 0;
  uint32_t mm_affinity_hits = 0;  // images the picked target already held
  double cost = 0;                // kv-aware: the winner's cost; least-load: its load
  // kv-aware and the peers: every candidate's cost, by position (the pruned pick: a
  // lower bound for a candidate it did not score, RoutingInput::exact_costs).
  std::vector<double> costs;
  // kv-aware and the peers: the best cost among the other candidates, equal to `cost`
  // on a tie (RunnerUpCost of exact costs; exact on the pruned pick too); nullopt with
  // one candidate, and for the policies without costs.
  std::optional<double> runner_up_cost;
  // kv-aware: candidates whose cost was computed in full (all, unless the pruned pick
  // skipped some: RoutingInput::exact_costs false).
  size_t scored = 0;
  LoadState::ActiveGuard guard;   // releases the request's active blocks
};

// The best of `costs` but one entry equal to `cost` (the winner's): the runner-up's
// cost, equal to `cost` on a tie; nullopt when `costs` has fewer than two entries.
std::optional<double> RunnerUpCost(std::span<const double> costs, double cost);

// The pick log line (architecture §6), without a trailing newline:
//   kv-aware, least-load: "pick policy=<p> role=<r> request_id=<id> picked=<target>
//     cache_hits=<n> request_blocks=<n> active_blocks=<n> w_overlap=<w> mm_images=<n>
//     mm_affinity_hits=<n>" (one line)
//   round-robin, random:  "pick policy=<p> role=<r> picked=<target>"
// w_overlap prints like Python's float repr for the usual values (1.0, 0.5, 20.0).
std::string FormatPickLog(const PickResult& result);

class Selector {
 public:
  // REQUIRES: config.Validate().ok(). `index` (and `clock`) must outlive the selector.
  // `clock`: the time of picks and settles (the timed prefill's now and the prefill
  // rate's samples); null: always 0.
  Selector(const PolicyConfig& config, const KvIndex& index, const Clock* clock = nullptr);
  Selector(const Selector&) = delete;
  Selector& operator=(const Selector&) = delete;

  // Picks one of `candidates` for the request.
  // InvalidArgument when `candidates` is empty. REQUIRES: candidates are live in the
  // index and distinct.
  absl::StatusOr<PickResult> Pick(const RoutingInput& input, std::span<const TargetId> candidates);

  // The least pending prefill among the candidates (this replica's and the others'),
  // after settling them: the blocks of prefill work a new request would queue behind
  // on the least loaded candidate. The admission queue holds requests while it is past
  // a threshold (core/admission_queue.h). KV pressure is not counted: a full engine
  // with nothing to prefill still takes a request at once. REQUIRES: candidates are
  // live in the index.
  double MinLoad(std::span<const TargetId> candidates);

  // The admission queue's advice for one arriving request (doc/admission.md "Hold
  // rule"). `threshold`: past it (MinLoad >= threshold) every request is held, as
  // before; `join_threshold` (0: off): past it a request whose prompt is cold (no
  // candidate holds half its blocks) while requests in flight compute enough of it to
  // make it half cached on some candidate (its cached run plus the in-flight run past
  // it) is held too, so that it binds once those blocks are cached instead of
  // computing them again now; a prompt at least half cached on some candidate binds at
  // once even when others wait (waiting cannot make it cheaper), unless past
  // `threshold`. `others_waiting`: requests already wait in the pool (kOffer then
  // queues behind them). The match runs only when the join hold could apply.
  enum class Hold {
    kOffer,   // AdmissionQueue::Offer(must_wait = false): binds now unless others wait
    kWait,    // Offer(must_wait = true)
    kBypass,  // binds now, not offered
  };
  Hold AdviseHold(const RoutingInput& input, std::span<const TargetId> candidates,
                  double threshold, double join_threshold, bool others_waiting);
  // Whether some candidate's pending prefill (as MinLoad counts it) is under
  // `threshold`; settles the candidates it reads and stops at the first one under it.
  bool AnyBelow(std::span<const TargetId> candidates, double threshold);
  // The least pending prefill under which held requests are released.
  static double ReleaseBelow(double threshold, double join_threshold) {
    return join_threshold > 0 ? std::min(threshold, join_threshold) : threshold;
  }

  // Drops the target's load, affinity and rotation state. Call it when the target
  // leaves the index (its id may be reused).
  void RemoveTarget(TargetId target);

  const PolicyConfig& config() const { return config_; }
  LoadState& load() { return load_; }
  const LoadState& load() const { return load_; }
  ImageAffinity& images() { return images_; }
  // Fed by the server with each response's reported cached tokens.
  PredictionTracker& predictions() { return predictions_; }
  const PredictionTracker& predictions() const { return predictions_; }
  const ImageAffinity& images() const { return images_; }

 private:
  PickResult PickKvAware(const RoutingInput& input, std::span<const TargetId> candidates);
  // One candidate's kv-aware score, and what the pick's constants are.
  struct KvAwareTerms {
    double w_overlap = 0;
    double w_mm = 0;
    double discount = 1;
    bool use_tokens = false;
    bool use_images = false;
    bool inflight_on = false;
    bool yield_pressure = false;  // every candidate pressed: the pressure term is dropped
  };
  struct Scored {
    double cost = 0;
    double load = 0;
    double credited = 0;
    size_t active = 0;
    size_t inflight = 0;
  };
  Scored ScoreOne(const RoutingInput& input, size_t i, TargetId t, const KvAwareTerms& k,
                  const LoadState::Terms& terms);
  // Whether adding its request's blocks puts every candidate past its KV-pressure
  // threshold (KvAwareTerms::yield_pressure). Stops at the first that stays below.
  bool EveryCandidatePressed(std::span<const TargetId> candidates) const;
  // Whether `s` replaces `best` in the scan (the tie chain: cost, load, active blocks).
  static bool Replaces(const Scored& s, const Scored& best);
  // The pruned pick (selector_pruned.cc): the position of the winner, the same as the
  // full scan from `start`'s, scoring only the candidates that may win.
  size_t PickPruned(const RoutingInput& input, std::span<const TargetId> candidates,
                    const KvAwareTerms& k, size_t start, PickResult& result, Scored& best);
  // The pruned pick's score of candidate i: into scores_, scored_at_, result.costs[i].
  void ScorePruned(const RoutingInput& input, std::span<const TargetId> candidates,
                   const KvAwareTerms& k, size_t i, PickResult& result);
  // The pruned pick's runner-up cost (the best of the others, exact): scores the
  // unscored candidates whose bound is below it. `won`: the winner's index in scores_;
  // `rest`: the least bound of the unscored candidates (every one of them >= it).
  double RunnerUp(const RoutingInput& input, std::span<const TargetId> candidates,
                  const KvAwareTerms& k, size_t won, double rest, PickResult& result);
  size_t PickRoundRobin(std::span<const TargetId> candidates);
  size_t PickLeastLoad(const RoutingInput& input, std::span<const TargetId> candidates);
  // The share gate (PolicyConfig::inflight_share_window): records the pick's first block
  // in the window; whether its count there × `candidates` is at most the window.
  bool InflightShareGate(const RoutingInput& input, size_t candidates);
  // InflightShareGate's condition for a prompt starting with `first`, read only (as if
  // this request were recorded), once the window is full: its share of the recent picks
  // is at most 1/candidates.
  bool ShareUnderGate(BlockHash first, size_t candidates) const;
  static bool SmallShare(size_t count, size_t candidates, size_t window) {
    return count * candidates <= window;
  }
  // Reads the candidates' block sizes into block_sizes_ and resets the per-pick chains;
  // the first candidate that is not live in the index, if any.
  std::optional<TargetId> ReadBlockSizes(std::span<const TargetId> candidates);
  // A candidate's pending prefill as MinLoad counts it (this replica's, at now_ns_, and
  // the others'), after Settle.
  double PendingPrefillOf(TargetId t) const;
  // --kv-inflight-credit: the blocks of the request's chain after `view_hits` that t's
  // in-flight requests hold, in a row, when 1 ≤ holders of its first block < the limit;
  // else 0.
  size_t InflightRun(const RoutingInput& input, TargetId t, size_t view_hits);
  // dynamo, lmetric, llm-d, sglang.
  PickResult PickPeer(const RoutingInput& input, std::span<const TargetId> candidates);
  // Consecutive-prefix hits of every candidate (matches_, request_blocks_), one hash and
  // one walk per distinct block size; no hits when `use_tokens` is false.
  void MatchCandidates(const RoutingInput& input, std::span<const TargetId> candidates,
                       bool use_tokens);
  // Decays (spec term) and settles the candidates' load against their views
  // (`from_views` false: the learned capacity only; `decay` false: no decay step, for
  // a look that is not a pick). Returns the candidates' requests not past their
  // prefill, summed after settling (the load queue scaling's numerator). `terms`:
  // also each candidate's LoadState::TermsOf for its request_blocks_ into terms_ (one
  // look at its load slot per pick).
  double Settle(std::span<const TargetId> candidates, bool from_views = true, bool decay = true,
                bool terms = false);
  static size_t BlocksOf(const RoutingInput& input, size_t block_size);
  // Where this pick's scan starts: ties go to the first in scan order. One turn per
  // role: a PD request's prefill and decode picks alternate, so one shared turn would
  // give each pool of an even-sized fleet the same parity every time.
  size_t TieStart(Role role, size_t n) {
    return static_cast<size_t>(tie_turn_[static_cast<size_t>(role) % kRoles]++ % n);
  }
  // Fills in the common fields and adds the winner's active blocks and its pending
  // prefill of `missed_blocks`.
  void Finish(const RoutingInput& input, TargetId picked, double missed_blocks, PickResult& result);
  const std::vector<BlockHash>& ChainFor(const RoutingInput& input, size_t block_size);

  int64_t Now() const { return clock_ != nullptr ? clock_->NowNs() : 0; }

  PolicyConfig config_;
  const KvIndex& index_;
  const Clock* clock_;
  int64_t now_ns_ = 0;  // the current pick's Now()
  LoadState load_;
  ImageAffinity images_;
  PredictionTracker predictions_;
  Random random_;
  // Per distinct candidate list: the next position of its rotation.
  absl::flat_hash_map<std::vector<TargetId>, uint64_t> rotations_;
  static constexpr size_t kRoles = 3;
  uint64_t tie_turn_[kRoles] = {};
  // Per-pick scratch: chains by block size (reused across picks).
  std::vector<std::pair<size_t, std::vector<BlockHash>>> chains_;
  size_t chains_used_ = 0;
  // Per-pick scratch of the kv-aware policy, by candidate position.
  std::vector<uint32_t> block_sizes_;    // by candidate position (Pick)
  bool one_block_size_ = true;           // every candidate's block size is the first's (MatchCandidates)
  std::vector<LoadState::Terms> terms_;  // kv-aware: by candidate position (Settle)
  std::vector<MatchCounts> matches_;
  std::vector<uint32_t> request_blocks_;
  std::vector<uint8_t> grouped_;
  std::vector<size_t> group_;  // positions of one block-size group
  std::vector<TargetId> group_ids_;
  std::vector<MatchCounts> group_matches_;
  std::vector<double> costs_scratch_;  // least-load: load by position
  // The pruned pick's scratch: scored (1) by position, the scored positions, scores.
  std::vector<uint8_t> scored_;
  std::vector<size_t> at_lowest_;
  std::vector<size_t> scored_at_;
  std::vector<Scored> scores_;
  std::vector<size_t> fold_;
  std::vector<PeerSignals> signals_;   // peers: by position
  // The share gate's window: the first blocks of the last picks (a ring, at most
  // inflight_share_window), and their counts.
  std::vector<BlockHash> recent_first_;
  size_t recent_next_ = 0;
  absl::flat_hash_map<BlockHash, uint32_t> recent_count_;
  // sglang: the approximate tree of what it routed (no expiry; its size bound).
  std::unique_ptr<ApproxCache> sglang_tree_;
  int64_t sglang_clock_ = 0;  // a logical clock: one tick per pick
};

}  // namespace infera::core
