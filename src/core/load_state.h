// LoadState: the load term of the routing cost (doc/selection.md).
//
// Per target:
//  * Active blocks: a refcount of distinct in-flight prompt block hashes. A request
//    adds its chain when it is picked and releases it exactly once, through the
//    move-only ActiveGuard, on completion, failure, cancellation or an abandoned pick.
//    Two in-flight requests sharing a prefix count the shared blocks once. Requests
//    without token ids (no tokenizer) add anonymous blocks that are never shared.
//  * Pending prefill: the blocks each in-flight request must still compute (its
//    uncached blocks, less those the view already confirms: a chunked prefill's
//    first chunks), until it is past its prefill: its guard's PrefillDone() (first
//    token), its release, or Settle() finding its last block in the target's view
//    (the events confirm the prefill wrote it), whichever comes first.
//  * KV capacity: known (SetCapacityBlocks, the worker's num_gpu_blocks) or learned
//    (ObserveCachedBlocks): the most blocks the target's view ever held, once the
//    view has shrunk — an engine evicts only when its blocks are all used, so a view
//    that is still growing says nothing about the capacity.
//  * Recent blocks (Infera's guard against a 100/0 split under serial traffic): each
//    pick first multiplies every target's value by `recent_decay` (--kv-recent-decay,
//    0.97; 0 turns it off), then charges the winner the blocks it missed. A charge
//    carries the last block it stands for and Settle() drops it once the target's
//    view holds that block, so confirmed blocks do not count twice (as a hit and as
//    load).
//
// Load(t, incoming) by LoadTerm:
//  * kSpec: active_blocks + recent_blocks (the spec's active_blocks until completion).
//  * kWork (default): pending_prefill + KvPressure(t, incoming) + DecodeLoad(t) +
//    SeqWait(t), all in blocks of prefill work, the unit of the cost's miss term. KvPressure is
//    slope × max(0, active + incoming − threshold × capacity) (0 when the capacity is
//    unknown): free below the threshold (80 %), steep above it, where the engine
//    would start to preempt. DecodeLoad is decode_load_blocks × min(1, request blocks
//    / capacity): the step that computes a new prefill also runs one decode step of
//    every running sequence, whose time grows with the KV they read (the engine
//    timing model's decode_ms(occupancy), doc/selection.md), so an engine with a
//    heavier decode batch delays a new request's first token more. SeqWait is
//    seq_wait_blocks (0 here; PolicyConfig's default 256) per request a new one would
//    wait behind for a sequence slot on a target at its max_num_seqs (when known). Recent blocks
//    are not counted: pending prefill is the same charge (a pick's missed blocks) held until the
//    prefill is done.
//  * Timed prefill (kWork, LoadOptions::timed_prefill, --kv-timed-prefill): the pending
//    prefill counts only what is left after the time since each request was dispatched
//    at the target's learned prefill rate: a FIFO queue whose head has been computing
//    since max(its dispatch, the last completion), the others waiting behind it. The
//    rate is learned online from each completion (blocks / time since the last one, an
//    EWMA of both, seeded by prefill_rate_blocks_per_s). A prefill never counts less than
//    timed_prefill_floor × its missed blocks until it is confirmed. Every time is passed in
//    (`now_ns`): LoadState reads no clock.
//  * Remote load (--router-replica-sync, doc/replica-sync.md): the other replicas'
//    active and pending prefill blocks on the target (SetRemote) add to the local
//    ones in Load() and KvPressure() (kSpec adds remote active blocks). ActiveBlocks()
//    and PendingPrefillBlocks() stay this replica's own (what it publishes).
//
// Targets are the KvIndex's TargetIds. State for a target is created on first use;
// RemoveTarget() drops it. Ids are reused by the index, so every target slot carries
// a generation: a guard whose target was removed (even if the id was reused since)
// releases nothing.
//
// Thread-safety: none. Every call, including the guard's Release(), PrefillDone()
// and destructor, must be serialised with the other calls on the same LoadState (the
// server holds its pick mutex around them). The LoadState must outlive its guards.
//
// Example:
//   LoadState load(LoadOptions{});
//   LoadState::ActiveGuard guard = load.AddActive(target, chain, 0, {.blocks = 12});
//   ... first token ...
//   guard.PrefillDone();
//   ... last token ...
//   guard.Release();  // or let it go out of scope
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "core/types.h"

