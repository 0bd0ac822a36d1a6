// KV-event ingestion throughput: decode only vs decode + apply into core::KvIndex (and
// + the ingestor's per-batch writer lock), from a recorded stream of realistic batches
// (FakeEngineCache: shared-prefix requests, parent chains, LRU evictions; 16-token
// blocks). Reported rates: events/s and blocks/s (engine blocks stored + removed).
//
//   build/bench/events/events_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/kv_index.h"
#include "events/event_applier.h"
#include "events/event_decoder.h"
#include "events/event_encoder.h"
#include "events/fake_engine_cache.h"
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

template <bool kLocked>
void DecodeApply(benchmark::State& state) {
  const Stream& s = Recorded(static_cast<WireShape>(state.range(0)));
  DecodedBatch batch;
  WriterPriorityMutex mu;
  for (auto _ : state) {
    state.PauseTiming();
    auto index = std::make_unique<core::KvIndex>();
    const core::TargetId id = index->AddTarget({"bench:1", 0}, 16);
    TargetApplyState apply_state;
    state.ResumeTiming();
    for (const std::string& p : s.payloads) {
      if (!DecodeEventBatch(Bytes(p), batch).ok()) state.SkipWithError("decode failed");
      if constexpr (kLocked) {
        std::unique_lock<WriterPriorityMutex> lock(mu);
        ApplyEventBatch(*index, id, batch, apply_state);
      } else {
        ApplyEventBatch(*index, id, batch, apply_state);
      }
    }
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  SetRates(state, s);
}

void BM_DecodeApply(benchmark::State& state) { DecodeApply<false>(state); }
void BM_DecodeApplyLocked(benchmark::State& state) { DecodeApply<true>(state); }

// Arg: 0 = vLLM (map batch, map events), 2 = SGLang (array batch, array events).
BENCHMARK(BM_DecodeOnly)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeApply)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeApplyLocked)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace infera::events

BENCHMARK_MAIN();
