#include "core/load_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "core/clock.h"

namespace infera::core {
namespace {

const std::vector<BlockHash> kPrefix = {1, 2, 3, 4};

// The spec load term with the given recent-blocks decay.
LoadOptions Spec(double decay) {
  return LoadOptions{.term = LoadTerm::kSpec,
                     .recent_decay = decay,
                     .kv_pressure_threshold = 0.8,
                     .kv_pressure_slope = 4};
}

std::vector<BlockHash> With(std::vector<BlockHash> chain, std::vector<BlockHash> more) {
  chain.insert(chain.end(), more.begin(), more.end());
  return chain;
}

TEST(LoadStateTest, SharedPrefixIsCountedOnce) {
  LoadState load;
  auto a = load.AddActive(0, With(kPrefix, {10, 11}));
  EXPECT_EQ(load.ActiveBlocks(0), 6u);
  auto b = load.AddActive(0, With(kPrefix, {20}));
  EXPECT_EQ(load.ActiveBlocks(0), 7u);  // 4 shared + 2 + 1
  a.Release();
  EXPECT_EQ(load.ActiveBlocks(0), 5u);  // the prefix stays while b is in flight
  b.Release();
  EXPECT_EQ(load.ActiveBlocks(0), 0u);
  EXPECT_EQ(load.ActiveBlocks(1), 0u);  // other targets untouched
}

// The decode term: every in-flight request's prompt blocks (a shared prefix once per
// request: each sequence's decode step reads its whole context) over the capacity,
// capped at 1, times --kv-decode-load; 0 without a known capacity or when off.
TEST(LoadStateTest, DecodeLoadCountsEachRequestsBlocksUpToTheCapacity) {
  LoadOptions options;
  options.decode_load_blocks = 40;
  LoadState load(options);
  auto a = load.AddActive(0, With(kPrefix, {10, 11}));
  auto b = load.AddActive(0, With(kPrefix, {20}), 2);  // + 2 anonymous blocks
  EXPECT_EQ(load.RequestBlocks(0), 6u + 7u);
  EXPECT_EQ(load.DecodeLoad(0), 0);  // capacity unknown
  load.SetCapacityBlocks(0, 26);
  EXPECT_DOUBLE_EQ(load.DecodeLoad(0), 40 * 13.0 / 26);
  EXPECT_DOUBLE_EQ(load.Load(0), 20);  // no pending prefill, no KV pressure
  load.SetCapacityBlocks(0, 10);
  EXPECT_DOUBLE_EQ(load.DecodeLoad(0), 40);  // capped at a full KV
  a.Release();
  b.Release();
  EXPECT_EQ(load.RequestBlocks(0), 0u);
  EXPECT_EQ(load.DecodeLoad(0), 0);
  LoadState off;  // the default: no decode term
  off.SetCapacityBlocks(0, 10);
  auto c = off.AddActive(0, kPrefix);
  EXPECT_EQ(off.DecodeLoad(0), 0);
}

// The sequence-slot term (--kv-seq-wait-load): seq_wait_blocks per request a new one
// would wait behind on a target at its max_num_seqs; 0 while it has a free slot, when
// max_num_seqs is unknown, or when off.
TEST(LoadStateTest, SeqWaitCountsTheRequestsPastMaxNumSeqs) {
  LoadOptions options;
  options.seq_wait_blocks = 100;
  LoadState load(options);
  std::vector<LoadState::ActiveGuard> in_flight;
  in_flight.push_back(load.AddActive(0, kPrefix));
  in_flight.push_back(load.AddActive(0, kPrefix));
  EXPECT_EQ(load.SeqWait(0), 0);  // max_num_seqs unknown
  load.SetMaxSeqs(0, 3);
  EXPECT_EQ(load.MaxSeqs(0), 3u);
  EXPECT_EQ(load.SeqWait(0), 0);  // a third slot is free
  in_flight.push_back(load.AddActive(0, kPrefix));
  EXPECT_DOUBLE_EQ(load.SeqWait(0), 100);  // a new one waits for one slot
  in_flight.push_back(load.AddActive(0, kPrefix));
  EXPECT_DOUBLE_EQ(load.SeqWait(0), 200);
  EXPECT_DOUBLE_EQ(load.Load(0), 200);  // no pending prefill, no KV pressure
  EXPECT_EQ(load.SeqWait(1), 0);        // other targets untouched
  in_flight.pop_back();
  in_flight.pop_back();
  EXPECT_EQ(load.SeqWait(0), 0);
  LoadState off;  // the default: no slot term
  off.SetMaxSeqs(0, 1);
  auto a = off.AddActive(0, kPrefix);
  auto b = off.AddActive(0, kPrefix);
  EXPECT_EQ(off.SeqWait(0), 0);
}

// What the in-flight credit reads: how many in-flight requests hold a block, and how
// far a chain runs through the target's active set from a given block.
TEST(LoadStateTest, ActiveHoldersAndActiveRun) {
  LoadState load;
  auto a = load.AddActive(0, With(kPrefix, {10, 11}));
  auto b = load.AddActive(0, kPrefix);
  EXPECT_EQ(load.ActiveHolders(0, 1), 2u);
  EXPECT_EQ(load.ActiveHolders(0, 10), 1u);
  EXPECT_EQ(load.ActiveHolders(0, 99), 0u);
  EXPECT_EQ(load.ActiveHolders(1, 1), 0u);
  const std::vector<BlockHash> chain = With(kPrefix, {10, 12, 11});
  EXPECT_EQ(load.ActiveRun(0, chain, 0), 5u);  // stops at 12, though 11 is held
  EXPECT_EQ(load.ActiveRun(0, chain, 2), 3u);
  EXPECT_EQ(load.ActiveRun(0, chain, 5), 0u);
  EXPECT_EQ(load.ActiveRun(0, chain, 7), 0u);  // past the end
  EXPECT_EQ(load.ActiveRun(1, chain, 0), 0u);
  a.Release();
  EXPECT_EQ(load.ActiveHolders(0, 1), 1u);
  EXPECT_EQ(load.ActiveRun(0, chain, 0), 4u);
}

TEST(LoadStateTest, AnonymousBlocksAreNeverShared) {
  LoadState load;
  auto a = load.AddActive(3, {}, 5);
  auto b = load.AddActive(3, kPrefix, 5);
  EXPECT_EQ(load.ActiveBlocks(3), 14u);
  EXPECT_EQ(a.block_count(), 5u);
  EXPECT_EQ(b.block_count(), 9u);
  a.Release();
  EXPECT_EQ(load.ActiveBlocks(3), 9u);
}

TEST(LoadStateTest, ExplicitReleaseThenDestructorReleasesOnce) {
  LoadState load;
  auto keep = load.AddActive(0, kPrefix);  // holds the same blocks throughout
  {
    auto g = load.AddActive(0, kPrefix);
    EXPECT_TRUE(g.pending());
    g.Release();
    EXPECT_FALSE(g.pending());
    g.Release();  // second call: no effect
    EXPECT_EQ(load.PendingGuards(), 1u);
  }  // destructor: no effect
  EXPECT_EQ(load.ActiveBlocks(0), 4u);
  EXPECT_EQ(load.PendingGuards(), 1u);
}

TEST(LoadStateTest, DestructorReleases) {
  LoadState load;
  { auto g = load.AddActive(0, kPrefix); }
  EXPECT_EQ(load.ActiveBlocks(0), 0u);
  EXPECT_EQ(load.PendingGuards(), 0u);
}

TEST(LoadStateTest, MoveTransfersTheObligation) {
  LoadState load;
  auto keep = load.AddActive(0, kPrefix);
  std::optional<LoadState::ActiveGuard> holder;
  {
    auto g = load.AddActive(0, With(kPrefix, {9}));
    holder.emplace(std::move(g));
    EXPECT_FALSE(g.pending());  // NOLINT(bugprone-use-after-move): the contract
  }
  EXPECT_EQ(load.ActiveBlocks(0), 5u);  // the moved-from guard released nothing
  LoadState::ActiveGuard other = std::move(*holder);
  holder.reset();
  EXPECT_EQ(load.ActiveBlocks(0), 5u);
  other = LoadState::ActiveGuard();  // assignment releases the held guard first
  EXPECT_EQ(load.ActiveBlocks(0), 4u);
  EXPECT_EQ(load.PendingGuards(), 1u);
}

TEST(LoadStateTest, ReleaseAfterTargetRemovedIsANoOpEvenWhenIdReused) {
  LoadState load;
  auto old_guard = load.AddActive(2, kPrefix);
  load.RemoveTarget(2);
  EXPECT_EQ(load.ActiveBlocks(2), 0u);
  // The id comes back for a new target that has its own in-flight request.
  auto fresh = load.AddActive(2, kPrefix);
  old_guard.Release();
  EXPECT_EQ(load.ActiveBlocks(2), 4u);  // the new target's blocks are untouched
  fresh.Release();
  EXPECT_EQ(load.ActiveBlocks(2), 0u);
  EXPECT_EQ(load.PendingGuards(), 0u);
}

TEST(LoadStateTest, RecentBlocksDecayAndCharge) {
  LoadState load(Spec(0.5));
  load.ChargeRecent(1, 8);
  EXPECT_DOUBLE_EQ(load.RecentBlocks(1), 8);
  load.DecayRecent();
  EXPECT_DOUBLE_EQ(load.RecentBlocks(1), 4);
  load.ChargeRecent(1, 2);
  load.ChargeRecent(0, 1);
  load.DecayRecent();
  EXPECT_DOUBLE_EQ(load.RecentBlocks(1), 3);
  EXPECT_DOUBLE_EQ(load.RecentBlocks(0), 0.5);
  auto g = load.AddActive(1, kPrefix);
  EXPECT_DOUBLE_EQ(load.Load(1), 7);
  // Many decays keep values finite and correct (the lazy scale renormalises).
  for (int i = 0; i < 2000; ++i) load.DecayRecent();
  EXPECT_EQ(load.RecentBlocks(1), 0);
  load.ChargeRecent(1, 5);
  EXPECT_DOUBLE_EQ(load.RecentBlocks(1), 5);
}

TEST(LoadStateTest, DecayZeroTurnsRecentOff) {
  LoadState load(Spec(0.0));
  load.ChargeRecent(0, 10);
  load.DecayRecent();
  EXPECT_EQ(load.RecentBlocks(0), 0);
}

TEST(LoadStateTest, RemoveTargetDropsRecentToo) {
  LoadState load(Spec(0.97));
  load.ChargeRecent(4, 10);
  load.RemoveTarget(4);
  EXPECT_EQ(load.RecentBlocks(4), 0);
}

TEST(LoadStateTest, RecentChargesSettleWhenConfirmed) {
  LoadState load(Spec(0.5));
  load.ChargeRecent(0, 8, BlockHash{44});
  load.ChargeRecent(0, 2);  // no last block: decays only
  load.Settle(0, [](BlockHash h) { return h == 99; });
  EXPECT_DOUBLE_EQ(load.RecentBlocks(0), 10);
  load.Settle(0, [](BlockHash h) { return h == 44; });
  EXPECT_DOUBLE_EQ(load.RecentBlocks(0), 2);
  // The work term does not keep recent charges at all.
  LoadState work;
  work.ChargeRecent(0, 8, BlockHash{44});
  EXPECT_EQ(work.RecentBlocks(0), 0);
}

TEST(LoadStateTest, WorkTermIsPendingPrefillPlusKvPressure) {
  LoadState load;  // defaults: work term, threshold 0.8, slope 1
  EXPECT_EQ(load.options().term, LoadTerm::kWork);
  auto a =
      load.AddActive(0, kPrefix, 0, {.blocks = 3, .last_block = BlockHash{4}, .first_block = 0});
  auto b = load.AddActive(0, With(kPrefix, {5, 6}), 0,
                          {.blocks = 2.5, .last_block = std::nullopt, .first_block = 4});
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(0), 5.5);
  EXPECT_DOUBLE_EQ(load.Load(0, 100), 5.5);  // capacity unknown: no pressure
  load.SetCapacityBlocks(0, 10);
  // 6 active + 4 incoming = 10 blocks, 2 past 8 (80 % of 10): 2 × 1 = 2.
  EXPECT_DOUBLE_EQ(load.KvPressure(0, 4), 2);
  EXPECT_DOUBLE_EQ(load.KvPressure(0, 2), 0);
  EXPECT_DOUBLE_EQ(load.Load(0, 4), 5.5 + 2);
  // The events confirm a's blocks: a's prefill is done (b's blocks 5, 6 are not).
  load.Settle(0, [](BlockHash h) { return h <= 4; });
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(0), 2.5);
  a.PrefillDone();  // already settled: nothing more
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(0), 2.5);
  b.PrefillDone();
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(0), 0);
  EXPECT_EQ(load.ActiveBlocks(0), 6u);  // still in flight until released
  a.Release();
  b.Release();
  EXPECT_EQ(load.ActiveBlocks(0), 0u);
}