namespace infera::core {

enum class LoadTerm : uint8_t { kWork, kSpec };
// "work", "spec".
const char* LoadTermName(LoadTerm term);
// Parses a --load-term value.
absl::StatusOr<LoadTerm> ParseLoadTerm(std::string_view name);

struct LoadOptions {
  LoadTerm term = LoadTerm::kWork;
  double recent_decay = 0.97;          // kSpec only; 0 = off
  double kv_pressure_threshold = 0.8;  // fraction of the KV capacity
  double kv_pressure_slope = 1.0;      // blocks of cost per in-flight block past it
  // kWork: the decode term's cost at a KV capacity full of in-flight requests' blocks
  // (DecodeLoad); 0 = off.
  double decode_load_blocks = 0;
  // kWork: blocks of cost per request that would wait for a sequence slot on a target
  // at its max_num_seqs (SeqWait); 0 = off.
  double seq_wait_blocks = 0;
  // kWork: pending prefill less the progress its elapsed time buys at the target's
  // learned prefill rate (see above); false: blocks until confirmed.
  bool timed_prefill = false;
  // Timed prefill: the share of a prefill's missed blocks it counts, however long ago it
  // was dispatched, until it is confirmed (its first token, its last block in the view):
  // the rate is an average, and an engine whose decode batch is heavy computes a long
  // prefill slower than it. 0: an overdue prefill counts nothing.
  double timed_prefill_floor = 0;
  // The learned prefill rate's seed (and prior), blocks per second.
  double prefill_rate_blocks_per_s = 3000;
};

// What a pick still has to compute on its target.
struct PendingPrefill {
  double blocks = 0;
  // The request's last block (router hash, in the target's block size); when the
  // target's view holds it, the prefill is done. nullopt: settled only by
  // PrefillDone() or release.
  std::optional<BlockHash> last_block;
  // When AddActive is given the request's chain: the prefill computes the chain from
  // this block on, and Settle() counts its progress — the blocks from here that the
  // view already holds (a chunked prefill stores its blocks in order) are done.
  size_t first_block = 0;
  // When the request was dispatched to the target (the caller's clock): the timed
  // prefill's start, and the rate's samples.
  int64_t dispatched_ns = 0;
};

class LoadState {
 public:
  // Releases one request's active blocks exactly once: at Release() or destruction,
  // whichever comes first. Moving transfers the obligation; a moved-from or
  // default-constructed guard releases nothing.
  class ActiveGuard {
   public:
    ActiveGuard() = default;
    ActiveGuard(ActiveGuard&& other) noexcept;
    ActiveGuard& operator=(ActiveGuard&& other) noexcept;  // releases the held one first
    ActiveGuard(const ActiveGuard&) = delete;
    ActiveGuard& operator=(const ActiveGuard&) = delete;
    ~ActiveGuard();

    // Releases now; later calls (and the destructor) do nothing.
    void Release();
    // The request is past its prefill (first token): its pending prefill stops
    // counting. Idempotent; the active blocks stay until Release(). With `now_ns` (the
    // caller's clock, as the pick's) the completion is a sample of the target's
    // prefill rate.
    void PrefillDone(std::optional<int64_t> now_ns = std::nullopt);
    // Whether a release is still pending.
    bool pending() const { return state_ != nullptr; }
    TargetId target() const { return target_; }
    // Blocks this guard holds: distinct hashes plus anonymous blocks.
    size_t block_count() const { return blocks_.size() + anonymous_blocks_; }

   private:
    friend class LoadState;
    LoadState* state_ = nullptr;
    TargetId target_ = 0;
    uint64_t generation_ = 0;
    uint64_t prefill_id_ = 0;  // 0: no pending prefill entry
    std::vector<BlockHash> blocks_;
    size_t anonymous_blocks_ = 0;
  };

