#include "core/load_state.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace infera::core {
namespace {

// Below this the lazy scale is folded back into the stored values, so they never
// overflow (each value is at most a few million blocks / scale).
constexpr double kRenormalizeBelow = 1e-150;
// Recent charges decayed below this many blocks are dropped by Settle().
constexpr double kNegligibleBlocks = 0.01;
// Timed prefill: the weight of each new rate sample in the EWMA sums, and the seed's
// weight (a prior of this many ns at the seed rate, never decayed: a first sample of
// ~0 ns cannot make the rate infinite).
constexpr double kRateAlpha = 0.1;
constexpr double kRatePriorNs = 50e6;

}  // namespace

const char* LoadTermName(LoadTerm term) { return term == LoadTerm::kSpec ? "spec" : "work"; }

absl::StatusOr<LoadTerm> ParseLoadTerm(std::string_view name) {
  for (LoadTerm t : {LoadTerm::kWork, LoadTerm::kSpec}) {
    if (name == LoadTermName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown load term '", std::string(name), "' (expected work or spec)"));
}

LoadState::ActiveGuard::ActiveGuard(ActiveGuard&& other) noexcept
    : state_(std::exchange(other.state_, nullptr)),
      target_(other.target_),
      generation_(other.generation_),
      prefill_id_(std::exchange(other.prefill_id_, 0)),
      blocks_(std::move(other.blocks_)),
      anonymous_blocks_(std::exchange(other.anonymous_blocks_, 0)) {}

LoadState::ActiveGuard& LoadState::ActiveGuard::operator=(ActiveGuard&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::exchange(other.state_, nullptr);
    target_ = other.target_;
    generation_ = other.generation_;
    prefill_id_ = std::exchange(other.prefill_id_, 0);
    blocks_ = std::move(other.blocks_);
    anonymous_blocks_ = std::exchange(other.anonymous_blocks_, 0);
  }
  return *this;
}

LoadState::ActiveGuard::~ActiveGuard() { Release(); }

void LoadState::ActiveGuard::Release() {
  LoadState* state = std::exchange(state_, nullptr);
  if (state != nullptr) state->ReleaseGuard(*this);
  blocks_.clear();
  blocks_.shrink_to_fit();
  anonymous_blocks_ = 0;
  prefill_id_ = 0;
}

void LoadState::ActiveGuard::PrefillDone(std::optional<int64_t> now_ns) {
  if (state_ == nullptr || prefill_id_ == 0) return;
  if (Slot* slot = state_->LiveSlot(*this)) state_->DropPrefill(*slot, prefill_id_, now_ns);
  prefill_id_ = 0;
}

LoadState::LoadState(const LoadOptions& options) : options_(options) {
  assert(options.recent_decay >= 0 && options.recent_decay <= 1);
  assert(options.kv_pressure_threshold >= 0 && options.kv_pressure_slope >= 0);
  assert(options.decode_load_blocks >= 0 && options.seq_wait_blocks >= 0);
  assert(options.prefill_rate_blocks_per_s > 0);
  assert(options.timed_prefill_floor >= 0 && options.timed_prefill_floor <= 1);
}

LoadState::Slot& LoadState::SlotFor(TargetId target) {
  if (target >= slots_.size()) {
    slots_.resize(static_cast<size_t>(target) + 1);
    hot_.resize(slots_.size());
  }
  Slot& slot = slots_[target];
  slot.live = true;
  return slot;
}

void LoadState::Sync(const Slot& slot) {
  const auto narrow = [](size_t v) {
    return static_cast<uint32_t>(std::min<size_t>(v, std::numeric_limits<uint32_t>::max()));
  };
  Hot& h = hot_[static_cast<size_t>(&slot - slots_.data())];
  h.prefill_blocks = slot.prefill_blocks;
  h.remote_prefill_blocks = slot.remote_prefill_blocks;
  h.used = slot.active.size() + slot.anonymous_blocks + slot.remote_active_blocks;
  h.capacity = CapacityOf(slot);
  h.request_blocks = slot.request_blocks;
  h.pending_guards = narrow(slot.pending_guards);
  h.max_seqs = narrow(slot.max_seqs);
  h.prefilling = narrow(slot.prefills.size());
  h.live = slot.live ? 1 : 0;
  h.settle = slot.live && (!slot.prefills.empty() || !slot.charges.empty()) ? 1 : 0;
}

const LoadState::Slot* LoadState::FindSlot(TargetId target) const {
  return target < slots_.size() && slots_[target].live ? &slots_[target] : nullptr;
}

LoadState::Slot* LoadState::LiveSlot(const ActiveGuard& guard) {
  if (guard.target_ >= slots_.size()) return nullptr;
  Slot& slot = slots_[guard.target_];
  // The target was removed (and maybe its id reused) since the pick.
  if (!slot.live || slot.generation != guard.generation_) return nullptr;
  return &slot;
}

LoadState::ActiveGuard LoadState::AddActive(TargetId target, std::span<const BlockHash> blocks,
                                            size_t anonymous_blocks, PendingPrefill prefill) {
  Slot& slot = SlotFor(target);
  ActiveGuard guard;
  guard.state_ = this;
  guard.target_ = target;
  guard.generation_ = slot.generation;
  guard.blocks_.reserve(blocks.size());
  if (!blocks.empty()) ++active_first_[blocks.front()];
  for (BlockHash h : blocks) {
    // A chain holds distinct hashes; a repeated one is counted (and released) once
    // per occurrence, which keeps the refcounts balanced either way.
    ++slot.active[h];
    guard.blocks_.push_back(h);
  }
  guard.anonymous_blocks_ = anonymous_blocks;
  slot.anonymous_blocks += anonymous_blocks;
  slot.request_blocks += guard.block_count();
  if (prefill.blocks > 0) {
    guard.prefill_id_ = next_prefill_id_++;
    Prefill p{.id = guard.prefill_id_,
              .blocks = prefill.blocks,
              .missed = prefill.blocks,
              .last_block = prefill.last_block,
              .dispatched_ns = prefill.dispatched_ns};
    if (!guard.blocks_.empty() && prefill.first_block < guard.blocks_.size()) {
      p.chain = guard.blocks_.data();
      p.chain_len = guard.blocks_.size();
      p.first_block = prefill.first_block;
    }
    if (slot.prefills.empty()) {  // an idle queue: its head starts now
      slot.head_start_ns = prefill.dispatched_ns;
      slot.mark_ns = prefill.dispatched_ns;
    }
    slot.prefills.push_back(p);
    slot.prefill_blocks += prefill.blocks;
    slot.added_since_settle = true;
  }
  ++slot.pending_guards;
  Sync(slot);
  return guard;
}

void LoadState::Completed(Slot& slot, const Prefill& p, bool head, int64_t now_ns) {
  const int64_t since = std::max(slot.mark_ns, p.dispatched_ns);
  slot.rate_blocks = slot.rate_blocks * (1 - kRateAlpha) + p.missed;
  slot.rate_ns = slot.rate_ns * (1 - kRateAlpha) + static_cast<double>(std::max<int64_t>(0, now_ns - since));
  slot.mark_ns = std::max(slot.mark_ns, now_ns);
  if (head) slot.head_start_ns = std::max(slot.head_start_ns, now_ns);
}

void LoadState::DropPrefill(Slot& slot, uint64_t id, std::optional<int64_t> now_ns) {
  auto it = std::find_if(slot.prefills.begin(), slot.prefills.end(),
                         [&](const Prefill& p) { return p.id == id; });
  if (it == slot.prefills.end()) return;  // settled by the events already
  if (now_ns) Completed(slot, *it, it == slot.prefills.begin(), *now_ns);
  slot.prefill_blocks -= it->blocks;
  slot.prefills.erase(it);
  if (slot.prefills.empty()) slot.prefill_blocks = 0;  // no rounding residue
  Sync(slot);
}

void LoadState::ReleaseGuard(ActiveGuard& guard) {
  if (!guard.blocks_.empty()) {  // counted in AddActive whether or not the target lives on
    auto it = active_first_.find(guard.blocks_.front());
    assert(it != active_first_.end());
    if (it != active_first_.end() && --it->second == 0) active_first_.erase(it);
  }
  Slot* live = LiveSlot(guard);
  if (live == nullptr) return;
  Slot& slot = *live;
  for (BlockHash h : guard.blocks_) {
    auto it = slot.active.find(h);
    assert(it != slot.active.end());
    if (it == slot.active.end()) continue;
    if (--it->second == 0) slot.active.erase(it);
  }
  assert(slot.anonymous_blocks >= guard.anonymous_blocks_);
  slot.anonymous_blocks -= guard.anonymous_blocks_;
  slot.request_blocks -= guard.block_count();
  if (guard.prefill_id_ != 0) DropPrefill(slot, guard.prefill_id_);
  --slot.pending_guards;
  Sync(slot);
}

void LoadState::DecayRecent() {
  if (options_.recent_decay == 0 || options_.recent_decay == 1) return;
  recent_scale_ *= options_.recent_decay;
  if (recent_scale_ < kRenormalizeBelow) {
    for (Slot& slot : slots_) {
      slot.recent_scaled *= recent_scale_;
      for (Charge& c : slot.charges) c.scaled *= recent_scale_;
    }
    recent_scale_ = 1.0;
  }
}

void LoadState::ChargeRecent(TargetId target, double blocks, std::optional<BlockHash> last_block) {
  if (options_.recent_decay == 0 || options_.term != LoadTerm::kSpec || blocks <= 0) return;
  Slot& slot = SlotFor(target);
  slot.charges.push_back({blocks / recent_scale_, last_block});
  slot.added_since_settle = true;
  slot.recent_scaled += blocks / recent_scale_;
  Sync(slot);
}

void LoadState::SettleSlot(TargetId target, uint64_t view_version,
                           absl::FunctionRef<bool(BlockHash)> confirmed,
                           std::optional<int64_t> now_ns) {
  if (target >= slots_.size() || !slots_[target].live) return;
  Slot& slot = slots_[target];
  if (view_version != 0 && view_version == slot.settled_view && !slot.added_since_settle &&
      options_.term == LoadTerm::kWork) {
    return;
  }
  slot.settled_view = view_version;
  slot.added_since_settle = false;
  if (!slot.prefills.empty()) {
    // Whether each entry is done, in queue order (a completion with a time is a rate
    // sample, taken before the entries after it move up).
    const auto done = [&](Prefill& p) {
      if (p.chain != nullptr) {
        // The longest confirmed run from first_block (binary search: the blocks of
        // a prefill are stored in chain order).
        size_t lo = 0, hi = p.chain_len - p.first_block;
        while (lo < hi) {
          const size_t mid = lo + (hi - lo + 1) / 2;
          if (confirmed(p.chain[p.first_block + mid - 1])) {
            lo = mid;
          } else {
            hi = mid - 1;
          }
        }
        if (lo == p.chain_len - p.first_block) return true;  // all written: done
        p.blocks = std::max(0.0, p.missed - static_cast<double>(lo));
        return false;
      }
      return p.last_block && confirmed(*p.last_block);
    };
    size_t kept = 0;
    for (size_t i = 0; i < slot.prefills.size(); ++i) {
      if (done(slot.prefills[i])) {
        if (now_ns) Completed(slot, slot.prefills[i], kept == 0, *now_ns);
        continue;
      }
      if (kept != i) slot.prefills[kept] = slot.prefills[i];
      ++kept;
    }
    slot.prefills.resize(kept);
    slot.prefill_blocks = 0;
    for (const Prefill& p : slot.prefills) slot.prefill_blocks += p.blocks;
  }
  if (!slot.charges.empty()) {
    const double negligible = kNegligibleBlocks / recent_scale_;
    std::erase_if(slot.charges, [&](const Charge& c) {
      return c.scaled < negligible || (c.last_block && confirmed(*c.last_block));
    });
    slot.recent_scaled = 0;
    for (const Charge& c : slot.charges) slot.recent_scaled += c.scaled;
  }
  Sync(slot);
}

void LoadState::SetCapacityBlocks(TargetId target, size_t blocks) {
  Slot& slot = SlotFor(target);
  slot.capacity_blocks = blocks;
  Sync(slot);
}

void LoadState::ObserveSlow(TargetId target, size_t blocks) {
  Slot& slot = SlotFor(target);
  if (blocks < slot.most_cached_blocks) slot.learned_capacity_blocks = slot.most_cached_blocks;
  slot.most_cached_blocks = std::max(slot.most_cached_blocks, blocks);
  if (slot.learned_capacity_blocks > 0) {
    slot.learned_capacity_blocks = std::max(slot.learned_capacity_blocks, blocks);
  }
  Sync(slot);
  hot_[target].observed = blocks;
}

void LoadState::SetMaxSeqs(TargetId target, size_t seqs) {
  Slot& slot = SlotFor(target);
  slot.max_seqs = seqs;
  Sync(slot);
}

size_t LoadState::MaxSeqs(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->max_seqs : 0;
}

size_t LoadState::CapacityOf(const Slot& slot) {
  return slot.capacity_blocks > 0 ? slot.capacity_blocks : slot.learned_capacity_blocks;
}

size_t LoadState::CapacityBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot == nullptr ? 0 : CapacityOf(*slot);
}