TEST(LoadStateTest, PendingPrefillCountsTheConfirmedProgress) {
  LoadState load;
  // Chain 1..6, blocks 1-2 were hits: the prefill computes 3..6.
  const std::vector<BlockHash> chain = {1, 2, 3, 4, 5, 6};
  LoadState::ActiveGuard g =
      load.AddActive(0, chain, 0, {.blocks = 4, .last_block = 6, .first_block = 2});
  LoadState::ActiveGuard moved = std::move(g);         // the entry follows the chain's buffer
  load.Settle(0, [](BlockHash h) { return h <= 3; });  // the first chunk is written
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(0), 3);
  load.Settle(0, [](BlockHash h) { return h <= 5; });
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(0), 1);
  load.Settle(0, [](BlockHash) { return true; });
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(0), 0);
  moved.PrefillDone();  // settled already: no effect
  EXPECT_EQ(load.ActiveBlocks(0), 6u);
}

TEST(LoadStateTest, MovedGuardCarriesItsPendingPrefill) {
  LoadState load;
  LoadState::ActiveGuard held;
  {
    auto g =
        load.AddActive(1, kPrefix, 0, {.blocks = 4, .last_block = std::nullopt, .first_block = 0});
    held = std::move(g);
    g.PrefillDone();  // moved-from: no effect
  }
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(1), 4);
  held.PrefillDone();
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(1), 0);
}

