// KV-event ingestion throughput: decode only vs decode + apply into core::KvIndex (and
// + the ingestor's per-batch writer lock), from a recorded stream of realistic batches
// (FakeEngineCache: shared-prefix requests, parent chains, LRU evictions; 16-token
// blocks). Reported rates: events/s and blocks/s (engine blocks stored + removed).
// BM_DecodeApplySliced and BM_BigBatch compare applying whole batches under one lock
// hold with applying them in slices (doc/kv-events.md "Concurrency"), and report the
// longest hold.
//
//   build/bench/events/events_bench --benchmark_min_time=0.5
//   build/bench/events/events_bench --benchmark_filter='Sliced|BigBatch'  # doc/perf-events.md
//   build/bench/events/events_bench --benchmark_filter=Fleet  # issue 27's shape
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/kv_index.h"
#include "engine_events/event_encoder.h"
#include "engine_events/fake_engine_cache.h"
#include "events/event_applier.h"
#include "events/event_decoder.h"
#include "events/writer_priority_mutex.h"

namespace infera::events {
namespace {

struct Stream {
  std::vector<std::string> payloads;
  uint64_t events = 0;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
};

const Stream& Recorded(WireShape shape) {
  static Stream streams[3];
  Stream& s = streams[static_cast<int>(shape)];
  if (!s.payloads.empty()) return s;
  FakeEngineCache engine({.seed = 42,
                          .block_size = 16,
                          .capacity_blocks = 20'000,
                          .documents = 64,
                          .document_blocks = 128,
                          .max_tail_blocks = 16,
                          .requests_per_batch = 4});
  for (int i = 0; i < 4000; ++i) {
    EventBatch batch = engine.NextBatch();
    for (const KvEvent& e : batch.events) {
      ++s.events;
      if (const auto* st = std::get_if<Stored>(&e)) s.blocks += st->engine_hashes.size();
      if (const auto* rm = std::get_if<Removed>(&e)) s.blocks += rm->engine_hashes.size();
    }
    s.payloads.push_back(EncodeEventBatch(batch, shape));
    s.bytes += s.payloads.back().size();
  }
  return s;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void SetRates(benchmark::State& state, const Stream& s) {
  const double n = static_cast<double>(state.iterations());
  state.counters["events/s"] = benchmark::Counter(n * s.events, benchmark::Counter::kIsRate);
  state.counters["blocks/s"] = benchmark::Counter(n * s.blocks, benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(n * s.bytes));
}

void BM_DecodeOnly(benchmark::State& state) {
  const Stream& s = Recorded(static_cast<WireShape>(state.range(0)));
  DecodedBatch batch;
  for (auto _ : state) {
    for (const std::string& p : s.payloads) {
      if (!DecodeEventBatch(Bytes(p), batch).ok()) state.SkipWithError("decode failed");
      benchmark::DoNotOptimize(batch.events.data());
    }
  }
  SetRates(state, s);
}

// Applies one decoded batch as StreamApplier does: the writer lock held per slice of
// `slice_units` units, table growth prepared under the shared lock before each (0:
// the whole batch under one hold, growth inside it, as before session 9).
// Returns the longest hold, wall and thread CPU time (ns): on a loaded machine the
// wall time of a hold includes the time the writer was descheduled holding it.
struct Holds {
  int64_t wall_ns = 0;
  int64_t cpu_ns = 0;
};
int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
Holds ApplySliced(WriterPriorityMutex& mu, core::KvIndex& index, core::TargetId id,
                  const DecodedBatch& batch, TargetApplyState& apply_state, size_t slice_units) {
  BatchCursor cursor;
  ApplyStats stats;
  Holds longest;
  for (bool done = false; !done;) {
    core::GrowthPlan growth;
    if (slice_units != 0) {
      std::shared_lock<WriterPriorityMutex> shared(mu);
      growth = index.PrepareGrowth(id, slice_units);
    }
    std::unique_lock<WriterPriorityMutex> lock(mu);
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t c0 = ThreadCpuNs();
    if (!growth.empty()) index.InstallGrowth(growth);
    done = ApplyEventBatchSlice(index, id, batch, apply_state, cursor,
                                slice_units == 0 ? SIZE_MAX : slice_units, stats);
    longest.cpu_ns = std::max(longest.cpu_ns, ThreadCpuNs() - c0);
    longest.wall_ns = std::max<int64_t>(
        longest.wall_ns,
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  return longest;
}
void SetHolds(benchmark::State& state, const Holds& h) {
  state.counters["longest_hold_ms"] = static_cast<double>(h.wall_ns) / 1e6;
  state.counters["longest_hold_cpu_ms"] = static_cast<double>(h.cpu_ns) / 1e6;
}
Holds Max(const Holds& a, const Holds& b) {
  return {std::max(a.wall_ns, b.wall_ns), std::max(a.cpu_ns, b.cpu_ns)};
}

// Decodes and applies the recorded stream (`shape`) into a fresh index per iteration;
// apply(index, id, batch, apply_state) applies one decoded batch.
template <class Apply>
void DecodeApply(benchmark::State& state, WireShape shape, Apply&& apply) {
  const Stream& s = Recorded(shape);
  DecodedBatch batch;
  for (auto _ : state) {
    state.PauseTiming();
    auto index = std::make_unique<core::KvIndex>();
    const core::TargetId id = index->AddTarget({"bench:1", 0}, 16);
    TargetApplyState apply_state;
    state.ResumeTiming();
    for (const std::string& p : s.payloads) {
      if (!DecodeEventBatch(Bytes(p), batch).ok()) state.SkipWithError("decode failed");
      apply(*index, id, batch, apply_state);
    }
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  SetRates(state, s);
}

void BM_DecodeApply(benchmark::State& state) {
  DecodeApply(
      state, static_cast<WireShape>(state.range(0)),
      [](core::KvIndex& index, core::TargetId id, const DecodedBatch& batch,
         TargetApplyState& apply_state) { ApplyEventBatch(index, id, batch, apply_state); });
}
void BM_DecodeApplyLocked(benchmark::State& state) {
  WriterPriorityMutex mu;
  DecodeApply(state, static_cast<WireShape>(state.range(0)),
              [&](core::KvIndex& index, core::TargetId id, const DecodedBatch& batch,
                  TargetApplyState& apply_state) {
                std::unique_lock<WriterPriorityMutex> lock(mu);
                ApplyEventBatch(index, id, batch, apply_state);
              });
}

// The realistic stream again, each batch applied in slices (arg 1: slice units; 0 =
// one hold per batch): what slicing costs when batches are small.
void BM_DecodeApplySliced(benchmark::State& state) {
  WriterPriorityMutex mu;
  Holds longest;
  DecodeApply(state, WireShape::kVllm,
              [&](core::KvIndex& index, core::TargetId id, const DecodedBatch& batch,
                  TargetApplyState& apply_state) {
                longest = Max(longest, ApplySliced(mu, index, id, batch, apply_state,
                                                   static_cast<size_t>(state.range(0))));
              });
  SetHolds(state, longest);
}

// Issue 22's hostile batches, decoded once: arg 0 = 0, one BlockStored of 1.1M blocks;
// 1, 1,100 BlockStored events of 1,000 root blocks. Applied into a view bounded at
// the router's default 1,048,576 blocks (so the bound evicts), whole (arg 1 = 0) or
// in slices of arg 1 units. Rates: blocks/s; longest_hold_ms: the longest the
// writer held the lock (what a reader may wait).
const DecodedBatch& BigBatch(int kind) {
  static DecodedBatch batches[2];
  DecodedBatch& b = batches[kind];
  if (!b.events.empty()) return b;
  EventBatch batch;
  const size_t n = 1'100'000;
  if (kind == 0) {
    Stored st;
    st.engine_hashes.resize(n);
    for (size_t i = 0; i < n; ++i) st.engine_hashes[i] = i + 1;
    st.token_ids.assign(n * 16, 7);
    st.block_size = 16;
    batch.events.push_back(std::move(st));
  } else {
    for (size_t e = 0; e < 1'100; ++e) {
      Stored st;
      st.engine_hashes.resize(1'000);
      for (size_t i = 0; i < 1'000; ++i) st.engine_hashes[i] = 10'000'000 + e * 1'000 + i;
      st.token_ids.assign(1'000 * 16, 7);
      st.token_ids[0] = static_cast<core::TokenId>(e + 1);  // 1,100 distinct chains
      st.block_size = 16;
      batch.events.push_back(std::move(st));
    }
  }
  const std::string payload = EncodeEventBatch(batch, WireShape::kVllm);
  if (!DecodeEventBatch(Bytes(payload), b).ok()) std::abort();
  return b;
}

void BM_BigBatch(benchmark::State& state) {
  // Arg 0 = 2: both, one after the other (the integration test's sequence).
  const int kind = static_cast<int>(state.range(0));
  const DecodedBatch& batch = BigBatch(kind == 2 ? 1 : kind);
  WriterPriorityMutex mu;
  Holds longest;
  for (auto _ : state) {
    state.PauseTiming();
    auto index = std::make_unique<core::KvIndex>();
    const core::TargetId id = index->AddTarget({"bench:1", 0}, 16);
    index->SetMaxBlocks(id, 1'048'576);
    TargetApplyState apply_state;
    state.ResumeTiming();
    if (kind == 2) {
      longest = Max(longest, ApplySliced(mu, *index, id, BigBatch(0), apply_state,
                                         static_cast<size_t>(state.range(1))));
    }
    longest = Max(longest, ApplySliced(mu, *index, id, batch, apply_state,
                                       static_cast<size_t>(state.range(1))));
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  state.counters["blocks/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * 1.1e6,
                                                  benchmark::Counter::kIsRate);
  SetHolds(state, longest);
}

// Issue 27's shape (bench/scale/scale_fleet.cc's batches, no sockets): `targets`
// views of `view_blocks` blocks each, every batch 32 stored blocks in 4 BlockStored
// events (60 % continue one of the 8 most recently extended conversations) plus the
// BlockRemoved events that keep the view at view_blocks (tail first from the least
// recently extended conversation), targets taken round robin, vLLM's map wire.
class FleetStream {
 public:
  FleetStream(size_t targets, size_t view_blocks) : targets_(targets), view_blocks_(view_blocks) {
    for (uint32_t& tok : pool_) tok = static_cast<uint32_t>(rng_() % 32000);
    for (size_t t = 0; t < targets; ++t) targets_[t].next_hash = ((t + 1) << 40) + 1;
  }
  size_t targets() const { return targets_.size(); }
  // BlockRemoved hashes root side first (scale_fleet's order: a removed parent
  // precedes its removed child, which opens the view until a recheck) or tail first
  // (what vLLM's free queue evicts first).
  void SetTailFirst(bool tail_first) { tail_first_ = tail_first; }
  bool Full(size_t t) const { return targets_[t].held >= view_blocks_; }

  // The next batch of target t, encoded; adds its blocks stored + removed to `blocks`.
  std::string Next(size_t t, uint64_t& blocks) {
    Target& tg = targets_[t];
    EventBatch batch;
    constexpr size_t kStores = 32, kPerEvent = 8;
    for (size_t left = kStores; left > 0; left -= kPerEvent) {
      Stored s;
      s.block_size = 16;
      s.medium = "GPU";
      std::vector<uint64_t>* conv;
      if (!tg.convs.empty() && rng_() % 10 < 6) {
        const size_t back = std::min<size_t>(tg.convs.size(), 8);
        const size_t i = tg.convs.size() - 1 - rng_() % back;
        std::vector<uint64_t> c = std::move(tg.convs[i]);
        tg.convs.erase(tg.convs.begin() + static_cast<ptrdiff_t>(i));
        tg.convs.push_back(std::move(c));
        conv = &tg.convs.back();
        s.parent = conv->back();
      } else {
        conv = &tg.convs.emplace_back();
      }
      const size_t off = rng_() % (pool_.size() - kPerEvent * 16);
      s.token_ids.assign(pool_.begin() + static_cast<ptrdiff_t>(off),
                         pool_.begin() + static_cast<ptrdiff_t>(off + kPerEvent * 16));
      if (!s.parent) s.token_ids[0] = static_cast<uint32_t>(tg.next_hash & 0x3fffffff);
      for (size_t i = 0; i < kPerEvent; ++i) {
        s.engine_hashes.push_back(tg.next_hash);
        conv->push_back(tg.next_hash++);
      }
      tg.held += kPerEvent;
      blocks += kPerEvent;
      batch.events.emplace_back(std::move(s));
    }
    while (tg.held > view_blocks_) {
      std::vector<uint64_t>& oldest = tg.convs.front();
      const size_t n = std::min(oldest.size(), tg.held - view_blocks_);
      Removed r;
      r.medium = "GPU";
      r.engine_hashes.assign(oldest.end() - static_cast<ptrdiff_t>(n), oldest.end());
      if (tail_first_) std::reverse(r.engine_hashes.begin(), r.engine_hashes.end());
      oldest.resize(oldest.size() - n);
      if (oldest.empty()) tg.convs.pop_front();
      tg.held -= n;
      blocks += n;
      batch.events.emplace_back(std::move(r));
    }
    return EncodeEventBatch(batch, WireShape::kVllm);
  }

 private:
  struct Target {
    uint64_t next_hash = 0;
    std::deque<std::vector<uint64_t>> convs;
    size_t held = 0;
  };
  std::vector<Target> targets_;
  size_t view_blocks_;
  bool tail_first_ = false;
  std::mt19937_64 rng_{1};
  std::array<uint32_t, 1 << 16> pool_{};
};

// A fleet index whose every view is full (filled once, decode + apply, untimed),
// shared by the benchmarks below: 4,096 targets x 2,048 blocks.
struct FilledFleet {
  FleetStream stream{4096, 2048};
  core::KvIndex index;
  std::vector<core::TargetId> ids;
  std::vector<TargetApplyState> apply_states;
};
FilledFleet& Filled() {
  static FilledFleet* f = [] {
    auto* f = new FilledFleet;
    const size_t targets = f->stream.targets();
    f->apply_states.resize(targets);
    for (size_t t = 0; t < targets; ++t) {
      f->ids.push_back(f->index.AddTarget({"bench:" + std::to_string(t), 0}, 16));
    }
    DecodedBatch batch;
    uint64_t ignored = 0;
    for (bool filling = true; filling;) {
      filling = false;
      for (size_t t = 0; t < targets; ++t) {
        if (f->stream.Full(t)) continue;
        filling = true;
        const std::string p = f->stream.Next(t, ignored);
        if (!DecodeEventBatch(Bytes(p), batch).ok()) std::abort();
        ApplyEventBatch(f->index, f->ids[t], batch, f->apply_states[t]);
      }
    }
    return f;
  }();
  return *f;
}

// Each iteration encodes one churn batch per target (untimed) and decodes + applies
// them all; the iteration's time is the thread's CPU time of that (manual time), so
// blocks/s is per CPU second. Row-table rebuilds (deleted slots used the room up)
// come every few million stores: run >= 3 s (--benchmark_min_time=3);
// worst_round_ms is the longest iteration (one batch per target), rebuild included.
// Arg: 0 = removals in scale_fleet's order, 1 = tail first.
void BM_FleetDecodeApply(benchmark::State& state) {
  FilledFleet& f = Filled();
  f.stream.SetTailFirst(state.range(0) == 1);
  const size_t targets = f.stream.targets();
  int64_t worst_ns = 0;
  DecodedBatch batch;
  std::vector<std::string> round(targets);
  uint64_t blocks = 0, events = 0;
  for (auto _ : state) {
    for (size_t t = 0; t < targets; ++t) round[t] = f.stream.Next(t, blocks);
    const int64_t c0 = ThreadCpuNs();
    for (size_t t = 0; t < targets; ++t) {
      if (!DecodeEventBatch(Bytes(round[t]), batch).ok()) state.SkipWithError("decode failed");
      events += ApplyEventBatch(f.index, f.ids[t], batch, f.apply_states[t]).events;
    }
    const int64_t ns = ThreadCpuNs() - c0;
    worst_ns = std::max(worst_ns, ns);
    state.SetIterationTime(static_cast<double>(ns) * 1e-9);
  }
  state.counters["worst_round_ms"] = static_cast<double>(worst_ns) / 1e6;
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
  state.counters["events/s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  size_t in_view = 0;
  for (core::TargetId id : f.ids) in_view += f.index.BlockCount(id);
  state.counters["view_blocks"] = static_cast<double>(in_view);
}

// What one row-table growth of that index costs (the router prepares it under the
// shared lock: KvIndex::PrepareGrowth, the rows rebuilt and every engine map
// translated); built and dropped each iteration, never installed. CPU time.
void BM_FleetGrowthPlan(benchmark::State& state) {
  FilledFleet& f = Filled();
  size_t in_view = 0;
  for (core::TargetId id : f.ids) in_view += f.index.BlockCount(id);
  for (auto _ : state) {
    const int64_t c0 = ThreadCpuNs();
    core::GrowthPlan plan = f.index.PrepareGrowth(f.ids[0], in_view);
    benchmark::DoNotOptimize(plan);
    state.SetIterationTime(static_cast<double>(ThreadCpuNs() - c0) * 1e-9);
    if (plan.empty()) state.SkipWithError("no growth prepared");
  }
  state.counters["rows"] = static_cast<double>(in_view);
}

// Arg: 0 = vLLM (map batch, map events), 2 = SGLang (array batch, array events).
BENCHMARK(BM_DecodeOnly)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeApply)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeApplyLocked)->Arg(0)->Unit(benchmark::kMillisecond);
// Slicing's cost, side by side: arg = slice units (0: one hold per batch).
BENCHMARK(BM_DecodeApplySliced)->Arg(0)->Arg(kDefaultSliceUnits)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BigBatch)
    ->Args({0, 0})
    ->Args({0, kDefaultSliceUnits})
    ->Args({1, 0})
    ->Args({1, kDefaultSliceUnits})
    ->Args({2, kDefaultSliceUnits})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_FleetDecodeApply)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FleetGrowthPlan)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace infera::events

BENCHMARK_MAIN();