size_t LoadState::ActiveBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->active.size() + slot->anonymous_blocks : 0;
}

double LoadState::RecentBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->recent_scaled * recent_scale_ : 0.0;
}

double LoadState::PendingPrefillBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? std::max(0.0, slot->prefill_blocks) : 0.0;
}

double LoadState::RateOf(const Slot& slot) const {
  const double prior_blocks = options_.prefill_rate_blocks_per_s * 1e-9 * kRatePriorNs;
  return (slot.rate_blocks + prior_blocks) / (slot.rate_ns + kRatePriorNs);
}

double LoadState::TimedPrefillOf(const Slot& slot, int64_t now_ns) const {
  // A FIFO queue: the head computes from head_start_ns (or its dispatch, if later); each
  // next one starts when the one before it is predicted done (or at its own dispatch).
  const double rate = RateOf(slot);
  const double now = static_cast<double>(now_ns);
  double start_of_next = static_cast<double>(slot.head_start_ns);
  double left = 0;
  for (const Prefill& p : slot.prefills) {
    const double start = std::max(start_of_next, static_cast<double>(p.dispatched_ns));
    const double done = std::max(0.0, now - start) * rate;
    left += std::min(p.blocks, std::max(options_.timed_prefill_floor * p.missed, p.missed - done));
    start_of_next = start + p.missed / rate;
  }
  return left;
}