TEST(LoadStateTest, PendingPrefillOfARemovedTargetIsGone) {
  LoadState load;
  auto g =
      load.AddActive(2, kPrefix, 0, {.blocks = 4, .last_block = std::nullopt, .first_block = 0});
  load.RemoveTarget(2);
  auto fresh =
      load.AddActive(2, kPrefix, 0, {.blocks = 1, .last_block = std::nullopt, .first_block = 0});
  g.PrefillDone();
  g.Release();
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(2), 1);
}

TEST(LoadStateTest, CapacityLearnedAfterTheViewShrinks) {
  LoadState load;
  load.ObserveCachedBlocks(0, 50);
  load.ObserveCachedBlocks(0, 120);
  EXPECT_EQ(load.CapacityBlocks(0), 0u);
  load.ObserveCachedBlocks(0, 110);
  EXPECT_EQ(load.CapacityBlocks(0), 120u);
  load.ObserveCachedBlocks(0, 130);
  EXPECT_EQ(load.CapacityBlocks(0), 130u);
  load.SetCapacityBlocks(0, 1000);
  EXPECT_EQ(load.CapacityBlocks(0), 1000u);
}

TEST(LoadStateTest, RemoteLoadAddsToTheLoadTermButNotToTheOwnCounts) {
  LoadState load;  // kWork
  std::vector<BlockHash> chain = {1, 2, 3, 4};
  auto a = load.AddActive(0, chain, 0, PendingPrefill{.blocks = 4, .last_block = {}});
  auto b = load.AddActive(1, chain, 0, PendingPrefill{.blocks = 4, .last_block = {}});
  EXPECT_DOUBLE_EQ(load.Load(0), load.Load(1));  // a tie locally
  load.SetRemote(1, 6, 5.5);                     // other replicas are busy on 1
  EXPECT_GT(load.Load(1), load.Load(0));         // so 1 loses it
  EXPECT_DOUBLE_EQ(load.Load(1), 4 + 5.5);
  EXPECT_EQ(load.ActiveBlocks(1), 4u);  // what this replica publishes stays its own
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(1), 4);
  EXPECT_EQ(load.RemoteActiveBlocks(1), 6u);
  // Remote active blocks count in the KV pressure: 4 + 6 + 2 incoming over 0.8 × 10.
  load.SetCapacityBlocks(1, 10);
  EXPECT_DOUBLE_EQ(load.KvPressure(1, 2), 1.0 * (12 - 8));  // the default slope, 1
  load.SetRemote(1, 0, -1);  // cleared; a negative pending clamps to 0
  EXPECT_DOUBLE_EQ(load.RemotePendingPrefillBlocks(1), 0);
  load.SetRemote(1, 3, 1);
  load.RemoveTarget(1);
  EXPECT_EQ(load.RemoteActiveBlocks(1), 0u);

  LoadOptions spec_options;
  spec_options.term = LoadTerm::kSpec;
  spec_options.recent_decay = 0;
  LoadState spec(spec_options);
  auto c = spec.AddActive(0, chain);
  spec.SetRemote(0, 5, 2);
  EXPECT_DOUBLE_EQ(spec.Load(0), 4 + 5);  // the spec's active blocks, fleet-wide
}

