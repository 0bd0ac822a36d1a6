// KV-view snapshots in the core (doc/snapshot.md §8.1; figures in doc/perf-scale.md
// "Snapshot restore (core)"). One run, side by side on the same fleet:
//  * fill: the ordinary event path, ApplyStored of 16-block events (tokens hashed)
//    into an empty index, as a full replay at restart does (decode not included);
//  * export: ExportView of every target;
//  * restore: a fresh index, Reserve(distinct hashes), then per target AddTarget,
//    ReserveTarget, RestoreView (what a snapshot load does);
//  * restore without Reserve (the tables grow as the fill's do), for the step's gain.
// Rates per thread-CPU second (the machine is shared) and per wall second; the
// restored index is checked against the filled one (counts and FindMatches on
// prompts of every target); a disagreement aborts.
//
// Fleet (bench/scale's shape): `targets` targets × `blocks` blocks each: a 32-block
// system prefix every target holds, then the target's own chains of 64 blocks.
//
//   build/bench/core/kv_snapshot_bench --benchmark_filter='BM_SnapshotRestore/4096'
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "base/splitmix64.h"
#include "core/hashing.h"
#include "core/kv_index.h"

namespace infera::core {
namespace {

constexpr size_t kBlockTokens = 16;
constexpr size_t kEventBlocks = 16;
constexpr size_t kSharedBlocks = 32;
constexpr size_t kChainBlocks = 64;

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Timer {
  int64_t cpu0 = ThreadCpuNs();
  std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
  double cpu_s() const { return (ThreadCpuNs() - cpu0) * 1e-9; }
  double wall_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  }
};

std::string Worker(size_t i) {
  std::string name = "10.0.";
  name += std::to_string(i / 256);
  name += '.';
  name += std::to_string(i % 256);
  name += ":8000";
  return name;
}

// Fills `index` through the event path; returns the blocks applied. Block b of a
// target's chain c gets the engine hash SplitMix64(target, c, b); tokens: a fixed
// pool, the first block of each chain made unique by its (target, chain) (the rest
// differ by their parent hash).
size_t Fill(KvIndex& index, size_t targets, size_t blocks) {
  std::vector<TokenId> shared(kSharedBlocks * kBlockTokens);
  for (size_t i = 0; i < shared.size(); ++i) shared[i] = static_cast<TokenId>(7 + i);
  std::vector<TokenId> pool(kEventBlocks * kBlockTokens);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<TokenId>(1000 + 3 * i);
  std::vector<BlockHash> engine;
  size_t applied = 0;
  for (size_t t = 0; t < targets; ++t) {
    const TargetId id = index.AddTarget({Worker(t), 0}, kBlockTokens);
    auto engine_hash = [&](uint64_t chain, uint64_t b) {
      return base::SplitMix64((uint64_t{t} << 40) ^ (chain << 20) ^ b);
    };
    // The shared prefix in two events.
    for (size_t from = 0; from < kSharedBlocks; from += kEventBlocks) {
      engine.clear();
      for (size_t b = from; b < from + kEventBlocks; ++b) engine.push_back(engine_hash(0, b));
      const std::optional<BlockHash> parent =
          from == 0 ? std::nullopt : std::optional(engine_hash(0, from - 1));
      index.ApplyStored(id, parent, engine,
                        std::span(shared).subspan(from * kBlockTokens, kEventBlocks * kBlockTokens),
                        Tier::kDevice);
      applied += kEventBlocks;
    }
    size_t left = blocks - kSharedBlocks;
    for (uint64_t chain = 1; left > 0; ++chain) {
      const size_t len = std::min(left, kChainBlocks);
      for (size_t from = 0; from < len; from += kEventBlocks) {
        const size_t n = std::min(kEventBlocks, len - from);
        engine.clear();
        for (size_t b = from; b < from + n; ++b) engine.push_back(engine_hash(chain, b));
        const BlockHash parent =
            from == 0 ? engine_hash(0, kSharedBlocks - 1) : engine_hash(chain, from - 1);
        pool[0] = static_cast<TokenId>(t);
        pool[1] = static_cast<TokenId>(chain);
        pool[2] = static_cast<TokenId>(from == 0);
        index.ApplyStored(id, parent, engine, std::span(pool).first(n * kBlockTokens),
                          Tier::kDevice);
        applied += n;
      }
      left -= len;
    }
  }
  return applied;
}

// Restores every view into `into` (targets added in the same order).
void Restore(const std::vector<TargetView>& views, const KvIndex& from, KvIndex& into,
             size_t reserve_rows) {
  if (reserve_rows > 0) into.Reserve(reserve_rows);
  const std::vector<TargetId> ids = from.Targets();
  for (size_t k = 0; k < ids.size(); ++k) {
    const TargetId id = into.AddTarget(from.Key(ids[k]), from.BlockSize(ids[k]));
    if (reserve_rows > 0) into.ReserveTarget(id, views[k].engine_hashes.size());
    if (into.RestoreView(id, views[k]) != RestoreStatus::kOk) std::abort();
  }
}

// The restored index answers as the filled one: counts, and each target's first
// chain (its whole prefix matched, every other target's shared prefix).
void CheckSame(const KvIndex& a, const KvIndex& b) {
  if (a.DistinctHashCount() != b.DistinctHashCount() || a.EntryCount() != b.EntryCount()) {
    std::fprintf(stderr, "restored index differs: rows %zu vs %zu, entries %zu vs %zu\n",
                 a.DistinctHashCount(), b.DistinctHashCount(), a.EntryCount(), b.EntryCount());
    std::abort();
  }
  const std::vector<TargetId> ids = a.Targets();
  std::vector<MatchCounts> out_a(ids.size()), out_b(ids.size());
  TargetView view;
  for (size_t k = 0; k < ids.size(); k += std::max<size_t>(1, ids.size() / 64)) {
    a.ExportView(ids[k], view);
    // The deepest chain in the view: walk the parents of its last block.
    std::vector<BlockHash> chain;
    for (uint32_t i = static_cast<uint32_t>(view.blocks.size() - 1); i != kViewParentRoot;
         i = view.blocks[i].parent) {
      if (i == kViewParentUnknown) std::abort();
      chain.insert(chain.begin(), view.blocks[i].router_hash);
    }
    a.FindMatches(chain, ids, out_a);
    b.FindMatches(chain, ids, out_b);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (out_a[i].total() != out_b[i].total()) std::abort();
    }
    if (out_a[k].total() != chain.size()) std::abort();
  }
}