  // REQUIRES: 0 <= options.recent_decay <= 1, threshold and slope >= 0.
  explicit LoadState(const LoadOptions& options = {});
  LoadState(const LoadState&) = delete;
  LoadState& operator=(const LoadState&) = delete;

  // Adds one request's prompt blocks to `target`'s active set: each distinct hash in
  // `blocks` once (refcounted across requests), plus `anonymous_blocks` that are
  // never shared (requests whose tokens are unknown), and its pending prefill.
  ActiveGuard AddActive(TargetId target, std::span<const BlockHash> blocks,
                        size_t anonymous_blocks = 0, PendingPrefill prefill = {});

  // Multiplies every target's recent blocks by the decay (O(1), lazily scaled).
  void DecayRecent();
  // Adds `blocks` to the target's recent blocks (no-op when the decay is 0 or the
  // term is kWork). The charge is dropped by Settle() once `last_block` is confirmed.
  void ChargeRecent(TargetId target, double blocks, std::optional<BlockHash> last_block = {});
  // Drops the target's pending prefills and recent charges whose last block
  // `confirmed` (the target's view holds it), and recent charges decayed below
  // 0.01 blocks. O(1) for a target with neither (the common case of a pick's scan).
  // With `now_ns`, a prefill found complete is a prefill-rate sample.
  void Settle(TargetId target, absl::FunctionRef<bool(BlockHash)> confirmed,
              std::optional<int64_t> now_ns = std::nullopt) {
    Settle(target, 0, confirmed, now_ns);
  }
  // The same, told the view's KvIndex::ViewVersion (0: unknown): with the work term,
  // nothing to do when the version is the one the target was last settled against and
  // no prefill was added since (settling is then a no-op: the same view confirms the
  // same blocks, so no prefill completes and no rate sample is missed). The spec
  // term's charges also decay: always settled.
  void Settle(TargetId target, uint64_t view_version,
              absl::FunctionRef<bool(BlockHash)> confirmed,
              std::optional<int64_t> now_ns = std::nullopt) {
    if (!MaySettle(target)) return;
    SettleSlot(target, view_version, confirmed, now_ns);
  }
  // Whether Settle() may have anything to do for the target (pending prefills or
  // recent charges): false lets a caller skip reading the view's version.
  bool MaySettle(TargetId target) const {
    return target >= hot_.size() || hot_[target].settle != 0;
  }

  // The worker's KV capacity in blocks (num_gpu_blocks); 0 forgets it.
  void SetCapacityBlocks(TargetId target, size_t blocks);
  // The target's view now holds `blocks` cached blocks: once it has held fewer than
  // before, the learned capacity is the most ever seen.
  // O(1) when `blocks` is the count this target's last observation saw (a repeat
  // changes nothing).
  void ObserveCachedBlocks(TargetId target, size_t blocks) {
    if (target < hot_.size() && hot_[target].live != 0 && hot_[target].observed == blocks) return;
    ObserveSlow(target, blocks);
  }
  // Known capacity, else learned, else 0 (unknown).
  size_t CapacityBlocks(TargetId target) const;
  // The worker's max_num_seqs (sequences it runs at once); 0 = unknown (no SeqWait).
  void SetMaxSeqs(TargetId target, size_t seqs);
  size_t MaxSeqs(TargetId target) const;