double LoadState::RemainingPrefillBlocks(TargetId target, int64_t now_ns) const {
  const Slot* slot = FindSlot(target);
  if (slot == nullptr) return 0;
  return options_.timed_prefill ? TimedPrefillOf(*slot, now_ns) : std::max(0.0, slot->prefill_blocks);
}

double LoadState::PrefillRate(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? RateOf(*slot) * 1e9 : options_.prefill_rate_blocks_per_s;
}

double LoadState::KvPressureOf(const Hot& hot, size_t incoming_blocks) const {
  const size_t capacity = hot.capacity;
  if (capacity == 0) return 0;
  const double used = static_cast<double>(hot.used + incoming_blocks);
  const double excess = used - options_.kv_pressure_threshold * static_cast<double>(capacity);
  return excess > 0 ? options_.kv_pressure_slope * excess : 0;
}

double LoadState::KvPressure(TargetId target, size_t incoming_blocks) const {
  const Hot* hot = target < hot_.size() && hot_[target].live ? &hot_[target] : nullptr;
  return hot == nullptr ? 0 : KvPressureOf(*hot, incoming_blocks);
}

size_t LoadState::RequestBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->request_blocks : 0;
}

double LoadState::DecodeLoadOf(const Hot& hot) const {
  const size_t capacity = hot.capacity;
  if (capacity == 0 || options_.decode_load_blocks == 0) return 0;
  const double occupancy = static_cast<double>(hot.request_blocks) / static_cast<double>(capacity);
  return options_.decode_load_blocks * std::min(1.0, occupancy);
}

