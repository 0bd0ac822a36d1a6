#include "sim/offline_simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

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

// r0 (8192 tokens) and r1 (1024) start on the two idle engines; r2 arrives 1 ms later,
// while both compute: r1's engine finishes first.
Workload LongThenShortThenOneMore() {
  Workload w;
  w.requests.resize(3);
  const uint32_t lengths[] = {8192, 1024, 64};
  for (size_t k = 0; k < 3; ++k) {
    w.requests[k].segments = {{k + 1, lengths[k]}};
    w.requests[k].prompt_tokens = lengths[k];
    w.requests[k].output_tokens = 2;
  }
  w.requests[2].arrival_ns = 1'000'000;
  return w;
}

TEST(OfflineSimulatorTest, TtftOracleSendsARequestWhereItsFirstTokenComesSoonest) {
  const Workload w = LongThenShortThenOneMore();
  OfflineConfig c = Config(core::Policy::kRoundRobin, 2, 4096);
  const OfflineResult rr = RunOffline(w, c);
  EXPECT_EQ(rr.requests[2].engine, rr.requests[0].engine);  // the rotation's turn
  c.ttft_oracle = true;
  const OfflineResult oracle = RunOffline(w, c);
  EXPECT_NE(oracle.requests[0].engine, oracle.requests[1].engine);
  EXPECT_EQ(oracle.requests[2].engine, oracle.requests[1].engine);
  EXPECT_LT(oracle.requests[2].first_token_ns, rr.requests[2].first_token_ns);
  for (const RequestOutcome& o : oracle.requests) EXPECT_EQ(o.output_tokens, 2u);
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

namespace infera::sim {
namespace {

OfflineConfig PdConfig(core::Policy policy, size_t prefill, size_t decode) {
  OfflineConfig c = Config(policy, 0, 4096);
  c.prefill_engines = prefill;
  c.decode_engines = decode;
  return c;
}

TEST(OfflineSimulatorTest, PdFleetRunsEveryRequestThroughBothLegs) {
  Workload w = Shared();
  OfflineConfig c = PdConfig(core::Policy::kKvAware, 2, 3);
  OfflineResult r = RunOffline(w, c);
  ASSERT_EQ(r.requests.size(), w.requests.size());
  EXPECT_EQ(r.load_samples[0].size(), 5u);
  for (const RequestOutcome& o : r.requests) {
    EXPECT_FALSE(o.rejected);
    EXPECT_FALSE(o.decode_only);
    ASSERT_GE(o.prefill_engine, 0);
    EXPECT_LT(o.prefill_engine, 2);
    EXPECT_GE(o.engine, 2u);  // the decode engines follow the prefill engines
    EXPECT_LT(o.engine, 5u);
    EXPECT_GT(o.prefill_done_ns, o.arrival_ns);
    EXPECT_GT(o.transfer_ns, 0);
    EXPECT_GE(o.first_token_ns, o.prefill_done_ns + o.transfer_ns);
    EXPECT_GE(o.finish_ns, o.first_token_ns);
    EXPECT_EQ(o.output_tokens, 8u);
  }
  // Both pools cache what they hold and the router's index mirrors every engine. At
  // this light load the work term leaves every prefill with the engine that holds the
  // groups' shared prefix, so the prefill pool is checked as a whole.
  EXPECT_GT(r.engine_block_counts[0] + r.engine_block_counts[1], 0u);
  for (size_t e = 0; e < 5; ++e) {
    if (e >= 2) {
      EXPECT_GT(r.engine_block_counts[e], 0u) << e;
    }
    EXPECT_EQ(r.router_block_counts[e], r.engine_block_counts[e]) << e;
  }
}

TEST(OfflineSimulatorTest, PdPrefillFollowsCacheWithPerRoleWeights) {
  Workload w = Shared();
  OfflineConfig per_role = PdConfig(core::Policy::kKvAware, 3, 3);
  per_role.policy.prefill_overlap_weight = 20;
  per_role.policy.decode_overlap_weight = 2;
  const double kv = HitRate(RunOffline(w, per_role));
  const double rr = HitRate(RunOffline(w, PdConfig(core::Policy::kRoundRobin, 3, 3)));
  EXPECT_GT(kv, rr + 0.1) << "kv " << kv << " rr " << rr;
}

TEST(OfflineSimulatorTest, PdConditionalDisaggregationKeepsShortUncachedWorkOnDecode) {
  Workload w = Shared();  // 1024-token system prompts + 64-token questions
  OfflineConfig c = PdConfig(core::Policy::kKvAware, 2, 2);
  c.policy.prefill_overlap_weight = 20;
  c.pd.min_uncached_tokens = 200;
  OfflineResult r = RunOffline(w, c);
  size_t decode_only = 0;
  for (const RequestOutcome& o : r.requests) {
    EXPECT_FALSE(o.rejected);
    if (o.decode_only) {
      ++decode_only;
      EXPECT_EQ(o.prefill_engine, -1);
      EXPECT_EQ(o.transfer_ns, 0);
    }
  }
  // The first prompt of each group is uncached on every prefill engine: disaggregated;
  // once the group's prefix is cached, only ~64 tokens remain: decode-only.
  EXPECT_GT(decode_only, 0u);
  EXPECT_LT(decode_only, w.requests.size());
  EXPECT_FALSE(r.requests[0].decode_only);
}

TEST(OfflineSimulatorTest, PdTransferTimeFollowsTheBandwidth) {
  Workload w = Shared();
  OfflineConfig fast = PdConfig(core::Policy::kRoundRobin, 1, 1);
  OfflineConfig slow = fast;
  slow.kv_transfer.gbps = fast.kv_transfer.gbps / 10;
  OfflineResult a = RunOffline(w, fast), b = RunOffline(w, slow);
  // The first request: nothing is cached on the decode engine, the whole prompt moves.
  const uint64_t tokens = w.requests[0].prompt_tokens;
  EXPECT_EQ(a.requests[0].transfer_ns, fast.kv_transfer.TransferNs(tokens));
  EXPECT_EQ(b.requests[0].transfer_ns, slow.kv_transfer.TransferNs(tokens));
  EXPECT_NEAR(static_cast<double>(b.requests[0].transfer_ns) / a.requests[0].transfer_ns, 10, 0.01);
}

// 64 requests at t = 0 over 4 system prompts of 1024 tokens (questions 256, outputs 16).
Workload Burst() {
  SyntheticOptions o;
  o.requests = 64;
  o.prefixes = 4;
  o.system_tokens = 1024;
  o.question_tokens = 256;
  o.output_tokens = 16;
  o.request_rate = 0;  // all at t = 0
  return SyntheticWorkload(o);
}

// Runs `c` with the admission queue on at a 128-block threshold (`c` keeps it on) and
// checks its accounting: some requests held, every one bound once, none shed.
OfflineResult RunQueued(const Workload& w, OfflineConfig& c) {
  c.admission_queue = true;
  c.queue_threshold_blocks = 128;
  OfflineResult r = RunOffline(w, c);
  EXPECT_GT(r.queue.queued, 0u);
  EXPECT_EQ(r.queue.bound_now + r.queue.queued, w.requests.size());
  EXPECT_EQ(r.queue.released, r.queue.queued);
  EXPECT_EQ(r.queue.rejected_full + r.queue.expired, 0u);
  return r;
}

// A burst of 64 requests at t = 0 on 2 engines with the admission queue: requests are
// held while both engines have prefill pending past the threshold, bound as they free,
// every one completes, and nothing is left held (no guard leaks).
TEST(OfflineSimulatorTest, AdmissionQueueHoldsABurstAndBindsEveryRequest) {
  const Workload w = Burst();
  OfflineConfig c = Config(core::Policy::kKvAware, 2, 8192);
  const OfflineResult r = RunQueued(w, c);
  size_t held = 0;
  for (const RequestOutcome& out : r.requests) {
    EXPECT_FALSE(out.shed);
    EXPECT_GE(out.finish_ns, out.first_token_ns);
    EXPECT_GE(out.first_token_ns - out.arrival_ns, out.queue_ns);
    held += out.queue_ns > 0 ? 1 : 0;
  }
  EXPECT_GT(held, 0u);
  // The same burst with a bound of 8 waiting: the rest is shed (the router's 429).
  c.queue.max_queued = 8;
  const OfflineResult bounded = RunOffline(w, c);
  EXPECT_GT(bounded.queue.rejected_full, 0u);
  size_t shed = 0;
  for (const RequestOutcome& out : bounded.requests) shed += out.shed ? 1 : 0;
  EXPECT_EQ(shed, bounded.queue.rejected_full);
}

// The same burst on a PD fleet (2 prefill + 2 decode engines): the queue watches the
// prefill pool's load, as the router's does; held requests bind as the prefill engines
// free, and every one runs both legs.
TEST(OfflineSimulatorTest, AdmissionQueueOnAPdFleetWatchesThePrefillPool) {
  const Workload w = Burst();
  OfflineConfig c = PdConfig(core::Policy::kKvAware, 2, 2);
  c.engine.num_gpu_blocks = 8192;
  const OfflineResult r = RunQueued(w, c);
  size_t held = 0;
  for (const RequestOutcome& out : r.requests) {
    EXPECT_FALSE(out.shed);
    EXPECT_GE(out.prefill_engine, 0);
    EXPECT_LT(out.prefill_engine, 2);  // engines 0 and 1 are the prefill pool
    EXPECT_GE(out.engine, 2u);
    EXPECT_GE(out.prefill_done_ns, out.arrival_ns + out.queue_ns);
    EXPECT_GE(out.finish_ns, out.first_token_ns);
    held += out.queue_ns > 0 ? 1 : 0;
  }
  EXPECT_GT(held, 0u);
  // Off: nothing is held, so the queue's stats stay zero.
  c.admission_queue = false;
  EXPECT_EQ(RunOffline(w, c).queue.queued, 0u);
}

TEST(OfflineSimulatorTest, SyntheticWorkloadIsSeededAndShaped) {
  SyntheticOptions o;
  o.requests = 400;
  o.prefixes = 8;
  o.dominant_share = 0.75;
  o.burst = 4;
  o.request_rate = 10;
  const Workload a = SyntheticWorkload(o), b = SyntheticWorkload(o);
  ASSERT_EQ(a.requests.size(), 400u);
  std::map<uint64_t, size_t> per_prompt;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].arrival_ns, b.requests[i].arrival_ns);
    // Bursts of 4 arrive together.
    if (i % 4 != 0) {
      EXPECT_EQ(a.requests[i].arrival_ns, a.requests[i - 1].arrival_ns);
    }
    ++per_prompt[a.requests[i].segments[0].seed];
    EXPECT_GE(a.requests[i].segments[1].length, o.question_tokens / 2);
    EXPECT_LE(a.requests[i].segments[1].length, o.question_tokens * 3 / 2);
  }
  // 8 system prompts; ~0.75 + 0.25 / 8 of the requests share prompt 0.
  EXPECT_EQ(per_prompt.size(), 8u);
  size_t dominant = 0;
  for (const auto& [seed, n] : per_prompt) dominant = std::max(dominant, n);
  EXPECT_GT(dominant, 280u);
  EXPECT_LT(dominant, 340u);
  // Mean rate ~10/s: 400 requests in ~40 s.
  const double span_s = a.requests.back().arrival_ns / 1e9;
  EXPECT_GT(span_s, 25);
  EXPECT_LT(span_s, 60);
  o.prefixes = 0;
  EXPECT_EQ(SyntheticWorkload(o).requests[0].segments.size(), 1u);  // question only
}

}  // namespace
}  // namespace infera::sim