// The pick reads each target's terms from a dense copy of its slot (LoadState's hot
// rows, doc/selection.md "Cost of a pick"). After every kind of change, in a seeded
// random order, the terms equal the formulas of doc/selection.md computed from the
// slot's own accessors, and the requests in prefill equal a model's count.
TEST(LoadStateTest, PickTermsFollowEveryChange) {
  LoadOptions options;
  options.decode_load_blocks = 3;
  options.seq_wait_blocks = 256;
  LoadState load(options);
  Random random(27);
  constexpr TargetId kTargets = 6;
  struct Request {
    TargetId target = 0;
    BlockHash first = 0;  // the chain is first .. first + len - 1
    size_t len = 0;
    bool prefilling = false;
    LoadState::ActiveGuard guard;
  };
  std::vector<Request> requests;
  BlockHash next_hash = 1;
  BlockHash view_cutoff[kTargets] = {};  // the view holds hashes below it
  size_t checked = 0;
  for (int step = 0; step < 4000; ++step) {
    const TargetId t = static_cast<TargetId>(random.Uniform(kTargets));
    switch (random.Uniform(9)) {
      case 0:
      case 1: {  // a pick
        Request r;
        r.target = t;
        r.first = next_hash;
        r.len = 1 + random.Uniform(8);
        std::vector<BlockHash> chain;
        for (size_t k = 0; k < r.len; ++k) chain.push_back(next_hash++);
        const size_t first_block = random.Uniform(r.len);
        const double missed = static_cast<double>(random.Uniform(r.len + 1));
        r.prefilling = missed > 0;
        r.guard = load.AddActive(t, chain, random.Uniform(3),
                                 {.blocks = missed, .last_block = chain.back(),
                                  .first_block = first_block});
        requests.push_back(std::move(r));
        break;
      }
      case 2:  // a release
        if (!requests.empty()) {
          const size_t k = random.Uniform(requests.size());
          requests[k].guard.Release();
          requests.erase(requests.begin() + static_cast<std::ptrdiff_t>(k));
        }
        break;
      case 3:  // a first token
        if (!requests.empty()) {
          Request& r = requests[random.Uniform(requests.size())];
          r.guard.PrefillDone();
          r.prefilling = false;
        }
        break;
      case 4: {  // the view grows (or not), then the target is settled
        if (random.Uniform(2) == 0) view_cutoff[t] = next_hash - random.Uniform(6);
        const BlockHash cutoff = view_cutoff[t];
        // The view's version: its cutoff (a settle against an unchanged view and
        // nothing added since is skipped; the model below settles every time).
        load.Settle(t, cutoff + 1, [&](BlockHash h) { return h < cutoff; });
        for (Request& r : requests) {
          if (r.target == t && r.first + r.len - 1 < cutoff) r.prefilling = false;
        }
        break;
      }
      case 5:
        load.ObserveCachedBlocks(t, random.Uniform(40));
        break;
      case 6:
        load.SetCapacityBlocks(t, random.Uniform(3) == 0 ? 0 : random.Uniform(40));
        load.SetMaxSeqs(t, random.Uniform(4));
        break;
      case 7:
        load.SetRemote(t, random.Uniform(10), static_cast<double>(random.Uniform(10)) / 2);
        break;
      case 8:
        if (random.Uniform(20) == 0) {  // the target leaves: its guards release nothing
          load.RemoveTarget(t);
          view_cutoff[t] = 0;
          std::erase_if(requests, [&](const Request& r) { return r.target == t; });
        }
        break;
    }
    for (TargetId u = 0; u < kTargets; ++u) {
      const size_t incoming = random.Uniform(30);
      const size_t capacity = load.CapacityBlocks(u);
      const size_t used = load.ActiveBlocks(u) + load.RemoteActiveBlocks(u);
      double pressure = 0;
      if (capacity > 0) {
        const double excess = static_cast<double>(used + incoming) -
                              options.kv_pressure_threshold * static_cast<double>(capacity);
        pressure = excess > 0 ? options.kv_pressure_slope * excess : 0;
      }
      const double decode =
          capacity == 0 ? 0
                        : options.decode_load_blocks *
                              std::min(1.0, static_cast<double>(load.RequestBlocks(u)) /
                                                static_cast<double>(capacity));
      const size_t max_seqs = load.MaxSeqs(u);
      const size_t requests_on = load.Requests(u);
      const double seq_wait =
          max_seqs == 0 || requests_on < max_seqs
              ? 0
              : options.seq_wait_blocks * static_cast<double>(requests_on + 1 - max_seqs);
      const LoadState::Terms terms = load.TermsOf(u, incoming);
      ASSERT_EQ(terms.active, used) << "step " << step;
      ASSERT_EQ(terms.seq_wait, seq_wait) << "step " << step;
      ASSERT_EQ(terms.load, load.PendingPrefillBlocks(u) + load.RemotePendingPrefillBlocks(u) +
                                pressure + decode + seq_wait)
          << "step " << step;
      size_t prefilling = 0;
      for (const Request& r : requests) prefilling += r.target == u && r.prefilling ? 1 : 0;
      ASSERT_EQ(load.PrefillingRequests(u), prefilling) << "step " << step << " target " << u;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4000u * kTargets);
}

constexpr int64_t kMs = 1'000'000;

// The timed prefill at a seed rate of 1000 blocks/s: 1 block per ms.
LoadOptions TimedOptions() {
  LoadOptions options;
  options.timed_prefill = true;
  options.prefill_rate_blocks_per_s = 1000;
  return options;
}

// A pending prefill of `blocks` dispatched at `ns` (timed prefill tests).
PendingPrefill Timed(double blocks, int64_t ns, std::optional<BlockHash> last = std::nullopt) {
  PendingPrefill p;
  p.blocks = blocks;
  p.last_block = last;
  p.dispatched_ns = ns;
  return p;
}

// --kv-timed-prefill: a pending prefill counts what is left after the time since its
// dispatch at the target's prefill rate (here the seed, 1000 blocks/s = 1 block per
// ms), never below 0 while it is not confirmed; the queue is FIFO: a request
// dispatched while another computes waits until that one is predicted done. Off, the
// time changes nothing.
TEST(LoadStateTest, TimedPrefillCountsWhatTheElapsedTimeLeaves) {
  LoadState load(TimedOptions());
  EXPECT_DOUBLE_EQ(load.PrefillRate(0), 1000);
  auto a = load.AddActive(0, kPrefix, 0, Timed(100, 0));
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 0), 100);
  EXPECT_DOUBLE_EQ(load.Load(0, 0, 40 * kMs), 60);
  EXPECT_DOUBLE_EQ(load.PendingPrefillBlocks(0), 100);  // the untimed count stays
  auto b = load.AddActive(0, {}, 1, Timed(50, 10 * kMs));
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 40 * kMs), 60 + 50);  // b waits
  EXPECT_NEAR(load.RemainingPrefillBlocks(0, 120 * kMs), 0 + 30, 1e-9);  // b since 100 ms
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 500 * kMs), 0);       // overdue: 0
  EXPECT_NEAR(load.TermsOf(0, 0, 120 * kMs).load, 30, 1e-9);

  LoadState off;  // the default: blocks until confirmed, whatever the time
  auto c = off.AddActive(0, kPrefix, 0, Timed(100, 0));
  EXPECT_DOUBLE_EQ(off.Load(0, 0, 500 * kMs), 100);
  EXPECT_DOUBLE_EQ(off.RemainingPrefillBlocks(0, 500 * kMs), 100);
}