double LoadState::DecodeLoad(TargetId target) const {
  const Hot* hot = target < hot_.size() && hot_[target].live ? &hot_[target] : nullptr;
  return hot == nullptr ? 0 : DecodeLoadOf(*hot);
}

double LoadState::SeqWaitOf(const Hot& hot) const {
  const size_t max_seqs = hot.max_seqs;
  const size_t requests = hot.pending_guards;
  if (max_seqs == 0 || options_.seq_wait_blocks == 0 || requests < max_seqs) return 0;
  return options_.seq_wait_blocks * static_cast<double>(requests + 1 - max_seqs);
}

double LoadState::SeqWait(TargetId target) const {
  const Hot* hot = target < hot_.size() && hot_[target].live ? &hot_[target] : nullptr;
  return hot == nullptr ? 0 : SeqWaitOf(*hot);
}

size_t LoadState::ActiveHolders(TargetId target, BlockHash hash) const {
  const Slot* slot = FindSlot(target);
  if (slot == nullptr) return 0;
  auto it = slot->active.find(hash);
  return it == slot->active.end() ? 0 : it->second;
}

size_t LoadState::ActiveRun(TargetId target, std::span<const BlockHash> chain, size_t from) const {
  const Slot* slot = FindSlot(target);
  if (slot == nullptr) return 0;
  size_t n = 0;
  while (from + n < chain.size() && slot->active.contains(chain[from + n])) ++n;
  return n;
}