  // Distinct in-flight blocks (plus anonymous ones) on the target.
  size_t ActiveBlocks(TargetId target) const;
  double RecentBlocks(TargetId target) const;
  double PendingPrefillBlocks(TargetId target) const;
  // The pending prefill the load term counts at `now_ns`: with timed_prefill, what is
  // left after the elapsed time at the learned rate (FIFO); else PendingPrefillBlocks.
  double RemainingPrefillBlocks(TargetId target, int64_t now_ns) const;
  // The target's learned prefill rate, blocks per second (the seed before any sample).
  double PrefillRate(TargetId target) const;
  // The KV-pressure cost of adding `incoming_blocks` to the target (see above).
  double KvPressure(TargetId target, size_t incoming_blocks) const;
  // Prompt blocks of the target's in-flight requests, each request's own (a prefix two
  // requests share counts twice: each sequence's decode step reads its whole context).
  size_t RequestBlocks(TargetId target) const;
  // The decode term (kWork): decode_load_blocks × min(1, RequestBlocks / capacity), 0
  // when the capacity is unknown. What the decode part of the step that computes a new
  // request's prefill costs it on this target, in blocks of prefill (see above).
  double DecodeLoad(TargetId target) const;
  // The sequence-slot term (kWork): seq_wait_blocks × the requests a new one would
  // wait behind for a sequence slot, max(0, Requests + 1 − max_num_seqs); 0 when
  // max_num_seqs is unknown. An engine at max_num_seqs admits a waiting request only
  // when a running one finishes, a wait that pending prefill does not see.
  double SeqWait(TargetId target) const;
  // In-flight requests on the target whose active chain holds `hash` (its refcount).
  size_t ActiveHolders(TargetId target, BlockHash hash) const;
  // Whether any in-flight request, on any target (removed ones included until their
  // guards go), has a chain whose first block is `first`: O(1), so a pick can tell
  // that no candidate has an in-flight run of its prompt without asking each.
  bool AnyActiveFirst(BlockHash first) const { return active_first_.contains(first); }
  // How many blocks of `chain` from `from` on are in the target's active set, in a row.
  size_t ActiveRun(TargetId target, std::span<const BlockHash> chain, size_t from) const;
  // The load term of the cost for a request of `incoming_blocks` at `now_ns` (see
  // above; the time matters only with timed_prefill).
  double Load(TargetId target, size_t incoming_blocks = 0, int64_t now_ns = 0) const;
  // One look at the target for the kv-aware cost: Load(target, incoming_blocks),
  // SeqWait(target) and ActiveBlocks(target) + RemoteActiveBlocks(target), the same
  // values as those calls (the selector's per-candidate loop reads the slot once).
  struct Terms {
    double load = 0;
    double seq_wait = 0;
    size_t active = 0;
    double pressure = 0;  // KvPressure(target, incoming_blocks): the part of `load` it is
  };
  Terms TermsOf(TargetId target, size_t incoming_blocks, int64_t now_ns = 0) const;
  // The other router replicas' load on the target (sums over replicas, >= 0); the
  // sync edge sets it after each applied message batch. 0, 0 when never set.
  void SetRemote(TargetId target, size_t active_blocks, double pending_prefill_blocks);
  size_t RemoteActiveBlocks(TargetId target) const;
  double RemotePendingPrefillBlocks(TargetId target) const;
  // Guards handed out and not yet released, across all live targets.
  size_t PendingGuards() const;
  // The target's in-flight requests (guards not yet released): the peers' "load" /
  // batch size (doc/peers.md).
  size_t Requests(TargetId target) const;
  // The target's requests not yet past their prefill (pending prefill entries): the
  // router's stand-in for an engine's waiting queue (doc/peers.md, llm-d).
  size_t PrefillingRequests(TargetId target) const {
    return target < hot_.size() ? hot_[target].prefilling : 0;
  }
  // Blocks of `chain` the target does not hold active yet: what the request would add
  // to its active blocks (Dynamo's "incoming active blocks").
  size_t NewActiveBlocks(TargetId target, std::span<const BlockHash> chain) const;

  // Drops all state of the target; its outstanding guards become no-ops.
  void RemoveTarget(TargetId target);

  const LoadOptions& options() const { return options_; }
  double recent_decay() const { return options_.recent_decay; }