void BM_SnapshotRestore(benchmark::State& state) {
  const size_t targets = static_cast<size_t>(state.range(0));
  const size_t blocks = static_cast<size_t>(state.range(1));
  for (auto _ : state) {
    KvIndex filled;
    Timer fill;
    const size_t total = Fill(filled, targets, blocks);
    const double fill_cpu = fill.cpu_s(), fill_wall = fill.wall_s();

    std::vector<TargetView> views(targets);
    Timer exp;
    const std::vector<TargetId> ids = filled.Targets();
    for (size_t k = 0; k < ids.size(); ++k) filled.ExportView(ids[k], views[k]);
    const double export_cpu = exp.cpu_s(), export_wall = exp.wall_s();

    double plain_cpu = 0, plain_wall = 0;
    {
      KvIndex plain;
      Timer restore;
      Restore(views, filled, plain, 0);
      plain_cpu = restore.cpu_s();
      plain_wall = restore.wall_s();
      CheckSame(filled, plain);
    }
    KvIndex restored;
    Timer restore;
    Restore(views, filled, restored, filled.DistinctHashCount());
    const double restore_cpu = restore.cpu_s(), restore_wall = restore.wall_s();
    CheckSame(filled, restored);

    const double n = static_cast<double>(total);
    state.counters["blocks"] = n;
    state.counters["fill_blocks_per_cpu_s"] = n / fill_cpu;
    state.counters["fill_blocks_per_wall_s"] = n / fill_wall;
    state.counters["export_blocks_per_cpu_s"] = n / export_cpu;
    state.counters["export_blocks_per_wall_s"] = n / export_wall;
    state.counters["restore_unreserved_blocks_per_cpu_s"] = n / plain_cpu;
    state.counters["restore_unreserved_blocks_per_wall_s"] = n / plain_wall;
    state.counters["restore_blocks_per_cpu_s"] = n / restore_cpu;
    state.counters["restore_blocks_per_wall_s"] = n / restore_wall;
    state.counters["restore_vs_fill_cpu"] = fill_cpu / restore_cpu;
  }
}
BENCHMARK(BM_SnapshotRestore)
    ->Args({64, 500})
    ->Args({4096, 2441})
    ->ArgNames({"targets", "blocks"})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

// Restore alone (for profiles): the same fleet's views made directly (random router
// and engine hashes, parents as the fill makes them), restored into a fresh index
// per iteration.
void BM_RestoreOnly(benchmark::State& state) {
  const size_t targets = static_cast<size_t>(state.range(0));
  const size_t blocks = static_cast<size_t>(state.range(1));
  std::vector<TargetView> views(targets);
  std::vector<BlockHash> shared(kSharedBlocks);
  for (size_t b = 0; b < kSharedBlocks; ++b) shared[b] = base::SplitMix64(b);
  uint64_t next = 1000;
  for (TargetView& v : views) {
    for (size_t b = 0; b < blocks; ++b) {
      ViewBlock block;
      const size_t in_chain = b < kSharedBlocks ? b : (b - kSharedBlocks) % kChainBlocks;
      block.router_hash = b < kSharedBlocks ? shared[b] : base::SplitMix64(++next);
      block.parent = b == 0                              ? kViewParentRoot
                     : b >= kSharedBlocks && in_chain == 0 ? kSharedBlocks - 1
                                                           : static_cast<uint32_t>(b - 1);
      block.tiers = 1;
      block.engine_begin = static_cast<uint32_t>(v.engine_hashes.size());
      block.engine_count = 1;
      v.engine_hashes.push_back(base::SplitMix64(++next));
      v.blocks.push_back(block);
    }
  }
  const size_t rows = kSharedBlocks + targets * (blocks - kSharedBlocks);
  double cpu = 0;
  for (auto _ : state) {
    KvIndex index;
    Timer timer;
    index.Reserve(rows);
    for (size_t k = 0; k < targets; ++k) {
      const TargetId id = index.AddTarget({Worker(k), 0}, kBlockTokens);
      index.ReserveTarget(id, views[k].engine_hashes.size());
      if (index.RestoreView(id, views[k]) != RestoreStatus::kOk) std::abort();
    }
    cpu += timer.cpu_s();
    if (index.DistinctHashCount() != rows) std::abort();
  }
  state.counters["restore_blocks_per_cpu_s"] =
      static_cast<double>(targets * blocks * state.iterations()) / cpu;
}
BENCHMARK(BM_RestoreOnly)
    ->Args({4096, 2441})
    ->ArgNames({"targets", "blocks"})
    ->Iterations(3)
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace infera::core

BENCHMARK_MAIN();