// With a floor, a prefill counts at least that share of its missed blocks until it is
// confirmed, however overdue; the FIFO queue's starts do not change.
TEST(LoadStateTest, TimedPrefillKeepsItsFloorUntilConfirmed) {
  LoadOptions options = TimedOptions();
  options.timed_prefill_floor = 0.2;
  LoadState load(options);
  auto a = load.AddActive(0, kPrefix, 0, Timed(100, 0));
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 40 * kMs), 60);  // above the floor
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 90 * kMs), 20);  // at it
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 5000 * kMs), 20);
  auto b = load.AddActive(0, {}, 1, Timed(50, 10 * kMs));
  // b starts when a is predicted done (100 ms), whatever a's floor.
  EXPECT_NEAR(load.RemainingPrefillBlocks(0, 120 * kMs), 20 + 30, 1e-9);
  EXPECT_NEAR(load.RemainingPrefillBlocks(0, 5000 * kMs), 20 + 10, 1e-9);
  a.PrefillDone(5000 * kMs);  // confirmed: a counts nothing
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 5000 * kMs), 50);  // b's head starts now
  b.Release();
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 5000 * kMs), 0);
}

// AnyActiveFirst: whether a live guard's chain starts with the block, on any target;
// a guard of a removed target counts until it is released.
TEST(LoadStateTest, AnyActiveFirstCountsLiveGuardsByTheirFirstBlock) {
  LoadState load;
  EXPECT_FALSE(load.AnyActiveFirst(kPrefix[0]));
  auto a = load.AddActive(0, kPrefix);
  auto b = load.AddActive(1, kPrefix);
  auto c = load.AddActive(1, {}, 4);  // no chain: not counted
  EXPECT_TRUE(load.AnyActiveFirst(kPrefix[0]));
  EXPECT_FALSE(load.AnyActiveFirst(kPrefix[1]));  // only first blocks
  a.Release();
  EXPECT_TRUE(load.AnyActiveFirst(kPrefix[0]));
  load.RemoveTarget(1);
  EXPECT_TRUE(load.AnyActiveFirst(kPrefix[0]));
  b.Release();
  EXPECT_FALSE(load.AnyActiveFirst(kPrefix[0]));
}