double LoadState::Load(TargetId target, size_t incoming_blocks, int64_t now_ns) const {
  return TermsOf(target, incoming_blocks, now_ns).load;
}

LoadState::Terms LoadState::TermsOf(TargetId target, size_t incoming_blocks,
                                    int64_t now_ns) const {
  Terms terms;
  if (target >= hot_.size() || hot_[target].live == 0) return terms;
  const Hot& hot = hot_[target];
  terms.active = hot.used;
  terms.seq_wait = SeqWaitOf(hot);
  if (options_.term == LoadTerm::kSpec) {
    terms.load =
        static_cast<double>(terms.active) + slots_[target].recent_scaled * recent_scale_;
  } else {
    // The timed term depends on `now_ns`: computed from the slot (its prefill queue and
    // learned rate), not cached in the hot row.
    const double pending = options_.timed_prefill
                               ? TimedPrefillOf(slots_[target], now_ns)
                               : std::max(0.0, hot.prefill_blocks);
    terms.pressure = KvPressureOf(hot, incoming_blocks);
    terms.load =
        pending + hot.remote_prefill_blocks + terms.pressure + DecodeLoadOf(hot) + terms.seq_wait;
  }
  return terms;
}

void LoadState::SetRemote(TargetId target, size_t active_blocks, double pending_prefill_blocks) {
  Slot& slot = SlotFor(target);
  slot.remote_active_blocks = active_blocks;
  slot.remote_prefill_blocks = std::max(0.0, pending_prefill_blocks);
  Sync(slot);
}

size_t LoadState::RemoteActiveBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->remote_active_blocks : 0;
}

double LoadState::RemotePendingPrefillBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->remote_prefill_blocks : 0.0;
}

size_t LoadState::PendingGuards() const {
  size_t n = 0;
  for (const Slot& slot : slots_) n += slot.live ? slot.pending_guards : 0;
  return n;
}

size_t LoadState::Requests(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->pending_guards : 0;
}

size_t LoadState::NewActiveBlocks(TargetId target, std::span<const BlockHash> chain) const {
  const Slot* slot = FindSlot(target);
  if (slot == nullptr) return chain.size();
  size_t n = 0;
  for (BlockHash h : chain) n += slot->active.contains(h) ? 0 : 1;
  return n;
}

void LoadState::RemoveTarget(TargetId target) {
  if (target >= slots_.size()) return;
  Slot& slot = slots_[target];
  const uint64_t next_generation = slot.generation + 1;
  slot = Slot{};
  slot.generation = next_generation;
  hot_[target] = Hot{};
}

}  // namespace infera::core