 private:
  struct Prefill {
    uint64_t id = 0;
    double blocks = 0;  // still to compute
    double missed = 0;  // at the pick
    std::optional<BlockHash> last_block;
    // The guard's chain (its heap buffer survives moves of the guard; the entry is
    // dropped before the guard frees it) and where the prefill starts in it.
    const BlockHash* chain = nullptr;
    size_t chain_len = 0;
    size_t first_block = 0;
    int64_t dispatched_ns = 0;
  };
  struct Charge {
    double scaled = 0;  // blocks / recent_scale_ at the time of the charge
    std::optional<BlockHash> last_block;
  };
  struct Slot {
    uint64_t generation = 1;
    bool live = false;
    absl::flat_hash_map<BlockHash, uint32_t> active;  // hash -> refcount
    size_t anonymous_blocks = 0;
    size_t request_blocks = 0;  // sum of the live guards' block_count()
    size_t pending_guards = 0;
    std::vector<Prefill> prefills;  // in-flight requests not past their prefill
    double prefill_blocks = 0;      // sum over prefills
    std::vector<Charge> charges;
    double recent_scaled = 0;  // recent blocks / recent_scale_ (sum over charges)
    size_t capacity_blocks = 0;
    size_t max_seqs = 0;
    size_t most_cached_blocks = 0;       // the most the view ever held
    size_t learned_capacity_blocks = 0;  // set once the view shrank (it evicted)
    size_t remote_active_blocks = 0;     // other replicas' (SetRemote)
    double remote_prefill_blocks = 0;
    // Settle(): the view version it last settled against; whether a prefill or charge
    // was added since.
    uint64_t settled_view = 0;
    bool added_since_settle = false;
    // Timed prefill: when the queue's head started (its dispatch, or the last
    // completion), the last completion (a rate sample's start) and the rate's EWMA
    // sums (blocks and ns of the samples).
    int64_t head_start_ns = 0;
    int64_t mark_ns = 0;
    double rate_blocks = 0;
    double rate_ns = 0;
  };
  // What a pick reads of every candidate, copied from its Slot by Sync() after each
  // change, one cache line per target in a dense array (doc/selection.md "Cost of a
  // pick"): the Slot's maps and vectors are ~4 lines away from each other.
  struct alignas(64) Hot {
    double prefill_blocks = 0;         // Slot::prefill_blocks
    double remote_prefill_blocks = 0;  // Slot::remote_prefill_blocks
    uint64_t used = 0;        // active.size() + anonymous_blocks + remote_active_blocks
    uint64_t capacity = 0;    // CapacityOf(slot)
    uint64_t request_blocks = 0;
    uint64_t observed = kNotObserved;  // the last ObserveCachedBlocks count
    uint32_t pending_guards = 0;       // saturated at 2^32 - 1 (so are the two below)
    uint32_t max_seqs = 0;
    uint32_t prefilling = 0;  // prefills.size()
    uint8_t live = 0;
    uint8_t settle = 0;  // prefills or charges to settle
  };
  static constexpr uint64_t kNotObserved = ~uint64_t{0};
  Slot& SlotFor(TargetId target);
  const Slot* FindSlot(TargetId target) const;
  void Sync(const Slot& slot);
  void SettleSlot(TargetId target, uint64_t view_version,
                  absl::FunctionRef<bool(BlockHash)> confirmed, std::optional<int64_t> now_ns);
  void ObserveSlow(TargetId target, size_t blocks);
  // The terms above, of one target.
  static size_t CapacityOf(const Slot& slot);
  double KvPressureOf(const Hot& hot, size_t incoming_blocks) const;
  double DecodeLoadOf(const Hot& hot) const;
  double SeqWaitOf(const Hot& hot) const;
  // Learned prefill rate, blocks per ns; the timed pending prefill at `now_ns`.
  double RateOf(const Slot& slot) const;
  double TimedPrefillOf(const Slot& slot, int64_t now_ns) const;
  // `p` (the queue's head when `head`) completed at `now_ns`: a rate sample; the
  // queue's next head starts.
  void Completed(Slot& slot, const Prefill& p, bool head, int64_t now_ns);
  Slot* LiveSlot(const ActiveGuard& guard);
  void ReleaseGuard(ActiveGuard& guard);
  void DropPrefill(Slot& slot, uint64_t id, std::optional<int64_t> now_ns = std::nullopt);

  LoadOptions options_;
  // Live guards by the first block of their chain (AnyActiveFirst).
  absl::flat_hash_map<BlockHash, uint32_t> active_first_;
  // Lazy decay: a target's recent blocks are recent_scaled * recent_scale_, so a
  // decay step is one multiplication, not one per target.
  double recent_scale_ = 1.0;
  uint64_t next_prefill_id_ = 1;
  std::vector<Slot> slots_;
  std::vector<Hot> hot_;  // by target, as slots_
};

}  // namespace infera::core