// The rate is learned from completions with a time (PrefillDone(now), or Settle(now)
// finding the last block): an EWMA of (blocks, ns since the last completion or the
// dispatch), with the seed as a 50 ms prior. The next request in the queue starts at
// the completion.
TEST(LoadStateTest, TimedPrefillLearnsTheRateFromCompletions) {
  LoadState load(TimedOptions());
  auto a = load.AddActive(0, kPrefix, 0, Timed(100, 0));
  auto b = load.AddActive(0, {}, 1, Timed(50, 10 * kMs, 99));
  a.PrefillDone(50 * kMs);  // 100 blocks in 50 ms; with the prior (50 blocks, 50 ms):
  EXPECT_DOUBLE_EQ(load.PrefillRate(0), 150.0 / 100 * 1000);
  EXPECT_DOUBLE_EQ(load.RemainingPrefillBlocks(0, 70 * kMs), 50 - 20 * 1.5);
  a.PrefillDone(60 * kMs);  // idempotent: no second sample
  EXPECT_DOUBLE_EQ(load.PrefillRate(0), 1500);
  // b's last block confirmed by the view at 75 ms: 50 blocks in 25 ms, the sums decayed.
  load.Settle(0, [](BlockHash) { return true; }, 75 * kMs);
  EXPECT_EQ(load.PrefillingRequests(0), 0u);
  const double blocks = 100 * 0.9 + 50, ns = 50 * 0.9 + 25;
  EXPECT_NEAR(load.PrefillRate(0), (blocks + 50) / (ns + 50) * 1000, 1e-6);
  // Without a time (PrefillDone(), a release) nothing is sampled.
  const double rate = load.PrefillRate(0);
  auto c = load.AddActive(0, {}, 1, Timed(10, 80 * kMs));
  c.PrefillDone();
  auto d = load.AddActive(0, {}, 1, Timed(10, 90 * kMs));
  d.Release();
  EXPECT_DOUBLE_EQ(load.PrefillRate(0), rate);
  EXPECT_DOUBLE_EQ(load.PrefillRate(7), 1000);  // a target never seen: the seed
}

