#include "sim/offline_simulator.h"

#include <gtest/gtest.h>

namespace infera::sim {
namespace {

OfflineConfig Config(core::Policy policy, size_t engines, size_t blocks) {
  OfflineConfig c;
  c.engines = engines;
  c.engine.num_gpu_blocks = blocks;
  c.policy.policy = policy;
  return c;
}

double HitRate(const OfflineResult& r) {
  uint64_t prompt = 0, cached = 0;
  for (const RequestOutcome& o : r.requests) {
    prompt += o.prompt_tokens;
    cached += o.cached_tokens;
  }
  return static_cast<double>(cached) / prompt;
}

Workload Shared() {
  SharedPrefixOptions o;
  o.groups = 7;  // coprime with the engine count: round-robin scatters each group
  o.prompts_per_group = 12;
  o.system_tokens = 1024;
  o.question_tokens = 64;
  o.output_tokens = 8;
  o.request_rate = 20;
  return SharedPrefixWorkload(o);
}

TEST(OfflineSimulatorTest, EveryRequestCompletesWithCoherentTimes) {
  Workload w = Shared();
  OfflineResult r = RunOffline(w, Config(core::Policy::kRoundRobin, 4, 4096));
  ASSERT_EQ(r.requests.size(), w.requests.size());
  for (const RequestOutcome& o : r.requests) {
    EXPECT_FALSE(o.rejected);
    EXPECT_GT(o.first_token_ns, o.arrival_ns);
    EXPECT_GE(o.finish_ns, o.first_token_ns);
    EXPECT_EQ(o.output_tokens, 8u);
  }
  EXPECT_FALSE(r.sample_times_ns.empty());
  EXPECT_EQ(r.load_samples[0].size(), 4u);
}

TEST(OfflineSimulatorTest, KvAwareBeatsRoundRobinOnSharedPrefixes) {
  Workload w = Shared();
  const double kv = HitRate(RunOffline(w, Config(core::Policy::kKvAware, 4, 4096)));
  const double rr = HitRate(RunOffline(w, Config(core::Policy::kRoundRobin, 4, 4096)));
  // kv-aware pays each group's system prompt about once; round-robin once per engine.
  EXPECT_GT(kv, rr + 0.1) << "kv " << kv << " rr " << rr;
}

TEST(OfflineSimulatorTest, RouterViewMatchesEngineCachesAfterEvictions) {
  Workload w = Shared();
  // 160 blocks per engine: a 68-block prompt or two, so blocks are evicted constantly.
  for (int64_t delay_ns : {int64_t{0}, int64_t{5'000'000}}) {
    OfflineConfig c = Config(core::Policy::kKvAware, 3, 160);
    c.event_delay_ns = delay_ns;
    OfflineResult r = RunOffline(w, c);
    EXPECT_GT(r.kv_events_applied, 0u);
    EXPECT_EQ(r.kv_event_unknown_parent, 0u);
    uint64_t admitted = 0;
    for (const EngineStats& s : r.engine_stats) admitted += s.prompt_tokens;
    EXPECT_GT(admitted, 0u);
    EXPECT_EQ(r.router_block_counts, r.engine_block_counts) << "delay " << delay_ns;
  }
}

// r0 decodes for seconds; r1 (short, 10 ms later) takes the other engine; r2
// arrives at 1 s, when least-load's scan starts at r0's engine again.
Workload DecodingThenShort() {
  Workload w;
  w.requests.resize(3);
  w.requests[0].segments = {{1, 64}};
  w.requests[0].prompt_tokens = 64;
  w.requests[0].output_tokens = 500;
  w.requests[1].arrival_ns = 10'000'000;
  w.requests[1].segments = {{3, 64}};
  w.requests[1].prompt_tokens = 64;
  w.requests[1].output_tokens = 1;
  w.requests[2].arrival_ns = 1'000'000'000;
  w.requests[2].segments = {{2, 64}};
  w.requests[2].prompt_tokens = 64;
  w.requests[2].output_tokens = 4;
  return w;
}

TEST(OfflineSimulatorTest, ReleaseLoadAtFirstTokenFreesADecodingEngine) {
  // Spec load term (active blocks until the last token). Least-load sends r2 away
  // from r0's engine
  // while r0's blocks count as load (the router's rule, released at the last token),
  // and onto it (the tie goes to the scan start) when they stop counting at r0's
  // first token.
  Workload w = DecodingThenShort();
  OfflineConfig c = Config(core::Policy::kLeastLoad, 2, 4096);
  c.policy.load_term = core::LoadTerm::kSpec;
  OfflineResult at_finish = RunOffline(w, c);
  ASSERT_GT(at_finish.requests[0].finish_ns, w.requests[2].arrival_ns);
  EXPECT_EQ(at_finish.requests[0].engine, 0u);
  EXPECT_EQ(at_finish.requests[1].engine, 1u);
  EXPECT_EQ(at_finish.requests[2].engine, 1u);
  c.release_load_at_first_token = true;
  OfflineResult at_first = RunOffline(w, c);
  EXPECT_EQ(at_first.requests[0].engine, 0u);
  EXPECT_EQ(at_first.requests[2].engine, 0u);
  EXPECT_EQ(at_first.requests[2].output_tokens, 4u);
}

TEST(OfflineSimulatorTest, WorkLoadTermDoesNotCountDecode) {
  // Default load term: r0 is past its first token (no pending prefill) and far below
  // the KV threshold, so its decode does not push r2 away from engine 0.
  Workload w = DecodingThenShort();
  OfflineResult r = RunOffline(w, Config(core::Policy::kLeastLoad, 2, 4096));
  ASSERT_GT(r.requests[0].finish_ns, w.requests[2].arrival_ns);
  EXPECT_EQ(r.requests[0].engine, 0u);
  EXPECT_EQ(r.requests[1].engine, 1u);
  EXPECT_EQ(r.requests[2].engine, 0u);
  ASSERT_FALSE(r.kv_samples.empty());
  EXPECT_EQ(r.kv_samples[0].size(), 2u);
}

TEST(OfflineSimulatorTest, DeterministicForAGivenSeed) {
  Workload w = Shared();
  OfflineConfig c = Config(core::Policy::kRandom, 4, 4096);
  c.policy.random_seed = 7;
  OfflineResult a = RunOffline(w, c), b = RunOffline(w, c);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].engine, b.requests[i].engine);
    EXPECT_EQ(a.requests[i].first_token_ns, b.requests[i].first_token_ns);
  }
}

TEST(OfflineSimulatorTest, OversizedPromptsAreRejectedNotHung) {
  Workload w = Shared();
  OfflineResult r = RunOffline(w, Config(core::Policy::kLeastLoad, 2, 32));  // 512 tokens
  for (const RequestOutcome& o : r.requests) EXPECT_TRUE(o.rejected);
}

}  // namespace
}  // namespace infera::sim