// With the timed prefill on, the pick's terms come from the slot at `now` (the hot row
// cannot hold a term that depends on it), and a settle skipped for an unchanged view
// and no new prefill misses no completion: a state settled with view versions learns
// the same rates and gives the same terms as one settled every time.
TEST(LoadStateTest, TimedTermsAndRatesWithSkippedSettles) {
  LoadOptions options;
  options.timed_prefill = true;
  options.prefill_rate_blocks_per_s = 1000;
  LoadState skipping(options);
  LoadState every(options);
  Random random(25);
  constexpr TargetId kTargets = 4;
  struct Request {
    LoadState::ActiveGuard a, b;
  };
  std::vector<Request> requests;
  BlockHash next_hash = 1;
  BlockHash view_cutoff[kTargets] = {};
  int64_t now = 0;
  size_t settled = 0;
  for (int step = 0; step < 3000; ++step) {
    now += static_cast<int64_t>(random.Uniform(5)) * kMs;
    const TargetId t = static_cast<TargetId>(random.Uniform(kTargets));
    switch (random.Uniform(4)) {
      case 0: {  // a pick
        std::vector<BlockHash> chain;
        const size_t len = 1 + random.Uniform(8);
        for (size_t k = 0; k < len; ++k) chain.push_back(next_hash++);
        const PendingPrefill prefill{
            .blocks = static_cast<double>(1 + random.Uniform(len)),
            .last_block = chain.back(),
            .first_block = random.Uniform(len),
            .dispatched_ns = now};
        requests.push_back({skipping.AddActive(t, chain, 0, prefill),
                            every.AddActive(t, chain, 0, prefill)});
        break;
      }
      case 1:  // a first token, with its time
        if (!requests.empty()) {
          Request& r = requests[random.Uniform(requests.size())];
          r.a.PrefillDone(now);
          r.b.PrefillDone(now);
        }
        break;
      case 2:
        if (!requests.empty()) {
          const size_t k = random.Uniform(requests.size());
          requests.erase(requests.begin() + static_cast<std::ptrdiff_t>(k));
        }
        break;
      case 3: {  // the view grows (or not), then the target is settled at `now`
        if (random.Uniform(2) == 0) view_cutoff[t] = next_hash - random.Uniform(6);
        const BlockHash cutoff = view_cutoff[t];
        const auto confirmed = [&](BlockHash h) { return h < cutoff; };
        skipping.Settle(t, cutoff + 1, confirmed, now);
        every.Settle(t, confirmed, now);
        ++settled;
        break;
      }
    }
    for (TargetId u = 0; u < kTargets; ++u) {
      ASSERT_EQ(skipping.PrefillRate(u), every.PrefillRate(u)) << "step " << step;
      ASSERT_EQ(skipping.TermsOf(u, 0, now).load, every.TermsOf(u, 0, now).load)
          << "step " << step;
      ASSERT_EQ(skipping.TermsOf(u, 0, now).load, skipping.RemainingPrefillBlocks(u, now))
          << "step " << step;
    }
  }
  EXPECT_GT(settled, 500u);
  EXPECT_NE(every.PrefillRate(0), 1000);  // completions were sampled
}

TEST(LoadStateTest, ParseLoadTerm) {
  EXPECT_EQ(*ParseLoadTerm("work"), LoadTerm::kWork);
  EXPECT_EQ(*ParseLoadTerm("spec"), LoadTerm::kSpec);
  EXPECT_EQ(ParseLoadTerm("active").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace infera::core
